//! Kubernetes label selectors in their string form (`?labelSelector=` / `kubectl -l`).
//!
//! Grammar, as accepted by `k8s.io/apimachinery/pkg/labels.Parse`:
//!
//! ```text
//! selector    := "" | requirement ("," requirement)*
//! requirement := "!" key | key | key ("=" | "==" | "!=") value? | key (">" | "<") integer
//!              | key ("in" | "notin") "(" value? ("," value?)* ")"
//! ```
//!
//! Semantics follow Kubernetes: `!=` and `notin` also match objects that lack the label; `in`
//! with an empty set is rejected; keys and values are validated like label keys and values so a
//! typo fails loudly instead of silently matching nothing.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

use serde_json::{Map, Value};

use crate::StoreError;

/// A parsed label selector: the conjunction of its requirements. The empty selector matches
/// everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
}

/// One `key op values` term.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    pub key: String,
    pub op: Operator,
    /// Sorted and de-duplicated; one element for `=`/`!=`/`>`/`<`, none for exists checks.
    pub values: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operator {
    /// `key=value` or `key==value`.
    Equals,
    /// `key!=value` (also true when the label is absent).
    NotEquals,
    /// `key in (a,b)`.
    In,
    /// `key notin (a,b)` (also true when the label is absent).
    NotIn,
    /// `key`.
    Exists,
    /// `!key`.
    DoesNotExist,
    /// `key>n`: label present and its integer value greater than n.
    GreaterThan,
    /// `key<n`.
    LessThan,
}

impl LabelSelector {
    /// The selector that matches every object.
    pub fn everything() -> Self {
        Self::default()
    }

    /// Parses the Kubernetes string syntax. Errors are [`StoreError::Invalid`] (HTTP 400).
    pub fn parse(s: &str) -> Result<Self, StoreError> {
        Parser::new(s)
            .selector()
            .map_err(|e| StoreError::Invalid(format!("unable to parse label selector {s:?}: {e}")))
    }

    /// The conjunction of `requirements`.
    pub fn from_requirements(requirements: impl IntoIterator<Item = Requirement>) -> Self {
        LabelSelector {
            requirements: requirements.into_iter().collect(),
        }
    }

    /// `key=value`, for programs (neither is validated as the string syntax would).
    pub fn equals(key: &str, value: &str) -> Self {
        Self::from_requirements([Requirement::new(key, Operator::Equals, [value])])
    }

    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    pub fn requirements(&self) -> &[Requirement] {
        &self.requirements
    }

    /// Does a `metadata.labels` map satisfy every requirement? Non-string label values (which
    /// valid objects never have) count as absent.
    pub fn matches(&self, labels: &Map<String, Value>) -> bool {
        self.matches_with(|k| labels.get(k).and_then(Value::as_str))
    }

    /// [`matches`](Self::matches) applied to a whole object's `metadata.labels` (absent = no labels).
    pub fn matches_object(&self, obj: &Value) -> bool {
        self.matches_with(|k| obj.pointer("/metadata/labels")?.get(k)?.as_str())
    }

    /// The general form: `get` returns a label's value, if present.
    pub fn matches_with<'a>(&self, get: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.requirements.iter().all(|r| r.matches(get(&r.key)))
    }
}

impl Requirement {
    /// A requirement built in code (values are sorted and de-duplicated). Keys and values are
    /// not validated: selectors built by programs may name any label.
    pub fn new(
        key: impl Into<String>,
        op: Operator,
        values: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        let values: BTreeSet<String> = values.into_iter().map(Into::into).collect();
        Requirement {
            key: key.into(),
            op,
            values: values.into_iter().collect(),
        }
    }

    /// Whether a label value (`None` = absent) satisfies the requirement.
    pub(crate) fn matches(&self, value: Option<&str>) -> bool {
        let has = |v: &str| self.values.iter().any(|x| x == v);
        let compare = |v: &str, want: std::cmp::Ordering| match (
            v.parse::<i64>(),
            self.values.first().map(|x| x.parse::<i64>()),
        ) {
            (Ok(v), Some(Ok(n))) => v.cmp(&n) == want,
            _ => false,
        };
        match (self.op, value) {
            (Operator::Exists, v) => v.is_some(),
            (Operator::DoesNotExist, v) => v.is_none(),
            (Operator::Equals | Operator::In, Some(v)) => has(v),
            (Operator::NotEquals | Operator::NotIn, Some(v)) => !has(v),
            (Operator::NotEquals | Operator::NotIn, None) => true,
            (Operator::GreaterThan, Some(v)) => compare(v, std::cmp::Ordering::Greater),
            (Operator::LessThan, Some(v)) => compare(v, std::cmp::Ordering::Less),
            (
                Operator::Equals | Operator::In | Operator::GreaterThan | Operator::LessThan,
                None,
            ) => false,
        }
    }
}

