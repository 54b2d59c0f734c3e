//! What kube-apiserver does to a Knative object before Knative's webhook sees it: the CRD's
//! structural schema prunes every field it does not list (reported to the client as
//! `unknown field "…"` under `fieldValidation=Warn`/`Strict`), and a `null` for a
//! non-nullable field is dropped as if it were absent
//! (`apiextensions-apiserver/pkg/apiserver/schema/pruning/algorithm.go`,
//! `…/schema/defaulting/prunenulls.go`). Knative's CRDs mark no field nullable.
//!
//! The schema is Knative's, not wisp's published one: the revision spec's allow-lists are
//! those `knative/serving` `cmd/schema-tweak/overrides.go` writes into the CRDs (feature-
//! flagged fields are in the schema whatever the flag; the webhook judges them), the rest
//! is what controller-gen generates from the Go types (`ServiceSpec`, `TrafficTarget`, …).
//!
//! `spec.template.metadata` is `x-kubernetes-preserve-unknown-fields` in Knative's CRDs, so
//! kube keeps (and does not report) unknown keys there; Knative's defaulting webhook then
//! round-trips the object through Go's `ObjectMeta` (knative.dev/pkg
//! `webhook/resourcesemantics/defaulting` `roundTripPatch`), which drops them. Both steps
//! end in the same stored object, so they are done here as one silent drop.
//!
//! Sub-trees whose schema is a whole Kubernetes type Knative does not narrow (`affinity`,
//! `tolerations`, `initContainers`, `emptyDir`, …) are kept as they are, apart from nulls:
//! wisp has no copy of those core/v1 schemas (listed in docs/differences.md).

use serde_json::{Map, Value};

use crate::meta::OBJECT_META_FIELDS;

/// One schema node.
#[derive(Debug)]
enum Node {
    /// A scalar, or a Kubernetes type kept whole.
    Any,
    /// An object with exactly these properties.
    Obj(&'static [(&'static str, Node)]),
    /// A list of items of this schema.
    List(&'static Node),
    /// `metav1.ObjectMeta` inside a template: unknown keys dropped without a report.
    EmbeddedMeta,
}

use Node::{Any, EmbeddedMeta, List, Obj};

const KEY_TO_PATH: Node = Obj(&[("key", Any), ("path", Any), ("mode", Any)]);
const KEY_SELECTOR: Node = Obj(&[("name", Any), ("key", Any), ("optional", Any)]);
const REF: Node = Obj(&[("name", Any), ("optional", Any)]);

const ENV: Node = Obj(&[
    ("name", Any),
    ("value", Any),
    (
        "valueFrom",
        Obj(&[
            ("configMapKeyRef", KEY_SELECTOR),
            ("secretKeyRef", KEY_SELECTOR),
            ("fieldRef", Any),
            ("resourceFieldRef", Any),
        ]),
    ),
]);

const ENV_FROM: Node = Obj(&[("prefix", Any), ("configMapRef", REF), ("secretRef", REF)]);

const PROBE: Node = Obj(&[
    ("initialDelaySeconds", Any),
    ("timeoutSeconds", Any),
    ("periodSeconds", Any),
    ("successThreshold", Any),
    ("failureThreshold", Any),
    (
        "httpGet",
        Obj(&[
            ("host", Any),
            ("httpHeaders", List(&Obj(&[("name", Any), ("value", Any)]))),
            ("path", Any),
            ("port", Any),
            ("scheme", Any),
        ]),
    ),
    ("exec", Obj(&[("command", Any)])),
    ("tcpSocket", Obj(&[("host", Any), ("port", Any)])),
    ("grpc", Obj(&[("port", Any), ("service", Any)])),
]);

