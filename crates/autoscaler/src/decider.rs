//! The KPA decision every tick (Knative's `pkg/autoscaler/scaling/
//! autoscaler.go`), as a pure state machine: observed stable/panic values and the ready pod
//! count in, desired scale and excess burst capacity out. Also the number of activators a
//! revision gets (`pkg/activator/net/throttler.go`'s assignment) and [`Autoscaler`], the windows + decider pair one revision needs.

use std::time::Duration;

use serde::Serialize;

use crate::aggregation::{MaxTimeWindow, MetricWindows};
use crate::targets::DeciderSpec;

/// The decider's tick (Knative's `tickInterval`), also the scale-down-delay granularity.
pub const TICK: Duration = Duration::from_secs(2);

/// Minimum number of activators in a revision's path.
pub const MIN_ACTIVATORS: i32 = 2;

/// One tick's outcome.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Decision {
    /// Pods wanted (before min/max/initial bounds and scale-to-zero, which the scaler applies).
    pub desired_scale: i32,
    /// Spare capacity beyond TBC; negative ⇒ keep the activator in the path.
    pub excess_burst_capacity: i32,
    pub panic_mode: bool,
    pub observed_stable: f64,
    pub observed_panic: f64,
}

/// Panic bookkeeping.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PanicState {
    /// When panic started or was last extended; `None` = stable mode.
    pub panic_time: Option<Duration>,
    /// Highest desired scale while panicking: panic never scales down.
    pub max_panic_pods: i32,
}

/// One revision's decider.
#[derive(Clone, Debug)]
pub struct Decider {
    spec: DeciderSpec,
    state: PanicState,
    /// Recent desired values for scale-down-delay; only when the delay is > 0 (a one-bucket
    /// window is not a no-op: two decisions in one bucket would yield the larger).
    delay_window: Option<MaxTimeWindow>,
    /// Whether the restart rule has been applied.
    started: bool,
}

impl Decider {
    /// A decider that applies the restart rule on its first [`decide`](Self::decide).
    pub fn new(spec: DeciderSpec) -> Self {
        let delay_window = delay_window(&spec);
        Decider {
            spec,
            state: PanicState::default(),
            delay_window,
            started: false,
        }
    }

    /// A decider created at `now` with `ready_pods` ready (Knative's constructor): with more
    /// than one pod it starts in panic holding that many, because a restarted autoscaler
    /// has lost its metric history and must not scale a busy revision down on it.
    pub fn starting(spec: DeciderSpec, now: Duration, ready_pods: u32) -> Self {
        let mut d = Decider::new(spec);
        d.start(now, ready_pods);
        d
    }

    /// Applies the restart rule once; later calls do nothing.
    pub fn start(&mut self, now: Duration, ready_pods: u32) {
        if self.started {
            return;
        }
        self.started = true;
        let ready = clamp_i32(ready_pods);
        if ready > 1 {
            self.state.panic_time = Some(now);
        }
        self.state.max_panic_pods = ready;
    }

    /// The current spec.
    pub fn spec(&self) -> &DeciderSpec {
        &self.spec
    }

    /// The panic state.
    pub fn state(&self) -> PanicState {
        self.state
    }

    /// Replaces the spec (revision annotations or config changed); panic state is kept, the
    /// scale-down-delay history only if the delay is unchanged (Knative builds its delay
    /// window once, at creation; here a changed delay takes effect without a restart).
    pub fn update(&mut self, spec: DeciderSpec) {
        if spec.scale_down_delay != self.spec.scale_down_delay {
            self.delay_window = delay_window(&spec);
        }
        self.spec = spec;
    }

