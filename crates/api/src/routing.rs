//! The resolved routing the route reconciler publishes for the ingress: host → weighted
//! revision targets. Immutable snapshots swapped atomically, so the request path reads
//! them without locks.
//!
//! Here, in the pure API crate, so that the controller (which writes it) and the ingress
//! (which reads it) share it without the front door depending on the controller and its
//! store.

use std::collections::BTreeMap;

/// Whether a host is served on the external or the cluster-local listener.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Visibility {
    External,
    ClusterLocal,
}

/// One revision and its share of a host's traffic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RevisionTarget {
    pub namespace: String,
    pub revision: String,
    /// 0–100; the targets of one host sum to 100.
    pub percent: u32,
}

/// Where requests for one host go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostRoute {
    pub namespace: String,
    pub route: String,
    /// The traffic tag this host serves, or None for the route's main host.
    pub tag: Option<String>,
    pub visibility: Visibility,
    /// Non-zero targets, in traffic order.
    pub targets: Vec<RevisionTarget>,
    /// For the main host: tag → targets, for `Knative-Serving-Tag` header routing.
    pub tag_targets: BTreeMap<String, Vec<RevisionTarget>>,
    /// A DomainMapping's host: requests go where this cluster-local host goes, with `Host`
    /// rewritten to it and `K-Original-Host` set to the mapped domain (the `RewriteHost`
    /// and `AppendHeaders` of knative/serving
    /// `pkg/reconciler/domainmapping/resources/ingress.go`). Followed at request time, so
    /// the mapping follows its target's traffic without being republished. `targets` is
    /// empty then.
    pub rewrite_host: Option<String>,
    /// The host has a certificate on the HTTPS listener (a DomainMapping's `spec.tls`, or
    /// `external-domain-tls`, whose certificates wisp's CA issues).
    pub tls: bool,
    /// Plain HTTP requests for the host are redirected to https (a host with a certificate
    /// whose object's `http-protocol` — annotation, else config-network — is Redirected:
    /// its KIngress's `httpOption: Redirected`).
    pub redirect: bool,
}

/// The routing-table key of a DomainMapping's entries: `(namespace, "domainmapping:<name>")`.
/// A route name is a DNS-1035 label, which never holds a `:`, so the two never collide.
pub fn domain_mapping_key(name: &str) -> String {
    format!("domainmapping:{name}")
}

/// The whole routing table.
///
/// Both maps are persistent (`imbl::OrdMap`: cloned in O(1), changed in O(log n) by
/// copying only the path to the change), and each route's hosts are indexed, so that
/// publishing one route's change costs the same with ten thousand routes as with one:
/// nothing here walks or copies the whole table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RoutingTable {
    /// Lower-case host (no port) → route.
    pub hosts: imbl::OrdMap<String, HostRoute>,
    /// (namespace, route) → the hosts in `hosts` that route holds.
    routes: imbl::OrdMap<(String, String), Vec<String>>,
}

impl RoutingTable {
    /// A table of these hosts (for tests and tools; the controller builds it route by
    /// route with [`RoutingTable::replace_route`]).
    pub fn from_hosts(hosts: impl IntoIterator<Item = (String, HostRoute)>) -> RoutingTable {
        let mut table = RoutingTable::default();
        for (host, route) in hosts {
            table
                .routes
                .entry((route.namespace.clone(), route.route.clone()))
                .or_default()
                .push(host.clone());
            table.hosts.insert(host, route);
        }
        table
    }

    /// The hosts `namespace/name` holds now, in host order.
    pub fn route_hosts<'a>(
        &'a self,
        namespace: &str,
        name: &str,
    ) -> impl Iterator<Item = (&'a String, &'a HostRoute)> + 'a {
        let key = (namespace.to_owned(), name.to_owned());
        self.routes
            .get(&key)
            .into_iter()
            .flatten()
            .filter_map(|h| self.hosts.get_key_value(h))
    }

    /// Whether `namespace/name` holds exactly `entries`.
    pub fn holds(
        &self,
        namespace: &str,
        name: &str,
        entries: &BTreeMap<String, HostRoute>,
    ) -> bool {
        let mut mine = self.route_hosts(namespace, name);
        let same = entries
            .iter()
            .all(|(h, e)| mine.next().is_some_and(|(mh, me)| mh == h && me == e));
        same && mine.next().is_none()
    }

    /// The table with route `namespace/name`'s hosts replaced by `entries` (none: the
    /// route is gone). A host another route already holds stays that route's (first come,
    /// first served), so one route cannot hijack another's name with a clever domain
    /// template.
    pub fn replace_route(
        &self,
        namespace: &str,
        name: &str,
        entries: &BTreeMap<String, HostRoute>,
    ) -> RoutingTable {
        let mut next = self.clone();
        let key = (namespace.to_owned(), name.to_owned());
        for host in next.routes.remove(&key).unwrap_or_default() {
            next.hosts.remove(&host);
        }
        let mut held = Vec::new();
        for (host, e) in entries {
            if !next.hosts.contains_key(host) {
                next.hosts.insert(host.clone(), e.clone());
                held.push(host.clone());
            }
        }
        if !held.is_empty() {
            // `entries` is in host order, so `held` is too (what `route_hosts` promises).
            next.routes.insert(key, held);
        }
        next
    }
}
