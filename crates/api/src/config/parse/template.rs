//! The subset of Go's `text/template` that Knative's config templates use.
//!
//! `container-name-template`, `domain-template` and `tag-template` interpolate fields
//! (`{{.Name}}.{{.Namespace}}.{{.Domain}}`) and, rarely, look up a label or annotation
//! (`{{index .Labels "app"}}`); `logging.request-log-template` reaches into nested fields
//! (`{{.Request.Method}}`, `{{.Response.Code}}`) and escapes them for JSON
//! (`{{js .Request.UserAgent}}`). So wisp implements exactly that: literal text, field
//! paths, `index FIELD "key"`, the escaping functions `js`, `html`, `urlquery` and `print`
//! (called with one argument, or at the end of a pipeline: `{{.Request.URL | js}}`),
//! comments and the `{{-`/`-}}` whitespace trim markers. Anything else is rejected when
//! the config is loaded, rather than producing a surprising result at runtime.

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
    Action(Pipeline),
}

/// `command | func | func …`
#[derive(Clone, Debug, PartialEq, Eq)]
struct Pipeline {
    command: Command,
    funcs: Vec<Func>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Command {
    /// `.A.B` (the path without the leading dot: `A.B`)
    Field(String),
    /// `"literal"`
    Str(String),
    /// `index .A "key"`
    Index(String, String),
    /// `func ARG`
    Call(Func, Box<Command>),
}

/// The functions of Go's `text/template` wisp knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Func {
    Js,
    Html,
    UrlQuery,
    Print,
}

impl Func {
    fn named(s: &str) -> Option<Func> {
        Some(match s {
            "js" => Func::Js,
            "html" => Func::Html,
            "urlquery" => Func::UrlQuery,
            "print" => Func::Print,
            _ => return None,
        })
    }

    fn apply(self, s: &str, out: &mut String) {
        match self {
            Func::Js => js_escape(s, out),
            Func::Html => html_escape(s, out),
            Func::UrlQuery => query_escape(s, out),
            Func::Print => out.push_str(s),
        }
    }
}

