//! The subset of Go's `text/template` that Knative's config templates use.
//!
//! `container-name-template`, `domain-template` and `tag-template` are Go templates. Real
//! configurations only ever interpolate fields (`{{.Name}}.{{.Namespace}}.{{.Domain}}`) and,
//! rarely, look up a label or annotation (`{{index .Labels "app"}}`), so wisp implements
//! exactly that: literal text, `{{.Field}}`, `{{index .Field "key"}}`, comments and the
//! `{{-`/`-}}` whitespace trim markers. Anything else is rejected when the config is loaded,
//! rather than producing a surprising name at runtime.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// A parsed template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Template {
    nodes: Vec<Node>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Node {
    Text(String),
    /// `{{.Field}}`
    Field(String),
    /// `{{index .Field "key"}}`
    Index(String, String),
}

/// A value a template field resolves to.
pub enum Datum<'a> {
    Str(Cow<'a, str>),
    Map(&'a BTreeMap<String, String>),
}

impl Template {
    /// Parses `src`; errors name the offending action.
    pub fn parse(src: &str) -> Result<Template, String> {
        let mut nodes = Vec::new();
        let mut rest = src;
        let mut trim_next = false;
        while !rest.is_empty() {
            let Some(start) = rest.find("{{") else {
                push_text(&mut nodes, rest, trim_next, false);
                break;
            };
            let after_open = &rest[start + 2..];
            let trim_prev = after_open.starts_with("- ")
                || after_open.starts_with("-\t")
                || after_open.starts_with("-\n");
            push_text(&mut nodes, &rest[..start], trim_next, trim_prev);
            let Some(end) = after_open.find("}}") else {
                return Err(format!("template: unclosed action in {src:?}"));
            };
            let raw = &after_open[..end];
            let mut body = raw;
            if trim_prev {
                body = &body[1..];
            }
            trim_next = body.ends_with(" -") || body.ends_with("\t-") || body.ends_with("\n-");
            if trim_next {
                body = &body[..body.len() - 1];
            }
            if let Some(node) = parse_action(body.trim(), raw)? {
                nodes.push(node);
            }
            rest = &after_open[end + 2..];
        }
        Ok(Template { nodes })
    }

    /// Renders the template; `lookup` resolves a top-level field name, `None` meaning the
    /// data has no such field (Go's "can't evaluate field").
    pub fn render<'a>(&self, lookup: &dyn Fn(&str) -> Option<Datum<'a>>) -> Result<String, String> {
        let mut out = String::new();
        for node in &self.nodes {
            match node {
                Node::Text(t) => out.push_str(t),
                Node::Field(f) => match lookup(f).ok_or_else(|| no_field(f))? {
                    Datum::Str(s) => out.push_str(&s),
                    Datum::Map(m) => {
                        // Go prints maps as `map[k1:v1 k2:v2]` with sorted keys.
                        out.push_str("map[");
                        for (i, (k, v)) in m.iter().enumerate() {
                            if i > 0 {
                                out.push(' ');
                            }
                            let _ = write!(out, "{k}:{v}");
                        }
                        out.push(']');
                    }
                },
                Node::Index(f, key) => match lookup(f).ok_or_else(|| no_field(f))? {
                    // A missing key yields the zero value, as Go's `index` does for maps.
                    Datum::Map(m) => out.push_str(m.get(key).map_or("", String::as_str)),
                    Datum::Str(_) => {
                        return Err(format!("template: can't index item of type string (.{f})"));
                    }
                },
            }
        }
        Ok(out)
    }
}

fn no_field(f: &str) -> String {
    format!("template: can't evaluate field {f}")
}

fn push_text(nodes: &mut Vec<Node>, text: &str, trim_start: bool, trim_end: bool) {
    let mut t = text;
    if trim_start {
        t = t.trim_start();
    }
    if trim_end {
        t = t.trim_end();
    }
    if !t.is_empty() {
        nodes.push(Node::Text(t.to_string()));
    }
}

