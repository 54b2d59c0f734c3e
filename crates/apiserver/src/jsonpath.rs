//! The subset of kubectl's JSONPath (`k8s.io/client-go/util/jsonpath`) that CRD
//! `additionalPrinterColumns` use: `.field`, `['key']` (with `\.` for a literal dot, as in
//! Knative's `.metadata.labels['serving\.knative\.dev/configuration']`), `[N]`, `[*]` and
//! filters `[?(@.path=='value')]` / `!=`. Missing keys yield no result rather than an error,
//! as the CRD table convertor sets `AllowMissingKeys(true)`
//! (apiextensions-apiserver `pkg/registry/customresource/tableconvertor/tableconvertor.go`).

use serde_json::Value;

/// A parse failure of a JSONPath expression.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid JSONPath {path:?}: {reason}")]
pub struct ParseError {
    pub path: String,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq)]
enum Step {
    Field(String),
    Index(i64),
    All,
    Filter {
        path: Vec<Step>,
        op: Op,
        value: Value,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Eq,
    Ne,
}

/// A parsed JSONPath.
#[derive(Debug, Clone, PartialEq)]
pub struct JsonPath {
    steps: Vec<Step>,
}

impl JsonPath {
    /// Parses an expression with or without kubectl's surrounding `{…}`.
    pub fn parse(expr: &str) -> Result<JsonPath, ParseError> {
        let err = |reason: &str| ParseError {
            path: expr.to_string(),
            reason: reason.to_string(),
        };
        let inner = expr.trim();
        let inner = inner
            .strip_prefix('{')
            .and_then(|s| s.strip_suffix('}'))
            .unwrap_or(inner);
        let inner = inner.strip_prefix('$').unwrap_or(inner);
        let (steps, rest) = parse_steps(inner).map_err(|r| err(&r))?;
        if !rest.is_empty() {
            return Err(err(&format!("unexpected {rest:?}")));
        }
        Ok(JsonPath { steps })
    }

    /// Every value the path selects, in document order.
    pub fn find<'a>(&self, root: &'a Value) -> Vec<&'a Value> {
        let mut cur = vec![root];
        for step in &self.steps {
            cur = apply(step, cur);
        }
        cur
    }
}

fn apply<'a>(step: &Step, input: Vec<&'a Value>) -> Vec<&'a Value> {
    let mut out = Vec::new();
    for v in input {
        match step {
            Step::Field(name) => out.extend(v.get(name.as_str())),
            Step::Index(i) => {
                if let Some(a) = v.as_array() {
                    let idx = if *i < 0 { a.len() as i64 + i } else { *i };
                    if let Ok(idx) = usize::try_from(idx) {
                        out.extend(a.get(idx));
                    }
                }
            }
            Step::All => match v {
                Value::Array(a) => out.extend(a.iter()),
                Value::Object(m) => out.extend(m.values()),
                _ => {}
            },
            Step::Filter { path, op, value } => {
                if let Some(a) = v.as_array() {
                    for item in a {
                        let mut cur = vec![item];
                        for s in path {
                            cur = apply(s, cur);
                        }
                        let hit = cur.iter().any(|found| equal(found, value));
                        let keep = match op {
                            Op::Eq => hit,
                            Op::Ne => !hit,
                        };
                        if keep {
                            out.push(item);
                        }
                    }
                }
            }
        }
    }
    out
}

/// Equality as the filter compares: numbers by value, everything else structurally.
fn equal(a: &Value, b: &Value) -> bool {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}

/// Parses steps until the input ends or a character no step starts with (`)`, `=`, `!`).
fn parse_steps(mut s: &str) -> Result<(Vec<Step>, &str), String> {
    let mut steps = Vec::new();
    loop {
        if let Some(rest) = s.strip_prefix('.') {
            if rest.starts_with('.') {
                return Err("recursive descent (..) is not supported".into());
            }
            if rest.starts_with('[') || rest.is_empty() {
                s = rest;
                continue;
            }
            let (name, rest) = field_name(rest);
            if name.is_empty() {
                return Err(format!("expected a field name at {rest:?}"));
            }
            steps.push(if name == "*" {
                Step::All
            } else {
                Step::Field(name)
            });
            s = rest;
        } else if let Some(rest) = s.strip_prefix('[') {
            let (step, rest) = bracket(rest)?;
            steps.push(step);
            s = rest;
        } else {
            return Ok((steps, s));
        }
    }
}

/// A field name up to the next unescaped `.`, `[`, or filter syntax; `\.` is a literal dot.
fn field_name(s: &str) -> (String, &str) {
    let mut name = String::new();
    let mut chars = s.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' if matches!(chars.peek(), Some((_, '.'))) => {
                name.push('.');
                chars.next();
            }
            '.' | '[' | ')' | '=' | '!' | ' ' => return (name, &s[i..]),
            c => name.push(c),
        }
    }
    (name, "")
}