impl FromStr for LabelSelector {
    type Err = StoreError;
    fn from_str(s: &str) -> Result<Self, StoreError> {
        Self::parse(s)
    }
}

/// Canonical string form; parses back to an equal selector.
impl fmt::Display for LabelSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let first = self.values.first().map(String::as_str).unwrap_or("");
        match self.op {
            Operator::Exists => write!(f, "{}", self.key),
            Operator::DoesNotExist => write!(f, "!{}", self.key),
            Operator::Equals => write!(f, "{}={first}", self.key),
            Operator::NotEquals => write!(f, "{}!={first}", self.key),
            Operator::GreaterThan => write!(f, "{}>{first}", self.key),
            Operator::LessThan => write!(f, "{}<{first}", self.key),
            Operator::In => write!(f, "{} in ({})", self.key, self.values.join(",")),
            Operator::NotIn => write!(f, "{} notin ({})", self.key, self.values.join(",")),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    Ident(String),
    Comma,
    Eq,
    DoubleEq,
    NotEq,
    Bang,
    Open,
    Close,
    Gt,
    Lt,
}

impl fmt::Display for Tok {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Tok::Ident(s) => write!(f, "identifier {s:?}"),
            Tok::Comma => f.write_str("','"),
            Tok::Eq => f.write_str("'='"),
            Tok::DoubleEq => f.write_str("'=='"),
            Tok::NotEq => f.write_str("'!='"),
            Tok::Bang => f.write_str("'!'"),
            Tok::Open => f.write_str("'('"),
            Tok::Close => f.write_str("')'"),
            Tok::Gt => f.write_str("'>'"),
            Tok::Lt => f.write_str("'<'"),
        }
    }
}

/// Splits into tokens. Identifiers are maximal runs of anything that is neither whitespace nor
/// an operator character, as in Kubernetes' lexer; validation happens in the parser.
fn lex(s: &str) -> Vec<Tok> {
    const SPECIAL: &[char] = &[',', '=', '!', '(', ')', '<', '>'];
    let mut out = Vec::new();
    let mut chars = s.chars().peekable();
    while let Some(&c) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
            continue;
        }
        if SPECIAL.contains(&c) {
            chars.next();
            let two = |chars: &mut std::iter::Peekable<std::str::Chars<'_>>, t2, t1| {
                if chars.peek() == Some(&'=') {
                    chars.next();
                    t2
                } else {
                    t1
                }
            };
            out.push(match c {
                ',' => Tok::Comma,
                '(' => Tok::Open,
                ')' => Tok::Close,
                '<' => Tok::Lt,
                '>' => Tok::Gt,
                '=' => two(&mut chars, Tok::DoubleEq, Tok::Eq),
                _ => two(&mut chars, Tok::NotEq, Tok::Bang),
            });
            continue;
        }
        let mut ident = String::new();
        while let Some(&c) = chars.peek() {
            if c.is_whitespace() || SPECIAL.contains(&c) {
                break;
            }
            ident.push(c);
            chars.next();
        }
        out.push(Tok::Ident(ident));
    }
    out
}

struct Parser {
    toks: Vec<Tok>,
    pos: usize,
}

