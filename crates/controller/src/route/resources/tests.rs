//! Table tests of the route builders.

use super::*;
use crate::testing::{self, test_clock};
use ConditionStatus::{False, True, Unknown};
use wisp_api::{config::DomainConfig, routing::RoutingTable, serving::ConfigurationStatus};

fn tt(tag: &str, cfg: &str, rev: &str, latest: Option<bool>, percent: i64) -> TrafficTarget {
    TrafficTarget {
        tag: tag.into(),
        configuration_name: cfg.into(),
        revision_name: rev.into(),
        latest_revision: latest,
        percent: Some(percent),
        url: None,
    }
}

fn config(name: &str, latest_ready: &str, ready: ConditionStatus) -> Configuration {
    let mut c = testing::configuration("default", name, "img");
    let mut st = Status::default();
    crate::conditions::set(&mut st, READY, ready, "", "", test_clock());
    c.status = Some(ConfigurationStatus {
        status: st,
        latest_ready_revision_name: latest_ready.into(),
        latest_created_revision_name: latest_ready.into(),
    });
    c
}

fn rev(name: &str, ready: ConditionStatus) -> Revision {
    let mut r = testing::revision("default", name, "hello", 1);
    r.metadata.generation = 1;
    testing::set_revision_ready(&mut r, ready, "", "");
    r
}

fn world() -> (BTreeMap<String, Configuration>, BTreeMap<String, Revision>) {
    let configs = [
        config("hello", "hello-00002", True),
        config("deploying", "", Unknown),
        config("broken", "", False),
        config("dangling", "gone-00001", True),
    ]
    .into_iter()
    .map(|c| (c.metadata.name.clone(), c))
    .collect();
    let revs = [
        rev("hello-00001", True),
        rev("hello-00002", True),
        rev("starting", Unknown),
        rev("crashed", False),
    ]
    .into_iter()
    .map(|r| (r.metadata.name.clone(), r))
    .collect();
    (configs, revs)
}

#[test]
fn resolution() {
    let (configs, revs) = world();
    type Case = (
        &'static str,
        Vec<TrafficTarget>,
        Result<Vec<TrafficTarget>, TargetError>,
    );
    let cases: Vec<Case> = vec![
        (
            "configuration target follows latest ready",
            vec![tt("", "hello", "", Some(true), 100)],
            Ok(vec![tt("", "hello", "hello-00002", Some(true), 100)]),
        ),
        (
            "revision target",
            vec![tt("", "", "hello-00001", Some(false), 100)],
            Ok(vec![tt("", "", "hello-00001", Some(false), 100)]),
        ),
        (
            "tag at 0% is kept",
            vec![
                tt("", "hello", "", Some(true), 100),
                tt("old", "", "hello-00001", Some(false), 0),
            ],
            Ok(vec![
                tt("", "hello", "hello-00002", Some(true), 100),
                tt("old", "", "hello-00001", Some(false), 0),
            ]),
        ),
        (
            "duplicates merged by (tag, revision, latestRevision)",
            vec![
                tt("", "hello", "", Some(true), 30),
                tt("", "", "hello-00001", Some(false), 20),
                tt("", "hello", "", Some(true), 40),
                tt("", "", "hello-00002", Some(false), 10),
            ],
            Ok(vec![
                tt("", "hello", "hello-00002", Some(true), 70),
                tt("", "", "hello-00001", Some(false), 20),
                tt("", "", "hello-00002", Some(false), 10),
            ]),
        ),
        (
            "missing configuration",
            vec![tt("", "nope", "", Some(true), 100)],
            Err(TargetError::MissingConfiguration("nope".into())),
        ),
        (
            "configuration still deploying",
            vec![tt("", "deploying", "", Some(true), 100)],
            Err(TargetError::UnreadyConfiguration {
                name: "deploying".into(),
                failed: false,
            }),
        ),
        (
            "configuration failed",
            vec![tt("", "broken", "", Some(true), 100)],
            Err(TargetError::UnreadyConfiguration {
                name: "broken".into(),
                failed: true,
            }),
        ),
        (
            "latest ready revision deleted",
            vec![tt("", "dangling", "", Some(true), 100)],
            Err(TargetError::MissingRevision("gone-00001".into())),
        ),
        (
            "missing revision",
            vec![tt("", "", "nope-00001", Some(false), 100)],
            Err(TargetError::MissingRevision("nope-00001".into())),
        ),
        (
            "revision not ready",
            vec![tt("", "", "starting", Some(false), 100)],
            Err(TargetError::UnreadyRevision {
                name: "starting".into(),
                failed: false,
            }),
        ),
        (
            "revision failed",
            vec![tt("", "", "crashed", Some(false), 100)],
            Err(TargetError::UnreadyRevision {
                name: "crashed".into(),
                failed: true,
            }),
        ),
        (
            "first error wins",
            vec![
                tt("", "", "crashed", Some(false), 50),
                tt("", "nope", "", Some(true), 50),
            ],
            Err(TargetError::UnreadyRevision {
                name: "crashed".into(),
                failed: true,
            }),
        ),
    ];
    for (what, traffic, want) in cases {
        let route = testing::route("default", "r", traffic);
        assert_eq!(resolve(&route, &configs, &revs), want, "{what}");
    }
}

