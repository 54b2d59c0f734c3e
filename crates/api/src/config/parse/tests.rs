//! Table tests for the config file parser.

use std::collections::BTreeMap;

use super::*;
use crate::config::{EXAMPLE_CHECKSUM_ANNOTATION, example_checksum, validate_config_map};
use crate::duration::MILLISECOND;

fn parse(src: &str) -> Config {
    Config::from_yaml(src).unwrap_or_else(|e| panic!("{src}\n=> {e}"))
}

/// Asserts `src` is rejected with an Invalid error for `map`/`key` whose message contains
/// `want`.
fn assert_invalid(src: &str, want_map: &str, want_key: &str, want: &str) {
    match Config::from_yaml(src) {
        Err(ConfigError::Invalid { map, key, message }) => {
            assert_eq!(
                (map.as_str(), key.as_str()),
                (want_map, want_key),
                "{src}: {message}"
            );
            assert!(
                message.contains(want),
                "{src}: {message:?} does not contain {want:?}"
            );
        }
        other => panic!("{src}: expected Invalid {want_map}/{want_key}, got {other:?}"),
    }
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn empty_input_and_empty_maps_give_defaults() {
    for src in [
        "",
        "  \n",
        "# nothing here\n",
        "config-autoscaler:\nconfig-defaults: {}\nconfig-network:\nconfig-gc:\nconfig-deployment:\nconfig-features:\n",
        "config-autoscaler:\n  _example: |\n    anything: goes\n",
        "config-observability:\n  metrics-protocol: prometheus\nconfig-logging: {}\nconfig-leader-election:\n  lease-duration: 60s\nconfig-certmanager: {}\n",
        "config-autoscaler:\n  some-future-key: whatever\n",
        "_comment: ignored\n",
    ] {
        assert_eq!(parse(src), Config::default(), "{src:?}");
    }
}

#[test]
fn syntax_errors() {
    let cases = [
        ("config-autoscaler:\n  x: [a, b\n", "unclosed bracket"),
        ("a: 1\na: 2\n", "duplicate mapping key"),
        ("- config-autoscaler\n", "must be a mapping"),
        (
            "config-autoscaler: 5\n",
            "config-autoscaler: expected a mapping",
        ),
        (
            "config-autoscalr:\n  stable-window: 6s\n",
            "\"config-autoscalr\"",
        ),
    ];
    for (src, want) in cases {
        match Config::from_yaml(src) {
            Err(ConfigError::Syntax(m)) => assert!(m.contains(want), "{src}: {m}"),
            other => panic!("{src}: expected Syntax, got {other:?}"),
        }
    }
}

#[test]
fn error_rendering_names_map_and_key() {
    let err = Config::from_yaml("config-autoscaler:\n  stable-window: 1s\n").unwrap_err();
    assert_eq!(
        err.to_string(),
        "config-autoscaler: stable-window: stable-window = 1s, must be in [6s; 1h0m0s] range"
    );
}

#[test]
fn autoscaler_full_example() {
    let c = parse(
        r#"
config-autoscaler:
  container-concurrency-target-percentage: 80
  container-concurrency-target-default: 50
  requests-per-second-target-default: "150.5"
  target-burst-capacity: -1
  stable-window: 2m
  panic-window-percentage: 20.0
  panic-threshold-percentage: 300
  max-scale-up-rate: 10
  max-scale-down-rate: 4
  enable-scale-to-zero: false
  scale-to-zero-grace-period: 45s
  scale-to-zero-pod-retention-period: 1m30s
  pod-autoscaler-class: hpa.autoscaling.knative.dev
  activator-capacity: 50
  initial-scale: 0
  allow-zero-initial-scale: true
  min-scale: 2
  max-scale: 8
  scale-down-delay: 15m
  max-scale-limit: 10
  wisp-hpa-sync-period: 3s
"#,
    );
    let a = c.autoscaler;
    assert!((a.container_concurrency_target_fraction - 0.8).abs() < 1e-9);
    assert_eq!(a.container_concurrency_target_default, 50.0);
    assert_eq!(a.rps_target_default, 150.5);
    assert_eq!(a.target_burst_capacity, -1.0);
    assert_eq!(a.stable_window, GoDuration::from_secs(120));
    assert_eq!(a.panic_window_percentage, 20.0);
    assert_eq!(a.panic_threshold_percentage, 300.0);
    assert_eq!(a.max_scale_up_rate, 10.0);
    assert_eq!(a.max_scale_down_rate, 4.0);
    assert!(!a.enable_scale_to_zero);
    assert_eq!(a.scale_to_zero_grace_period, GoDuration::from_secs(45));
    assert_eq!(
        a.scale_to_zero_pod_retention_period,
        GoDuration::from_secs(90)
    );
    assert_eq!(a.pod_autoscaler_class, crate::config::HPA_CLASS);
    assert_eq!(a.activator_capacity, 50.0);
    assert_eq!(a.initial_scale, 0);
    assert!(a.allow_zero_initial_scale);
    assert_eq!(a.min_scale, 2);
    assert_eq!(a.max_scale, 8);
    assert_eq!(a.scale_down_delay, GoDuration::from_secs(900));
    assert_eq!(a.max_scale_limit, 10);
    assert_eq!(a.wisp_hpa_sync_period, GoDuration::from_secs(3));
}

#[test]
fn autoscaler_target_percentage_fraction_spelling() {
    for (raw, want) in [
        ("70", 0.7),
        ("0.5", 0.5),
        ("1", 1.0),
        ("100", 1.0),
        ("0.01", 0.01),
    ] {
        let c = parse(&format!(
            "config-autoscaler:\n  container-concurrency-target-percentage: {raw}\n"
        ));
        assert!(
            (c.autoscaler.container_concurrency_target_fraction - want).abs() < 1e-12,
            "{raw}"
        );
    }
}

#[test]
fn autoscaler_rejects() {
    let m = "config-autoscaler";
    let cases: &[(&str, &str, &str)] = &[
        (
            "container-concurrency-target-percentage: x",
            "container-concurrency-target-percentage",
            "parsing \"x\": invalid syntax",
        ),
        (
            "container-concurrency-target-percentage: 0",
            "container-concurrency-target-percentage",
            "= 0 is outside of valid range of (0, 100]",
        ),
        (
            "container-concurrency-target-percentage: 101",
            "container-concurrency-target-percentage",
            "= 101 is outside",
        ),
        (
            "container-concurrency-target-percentage: -5",
            "container-concurrency-target-percentage",
            "outside",
        ),
        (
            "container-concurrency-target-percentage: 0.001\n  container-concurrency-target-default: 1",
            "container-concurrency-target-default",
            "can't be less than 0.01",
        ),
        (
            "container-concurrency-target-default: 0",
            "container-concurrency-target-default",
            "yield target concurrency of 0",
        ),
        (
            "requests-per-second-target-default: 0.001",
            "requests-per-second-target-default",
            "must be at least 0.01, was: 0.001",
        ),
        (
            "requests-per-second-target-default: .nan",
            "requests-per-second-target-default",
            "failed to parse",
        ),
        (
            "target-burst-capacity: -2",
            "target-burst-capacity",
            "non-negative or -1 (for unlimited), was: -2",
        ),
        (
            "stable-window: 5s",
            "stable-window",
            "stable-window = 5s, must be in [6s; 1h0m0s] range",
        ),
        (
            "stable-window: 61m",
            "stable-window",
            "must be in [6s; 1h0m0s] range",
        ),
        (
            "stable-window: 6500ms",
            "stable-window",
            "stable-window = 6.5s, must be specified with at most second precision",
        ),
        (
            "stable-window: 60",
            "stable-window",
            "time: invalid duration \"60\"",
        ),
        (
            "panic-window-percentage: 0.5",
            "panic-window-percentage",
            "= 0.5, must be in [1, 100] interval",
        ),
        (
            "panic-window-percentage: 101",
            "panic-window-percentage",
            "must be in [1, 100]",
        ),
        (
            "max-scale-up-rate: 1",
            "max-scale-up-rate",
            "max-scale-up-rate = 1, must be greater than 1.0",
        ),
        (
            "max-scale-down-rate: 0.5",
            "max-scale-down-rate",
            "must be greater than 1.0",
        ),
        (
            "enable-scale-to-zero: maybe",
            "enable-scale-to-zero",
            "parsing \"maybe\": invalid syntax",
        ),
        (
            "scale-to-zero-grace-period: 0s",
            "scale-to-zero-grace-period",
            "must be positive, was: 0s",
        ),
        (
            "wisp-hpa-sync-period: 0s",
            "wisp-hpa-sync-period",
            "must be positive, was: 0s",
        ),
        (
            "wisp-hpa-sync-period: soon",
            "wisp-hpa-sync-period",
            "invalid duration",
        ),
        (
            "scale-to-zero-pod-retention-period: -1s",
            "scale-to-zero-pod-retention-period",
            "cannot be negative, was: -1s",
        ),
        (
            "activator-capacity: 0.5",
            "activator-capacity",
            "activator-capacity = 0.5, must be at least 1",
        ),
        (
            "initial-scale: 0",
            "initial-scale",
            "initial-scale = 0, must be at least 0 (or at least 1 when allow-zero-initial-scale is false)",
        ),
        (
            "initial-scale: -1\n  allow-zero-initial-scale: true",
            "initial-scale",
            "initial-scale = -1",
        ),
        (
            "initial-scale: 1.5",
            "initial-scale",
            "parsing \"1.5\": invalid syntax",
        ),
        (
            "initial-scale: 3000000000",
            "initial-scale",
            "value out of range",
        ),
        (
            "min-scale: -1",
            "min-scale",
            "min-scale = -1, must be at least 0",
        ),
        (
            "min-scale: 5\n  max-scale: 3",
            "min-scale",
            "min-scale (5) must be less than or equal to max-scale (3)",
        ),
        (
            "max-scale: -1",
            "max-scale",
            "max-scale = -1, must be at least 0",
        ),
        (
            "max-scale: 20\n  max-scale-limit: 10",
            "max-scale",
            "max-scale = 20, must be in [1, 10] range",
        ),
        (
            "max-scale-limit: 10",
            "max-scale",
            "max-scale = 0 (unlimited), must be in [1, 10] range",
        ),
        (
            "max-scale-limit: -1",
            "max-scale-limit",
            "max-scale-limit = -1, must be at least 0",
        ),
        (
            "scale-down-delay: -5s",
            "scale-down-delay",
            "scale-down-delay cannot be negative, was: -5s",
        ),
        (
            "scale-down-delay: 1500ms",
            "scale-down-delay",
            "scale-down-delay = 1.5s, must be specified with at most second precision",
        ),
    ];
    for (body, key, want) in cases {
        assert_invalid(&format!("{m}:\n  {body}\n"), m, key, want);
    }
}

#[test]
fn autoscaler_accepts_edges() {
    for body in [
        "min-scale: 5",                         // max-scale 0 = unlimited
        "min-scale: 3\n  max-scale: 3",         // equal is fine
        "max-scale: 10\n  max-scale-limit: 10", // at the limit
        "target-burst-capacity: 0",
        "stable-window: 6s",
        "stable-window: 1h",
        "panic-window-percentage: 1",
        "panic-window-percentage: 100",
        "scale-to-zero-grace-period: 6s",
        "scale-to-zero-grace-period: 2s",
        "pod-autoscaler-class: custom.example.com",
        "enable-scale-to-zero: \"False\"",
    ] {
        parse(&format!("config-autoscaler:\n  {body}\n"));
    }
}

#[test]
fn defaults_full_example() {
    let c = parse(
        r#"
config-defaults:
  revision-timeout-seconds: 120
  max-revision-timeout-seconds: 900
  revision-response-start-timeout-seconds: 60
  revision-idle-timeout-seconds: 30
  revision-cpu-request: 400m
  revision-memory-request: 100M
  revision-ephemeral-storage-request: 500Mi
  revision-cpu-limit: "1"
  revision-memory-limit: 200Mi
  revision-ephemeral-storage-limit: 750Mi
  container-name-template: "{{.Name}}-app"
  init-container-name-template: "{{.Name}}-init"
  container-concurrency: 10
  container-concurrency-max-limit: 100
  allow-container-concurrency-zero: false
  enable-service-links: true
"#,
    );
    let want = DefaultsConfig {
        revision_timeout_seconds: 120,
        max_revision_timeout_seconds: 900,
        revision_response_start_timeout_seconds: 60,
        revision_idle_timeout_seconds: 30,
        revision_cpu_request: Some("400m".into()),
        revision_memory_request: Some("100M".into()),
        revision_ephemeral_storage_request: Some("500Mi".into()),
        revision_cpu_limit: Some("1".into()),
        revision_memory_limit: Some("200Mi".into()),
        revision_ephemeral_storage_limit: Some("750Mi".into()),
        container_name_template: "{{.Name}}-app".into(),
        init_container_name_template: "{{.Name}}-init".into(),
        container_concurrency: 10,
        container_concurrency_max_limit: 100,
        allow_container_concurrency_zero: false,
        enable_service_links: Some(true),
    };
    assert_eq!(c.defaults, want);
}

#[test]
fn defaults_response_start_follows_revision_timeout() {
    let c = parse("config-defaults:\n  revision-timeout-seconds: 100\n");
    assert_eq!(c.defaults.revision_response_start_timeout_seconds, 100);
}

#[test]
fn defaults_enable_service_links_tri_state() {
    for (raw, want) in [
        ("true", Some(true)),
        ("TRUE", Some(true)),
        ("false", Some(false)),
        ("\"False\"", Some(false)),
        ("default", None),
        ("\"\"", None),
    ] {
        let c = parse(&format!(
            "config-defaults:\n  enable-service-links: {raw}\n"
        ));
        assert_eq!(c.defaults.enable_service_links, want, "{raw}");
    }
}

#[test]
fn defaults_rejects() {
    let m = "config-defaults";
    let cases: &[(&str, &str, &str)] = &[
        (
            "revision-timeout-seconds: abc",
            "revision-timeout-seconds",
            "parsing \"abc\": invalid syntax",
        ),
        (
            "revision-timeout-seconds: 0",
            "revision-timeout-seconds",
            "revision-timeout-seconds = 0, must be at least 1",
        ),
        (
            "revision-timeout-seconds: 700",
            "revision-timeout-seconds",
            "revision-timeout-seconds (700) cannot be greater than max-revision-timeout-seconds (600)",
        ),
        (
            "max-revision-timeout-seconds: 100",
            "revision-timeout-seconds",
            "cannot be greater than max-revision-timeout-seconds (100)",
        ),
        (
            "revision-response-start-timeout-seconds: 301",
            "revision-response-start-timeout-seconds",
            "revision-response-start-timeout-seconds (301) cannot be greater than revision-timeout-seconds (300)",
        ),
        (
            "revision-response-start-timeout-seconds: -1",
            "revision-response-start-timeout-seconds",
            "must be at least 0",
        ),
        (
            "revision-idle-timeout-seconds: 400",
            "revision-idle-timeout-seconds",
            "revision-idle-timeout-seconds (400) cannot be greater than revision-timeout-seconds (300)",
        ),
        (
            "revision-idle-timeout-seconds: -3",
            "revision-idle-timeout-seconds",
            "must be at least 0",
        ),
        (
            "revision-cpu-request: lots",
            "revision-cpu-request",
            "quantities must match the regular expression",
        ),
        (
            "revision-memory-limit: 1.2.3Gi",
            "revision-memory-limit",
            "quantities must match the regular expression",
        ),
        (
            "revision-ephemeral-storage-limit: 5GB",
            "revision-ephemeral-storage-limit",
            "quantities must match the regular expression",
        ),
        (
            "container-concurrency: -1",
            "container-concurrency",
            "expected 0 <= -1 <= 1000",
        ),
        (
            "container-concurrency: 1001",
            "container-concurrency",
            "expected 0 <= 1001 <= 1000",
        ),
        (
            "container-concurrency: 50\n  container-concurrency-max-limit: 20",
            "container-concurrency",
            "expected 0 <= 50 <= 20",
        ),
        (
            "container-concurrency-max-limit: 0",
            "container-concurrency-max-limit",
            "expected 1 <= 0 <= 2147483647",
        ),
        (
            "allow-container-concurrency-zero: nope",
            "allow-container-concurrency-zero",
            "failed to parse",
        ),
        (
            "container-name-template: \"{{.Name\"",
            "container-name-template",
            "unclosed action",
        ),
        (
            "container-name-template: \"{{.Bogus}}\"",
            "container-name-template",
            "error executing template: template: can't evaluate field Bogus",
        ),
        (
            "init-container-name-template: \"{{if .Name}}x{{end}}\"",
            "init-container-name-template",
            "unsupported action",
        ),
    ];
    for (body, key, want) in cases {
        assert_invalid(&format!("{m}:\n  {body}\n"), m, key, want);
    }
}

#[test]
fn quantities() {
    for ok in [
        "1", "100m", "0.5", "1.5Gi", "512Mi", "1e3", "2E-2", "+1k", ".5", "1000000n", "3Ei",
        // apimachinery's scanner (quantity.go `parseQuantityString`) reads a missing
        // number as 0, so these parse (to "0") although its error message's regexp says not.
        "m", "-",
    ] {
        assert!(Quantity::parse(ok).is_ok(), "{ok}");
    }
    for bad in ["", "1.2.3", "5GB", "1e", "1 Gi", "abc", "1Mib"] {
        assert!(Quantity::parse(bad).is_err(), "{bad}");
    }
}

#[test]
fn container_name_templates_render_over_parent_meta() {
    let mut d = DefaultsConfig::default();
    let meta = ObjectMeta {
        name: "hello".into(),
        namespace: "ns".into(),
        generate_name: "gen-".into(),
        ..Default::default()
    };
    assert_eq!(d.container_name(&meta), "user-container");
    assert_eq!(d.init_container_name(&meta), "init-container");
    d.container_name_template = "{{.Name}}-{{.Namespace}}".into();
    d.init_container_name_template = "{{.GenerateName}}init".into();
    assert_eq!(d.container_name(&meta), "hello-ns");
    assert_eq!(d.init_container_name(&meta), "gen-init");
    d.container_name_template = "{{.Nope}}".into();
    assert_eq!(d.container_name(&meta), "");
}

#[test]
fn domain_full_example_replaces_default() {
    let c = parse(
        r#"
config-domain:
  example.com: ""
  example.org: |
    selector:
      app: nonprofit
  internal.example.net:
    selector:
      app: internal
      tier: backend
  _example: ignored
"#,
    );
    let want: BTreeMap<String, BTreeMap<String, String>> = [
        ("example.com".to_string(), BTreeMap::new()),
        ("example.org".to_string(), labels(&[("app", "nonprofit")])),
        (
            "internal.example.net".to_string(),
            labels(&[("app", "internal"), ("tier", "backend")]),
        ),
    ]
    .into();
    assert_eq!(c.domain.domains, want);

    // Present but without a catch-all: the shipped example.com is gone.
    let c = parse("config-domain:\n  example.org: \"selector:\\n  app: nonprofit\\n\"\n");
    assert_eq!(c.domain.domains.len(), 1);
    assert_eq!(
        c.domain.lookup(&BTreeMap::new(), "cluster.local"),
        "svc.cluster.local"
    );
    // Present and empty: everything is cluster-local.
    let c = parse("config-domain: {}\n");
    assert!(c.domain.domains.is_empty());
}

#[test]
fn domain_rejects() {
    let m = "config-domain";
    let cases: &[(&str, &str, &str)] = &[
        ("Example.COM: \"\"", "Example.COM", "RFC 1123 subdomain"),
        ("\"bad domain\": \"\"", "bad domain", "RFC 1123 subdomain"),
        (
            "example.com: \"selector: [a\"",
            "example.com",
            "failed to parse domain selector",
        ),
        (
            "example.com: \"just text\"",
            "example.com",
            "expected empty or `selector",
        ),
        (
            "example.com: \"selector: [a, b]\"",
            "example.com",
            "selector must be a mapping",
        ),
        (
            "example.com:\n    selector:\n      app: [x]",
            "example.com",
            "must have a scalar value",
        ),
    ];
    for (body, key, want) in cases {
        assert_invalid(&format!("{m}:\n  {body}\n"), m, key, want);
    }
}

#[test]
fn domain_lookup() {
    let cfg = DomainConfig {
        domains: [
            ("example.com".to_string(), BTreeMap::new()),
            ("example.org".to_string(), labels(&[("app", "nonprofit")])),
            ("b.example.net".to_string(), labels(&[("app", "x")])),
            ("a.example.net".to_string(), labels(&[("app", "x")])),
            (
                "two.example.io".to_string(),
                labels(&[("app", "x"), ("tier", "web")]),
            ),
        ]
        .into(),
    };
    let no_catch_all = DomainConfig {
        domains: [("example.org".to_string(), labels(&[("app", "nonprofit")]))].into(),
    };
    let empty = DomainConfig {
        domains: BTreeMap::new(),
    };
    type Case<'a> = (&'a DomainConfig, &'a [(&'a str, &'a str)], &'a str, &'a str);
    let cases: &[Case] = &[
        (&cfg, &[], "cluster.local", "example.com"),
        (&cfg, &[("app", "other")], "cluster.local", "example.com"),
        (
            &cfg,
            &[("app", "nonprofit")],
            "cluster.local",
            "example.org",
        ),
        (
            &cfg,
            &[("app", "nonprofit"), ("extra", "y")],
            "cluster.local",
            "example.org",
        ),
        // Equally specific: the lexicographically smallest domain wins.
        (&cfg, &[("app", "x")], "cluster.local", "a.example.net"),
        // More labels beat fewer.
        (
            &cfg,
            &[("app", "x"), ("tier", "web")],
            "cluster.local",
            "two.example.io",
        ),
        // cluster-local visibility always wins.
        (
            &cfg,
            &[
                ("app", "nonprofit"),
                ("networking.knative.dev/visibility", "cluster-local"),
            ],
            "cluster.local",
            "svc.cluster.local",
        ),
        (&no_catch_all, &[], "cluster.local", "svc.cluster.local"),
        (
            &no_catch_all,
            &[("app", "nonprofit")],
            "cluster.local",
            "example.org",
        ),
        (
            &empty,
            &[("app", "x")],
            "corp.internal",
            "svc.corp.internal",
        ),
        (
            &DomainConfig::default(),
            &[],
            "cluster.local",
            "example.com",
        ),
    ];
    for (cfg, lbls, cluster, want) in cases {
        assert_eq!(cfg.lookup(&labels(lbls), cluster), *want, "{lbls:?}");
    }
}

#[test]
fn network_full_example() {
    let c = parse(
        r#"
config-network:
  ingress-class: kourier.ingress.networking.knative.dev
  certificate-class: net-http01.certificate.networking.knative.dev
  domain-template: "{{.Name}}-{{.Namespace}}.{{.Domain}}"
  tag-template: "{{.Name}}-{{.Tag}}"
  external-domain-tls: Enabled
  cluster-local-domain-tls: enabled
  system-internal-tls: Enabled
  http-protocol: redirected
  rollout-duration: 380
  autocreate-cluster-domain-claims: true
  namespace-wildcard-cert-selector: |
    matchExpressions:
    - key: networking.knative.dev/disableWildcardCert
      operator: NotIn
      values: ["true"]
  enable-mesh-pod-addressability: true
  mesh-compatibility-mode: Disabled
  default-external-scheme: HTTPS
"#,
    );
    let n = c.network;
    assert_eq!(n.ingress_class, "kourier.ingress.networking.knative.dev");
    assert_eq!(
        n.certificate_class,
        "net-http01.certificate.networking.knative.dev"
    );
    assert_eq!(n.domain_template, "{{.Name}}-{{.Namespace}}.{{.Domain}}");
    assert_eq!(n.tag_template, "{{.Name}}-{{.Tag}}");
    assert!(n.external_domain_tls && n.cluster_local_domain_tls && n.system_internal_tls);
    assert_eq!(n.http_protocol, "Redirected");
    assert_eq!(n.rollout_duration_seconds, 380);
    assert!(n.autocreate_cluster_domain_claims);
    assert!(
        n.namespace_wildcard_cert_selector
            .starts_with("matchExpressions:")
    );
    assert!(n.enable_mesh_pod_addressability);
    assert_eq!(n.mesh_compatibility_mode, "disabled");
    assert_eq!(n.default_external_scheme, "https");
    assert_eq!(n.cluster_domain, "cluster.local");
}

#[test]
fn network_aliases() {
    let c = parse(
        r#"
config-network:
  ingress.class: legacy.ingress
  certificate.class: legacy.cert
  domainTemplate: "{{.Name}}.{{.Domain}}"
  tagTemplate: "{{.Tag}}.{{.Name}}"
  autoTLS: Enabled
  internal-encryption: "true"
  httpProtocol: Disabled
  rolloutDuration: 60
"#,
    );
    let n = &c.network;
    assert_eq!(n.ingress_class, "legacy.ingress");
    assert_eq!(n.certificate_class, "legacy.cert");
    assert_eq!(n.domain_template, "{{.Name}}.{{.Domain}}");
    assert_eq!(n.tag_template, "{{.Tag}}.{{.Name}}");
    assert!(n.external_domain_tls);
    assert!(n.system_internal_tls);
    assert_eq!(n.http_protocol, "Disabled");
    assert_eq!(n.rollout_duration_seconds, 60);

    let c = parse("config-network:\n  auto-tls: Enabled\n");
    assert!(c.network.external_domain_tls);

    // The current name beats its legacy alias.
    let c = parse(
        r#"
config-network:
  ingress-class: new.ingress
  ingress.class: old.ingress
  external-domain-tls: Disabled
  autoTLS: Enabled
  system-internal-tls: disabled
  internal-encryption: "true"
  http-protocol: Enabled
  httpProtocol: Redirected
  rollout-duration: 5
  rolloutDuration: 10
"#,
    );
    let n = &c.network;
    assert_eq!(n.ingress_class, "new.ingress");
    assert!(!n.external_domain_tls);
    assert!(!n.system_internal_tls);
    assert_eq!(n.http_protocol, "Enabled");
    assert_eq!(n.rollout_duration_seconds, 5);

    // Errors name the key the user actually wrote.
    assert_invalid(
        "config-network:\n  rolloutDuration: -1\n",
        "config-network",
        "rolloutDuration",
        "must be a non-negative integer, was: -1",
    );
}

#[test]
fn network_rejects() {
    let m = "config-network";
    let cases: &[(&str, &str, &str)] = &[
        (
            "http-protocol: sometimes",
            "http-protocol",
            "\"sometimes\" is not one of Enabled, Redirected, Disabled",
        ),
        (
            "httpProtocol: nope",
            "httpProtocol",
            "is not one of Enabled, Redirected, Disabled",
        ),
        (
            "rollout-duration: 10s",
            "rollout-duration",
            "parsing \"10s\": invalid syntax",
        ),
        (
            "rollout-duration: -5",
            "rollout-duration",
            "must be a non-negative integer, was: -5",
        ),
        (
            "mesh-compatibility-mode: sometimes",
            "mesh-compatibility-mode",
            "is not one of auto, enabled, disabled",
        ),
        (
            "default-external-scheme: ftp",
            "default-external-scheme",
            "\"ftp\" is not one of http, https",
        ),
        (
            "external-domain-tls: maybe",
            "external-domain-tls",
            "is not one of Enabled, Disabled",
        ),
        (
            "autocreate-cluster-domain-claims: perhaps",
            "autocreate-cluster-domain-claims",
            "failed to parse",
        ),
        (
            "domain-template: \"{{.Namespace}}.{{.Domain}}\"",
            "domain-template",
            "must contain {{.Name}}",
        ),
        (
            "domain-template: \"{{.Name}}.{{.Domain}}/path\"",
            "domain-template",
            "not a valid hostname",
        ),
        (
            "domain-template: \"{{.Name}}.{{.Missing}}\"",
            "domain-template",
            "can't evaluate field Missing",
        ),
        (
            "domainTemplate: \"{{.Name\"",
            "domainTemplate",
            "unclosed action",
        ),
        (
            "tag-template: \"{{.Tag}}-{{.Namespace}}\"",
            "tag-template",
            "can't evaluate field Namespace",
        ),
        (
            "namespace-wildcard-cert-selector: \"[a, b]\"",
            "namespace-wildcard-cert-selector",
            "expected a label selector mapping",
        ),
    ];
    for (body, key, want) in cases {
        assert_invalid(&format!("{m}:\n  {body}\n"), m, key, want);
    }
}

#[test]
fn network_template_rendering() {
    let n = NetworkConfig::default();
    let ann = labels(&[("team", "a")]);
    let lbl = labels(&[("app", "web")]);
    assert_eq!(
        n.render_domain("hello", "default", "example.com", &ann, &lbl)
            .unwrap(),
        "hello.default.example.com"
    );
    assert_eq!(n.render_tag("v2", "hello").unwrap(), "v2-hello");
    let custom = NetworkConfig {
        domain_template: "{{.Name}}.{{index .Labels \"app\"}}.{{.Domain}}".into(),
        ..NetworkConfig::default()
    };
    assert_eq!(
        custom
            .render_domain("hello", "default", "example.com", &ann, &lbl)
            .unwrap(),
        "hello.web.example.com"
    );
}

#[test]
fn gc_full_example_and_disabled() {
    let c = parse(
        "config-gc:\n  retain-since-create-time: 24h\n  retain-since-last-active-time: 90m\n  min-non-active-revisions: 5\n  max-non-active-revisions: 50\n",
    );
    assert_eq!(
        c.gc,
        GcConfig {
            retain_since_create_time: Some(GoDuration::from_secs(24 * 3600)),
            retain_since_last_active_time: Some(GoDuration::from_secs(90 * 60)),
            min_non_active_revisions: Some(5),
            max_non_active_revisions: Some(50),
        }
    );
    let c = parse(
        "config-gc:\n  retain-since-create-time: disabled\n  retain-since-last-active-time: Disabled\n  min-non-active-revisions: 0\n  max-non-active-revisions: DISABLED\n",
    );
    assert_eq!(
        c.gc,
        GcConfig {
            retain_since_create_time: None,
            retain_since_last_active_time: None,
            min_non_active_revisions: Some(0),
            max_non_active_revisions: None,
        }
    );
    // min > default max is fine when max is disabled.
    let c = parse(
        "config-gc:\n  min-non-active-revisions: 5000\n  max-non-active-revisions: disabled\n",
    );
    assert_eq!(c.gc.min_non_active_revisions, Some(5000));
}

#[test]
fn gc_rejects() {
    let m = "config-gc";
    let cases: &[(&str, &str, &str)] = &[
        (
            "retain-since-create-time: forever",
            "retain-since-create-time",
            "failed to parse \"retain-since-create-time\": time: invalid duration \"forever\"",
        ),
        (
            "retain-since-last-active-time: -1h",
            "retain-since-last-active-time",
            "retain-since-last-active-time = -1h0m0s, must be non-negative",
        ),
        (
            "min-non-active-revisions: -1",
            "min-non-active-revisions",
            "min-non-active-revisions = -1, must be non-negative",
        ),
        (
            "max-non-active-revisions: many",
            "max-non-active-revisions",
            "failed to parse \"many\"",
        ),
        (
            "min-non-active-revisions: 30\n  max-non-active-revisions: 10",
            "min-non-active-revisions",
            "min-non-active-revisions (30) must be <= max-non-active-revisions (10)",
        ),
        (
            "min-non-active-revisions: 1001",
            "min-non-active-revisions",
            "(1001) must be <= max-non-active-revisions (1000)",
        ),
    ];
    for (body, key, want) in cases {
        assert_invalid(&format!("{m}:\n  {body}\n"), m, key, want);
    }
}

#[test]
fn deployment_full_example() {
    let c = parse(
        r#"
config-deployment:
  queue-sidecar-image: ghcr.io/example/queue:v1
  registries-skipping-tag-resolving: "ko.local, dev.local,,registry.example.com,ko.local"
  digest-resolution-timeout: 500ms
  progress-deadline: 120s
  queue-sidecar-cpu-request: 50m
  queue-sidecar-cpu-limit: 1000m
  queue-sidecar-memory-request: 400Mi
  queue-sidecar-memory-limit: 800Mi
  queue-sidecar-ephemeral-storage-request: 512Mi
  queue-sidecar-ephemeral-storage-limit: 1024Mi
  default-affinity-type: none
  pod-is-always-schedulable: true
"#,
    );
    let want = DeploymentConfig {
        queue_sidecar_image: "ghcr.io/example/queue:v1".into(),
        registries_skipping_tag_resolving: vec![
            "ko.local".into(),
            "dev.local".into(),
            "registry.example.com".into(),
        ],
        digest_resolution_timeout: GoDuration(500 * MILLISECOND),
        progress_deadline: GoDuration::from_secs(120),
        queue_sidecar_cpu_request: Some("50m".into()),
        // Canonical, as Go keeps a parsed resource.Quantity: 1000m is 1, 1024Mi is 1Gi.
        queue_sidecar_cpu_limit: Some("1".into()),
        queue_sidecar_memory_request: Some("400Mi".into()),
        queue_sidecar_memory_limit: Some("800Mi".into()),
        queue_sidecar_ephemeral_storage_request: Some("512Mi".into()),
        queue_sidecar_ephemeral_storage_limit: Some("1Gi".into()),
        default_affinity_type: "none".into(),
        pod_is_always_schedulable: true,
    };
    assert_eq!(c.deployment, want);

    // A YAML list works too; the legacy image key is honoured.
    let c = parse(
        "config-deployment:\n  queueSidecarImage: img\n  registries-skipping-tag-resolving: [a.local, b.local]\n",
    );
    assert_eq!(c.deployment.queue_sidecar_image, "img");
    assert_eq!(
        c.deployment.registries_skipping_tag_resolving,
        vec!["a.local", "b.local"]
    );
    let c = parse("config-deployment:\n  queue-sidecar-image: new\n  queueSidecarImage: old\n");
    assert_eq!(c.deployment.queue_sidecar_image, "new");
}

#[test]
fn deployment_rejects() {
    let m = "config-deployment";
    let cases: &[(&str, &str, &str)] = &[
        (
            "progress-deadline: 0s",
            "progress-deadline",
            "progress-deadline cannot be a non-positive duration, was 0s",
        ),
        (
            "progress-deadline: -10s",
            "progress-deadline",
            "non-positive duration, was -10s",
        ),
        (
            "progress-deadline: 1500ms",
            "progress-deadline",
            "progress-deadline = 1.5s, must be specified with at most second precision",
        ),
        (
            "progress-deadline: ten",
            "progress-deadline",
            "time: invalid duration",
        ),
        (
            "digest-resolution-timeout: 0",
            "digest-resolution-timeout",
            "digest-resolution-timeout cannot be a non-positive duration, was 0s",
        ),
        (
            "queue-sidecar-cpu-request: a-lot",
            "queue-sidecar-cpu-request",
            "quantities must match the regular expression",
        ),
        (
            "default-affinity-type: always",
            "default-affinity-type",
            "is not one of none, prefer-spread-revision-over-nodes",
        ),
        (
            "pod-is-always-schedulable: sure",
            "pod-is-always-schedulable",
            "failed to parse",
        ),
    ];
    for (body, key, want) in cases {
        assert_invalid(&format!("{m}:\n  {body}\n"), m, key, want);
    }
}

#[test]
fn features_every_key() {
    // Set every flag to a value different from its default and check exactly that field moved.
    let mut probe = FeaturesConfig::default();
    let keys: Vec<&str> = features::flag_fields(&mut probe)
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    assert_eq!(keys.len(), 32);
    for (i, key) in keys.iter().enumerate() {
        for (raw, flag) in [
            ("allowed", Flag::Allowed),
            ("ENABLED", Flag::Enabled),
            ("Disabled", Flag::Disabled),
        ] {
            let c = parse(&format!("config-features:\n  {key}: {raw}\n"));
            let mut want = FeaturesConfig::default();
            *features::flag_fields(&mut want)[i].1 = flag;
            assert_eq!(c.features, want, "{key}: {raw}");
        }
        assert_invalid(
            &format!("config-features:\n  {key}: sometimes\n"),
            "config-features",
            key,
            "\"sometimes\" is not one of Enabled, Disabled, Allowed",
        );
    }
}

#[test]
fn features_secure_pod_defaults() {
    for (raw, want) in [
        ("disabled", SecurePodDefaults::Disabled),
        ("AllowRootBounded", SecurePodDefaults::AllowRootBounded),
        ("allowrootbounded", SecurePodDefaults::AllowRootBounded),
        ("Enabled", SecurePodDefaults::Enabled),
    ] {
        let c = parse(&format!("config-features:\n  secure-pod-defaults: {raw}\n"));
        assert_eq!(c.features.secure_pod_defaults, want, "{raw}");
    }
    assert_invalid(
        "config-features:\n  secure-pod-defaults: Allowed\n",
        "config-features",
        "secure-pod-defaults",
        "is not one of Disabled, AllowRootBounded, Enabled",
    );
}

#[test]
fn scalars_are_stringified() {
    let c = parse(
        "config-autoscaler:\n  enable-scale-to-zero: false\n  max-scale-up-rate: 1.5\n  initial-scale: 3\n",
    );
    assert!(!c.autoscaler.enable_scale_to_zero);
    assert_eq!(c.autoscaler.max_scale_up_rate, 1.5);
    assert_eq!(c.autoscaler.initial_scale, 3);
    assert_eq!(stringify(serde_json::json!(["a", 1, true])), "a,1,true");
    assert_eq!(stringify(serde_json::json!(null)), "");
}

/// Knative's config webhook: the reason it gives, for the maps wisp keeps live.
#[test]
fn the_config_webhook_refuses_as_knative_does() {
    let data = |pairs: &[(&str, &str)]| labels(pairs);
    let none = BTreeMap::new();
    type Case<'a> = (
        &'a str,
        BTreeMap<String, String>,
        BTreeMap<String, String>,
        Result<(), &'a str>,
    );
    let cases: Vec<Case> = vec![
        (
            "config-autoscaler",
            data(&[("stable-window", "2m")]),
            none.clone(),
            Ok(()),
        ),
        (
            "config-autoscaler",
            data(&[("stable-window", "soon")]),
            none.clone(),
            Err(
                "failed to parse data: failed to parse \"stable-window\": time: invalid duration \"soon\"",
            ),
        ),
        (
            "config-autoscaler",
            data(&[("max-scale-up-rate", "lots")]),
            none.clone(),
            Err(
                "failed to parse data: failed to parse \"max-scale-up-rate\": strconv.ParseFloat: parsing \"lots\": invalid syntax",
            ),
        ),
        (
            "config-autoscaler",
            data(&[("max-scale-up-rate", "1")]),
            none.clone(),
            Err("max-scale-up-rate = 1, must be greater than 1.0"),
        ),
        (
            "config-defaults",
            data(&[("revision-timeout-seconds", "x")]),
            none.clone(),
            Err(
                "failed to parse \"revision-timeout-seconds\": strconv.ParseInt: parsing \"x\": invalid syntax",
            ),
        ),
        (
            "config-defaults",
            data(&[("revision-timeout-seconds", "900")]),
            none.clone(),
            Err(
                "revision-timeout-seconds (900) cannot be greater than max-revision-timeout-seconds (600)",
            ),
        ),
        // `_example` is documentation: ignored, unless its checksum says it was edited.
        (
            "config-gc",
            data(&[("_example", "retain-since-create-time: 48h")]),
            none.clone(),
            Ok(()),
        ),
        (
            "config-gc",
            data(&[("_example", "  retain-since-create-time: 48h\n")]),
            labels(&[(
                EXAMPLE_CHECKSUM_ANNOTATION,
                &example_checksum("retain-since-create-time: 48h"),
            )]),
            Ok(()),
        ),
        (
            "config-gc",
            data(&[("_example", "retain-since-create-time: 1h")]),
            labels(&[(
                EXAMPLE_CHECKSUM_ANNOTATION,
                &example_checksum("retain-since-create-time: 48h"),
            )]),
            Err(
                "the update modifies a key in \"_example\" which is probably not what you want. Instead, copy the respective setting to the top-level of the ConfigMap, directly below \"data\"",
            ),
        ),
        // Nothing wisp reads: any keys.
        (
            "config-observability",
            data(&[("metrics-protocol", "anything")]),
            none.clone(),
            Ok(()),
        ),
        (
            "my-own-config",
            data(&[("stable-window", "soon")]),
            none.clone(),
            Ok(()),
        ),
    ];
    for (name, data, annotations, want) in cases {
        let got = validate_config_map(name, &data, &annotations);
        assert_eq!(
            got.as_ref().map(|_| ()).map_err(String::as_str),
            want,
            "{name} {data:?}"
        );
    }
    // knative/pkg's Checksum: CRC-32 (IEEE) of the trimmed text, 8 hex digits.
    assert_eq!(example_checksum(" hello\n"), "3610a686");
}

