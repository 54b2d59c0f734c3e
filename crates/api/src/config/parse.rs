//! Parsing and validating the config file (reference §4).
//!
//! The file is one YAML mapping from Knative ConfigMap names to that ConfigMap's `data`.
//! Values are read the way Knative's `configmap.Parse` helpers read them: every value is a
//! string (YAML numbers and booleans are stringified first, so `initial-scale: 0` and
//! `initial-scale: "0"` mean the same), keys that Knative does not know are ignored, and
//! legacy camelCase/dotted aliases are consulted only when the current name is absent.
//! Each map is then validated with Knative's rules, and the first violation is returned as
//! [`ConfigError::Invalid`] naming the map and the key, so that a bad file fails at startup
//! instead of misbehaving later.

mod template;
#[cfg(test)]
mod tests;

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde_json::Value;

use self::template::{Datum, Template};
use super::{
    AutoscalerConfig, Config, DefaultsConfig, DeploymentConfig, DomainConfig, FeaturesConfig, Flag,
    GcConfig, NetworkConfig, SecurePodDefaults,
};
use crate::duration::{GoDuration, HOUR, SECOND};
use crate::meta::ObjectMeta;

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
const KNOWN_MAPS: [&str; 7] = [
    "config-autoscaler",
    "config-defaults",
    "config-domain",
    "config-network",
    "config-gc",
    "config-deployment",
    "config-features",
];

/// ConfigMaps that exist in Knative but configure nothing wisp implements; accepted so that
/// a config copied from a cluster loads, and otherwise ignored.
const IGNORED_MAPS: [&str; 4] = [
    "config-observability",
    "config-logging",
    "config-leader-election",
    "config-certmanager",
];

/// Knative's lower bound for any autoscaling target (`autoscaling.TargetMin`).
const TARGET_MIN: f64 = 0.01;
/// Knative's `autoscaling.WindowMin` / `WindowMax`.
const WINDOW_MIN: GoDuration = GoDuration(6 * SECOND);
const WINDOW_MAX: GoDuration = GoDuration(HOUR);

/// The label that makes a route cluster-local regardless of config-domain.
const VISIBILITY_LABEL: &str = "networking.knative.dev/visibility";

impl Config {
    /// Parses the config file. Empty input (or only comments) gives [`Config::default`];
    /// maps that are absent keep their defaults.
    pub fn from_yaml(input: &str) -> Result<Config, ConfigError> {
        let maps = read_maps(input)?;
        let mut cfg = Config::default();
        for (name, data) in &maps {
            let Some(map) = KNOWN_MAPS.iter().find(|m| *m == name) else {
                continue; // an ignored map (read_maps rejected everything else)
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
            *target = match v {
                "1" | "t" | "T" | "true" | "TRUE" | "True" => true,
                "0" | "f" | "F" | "false" | "FALSE" | "False" => false,
                _ => return Err(self.invalid(k, format!("failed to parse {v:?}: invalid syntax"))),
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
                .ok_or_else(|| self.invalid(k, format!("failed to parse {v:?}: invalid syntax")))?;
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
                self.invalid(k, format!("failed to parse {v:?}: {why}"))
            })?;
        }
        Ok(())
    }

