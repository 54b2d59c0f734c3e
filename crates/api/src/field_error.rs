//! Knative's `apis.FieldError`: validation errors with field paths, rendered byte-for-byte as
//! Knative's webhook renders them.
//!
//! Build errors with the `FieldError::*` constructors, move them under a parent with
//! [`FieldError::via_field`] / [`FieldError::via_index`] / [`FieldError::via_key`], and combine
//! them with [`FieldError::also`]. `to_string()` merges identical messages, sorts paths and
//! joins several errors with newlines, exactly as `FieldError.Error()` does.

use std::fmt;

/// Whether a diagnostic rejects the object or is only a warning.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    #[default]
    Error,
    Warning,
}

/// One or more field errors (a tree, like Knative's).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldError {
    pub message: String,
    pub paths: Vec<String>,
    pub details: String,
    pub level: Level,
    errors: Vec<FieldError>,
}

impl FieldError {
    /// An empty error set; `is_empty()` is true.
    pub fn none() -> Self {
        FieldError::default()
    }

    /// `ErrGeneric`: an error with a free-form message.
    pub fn generic(message: impl Into<String>, paths: &[&str]) -> Self {
        FieldError {
            message: message.into(),
            paths: paths.iter().map(|p| p.to_string()).collect(),
            ..Default::default()
        }
    }

    /// `ErrMissingField`: `missing field(s)`.
    pub fn missing(paths: &[&str]) -> Self {
        Self::generic("missing field(s)", paths)
    }

    /// `ErrDisallowedFields`: `must not set the field(s)`.
    pub fn disallowed(paths: &[&str]) -> Self {
        Self::generic("must not set the field(s)", paths)
    }

    /// `ErrInvalidValue`: `invalid value: VALUE`.
    pub fn invalid_value(value: impl fmt::Display, path: &str) -> Self {
        Self::generic(format!("invalid value: {value}"), &[path])
    }

    /// `ErrMultipleOneOf`: `expected exactly one, got both`.
    pub fn multiple_one_of(paths: &[&str]) -> Self {
        Self::generic("expected exactly one, got both", paths)
    }

    /// `ErrMissingOneOf`: `expected exactly one, got neither`.
    pub fn missing_one_of(paths: &[&str]) -> Self {
        Self::generic("expected exactly one, got neither", paths)
    }

    /// `ErrInvalidKeyName`: `invalid key name "KEY"`.
    pub fn invalid_key_name(key: &str, path: &str) -> Self {
        Self::generic(format!("invalid key name {key:?}"), &[path])
    }

    /// `ErrOutOfBoundsValue`: `expected LOW <= VALUE <= HIGH`.
    pub fn out_of_bounds(
        value: impl fmt::Display,
        low: impl fmt::Display,
        high: impl fmt::Display,
        path: &str,
    ) -> Self {
        Self::generic(format!("expected {low} <= {value} <= {high}"), &[path])
    }

    /// Sets the details line printed under the message.
    pub fn with_details(mut self, details: impl Into<String>) -> Self {
        self.details = details.into();
        self
    }

    /// Marks this error (and its children) as a warning.
    pub fn at_level(mut self, level: Level) -> Self {
        self.level = level;
        for e in &mut self.errors {
            *e = std::mem::take(e).at_level(level);
        }
        self
    }

    /// True if this holds no error at all.
    pub fn is_empty(&self) -> bool {
        self.message.is_empty() && self.errors.iter().all(|e| e.is_empty())
    }

    /// Combines two error sets (`Also`).
    pub fn also(mut self, other: FieldError) -> Self {
        if other.is_empty() {
            return self;
        }
        if self.is_empty() {
            return other;
        }
        if self.message.is_empty() {
            self.errors.push(other);
            return self;
        }
        FieldError {
            errors: vec![self, other],
            ..Default::default()
        }
    }

    /// Prefixes every path with `field` (`ViaField`). Several fields apply outermost last,
    /// as in Knative: `via_field("spec")` after `via_field("template")` gives `spec.template.…`.
    pub fn via_field(mut self, field: &str) -> Self {
        self.paths = self.paths.iter().map(|p| join_path(field, p)).collect();
        self.errors = self
            .errors
            .into_iter()
            .map(|e| e.via_field(field))
            .collect();
        self
    }

    /// `ViaIndex`: `[i]` glued to the next segment.
    pub fn via_index(self, index: usize) -> Self {
        self.via_field(&format!("[{index}]"))
    }

    /// `ViaKey`: `[key]`.
    pub fn via_key(self, key: &str) -> Self {
        self.via_field(&format!("[{key}]"))
    }

    /// `ViaFieldIndex`: `field[i]`.
    pub fn via_field_index(self, field: &str, index: usize) -> Self {
        self.via_index(index).via_field(field)
    }

    /// `ViaFieldKey`: `field[key]`.
    pub fn via_field_key(self, field: &str, key: &str) -> Self {
        self.via_key(key).via_field(field)
    }

    /// Only the diagnostics of one level (the webhook rejects on errors, warns on warnings).
    pub fn filter(&self, level: Level) -> FieldError {
        let mut out = FieldError::none();
        for e in self.flat() {
            if e.level == level {
                out = out.also(e);
            }
        }
        out
    }