    /// The decision at `now` given R0 ready pods and the observed stable (S) and panic (P)
    /// values (as `autoscaler.go`'s `Scale`). Callers with no data in the stable window make no decision at all
    /// (see [`Autoscaler::tick`]).
    pub fn decide(&mut self, now: Duration, ready_pods: u32, stable: f64, panic: f64) -> Decision {
        self.start(now, ready_pods);
        let spec = &self.spec;
        let r0 = clamp_i32(ready_pods);
        // R = max(1, R0): rates and the panic ratio need a non-zero base.
        let r = f64::from(r0.max(1));

        // U = ⌈up·R⌉ always allows growth by at least one pod, even with a tiny rate.
        let max_up = (spec.max_scale_up_rate * r).ceil();
        // D = ⌊R/down⌋; an unreachable revision may drop straight to zero.
        let max_down = if spec.reachable {
            (r / spec.max_scale_down_rate).floor()
        } else {
            0.0
        };

        let d_stable = (stable / spec.target_value).ceil();
        let d_panic = (panic / spec.target_value).ceil();
        let mut n_stable = to_i32(d_stable.max(max_down).min(max_up));
        let mut n_panic = to_i32(d_panic.max(max_down).min(max_up));

        // Activation scale only lifts a non-zero demand; zero still means zero.
        let a = spec.activation_scale;
        if a > 1 {
            if d_stable > 0.0 && a > n_stable {
                n_stable = a;
            }
            if d_panic > 0.0 && a > n_panic {
                n_panic = a;
            }
        }

        let over_threshold = d_panic / r >= spec.panic_threshold;
        match self.state.panic_time {
            // Entry, or extension: every tick over the threshold restarts the clock.
            _ if over_threshold => self.state.panic_time = Some(now),
            // Exit once the surge is older than a stable window, i.e. in the stable metric.
            Some(t) if t + spec.stable_window < now => {
                self.state = PanicState::default();
            }
            _ => {}
        }

        let mut desired = n_stable;
        if self.state.panic_time.is_some() {
            // Provision for whichever window sees more; never scale down while panicking.
            desired = desired.max(n_panic).max(self.state.max_panic_pods);
            self.state.max_panic_pods = desired;
        }

        // Scale-down-delay holds only reachable revisions (as in `autoscaler.go`; pinned by
        // `autoscaler_test.go` `TestAutoscalerScaleDownDelayNotReachable`, where a revision
        // made unreachable drops to 0 at once); an unreachable one neither uses nor feeds
        // the history.
        if spec.reachable
            && let Some(window) = &mut self.delay_window
        {
            window.record(now, desired);
            desired = window.current();
        }

        Decision {
            desired_scale: desired,
            excess_burst_capacity: excess_burst_capacity(spec, ready_pods, panic),
            panic_mode: self.state.panic_time.is_some(),
            observed_stable: stable,
            observed_panic: panic,
        }
    }
}

fn delay_window(spec: &DeciderSpec) -> Option<MaxTimeWindow> {
    (!spec.scale_down_delay.is_zero()).then(|| MaxTimeWindow::new(spec.scale_down_delay, TICK))
}

fn clamp_i32(v: u32) -> i32 {
    i32::try_from(v).unwrap_or(i32::MAX)
}

/// Go's `int32(float64)` for the values that occur here (saturating instead of undefined).
fn to_i32(v: f64) -> i32 {
    v as i32
}

/// EBC = ⌊R0·Total − TBC − P⌋ for TBC > 0; 0 for TBC = 0; -1 for TBC = -1 (`autoscaler.go`). Uses the
/// panic value so the activator isn't yanked out on a momentary lull.
pub fn excess_burst_capacity(spec: &DeciderSpec, ready_pods: u32, observed_panic: f64) -> i32 {
    let tbc = spec.target_burst_capacity;
    if tbc == 0.0 {
        0
    } else if tbc > 0.0 {
        to_i32((f64::from(ready_pods) * spec.total_value - tbc - observed_panic).floor())
    } else {
        -1
    }
}

/// The EBC a new decider reports before any metric: `InitialScale·Total − TBC` (truncated),
/// or TBC itself for 0 / -1. Negative with the defaults (100 − 211), so a new revision
/// starts behind the activator.
pub fn initial_excess_burst_capacity(spec: &DeciderSpec) -> i32 {
    let tbc = spec.target_burst_capacity;
    if tbc == 0.0 || tbc == -1.0 {
        to_i32(tbc)
    } else {
        to_i32(f64::from(spec.initial_scale) * spec.total_value - tbc)
    }
}

/// How many activators a revision is assigned (Knative's `activatorCount` in
/// `pkg/reconciler/autoscaling/kpa/kpa.go`): 2 when TBC = 0, else
/// `max(2, ⌈(R·Total + max(TBC, 0)) / activator-capacity⌉)`.
pub fn num_activators(spec: &DeciderSpec, ready_pods: u32) -> i32 {
    let tbc = spec.target_burst_capacity;
    if tbc == 0.0 {
        return MIN_ACTIVATORS;
    }
    let capacity = f64::from(ready_pods) * spec.total_value + tbc.max(0.0);
    to_i32((capacity / spec.activator_capacity).ceil()).max(MIN_ACTIVATORS)
}

/// One revision's metric windows and decider: what the live autoscaler keeps per revision
/// and what the simulator drives.
#[derive(Clone, Debug)]
pub struct Autoscaler {
    windows: MetricWindows,
    decider: Decider,
}

impl Autoscaler {
    /// Empty windows and a fresh decider (restart rule on the first tick).
    pub fn new(spec: DeciderSpec) -> Self {
        Autoscaler {
            windows: windows_for(&spec),
            decider: Decider::new(spec),
        }
    }

    /// Records one observation of the spec's metric (revision-wide total for that second).
    pub fn record(&mut self, now: Duration, value: f64) {
        self.windows.record(now, value);
    }