    fn duration(&self, keys: &[&'static str], target: &mut GoDuration) -> Result<(), ConfigError> {
        if let Some((k, v)) = self.get(keys) {
            *target = GoDuration::parse(v)
                .map_err(|e| self.invalid(k, format!("failed to parse {v:?}: {e}")))?;
        }
        Ok(())
    }

    /// A Kubernetes resource quantity, kept as the string the user wrote.
    fn quantity(
        &self,
        keys: &[&'static str],
        target: &mut Option<String>,
    ) -> Result<(), ConfigError> {
        if let Some((k, v)) = self.get(keys) {
            if !is_quantity(v) {
                return Err(self.invalid(k, format!("failed to parse quantity {v:?}")));
            }
            *target = Some(v.to_string());
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

/// Kubernetes' quantity grammar: a signed decimal number followed by an optional binary
/// (`Ki`…`Ei`) or decimal (`n u m k M G T P E`) suffix or a decimal exponent (`e3`, `E-2`).
fn is_quantity(s: &str) -> bool {
    let body = s.strip_prefix(['+', '-']).unwrap_or(s);
    let num_len = body
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(body.len());
    let (num, suffix) = body.split_at(num_len);
    let digits = num.chars().filter(char::is_ascii_digit).count();
    if digits == 0 || num.matches('.').count() > 1 {
        return false;
    }
    match suffix {
        "" | "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei" | "n" | "u" | "m" | "k" | "M" | "G" | "T"
        | "P" | "E" => true,
        exp => {
            let Some(rest) = exp.strip_prefix(['e', 'E']) else {
                return false;
            };
            let rest = rest.strip_prefix(['+', '-']).unwrap_or(rest);
            !rest.is_empty() && rest.chars().all(|c| c.is_ascii_digit())
        }
    }
}

// ---------------------------------------------------------------------------------------
// config-autoscaler (pkg/autoscaler/config/config.go)

fn autoscaler(d: &Data) -> Result<AutoscalerConfig, ConfigError> {
    let mut c = AutoscalerConfig::default();
    d.f64(
        &["container-concurrency-target-percentage"],
        &mut c.container_concurrency_target_fraction,
    )?;
    d.f64(
        &["container-concurrency-target-default"],
        &mut c.container_concurrency_target_default,
    )?;
    d.f64(
        &["requests-per-second-target-default"],
        &mut c.rps_target_default,
    )?;
    d.f64(&["target-burst-capacity"], &mut c.target_burst_capacity)?;
    d.duration(&["stable-window"], &mut c.stable_window)?;
    d.f64(&["panic-window-percentage"], &mut c.panic_window_percentage)?;
    d.f64(
        &["panic-threshold-percentage"],
        &mut c.panic_threshold_percentage,
    )?;
    d.f64(&["max-scale-up-rate"], &mut c.max_scale_up_rate)?;
    d.f64(&["max-scale-down-rate"], &mut c.max_scale_down_rate)?;
    d.bool(&["enable-scale-to-zero"], &mut c.enable_scale_to_zero)?;
    d.duration(
        &["scale-to-zero-grace-period"],
        &mut c.scale_to_zero_grace_period,
    )?;
    d.duration(
        &["scale-to-zero-pod-retention-period"],
        &mut c.scale_to_zero_pod_retention_period,
    )?;
    d.string(&["pod-autoscaler-class"], &mut c.pod_autoscaler_class);
    d.f64(&["activator-capacity"], &mut c.activator_capacity)?;
    d.int(&["initial-scale"], &mut c.initial_scale)?;
    d.bool(
        &["allow-zero-initial-scale"],
        &mut c.allow_zero_initial_scale,
    )?;
    d.int(&["min-scale"], &mut c.min_scale)?;
    d.int(&["max-scale"], &mut c.max_scale)?;
    d.duration(&["scale-down-delay"], &mut c.scale_down_delay)?;
    d.int(&["max-scale-limit"], &mut c.max_scale_limit)?;

    // Percentages above 1 are percent; values in (0, 1] are a legacy fraction spelling.
    if c.container_concurrency_target_fraction > 1.0 {
        c.container_concurrency_target_fraction /= 100.0;
    }

    // Knative requires at least 6s here; wisp only requires a positive period, so that
    // demos and tests can scale to zero in seconds (docs/differences.md).
    if c.scale_to_zero_grace_period.0 <= 0 {
        return Err(d.invalid(
            "scale-to-zero-grace-period",
            format!(
                "scale-to-zero-grace-period must be positive, was: {}",
                c.scale_to_zero_grace_period
            ),
        ));
    }
    if c.scale_down_delay.0 < 0 {
        return Err(d.invalid(
            "scale-down-delay",
            format!(
                "scale-down-delay cannot be negative, was: {}",
                c.scale_down_delay
            ),
        ));
    }
    if !c.scale_down_delay.is_whole_seconds() {
        return Err(d.invalid(
            "scale-down-delay",
            format!(
                "scale-down-delay = {}, must be specified with at most second precision",
                c.scale_down_delay
            ),
        ));
    }
    if c.scale_to_zero_pod_retention_period.0 < 0 {
        return Err(d.invalid(
            "scale-to-zero-pod-retention-period",
            format!(
                "scale-to-zero-pod-retention-period cannot be negative, was: {}",
                c.scale_to_zero_pod_retention_period
            ),
        ));
    }
    if c.target_burst_capacity < 0.0 && c.target_burst_capacity != -1.0 {
        return Err(d.invalid(
            "target-burst-capacity",
            format!(
                "target-burst-capacity must be either non-negative or -1 (for unlimited), was: {}",
                c.target_burst_capacity
            ),
        ));
    }
    if c.container_concurrency_target_fraction <= 0.0
        || c.container_concurrency_target_fraction > 1.0
    {
        let raw = d
            .get(&["container-concurrency-target-percentage"])
            .map_or(String::new(), |(_, v)| v.to_string());
        return Err(d.invalid(
            "container-concurrency-target-percentage",
            format!(
                "container-concurrency-target-percentage = {raw} is outside of valid range of (0, 100]"
            ),
        ));
    }
    let target = c.container_concurrency_target_fraction * c.container_concurrency_target_default;
    if target < TARGET_MIN {
        return Err(d.invalid(
            "container-concurrency-target-default",
            format!(
                "container-concurrency-target-percentage and container-concurrency-target-default \
                 yield target concurrency of {target}, can't be less than {TARGET_MIN}"
            ),
        ));
    }
    if c.rps_target_default < TARGET_MIN {
        return Err(d.invalid(
            "requests-per-second-target-default",
            format!(
                "requests-per-second-target-default must be at least {TARGET_MIN}, was: {}",
                c.rps_target_default
            ),
        ));
    }
    if c.activator_capacity < 1.0 {
        return Err(d.invalid(
            "activator-capacity",
            format!(
                "activator-capacity = {}, must be at least 1",
                c.activator_capacity
            ),
        ));
    }
    if c.max_scale_up_rate <= 1.0 {
        return Err(d.invalid(
            "max-scale-up-rate",
            format!(
                "max-scale-up-rate = {}, must be greater than 1.0",
                c.max_scale_up_rate
            ),
        ));
    }
    if c.max_scale_down_rate <= 1.0 {
        return Err(d.invalid(
            "max-scale-down-rate",
            format!(
                "max-scale-down-rate = {}, must be greater than 1.0",
                c.max_scale_down_rate
            ),
        ));
    }
    if c.stable_window < WINDOW_MIN || c.stable_window > WINDOW_MAX {
        return Err(d.invalid(
            "stable-window",
            format!(
                "stable-window = {}, must be in [{WINDOW_MIN}; {WINDOW_MAX}] range",
                c.stable_window
            ),
        ));
    }
    if !c.stable_window.is_whole_seconds() {
        return Err(d.invalid(
            "stable-window",
            format!(
                "stable-window = {}, must be specified with at most second precision",
                c.stable_window
            ),
        ));
    }
    if !(1.0..=100.0).contains(&c.panic_window_percentage) {
        return Err(d.invalid(
            "panic-window-percentage",
            format!(
                "panic-window-percentage = {}, must be in [1, 100] interval",
                c.panic_window_percentage
            ),
        ));
    }
    if c.initial_scale < 0 || (c.initial_scale == 0 && !c.allow_zero_initial_scale) {
        return Err(d.invalid(
            "initial-scale",
            format!(
                "initial-scale = {}, must be at least 0 (or at least 1 when allow-zero-initial-scale is false)",
                c.initial_scale
            ),
        ));
    }
    if c.min_scale < 0 {
        return Err(d.invalid(
            "min-scale",
            format!("min-scale = {}, must be at least 0", c.min_scale),
        ));
    }
    if c.max_scale_limit < 0 {
        return Err(d.invalid(
            "max-scale-limit",
            format!(
                "max-scale-limit = {}, must be at least 0",
                c.max_scale_limit
            ),
        ));
    }
    if c.max_scale < 0 {
        return Err(d.invalid(
            "max-scale",
            format!("max-scale = {}, must be at least 0", c.max_scale),
        ));
    }
    if c.max_scale_limit > 0 && (c.max_scale < 1 || c.max_scale > c.max_scale_limit) {
        let shown = if c.max_scale == 0 {
            "0 (unlimited)".to_string()
        } else {
            c.max_scale.to_string()
        };
        return Err(d.invalid(
            "max-scale",
            format!(
                "max-scale = {shown}, must be in [1, {limit}] range when max-scale-limit is {limit}",
                limit = c.max_scale_limit
            ),
        ));
    }
    if c.max_scale > 0 && c.min_scale > c.max_scale {
        return Err(d.invalid(
            "min-scale",
            format!(
                "min-scale ({}) must be less than or equal to max-scale ({})",
                c.min_scale, c.max_scale
            ),
        ));
    }
    Ok(c)
}

// ---------------------------------------------------------------------------------------
// config-defaults (pkg/apis/config/defaults.go)

fn defaults(d: &Data) -> Result<DefaultsConfig, ConfigError> {
    let mut c = DefaultsConfig::default();
    d.int(
        &["revision-timeout-seconds"],
        &mut c.revision_timeout_seconds,
    )?;
    d.int(
        &["max-revision-timeout-seconds"],
        &mut c.max_revision_timeout_seconds,
    )?;
    // Absent means "the same as the request timeout" (Knative's behaviour), so the default
    // follows a user-configured revision-timeout-seconds.
    c.revision_response_start_timeout_seconds = c.revision_timeout_seconds;
    d.int(
        &["revision-response-start-timeout-seconds"],
        &mut c.revision_response_start_timeout_seconds,
    )?;
    d.int(
        &["revision-idle-timeout-seconds"],
        &mut c.revision_idle_timeout_seconds,
    )?;
    d.quantity(&["revision-cpu-request"], &mut c.revision_cpu_request)?;
    d.quantity(&["revision-memory-request"], &mut c.revision_memory_request)?;
    d.quantity(
        &["revision-ephemeral-storage-request"],
        &mut c.revision_ephemeral_storage_request,
    )?;
    d.quantity(&["revision-cpu-limit"], &mut c.revision_cpu_limit)?;
    d.quantity(&["revision-memory-limit"], &mut c.revision_memory_limit)?;
    d.quantity(
        &["revision-ephemeral-storage-limit"],
        &mut c.revision_ephemeral_storage_limit,
    )?;
    d.string(&["container-name-template"], &mut c.container_name_template);
    d.string(
        &["init-container-name-template"],
        &mut c.init_container_name_template,
    );
    d.int(&["container-concurrency"], &mut c.container_concurrency)?;
    d.int(
        &["container-concurrency-max-limit"],
        &mut c.container_concurrency_max_limit,
    )?;
    d.bool(
        &["allow-container-concurrency-zero"],
        &mut c.allow_container_concurrency_zero,
    )?;
    if let Some((_, v)) = d.get(&["enable-service-links"]) {
        // Tri-state: anything but true/false means "leave the PodSpec field unset".
        c.enable_service_links = if v.eq_ignore_ascii_case("true") {
            Some(true)
        } else if v.eq_ignore_ascii_case("false") {
            Some(false)
        } else {
            None
        };
    }

    // A zero default timeout would make every defaulted revision time out immediately.
    if c.revision_timeout_seconds < 1 {
        return Err(d.invalid(
            "revision-timeout-seconds",
            format!(
                "revision-timeout-seconds = {}, must be at least 1",
                c.revision_timeout_seconds
            ),
        ));
    }
    if c.revision_timeout_seconds > c.max_revision_timeout_seconds {
        return Err(d.invalid(
            "revision-timeout-seconds",
            format!(
                "revision-timeout-seconds ({}) cannot be greater than max-revision-timeout-seconds ({})",
                c.revision_timeout_seconds, c.max_revision_timeout_seconds
            ),
        ));
    }
    for (key, value) in [
        (
            "revision-response-start-timeout-seconds",
            c.revision_response_start_timeout_seconds,
        ),
        (
            "revision-idle-timeout-seconds",
            c.revision_idle_timeout_seconds,
        ),
    ] {
        if value < 0 {
            return Err(d.invalid(key, format!("{key} = {value}, must be at least 0")));
        }
        if value > c.revision_timeout_seconds {
            return Err(d.invalid(
                key,
                format!(
                    "{key} ({value}) cannot be greater than revision-timeout-seconds ({})",
                    c.revision_timeout_seconds
                ),
            ));
        }
    }
    if c.container_concurrency_max_limit < 1 {
        return Err(d.invalid(
            "container-concurrency-max-limit",
            crate::FieldError::out_of_bounds(c.container_concurrency_max_limit, 1, i32::MAX, "")
                .message,
        ));
    }
    if c.container_concurrency < 0 || c.container_concurrency > c.container_concurrency_max_limit {
        return Err(d.invalid(
            "container-concurrency",
            crate::FieldError::out_of_bounds(
                c.container_concurrency,
                0,
                c.container_concurrency_max_limit,
                "",
            )
            .message,
        ));
    }
    let empty = ObjectMeta::default();
    for (key, src) in [
        ("container-name-template", &c.container_name_template),
        (
            "init-container-name-template",
            &c.init_container_name_template,
        ),
    ] {
        // Knative executes the template over an empty ObjectMeta to prove it renders.
        let t = Template::parse(src).map_err(|e| d.invalid(key, e))?;
        t.render(&|f| meta_field(&empty, f))
            .map_err(|e| d.invalid(key, format!("error executing template: {e}")))?;
    }
    Ok(c)
}

/// The fields of a Kubernetes `ObjectMeta` a name template may use, by their Go names.
fn meta_field<'a>(meta: &'a ObjectMeta, field: &str) -> Option<Datum<'a>> {
    let s = |v: &'a String| Some(Datum::Str(Cow::Borrowed(v.as_str())));
    match field {
        "Name" => s(&meta.name),
        "GenerateName" => s(&meta.generate_name),
        "Namespace" => s(&meta.namespace),
        "UID" => s(&meta.uid),
        "ResourceVersion" => s(&meta.resource_version),
        "Generation" => Some(Datum::Str(Cow::Owned(meta.generation.to_string()))),
        "Labels" => Some(Datum::Map(&meta.labels)),
        "Annotations" => Some(Datum::Map(&meta.annotations)),
        _ => None,
    }
}

impl DefaultsConfig {
    /// `container-name-template` rendered over the parent's metadata (Knative's
    /// `UserContainerName`): the default name of a Revision's containers. A template that
    /// fails to render gives "" as in Knative (validation then reports the missing name);
    /// the template was already checked when the config was loaded.
    pub fn container_name(&self, parent: &ObjectMeta) -> String {
        render_name(&self.container_name_template, parent)
    }

    /// `init-container-name-template` rendered over the parent's metadata.
    pub fn init_container_name(&self, parent: &ObjectMeta) -> String {
        render_name(&self.init_container_name_template, parent)
    }
}

fn render_name(src: &str, meta: &ObjectMeta) -> String {
    Template::parse(src)
        .and_then(|t| t.render(&|f| meta_field(meta, f)))
        .unwrap_or_default()
}

// ---------------------------------------------------------------------------------------
// config-domain (pkg/reconciler/route/config/domain.go)

fn domain(d: &Data) -> Result<DomainConfig, ConfigError> {
    // A config-domain that is present replaces the shipped example.com catch-all entirely.
    let mut domains = BTreeMap::new();
    for (name, raw) in d.data {
        if name.starts_with('_') {
            continue;
        }
        if !is_dns_subdomain(name) {
            return Err(d.invalid(
                name,
                "a domain must be a lowercase RFC 1123 subdomain (e.g. example.com)",
            ));
        }
        let selector = parse_selector(raw).map_err(|e| d.invalid(name, e))?;
        domains.insert(name.clone(), selector);
    }
    Ok(DomainConfig { domains })
}

/// A config-domain value: `""` (catch-all) or YAML `selector: {label: value, …}`. Like
/// Knative's lenient YAML unmarshalling, other keys are ignored.
fn parse_selector(raw: &str) -> Result<BTreeMap<String, String>, String> {
    if raw.trim().is_empty() {
        return Ok(BTreeMap::new());
    }
    let value = parse_yaml(raw).map_err(|e| format!("failed to parse domain selector: {e}"))?;
    let selector = match value {
        Value::Null => return Ok(BTreeMap::new()),
        Value::Object(mut o) => o.remove("selector").unwrap_or(Value::Null),
        other => {
            return Err(format!(
                "expected empty or `selector: {{label: value}}`, got {}",
                kind(&other)
            ));
        }
    };
    match selector {
        Value::Null => Ok(BTreeMap::new()),
        Value::Object(o) => o
            .into_iter()
            .map(|(k, v)| match v {
                Value::Array(_) | Value::Object(_) => {
                    Err(format!("selector label {k:?} must have a scalar value"))
                }
                v => Ok((k, stringify(v))),
            })
            .collect(),
        other => Err(format!(
            "selector must be a mapping of labels, got {}",
            kind(&other)
        )),
    }
}

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

impl DomainConfig {
    /// The domain suffix for a Route with these labels (Knative's `LookupDomainForLabels`):
    /// routes labelled `networking.knative.dev/visibility: cluster-local` and routes that no
    /// selector matches get `svc.<cluster_domain>`; otherwise the matching selector with the
    /// most labels wins, ties going to the lexicographically smallest domain.
    pub fn lookup(&self, labels: &BTreeMap<String, String>, cluster_domain: &str) -> String {
        let cluster_local = format!("svc.{cluster_domain}");
        if labels.get(VISIBILITY_LABEL).map(String::as_str) == Some("cluster-local") {
            return cluster_local;
        }
        // BTreeMap iterates domains in ascending order, so keeping only strictly more
        // specific matches leaves the smallest domain among equally specific ones.
        let mut best: Option<(&String, usize)> = None;
        for (domain, selector) in &self.domains {
            let matches = selector.iter().all(|(k, v)| labels.get(k) == Some(v));
            if matches && best.is_none_or(|(_, n)| selector.len() > n) {
                best = Some((domain, selector.len()));
            }
        }
        best.map_or(cluster_local, |(d, _)| d.clone())
    }
}

// ---------------------------------------------------------------------------------------
// config-network (knative.dev/networking/pkg/config/config.go)

fn network(d: &Data) -> Result<NetworkConfig, ConfigError> {
    let mut c = NetworkConfig::default();
    d.string(&["ingress-class", "ingress.class"], &mut c.ingress_class);
    d.string(
        &["certificate-class", "certificate.class"],
        &mut c.certificate_class,
    );
    d.string(
        &["domain-template", "domainTemplate"],
        &mut c.domain_template,
    );
    d.string(&["tag-template", "tagTemplate"], &mut c.tag_template);
    d.enabled(
        &["external-domain-tls", "auto-tls", "autoTLS"],
        &mut c.external_domain_tls,
    )?;
    d.enabled(
        &["cluster-local-domain-tls"],
        &mut c.cluster_local_domain_tls,
    )?;
    d.enabled(
        &["system-internal-tls", "internal-encryption"],
        &mut c.system_internal_tls,
    )?;
    if let Some((k, v)) = d.get(&["http-protocol", "httpProtocol"]) {
        c.http_protocol = ["Enabled", "Redirected", "Disabled"]
            .into_iter()
            .find(|p| p.eq_ignore_ascii_case(v))
            .ok_or_else(|| {
                d.invalid(
                    k,
                    format!("{v:?} is not one of Enabled, Redirected, Disabled"),
                )
            })?
            .to_string();
    }
    d.int(
        &["rollout-duration", "rolloutDuration"],
        &mut c.rollout_duration_seconds,
    )?;
    d.bool(
        &["autocreate-cluster-domain-claims"],
        &mut c.autocreate_cluster_domain_claims,
    )?;
    d.string(
        &["namespace-wildcard-cert-selector"],
        &mut c.namespace_wildcard_cert_selector,
    );
    d.bool(
        &["enable-mesh-pod-addressability"],
        &mut c.enable_mesh_pod_addressability,
    )?;
    if let Some((k, v)) = d.get(&["mesh-compatibility-mode"]) {
        c.mesh_compatibility_mode = one_of(d, k, v, &["auto", "enabled", "disabled"])?;
    }
    if let Some((k, v)) = d.get(&["default-external-scheme"]) {
        c.default_external_scheme = one_of(d, k, v, &["http", "https"])?;
    }

    if c.rollout_duration_seconds < 0 {
        let (k, _) = d
            .get(&["rollout-duration", "rolloutDuration"])
            .unwrap_or(("rollout-duration", ""));
        return Err(d.invalid(
            k,
            format!(
                "rollout-duration must be a non-negative integer, was: {}",
                c.rollout_duration_seconds
            ),
        ));
    }
    if !c.namespace_wildcard_cert_selector.is_empty() {
        match parse_yaml(&c.namespace_wildcard_cert_selector) {
            Ok(Value::Object(_) | Value::Null) => {}
            Ok(other) => {
                return Err(d.invalid(
                    "namespace-wildcard-cert-selector",
                    format!("expected a label selector mapping, got {}", kind(&other)),
                ));
            }
            Err(e) => {
                return Err(d.invalid(
                    "namespace-wildcard-cert-selector",
                    format!("failed to parse label selector: {e}"),
                ));
            }
        }
    }
    let domain_key = d
        .get(&["domain-template", "domainTemplate"])
        .map_or("domain-template", |(k, _)| k);
    check_domain_template(&c.domain_template).map_err(|e| d.invalid(domain_key, e))?;
    let tag_key = d
        .get(&["tag-template", "tagTemplate"])
        .map_or("tag-template", |(k, _)| k);
    Template::parse(&c.tag_template)
        .and_then(|t| t.render(&|f| tag_field(f, "v2", "foo")))
        .map_err(|e| d.invalid(tag_key, e))?;
    Ok(c)
}

fn one_of(d: &Data, key: &str, v: &str, allowed: &[&str]) -> Result<String, ConfigError> {
    allowed
        .iter()
        .find(|a| a.eq_ignore_ascii_case(v))
        .map(|a| a.to_string())
        .ok_or_else(|| d.invalid(key, format!("{v:?} is not one of {}", allowed.join(", "))))
}

/// Knative renders the domain template for a sample route and requires a bare hostname;
/// wisp additionally requires that the name appears, or every route would share one host.
fn check_domain_template(src: &str) -> Result<(), String> {
    let t = Template::parse(src)?;
    let empty = BTreeMap::new();
    let render =
        |name: &str| t.render(&|f| domain_field(f, name, "bar", "baz.com", &empty, &empty));
    let host = render("foo")?;
    if host.is_empty() || !is_dns_subdomain(&host) {
        return Err(format!(
            "domain template {src:?} renders {host:?} for a sample route, which is not a valid hostname"
        ));
    }
    if render("qux")? == host {
        return Err(format!(
            "domain template {src:?} must contain {{{{.Name}}}}"
        ));
    }
    Ok(())
}

fn domain_field<'a>(
    field: &str,
    name: &'a str,
    namespace: &'a str,
    domain: &'a str,
    annotations: &'a BTreeMap<String, String>,
    labels: &'a BTreeMap<String, String>,
) -> Option<Datum<'a>> {
    match field {
        "Name" => Some(Datum::Str(Cow::Borrowed(name))),
        "Namespace" => Some(Datum::Str(Cow::Borrowed(namespace))),
        "Domain" => Some(Datum::Str(Cow::Borrowed(domain))),
        "Annotations" => Some(Datum::Map(annotations)),
        "Labels" => Some(Datum::Map(labels)),
        _ => None,
    }
}

fn tag_field<'a>(field: &str, tag: &'a str, name: &'a str) -> Option<Datum<'a>> {
    match field {
        "Tag" => Some(Datum::Str(Cow::Borrowed(tag))),
        "Name" => Some(Datum::Str(Cow::Borrowed(name))),
        _ => None,
    }
}

impl NetworkConfig {
    /// Renders `domain-template` for a route (Knative's `DomainNameFromTemplate`): `name` is
    /// the route name (or the tag-template result for a tagged target), `domain` the
    /// config-domain suffix. Errors only if the template needs a field it cannot have.
    pub fn render_domain(
        &self,
        name: &str,
        namespace: &str,
        domain: &str,
        annotations: &BTreeMap<String, String>,
        labels: &BTreeMap<String, String>,
    ) -> Result<String, ConfigError> {
        let invalid = |message: String| ConfigError::Invalid {
            map: "config-network".into(),
            key: "domain-template".into(),
            message,
        };
        Template::parse(&self.domain_template)
            .and_then(|t| {
                t.render(&|f| domain_field(f, name, namespace, domain, annotations, labels))
            })
            .map_err(invalid)
    }

