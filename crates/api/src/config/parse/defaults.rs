//! `config-defaults`: its keys, defaults and checks, after Knative's `pkg/apis/config/defaults.go`.

use super::*;

pub(super) fn defaults(d: &Data) -> Result<DefaultsConfig, ConfigError> {
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
pub(super) fn meta_field<'a>(meta: &'a ObjectMeta, field: &str) -> Option<Datum<'a>> {
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

pub(super) fn render_name(src: &str, meta: &ObjectMeta) -> String {
    Template::parse(src)
        .and_then(|t| t.render(&|f| meta_field(meta, f)))
        .unwrap_or_default()
}
