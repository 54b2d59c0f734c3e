//! Parsing and validating the config file (Knative's `NewConfigFromMap` of each ConfigMap).
//!
//! The file is one YAML mapping from Knative ConfigMap names to that ConfigMap's `data`.
//! Values are read the way Knative's `configmap.Parse` helpers read them: every value is a
//! string (YAML numbers and booleans are stringified first, so `initial-scale: 0` and
//! `initial-scale: "0"` mean the same), keys that Knative does not know are ignored, and
//! legacy camelCase/dotted aliases are consulted only when the current name is absent.
//! Each map is then validated with Knative's rules, and the first violation is returned as
//! [`ConfigError::Invalid`] naming the map and the key, so that a bad file fails at startup
//! instead of misbehaving later.

// One file per ConfigMap, as Knative keeps each map's parser beside its type.
mod autoscaler;
mod defaults;
mod deployment;
mod domain;
mod features;
mod gc;
mod network;
mod observability;
pub(crate) mod template;
#[cfg(test)]
mod tests;

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde_json::Value;

use self::autoscaler::autoscaler;
use self::defaults::defaults;
use self::deployment::deployment;
use self::domain::domain;
use self::features::features;
use self::gc::gc;
use self::network::network;
use self::observability::observability;
use self::template::{Datum, Template};
use super::{
    AutoscalerConfig, Config, DefaultsConfig, DeploymentConfig, DomainConfig, FeaturesConfig, Flag,
    GcConfig, NetworkConfig, ObservabilityConfig, SecurePodDefaults,
};
use crate::duration::GoDuration;
use crate::meta::ObjectMeta;
use crate::quantity::Quantity;

/// A config key with a bad value, or a file that is not valid YAML.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file is not a YAML mapping of ConfigMap names to string maps.
    #[error("{0}")]
    Syntax(String),
    /// A key holds a value Knative would reject.
    #[error("{map}: {key}: {message}")]
    Invalid {
        map: String,
        key: String,
        message: String,
    },
}

/// ConfigMaps wisp reads.
const KNOWN_MAPS: [&str; 8] = [
    "config-autoscaler",
    "config-defaults",
    "config-domain",
    "config-network",
    "config-gc",
    "config-deployment",
    "config-features",
    "config-observability",
];

/// ConfigMaps that exist in Knative but configure nothing wisp implements; accepted so that
/// a config copied from a cluster loads, and otherwise ignored.
const IGNORED_MAPS: [&str; 3] = [
    "config-logging",
    "config-leader-election",
    "config-certmanager",
];

use crate::autoscaling::{TARGET_MIN, WINDOW_MAX, WINDOW_MIN};

// The label that makes a route cluster-local regardless of config-domain.
use crate::labels::VISIBILITY as VISIBILITY_LABEL;

/// The config file's ConfigMaps (name → data), each checked as [`Config::from_maps`] checks
/// it: what `wisp serve --config` seeds them with.
pub fn maps_from_yaml(
    input: &str,
) -> Result<BTreeMap<String, BTreeMap<String, String>>, ConfigError> {
    let maps = read_maps(input)?;
    Config::from_maps(&maps)?;
    Ok(maps)
}

impl Config {
    /// Parses the config file. Empty input (or only comments) gives [`Config::default`];
    /// maps that are absent keep their defaults.
    pub fn from_yaml(input: &str) -> Result<Config, ConfigError> {
        Config::from_maps(&read_maps(input)?)
    }

    /// The configuration the ConfigMaps' data give (name → data); maps that are absent keep
    /// their defaults, maps wisp does not read are ignored, `_`-prefixed keys (`_example`)
    /// are not settings.
    pub fn from_maps(
        maps: &BTreeMap<String, BTreeMap<String, String>>,
    ) -> Result<Config, ConfigError> {
        let mut cfg = Config::default();
        for (name, data) in maps {
            let Some(map) = KNOWN_MAPS.iter().find(|m| *m == name) else {
                continue; // a map wisp does not read
            };
            let d = Data { map, data };
            match *map {
                "config-autoscaler" => cfg.autoscaler = autoscaler(&d)?,
                "config-defaults" => cfg.defaults = defaults(&d)?,
                "config-domain" => cfg.domain = domain(&d)?,
                "config-network" => cfg.network = network(&d)?,
                "config-gc" => cfg.gc = gc(&d)?,
                "config-deployment" => cfg.deployment = deployment(&d)?,
                "config-features" => cfg.features = features(&d)?,
                "config-observability" => cfg.observability = observability(&d)?,
                _ => unreachable!("every known map is handled"),
            }
        }
        Ok(cfg)
    }
}