    /// The merged, sorted list of leaf errors, as `Error()` renders them (knative.dev/pkg
    /// `apis/field_error.go` `merge`: same level, message and details merge their paths,
    /// de-duplicated by `mergePaths`; paths sorted; errors by message, details, level).
    pub fn merged(&self) -> Vec<FieldError> {
        let mut merged: Vec<FieldError> = Vec::new();
        for e in self.flat() {
            if let Some(m) = merged
                .iter_mut()
                .find(|m| m.message == e.message && m.details == e.details && m.level == e.level)
            {
                // `mergePaths`: a path the merged error already holds is not added again (the
                // first error's own paths are kept as they are).
                for p in e.paths {
                    if !m.paths.contains(&p) {
                        m.paths.push(p);
                    }
                }
            } else {
                merged.push(e);
            }
        }
        for m in &mut merged {
            m.paths.sort();
        }
        merged.sort_by(|a, b| {
            a.message
                .cmp(&b.message)
                .then_with(|| a.details.cmp(&b.details))
                .then_with(|| a.level.cmp(&b.level))
        });
        merged
    }

    fn flat(&self) -> Vec<FieldError> {
        let mut out = Vec::new();
        if !self.message.is_empty() {
            out.push(FieldError {
                message: self.message.clone(),
                paths: self.paths.clone(),
                details: self.details.clone(),
                level: self.level,
                errors: Vec::new(),
            });
        }
        for e in &self.errors {
            out.extend(e.flat());
        }
        out
    }
}

/// Knative's `flatten`: joins path parts with dots, gluing `[i]` onto the previous segment
/// and dropping empty (current-field) segments.
fn join_path(prefix: &str, path: &str) -> String {
    let mut parts: Vec<String> = Vec::new();
    for part in [prefix, path] {
        for p in part.split('.') {
            if p.is_empty() {
                continue;
            }
            if p.starts_with('[') && p.ends_with(']') && !parts.is_empty() {
                parts.last_mut().expect("non-empty").push_str(p);
            } else {
                parts.push(p.to_string());
            }
        }
    }
    parts.join(".")
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let rendered: Vec<String> = self
            .merged()
            .into_iter()
            .map(|e| {
                let head = format!("{}: {}", e.message, e.paths.join(", "));
                if e.details.is_empty() {
                    head
                } else {
                    format!("{head}\n{}", e.details)
                }
            })
            .collect();
        f.write_str(&rendered.join("\n"))
    }
}

impl std::error::Error for FieldError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_like_knative() {
        let cases: Vec<(FieldError, &str)> = vec![
            (
                FieldError::out_of_bounds(101, 0, 100, "percent")
                    .via_index(0)
                    .via_field("traffic")
                    .via_field("spec"),
                "expected 0 <= 101 <= 100: spec.traffic[0].percent",
            ),
            (
                FieldError::multiple_one_of(&["revisionName", "configurationName"])
                    .via_field_index("traffic", 0)
                    .via_field("spec"),
                "expected exactly one, got both: spec.traffic[0].configurationName, spec.traffic[0].revisionName",
            ),
            (
                FieldError::generic("Traffic targets sum to 90, want 100", &["traffic"])
                    .via_field("spec"),
                "Traffic targets sum to 90, want 100: spec.traffic",
            ),
            (
                FieldError::disallowed(&["b"])
                    .also(FieldError::disallowed(&["a"]))
                    .also(FieldError::missing(&["c"])),
                "missing field(s): c\nmust not set the field(s): a, b",
            ),
            (FieldError::generic("no path", &[]), "no path: "),
            (
                FieldError::invalid_value(8012, "containerPort")
                    .with_details("8012 is a reserved port, please use a different value")
                    .via_field("ports")
                    .via_field_index("containers", 0),
                "invalid value: 8012: containers[0].ports.containerPort\n8012 is a reserved port, please use a different value",
            ),
            // apis/field_error.go `mergePaths`: a path repeated across merged errors appears
            // once (route_validation.go reports three equal tags as two errors naming [0]).
            (
                FieldError::generic("Multiple definitions for \"a\"", &["[1].tag", "[0].tag"])
                    .also(FieldError::generic(
                        "Multiple definitions for \"a\"",
                        &["[2].tag", "[0].tag"],
                    ))
                    .via_field("traffic"),
                "Multiple definitions for \"a\": traffic[0].tag, traffic[1].tag, traffic[2].tag",
            ),
            (
                FieldError::invalid_key_name("autoscaling.knative.dev/min-scale", "annotations")
                    .via_field("metadata"),
                "invalid key name \"autoscaling.knative.dev/min-scale\": metadata.annotations",
            ),
        ];
        for (err, want) in cases {
            assert_eq!(err.to_string(), want);
        }
    }

    #[test]
    fn empty_and_filter() {
        assert!(FieldError::none().is_empty());
        assert!(FieldError::none().also(FieldError::none()).is_empty());
        let e = FieldError::generic("warn", &["a"])
            .at_level(Level::Warning)
            .also(FieldError::missing(&["b"]));
        assert_eq!(e.filter(Level::Error).to_string(), "missing field(s): b");
        assert_eq!(e.filter(Level::Warning).to_string(), "warn: a");
    }
}
