//! `wisp logs SERVICE|REVISION [-f] [--tail N]`: the replicas' stdout and stderr, prefixed
//! by replica when there are several (like `kubectl logs --prefix`); with `--requests`, the
//! request log instead (Knative's queue-proxy output: one line per request, shaped by
//! `logging.request-log-template`).

use std::io::{BufRead, Write};

use serde_json::Value;
use wisp_api::kinds::{self, ResourceKind};

use super::{GlobalArgs, client::ApiError};

/// Flags of `wisp logs`.
#[derive(Debug, Clone, clap::Args)]
pub struct LogsArgs {
    #[command(flatten)]
    pub global: GlobalArgs,
    /// A service or revision name (`NAME`, `ksvc/NAME` or `rev/NAME`; a bare name is looked
    /// up as a service first, then as a revision).
    pub target: String,
    /// Keep streaming new lines.
    #[arg(short = 'f', long)]
    pub follow: bool,
    /// Only the last N lines of the backlog.
    #[arg(long)]
    pub tail: Option<usize>,
    /// The request log (the `queue-proxy` container's output, as on Knative) instead of
    /// the replicas' output; needs config-observability's logging.enable-request-log.
    #[arg(long)]
    pub requests: bool,
}

/// One line as the server sends it.
#[derive(Debug, PartialEq)]
struct Line {
    replica: String,
    line: String,
}

fn parse(raw: &str) -> Option<Line> {
    let v: Value = serde_json::from_str(raw).ok()?;
    Some(Line {
        replica: v["replica"].as_str().unwrap_or("").to_string(),
        line: v["line"].as_str().unwrap_or("").to_string(),
    })
}

/// Decides, line by line, whether to prefix: always when the target has several replicas,
/// and from the moment a second replica shows up otherwise.
#[derive(Debug, Default)]
struct Prefixer {
    always: bool,
    first: Option<String>,
}

impl Prefixer {
    fn render(&mut self, l: &Line) -> String {
        if !self.always {
            match &self.first {
                None => self.first = Some(l.replica.clone()),
                Some(f) if *f != l.replica && !l.replica.is_empty() => self.always = true,
                _ => {}
            }
        }
        if self.always && !l.replica.is_empty() {
            format!("[{}] {}", l.replica, l.line)
        } else {
            l.line.clone()
        }
    }
}

fn split_target(target: &str) -> anyhow::Result<(Vec<&'static ResourceKind>, &str)> {
    match target.split_once('/') {
        Some((kind, name)) => {
            let k = super::resolve_kind(kind)?;
            if k.kind != "Service" && k.kind != "Revision" {
                anyhow::bail!(
                    "logs are available for services and revisions, not {}",
                    k.plural
                );
            }
            Ok((vec![k], name))
        }
        None => Ok((vec![&kinds::SERVICE, &kinds::REVISION], target)),
    }
}

pub fn run(args: LogsArgs) -> anyhow::Result<bool> {
    let client = args.global.client()?;
    let ns = &args.global.namespace;
    let (candidates, name) = split_target(&args.target)?;
    let mut opened = None;
    for kind in &candidates {
        let container = args.requests.then_some(wisp_apiserver::logs::QUEUE_PROXY);
        match client.logs(kind, ns, name, args.follow, args.tail, container) {
            Ok(r) => {
                opened = Some(r);
                break;
            }
            Err(e) if e.is_not_found() && candidates.len() > 1 => continue,
            Err(e) => return Err(e.into()),
        }
    }
    let Some((replicas, reader)) = opened else {
        return Err(ApiError::Other(anyhow::anyhow!(
            "no service or revision named {name:?} in namespace {ns:?}"
        ))
        .into());
    };
    let mut prefixer = Prefixer {
        always: replicas > 1,
        first: None,
    };
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    for raw in reader.lines() {
        let raw = raw?;
        if let Some(l) = parse(&raw) {
            // Request log lines say which replica served them (`.Revision.PodName`).
            let text = if args.requests {
                l.line
            } else {
                prefixer.render(&l)
            };
            writeln!(out, "{text}")?;
            if args.follow {
                out.flush()?;
            }
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(r: &str, l: &str) -> Line {
        Line {
            replica: r.into(),
            line: l.into(),
        }
    }

    #[test]
    fn prefixes_only_with_several_replicas() {
        let mut one = Prefixer::default();
        assert_eq!(one.render(&line("a-1", "x")), "x");
        assert_eq!(one.render(&line("a-1", "y")), "y");
        assert_eq!(one.render(&line("a-2", "z")), "[a-2] z");
        assert_eq!(one.render(&line("a-1", "w")), "[a-1] w");

        let mut many = Prefixer {
            always: true,
            first: None,
        };
        assert_eq!(many.render(&line("a-1", "x")), "[a-1] x");
    }

    #[test]
    fn parses_server_lines() {
        assert_eq!(
            parse(r#"{"replica":"hello-00001-1","stream":"stdout","line":"hi"}"#),
            Some(line("hello-00001-1", "hi"))
        );
        assert_eq!(parse("garbage"), None);
    }

    #[test]
    fn targets() {
        let (k, n) = split_target("hello").unwrap();
        assert_eq!((k.len(), n), (2, "hello"));
        let (k, n) = split_target("rev/hello-00001").unwrap();
        assert_eq!((k[0].kind, n), ("Revision", "hello-00001"));
        assert!(split_target("rt/hello").is_err());
        assert!(split_target("pods/x").is_err());
    }
}