/// Reads the document into ConfigMap name → (key → string value).
fn read_maps(input: &str) -> Result<BTreeMap<String, BTreeMap<String, String>>, ConfigError> {
    let mut out = BTreeMap::new();
    if input.trim().is_empty() {
        return Ok(out);
    }
    let doc = parse_yaml(input).map_err(ConfigError::Syntax)?;
    let top = match doc {
        Value::Null => return Ok(out),
        Value::Object(o) => o,
        other => {
            return Err(ConfigError::Syntax(format!(
                "the config file must be a mapping of ConfigMap names (config-autoscaler, …), got {}",
                kind(&other)
            )));
        }
    };
    for (name, value) in top {
        if name.starts_with('_') {
            continue;
        }
        if !KNOWN_MAPS.contains(&name.as_str()) && !IGNORED_MAPS.contains(&name.as_str()) {
            return Err(ConfigError::Syntax(format!(
                "unknown top-level key {name:?}: expected one of {}",
                KNOWN_MAPS.join(", ")
            )));
        }
        let data = match value {
            Value::Null => BTreeMap::new(),
            Value::Object(o) => o.into_iter().map(|(k, v)| (k, stringify(v))).collect(),
            other => {
                return Err(ConfigError::Syntax(format!(
                    "{name}: expected a mapping of keys to values, got {}",
                    kind(&other)
                )));
            }
        };
        out.insert(name, data);
    }
    Ok(out)
}

/// Parses YAML into an untyped value, keeping numeric-looking spellings such as `0755` or
/// `1_000` as strings so that stringifying them gives back what the user wrote.
fn parse_yaml(input: &str) -> Result<Value, String> {
    let options = serde_saphyr::options! {
        leading_zero_numbers_as_strings: true,
        underscored_numbers_as_strings: true,
        non_finite_float_policy: serde_saphyr::NonFiniteFloatPolicy::AsString,
    };
    serde_saphyr::from_str_with_options(input, options).map_err(|e| e.to_string())
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

/// A ConfigMap value as the string Knative would see. Scalars become their text; a list of
/// scalars becomes a comma-separated list (so `registries-skipping-tag-resolving` can be a
/// YAML list); nested structures become JSON, which is valid YAML, for the keys whose value
/// Knative parses as embedded YAML (config-domain selectors, label selectors).
fn stringify(v: Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => s,
        Value::Array(items) if items.iter().all(|i| !i.is_array() && !i.is_object()) => items
            .into_iter()
            .map(stringify)
            .collect::<Vec<_>>()
            .join(","),
        other => other.to_string(),
    }
}

/// One ConfigMap's data plus its name, with Knative's typed accessors.
struct Data<'a> {
    map: &'static str,
    data: &'a BTreeMap<String, String>,
}

