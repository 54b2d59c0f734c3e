//! `cargo run -p wisp-autoscaler --example simulate -- TRACE.csv [table|csv|json|chart|svg] [key=value…]`
//!
//! Replays a `seconds,value` trace through the KPA with default config; extra `key=value`
//! arguments are `autoscaling.knative.dev/<key>` annotations (e.g. `target=10`). A stand-in
//! until `wisp autoscale simulate` exists.

use std::process::ExitCode;

use wisp_api::config::AutoscalerConfig;
use wisp_autoscaler::targets::Annotations;
use wisp_autoscaler::{DeciderSpec, SimOptions, Trace, simulate};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(path) = args.first() else {
        eprintln!("usage: simulate TRACE.csv [table|csv|json|chart|svg] [key=value…]");
        return ExitCode::FAILURE;
    };
    let format = args.get(1).map_or("table", String::as_str);
    let annotations: Annotations = args
        .iter()
        .skip(2)
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (format!("autoscaling.knative.dev/{k}"), v.to_string()))
        .collect();
    let run = || -> Result<String, Box<dyn std::error::Error>> {
        let spec = DeciderSpec::validated(&annotations, 0, &AutoscalerConfig::default())?;
        let trace = Trace::parse(&std::fs::read_to_string(path)?)?;
        let sim = simulate(&spec, &trace, &SimOptions::default());
        Ok(match format {
            "csv" => sim.to_csv(),
            "json" => sim.to_json(),
            "chart" => sim.to_ascii_chart(60, 15),
            "svg" => sim.to_svg(),
            _ => sim.to_table(),
        })
    };
    match run() {
        Ok(out) => {
            print!("{out}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