const CONTAINER: Node = Obj(&[
    ("args", Any),
    ("command", Any),
    ("env", List(&ENV)),
    ("envFrom", List(&ENV_FROM)),
    ("image", Any),
    ("imagePullPolicy", Any),
    ("livenessProbe", PROBE),
    ("name", Any),
    (
        "ports",
        List(&Obj(&[
            ("containerPort", Any),
            ("name", Any),
            ("protocol", Any),
        ])),
    ),
    ("readinessProbe", PROBE),
    ("resources", Obj(&[("limits", Any), ("requests", Any)])),
    (
        "securityContext",
        Obj(&[
            ("allowPrivilegeEscalation", Any),
            ("capabilities", Obj(&[("add", Any), ("drop", Any)])),
            ("privileged", Any),
            ("readOnlyRootFilesystem", Any),
            ("runAsGroup", Any),
            ("runAsNonRoot", Any),
            ("runAsUser", Any),
            ("seccompProfile", Any),
        ]),
    ),
    ("startupProbe", PROBE),
    ("terminationMessagePath", Any),
    ("terminationMessagePolicy", Any),
    (
        "volumeMounts",
        List(&Obj(&[
            ("name", Any),
            ("readOnly", Any),
            ("mountPath", Any),
            ("subPath", Any),
            ("mountPropagation", Any),
        ])),
    ),
    ("workingDir", Any),
]);

const ITEMS_SOURCE: Node = Obj(&[
    ("items", List(&KEY_TO_PATH)),
    ("name", Any),
    ("optional", Any),
]);

const VOLUME: Node = Obj(&[
    ("name", Any),
    (
        "secret",
        Obj(&[
            ("defaultMode", Any),
            ("items", List(&KEY_TO_PATH)),
            ("optional", Any),
            ("secretName", Any),
        ]),
    ),
    (
        "configMap",
        Obj(&[
            ("defaultMode", Any),
            ("items", List(&KEY_TO_PATH)),
            ("optional", Any),
            ("name", Any),
        ]),
    ),
    (
        "projected",
        Obj(&[
            ("defaultMode", Any),
            (
                "sources",
                List(&Obj(&[
                    ("configMap", ITEMS_SOURCE),
                    (
                        "downwardAPI",
                        Obj(&[(
                            "items",
                            List(&Obj(&[
                                ("path", Any),
                                ("fieldRef", Any),
                                ("mode", Any),
                                ("resourceFieldRef", Any),
                            ])),
                        )]),
                    ),
                    ("secret", ITEMS_SOURCE),
                    (
                        "serviceAccountToken",
                        Obj(&[("audience", Any), ("expirationSeconds", Any), ("path", Any)]),
                    ),
                ])),
            ),
        ]),
    ),
    // Feature-flagged volume kinds: whole core/v1 types in the CRD.
    ("emptyDir", Any),
    ("persistentVolumeClaim", Any),
    ("hostPath", Any),
    ("csi", Any),
    ("image", Any),
    ("ephemeral", Any),
]);

/// `RevisionSpec`: the PodSpec fields Knative allows, the feature-flagged ones, and the
/// revision's own fields.
const REVISION_SPEC: Node = Obj(&[
    ("automountServiceAccountToken", Any),
    ("containers", List(&CONTAINER)),
    ("enableServiceLinks", Any),
    ("imagePullSecrets", List(&Obj(&[("name", Any)]))),
    ("serviceAccountName", Any),
    ("volumes", List(&VOLUME)),
    ("containerConcurrency", Any),
    ("timeoutSeconds", Any),
    ("responseStartTimeoutSeconds", Any),
    ("idleTimeoutSeconds", Any),
    ("affinity", Any),
    ("dnsConfig", Any),
    ("dnsPolicy", Any),
    ("hostAliases", Any),
    ("hostIPC", Any),
    ("hostNetwork", Any),
    ("hostPID", Any),
    ("initContainers", Any),
    ("nodeSelector", Any),
    ("priorityClassName", Any),
    ("runtimeClassName", Any),
    ("schedulerName", Any),
    ("securityContext", Any),
    ("shareProcessNamespace", Any),
    ("tolerations", Any),
    ("topologySpreadConstraints", Any),
]);

