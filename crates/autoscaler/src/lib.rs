//! Knative's KPA (Knative Pod Autoscaler) as pure, clock-injected Rust: the
//! algorithm of Knative's `pkg/autoscaler` and `pkg/reconciler/autoscaling/kpa`, with no I/O and no async, so every rule is table-tested beside its code and a
//! whole autoscaling run can be replayed deterministically.
//!
//! The pipeline for one revision, in the order data flows:
//! 1. [`targets::DeciderSpec::resolve`] — annotations + containerConcurrency +
//!    `config-autoscaler` → the spec (target per pod, windows, rates, bounds, TBC…).
//! 2. [`aggregation::MetricWindows`] — one-second buckets over the stable and panic windows,
//!    linear or weighted-exponential averages.
//! 3. [`decider::Decider`] — every 2 s: desired pods, panic mode, scale-down delay, excess
//!    burst capacity. [`decider::Autoscaler`] bundles 2 and 3 and turns "no data"
//!    into "no decision".
//! 4. [`scaler::Scaler`] — bounds, initial scale, the scale-to-zero sequence, activation
//!    timeout and the PodAutoscaler's `Active` condition.
//! 5. [`collector::Collector`] — per revision, the windows of 2 fed once a second with the
//!    revision's total from the replicas' and the activator's reports.
//! 6. [`hpa`] — the HPA class instead of 2–4: Kubernetes' HPA controller's arithmetic
//!    (replica calculator, stabilization windows, scaling policies) on CPU or memory.
//! 7. [`simulate::simulate`] — drives 2–4 over a load trace with a simple pod model, and
//!    renders the result as CSV, JSON, a text table, an ASCII chart or an SVG chart.
//!
//! Start with [`simulate()`] to see the whole loop in ~50 lines, then [`decider`]:
//!
//! ```
//! use wisp_autoscaler::{DeciderSpec, SimOptions, Trace, simulate};
//!
//! let spec = DeciderSpec::default(); // no annotations: 70 concurrent requests per pod
//! let trace = Trace::parse("seconds,concurrency\n0,700\n120,700\n").unwrap();
//! let sim = simulate(&spec, &trace, &SimOptions::default());
//! assert_eq!(sim.rows.last().unwrap().ready, 10);
//! print!("{}", sim.to_ascii_chart(60, 15));
//! ```
//!
//! Time everywhere is a [`std::time::Duration`] since an arbitrary epoch (the process start
//! for the live autoscaler, second 0 for the simulator); only whole seconds matter.

pub mod aggregation;
pub mod collector;
pub mod decider;
pub mod hpa;
pub mod link;
pub mod scaler;
pub mod simulate;
pub mod targets;

pub use aggregation::{Aggregation, Buckets, MaxTimeWindow, MetricWindows};
pub use collector::{ActivatorReport, ActivatorStat, Collector, PodStat, Sample, observed_value};
pub use decider::{Autoscaler, Decider, Decision, PanicState, num_activators};
pub use hpa::{Hpa, HpaDecision, HpaError, HpaMetric, HpaSpec, HpaTarget, PodMetric, PodState};
pub use link::{ActivatorLink, RoutingMode};
pub use scaler::{ActiveState, ScaleInput, ScaleResult, Scaler};
pub use simulate::{SimOptions, SimRow, Simulation, Trace, TraceError, simulate};
pub use targets::{DeciderSpec, Metric, SpecError};