impl<'a> Data<'a> {
    /// The first of `keys` that is present (current name first, then legacy aliases, as
    /// Knative's `KeyPriority`), with its value trimmed.
    fn get(&self, keys: &[&'static str]) -> Option<(&'static str, &'a str)> {
        keys.iter()
            .find_map(|k| self.data.get(*k).map(|v| (*k, v.trim())))
    }

    /// A value its type's parser refused, worded as Knative's `configmap.As*` helpers word it
    /// (`failed to parse "key": <Go's parse error>`), under `failed to parse data: ` where
    /// the map's constructor wraps them (`NewConfigFromMap` of config-autoscaler): the
    /// message Knative's config webhook answers with.
    fn unparsable(&self, key: &str, go_error: impl std::fmt::Display) -> ConfigError {
        let message = format!("failed to parse {key:?}: {go_error}");
        match self.map {
            "config-autoscaler" => self.invalid(key, format!("failed to parse data: {message}")),
            _ => self.invalid(key, message),
        }
    }

    fn invalid(&self, key: &str, message: impl Into<String>) -> ConfigError {
        ConfigError::Invalid {
            map: self.map.to_string(),
            key: key.to_string(),
            message: message.into(),
        }
    }

    fn string(&self, keys: &[&'static str], target: &mut String) {
        if let Some((_, v)) = self.get(keys) {
            *target = v.to_string();
        }
    }

    /// Go's `strconv.ParseBool`.
    fn bool(&self, keys: &[&'static str], target: &mut bool) -> Result<(), ConfigError> {
        if let Some((k, v)) = self.get(keys) {
            *target = match super::parse_go_bool(v) {
                Some(b) => b,
                None => {
                    return Err(self.unparsable(
                        k,
                        format!("strconv.ParseBool: parsing {v:?}: invalid syntax"),
                    ));
                }
            };
        }
        Ok(())
    }

    /// Go's `strconv.ParseFloat`, minus NaN and infinities, which would slip past every
    /// range check below.
    fn f64(&self, keys: &[&'static str], target: &mut f64) -> Result<(), ConfigError> {
        if let Some((k, v)) = self.get(keys) {
            *target = v
                .parse::<f64>()
                .ok()
                .filter(|f| f.is_finite())
                .ok_or_else(|| {
                    self.unparsable(
                        k,
                        format!("strconv.ParseFloat: parsing {v:?}: invalid syntax"),
                    )
                })?;
        }
        Ok(())
    }

    fn int<T: std::str::FromStr<Err = std::num::ParseIntError>>(
        &self,
        keys: &[&'static str],
        target: &mut T,
    ) -> Result<(), ConfigError> {
        if let Some((k, v)) = self.get(keys) {
            *target = v.parse::<T>().map_err(|e| {
                let why = match e.kind() {
                    std::num::IntErrorKind::PosOverflow | std::num::IntErrorKind::NegOverflow => {
                        "value out of range"
                    }
                    _ => "invalid syntax",
                };
                self.unparsable(k, format!("strconv.ParseInt: parsing {v:?}: {why}"))
            })?;
        }
        Ok(())
    }

    fn duration(&self, keys: &[&'static str], target: &mut GoDuration) -> Result<(), ConfigError> {
        if let Some((k, v)) = self.get(keys) {
            *target = GoDuration::parse(v).map_err(|e| self.unparsable(k, e))?;
        }
        Ok(())
    }

    /// A Kubernetes resource quantity ([`Quantity`]), kept in its canonical form as Go keeps
    /// the parsed `resource.Quantity` (`1000m` is `1`).
    fn quantity(
        &self,
        keys: &[&'static str],
        target: &mut Option<String>,
    ) -> Result<(), ConfigError> {
        if let Some((k, v)) = self.get(keys) {
            let q = Quantity::parse(v)
                .map_err(|_| {
                    // resource.ParseQuantity's ErrFormatWrong.
                    self.unparsable(
                        k,
                        "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
                    )
                })?;
            *target = Some(q.to_string());
        }
        Ok(())
    }

    fn flag(&self, key: &'static str, target: &mut Flag) -> Result<(), ConfigError> {
        if let Some((k, v)) = self.get(&[key]) {
            *target = if v.eq_ignore_ascii_case("enabled") {
                Flag::Enabled
            } else if v.eq_ignore_ascii_case("disabled") {
                Flag::Disabled
            } else if v.eq_ignore_ascii_case("allowed") {
                Flag::Allowed
            } else {
                return Err(
                    self.invalid(k, format!("{v:?} is not one of Enabled, Disabled, Allowed"))
                );
            };
        }
        Ok(())
    }

    /// The TLS switches of config-network: `Enabled`/`Disabled` (case-insensitive); the
    /// legacy `internal-encryption` key was a boolean, so `true`/`false` are accepted too.
    fn enabled(&self, keys: &[&'static str], target: &mut bool) -> Result<(), ConfigError> {
        if let Some((k, v)) = self.get(keys) {
            *target = if v.eq_ignore_ascii_case("enabled") || v.eq_ignore_ascii_case("true") {
                true
            } else if v.eq_ignore_ascii_case("disabled") || v.eq_ignore_ascii_case("false") {
                false
            } else {
                return Err(self.invalid(k, format!("{v:?} is not one of Enabled, Disabled")));
            };
        }
        Ok(())
    }
}

// Helpers more than one map uses.

/// RFC 1123 subdomain, as Kubernetes validates DNS names.
fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

fn one_of(d: &Data, key: &str, v: &str, allowed: &[&str]) -> Result<String, ConfigError> {
    allowed
        .iter()
        .find(|a| a.eq_ignore_ascii_case(v))
        .map(|a| a.to_string())
        .ok_or_else(|| d.invalid(key, format!("{v:?} is not one of {}", allowed.join(", "))))
}