    /// Renders `tag-template` (Knative's `HostnameFromTemplate` input for tagged targets):
    /// the name fed to the domain template for traffic tag `tag` of route `name`.
    pub fn render_tag(&self, tag: &str, name: &str) -> Result<String, ConfigError> {
        Template::parse(&self.tag_template)
            .and_then(|t| t.render(&|f| tag_field(f, tag, name)))
            .map_err(|message| ConfigError::Invalid {
                map: "config-network".into(),
                key: "tag-template".into(),
                message,
            })
    }
}

// ---------------------------------------------------------------------------------------
// config-gc (pkg/gc/config.go)

fn gc(d: &Data) -> Result<GcConfig, ConfigError> {
    let mut c = GcConfig::default();
    for (key, target) in [
        ("retain-since-create-time", &mut c.retain_since_create_time),
        (
            "retain-since-last-active-time",
            &mut c.retain_since_last_active_time,
        ),
    ] {
        let Some((k, v)) = d.get(&[key]) else {
            continue;
        };
        *target = if v.eq_ignore_ascii_case("disabled") {
            None
        } else {
            let dur = GoDuration::parse(v)
                .map_err(|e| d.invalid(k, format!("failed to parse {v:?}: {e}")))?;
            if dur.0 < 0 {
                return Err(d.invalid(k, format!("{k} = {dur}, must be non-negative")));
            }
            Some(dur)
        };
    }
    for (key, target) in [
        ("min-non-active-revisions", &mut c.min_non_active_revisions),
        ("max-non-active-revisions", &mut c.max_non_active_revisions),
    ] {
        let Some((k, v)) = d.get(&[key]) else {
            continue;
        };
        *target = if v.eq_ignore_ascii_case("disabled") {
            None
        } else {
            let n: i64 = v.parse().map_err(|_| {
                d.invalid(
                    k,
                    format!("failed to parse {v:?}: expected an integer or \"disabled\""),
                )
            })?;
            if n < 0 {
                return Err(d.invalid(k, format!("{k} = {n}, must be non-negative")));
            }
            Some(n)
        };
    }
    if let (Some(min), Some(max)) = (c.min_non_active_revisions, c.max_non_active_revisions)
        && min > max
    {
        return Err(d.invalid(
            "min-non-active-revisions",
            format!("min-non-active-revisions ({min}) must be <= max-non-active-revisions ({max})"),
        ));
    }
    Ok(c)
}

// ---------------------------------------------------------------------------------------
// config-deployment (pkg/deployment/config.go)

fn deployment(d: &Data) -> Result<DeploymentConfig, ConfigError> {
    let mut c = DeploymentConfig::default();
    d.string(
        &["queue-sidecar-image", "queueSidecarImage"],
        &mut c.queue_sidecar_image,
    );
    if let Some((_, v)) = d.get(&["registries-skipping-tag-resolving"]) {
        let mut regs: Vec<String> = Vec::new();
        for r in v.split(',').map(str::trim).filter(|r| !r.is_empty()) {
            if !regs.iter().any(|x| x == r) {
                regs.push(r.to_string());
            }
        }
        c.registries_skipping_tag_resolving = regs;
    }
    d.duration(
        &["digest-resolution-timeout"],
        &mut c.digest_resolution_timeout,
    )?;
    d.duration(&["progress-deadline"], &mut c.progress_deadline)?;
    d.quantity(
        &["queue-sidecar-cpu-request"],
        &mut c.queue_sidecar_cpu_request,
    )?;
    d.quantity(&["queue-sidecar-cpu-limit"], &mut c.queue_sidecar_cpu_limit)?;
    d.quantity(
        &["queue-sidecar-memory-request"],
        &mut c.queue_sidecar_memory_request,
    )?;
    d.quantity(
        &["queue-sidecar-memory-limit"],
        &mut c.queue_sidecar_memory_limit,
    )?;
    d.quantity(
        &["queue-sidecar-ephemeral-storage-request"],
        &mut c.queue_sidecar_ephemeral_storage_request,
    )?;
    d.quantity(
        &["queue-sidecar-ephemeral-storage-limit"],
        &mut c.queue_sidecar_ephemeral_storage_limit,
    )?;
    if let Some((k, v)) = d.get(&["default-affinity-type"]) {
        c.default_affinity_type = one_of(d, k, v, &["none", "prefer-spread-revision-over-nodes"])?;
    }
    d.bool(
        &["pod-is-always-schedulable"],
        &mut c.pod_is_always_schedulable,
    )?;

    if c.progress_deadline.0 <= 0 {
        return Err(d.invalid(
            "progress-deadline",
            format!(
                "progress-deadline cannot be a non-positive duration, was {}",
                c.progress_deadline
            ),
        ));
    }
    if !c.progress_deadline.is_whole_seconds() {
        return Err(d.invalid(
            "progress-deadline",
            format!(
                "progress-deadline = {}, must be specified with at most second precision",
                c.progress_deadline
            ),
        ));
    }
    if c.digest_resolution_timeout.0 <= 0 {
        return Err(d.invalid(
            "digest-resolution-timeout",
            format!(
                "digest-resolution-timeout cannot be a non-positive duration, was {}",
                c.digest_resolution_timeout
            ),
        ));
    }
    Ok(c)
}

// ---------------------------------------------------------------------------------------
// config-features (pkg/apis/config/features.go)

fn features(d: &Data) -> Result<FeaturesConfig, ConfigError> {
    let mut c = FeaturesConfig::default();
    let flags: [(&'static str, &mut Flag); 32] = [
        ("multi-container", &mut c.multi_container),
        ("multi-container-probing", &mut c.multi_container_probing),
        ("kubernetes.podspec-affinity", &mut c.podspec_affinity),
        (
            "kubernetes.podspec-topologyspreadconstraints",
            &mut c.podspec_topologyspreadconstraints,
        ),
        ("kubernetes.podspec-hostaliases", &mut c.podspec_hostaliases),
        (
            "kubernetes.podspec-nodeselector",
            &mut c.podspec_nodeselector,
        ),
        ("kubernetes.podspec-tolerations", &mut c.podspec_tolerations),
        ("kubernetes.podspec-fieldref", &mut c.podspec_fieldref),
        (
            "kubernetes.podspec-runtimeclassname",
            &mut c.podspec_runtimeclassname,
        ),
        ("kubernetes.podspec-dnspolicy", &mut c.podspec_dnspolicy),
        ("kubernetes.podspec-dnsconfig", &mut c.podspec_dnsconfig),
        (
            "kubernetes.podspec-securitycontext",
            &mut c.podspec_securitycontext,
        ),
        (
            "kubernetes.podspec-shareprocessnamespace",
            &mut c.podspec_shareprocessnamespace,
        ),
        ("kubernetes.podspec-hostipc", &mut c.podspec_hostipc),
        ("kubernetes.podspec-hostpid", &mut c.podspec_hostpid),
        ("kubernetes.podspec-hostnetwork", &mut c.podspec_hostnetwork),
        (
            "kubernetes.podspec-priorityclassname",
            &mut c.podspec_priorityclassname,
        ),
        (
            "kubernetes.podspec-schedulername",
            &mut c.podspec_schedulername,
        ),
        (
            "kubernetes.containerspec-addcapabilities",
            &mut c.containerspec_addcapabilities,
        ),
        (
            "kubernetes.podspec-init-containers",
            &mut c.podspec_init_containers,
        ),
        (
            "kubernetes.podspec-persistent-volume-claim",
            &mut c.podspec_persistent_volume_claim,
        ),
        (
            "kubernetes.podspec-persistent-volume-write",
            &mut c.podspec_persistent_volume_write,
        ),
        (
            "kubernetes.podspec-volumes-emptydir",
            &mut c.podspec_volumes_emptydir,
        ),
        (
            "kubernetes.podspec-volumes-hostpath",
            &mut c.podspec_volumes_hostpath,
        ),
        ("kubernetes.podspec-volumes-csi", &mut c.podspec_volumes_csi),
        (
            "kubernetes.podspec-volumes-ephemeral",
            &mut c.podspec_volumes_ephemeral,
        ),
        (
            "kubernetes.podspec-volumes-image",
            &mut c.podspec_volumes_image,
        ),
        (
            "kubernetes.podspec-volumes-mount-propagation",
            &mut c.podspec_volumes_mount_propagation,
        ),
        ("tag-header-based-routing", &mut c.tag_header_based_routing),
        ("autodetect-http2", &mut c.autodetect_http2),
        ("queueproxy.mount-podinfo", &mut c.queueproxy_mount_podinfo),
        (
            "queueproxy.resource-defaults",
            &mut c.queueproxy_resource_defaults,
        ),
    ];
    for (key, target) in flags {
        d.flag(key, target)?;
    }
    if let Some((k, v)) = d.get(&["secure-pod-defaults"]) {
        c.secure_pod_defaults = [
            ("Disabled", SecurePodDefaults::Disabled),
            ("AllowRootBounded", SecurePodDefaults::AllowRootBounded),
            ("Enabled", SecurePodDefaults::Enabled),
        ]
        .into_iter()
        .find(|(name, _)| name.eq_ignore_ascii_case(v))
        .map(|(_, s)| s)
        .ok_or_else(|| {
            d.invalid(
                k,
                format!("{v:?} is not one of Disabled, AllowRootBounded, Enabled"),
            )
        })?;
    }
    Ok(c)
}