const TEMPLATE: Node = Obj(&[("metadata", EmbeddedMeta), ("spec", REVISION_SPEC)]);

const TRAFFIC: Node = List(&Obj(&[
    ("tag", Any),
    ("revisionName", Any),
    ("configurationName", Any),
    ("latestRevision", Any),
    ("percent", Any),
    ("url", Any),
]));

/// The `spec` schema of a Knative kind; `None` for kinds that are not Knative CRDs.
fn spec_schema(kind: &str) -> Option<Node> {
    Some(match kind {
        "Service" => Obj(&[("template", TEMPLATE), ("traffic", TRAFFIC)]),
        "Configuration" => Obj(&[("template", TEMPLATE)]),
        "Route" => Obj(&[("traffic", TRAFFIC)]),
        "Revision" => REVISION_SPEC,
        _ => return None,
    })
}

/// Prunes `obj` (a whole object of `kind`) as kube-apiserver does for Knative's CRDs and
/// returns the reported paths (`spec.foo`, `spec.template.spec.containers[0].bar`), in
/// order. Keys of the root `metadata` that are not `ObjectMeta` fields are dropped and
/// reported, those of an embedded template's are dropped silently.
/// `None`: `kind` is not one of Knative's serving CRDs, and `obj` is left alone.
pub fn prune(kind: &str, obj: &mut Value) -> Option<Vec<String>> {
    let meta_fields = OBJECT_META_FIELDS;
    let spec = spec_schema(kind)?;
    let mut out = Vec::new();
    let Some(root) = obj.as_object_mut() else {
        return Some(out);
    };
    drop_nulls(root);
    for (key, v) in root.iter_mut() {
        match key.as_str() {
            "metadata" => prune_meta(v, meta_fields, Some(("metadata", &mut out))),
            "spec" => walk(v, &spec, "spec", meta_fields, &mut out),
            // status is the controller's; a write of the main resource never keeps it.
            _ => {}
        }
    }
    root.retain(|k, _| {
        let known = matches!(
            k.as_str(),
            "apiVersion" | "kind" | "metadata" | "spec" | "status"
        );
        if !known {
            out.push(k.clone());
        }
        known
    });
    Some(out)
}

fn walk(v: &mut Value, node: &Node, path: &str, meta: &[&str], out: &mut Vec<String>) {
    match (node, v) {
        (Any, v) => drop_nulls_deep(v),
        (EmbeddedMeta, v) => prune_meta(v, meta, None),
        (List(item), Value::Array(a)) => {
            for (i, x) in a.iter_mut().enumerate() {
                walk(x, item, &format!("{path}[{i}]"), meta, out);
            }
        }
        (Obj(props), Value::Object(m)) => {
            drop_nulls(m);
            m.retain(|k, _| {
                let known = props.iter().any(|(p, _)| p == k);
                if !known {
                    out.push(format!("{path}.{k}"));
                }
                known
            });
            for (k, x) in m.iter_mut() {
                if let Some((_, child)) = props.iter().find(|(p, _)| p == k) {
                    walk(x, child, &format!("{path}.{k}"), meta, out);
                }
            }
        }
        // A value of the wrong type is the schema validation's (and the decoder's) to refuse.
        _ => {}
    }
}

/// `metadata`: nulls dropped, keys that are not `ObjectMeta` fields dropped — reported
/// under `report`'s path prefix at the root, silently in a template.
fn prune_meta(v: &mut Value, fields: &[&str], report: Option<(&str, &mut Vec<String>)>) {
    let Value::Object(m) = v else { return };
    drop_nulls(m);
    let mut dropped = Vec::new();
    m.retain(|k, _| {
        let known = fields.contains(&k.as_str());
        if !known {
            dropped.push(k.clone());
        }
        known
    });
    if let Some((prefix, out)) = report {
        out.extend(dropped.into_iter().map(|k| format!("{prefix}.{k}")));
    }
}

/// `prunenulls.go`: a `null` for a field (none of Knative's is nullable) is no field.
fn drop_nulls(m: &mut Map<String, Value>) {
    m.retain(|_, v| !v.is_null());
}

