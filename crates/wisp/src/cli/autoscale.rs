//! `wisp autoscale simulate`: replays a load trace through the same KPA decider and scaler
//! `wisp serve` uses, with a Service's autoscaling annotations and the config file, so that
//! autoscaling can be tuned before deploying — something Knative itself does not offer.

use std::path::PathBuf;

use anyhow::{Context, bail};
use serde_json::Value;
use wisp_api::{
    config::Config,
    defaults,
    field_error::Level,
    serving::{Configuration, Revision, Service},
    validation,
};
use wisp_autoscaler::{DeciderSpec, SimOptions, Trace, simulate, targets};

use super::manifest;

/// `wisp autoscale …`.
#[derive(Debug, Clone, clap::Args)]
pub struct AutoscaleArgs {
    #[command(subcommand)]
    pub command: AutoscaleCommand,
}

#[derive(Debug, Clone, clap::Subcommand)]
pub enum AutoscaleCommand {
    /// Replay a load trace (CSV `seconds,value`) through the KPA and print each 2 s tick.
    Simulate(SimulateArgs),
}

/// Output of `wisp autoscale simulate`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum Format {
    /// An aligned table per tick, then an ASCII chart of replicas over time.
    Table,
    Csv,
    Json,
    /// An SVG chart of load, desired and ready replicas.
    Svg,
}

#[derive(Debug, Clone, clap::Args)]
pub struct SimulateArgs {
    /// The Service (or Configuration/Revision) manifest whose template annotations and
    /// containerConcurrency drive the autoscaler.
    #[arg(short = 'f', long = "filename")]
    pub file: String,
    /// Load trace: CSV rows `seconds,value` (concurrency or rps, per the metric annotation);
    /// each value holds until the next row.
    #[arg(long)]
    pub trace: PathBuf,
    /// Config file (as for `wisp serve --config`): config-autoscaler keys apply.
    #[arg(long)]
    pub config: Option<PathBuf>,
    #[arg(short = 'o', long, value_enum, default_value = "table")]
    pub output: Format,
    /// Time from asking for a replica until it is ready.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    pub ready_delay: std::time::Duration,
    /// How long to simulate (default: until the trace's last row).
    #[arg(long, value_parser = parse_duration)]
    pub duration: Option<std::time::Duration>,
}

fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    let d = wisp_api::duration::GoDuration::parse(s).map_err(|e| e.to_string())?;
    d.to_std()
        .ok_or_else(|| format!("{s}: must not be negative"))
}

/// The template annotations and containerConcurrency of the first Service, Configuration or
/// Revision in the manifest, after Knative's defaulting and validation (so a bad annotation
/// is reported exactly as `wisp apply` would report it).
fn revision_template(
    docs: &[manifest::Document],
    cfg: &Config,
) -> anyhow::Result<(targets::Annotations, i64)> {
    let to_err = |e: wisp_api::FieldError| anyhow::anyhow!("validation failed: {e}");
    for doc in docs {
        let v: &Value = &doc.value;
        match v["kind"].as_str() {
            Some("Service") => {
                let mut s: Service =
                    serde_json::from_value(v.clone()).context("decoding the Service")?;
                defaults::default_service(&mut s, cfg, true);
                let errs = validation::validate_service(&s, None, cfg).filter(Level::Error);
                if !errs.is_empty() {
                    return Err(to_err(errs));
                }
                let t = s.spec.template;
                return Ok((
                    t.metadata.annotations,
                    t.spec.container_concurrency.unwrap_or(0),
                ));
            }
            Some("Configuration") => {
                let mut c: Configuration =
                    serde_json::from_value(v.clone()).context("decoding the Configuration")?;
                defaults::default_configuration(&mut c, cfg, true);
                let errs = validation::validate_configuration(&c, None, cfg).filter(Level::Error);
                if !errs.is_empty() {
                    return Err(to_err(errs));
                }
                let t = c.spec.template;
                return Ok((
                    t.metadata.annotations,
                    t.spec.container_concurrency.unwrap_or(0),
                ));
            }
            Some("Revision") => {
                let mut r: Revision =
                    serde_json::from_value(v.clone()).context("decoding the Revision")?;
                defaults::default_revision(&mut r, cfg, true);
                let errs = validation::validate_revision(&r, None, cfg).filter(Level::Error);
                if !errs.is_empty() {
                    return Err(to_err(errs));
                }
                return Ok((
                    r.metadata.annotations,
                    r.spec.container_concurrency.unwrap_or(0),
                ));
            }
            _ => continue,
        }
    }
    bail!(
        "no Service, Configuration or Revision in {}",
        docs.first().map_or("the manifest", |d| d.source.as_str())
    )
}

pub fn run(args: AutoscaleArgs) -> anyhow::Result<bool> {
    let AutoscaleCommand::Simulate(a) = args.command;
    let cfg = match &a.config {
        Some(p) => {
            let text =
                std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
            Config::from_yaml(&text)
                .map_err(|e| anyhow::anyhow!("invalid config file {}: {e}", p.display()))?
        }
        None => Config::default(),
    };
    let docs = manifest::read_all(std::slice::from_ref(&a.file), &mut std::io::stdin())?;
    let (annotations, cc) = revision_template(&docs, &cfg)?;
    let spec = DeciderSpec::validated(&annotations, cc, &cfg.autoscaler)?;
    let text = std::fs::read_to_string(&a.trace)
        .with_context(|| format!("reading {}", a.trace.display()))?;
    let trace = Trace::parse(&text).with_context(|| format!("in {}", a.trace.display()))?;
    let options = SimOptions {
        ready_delay: a.ready_delay,
        duration: a.duration,
        activation_timeout: targets::activation_timeout(targets::progress_deadline(
            &annotations,
            &cfg.deployment,
        )),
    };
    let sim = simulate(&spec, &trace, &options);
    match a.output {
        Format::Table => {
            super::out(format_args!(
                "{}\n{}",
                sim.to_table(),
                sim.to_ascii_chart(72, 16)
            ))?;
        }
        Format::Csv => super::out(format_args!("{}", sim.to_csv()))?,
        Format::Json => super::out(format_args!("{}", sim.to_json()))?,
        Format::Svg => super::out(format_args!("{}", sim.to_svg()))?,
    }
    Ok(true)
}
