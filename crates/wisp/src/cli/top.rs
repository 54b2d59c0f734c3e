//! `wisp top [-A] [-w]`: per revision, like `kubectl top`: replicas ready/desired,
//! concurrency, requests per second, p95 latency and panic mode, from the server's
//! `/wisp/v1/top`.

use std::time::Duration;

use crate::observe::top::{PATH, TopRow};

use super::{GlobalArgs, out, printers::format_table};

/// How often `-w` refreshes (the server samples every 2 s).
const REFRESH: Duration = Duration::from_secs(2);

/// Flags of `wisp top`.
#[derive(Debug, Clone, clap::Args)]
pub struct TopArgs {
    #[command(flatten)]
    pub global: GlobalArgs,
    /// Every namespace.
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
    /// Refresh every 2 s until interrupted.
    #[arg(short = 'w', long)]
    pub watch: bool,
}

/// The table `wisp top` prints.
pub fn table(rows: &[TopRow], all_namespaces: bool) -> String {
    let mut out = Vec::with_capacity(rows.len() + 1);
    let mut header = vec![
        "NAME",
        "SERVICE",
        "REPLICAS",
        "CONCURRENCY",
        "RPS",
        "P95",
        "PANIC",
    ];
    if all_namespaces {
        header.insert(0, "NAMESPACE");
    }
    out.push(header.into_iter().map(String::from).collect::<Vec<_>>());
    for r in rows {
        let desired = if r.desired < 0 {
            "-".to_string()
        } else {
            r.desired.to_string()
        };
        let mut row = vec![
            r.revision.clone(),
            if r.service.is_empty() {
                "-".into()
            } else {
                r.service.clone()
            },
            format!("{}/{desired}", r.ready),
            format!("{:.1}", r.concurrency),
            r.rps.map_or_else(|| "-".into(), |v| format!("{v:.1}")),
            r.p95_ms.map_or_else(|| "-".into(), format_ms),
            if r.panic_mode { "yes" } else { "no" }.into(),
        ];
        if all_namespaces {
            row.insert(0, r.namespace.clone());
        }
        out.push(row);
    }
    format_table(&out)
}

/// A latency for people: `850µs`, `12ms`, `1.4s`.
fn format_ms(ms: f64) -> String {
    if ms < 1.0 {
        format!("{:.0}µs", ms * 1000.0)
    } else if ms < 1000.0 {
        format!("{ms:.0}ms")
    } else {
        format!("{:.1}s", ms / 1000.0)
    }
}

pub fn run(args: TopArgs) -> anyhow::Result<bool> {
    let client = args.global.client()?;
    let path = if args.all_namespaces {
        PATH.to_string()
    } else {
        format!("{PATH}?namespace={}", args.global.namespace)
    };
    let tty = std::io::IsTerminal::is_terminal(&std::io::stdout());
    loop {
        let rows: Vec<TopRow> = serde_json::from_value(client.get_path_query(&path)?)?;
        let text = if rows.is_empty() {
            if args.all_namespaces {
                "No revisions found.\n".to_string()
            } else {
                format!(
                    "No revisions found in {} namespace.\n",
                    args.global.namespace
                )
            }
        } else {
            table(&rows, args.all_namespaces)
        };
        if args.watch && tty {
            // Clear the screen and home the cursor: the table replaces itself.
            out(format_args!("\x1b[2J\x1b[H{text}"))?;
        } else {
            out(format_args!("{text}"))?;
        }
        if !args.watch {
            return Ok(true);
        }
        if !tty {
            out(format_args!("\n"))?;
        }
        std::thread::sleep(REFRESH);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_print_like_kubectl_top() {
        let rows = [
            TopRow {
                namespace: "default".into(),
                revision: "hello-00001".into(),
                service: "hello".into(),
                ready: 2,
                desired: 3,
                concurrency: 4.25,
                rps: Some(120.04),
                p95_ms: Some(12.4),
                panic_mode: true,
            },
            TopRow {
                namespace: "demo".into(),
                revision: "idle-00001".into(),
                desired: -1,
                rps: None,
                ..TopRow::default()
            },
        ];
        let t = table(&rows, true);
        let lines: Vec<Vec<&str>> = t.lines().map(|l| l.split_whitespace().collect()).collect();
        assert_eq!(
            lines,
            [
                vec![
                    "NAMESPACE",
                    "NAME",
                    "SERVICE",
                    "REPLICAS",
                    "CONCURRENCY",
                    "RPS",
                    "P95",
                    "PANIC"
                ],
                vec![
                    "default",
                    "hello-00001",
                    "hello",
                    "2/3",
                    "4.2",
                    "120.0",
                    "12ms",
                    "yes"
                ],
                vec!["demo", "idle-00001", "-", "0/-", "0.0", "-", "-", "no"],
            ]
        );
        assert!(!table(&rows, false).contains("NAMESPACE"));
    }

    #[test]
    fn latencies() {
        for (ms, want) in [
            (0.85, "850µs"),
            (12.4, "12ms"),
            (999.0, "999ms"),
            (1400.0, "1.4s"),
        ] {
            assert_eq!(format_ms(ms), want);
        }
    }
}