/// The same, through a whole Kubernetes type (every one of its fields is non-nullable too).
fn drop_nulls_deep(v: &mut Value) {
    match v {
        Value::Object(m) => {
            drop_nulls(m);
            m.values_mut().for_each(drop_nulls_deep);
        }
        Value::Array(a) => a.iter_mut().for_each(drop_nulls_deep),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn prunes_as_kube_apiserver() {
        // (kind, input, pruned object, reported paths)
        let cases = [
            (
                "Service",
                json!({"spec": {"foo": 1, "template": {"spec": {"containers": [{"image": "a", "stdin": true, "lifecycle": {}}]}}}}),
                json!({"spec": {"template": {"spec": {"containers": [{"image": "a"}]}}}}),
                vec![
                    "spec.foo",
                    "spec.template.spec.containers[0].lifecycle",
                    "spec.template.spec.containers[0].stdin",
                ],
            ),
            // Nulls are absent, never reported.
            (
                "Service",
                json!({"metadata": {"name": "a", "labels": null, "annotations": null}, "spec": {"template": {"metadata": null, "spec": {"containers": [{"image": "a", "env": null}]}}, "traffic": null}}),
                json!({"metadata": {"name": "a"}, "spec": {"template": {"spec": {"containers": [{"image": "a"}]}}}}),
                vec![],
            ),
            // A `spec:` holding only comments.
            (
                "Service",
                json!({"metadata": {"name": "a"}, "spec": null}),
                json!({"metadata": {"name": "a"}}),
                vec![],
            ),
            // Template metadata: unknown keys go silently; root metadata: reported.
            (
                "Configuration",
                json!({"metadata": {"name": "a", "foo": 1}, "spec": {"template": {"metadata": {"name": "a-1", "foo": "x"}}}}),
                json!({"metadata": {"name": "a"}, "spec": {"template": {"metadata": {"name": "a-1"}}}}),
                vec!["metadata.foo"],
            ),
            // Knative's CRD leaves probes' terminationGracePeriodSeconds and a security
            // context's procMount out; whole Kubernetes types are kept.
            (
                "Revision",
                json!({"spec": {
                    "containers": [{"image": "a",
                        "readinessProbe": {"terminationGracePeriodSeconds": 3, "httpGet": {"port": 8080, "bogus": 1}},
                        "securityContext": {"procMount": "Default", "runAsUser": 1}}],
                    "affinity": {"nodeAffinity": {"anything": 1, "nothing": null}},
                    "nodeName": "n"
                }}),
                json!({"spec": {
                    "containers": [{"image": "a",
                        "readinessProbe": {"httpGet": {"port": 8080}},
                        "securityContext": {"runAsUser": 1}}],
                    "affinity": {"nodeAffinity": {"anything": 1}}
                }}),
                vec![
                    "spec.containers[0].readinessProbe.httpGet.bogus",
                    "spec.containers[0].readinessProbe.terminationGracePeriodSeconds",
                    "spec.containers[0].securityContext.procMount",
                    "spec.nodeName",
                ],
            ),
            (
                "Route",
                json!({"spec": {"traffic": [{"percent": 100, "latestRevision": true, "weight": 3}]}, "extra": 1}),
                json!({"spec": {"traffic": [{"percent": 100, "latestRevision": true}]}}),
                vec!["extra", "spec.traffic[0].weight"],
            ),
            // Not a Knative CRD: left alone.
        ];
        for (kind, mut input, want, paths) in cases {
            let mut got = prune(kind, &mut input).expect("a Knative kind");
            got.sort();
            assert_eq!(input, want, "{kind}");
            assert_eq!(got, paths, "{kind}");
        }
        // Not a Knative CRD: left alone.
        let mut secret = json!({"data": null, "foo": 1});
        assert_eq!(prune("Secret", &mut secret), None);
        assert_eq!(secret, json!({"data": null, "foo": 1}));
    }
}
