//! Pure builders of the Route reconciler (Knative `pkg/reconciler/route/{traffic,domains,
//! resources}`): traffic resolution, host names, status and the routing-table entries.
//!
//! Gradual rollout is [`super::rollout`]'s: the routing-table entries and the status take
//! the rollout to publish.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};
use wisp_api::{
    config::Config,
    meta::{ConditionStatus, Status},
    serving::{Addressable, Configuration, Revision, Route, RouteStatus, TrafficTarget},
};

use super::rollout::{self, Rollout};
use crate::{
    conditions::{ConditionSet, READY},
    names::label,
    routing::{HostRoute, RevisionTarget, Visibility},
};

pub use wisp_api::serving::condition::{
    ALL_TRAFFIC_ASSIGNED, CERTIFICATE_PROVISIONED, INGRESS_READY,
};
/// Route conditions: Ready ⇐ AllTrafficAssigned, IngressReady, CertificateProvisioned.
pub const CONDITIONS: ConditionSet = ConditionSet::new(
    READY,
    &[ALL_TRAFFIC_ASSIGNED, INGRESS_READY, CERTIFICATE_PROVISIONED],
);

const CLUSTER_LOCAL: &str = "cluster-local";

// ---------------------------------------------------------------------------------------
// Traffic resolution (Knative `traffic.BuildTrafficConfiguration`)

/// Why a traffic target cannot be routed yet; each maps to Knative's `Mark*` on
/// AllTrafficAssigned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TargetError {
    /// `Configuration "x" referenced in traffic not found.`
    MissingConfiguration(String),
    /// The configuration has no latest ready revision: still deploying (Unknown) or its
    /// Ready condition is False (False).
    UnreadyConfiguration { name: String, failed: bool },
    /// `Revision "x" referenced in traffic not found.`
    MissingRevision(String),
    /// The revision exists but is not Ready: Unknown while deploying, False once failed.
    UnreadyRevision { name: String, failed: bool },
}

impl TargetError {
    /// The AllTrafficAssigned condition this error stands for: (status, reason, message).
    pub fn condition(&self) -> (ConditionStatus, &'static str, String) {
        use ConditionStatus::{False, Unknown};
        match self {
            TargetError::MissingConfiguration(n) => (
                False,
                "ConfigurationMissing",
                format!("Configuration {n:?} referenced in traffic not found."),
            ),
            TargetError::UnreadyConfiguration { name, failed: true } => (
                False,
                "RevisionMissing",
                format!("Configuration {name:?} does not have any ready Revision."),
            ),
            TargetError::UnreadyConfiguration {
                name,
                failed: false,
            } => (
                Unknown,
                "RevisionMissing",
                format!("Configuration {name:?} is waiting for a Revision to become ready."),
            ),
            TargetError::MissingRevision(n) => (
                False,
                "RevisionMissing",
                format!("Revision {n:?} referenced in traffic not found."),
            ),
            TargetError::UnreadyRevision { name, failed: true } => (
                False,
                "RevisionMissing",
                format!("Revision {name:?} failed to become ready."),
            ),
            TargetError::UnreadyRevision {
                name,
                failed: false,
            } => (
                Unknown,
                "RevisionMissing",
                format!("Revision {name:?} is not yet ready."),
            ),
        }
    }
}

fn ready_status(status: Option<&Status>) -> ConditionStatus {
    status
        .and_then(|s| s.condition(READY))
        .map_or(ConditionStatus::Unknown, |c| c.status)
}

/// Knative's `Revision.IsReady`: Ready True for the generation it was observed at.
fn revision_ready(rev: &Revision) -> bool {
    let st = rev.status.as_ref().map(|s| &s.status);
    ready_status(st) == ConditionStatus::True
        && st.is_some_and(|s| s.observed_generation == rev.metadata.generation)
}