    /// One tick: `None` when the stable window has no data while pods are scraped (Knative
    /// then leaves the previous decision in place). The restart rule applies on the first
    /// tick either way, as Knative applies it when the decider is created.
    pub fn tick(&mut self, now: Duration, ready_pods: u32) -> Option<Decision> {
        self.decider.start(now, ready_pods);
        let (stable, panic) = self.windows.observe(now)?;
        Some(self.decider.decide(now, ready_pods, stable, panic))
    }

    /// Applies a changed spec (windows are resized, history kept where possible).
    pub fn update(&mut self, spec: DeciderSpec, now: Duration) {
        self.windows.update(
            spec.stable_window,
            spec.panic_window,
            spec.aggregation,
            spec.scrapes_pods(),
            now,
        );
        self.decider.update(spec);
    }

    /// The decider.
    pub fn decider(&self) -> &Decider {
        &self.decider
    }

    /// The metric windows.
    pub fn windows(&self) -> &MetricWindows {
        &self.windows
    }
}

fn windows_for(spec: &DeciderSpec) -> MetricWindows {
    MetricWindows::new(
        spec.stable_window,
        spec.panic_window,
        spec.aggregation,
        spec.scrapes_pods(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    /// T = 10 (target 10 at 100 % utilisation), default rates/windows, TBC 0 unless set.
    fn spec() -> DeciderSpec {
        DeciderSpec {
            target_value: 10.0,
            total_value: 10.0,
            target_burst_capacity: 0.0,
            ..DeciderSpec::default()
        }
    }

    fn fresh(spec: DeciderSpec) -> Decider {
        // Started with one pod: no restart panic.
        Decider::starting(spec, s(0), 1)
    }

    #[test]
    fn stable_mode_is_ceil_s_over_t() {
        let mut d = fresh(DeciderSpec {
            panic_threshold: 100.0,
            ..spec()
        });
        // (ready, S, P, desired)
        let cases = [
            (1, 0.0, 0.0, 0),
            (1, 5.0, 5.0, 1),
            (1, 10.0, 10.0, 1),
            (1, 10.5, 10.5, 2),
            (4, 35.0, 35.0, 4),
            (4, 21.0, 21.0, 3),
        ];
        for (i, (ready, st, p, want)) in cases.into_iter().enumerate() {
            let dec = d.decide(s(2 * i as u64 + 2), ready, st, p);
            assert_eq!(dec.desired_scale, want, "case {i}");
            assert!(!dec.panic_mode, "case {i}");
            assert_eq!((dec.observed_stable, dec.observed_panic), (st, p));
        }
    }

    #[test]
    fn rate_limit_up() {
        // U = ⌈1.5 · 2⌉ = 3 although S/T asks for 10; panic is kept out with a high threshold.
        let mut d = fresh(DeciderSpec {
            max_scale_up_rate: 1.5,
            panic_threshold: 100.0,
            ..spec()
        });
        assert_eq!(d.decide(s(2), 2, 100.0, 100.0).desired_scale, 3);
        // R0 = 0 counts as R = 1: U = ⌈1.5⌉ = 2.
        assert_eq!(d.decide(s(4), 0, 100.0, 100.0).desired_scale, 2);
        // A tiny rate still allows growth by one pod: U = ⌈1.1 · 3⌉ = 4.
        let mut d = fresh(DeciderSpec {
            max_scale_up_rate: 1.1,
            panic_threshold: 100.0,
            ..spec()
        });
        assert_eq!(d.decide(s(2), 3, 30.1, 30.1).desired_scale, 4);
    }

    #[test]
    fn rate_limit_down() {
        let mut d = fresh(spec());
        // D = ⌊10 / 2⌋ = 5 although S/T asks for 1.
        assert_eq!(d.decide(s(2), 10, 5.0, 5.0).desired_scale, 5);
        // D = ⌊1/2⌋ = 0: one pod may go to zero.
        assert_eq!(d.decide(s(4), 1, 0.0, 0.0).desired_scale, 0);
        let mut d = fresh(DeciderSpec {
            max_scale_down_rate: 4.0,
            ..spec()
        });
        assert_eq!(d.decide(s(2), 10, 0.0, 0.0).desired_scale, 2);
    }

    #[test]
    fn unreachable_has_no_scale_down_limit() {
        let mut d = fresh(DeciderSpec {
            reachable: false,
            ..spec()
        });
        // D = 0 when unreachable.
        assert_eq!(d.decide(s(2), 10, 0.0, 0.0).desired_scale, 0);
    }

    #[test]
    fn activation_scale_lifts_non_zero_demand_only() {
        let mut d = fresh(DeciderSpec {
            activation_scale: 3,
            ..spec()
        });
        assert_eq!(d.decide(s(2), 1, 5.0, 5.0).desired_scale, 3);
        assert_eq!(d.decide(s(4), 3, 0.0, 0.0).desired_scale, 1, "D = ⌊3/2⌋");
        assert_eq!(
            d.decide(s(6), 1, 0.0, 0.0).desired_scale,
            0,
            "zero stays zero"
        );
        assert_eq!(
            d.decide(s(8), 1, 45.0, 5.0).desired_scale,
            5,
            "above a: unchanged"
        );
        // activation-scale 1 is a no-op.
        let mut d = fresh(DeciderSpec {
            activation_scale: 1,
            ..spec()
        });
        assert_eq!(d.decide(s(2), 1, 0.1, 0.1).desired_scale, 1);
    }

    #[test]
    fn activation_scale_applies_to_panic_count() {
        // Panic demand > 0 but stable 0: n_p is lifted to a; in panic desired = max.
        let mut d = fresh(DeciderSpec {
            activation_scale: 4,
            ..spec()
        });
        let dec = d.decide(s(2), 1, 0.0, 25.0); // d_p = 3 ≥ 2·R → panic
        assert!(dec.panic_mode);
        assert_eq!(dec.desired_scale, 4);
    }

    #[test]
    fn panic_entry_extension_and_exit() {
        let mut d = fresh(spec());
        // d_p = 3, R = 1: 3 ≥ 2 ⇒ panic; desired = max(n_s=1, n_p=3).
        let dec = d.decide(s(10), 1, 10.0, 30.0);
        assert!(dec.panic_mode);
        assert_eq!(dec.desired_scale, 3);
        assert_eq!(d.state().panic_time, Some(s(10)));
        // Over threshold again (d_p = 6 ≥ 2·3): extends, panic_time moves.
        let dec = d.decide(s(12), 3, 10.0, 60.0);
        assert_eq!(dec.desired_scale, 6);
        assert_eq!(d.state().panic_time, Some(s(12)));
        // Below the threshold: still panicking and never scaling down.
        let dec = d.decide(s(14), 6, 10.0, 10.0);
        assert!(dec.panic_mode);
        assert_eq!(dec.desired_scale, 6);
        assert_eq!(d.state().max_panic_pods, 6);
        // Exactly a stable window after the last extension: not yet (strictly after).
        let dec = d.decide(s(72), 6, 10.0, 10.0);
        assert!(dec.panic_mode);
        assert_eq!(dec.desired_scale, 6);
        // Past it: exit, maxPanicPods reset, stable decision (D = 3 limits the drop).
        let dec = d.decide(s(74), 6, 10.0, 10.0);
        assert!(!dec.panic_mode);
        assert_eq!(dec.desired_scale, 3);
        assert_eq!(d.state(), PanicState::default());
    }

    #[test]
    fn panic_uses_stable_when_larger() {
        let mut d = fresh(spec());
        let dec = d.decide(s(2), 1, 50.0, 20.0); // d_p = 2 ⇒ panic; n_s = 5 > n_p = 2
        assert!(dec.panic_mode);
        assert_eq!(dec.desired_scale, 5);
    }

    #[test]
    fn panic_threshold_is_inclusive_and_relative_to_ready() {
        let mut d = fresh(spec());
        assert!(!d.decide(s(2), 4, 70.0, 70.0).panic_mode); // 7/4 < 2
        assert!(d.decide(s(4), 4, 70.0, 80.0).panic_mode); // 8/4 = 2
    }

    #[test]
    fn restart_with_more_than_one_ready_replica() {
        // Created with 5 ready pods: panic at creation holding 5 for a stable window.
        let mut d = Decider::starting(spec(), s(100), 5);
        assert_eq!(
            d.state(),
            PanicState {
                panic_time: Some(s(100)),
                max_panic_pods: 5
            }
        );
        let dec = d.decide(s(102), 5, 0.0, 0.0);
        assert!(dec.panic_mode);
        assert_eq!(dec.desired_scale, 5);
        // Panic started at creation; exit strictly after a stable window.
        assert!(d.decide(s(160), 5, 0.0, 0.0).panic_mode);
        let dec = d.decide(s(162), 5, 0.0, 0.0);
        assert!(!dec.panic_mode);
        // Stable now: max(d_s = 0, D = ⌊5/2⌋) = 2.
        assert_eq!(dec.desired_scale, 2);
    }

    #[test]
    fn restart_rule_on_first_tick() {
        // `new` defers the rule to the first decide, with that tick's ready count.
        let mut d = Decider::new(spec());
        let dec = d.decide(s(0), 4, 0.0, 0.0);
        assert!(dec.panic_mode);
        assert_eq!(dec.desired_scale, 4);
        // One or zero pods: normal behaviour.
        let mut d = Decider::new(spec());
        let dec = d.decide(s(0), 1, 0.0, 0.0);
        assert!(!dec.panic_mode);
        assert_eq!(dec.desired_scale, 0);
    }

    #[test]
    fn scale_down_delay_holds_the_max_of_the_last_delta() {
        let mut d = fresh(DeciderSpec {
            scale_down_delay: s(10),
            max_scale_down_rate: 100.0,
            panic_threshold: 100.0,
            ..spec()
        });
        // (t, ready, S, desired)
        let steps = [
            (2, 5, 50.0, 5),
            (4, 5, 10.0, 5),  // wants 1, holds 5
            (10, 5, 10.0, 5), // bucket of t=2 is 4 buckets old: still inside 10 s
            (12, 5, 10.0, 1), // 5 buckets old: out
            (14, 1, 30.0, 3), // scale-up is immediate
            (16, 3, 0.0, 3),
        ];
        for (t, ready, st, want) in steps {
            assert_eq!(d.decide(s(t), ready, st, st).desired_scale, want, "t={t}");
        }
    }

    #[test]
    fn scale_down_delay_ignored_when_unreachable() {
        let mut d = fresh(DeciderSpec {
            scale_down_delay: s(60),
            reachable: false,
            ..spec()
        });
        assert_eq!(d.decide(s(2), 1, 50.0, 0.0).desired_scale, 5);
        assert_eq!(d.decide(s(4), 5, 0.0, 0.0).desired_scale, 0);
    }

    #[test]
    fn excess_burst_capacity_table() {
        let base = DeciderSpec {
            total_value: 100.0,
            ..spec()
        };
        // (TBC, ready, P, EBC)
        let cases = [
            (0.0, 5, 50.0, 0),
            (-1.0, 5, 50.0, -1),
            (211.0, 1, 0.0, -111),
            (211.0, 3, 0.0, 89),
            (211.0, 3, 88.5, 0),  // ⌊0.5⌋
            (211.0, 3, 89.5, -1), // ⌊-0.5⌋
            (211.0, 0, 0.0, -211),
            (50.0, 2, 10.0, 140),
        ];
        for (tbc, ready, p, want) in cases {
            let sp = DeciderSpec {
                target_burst_capacity: tbc,
                ..base.clone()
            };
            assert_eq!(
                excess_burst_capacity(&sp, ready, p),
                want,
                "tbc={tbc} r={ready} p={p}"
            );
            let mut d = fresh(sp);
            assert_eq!(d.decide(s(2), ready, p, p).excess_burst_capacity, want);
        }
    }

    #[test]
    fn initial_ebc() {
        assert_eq!(initial_excess_burst_capacity(&DeciderSpec::default()), -111);
        let s0 = DeciderSpec {
            target_burst_capacity: 0.0,
            ..DeciderSpec::default()
        };
        assert_eq!(initial_excess_burst_capacity(&s0), 0);
        let s1 = DeciderSpec {
            target_burst_capacity: -1.0,
            ..DeciderSpec::default()
        };
        assert_eq!(initial_excess_burst_capacity(&s1), -1);
        let s3 = DeciderSpec {
            initial_scale: 3,
            ..DeciderSpec::default()
        };
        assert_eq!(initial_excess_burst_capacity(&s3), 89);
    }

    #[test]
    fn num_activators_table() {
        let d = DeciderSpec::default(); // Total 100, TBC 211, capacity 100
        assert_eq!(num_activators(&d, 0), 3); // ⌈211/100⌉
        assert_eq!(num_activators(&d, 1), 4); // ⌈311/100⌉
        assert_eq!(num_activators(&d, 10), 13);
        let zero = DeciderSpec {
            target_burst_capacity: 0.0,
            ..d.clone()
        };
        assert_eq!(num_activators(&zero, 50), 2);
        let minus = DeciderSpec {
            target_burst_capacity: -1.0,
            ..d.clone()
        };
        assert_eq!(num_activators(&minus, 0), 2); // max(2, 0)
        assert_eq!(num_activators(&minus, 3), 3);
    }

    #[test]
    fn autoscaler_no_data_yet_means_no_decision() {
        let mut a = Autoscaler::new(spec());
        assert_eq!(a.tick(s(0), 0), None);
        a.record(s(1), 25.0);
        let dec = a.tick(s(2), 0).unwrap();
        assert_eq!((dec.observed_stable, dec.observed_panic), (25.0, 25.0));
        assert_eq!(dec.desired_scale, 3);
        // A stable window (and a second) of silence: no decision again.
        assert_eq!(a.tick(s(62), 3), None);
    }

    #[test]
    fn autoscaler_first_window_partly_filled() {
        let mut a = Autoscaler::new(spec());
        // 10 s of data, 20 each: the 60 s window averages over the 10 filled seconds.
        for t in 0..10 {
            a.record(s(t), 20.0);
        }
        let dec = a.tick(s(9), 2).unwrap();
        assert_eq!(dec.observed_stable, 20.0);
        assert_eq!(dec.desired_scale, 2);
    }

    #[test]
    fn autoscaler_without_scraping_decides_on_nothing() {
        // TBC = -1: no scraping; an empty window is zero load, and the decision is made.
        let mut a = Autoscaler::new(DeciderSpec {
            target_burst_capacity: -1.0,
            ..spec()
        });
        let dec = a.tick(s(0), 1).unwrap();
        assert_eq!(dec.desired_scale, 0);
        assert_eq!(dec.excess_burst_capacity, -1);
    }

    /// Knative's `pkg/autoscaler/scaling/autoscaler_test.go` (newest), row by row: each
    /// scenario is the test's decider spec, the ready count at creation, and its
    /// `expectScale` calls as (ms since start, ready pods, stable, panic, desired, EBC).
    /// `newTestAutoscaler(target, tbc)` is target/0.75 total, panic threshold 2, rates 10,
    /// a 60 s stable window, activator capacity 150; EBC is the test's `expectedEBC`.
    mod knative_autoscaler_test {
        use super::*;

        const UTILIZATION: f64 = 0.75;

        fn test_spec(target: f64, tbc: f64) -> DeciderSpec {
            DeciderSpec {
                target_value: target,
                total_value: target / UTILIZATION,
                target_burst_capacity: tbc,
                panic_threshold: 2.0,
                max_scale_up_rate: 10.0,
                max_scale_down_rate: 10.0,
                stable_window: s(60),
                activator_capacity: 150.0,
                scale_down_delay: Duration::ZERO,
                activation_scale: 1,
                reachable: true,
                ..DeciderSpec::default()
            }
        }

        /// The `TestAutoscalerScaleDownDelay*` spec: no total value or TBC (EBC 0).
        fn delay_spec(delay: Duration, reachable: bool) -> DeciderSpec {
            DeciderSpec {
                target_value: 10.0,
                total_value: 0.0,
                target_burst_capacity: 0.0,
                max_scale_down_rate: 10.0,
                max_scale_up_rate: 10.0,
                panic_threshold: 100.0,
                scale_down_delay: delay,
                activation_scale: 1,
                reachable,
                ..DeciderSpec::default()
            }
        }

        fn ebc(target: f64, tbc: f64, conc: f64, pods: f64) -> i32 {
            (target / UTILIZATION * pods - tbc - conc).floor() as i32
        }

        type Step = (u64, u32, f64, f64, i32, i32);

        /// Start time: far enough from 0 that "5 s ago" exists.
        const T0: u64 = 100_000;

        fn run(name: &str, d: &mut Decider, steps: &[Step]) {
            for &(ms, ready, stable, panic, want, want_ebc) in steps {
                let got = d.decide(Duration::from_millis(T0 + ms), ready, stable, panic);
                assert_eq!(
                    (got.desired_scale, got.excess_burst_capacity),
                    (want, want_ebc),
                    "{name} at +{ms}ms"
                );
            }
        }

        fn new(spec: DeciderSpec, ready: u32) -> Decider {
            Decider::starting(spec, Duration::from_millis(T0), ready)
        }

        const MIN: u64 = 60_000;

        #[test]
        fn scale_down_delay() {
            let mut d = new(delay_spec(s(300), true), 0);
            run(
                "TestAutoscalerScaleDownDelay",
                &mut d,
                &[
                    // simple
                    (2_000, 0, 40.0, 40.0, 4, 0),
                    (5 * MIN, 0, 0.0, 0.0, 4, 0),
                    (5 * MIN + 2_000, 0, 0.0, 0.0, 0, 0),
                    // gradual
                    (9 * MIN, 0, 40.0, 40.0, 4, 0),
                    (10 * MIN, 0, 30.0, 30.0, 4, 0),
                    (11 * MIN, 0, 0.0, 0.0, 4, 0),
                    (14 * MIN, 0, 0.0, 0.0, 3, 0),
                    (15 * MIN, 0, 0.0, 0.0, 0, 0),
                ],
            );
        }

        #[test]
        fn scale_down_delay_not_reachable() {
            let mut d = new(delay_spec(s(300), true), 0);
            run(
                "TestAutoscalerScaleDownDelayNotReachable",
                &mut d,
                &[(2_000, 0, 40.0, 40.0, 4, 0), (MIN, 0, 0.0, 0.0, 4, 0)],
            );
            d.update(delay_spec(s(300), false));
            run(
                "TestAutoscalerScaleDownDelayNotReachable",
                &mut d,
                &[(2_000, 0, 0.0, 0.0, 0, 0)],
            );
        }

        #[test]
        fn scale_down_delay_zero() {
            let mut d = new(delay_spec(Duration::ZERO, false), 0);
            run(
                "TestAutoscalerScaleDownDelayZero",
                &mut d,
                &[(0, 0, 40.0, 40.0, 4, 0), (500, 0, 20.0, 20.0, 2, 0)],
            );
        }

        #[test]
        fn scenarios() {
            let cases: Vec<(&str, DeciderSpec, u32, Vec<Step>)> = vec![
                (
                    "TestAutoscalerStableModeIncreaseWithConcurrencyDefault",
                    test_spec(10.0, 101.0),
                    1,
                    vec![
                        (0, 1, 50.0, 10.0, 5, ebc(10.0, 101.0, 10.0, 1.0)),
                        (0, 1, 100.0, 10.0, 10, ebc(10.0, 101.0, 10.0, 1.0)),
                    ],
                ),
                (
                    "TestAutoscalerUnpanicAfterSlowIncrease",
                    test_spec(1.0, 98.0),
                    1,
                    vec![
                        (0, 10, 11.0, 25.0, 25, ebc(1.0, 98.0, 25.0, 10.0)),
                        (30_000, 40, 30.0, 41.0, 41, ebc(1.0, 98.0, 41.0, 40.0)),
                        (62_000, 55, 50.0, 56.0, 50, ebc(1.0, 98.0, 56.0, 55.0)),
                    ],
                ),
                (
                    "TestAutoscalerExtendPanicWindow",
                    test_spec(1.0, 98.0),
                    1,
                    vec![
                        (0, 10, 11.0, 25.0, 25, ebc(1.0, 98.0, 25.0, 10.0)),
                        (30_000, 40, 30.0, 80.0, 80, ebc(1.0, 98.0, 80.0, 40.0)),
                    ],
                ),
                (
                    "TestAutoscalerStableModeDecrease",
                    test_spec(10.0, 98.0),
                    1,
                    vec![
                        (0, 8, 100.0, 100.0, 10, ebc(10.0, 98.0, 100.0, 8.0)),
                        (0, 8, 50.0, 50.0, 5, ebc(10.0, 98.0, 50.0, 8.0)),
                    ],
                ),
                (
                    "TestAutoscalerStableModeNoTrafficScaleToZero",
                    test_spec(10.0, 75.0),
                    1,
                    vec![
                        (0, 1, 1.0, 0.0, 1, ebc(10.0, 75.0, 0.0, 1.0)),
                        (0, 1, 0.0, 0.0, 0, ebc(10.0, 75.0, 0.0, 1.0)),
                    ],
                ),
                (
                    "TestAutoscalerActivationScale",
                    DeciderSpec {
                        activation_scale: 2,
                        ..test_spec(10.0, 75.0)
                    },
                    1,
                    vec![
                        (0, 1, 0.0, 0.0, 0, ebc(10.0, 75.0, 0.0, 1.0)),
                        (0, 1, 1.0, 0.0, 2, ebc(10.0, 75.0, 0.0, 1.0)),
                    ],
                ),
                (
                    "TestAutoscalerPanicModeExponentialTrackAndStabilize",
                    test_spec(1.0, 101.0),
                    1,
                    vec![
                        (0, 1, 6.0, 6.0, 6, ebc(1.0, 101.0, 6.0, 1.0)),
                        (0, 6, 36.0, 36.0, 36, ebc(1.0, 101.0, 36.0, 6.0)),
                        (1_000, 36, 216.0, 216.0, 216, ebc(1.0, 101.0, 216.0, 36.0)),
                        (
                            1_000,
                            216,
                            1296.0,
                            1296.0,
                            1296,
                            ebc(1.0, 101.0, 1296.0, 216.0),
                        ),
                        (
                            2_000,
                            1296,
                            1296.0,
                            1296.0,
                            1296,
                            ebc(1.0, 101.0, 1296.0, 1296.0),
                        ),
                    ],
                ),
                (
                    "TestAutoscalerPanicThenUnPanicScaleDown",
                    test_spec(10.0, 93.0),
                    1,
                    vec![
                        (0, 1, 100.0, 100.0, 10, ebc(10.0, 93.0, 100.0, 1.0)),
                        (0, 10, 100.0, 1000.0, 100, ebc(10.0, 93.0, 1000.0, 10.0)),
                        (30_000, 10, 1.0, 1.0, 100, ebc(10.0, 93.0, 1.0, 10.0)),
                        (61_000, 10, 1.0, 1.0, 1, ebc(10.0, 93.0, 1.0, 10.0)),
                    ],
                ),
                (
                    "TestAutoscalerRateLimitScaleUp",
                    test_spec(10.0, 61.0),
                    1,
                    vec![
                        (0, 1, 1000.0, 1001.0, 10, ebc(10.0, 61.0, 1001.0, 1.0)),
                        (0, 10, 1000.0, 1001.0, 100, ebc(10.0, 61.0, 1001.0, 10.0)),
                    ],
                ),
                (
                    "TestAutoscalerRateLimitScaleDown",
                    test_spec(10.0, 61.0),
                    1,
                    vec![
                        (0, 100, 1.0, 1.0, 10, ebc(10.0, 61.0, 1.0, 100.0)),
                        (0, 10, 1.0, 1.0, 1, ebc(10.0, 61.0, 1.0, 10.0)),
                    ],
                ),
                (
                    "TestAutoscalerUseOnePodAsMinimumIfEndpointsNotFound",
                    test_spec(10.0, 81.0),
                    1,
                    vec![(0, 0, 1000.0, 888.0, 10, ebc(10.0, 81.0, 888.0, 0.0))],
                ),
                // TestAutoscalerScale's table.
                (
                    "AutoscalerStableModeUnlimitedTBC",
                    test_spec(181.0, -1.0),
                    1,
                    vec![(0, 1, 21.0, 26.0, 1, -1)],
                ),
                (
                    "Autoscaler0TBC",
                    test_spec(10.0, 0.0),
                    1,
                    vec![(0, 1, 50.0, 49.0, 5, 0)],
                ),
                (
                    "AutoscalerStableModeNoChange",
                    test_spec(10.0, 100.0),
                    1,
                    vec![(0, 1, 50.0, 50.0, 5, ebc(10.0, 100.0, 50.0, 1.0))],
                ),
                (
                    "AutoscalerStableModeNoChangeAlreadyScaled",
                    test_spec(10.0, 100.0),
                    1,
                    vec![(0, 5, 50.0, 50.0, 5, ebc(10.0, 100.0, 50.0, 5.0))],
                ),
                (
                    "AutoscalerStableModeIncreaseWithSmallScaleUpRate",
                    DeciderSpec {
                        max_scale_up_rate: 1.1,
                        ..test_spec(1.0, 1982.0)
                    },
                    1,
                    vec![(0, 2, 3.0, 3.1, 3, ebc(1.0, 1982.0, 3.1, 2.0))],
                ),
                (
                    "AutoscalerStableModeDecreaseWithSmallScaleDownRate",
                    DeciderSpec {
                        max_scale_down_rate: 1.1,
                        ..test_spec(10.0, 1982.0)
                    },
                    1,
                    vec![(0, 100, 1.0, 1.0, 90, ebc(10.0, 1982.0, 1.0, 100.0))],
                ),
                (
                    "AutoscalerStableModeDecreaseNonReachable",
                    DeciderSpec {
                        max_scale_down_rate: 1.1,
                        reachable: false,
                        ..test_spec(10.0, 1982.0)
                    },
                    1,
                    vec![(0, 100, 1.0, 1.0, 1, ebc(10.0, 1982.0, 1.0, 100.0))],
                ),
                (
                    "AutoscalerPanicModeDoublePodCount",
                    test_spec(10.0, 84.0),
                    1,
                    vec![(0, 1, 50.0, 100.0, 10, ebc(10.0, 84.0, 100.0, 1.0))],
                ),
            ];
            for (name, spec, ready, steps) in cases {
                let mut d = new(spec, ready);
                run(name, &mut d, &steps);
            }
        }

        /// `prepFunc` rows: panicking since 5 s ago with 5 pods held.
        #[test]
        fn in_panic_rows() {
            for (name, stable, panic, want) in [
                ("AutoscalerPanicStableLargerThanPanic", 50.0, 30.0, 50),
                ("AutoscalerPanicStableLessThanPanic", 20.0, 30.0, 30),
            ] {
                let mut d =
                    Decider::starting(test_spec(1.0, 100.0), Duration::from_millis(T0 - 5_000), 5);
                run(
                    name,
                    &mut d,
                    &[(0, 5, stable, panic, want, ebc(1.0, 100.0, panic, 5.0))],
                );
            }
        }

        #[test]
        fn update_target() {
            let mut d = new(test_spec(10.0, 77.0), 1);
            run(
                "TestAutoscalerUpdateTarget",
                &mut d,
                &[(0, 1, 100.0, 101.0, 10, ebc(10.0, 77.0, 101.0, 1.0))],
            );
            d.update(DeciderSpec {
                activator_capacity: 21.0,
                ..test_spec(1.0, 71.0)
            });
            run(
                "TestAutoscalerUpdateTarget",
                &mut d,
                &[(0, 10, 100.0, 101.0, 100, ebc(1.0, 71.0, 101.0, 10.0))],
            );
        }

        /// `TestStartInPanicMode`: created with 0 or 1 ready pods it is calm and holds that
        /// many; with 2 it panics holding 2.
        #[test]
        fn start_in_panic_mode() {
            for (ready, panicking) in [(0, false), (1, false), (2, true)] {
                let d = new(test_spec(100.0, 11.0), ready);
                assert_eq!(d.state().panic_time.is_some(), panicking, "{ready}");
                assert_eq!(d.state().max_panic_pods, ready as i32, "{ready}");
            }
        }
    }
}
