//! kube-apiserver's verbs and parameters over HTTP against a real `wisp serve`: patches by
//! media type, server-side apply, `dryRun`, `fieldValidation`, delete options,
//! deletecollection, chunked lists, and the Status every bad request gets.
#![allow(clippy::unwrap_used)] // tests unwrap: a panic is the failure report

mod common;

use std::time::Duration;

use common::Server;
use serde_json::{Value, json};

const SVCS: &str = "/apis/serving.knative.dev/v1/namespaces/default/services";
const CMS: &str = "/api/v1/namespaces/default/configmaps";

/// One request: (status code, body as JSON, Warning headers).
fn call(
    s: &Server,
    method: &str,
    path: &str,
    content_type: &str,
    body: &str,
) -> (u16, Value, Vec<String>) {
    let r = s
        .http_timeout(Duration::from_secs(20))
        .request(method.parse().unwrap(), s.url(path))
        .header("authorization", s.auth())
        .header("content-type", content_type)
        .body(body.to_string())
        .send()
        .unwrap();
    let code = r.status().as_u16();
    let warnings = r
        .headers()
        .get_all("warning")
        .iter()
        .map(|v| v.to_str().unwrap().to_string())
        .collect();
    let text = r.text().unwrap();
    let v = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (code, v, warnings)
}

fn svc(name: &str, extra: &str) -> String {
    format!(
        r#"{{"apiVersion":"serving.knative.dev/v1","kind":"Service","metadata":{{"name":"{name}","labels":{{"app":"{name}"}}}}{extra},"spec":{{"template":{{"spec":{{"containers":[{{"command":["/bin/true"]}}]}}}}}}}}"#
    )
}

const JSON: &str = "application/json";
const MERGE: &str = "application/merge-patch+json";
const JSONPATCH: &str = "application/json-patch+json";
const SMP: &str = "application/strategic-merge-patch+json";
const APPLY: &str = "application/apply-patch+yaml";