/// Parses the inside of `[...]` (the `[` already consumed).
fn bracket(s: &str) -> Result<(Step, &str), String> {
    if let Some(rest) = s.strip_prefix("?(") {
        let rest = rest.trim_start();
        let rest = rest
            .strip_prefix('@')
            .ok_or_else(|| "a filter must start with @".to_string())?;
        let (path, rest) = parse_steps(rest)?;
        let rest = rest.trim_start();
        let (op, rest) = if let Some(r) = rest.strip_prefix("==") {
            (Op::Eq, r)
        } else if let Some(r) = rest.strip_prefix("!=") {
            (Op::Ne, r)
        } else {
            return Err(format!("expected == or != at {rest:?}"));
        };
        let rest = rest.trim_start();
        let (value, rest) = literal(rest)?;
        let rest = rest.trim_start();
        let rest = rest
            .strip_prefix(")]")
            .ok_or_else(|| format!("expected )] at {rest:?}"))?;
        return Ok((Step::Filter { path, op, value }, rest));
    }
    if s.starts_with('\'') || s.starts_with('"') {
        let (value, rest) = literal(s)?;
        let rest = rest
            .strip_prefix(']')
            .ok_or_else(|| format!("expected ] at {rest:?}"))?;
        let Value::String(key) = value else {
            return Err("a quoted key must be a string".into());
        };
        // kubectl re-parses a quoted key as `{.key}`, so `\.` there is a literal dot too.
        return Ok((Step::Field(key.replace("\\.", ".")), rest));
    }
    let end = s.find(']').ok_or_else(|| "unclosed [".to_string())?;
    let inner = s[..end].trim();
    let step = if inner == "*" {
        Step::All
    } else {
        Step::Index(
            inner
                .parse()
                .map_err(|_| format!("unsupported subscript [{inner}]"))?,
        )
    };
    Ok((step, &s[end + 1..]))
}

/// A quoted string, number, `true`/`false` or `null`.
fn literal(s: &str) -> Result<(Value, &str), String> {
    if let Some(q) = s.chars().next().filter(|c| *c == '\'' || *c == '"') {
        let body = &s[1..];
        let end = body
            .find(q)
            .ok_or_else(|| "unterminated string".to_string())?;
        return Ok((Value::String(body[..end].to_string()), &body[end + 1..]));
    }
    let end = s.find([')', ']', ' ']).unwrap_or(s.len());
    let word = &s[..end];
    let value = match word {
        "true" => Value::Bool(true),
        "false" => Value::Bool(false),
        "null" => Value::Null,
        w => serde_json::from_str::<serde_json::Number>(w)
            .map(Value::Number)
            .map_err(|_| format!("unsupported literal {w:?}"))?,
    };
    Ok((value, &s[end..]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn doc() -> Value {
        json!({
            "metadata": {
                "name": "hello",
                "labels": {"serving.knative.dev/configuration": "hello", "app": "x"}
            },
            "status": {
                "url": "http://hello.default.example.com",
                "actualReplicas": 2,
                "conditions": [
                    {"type": "ConfigurationsReady", "status": "True"},
                    {"type": "Ready", "status": "False", "reason": "RevisionFailed"},
                    {"type": "RoutesReady", "status": "True"}
                ]
            }
        })
    }

    #[test]
    fn evaluates_the_paths_knative_crds_use() {
        let d = doc();
        let cases: &[(&str, &[Value])] = &[
            (".status.url", &[json!("http://hello.default.example.com")]),
            (
                "{.status.url}",
                &[json!("http://hello.default.example.com")],
            ),
            ("$.status.url", &[json!("http://hello.default.example.com")]),
            (
                ".status.conditions[?(@.type=='Ready')].status",
                &[json!("False")],
            ),
            (
                ".status.conditions[?(@.type==\"Ready\")].reason",
                &[json!("RevisionFailed")],
            ),
            (
                ".status.conditions[?(@.type!='Ready')].type",
                &[json!("ConfigurationsReady"), json!("RoutesReady")],
            ),
            (
                r".metadata.labels['serving\.knative\.dev/configuration']",
                &[json!("hello")],
            ),
            (
                ".metadata.labels['serving.knative.dev/configuration']",
                &[json!("hello")],
            ),
            (
                r".metadata.labels.serving\.knative\.dev/configuration",
                &[json!("hello")],
            ),
            (".status.actualReplicas", &[json!(2)]),
            (
                ".status.conditions[0].type",
                &[json!("ConfigurationsReady")],
            ),
            (".status.conditions[-1].type", &[json!("RoutesReady")]),
            (
                ".status.conditions[*].status",
                &[json!("True"), json!("False"), json!("True")],
            ),
            // Missing keys select nothing (AllowMissingKeys).
            (".status.desiredReplicas", &[]),
            (".spec.nothing.here", &[]),
            (".status.conditions[?(@.type=='Nope')].status", &[]),
            (".status.conditions[9].type", &[]),
            (".metadata.name[0]", &[]),
        ];
        for (path, want) in cases {
            let p = JsonPath::parse(path).unwrap();
            let got: Vec<Value> = p.find(&d).into_iter().cloned().collect();
            assert_eq!(&got, want, "{path}");
        }
    }

    #[test]
    fn numeric_filters_compare_by_value() {
        let d = json!({"items": [{"n": 1, "v": "a"}, {"n": 2.0, "v": "b"}]});
        let p = JsonPath::parse(".items[?(@.n==2)].v").unwrap();
        assert_eq!(p.find(&d), vec![&json!("b")]);
    }

    #[test]
    fn rejects_what_it_cannot_evaluate() {
        for bad in [
            "..status",
            ".status[",
            ".a[?(@.x<3)]",
            ".a[?(x=='y')]",
            ".a['unterminated]",
            ".a[1:2]",
            "status",
            ".",
        ] {
            if bad == "." {
                // `.` alone selects the root, as kubectl's `{.}` does.
                assert!(JsonPath::parse(bad).is_ok());
                continue;
            }
            assert!(JsonPath::parse(bad).is_err(), "{bad}");
        }
    }
}