#[test]
fn target_error_conditions() {
    let cases = [
        (
            TargetError::MissingConfiguration("x".into()),
            (
                False,
                "ConfigurationMissing",
                "Configuration \"x\" referenced in traffic not found.",
            ),
        ),
        (
            TargetError::UnreadyConfiguration {
                name: "x".into(),
                failed: true,
            },
            (
                False,
                "RevisionMissing",
                "Configuration \"x\" does not have any ready Revision.",
            ),
        ),
        (
            TargetError::UnreadyConfiguration {
                name: "x".into(),
                failed: false,
            },
            (
                Unknown,
                "RevisionMissing",
                "Configuration \"x\" is waiting for a Revision to become ready.",
            ),
        ),
        (
            TargetError::MissingRevision("x".into()),
            (
                False,
                "RevisionMissing",
                "Revision \"x\" referenced in traffic not found.",
            ),
        ),
        (
            TargetError::UnreadyRevision {
                name: "x".into(),
                failed: true,
            },
            (
                False,
                "RevisionMissing",
                "Revision \"x\" failed to become ready.",
            ),
        ),
        (
            TargetError::UnreadyRevision {
                name: "x".into(),
                failed: false,
            },
            (
                Unknown,
                "RevisionMissing",
                "Revision \"x\" is not yet ready.",
            ),
        ),
    ];
    for (err, (cs, reason, message)) in cases {
        assert_eq!(err.condition(), (cs, reason, message.to_owned()), "{err:?}");
    }
}

fn cfg_with(f: impl FnOnce(&mut Config)) -> Config {
    let mut c = Config::default();
    f(&mut c);
    c
}

fn local(name: &str) -> Vec<String> {
    vec![
        format!("{name}.default.svc.cluster.local"),
        format!("{name}.default.svc"),
        format!("{name}.default"),
    ]
}

#[test]
fn host_names() {
    let mut selective = DomainConfig::default();
    selective.domains.insert(
        "example.org".into(),
        [("app".to_string(), "nonprofit".to_string())].into(),
    );
    let no_catch_all = DomainConfig {
        domains: BTreeMap::new(),
    };
    // (what, labels, config, want main host, want visibility, want tag host of "v1")
    type Case<'a> = (
        &'a str,
        Vec<(&'a str, &'a str)>,
        Config,
        &'a str,
        Visibility,
        &'a str,
    );
    let cases: Vec<Case> = vec![
        (
            "default",
            vec![],
            Config::default(),
            "hello.default.example.com",
            Visibility::External,
            "v1-hello.default.example.com",
        ),
        (
            "custom domain and tag templates",
            vec![],
            cfg_with(|c| {
                c.network.domain_template = "{{.Name}}-{{.Namespace}}.{{.Domain}}".into();
                c.network.tag_template = "{{.Name}}-{{.Tag}}".into();
            }),
            "hello-default.example.com",
            Visibility::External,
            "hello-v1-default.example.com",
        ),
        (
            "cluster-local label ignores the domain template",
            vec![(label::VISIBILITY, "cluster-local")],
            cfg_with(|c| c.network.domain_template = "{{.Name}}-{{.Namespace}}.{{.Domain}}".into()),
            "hello.default.svc.cluster.local",
            Visibility::ClusterLocal,
            "v1-hello.default.svc.cluster.local",
        ),
        (
            "config-domain selector",
            vec![("app", "nonprofit")],
            cfg_with(|c| c.domain = selective.clone()),
            "hello.default.example.org",
            Visibility::External,
            "v1-hello.default.example.org",
        ),
        (
            "selector not matching falls back to the catch-all",
            vec![("app", "other")],
            cfg_with(|c| c.domain = selective.clone()),
            "hello.default.example.com",
            Visibility::External,
            "v1-hello.default.example.com",
        ),
        (
            "no catch-all: cluster-local",
            vec![],
            cfg_with(|c| c.domain = no_catch_all.clone()),
            "hello.default.svc.cluster.local",
            Visibility::ClusterLocal,
            "v1-hello.default.svc.cluster.local",
        ),
        (
            "custom cluster domain",
            vec![(label::VISIBILITY, "cluster-local")],
            cfg_with(|c| c.network.cluster_domain = "corp.internal".into()),
            "hello.default.svc.corp.internal",
            Visibility::ClusterLocal,
            "v1-hello.default.svc.corp.internal",
        ),
    ];
    for (what, labels, cfg, main, vis, tag_host) in cases {
        let mut route = testing::route("default", "hello", vec![]);
        for (k, v) in labels {
            route.metadata.labels.insert(k.into(), v.into());
        }
        let h = hosts(&route, ["v1"], &cfg).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(h.main, main, "{what}");
        assert_eq!(h.visibility, vis, "{what}");
        assert_eq!(h.tags["v1"], tag_host, "{what}");
        let cd = &cfg.network.cluster_domain;
        assert_eq!(
            h.local[&None][0],
            format!("hello.default.svc.{cd}"),
            "{what}"
        );
        assert_eq!(h.local[&None][2], "hello.default", "{what}");
    }
}

