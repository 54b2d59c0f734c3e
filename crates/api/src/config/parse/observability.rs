//! `config-observability`: the request log keys, after Knative's
//! `pkg/observability/config.go` (`NewFromMap`, `Validate`). The metrics and tracing keys
//! configure OpenTelemetry exporters wisp does not have (its metrics are served at
//! `--metrics-addr`); they are accepted and ignored.

use super::*;
use crate::config::request_log::RequestLogTemplate;

pub(super) const ENABLE_REQUEST_LOG: &str = "logging.enable-request-log";
pub(super) const REQUEST_LOG_TEMPLATE: &str = "logging.request-log-template";
pub(super) const ENABLE_PROBE_REQUEST_LOG: &str = "logging.enable-probe-request-log";

pub(super) fn observability(d: &Data) -> Result<ObservabilityConfig, ConfigError> {
    let mut c = ObservabilityConfig::default();
    // The template is taken as written (Knative's parser does not trim it).
    if let Some(t) = d.data.get(REQUEST_LOG_TEMPLATE) {
        c.request_log_template = t.clone();
    }
    d.bool(&[ENABLE_REQUEST_LOG], &mut c.enable_request_log)?;
    d.bool(&[ENABLE_PROBE_REQUEST_LOG], &mut c.enable_probe_request_log)?;
    if c.request_log_template.is_empty() && c.enable_request_log {
        return Err(d.invalid(
            ENABLE_REQUEST_LOG,
            format!("{ENABLE_REQUEST_LOG:?} was set to true, but no {REQUEST_LOG_TEMPLATE:?} was specified"),
        ));
    }
    if !c.request_log_template.is_empty() {
        RequestLogTemplate::parse(&c.request_log_template)
            .map_err(|e| d.invalid(REQUEST_LOG_TEMPLATE, e))?;
    }
    Ok(c)
}