#[test]
fn bad_requests_get_kube_apiservers_status() {
    let s = Server::start();
    assert_eq!(call(&s, "POST", SVCS, JSON, &svc("a", "")).0, 201);
    assert_eq!(
        call(
            &s,
            "POST",
            CMS,
            JSON,
            r#"{"metadata":{"name":"cm"},"data":{"k":"v"}}"#
        )
        .0,
        201
    );
    let a = format!("{SVCS}/a");
    // (method, path, content type, body, code, reason, message — whole or a prefix…)
    let cases: Vec<(&str, String, &str, String, u16, &str, &str)> = vec![
        // Media types.
        (
            "PATCH",
            a.clone(),
            SMP,
            "{}".into(),
            415,
            "UnsupportedMediaType",
            "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
        ),
        (
            "PATCH",
            a.clone(),
            "text/plain",
            "{}".into(),
            415,
            "UnsupportedMediaType",
            "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
        ),
        (
            "PATCH",
            format!("{CMS}/cm"),
            "text/plain",
            "{}".into(),
            415,
            "UnsupportedMediaType",
            "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json, application/apply-patch+yaml",
        ),
        (
            "PATCH",
            format!("{a}/status"),
            SMP,
            "{}".into(),
            415,
            "UnsupportedMediaType",
            "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json",
        ),
        (
            "PATCH",
            format!("{a}/status?fieldManager=m"),
            APPLY,
            "{}".into(),
            415,
            "UnsupportedMediaType",
            "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json",
        ),
        // Malformed patches.
        (
            "PATCH",
            a.clone(),
            JSONPATCH,
            r#"{"op":"add"}"#.into(),
            400,
            "BadRequest",
            "",
        ),
        (
            "PATCH",
            a.clone(),
            JSONPATCH,
            r#"[{"op":"test","path":"/metadata/name","value":"b"}]"#.into(),
            422,
            "Invalid",
            "the server rejected our request due to an error in our request",
        ),
        (
            "PATCH",
            a.clone(),
            JSONPATCH,
            r#"[{"op":"remove","path":"/spec/nope/x"}]"#.into(),
            422,
            "Invalid",
            "the server rejected our request due to an error in our request",
        ),
        (
            "PATCH",
            a.clone(),
            MERGE,
            "{".into(),
            400,
            "BadRequest",
            "error decoding JSON body",
        ),
        // Apply needs a field manager; force is for apply only.
        (
            "PATCH",
            a.clone(),
            APPLY,
            svc("a", ""),
            422,
            "Invalid",
            "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch",
        ),
        (
            "PATCH",
            format!("{a}?force=true"),
            MERGE,
            "{}".into(),
            422,
            "Invalid",
            "PatchOptions.meta.k8s.io \"\" is invalid: force: Forbidden: may not be specified for non-apply patch",
        ),
        // Options.
        (
            "POST",
            format!("{SVCS}?dryRun=Some"),
            JSON,
            svc("b", ""),
            422,
            "Invalid",
            "CreateOptions.meta.k8s.io \"\" is invalid: dryRun: Unsupported value: []string{\"Some\"}: supported values: \"All\"",
        ),
        (
            "PUT",
            format!("{a}?fieldValidation=Loose"),
            JSON,
            svc("a", ""),
            422,
            "Invalid",
            "UpdateOptions.meta.k8s.io \"\" is invalid: fieldValidation: Unsupported value: \"Loose\"",
        ),
        // Unknown and duplicate fields under Strict.
        (
            "POST",
            format!("{SVCS}?fieldValidation=Strict"),
            JSON,
            svc("b", r#","bogus":1"#),
            400,
            "BadRequest",
            "strict decoding error: unknown field \"bogus\"",
        ),
        (
            "POST",
            format!("{SVCS}?fieldValidation=Strict"),
            JSON,
            svc("b", "").replacen(r#""name":"b""#, r#""name":"b","name":"b""#, 1),
            400,
            "BadRequest",
            "strict decoding error: duplicate field \"metadata.name\"",
        ),
        (
            "PATCH",
            format!("{a}?fieldValidation=Strict"),
            MERGE,
            r#"{"metadata":{"nope":"x"}}"#.into(),
            400,
            "BadRequest",
            "strict decoding error: unknown field \"metadata.nope\"",
        ),
        (
            "POST",
            format!("{CMS}?fieldValidation=Strict"),
            JSON,
            r#"{"metadata":{"name":"x"},"dat":{"k":"v"}}"#.into(),
            400,
            "BadRequest",
            "strict decoding error: unknown field \"dat\"",
        ),
        // Conflicts.
        (
            "POST",
            SVCS.into(),
            JSON,
            svc("a", ""),
            409,
            "AlreadyExists",
            "services.serving.knative.dev \"a\" already exists",
        ),
        (
            "DELETE",
            a.clone(),
            JSON,
            r#"{"preconditions":{"uid":"nope"}}"#.into(),
            409,
            "Conflict",
            "Operation cannot be fulfilled on services.serving.knative.dev \"a\": Precondition failed: UID in precondition: nope, UID in object meta: ",
        ),
        (
            "DELETE",
            a.clone(),
            JSON,
            r#"{"preconditions":{"resourceVersion":"1"}}"#.into(),
            409,
            "Conflict",
            "Operation cannot be fulfilled on services.serving.knative.dev \"a\": Precondition failed: ResourceVersion in precondition: 1, ResourceVersion in object meta: ",
        ),
        (
            "DELETE",
            format!("{a}?propagationPolicy=Sideways"),
            "",
            String::new(),
            422,
            "Invalid",
            "DeleteOptions.meta.k8s.io \"\" is invalid: propagationPolicy: Unsupported value: \"Sideways\"",
        ),
        (
            "DELETE",
            format!("{a}?orphanDependents=true"),
            "",
            String::new(),
            422,
            "Invalid",
            "DeleteOptions.meta.k8s.io \"\" is invalid: propagationPolicy: Unsupported value: \"Orphan\"",
        ),
        // Paths and verbs.
        (
            "GET",
            "/apis/serving.knative.dev/v1/namespaces/default/widgets".into(),
            "",
            String::new(),
            404,
            "NotFound",
            "the server could not find the requested resource",
        ),
        (
            "PUT",
            SVCS.into(),
            JSON,
            svc("a", ""),
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        ),
        // Lists.
        (
            "GET",
            format!("{SVCS}?fieldSelector=spec.x%3Dy"),
            "",
            String::new(),
            400,
            "BadRequest",
            "field label not supported: spec.x",
        ),
        (
            "GET",
            format!("{SVCS}?resourceVersionMatch=Exact"),
            "",
            String::new(),
            422,
            "Invalid",
            "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided",
        ),
        (
            "GET",
            format!("{SVCS}?resourceVersion=99999999"),
            "",
            String::new(),
            504,
            "Timeout",
            "Timeout: Too large resource version: 99999999, current: ",
        ),
        (
            "GET",
            format!("{SVCS}?continue=bm9wZQ%3D%3D"),
            "",
            String::new(),
            400,
            "BadRequest",
            "continue key is not valid: invalid JSON",
        ),
    ];
    for (method, path, ct, body, code, reason, message) in cases {
        let (got, status, _) = call(&s, method, &path, ct, &body);
        assert_eq!(got, code, "{method} {path} {body}: {status}");
        assert_eq!(status["kind"], "Status", "{method} {path}: {status}");
        assert_eq!(status["reason"], reason, "{method} {path}: {status}");
        assert_eq!(status["code"], code);
        let msg = status["message"].as_str().unwrap();
        assert!(msg.starts_with(message), "{method} {path}: {msg}");
    }
    // Errors about one object name it as kube's StatusDetails do.
    let (_, status, _) = call(&s, "POST", SVCS, JSON, &svc("a", ""));
    assert_eq!(
        status["details"],
        json!({"name": "a", "group": "serving.knative.dev", "kind": "services"})
    );
    let (_, status, _) = call(&s, "GET", &format!("{CMS}/nope"), "", "");
    assert_eq!(
        status["details"],
        json!({"name": "nope", "kind": "configmaps"})
    );
    // Nothing above changed anything: a is as created, b never was.
    assert!(s.get_json(&format!("{SVCS}/b")).is_none());
    assert_eq!(s.get_json(&a).unwrap()["metadata"]["generation"], 1);
}

#[test]
fn field_validation_directives() {
    let s = Server::start();
    let body = svc("w", r#","bogus":{"x":1}"#);
    // Warn is the default.
    let (code, obj, warnings) = call(&s, "POST", SVCS, JSON, &body);
    assert_eq!(code, 201, "{obj}");
    // (Knative's own admission warnings follow.)
    assert_eq!(warnings[0], "299 - \"unknown field \\\"bogus\\\"\"");
    assert!(obj.get("bogus").is_none());
    let (code, _, warnings) = call(
        &s,
        "PUT",
        &format!("{SVCS}/w?fieldValidation=Ignore"),
        JSON,
        &body,
    );
    assert_eq!(code, 200);
    assert!(
        !warnings.iter().any(|w| w.contains("unknown field")),
        "{warnings:?}"
    );
}

/// Issue 17, class 7: Knative's kinds are pruned by their CRD schema before admission, as
/// kube-apiserver prunes them: `null` is an absent field, unknown fields are dropped (and
/// reported under Warn), a `spec:` of comments only reaches Knative's validation empty.
#[test]
fn knative_kinds_are_pruned_before_admission() {
    let s = Server::start();
    let nulls = r#"{"apiVersion":"serving.knative.dev/v1","kind":"Service","metadata":{"name":"n","labels":null,"annotations":null},"spec":{"template":{"metadata":null,"spec":{"containers":[{"command":["/bin/true"],"env":null,"stdin":true}]}},"traffic":null,"foo":1}}"#;
    let (code, obj, warnings) = call(&s, "POST", SVCS, JSON, nulls);
    assert_eq!(code, 201, "{obj}");
    assert_eq!(
        &warnings[..2],
        [
            "299 - \"unknown field \\\"spec.foo\\\"\"",
            "299 - \"unknown field \\\"spec.template.spec.containers[0].stdin\\\"\""
        ]
    );
    assert!(obj["spec"].get("foo").is_none(), "{obj}");
    assert!(
        obj["spec"]["template"]["spec"]["containers"][0]
            .get("stdin")
            .is_none()
    );
    assert_eq!(obj["spec"]["traffic"][0]["percent"], 100);
    // `spec:` holding only comments is `spec: null`.
    let (code, status, _) = call(
        &s,
        "POST",
        SVCS,
        "application/yaml",
        "apiVersion: serving.knative.dev/v1\nkind: Service\nmetadata:\n  name: e\nspec:\n  # nothing yet\n",
    );
    assert_eq!(code, 422, "{status}");
    assert!(
        status["message"]
            .as_str()
            .unwrap_or("")
            .contains("missing field(s): spec.template.spec.containers"),
        "{status}"
    );
}

#[test]
fn dry_runs_store_nothing() {
    let s = Server::start();
    let (code, obj, _) = call(
        &s,
        "POST",
        &format!("{SVCS}?dryRun=All"),
        JSON,
        &svc("d", ""),
    );
    assert_eq!(code, 201, "{obj}");
    // Admitted in full (Knative's defaults are there), with no resourceVersion.
    assert_eq!(obj["metadata"]["generation"], 1);
    assert!(obj["metadata"]["uid"].is_string());
    assert!(obj["metadata"].get("resourceVersion").is_none(), "{obj}");
    assert!(obj["spec"]["traffic"].is_array(), "{obj}");
    assert!(s.get_json(&format!("{SVCS}/d")).is_none());

    assert_eq!(call(&s, "POST", SVCS, JSON, &svc("d", "")).0, 201);
    let stored = s.get_json(&format!("{SVCS}/d")).unwrap();
    let path = format!("{SVCS}/d?dryRun=All");
    let (code, obj, _) = call(
        &s,
        "PATCH",
        &path,
        MERGE,
        r#"{"metadata":{"labels":{"x":"y"}}}"#,
    );
    assert_eq!(code, 200);
    assert_eq!(obj["metadata"]["labels"]["x"], "y");
    let (code, obj, _) = call(
        &s,
        "PATCH",
        &format!("{path}&fieldManager=m"),
        APPLY,
        "apiVersion: serving.knative.dev/v1\nkind: Service\nmetadata:\n  name: d\n  labels:\n    z: q\n",
    );
    assert_eq!(code, 200, "{obj}");
    assert_eq!(obj["metadata"]["labels"]["z"], "q");
    // Status writes take dryRun too, and JSON patches. The patch adds the whole status:
    // whether the controller has written one yet is a race, and adding under a missing
    // `/status` is a patch that does not apply (422).
    let (code, obj, _) = call(
        &s,
        "PATCH",
        &format!("{SVCS}/d/status?dryRun=All"),
        JSONPATCH,
        r#"[{"op":"add","path":"/status","value":{"observedGeneration":99}}]"#,
    );
    assert_eq!(code, 200, "{obj}");
    assert_eq!(obj["status"]["observedGeneration"], 99);
    let (code, _, _) = call(&s, "DELETE", &path, "", "");
    assert_eq!(code, 200);
    // (The controller writes status meanwhile: only what the dry runs touched is compared.)
    let now = s.get_json(&format!("{SVCS}/d")).unwrap();
    for part in ["labels", "uid", "generation", "managedFields"] {
        assert_eq!(now["metadata"][part], stored["metadata"][part], "{part}");
    }
    assert_eq!(now["spec"], stored["spec"]);
    assert_ne!(now["status"]["observedGeneration"], 99);
}

#[test]
fn server_side_apply_records_managers_and_conflicts() {
    let s = Server::start();
    let cfg = |team: &str| {
        format!(
            "apiVersion: serving.knative.dev/v1\nkind: Service\nmetadata:\n  name: ssa\n  labels:\n    team: {team}\n    keep: me\nspec:\n  template:\n    spec:\n      containers:\n      - command: [/bin/true]\n"
        )
    };
    let path = format!("{SVCS}/ssa?fieldManager=alice");
    let (code, obj, _) = call(&s, "PATCH", &path, APPLY, &cfg("a"));
    assert_eq!(code, 201, "{obj}");
    let mf = &obj["metadata"]["managedFields"];
    assert_eq!(mf[0]["manager"], "alice");
    assert_eq!(mf[0]["operation"], "Apply");
    assert_eq!(mf[0]["apiVersion"], "serving.knative.dev/v1");
    assert!(
        mf[0]["fieldsV1"]["f:metadata"]["f:labels"]["f:team"].is_object(),
        "{mf}"
    );

    // An update by bob takes the field it changes.
    let (code, obj, _) = call(
        &s,
        "PATCH",
        &format!("{SVCS}/ssa?fieldManager=bob"),
        MERGE,
        r#"{"metadata":{"labels":{"team":"b"}}}"#,
    );
    assert_eq!(code, 200, "{obj}");
    let managers: Vec<(&str, &str)> = obj["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["manager"].as_str().unwrap(),
                e["operation"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(managers, [("alice", "Apply"), ("bob", "Update")]);

    // alice applying her old value now conflicts with bob's.
    let (code, status, _) = call(&s, "PATCH", &path, APPLY, &cfg("a"));
    assert_eq!(code, 409, "{status}");
    assert_eq!(status["reason"], "Conflict");
    assert_eq!(
        status["message"],
        "Apply failed with 1 conflict: conflict with \"bob\" using serving.knative.dev/v1: .metadata.labels.team"
    );
    assert_eq!(
        status["details"]["causes"][0]["reason"],
        "FieldManagerConflict"
    );
    assert_eq!(
        status["details"]["causes"][0]["field"],
        ".metadata.labels.team"
    );

    // Forced, and with `keep` dropped from her config: keep is removed, team is hers.
    let forced = cfg("a").replace("    keep: me\n", "");
    let (code, obj, _) = call(&s, "PATCH", &format!("{path}&force=true"), APPLY, &forced);
    assert_eq!(code, 200, "{obj}");
    assert_eq!(obj["metadata"]["labels"], json!({"team": "a"}));
    assert_eq!(
        obj["metadata"]["managedFields"].as_array().unwrap().len(),
        1
    );
}

#[test]
fn deletecollection_and_chunked_lists() {
    let s = Server::start();
    for n in ["c1", "c2", "c3", "x1"] {
        assert_eq!(call(&s, "POST", SVCS, JSON, &svc(n, "")).0, 201);
    }
    // Chunks of two, then the rest, with kube's continue tokens.
    let (_, first, _) = call(&s, "GET", &format!("{SVCS}?limit=2"), "", "");
    let names = |l: &Value| -> Vec<String> {
        l["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["metadata"]["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(names(&first), ["c1", "c2"]);
    assert_eq!(first["metadata"]["remainingItemCount"], 2);
    let token = first["metadata"]["continue"].as_str().unwrap();
    let (_, rest, _) = call(
        &s,
        "GET",
        &format!("{SVCS}?limit=2&continue={token}"),
        "",
        "",
    );
    assert_eq!(names(&rest), ["c3", "x1"]);
    assert!(rest["metadata"].get("continue").is_none(), "{rest}");
    assert_eq!(
        rest["metadata"]["resourceVersion"],
        first["metadata"]["resourceVersion"]
    );

    let (_, one, _) = call(
        &s,
        "GET",
        &format!("{SVCS}?fieldSelector=metadata.name%3Dc2"),
        "",
        "",
    );
    assert_eq!(names(&one), ["c2"]);

    // deletecollection answers the deleted objects; a dry run deletes none.
    let sel = format!("{SVCS}?labelSelector=app%20in%20(c1,c2,c3)");
    let (code, list, _) = call(&s, "DELETE", &format!("{sel}&dryRun=All"), "", "");
    assert_eq!(code, 200);
    assert_eq!(names(&list), ["c1", "c2", "c3"]);
    let (code, list, _) = call(&s, "DELETE", &sel, "", "");
    assert_eq!(code, 200, "{list}");
    assert_eq!(list["kind"], "ServiceList");
    assert_eq!(names(&list), ["c1", "c2", "c3"]);
    let (_, left, _) = call(&s, "GET", SVCS, "", "");
    assert_eq!(names(&left), ["x1"]);
}

#[test]
fn watches_end_with_a_bookmark_and_refuse_initial_events() {
    let s = Server::start();
    assert_eq!(call(&s, "POST", SVCS, JSON, &svc("w1", "")).0, 201);
    let start = std::time::Instant::now();
    let (code, body, _) = call(
        &s,
        "GET",
        &format!("{SVCS}?watch=true&allowWatchBookmarks=true&timeoutSeconds=1"),
        "",
        "",
    );
    assert_eq!(code, 200);
    assert!(start.elapsed() < Duration::from_secs(10));
    let text = match body {
        Value::String(t) => t,
        v => format!("{v}\n"),
    };
    let events: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(events[0]["type"], "ADDED", "{text}");
    let last = events.last().unwrap();
    assert_eq!(last["type"], "BOOKMARK", "{text}");
    assert_eq!(last["object"]["kind"], "Service");
    assert_eq!(last["object"]["apiVersion"], "serving.knative.dev/v1");
    let rv: u64 = last["object"]["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(rv >= 1, "{last}");

    // A field selector filters a watch too (`kubectl get ksvc w1 -w` sends one).
    assert_eq!(call(&s, "POST", SVCS, JSON, &svc("w2", "")).0, 201);
    let (_, body, _) = call(
        &s,
        "GET",
        &format!("{SVCS}?watch=true&fieldSelector=metadata.name%3Dw2&timeoutSeconds=1"),
        "",
        "",
    );
    let text = match body {
        Value::String(t) => t,
        v => format!("{v}\n"),
    };
    let names: Vec<String> = text
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .map(|e| {
            e["object"]["metadata"]["name"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert!(
        !names.is_empty() && names.iter().all(|n| n == "w2"),
        "{text}"
    );

    let (code, status, _) = call(
        &s,
        "GET",
        &format!("{SVCS}?watch=true&sendInitialEvents=true"),
        "",
        "",
    );
    assert_eq!(code, 422, "{status}");
    assert_eq!(
        status["message"],
        "ListOptions.meta.k8s.io \"\" is invalid: [resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan, sendInitialEvents: Forbidden: sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled]"
    );
}