#[test]
fn urls_and_address() {
    let route = testing::route("default", "hello", vec![]);
    let cfg = cfg_with(|c| c.network.default_external_scheme = "https".into());
    let h = hosts(&route, [], &cfg).unwrap();
    assert_eq!(h.url(&h.main, &cfg), "https://hello.default.example.com");
    assert_eq!(
        address(&route, &cfg),
        "http://hello.default.svc.cluster.local"
    );
    let mut local_route = route.clone();
    local_route
        .metadata
        .labels
        .insert(label::VISIBILITY.into(), "cluster-local".into());
    let h = hosts(&local_route, [], &cfg).unwrap();
    assert_eq!(
        h.url(&h.main, &cfg),
        "http://hello.default.svc.cluster.local"
    );
}

#[test]
fn http_protocol_redirects_external_hosts_with_a_certificate() {
    // knative/serving `GetHTTPOption`: the annotation (any case) wins over config-network;
    // config's Disabled serves HTTP (an empty option); another annotation value is an error.
    let route = |annotation: Option<&str>| {
        let mut r = testing::route("default", "hello", vec![]);
        if let Some(v) = annotation {
            r.metadata
                .annotations
                .insert("networking.knative.dev/http-protocol".into(), v.into());
        }
        r
    };
    let cfg = |tls: bool, protocol: &str| {
        cfg_with(|c| {
            c.network.external_domain_tls = tls;
            c.network.http_protocol = protocol.into();
        })
    };
    for (tls, protocol, annotation, want) in [
        (true, "Redirected", None, Ok(true)),
        (true, "Enabled", None, Ok(false)),
        (true, "Disabled", None, Ok(false)),
        (true, "Enabled", Some("Redirected"), Ok(true)),
        (true, "Redirected", Some("enabled"), Ok(false)),
        // No certificate, nothing to redirect to.
        (false, "Redirected", None, Ok(false)),
        (false, "Enabled", Some("redirected"), Ok(false)),
        (
            true,
            "Enabled",
            Some("Disabled"),
            Err("incorrect http-protocol annotation: disabled".to_string()),
        ),
        (
            false,
            "Enabled",
            Some("foo"),
            Err("incorrect http-protocol annotation: foo".to_string()),
        ),
    ] {
        let got = hosts(&route(annotation), [], &cfg(tls, protocol)).map(|h| h.redirect);
        assert_eq!(
            got, want,
            "tls {tls}, config {protocol}, annotation {annotation:?}"
        );
    }
    // The older spelling is read too.
    let mut r = route(None);
    r.metadata.annotations.insert(
        "networking.knative.dev/httpOption".into(),
        "redirected".into(),
    );
    assert_eq!(
        hosts(&r, [], &cfg(true, "Enabled")).map(|h| h.redirect),
        Ok(true)
    );
}

#[test]
fn external_domain_tls_makes_https_urls_unless_opted_out() {
    let mut route = testing::route("default", "hello", vec![]);
    let cfg = cfg_with(|c| c.network.external_domain_tls = true);
    let h = hosts(&route, [], &cfg).unwrap();
    assert!(h.tls);
    assert_eq!(h.url(&h.main, &cfg), "https://hello.default.example.com");
    for (value, tls) in [
        ("true", false),
        ("True", false),
        ("false", true),
        ("maybe", true),
    ] {
        route.metadata.annotations.insert(
            "networking.knative.dev/disable-external-domain-tls".into(),
            value.into(),
        );
        assert_eq!(hosts(&route, [], &cfg).unwrap().tls, tls, "{value}");
    }
    // The older spelling opts out too.
    route.metadata.annotations.clear();
    route.metadata.annotations.insert(
        "networking.knative.dev/disable-auto-tls".into(),
        "true".into(),
    );
    assert!(!hosts(&route, [], &cfg).unwrap().tls);
    // Cluster-local routes never get one.
    route.metadata.annotations.clear();
    route
        .metadata
        .labels
        .insert(label::VISIBILITY.into(), "cluster-local".into());
    assert!(!hosts(&route, [], &cfg).unwrap().tls);
}