#[test]
fn observability_request_log_keys() {
    let c = parse("");
    assert_eq!(c.observability, ObservabilityConfig::default());
    assert!(c.observability.request_log().is_none(), "off by default");
    let c = parse("config-observability:\n  logging.enable-request-log: \"true\"\n");
    assert!(c.observability.enable_request_log);
    assert!(
        c.observability.request_log().is_some(),
        "on, with Knative's default template"
    );
    let c = parse(
        "config-observability:\n  logging.enable-probe-request-log: \"true\"\n  logging.request-log-template: '{{.Request.Method}} {{.Response.Code}}'\n",
    );
    assert!(c.observability.enable_probe_request_log);
    assert!(
        c.observability.request_log().is_some(),
        "either key turns logging on"
    );
    let c = parse(
        "config-observability:\n  logging.enable-request-log: \"false\"\n  logging.request-log-template: ''\n",
    );
    assert!(c.observability.request_log().is_none());
}

#[test]
fn observability_rejects() {
    assert_invalid(
        "config-observability:\n  logging.enable-request-log: \"true\"\n  logging.request-log-template: ''\n",
        "config-observability",
        "logging.enable-request-log",
        "\"logging.enable-request-log\" was set to true, but no \"logging.request-log-template\" was specified",
    );
    assert_invalid(
        "config-observability:\n  logging.request-log-template: '{{.Request.Nope}}'\n",
        "config-observability",
        "logging.request-log-template",
        "template: can't evaluate field Request.Nope",
    );
    assert_invalid(
        "config-observability:\n  logging.request-log-template: '{{.Request.Method'\n",
        "config-observability",
        "logging.request-log-template",
        "template: unclosed action",
    );
    assert_invalid(
        "config-observability:\n  logging.enable-request-log: yes-please\n",
        "config-observability",
        "logging.enable-request-log",
        "failed to parse \"logging.enable-request-log\": strconv.ParseBool: parsing \"yes-please\": invalid syntax",
    );
}

/// An edit of config-observability is checked as the file is: a bad request-log template is
/// refused, naming the cause.
#[test]
fn the_config_webhook_checks_the_request_log_template() {
    let bad = labels(&[("logging.request-log-template", "{{.Request.Nope}}")]);
    let err = validate_config_map("config-observability", &bad, &BTreeMap::new()).unwrap_err();
    assert!(err.contains("can't evaluate field Request.Nope"), "{err}");
    let good = labels(&[("logging.request-log-template", "{{.Request.Method}}")]);
    assert_eq!(
        validate_config_map("config-observability", &good, &BTreeMap::new()),
        Ok(())
    );
}
