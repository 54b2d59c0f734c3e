//! `wisp get KIND [NAME…]`: tables with the Knative printer columns, `-o wide|yaml|json|name`,
//! `-A`, `-l` and `-w` (list, then stream the watch; re-list after `410 Gone`).

use std::collections::HashMap;
use std::io::Write;
use std::time::{Duration, Instant};

use chrono::Utc;
use serde_json::Value;
use wisp_api::kinds::ResourceKind;

use super::client::{ApiError, Client};
use super::printers::{self, Output, TableOptions};
use super::{GlobalArgs, Outcome, obj, parse_resource_args};

/// Flags of `wisp get`.
#[derive(Debug, Clone, clap::Args)]
pub struct GetArgs {
    #[command(flatten)]
    pub global: GlobalArgs,
    /// `KIND [NAME…]`, `KIND,KIND…`, `all`, or `KIND/NAME…`.
    #[arg(required = true, value_name = "RESOURCE")]
    pub resources: Vec<String>,
    /// List across all namespaces.
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
    /// Output format: wide, yaml, json or name.
    #[arg(short = 'o', long)]
    pub output: Option<String>,
    /// After listing, watch for changes.
    #[arg(short = 'w', long)]
    pub watch: bool,
    /// Label selector, e.g. `serving.knative.dev/service=hello`.
    #[arg(short = 'l', long)]
    pub selector: Option<String>,
    /// Don't print the table header.
    #[arg(long)]
    pub no_headers: bool,
}

/// Gives a list item the `apiVersion` and `kind` that list responses may leave out.
pub fn with_type_meta(kind: &ResourceKind, mut o: Value) -> Value {
    if let Some(m) = o.as_object_mut() {
        if m.get("apiVersion")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            m.insert("apiVersion".into(), Value::String(kind.api_version()));
        }
        if m.get("kind")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            m.insert("kind".into(), Value::String(kind.kind.to_string()));
        }
    }
    o
}

/// The items of a list response, with type meta filled in.
pub fn list_items(kind: &ResourceKind, list: &Value) -> Vec<Value> {
    list.get("items")
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .cloned()
                .map(|o| with_type_meta(kind, o))
                .collect()
        })
        .unwrap_or_default()
}

/// `No resources found in default namespace.` / `No resources found`.
pub fn no_resources_message(namespace: Option<&str>) -> String {
    match namespace {
        Some(ns) => format!("No resources found in {ns} namespace."),
        None => "No resources found".to_string(),
    }
}