impl Parser {
    fn new(s: &str) -> Self {
        Parser {
            toks: lex(s),
            pos: 0,
        }
    }

    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos)
    }

    fn next(&mut self) -> Option<Tok> {
        let t = self.toks.get(self.pos).cloned();
        self.pos += 1;
        t
    }

    fn unexpected(found: Option<Tok>, expected: &str) -> String {
        match found {
            Some(t) => format!("found {t}, expected {expected}"),
            None => format!("found end of input, expected {expected}"),
        }
    }

    fn selector(mut self) -> Result<LabelSelector, String> {
        let mut requirements = Vec::new();
        if self.peek().is_none() {
            return Ok(LabelSelector { requirements });
        }
        loop {
            requirements.push(self.requirement()?);
            match self.next() {
                None => break,
                Some(Tok::Comma) => continue,
                other => return Err(Self::unexpected(other, "',' or end of input")),
            }
        }
        Ok(LabelSelector { requirements })
    }

    fn key(&mut self) -> Result<String, String> {
        match self.next() {
            Some(Tok::Ident(k)) => {
                validate_key(&k)?;
                Ok(k)
            }
            other => Err(Self::unexpected(other, "a label key")),
        }
    }

    fn requirement(&mut self) -> Result<Requirement, String> {
        let req = |key, op, values| Requirement { key, op, values };
        if self.peek() == Some(&Tok::Bang) {
            self.next();
            return Ok(req(self.key()?, Operator::DoesNotExist, vec![]));
        }
        let key = self.key()?;
        let op = match self.peek() {
            None | Some(Tok::Comma) => return Ok(req(key, Operator::Exists, vec![])),
            Some(Tok::Eq | Tok::DoubleEq) => Operator::Equals,
            Some(Tok::NotEq) => Operator::NotEquals,
            Some(Tok::Gt) => Operator::GreaterThan,
            Some(Tok::Lt) => Operator::LessThan,
            Some(Tok::Ident(s)) if s == "in" => Operator::In,
            Some(Tok::Ident(s)) if s == "notin" => Operator::NotIn,
            _ => {
                let found = self.next();
                return Err(Self::unexpected(
                    found,
                    "'=', '==', '!=', '>', '<', 'in', 'notin', ',' or end of input",
                ));
            }
        };
        self.next();
        let values = match op {
            Operator::In | Operator::NotIn => self.value_set()?,
            Operator::GreaterThan | Operator::LessThan => match self.next() {
                Some(Tok::Ident(v)) if v.parse::<i64>().is_ok() => vec![v],
                other => return Err(Self::unexpected(other, "an integer")),
            },
            _ => vec![self.value()?],
        };
        Ok(req(key, op, values))
    }

    /// A single, possibly empty, value (`a=` selects an empty label value).
    fn value(&mut self) -> Result<String, String> {
        match self.peek() {
            Some(Tok::Ident(_)) => match self.next() {
                Some(Tok::Ident(v)) => {
                    validate_value(&v)?;
                    Ok(v)
                }
                _ => unreachable!("peeked an identifier"),
            },
            None | Some(Tok::Comma | Tok::Close) => Ok(String::new()),
            _ => {
                let found = self.next();
                Err(Self::unexpected(found, "a label value"))
            }
        }
    }

    fn value_set(&mut self) -> Result<Vec<String>, String> {
        match self.next() {
            Some(Tok::Open) => {}
            other => return Err(Self::unexpected(other, "'('")),
        }
        if self.peek() == Some(&Tok::Close) {
            return Err("for 'in', 'notin' operators, values set can't be empty".into());
        }
        let mut set = BTreeSet::new();
        loop {
            set.insert(self.value()?);
            match self.next() {
                Some(Tok::Comma) => continue,
                Some(Tok::Close) => break,
                other => return Err(Self::unexpected(other, "',' or ')'")),
            }
        }
        Ok(set.into_iter().collect())
    }
}

/// `[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?`, at most 63 characters: a label name or value.
fn is_qualified_part(s: &str) -> bool {
    let alnum = |c: char| c.is_ascii_alphanumeric();
    s.len() <= 63
        && s.starts_with(alnum)
        && s.ends_with(alnum)
        && s.chars().all(|c| alnum(c) || matches!(c, '-' | '_' | '.'))
}

/// A DNS-1123 subdomain: the optional `prefix/` of a label key.
fn is_dns_subdomain(s: &str) -> bool {
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
            && l.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
            && l.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    };
    s.len() <= 253 && s.split('.').all(label_ok)
}

fn validate_key(k: &str) -> Result<(), String> {
    let ok = match k.split_once('/') {
        Some((prefix, name)) => is_dns_subdomain(prefix) && is_qualified_part(name),
        None => is_qualified_part(k),
    };
    if ok {
        Ok(())
    } else {
        Err(format!(
            "invalid label key {k:?}: must be an optional DNS subdomain prefix and '/', then 1-63 \
             alphanumeric characters, '-', '_' or '.', starting and ending with an alphanumeric"
        ))
    }
}

fn validate_value(v: &str) -> Result<(), String> {
    if v.is_empty() || is_qualified_part(v) {
        Ok(())
    } else {
        Err(format!(
            "invalid label value {v:?}: must be empty or 1-63 alphanumeric characters, '-', '_' \
             or '.', starting and ending with an alphanumeric"
        ))
    }
}