/// Resolves `route.spec.traffic` against the configurations and revisions of its namespace
/// (by name) into status traffic: every entry names its revision; configuration targets
/// follow `latestReadyRevisionName` and keep their `configurationName` (for the rollout;
/// [`status_traffic`] clears it); `tag`, `percent` and `latestRevision` are kept;
/// entries with the same (tag, revision, latestRevision) are merged by summing percent.
/// URLs are not filled in here (see [`status_traffic`]).
///
/// Every target is checked; the first problem found is returned (Knative reports the first
/// bad target only).
pub fn resolve(
    route: &Route,
    configurations: &BTreeMap<String, Configuration>,
    revisions: &BTreeMap<String, Revision>,
) -> Result<Vec<TrafficTarget>, TargetError> {
    let mut first_err = None;
    let mut out: Vec<TrafficTarget> = Vec::new();
    for tt in &route.spec.traffic {
        let revision = if !tt.revision_name.is_empty() {
            match revisions.get(&tt.revision_name) {
                None => Err(TargetError::MissingRevision(tt.revision_name.clone())),
                Some(rev) if !revision_ready(rev) => Err(TargetError::UnreadyRevision {
                    name: rev.metadata.name.clone(),
                    failed: ready_status(rev.status.as_ref().map(|s| &s.status))
                        == ConditionStatus::False,
                }),
                Some(rev) => Ok(rev.metadata.name.clone()),
            }
        } else {
            resolve_configuration(&tt.configuration_name, configurations, revisions)
        };
        match revision {
            Err(e) => {
                first_err.get_or_insert(e);
            }
            Ok(revision_name) => {
                let configuration_name = if tt.revision_name.is_empty() {
                    tt.configuration_name.clone()
                } else {
                    String::new()
                };
                let entry = TrafficTarget {
                    tag: tt.tag.clone(),
                    revision_name,
                    configuration_name,
                    latest_revision: tt.latest_revision,
                    percent: tt.percent,
                    url: None,
                };
                merge_into(&mut out, entry);
            }
        }
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

fn resolve_configuration(
    name: &str,
    configurations: &BTreeMap<String, Configuration>,
    revisions: &BTreeMap<String, Revision>,
) -> Result<String, TargetError> {
    let cfg = configurations
        .get(name)
        .ok_or_else(|| TargetError::MissingConfiguration(name.to_owned()))?;
    let status = cfg.status.as_ref();
    let latest_ready = status.map_or("", |s| s.latest_ready_revision_name.as_str());
    if latest_ready.is_empty() {
        return Err(TargetError::UnreadyConfiguration {
            name: name.to_owned(),
            failed: ready_status(status.map(|s| &s.status)) == ConditionStatus::False,
        });
    }
    // The latest ready revision may have been deleted (GC, or by hand) since.
    if !revisions.contains_key(latest_ready) {
        return Err(TargetError::MissingRevision(latest_ready.to_owned()));
    }
    Ok(latest_ready.to_owned())
}

/// Appends `entry`, or adds its percent to an earlier entry with the same tag, revision
/// and latestRevision.
pub(crate) fn merge_into(out: &mut Vec<TrafficTarget>, entry: TrafficTarget) {
    let same = |t: &&mut TrafficTarget| {
        t.tag == entry.tag
            && t.revision_name == entry.revision_name
            && t.latest_revision == entry.latest_revision
    };
    match out.iter_mut().find(|t| same(t)) {
        Some(t) => {
            t.percent = match (t.percent, entry.percent) {
                (None, None) => None,
                (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
            }
        }
        None => out.push(entry),
    }
}

// ---------------------------------------------------------------------------------------
// Host names (Knative `domains`)

/// The names a route is reachable under.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hosts {
    pub visibility: Visibility,
    /// The external hosts get a certificate (`external-domain-tls`, not opted out): the
    /// URLs say https.
    pub tls: bool,
    /// Plain HTTP to the external hosts is redirected to https (`GetHTTPOption` is
    /// Redirected and the hosts have a certificate).
    pub redirect: bool,
    /// The host of `status.url`.
    pub main: String,
    /// Tag → the host of that tag's `url`.
    pub tags: BTreeMap<String, String>,
    /// Traffic name (None = the main one) → the cluster-local names of its placeholder
    /// service: `<name>.<ns>`, `<name>.<ns>.svc`, `<name>.<ns>.svc.<cluster-domain>`.
    pub local: BTreeMap<Option<String>, Vec<String>>,
}

impl Hosts {
    /// `status.url`: https for external routes with external-domain-tls, else
    /// `default-external-scheme`; http for cluster-local ones.
    pub fn url(&self, host: &str, cfg: &Config) -> String {
        let scheme = match self.visibility {
            Visibility::External if self.tls => "https",
            Visibility::External => cfg.network.default_external_scheme.as_str(),
            Visibility::ClusterLocal => "http",
        };
        format!("{scheme}://{host}")
    }
}

/// The route's cluster-local service address (`status.address.url`).
pub fn address(route: &Route, cfg: &Config) -> String {
    format!(
        "http://{}.{}.svc.{}",
        route.metadata.name, route.metadata.namespace, cfg.network.cluster_domain
    )
}

/// Computes the host names of a route and its `tags`; an error (a domain or tag template
/// that cannot render, or renders something that is not a DNS name) is the message for
/// AllTrafficAssigned reason `ErrorConfig`.
pub fn hosts<'a>(
    route: &Route,
    tags: impl IntoIterator<Item = &'a str>,
    cfg: &Config,
) -> Result<Hosts, String> {
    let meta = &route.metadata;
    let cluster_suffix = format!("svc.{}", cfg.network.cluster_domain);
    let labelled_local =
        meta.labels.get(label::VISIBILITY).map(String::as_str) == Some(CLUSTER_LOCAL);
    let domain = if labelled_local {
        cluster_suffix.clone()
    } else {
        cfg.domain.lookup(&meta.labels, &cfg.network.cluster_domain)
    };
    let visibility = if labelled_local || domain == cluster_suffix {
        Visibility::ClusterLocal
    } else {
        Visibility::External
    };
    let full = |name: &str| -> Result<String, String> {
        let host = if labelled_local {
            // Knative ignores a custom domain-template for cluster-local routes.
            format!("{name}.{}.{domain}", meta.namespace)
        } else {
            cfg.network
                .render_domain(
                    name,
                    &meta.namespace,
                    &domain,
                    &meta.annotations,
                    &meta.labels,
                )
                .map_err(|e| e.to_string())?
        };
        check_fqdn(&host)?;
        Ok(host.to_ascii_lowercase())
    };
    let local = |name: &str| -> Vec<String> {
        let base = format!("{name}.{}", meta.namespace).to_ascii_lowercase();
        vec![
            format!("{base}.{cluster_suffix}"),
            format!("{base}.svc"),
            base,
        ]
    };

    let tls = visibility == Visibility::External
        && wisp_api::annotations::networking::external_domain_tls(cfg, &meta.annotations);
    // Read whether or not the hosts have a certificate: a bad annotation is an error either
    // way, as `MakeIngressSpec` reads it for every KIngress.
    let redirect =
        wisp_api::annotations::networking::http_redirected(cfg, &meta.annotations)? && tls;
    let mut out = Hosts {
        visibility,
        tls,
        redirect,
        main: full(&meta.name)?,
        tags: BTreeMap::new(),
        local: BTreeMap::new(),
    };
    out.local.insert(None, local(&meta.name));
    for tag in tags {
        let name = cfg
            .network
            .render_tag(tag, &meta.name)
            .map_err(|e| e.to_string())?;
        out.tags.insert(tag.to_owned(), full(&name)?);
        out.local.insert(Some(tag.to_owned()), local(&name));
    }
    Ok(out)
}

/// Kubernetes' `IsFullyQualifiedDomainName`: an RFC 1123 subdomain with at least two labels.
fn check_fqdn(host: &str) -> Result<(), String> {
    let name = host.strip_suffix('.').unwrap_or(host);
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    let problem = if name.is_empty() {
        Some("a domain name must not be empty")
    } else if name.len() > 253 {
        Some("must be no more than 253 characters")
    } else if !name.split('.').all(label_ok) {
        Some(
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
        )
    } else if name.split('.').count() < 2 {
        Some("should be a domain with at least two segments separated by dots")
    } else {
        None
    };
    match problem {
        Some(p) => Err(format!(
            "invalid domain name {host:?}: url: Invalid value: {host:?}: {p}"
        )),
        None => Ok(()),
    }
}

/// The tags of a route's spec traffic, in order, without duplicates.
pub fn spec_tags(route: &Route) -> Vec<&str> {
    let mut seen = BTreeSet::new();
    route
        .spec
        .traffic
        .iter()
        .map(|t| t.tag.as_str())
        .filter(|t| !t.is_empty() && seen.insert(*t))
        .collect()
}

/// Resolved traffic in its status form: the `url` of every tagged entry filled in, the
/// configuration names cleared (status traffic names revisions only).
pub fn status_traffic(
    mut traffic: Vec<TrafficTarget>,
    hosts: &Hosts,
    cfg: &Config,
) -> Vec<TrafficTarget> {
    for t in &mut traffic {
        t.url = hosts.tags.get(&t.tag).map(|h| hosts.url(h, cfg));
        t.configuration_name.clear();
    }
    traffic
}

// ---------------------------------------------------------------------------------------
// Status

/// Everything the reconciler learned about a route, for [`status`].
#[derive(Clone, Debug)]
pub enum Outcome {
    /// The domain or tag template produced no valid host (AllTrafficAssigned False
    /// `ErrorConfig`).
    BadHosts(String),
    /// Some target cannot be routed; the previous routing stays in place.
    Unresolved(Hosts, TargetError),
    /// Traffic resolved (status form, with URLs) and published for these hosts; true while
    /// a gradual rollout is in flight.
    Published(Hosts, Vec<TrafficTarget>, bool),
}

/// The Route status for an outcome, starting from the stored status (unchanged conditions
/// keep their transition times; unresolved traffic keeps the previous status traffic).
pub fn status(route: &Route, outcome: &Outcome, cfg: &Config, now: DateTime<Utc>) -> RouteStatus {
    let mut st = route.status.clone().unwrap_or_default();
    let s = &mut st.status;
    CONDITIONS.initialize(s, now);
    if s.condition(INGRESS_READY)
        .is_some_and(|c| c.reason.is_empty() && c.status == ConditionStatus::Unknown)
    {
        CONDITIONS.mark_unknown(
            s,
            INGRESS_READY,
            "IngressNotConfigured",
            "Ingress has not yet been reconciled.",
            now,
        );
    }
    s.observed_generation = route.metadata.generation;
    let hosts = match outcome {
        Outcome::BadHosts(msg) => {
            CONDITIONS.mark_false(s, ALL_TRAFFIC_ASSIGNED, "ErrorConfig", msg, now);
            return st;
        }
        Outcome::Unresolved(hosts, err) => {
            let (cs, reason, message) = err.condition();
            CONDITIONS.mark(s, ALL_TRAFFIC_ASSIGNED, cs, reason, &message, now);
            hosts
        }
        Outcome::Published(hosts, traffic, rolling) => {
            CONDITIONS.mark_true(s, ALL_TRAFFIC_ASSIGNED, now);
            if *rolling {
                // `MarkIngressRolloutInProgress`.
                CONDITIONS.mark_unknown(
                    s,
                    INGRESS_READY,
                    "RolloutInProgress",
                    "A gradual rollout of the latest revision(s) is in progress.",
                    now,
                );
            } else {
                CONDITIONS.mark_true(s, INGRESS_READY, now);
            }
            st.traffic = traffic.clone();
            hosts
        }
    };
    let s = &mut st.status;
    if hosts.tls {
        // wisp's CA issues the hosts' certificate when a client asks (`MarkCertificateReady`).
        CONDITIONS.mark_true(s, CERTIFICATE_PROVISIONED, now);
    } else {
        let tls_message = match hosts.visibility {
            Visibility::External => "external-domain-tls is not enabled",
            Visibility::ClusterLocal => "TLS is not enabled for cluster-local",
        };
        CONDITIONS.mark(
            s,
            CERTIFICATE_PROVISIONED,
            ConditionStatus::True,
            "TLSNotEnabled",
            tls_message,
            now,
        );
    }
    st.url = hosts.url(&hosts.main, cfg);
    st.address = Some(Addressable {
        url: address(route, cfg),
    });
    st
}

// ---------------------------------------------------------------------------------------
// Routing table

/// The routing-table entries of a route: for each traffic name (the main one and every
/// tag) its external host (external routes only) and its cluster-local names.
///
/// `traffic` is the resolved traffic ([`resolve`]). Each traffic name splits as Knative's
/// KIngress rule does (`pkg/reconciler/route/resources/ingress.go` `makeBaseIngressPath`)
/// over its targets consolidated by revision ([`rollout::targets_by_tag`]): the targets with
/// a non-zero percent, a `latestRevision` target in a rollout over the rollout's revisions
/// (a revision listed twice is summed), in traffic order. The main name's `tag_targets`
/// serve the `Knative-Serving-Tag` header. A tag alone gets 100%, so a 0% tag is still
/// reachable on its URL (`pkg/reconciler/route/traffic/traffic.go`).
pub fn host_routes(
    route: &Route,
    hosts: &Hosts,
    traffic: &[TrafficTarget],
    ro: &Rollout,
) -> BTreeMap<String, HostRoute> {
    let ns = &route.metadata.namespace;
    let groups = rollout::targets_by_tag(traffic);
    let split = |tag: &str| -> Vec<RevisionTarget> {
        let mut out: Vec<RevisionTarget> = Vec::new();
        let targets = groups.get(tag).map_or(&[][..], Vec::as_slice);
        for (revision, pct) in rollout::splits(targets, ro, tag) {
            let pct = u32::try_from(pct).unwrap_or(0);
            match out.iter_mut().find(|m| m.revision == revision) {
                Some(m) => m.percent += pct,
                None => out.push(RevisionTarget {
                    namespace: ns.clone(),
                    revision: revision.to_owned(),
                    percent: pct,
                }),
            }
        }
        if let [only] = out.as_mut_slice() {
            only.percent = 100;
        }
        out
    };
    let main = split("");
    let tag_targets: BTreeMap<String, Vec<RevisionTarget>> = groups
        .keys()
        .filter(|t| !t.is_empty())
        .map(|t| (t.clone(), split(t)))
        .collect();

    let entry = |tag: Option<&String>, visibility: Visibility| HostRoute {
        namespace: ns.clone(),
        route: route.metadata.name.clone(),
        tag: tag.cloned(),
        visibility,
        targets: match tag {
            None => main.clone(),
            Some(t) => tag_targets[t].clone(),
        },
        tag_targets: match tag {
            None => tag_targets.clone(),
            Some(_) => BTreeMap::new(),
        },
        rewrite_host: None,
        tls: hosts.tls && visibility == Visibility::External,
        redirect: hosts.redirect && visibility == Visibility::External,
    };
    let mut out = BTreeMap::new();
    for (name, locals) in &hosts.local {
        if name.as_ref().is_some_and(|t| !tag_targets.contains_key(t)) {
            continue;
        }
        for h in locals {
            out.insert(h.clone(), entry(name.as_ref(), Visibility::ClusterLocal));
        }
    }
    if hosts.visibility == Visibility::External {
        out.insert(hosts.main.clone(), entry(None, Visibility::External));
        for (tag, h) in &hosts.tags {
            if tag_targets.contains_key(tag) {
                out.insert(h.clone(), entry(Some(tag), Visibility::External));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests;