/// A value a template field resolves to.
pub enum Datum<'a> {
    Str(Cow<'a, str>),
    Map(&'a BTreeMap<String, String>),
    /// A map of lists (Go's `http.Header`).
    Multi(&'a BTreeMap<String, Vec<String>>),
}

impl Datum<'_> {
    /// The value as Go's `fmt` prints it: maps as `map[k1:v1 k2:v2]` with sorted keys,
    /// lists as `[a b]`.
    fn print(&self, out: &mut String) {
        match self {
            Datum::Str(s) => out.push_str(s),
            Datum::Map(m) => {
                out.push_str("map[");
                for (i, (k, v)) in m.iter().enumerate() {
                    if i > 0 {
                        out.push(' ');
                    }
                    let _ = write!(out, "{k}:{v}");
                }
                out.push(']');
            }
            Datum::Multi(m) => {
                out.push_str("map[");
                for (i, (k, v)) in m.iter().enumerate() {
                    if i > 0 {
                        out.push(' ');
                    }
                    let _ = write!(out, "{k}:");
                    print_list(v, out);
                }
                out.push(']');
            }
        }
    }
}

fn print_list(v: &[String], out: &mut String) {
    out.push('[');
    for (i, s) in v.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        out.push_str(s);
    }
    out.push(']');
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

    /// Every field path the template reads (`Request.Method`, …), in order.
    pub fn fields(&self) -> Vec<&str> {
        fn of<'a>(c: &'a Command, out: &mut Vec<&'a str>) {
            match c {
                Command::Field(f) | Command::Index(f, _) => out.push(f),
                Command::Str(_) => {}
                Command::Call(_, arg) => of(arg, out),
            }
        }
        let mut out = Vec::new();
        for n in &self.nodes {
            if let Node::Action(p) = n {
                of(&p.command, &mut out);
            }
        }
        out
    }

    /// Renders the template; `lookup` resolves a field path (`Name`, `Request.Method`),
    /// `None` meaning the data has no such field (Go's "can't evaluate field").
    pub fn render<'a>(&self, lookup: &dyn Fn(&str) -> Option<Datum<'a>>) -> Result<String, String> {
        let mut out = String::new();
        self.render_into(&mut out, lookup)?;
        Ok(out)
    }

    /// [`render`](Self::render), appending to `out`.
    pub fn render_into<'a>(
        &self,
        out: &mut String,
        lookup: &dyn Fn(&str) -> Option<Datum<'a>>,
    ) -> Result<(), String> {
        for node in &self.nodes {
            match node {
                Node::Text(t) => out.push_str(t),
                Node::Action(p) if p.funcs.is_empty() => eval(&p.command, lookup, out)?,
                Node::Action(p) => {
                    let mut value = String::new();
                    eval(&p.command, lookup, &mut value)?;
                    for (i, f) in p.funcs.iter().enumerate() {
                        if i + 1 == p.funcs.len() {
                            f.apply(&value, out);
                        } else {
                            let mut next = String::new();
                            f.apply(&value, &mut next);
                            value = next;
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

fn eval<'a>(
    c: &Command,
    lookup: &dyn Fn(&str) -> Option<Datum<'a>>,
    out: &mut String,
) -> Result<(), String> {
    match c {
        Command::Str(s) => out.push_str(s),
        Command::Field(f) => lookup(f).ok_or_else(|| no_field(f))?.print(out),
        Command::Index(f, key) => match lookup(f).ok_or_else(|| no_field(f))? {
            // A missing key yields the zero value, as Go's `index` does for maps.
            Datum::Map(m) => out.push_str(m.get(key).map_or("", String::as_str)),
            Datum::Multi(m) => print_list(m.get(key).map_or(&[][..], Vec::as_slice), out),
            Datum::Str(_) => {
                return Err(format!("template: can't index item of type string (.{f})"));
            }
        },
        Command::Call(func, arg) => {
            let mut value = String::new();
            eval(arg, lookup, &mut value)?;
            func.apply(&value, out);
        }
    }
    Ok(())
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
    let unsupported = || {
        format!(
            "template: unsupported action \"{{{{{raw}}}}}\" (only {{{{.Field}}}}, {{{{index .Field \"key\"}}}}, \"text\" and the functions js, html, urlquery and print are supported)"
        )
    };
    let mut stages = split_pipeline(body).into_iter();
    let command = stages
        .next()
        .and_then(|c| parse_command(c.trim()))
        .ok_or_else(unsupported)?;
    let funcs = stages
        .map(|f| Func::named(f.trim()))
        .collect::<Option<Vec<_>>>()
        .ok_or_else(unsupported)?;
    Ok(Some(Node::Action(Pipeline { command, funcs })))
}

/// Splits `a | b | c` on the bars outside string literals.
fn split_pipeline(body: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut start, mut quote) = (0, None::<char>);
    let mut chars = body.char_indices();
    while let Some((i, c)) = chars.next() {
        match (quote, c) {
            (Some('"'), '\\') => {
                chars.next();
            }
            (Some(q), c) if c == q => quote = None,
            (None, '"' | '`') => quote = Some(c),
            (None, '|') => {
                out.push(&body[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&body[start..]);
    out
}

fn parse_command(s: &str) -> Option<Command> {
    if let Some(f) = field_ref(s) {
        return Some(Command::Field(f.to_string()));
    }
    if let Some(lit) = string_literal(s) {
        return Some(Command::Str(lit));
    }
    let (head, arg) = s.split_once(char::is_whitespace)?;
    let arg = arg.trim();
    if head == "index" {
        let (field, key) = arg.split_once(char::is_whitespace)?;
        return Some(Command::Index(
            field_ref(field)?.to_string(),
            string_literal(key.trim())?,
        ));
    }
    let func = Func::named(head)?;
    let arg = parse_command(arg).filter(|a| !matches!(a, Command::Call(..)))?;
    Some(Command::Call(func, Box::new(arg)))
}

/// `.Ident.Ident…` → `Ident.Ident…`.
fn field_ref(s: &str) -> Option<&str> {
    let path = s.strip_prefix('.')?;
    let ident = |id: &str| {
        let mut chars = id.chars();
        chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    path.split('.').all(ident).then_some(path)
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

/// Go's `template.JSEscapeString`.
fn js_escape(s: &str, out: &mut String) {
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            '"' => out.push_str("\\\""),
            '<' => out.push_str("\\u003C"),
            '>' => out.push_str("\\u003E"),
            '&' => out.push_str("\\u0026"),
            '=' => out.push_str("\\u003D"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04X}", c as u32);
            }
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04X}", c as u32);
            }
            c => out.push(c),
        }
    }
}

/// Go's `template.HTMLEscapeString`.
fn html_escape(s: &str, out: &mut String) {
    for c in s.chars() {
        match c {
            '"' => out.push_str("&#34;"),
            '\'' => out.push_str("&#39;"),
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '\0' => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
}

/// Go's `url.QueryEscape` (what `urlquery` does).
fn query_escape(s: &str, out: &mut String) {
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(char::from(b));
            }
            b' ' => out.push('+'),
            b => {
                let _ = write!(out, "%{b:02X}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup_from<'a>(
        strs: &'a [(&'a str, &'a str)],
        map: &'a BTreeMap<String, String>,
        multi: &'a BTreeMap<String, Vec<String>>,
    ) -> impl Fn(&str) -> Option<Datum<'a>> {
        move |f| {
            if f == "Labels" {
                return Some(Datum::Map(map));
            }
            if f == "Request.Header" {
                return Some(Datum::Multi(multi));
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
        let headers: BTreeMap<String, Vec<String>> = [
            ("Accept".to_string(), vec!["*/*".to_string()]),
            ("X-Two".to_string(), vec!["a".to_string(), "b".to_string()]),
        ]
        .into();
        let strs = [
            ("Name", "hello"),
            ("Namespace", "default"),
            ("Domain", "example.com"),
            ("Request.Method", "GET"),
            ("Request.UserAgent", "curl/8 \"q\" <x> & 'y' = \n"),
            ("Request.URL", "/a b?c=d&e"),
        ];
        let lookup = lookup_from(&strs, &labels, &headers);
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
            ("{{.Request.Method}} {{\"lit|eral\"}}", "GET lit|eral"),
            (
                "{{js .Request.UserAgent}}",
                "curl/8 \\\"q\\\" \\u003Cx\\u003E \\u0026 \\'y\\' \\u003D \\u000A",
            ),
            (
                "{{.Request.UserAgent | html}}",
                "curl/8 &#34;q&#34; &lt;x&gt; &amp; &#39;y&#39; = \n",
            ),
            ("{{urlquery .Request.URL}}", "%2Fa+b%3Fc%3Dd%26e"),
            ("{{.Request.URL | urlquery | js}}", "%2Fa+b%3Fc%3Dd%26e"),
            ("{{print .Name}}", "hello"),
            ("{{.Request.Header}}", "map[Accept:[*/*] X-Two:[a b]]"),
            ("{{index .Request.Header \"X-Two\"}}", "[a b]"),
            ("{{index .Request.Header \"X-None\"}}", "[]"),
            ("{{index .Request.Header \"Accept\" | js}}", "[*/*]"),
        ];
        for (src, want) in cases {
            let t = Template::parse(src).unwrap_or_else(|e| panic!("{src}: {e}"));
            assert_eq!(t.render(&lookup).unwrap(), want, "{src}");
        }
    }

    #[test]
    fn fields_lists_what_is_read() {
        let t =
            Template::parse("{{.A}} {{js .B.C}} {{index .D \"k\"}} {{\"x\"}} {{.E | js}}").unwrap();
        assert_eq!(t.fields(), ["A", "B.C", "D", "E"]);
    }

    #[test]
    fn errors() {
        for bad in [
            "{{.Name",
            "{{if .Name}}x{{end}}",
            "{{ Name }}",
            "{{index .Labels app}}",
            "{{.}}",
            "{{.A..B}}",
            "{{js}}",
            "{{js .A .B}}",
            "{{.A | nope}}",
            "{{printf \"%s\" .A}}",
            "{{js (index .A \"b\")}}",
            "{{.A | }}",
        ] {
            assert!(Template::parse(bad).is_err(), "{bad}");
        }
        let labels = BTreeMap::new();
        let multi = BTreeMap::new();
        let strs = [("Name", "n")];
        let lookup = lookup_from(&strs, &labels, &multi);
        let t = Template::parse("{{.Foo}}").unwrap();
        assert_eq!(
            t.render(&lookup).unwrap_err(),
            "template: can't evaluate field Foo"
        );
        let t = Template::parse("{{js .Foo.Bar}}").unwrap();
        assert_eq!(
            t.render(&lookup).unwrap_err(),
            "template: can't evaluate field Foo.Bar"
        );
        let t = Template::parse("{{index .Name \"x\"}}").unwrap();
        assert!(t.render(&lookup).is_err());
    }
}