#[test]
fn bad_host_is_an_error() {
    let route = testing::route("default", "hello", vec![]);
    let cfg = cfg_with(|c| c.network.domain_template = "{{.Name}}".into());
    let err = hosts(&route, [], &cfg).unwrap_err();
    assert!(err.starts_with("invalid domain name \"hello\""), "{err}");
    let cfg = cfg_with(|c| c.network.tag_template = "{{.Tag}}_{{.Name}}".into());
    let err = hosts(&route, ["v1"], &cfg).unwrap_err();
    assert!(
        err.starts_with("invalid domain name \"v1_hello.default.example.com\""),
        "{err}"
    );
}

fn status_traffic_fixture() -> Vec<TrafficTarget> {
    vec![
        tt("", "", "hello-00002", Some(true), 90),
        tt("", "", "hello-00001", Some(false), 10),
        tt("old", "", "hello-00001", Some(false), 0),
        tt("", "", "hello-00002", Some(false), 0),
    ]
}

#[test]
fn routing_table_external() {
    let route = testing::route("default", "hello", vec![]);
    let cfg = Config::default();
    let h = hosts(&route, ["old"], &cfg).unwrap();
    let traffic = status_traffic(status_traffic_fixture(), &h, &cfg);
    assert_eq!(
        traffic[2].url.as_deref(),
        Some("http://old-hello.default.example.com")
    );
    assert_eq!(traffic[0].url, None);

    let entries = host_routes(&route, &h, &traffic, &Rollout::default());
    let mut want_hosts: Vec<String> = vec![
        "hello.default.example.com".into(),
        "old-hello.default.example.com".into(),
    ];
    want_hosts.extend(local("hello"));
    want_hosts.extend(local("old-hello"));
    want_hosts.sort();
    assert_eq!(entries.keys().cloned().collect::<Vec<_>>(), want_hosts);

    let t = |rev: &str, percent| RevisionTarget {
        namespace: "default".into(),
        revision: rev.into(),
        percent,
    };
    let main = &entries["hello.default.example.com"];
    assert_eq!(main.visibility, Visibility::External);
    assert_eq!(main.tag, None);
    assert_eq!(main.targets, [t("hello-00002", 90), t("hello-00001", 10)]);
    assert_eq!(main.tag_targets.keys().collect::<Vec<_>>(), ["old"]);
    assert_eq!(main.tag_targets["old"], [t("hello-00001", 100)]);

    let tag = &entries["old-hello.default.example.com"];
    assert_eq!(tag.tag.as_deref(), Some("old"));
    assert_eq!(
        tag.targets,
        [t("hello-00001", 100)],
        "a 0% tag is reachable on its own host"
    );
    assert!(tag.tag_targets.is_empty());

    let local_main = &entries["hello.default.svc.cluster.local"];
    assert_eq!(local_main.visibility, Visibility::ClusterLocal);
    assert_eq!(local_main.targets, main.targets);
    assert_eq!(
        entries["old-hello.default"].visibility,
        Visibility::ClusterLocal
    );
}

#[test]
fn routing_table_cluster_local_and_merging() {
    let mut route = testing::route("default", "hello", vec![]);
    route
        .metadata
        .labels
        .insert(label::VISIBILITY.into(), "cluster-local".into());
    let cfg = Config::default();
    let h = hosts(&route, [], &cfg).unwrap();
    // One revision listed twice (latest and pinned): summed, and alone it gets 100.
    let traffic = vec![
        tt("", "", "a", Some(true), 60),
        tt("", "", "a", Some(false), 40),
    ];
    let entries = host_routes(&route, &h, &traffic, &Rollout::default());
    assert_eq!(entries.len(), 3);
    assert!(
        entries
            .values()
            .all(|e| e.visibility == Visibility::ClusterLocal)
    );
    let e = &entries["hello.default.svc.cluster.local"];
    assert_eq!(e.targets.len(), 1);
    assert_eq!(
        (e.targets[0].revision.as_str(), e.targets[0].percent),
        ("a", 100)
    );
    assert!(entries.contains_key("hello.default.svc"));
    assert!(entries.contains_key("hello.default"));
}