fn parse_action(body: &str, raw: &str) -> Result<Option<Node>, String> {
    if body.starts_with("/*") && body.ends_with("*/") && body.len() >= 4 {
        return Ok(None);
    }
    if let Some(field) = field_ref(body) {
        return Ok(Some(Node::Field(field.to_string())));
    }
    if let Some(args) = body.strip_prefix("index ") {
        let args = args.trim();
        if let Some((field, key)) = args.split_once(char::is_whitespace)
            && let Some(field) = field_ref(field)
            && let Some(key) = string_literal(key.trim())
        {
            return Ok(Some(Node::Index(field.to_string(), key)));
        }
    }
    Err(format!(
        "template: unsupported action \"{{{{{raw}}}}}\" (only {{{{.Field}}}} and {{{{index .Field \"key\"}}}} are supported)"
    ))
}

/// `.Ident` → `Ident`.
fn field_ref(s: &str) -> Option<&str> {
    let ident = s.strip_prefix('.')?;
    let mut chars = ident.chars();
    let first = chars.next()?;
    if (first.is_ascii_alphabetic() || first == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
    {
        Some(ident)
    } else {
        None
    }
}

/// A Go string literal: `"…"` (with simple escapes) or a raw `` `…` ``.
fn string_literal(s: &str) -> Option<String> {
    if let Some(inner) = s.strip_prefix('`').and_then(|r| r.strip_suffix('`')) {
        return (!inner.contains('`')).then(|| inner.to_string());
    }
    let inner = s.strip_prefix('"')?.strip_suffix('"')?;
    let mut out = String::new();
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next()? {
                '"' => out.push('"'),
                '\\' => out.push('\\'),
                'n' => out.push('\n'),
                't' => out.push('\t'),
                _ => return None,
            },
            '"' => return None,
            c => out.push(c),
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup_from<'a>(
        strs: &'a [(&'a str, &'a str)],
        map: &'a BTreeMap<String, String>,
    ) -> impl Fn(&str) -> Option<Datum<'a>> {
        move |f| {
            if f == "Labels" {
                return Some(Datum::Map(map));
            }
            strs.iter()
                .find(|(k, _)| *k == f)
                .map(|(_, v)| Datum::Str(Cow::Borrowed(*v)))
        }
    }

    #[test]
    fn renders() {
        let labels: BTreeMap<String, String> = [
            ("app".to_string(), "web".to_string()),
            ("b".to_string(), "c".to_string()),
        ]
        .into();
        let strs = [
            ("Name", "hello"),
            ("Namespace", "default"),
            ("Domain", "example.com"),
        ];
        let lookup = lookup_from(&strs, &labels);
        let cases = [
            ("user-container", "user-container"),
            ("{{.Name}}", "hello"),
            (
                "{{ .Name }}.{{.Namespace}}.{{.Domain}}",
                "hello.default.example.com",
            ),
            ("{{index .Labels \"app\"}}-x", "web-x"),
            ("{{index .Labels `missing`}}-x", "-x"),
            ("a  {{- .Name -}}  b", "ahellob"),
            ("{{/* comment */}}{{.Name}}", "hello"),
            ("{{.Labels}}", "map[app:web b:c]"),
            ("", ""),
        ];
        for (src, want) in cases {
            let t = Template::parse(src).unwrap_or_else(|e| panic!("{src}: {e}"));
            assert_eq!(t.render(&lookup).unwrap(), want, "{src}");
        }
    }

    #[test]
    fn errors() {
        for bad in [
            "{{.Name",
            "{{if .Name}}x{{end}}",
            "{{ Name }}",
            "{{index .Labels app}}",
            "{{.}}",
        ] {
            assert!(Template::parse(bad).is_err(), "{bad}");
        }
        let labels = BTreeMap::new();
        let strs = [("Name", "n")];
        let lookup = lookup_from(&strs, &labels);
        let t = Template::parse("{{.Foo}}").unwrap();
        assert_eq!(
            t.render(&lookup).unwrap_err(),
            "template: can't evaluate field Foo"
        );
        let t = Template::parse("{{index .Name \"x\"}}").unwrap();
        assert!(t.render(&lookup).is_err());
    }
}