/// Renders the result of a (non-watch) get.
pub fn render(
    results: &[(&'static ResourceKind, Vec<Value>)],
    output: Output,
    opts: TableOptions,
    no_headers: bool,
    single_item: bool,
    now: chrono::DateTime<Utc>,
) -> String {
    match output {
        Output::Table | Output::Wide => {
            let mut out = String::new();
            for (kind, objs) in results.iter().filter(|(_, o)| !o.is_empty()) {
                if !out.is_empty() {
                    out.push('\n');
                }
                let mut rows = Vec::new();
                if !no_headers {
                    rows.push(printers::header(kind, opts));
                }
                rows.extend(objs.iter().map(|o| printers::row(kind, o, opts, now)));
                out.push_str(&printers::format_table(&rows));
            }
            out
        }
        Output::Name => results
            .iter()
            .flat_map(|(kind, objs)| {
                objs.iter()
                    .map(|o| printers::qualified_name(kind, o) + "\n")
            })
            .collect(),
        Output::Json | Output::Yaml => {
            let mut items: Vec<Value> = results
                .iter()
                .flat_map(|(_, objs)| objs.iter().cloned())
                .collect();
            let v = if single_item && items.len() == 1 {
                items.pop().expect("one item")
            } else {
                printers::list_of(items)
            };
            if output == Output::Json {
                printers::to_json(&v)
            } else {
                printers::to_yaml(&v)
            }
        }
    }
}

pub fn run(args: GetArgs) -> Outcome {
    let output = Output::parse(args.output.as_deref())?;
    let targets = parse_resource_args(&args.resources)?;
    let has_names = targets.iter().any(|(_, n)| !n.is_empty());
    if args.all_namespaces && has_names {
        anyhow::bail!("a resource cannot be retrieved by name across all namespaces");
    }
    let ns = (!args.all_namespaces).then_some(args.global.namespace.as_str());
    let opts = TableOptions {
        with_namespace: args.all_namespaces,
        with_kind: targets.len() > 1,
    };
    let client = args.global.client()?;
    let selector = args.selector.as_deref();

    if args.watch {
        if targets.len() != 1 {
            anyhow::bail!(
                "watch is only supported on individual resources and resource collections, but {} \
                 resources were found",
                targets.len()
            );
        }
        let (kind, names) = &targets[0];
        let mut w = Watcher {
            client: &client,
            kind,
            ns,
            selector,
            names,
            output,
            opts,
            no_headers: args.no_headers,
            widths: None,
            printed: 0,
        };
        return w.run();
    }

    let mut ok = true;
    let mut results = Vec::new();
    for (kind, names) in &targets {
        let mut objs = Vec::new();
        if names.is_empty() {
            let list = client.list(kind, ns, selector)?;
            objs = list_items(kind, &list);
        } else {
            for name in names {
                match client.get(kind, ns.unwrap_or("default"), name) {
                    Ok(o) => objs.push(with_type_meta(kind, o)),
                    Err(ApiError::Status(s)) => {
                        let mut s = s;
                        if s.code == 404 && s.message.is_empty() {
                            s.message =
                                format!("{}.{} \"{name}\" not found", kind.plural, kind.group);
                        }
                        eprintln!("{}", super::client::server_error_line(&s, None));
                        ok = false;
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        }
        results.push((*kind, objs));
    }
    let single_item = targets.len() == 1 && targets[0].1.len() == 1;
    let text = render(
        &results,
        output,
        opts,
        args.no_headers,
        single_item,
        Utc::now(),
    );
    let total: usize = results.iter().map(|(_, o)| o.len()).sum();
    if total == 0 && !has_names && output != Output::Json && output != Output::Yaml {
        eprintln!("{}", no_resources_message(ns));
    } else if !(total == 0 && has_names) {
        super::out(format_args!("{text}"))?;
    }
    std::io::stdout().flush()?;
    Ok(ok)
}

/// Waits between reconnects without busy-looping.
struct Backoff {
    next: Duration,
}

impl Backoff {
    const MIN: Duration = Duration::from_millis(250);
    const MAX: Duration = Duration::from_secs(5);

    fn new() -> Self {
        Backoff { next: Self::MIN }
    }
    fn reset(&mut self) {
        self.next = Self::MIN;
    }
    fn wait(&mut self) {
        std::thread::sleep(self.next);
        self.next = (self.next * 2).min(Self::MAX);
    }
}

/// `get -w`: list, print, then follow the watch; re-list when the server says 410 Gone.
struct Watcher<'a> {
    client: &'a Client,
    kind: &'static ResourceKind,
    ns: Option<&'a str>,
    selector: Option<&'a str>,
    names: &'a [String],
    output: Output,
    opts: TableOptions,
    no_headers: bool,
    /// Column widths of the table printed so far (kept so later rows line up).
    widths: Option<Vec<usize>>,
    printed: usize,
}

type Key = (String, String);

fn key(o: &Value) -> Key {
    (obj::namespace(o).to_string(), obj::name(o).to_string())
}

/// What a re-list shows that the last printed state does not: changed or new objects, then
/// objects that disappeared (printed with their last known state).
pub fn relist_changes(known: &HashMap<Key, Value>, items: &[Value]) -> Vec<Value> {
    let mut out: Vec<Value> = items
        .iter()
        .filter(|o| {
            known
                .get(&key(o))
                .is_none_or(|k| obj::resource_version(k) != obj::resource_version(o))
        })
        .cloned()
        .collect();
    let present: std::collections::HashSet<Key> = items.iter().map(key).collect();
    let mut gone: Vec<&Value> = known
        .iter()
        .filter(|(k, _)| !present.contains(*k))
        .map(|(_, v)| v)
        .collect();
    gone.sort_by_key(|o| key(o));
    out.extend(gone.into_iter().cloned());
    out
}

impl Watcher<'_> {
    fn wanted(&self, o: &Value) -> bool {
        self.names.is_empty() || self.names.iter().any(|n| n == obj::name(o))
    }

    fn print(&mut self, objs: &[Value]) -> anyhow::Result<()> {
        if objs.is_empty() {
            return Ok(());
        }
        let now = Utc::now();
        let mut out = String::new();
        match self.output {
            Output::Table | Output::Wide => {
                let mut rows = Vec::new();
                if self.widths.is_none() && !self.no_headers {
                    rows.push(printers::header(self.kind, self.opts));
                }
                rows.extend(
                    objs.iter()
                        .map(|o| printers::row(self.kind, o, self.opts, now)),
                );
                let mut widths = printers::column_widths(&rows);
                if let Some(prev) = &self.widths {
                    for (i, w) in prev.iter().enumerate() {
                        match widths.get_mut(i) {
                            Some(x) => *x = (*x).max(*w),
                            None => widths.push(*w),
                        }
                    }
                }
                out = printers::format_rows(&rows, &widths);
                self.widths = Some(widths);
            }
            Output::Name => {
                for o in objs {
                    out.push_str(&printers::qualified_name(self.kind, o));
                    out.push('\n');
                }
            }
            Output::Json => objs
                .iter()
                .for_each(|o| out.push_str(&printers::to_json(o))),
            Output::Yaml => {
                for (i, o) in objs.iter().enumerate() {
                    if self.printed + i > 0 {
                        out.push_str("---\n");
                    }
                    out.push_str(&printers::to_yaml(o));
                }
            }
        }
        self.printed += objs.len();
        let mut stdout = std::io::stdout().lock();
        stdout.write_all(out.as_bytes())?;
        stdout.flush()?;
        Ok(())
    }

    fn run(&mut self) -> Outcome {
        let mut known: HashMap<Key, Value> = HashMap::new();
        let mut backoff = Backoff::new();
        let mut first = true;
        let mut relist = true;
        let mut rv = String::new();
        loop {
            if relist {
                let list = match self.client.list(self.kind, self.ns, self.selector) {
                    Ok(l) => l,
                    Err(e) if first => return Err(e.into()),
                    Err(e @ ApiError::Status(_)) => return Err(e.into()),
                    Err(_) => {
                        backoff.wait();
                        continue;
                    }
                };
                let items: Vec<Value> = list_items(self.kind, &list)
                    .into_iter()
                    .filter(|o| self.wanted(o))
                    .collect();
                let changes = if first {
                    items.clone()
                } else {
                    relist_changes(&known, &items)
                };
                self.print(&changes)?;
                known = items.into_iter().map(|o| (key(&o), o)).collect();
                rv = obj::str_at(&list, "/metadata/resourceVersion")
                    .unwrap_or_default()
                    .to_string();
                first = false;
                relist = false;
            }
            let started = Instant::now();
            let mut stream = match self.client.watch(self.kind, self.ns, self.selector, &rv) {
                Ok(s) => s,
                Err(e) if e.code() == Some(410) => {
                    relist = true;
                    continue;
                }
                Err(e @ ApiError::Status(_)) => return Err(e.into()),
                Err(_) => {
                    // The server went away; try again shortly, from where we were.
                    backoff.wait();
                    continue;
                }
            };
            let mut got_events = false;
            while let Ok(Some(ev)) = stream.next_event() {
                match ev.type_.as_str() {
                    "ERROR" => {
                        let code = ev.object.get("code").and_then(Value::as_u64);
                        if code != Some(410) {
                            let msg = ev
                                .object
                                .get("message")
                                .and_then(Value::as_str)
                                .unwrap_or("");
                            eprintln!("error: watch failed: {msg}");
                            backoff.wait();
                        }
                        relist = true;
                        break;
                    }
                    "BOOKMARK" => {
                        if let Some(v) = obj::str_at(&ev.object, "/metadata/resourceVersion") {
                            rv = v.to_string();
                        }
                    }
                    _ => {
                        got_events = true;
                        let o = with_type_meta(self.kind, ev.object);
                        let new_rv = obj::resource_version(&o);
                        if !new_rv.is_empty() {
                            rv = new_rv.to_string();
                        }
                        if !self.wanted(&o) {
                            continue;
                        }
                        if ev.type_ == "DELETED" {
                            known.remove(&key(&o));
                        } else {
                            known.insert(key(&o), o.clone());
                        }
                        self.print(std::slice::from_ref(&o))?;
                    }
                }
            }
            if got_events || started.elapsed() > Duration::from_secs(5) {
                backoff.reset();
            } else {
                backoff.wait();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use wisp_api::kinds;

    fn svc(name: &str, ns: &str, rv: &str) -> Value {
        json!({"metadata": {"name": name, "namespace": ns, "resourceVersion": rv,
                            "creationTimestamp": "2024-05-01T11:59:00Z"},
               "status": {"url": format!("http://{name}.{ns}.example.com"),
                          "conditions": [{"type": "Ready", "status": "True"}]}})
    }

    fn now() -> chrono::DateTime<Utc> {
        wisp_api::age::parse_time("2024-05-01T12:00:00Z").unwrap()
    }

    #[test]
    fn type_meta_is_filled_in() {
        let list =
            json!({"items": [svc("a", "default", "1"), {"apiVersion": "x/v9", "kind": "K"}]});
        let items = list_items(&kinds::SERVICE, &list);
        assert_eq!(items[0]["apiVersion"], "serving.knative.dev/v1");
        assert_eq!(items[0]["kind"], "Service");
        assert_eq!(items[1]["apiVersion"], "x/v9");
        assert!(list_items(&kinds::SERVICE, &json!({})).is_empty());
    }

    #[test]
    fn table_output() {
        let results = vec![(
            &kinds::SERVICE,
            vec![svc("hello", "default", "1"), svc("hi", "default", "2")],
        )];
        let got = render(
            &results,
            Output::Table,
            TableOptions::default(),
            false,
            false,
            now(),
        );
        let want = "\
NAME    URL                                LATESTCREATED   LATESTREADY   READY   REASON   AGE
hello   http://hello.default.example.com                                 True             60s
hi      http://hi.default.example.com                                    True             60s
";
        assert_eq!(got, want);
        assert_eq!(
            render(
                &results,
                Output::Wide,
                TableOptions::default(),
                false,
                false,
                now()
            ),
            want
        );
        // Without the header, widths come from the cells alone (like kubectl's tabwriter).
        let got = render(
            &results,
            Output::Table,
            TableOptions::default(),
            true,
            false,
            now(),
        );
        let want = "\
hello   http://hello.default.example.com               True         60s
hi      http://hi.default.example.com                  True         60s
";
        assert_eq!(got, want);
    }

    #[test]
    fn all_namespaces_and_several_kinds() {
        let results = vec![
            (
                &kinds::SERVICE,
                vec![with_type_meta(&kinds::SERVICE, svc("a", "ns1", "1"))],
            ),
            (&kinds::CONFIGURATION, vec![]),
            (&kinds::ROUTE, vec![svc("a", "ns1", "2")]),
        ];
        let opts = TableOptions {
            with_namespace: true,
            with_kind: true,
        };
        let got = render(&results, Output::Table, opts, false, false, now());
        let want = "\
NAMESPACE   NAME                            URL                        LATESTCREATED   LATESTREADY   READY   REASON   AGE
ns1         service.serving.knative.dev/a   http://a.ns1.example.com                                 True             60s

NAMESPACE   NAME                          URL                        READY   REASON   AGE
ns1         route.serving.knative.dev/a   http://a.ns1.example.com   True             60s
";
        // Each kind's table is laid out on its own (kubectl flushes between kinds).
        assert_eq!(got, want);
        let names = render(&results, Output::Name, opts, false, false, now());
        assert_eq!(
            names,
            "service.serving.knative.dev/a\nroute.serving.knative.dev/a\n"
        );
    }

    #[test]
    fn json_and_yaml() {
        let one = vec![(
            &kinds::SERVICE,
            vec![json!({"kind": "Service", "metadata": {"name": "a"}})],
        )];
        let single = render(
            &one,
            Output::Json,
            TableOptions::default(),
            false,
            true,
            now(),
        );
        assert_eq!(
            serde_json::from_str::<Value>(&single).unwrap()["kind"],
            "Service"
        );
        let list = render(
            &one,
            Output::Json,
            TableOptions::default(),
            false,
            false,
            now(),
        );
        let v: Value = serde_json::from_str(&list).unwrap();
        assert_eq!(v["kind"], "List");
        assert_eq!(v["items"][0]["metadata"]["name"], "a");
        let empty = render(
            &[(&kinds::SERVICE, vec![])],
            Output::Yaml,
            TableOptions::default(),
            false,
            false,
            now(),
        );
        assert!(empty.contains("kind: List"), "{empty}");
        let y = render(
            &one,
            Output::Yaml,
            TableOptions::default(),
            false,
            true,
            now(),
        );
        assert!(
            y.starts_with("kind: Service\nmetadata:\n  name: a\n"),
            "{y}"
        );
    }

    #[test]
    fn messages() {
        assert_eq!(
            no_resources_message(Some("default")),
            "No resources found in default namespace."
        );
        assert_eq!(no_resources_message(None), "No resources found");
    }

    #[test]
    fn relist_diff() {
        let mut known = HashMap::new();
        for o in [svc("a", "d", "1"), svc("b", "d", "2"), svc("c", "d", "3")] {
            known.insert(key(&o), o);
        }
        let items = vec![svc("a", "d", "1"), svc("b", "d", "5"), svc("e", "d", "6")];
        let got: Vec<(String, String)> = relist_changes(&known, &items)
            .iter()
            .map(|o| {
                (
                    obj::name(o).to_string(),
                    obj::resource_version(o).to_string(),
                )
            })
            .collect();
        let want =
            [("b", "5"), ("e", "6"), ("c", "3")].map(|(a, b)| (a.to_string(), b.to_string()));
        assert_eq!(got, want);
    }
}