#[test]
fn replacing_a_routes_hosts() {
    let route = testing::route("default", "hello", vec![]);
    let cfg = Config::default();
    let h = hosts(&route, [], &cfg).unwrap();
    let traffic = vec![tt("", "", "a", Some(true), 100)];
    let entries = host_routes(&route, &h, &traffic, &Rollout::default());
    let table = RoutingTable::default().replace_route("default", "hello", &entries);
    assert_eq!(table.hosts.len(), 4);

    // Another route cannot take these hosts.
    let mut other = entries.clone();
    for e in other.values_mut() {
        e.route = "thief".into();
    }
    let table = table.replace_route("default", "thief", &other);
    assert!(table.hosts.values().all(|e| e.route == "hello"));
    assert!(table.holds("default", "hello", &entries));
    assert_eq!(table.route_hosts("default", "thief").count(), 0);
    assert!(table.holds("default", "thief", &BTreeMap::new()));

    // Re-publishing drops hosts the route no longer has; an empty set removes it.
    let mut fewer = entries.clone();
    fewer.retain(|k, _| k == "hello.default.example.com");
    let table = table.replace_route("default", "hello", &fewer);
    assert_eq!(
        table.hosts.keys().collect::<Vec<_>>(),
        ["hello.default.example.com"]
    );
    let table = table.replace_route("default", "hello", &BTreeMap::new());
    assert!(table.hosts.is_empty());
}

fn cond(st: &RouteStatus, ty: &str) -> (ConditionStatus, String, String) {
    let c = st.status.condition(ty).unwrap();
    (c.status, c.reason.clone(), c.message.clone())
}

#[test]
fn status_outcomes() {
    let cfg = Config::default();
    let now = test_clock();
    let mut route = testing::route("default", "hello", vec![]);
    route.metadata.generation = 2;
    let h = hosts(&route, [], &cfg).unwrap();

    let st = status(
        &route,
        &Outcome::BadHosts("invalid domain name".into()),
        &cfg,
        now,
    );
    assert_eq!(st.status.observed_generation, 2);
    assert_eq!(
        cond(&st, ALL_TRAFFIC_ASSIGNED),
        (False, "ErrorConfig".into(), "invalid domain name".into())
    );
    assert_eq!(cond(&st, READY).0, False);

    let st = status(
        &route,
        &Outcome::Unresolved(
            h.clone(),
            TargetError::UnreadyConfiguration {
                name: "hello".into(),
                failed: false,
            },
        ),
        &cfg,
        now,
    );
    assert_eq!(cond(&st, ALL_TRAFFIC_ASSIGNED).0, Unknown);
    assert_eq!(cond(&st, INGRESS_READY).1, "IngressNotConfigured");
    assert_eq!(cond(&st, READY).1, "RevisionMissing");
    assert_eq!(st.url, "http://hello.default.example.com");
    assert!(st.traffic.is_empty());

    let traffic = vec![tt("", "", "a", Some(true), 100)];
    let st = status(
        &route,
        &Outcome::Published(h.clone(), traffic.clone(), false),
        &cfg,
        now,
    );
    for ty in [ALL_TRAFFIC_ASSIGNED, INGRESS_READY, READY] {
        assert_eq!(cond(&st, ty), (True, String::new(), String::new()), "{ty}");
    }
    assert_eq!(
        cond(&st, CERTIFICATE_PROVISIONED),
        (
            True,
            "TLSNotEnabled".into(),
            "external-domain-tls is not enabled".into()
        )
    );
    assert_eq!(st.traffic, traffic);
    assert_eq!(
        st.address.as_ref().unwrap().url,
        "http://hello.default.svc.cluster.local"
    );

    // Later unresolvable traffic keeps the previous status traffic.
    route.status = Some(st);
    let st = status(
        &route,
        &Outcome::Unresolved(h, TargetError::MissingRevision("b".into())),
        &cfg,
        now,
    );
    assert_eq!(st.traffic, traffic);
    assert_eq!(cond(&st, INGRESS_READY).0, True);
    assert_eq!(cond(&st, READY).1, "RevisionMissing");

    let mut local_route = testing::route("default", "hello", vec![]);
    local_route
        .metadata
        .labels
        .insert(label::VISIBILITY.into(), "cluster-local".into());
    let h = hosts(&local_route, [], &cfg).unwrap();
    let st = status(
        &local_route,
        &Outcome::Published(h, vec![], false),
        &cfg,
        now,
    );
    assert_eq!(
        cond(&st, CERTIFICATE_PROVISIONED).2,
        "TLS is not enabled for cluster-local"
    );
}
