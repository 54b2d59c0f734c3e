use super::*;

fn ann(pairs: &[(&str, &str)]) -> Annotations {
    pairs
        .iter()
        .map(|(k, v)| (format!("autoscaling.knative.dev/{k}"), v.to_string()))
        .collect()
}

fn ready(v: i64) -> PodMetric {
    PodMetric {
        state: PodState::Ready,
        value: Some(v),
    }
}

const MISSING: PodMetric = PodMetric {
    state: PodState::Ready,
    value: None,
};
const PENDING: PodMetric = PodMetric {
    state: PodState::Pending,
    value: None,
};

fn unready(v: i64) -> PodMetric {
    PodMetric {
        state: PodState::Unready,
        value: Some(v),
    }
}

#[test]
fn resolve_mirrors_make_hpa() {
    let cfg = AutoscalerConfig::default();
    // (annotations, reachable, metric, target, min, max, up, down)
    type Case<'a> = (
        &'a [(&'a str, &'a str)],
        bool,
        HpaMetric,
        HpaTarget,
        i32,
        i32,
        u64,
        u64,
    );
    let cases: &[Case] = &[
        (
            &[("metric", "cpu"), ("target", "49.2")],
            true,
            HpaMetric::Cpu,
            HpaTarget::CpuUtilization(50),
            1,
            i32::MAX,
            0,
            300,
        ),
        (
            &[("metric", "memory"), ("target", "75.9")],
            true,
            HpaMetric::Memory,
            HpaTarget::MemoryAverageMilli(75 * 1024 * 1024 * 1000),
            1,
            i32::MAX,
            0,
            300,
        ),
        (
            &[("min-scale", "2"), ("max-scale", "5"), ("window", "10s")],
            true,
            HpaMetric::Cpu,
            HpaTarget::CpuUtilization(DEFAULT_CPU_UTILIZATION),
            2,
            5,
            10,
            10,
        ),
        // Unreachable: min-scale does not hold, but the HPA's floor is 1.
        (
            &[("min-scale", "3")],
            false,
            HpaMetric::Cpu,
            HpaTarget::CpuUtilization(80),
            1,
            i32::MAX,
            0,
            300,
        ),
        (
            &[("metric", "memory")],
            true,
            HpaMetric::Memory,
            HpaTarget::CpuUtilization(80),
            1,
            i32::MAX,
            0,
            300,
        ),
        (
            &[("metric", "rps-custom"), ("target", "5")],
            true,
            HpaMetric::Custom("rps-custom".into()),
            HpaTarget::Custom("rps-custom".into()),
            1,
            i32::MAX,
            0,
            300,
        ),
    ];
    for (a, reachable, metric, target, min, max, up, down) in cases {
        let s = HpaSpec::resolve(&ann(a), *reachable, &cfg);
        assert_eq!(&s.metric, metric, "{a:?}");
        assert_eq!(&s.target, target, "{a:?}");
        assert_eq!((s.min_replicas, s.max_replicas), (*min, *max), "{a:?}");
        assert_eq!(
            (s.scale_up_window, s.scale_down_window),
            (Duration::from_secs(*up), Duration::from_secs(*down)),
            "{a:?}"
        );
        assert_eq!(s.sync_period, Duration::from_secs(15));
    }
}

#[test]
fn replica_calculator_table() {
    let cpu50 = HpaTarget::CpuUtilization(50);
    let mem = HpaTarget::MemoryAverageMilli(100_000);
    let custom = HpaTarget::Custom("x".into());
    // (name, target, current, pods, request, expected)
    type Case<'a> = (
        &'a str,
        &'a HpaTarget,
        i32,
        Vec<PodMetric>,
        Option<i64>,
        Result<Proposal, HpaError>,
    );
    let p = |replicas, current| Ok(Proposal { replicas, current });
    let cases: Vec<Case> = vec![
        // Request 100m, target 50 %: 3 pods at 200m = 200 % ⇒ ⌈3 × 4⌉ = 12.
        (
            "scale up",
            &cpu50,
            3,
            vec![ready(200), ready(200), ready(200)],
            Some(100),
            p(12, 200),
        ),
        (
            "within tolerance (+8 %)",
            &cpu50,
            2,
            vec![ready(54), ready(54)],
            Some(100),
            p(2, 54),
        ),
        (
            "just beyond tolerance ⇒ rounds up",
            &cpu50,
            2,
            vec![ready(56), ready(56)],
            Some(100),
            p(3, 56),
        ),
        (
            "within tolerance (−10 %)",
            &cpu50,
            4,
            vec![ready(45); 4],
            Some(100),
            p(4, 45),
        ),
        (
            "scale down",
            &cpu50,
            4,
            vec![ready(10); 4],
            Some(100),
            p(1, 10),
        ),
        (
            "idle ⇒ 0 (the bounds keep 1)",
            &cpu50,
            2,
            vec![ready(0); 2],
            Some(100),
            p(0, 0),
        ),
        (
            "integer percent truncates",
            &cpu50,
            1,
            vec![ready(54)],
            Some(99),
            p(1, 54),
        ),
        (
            "no CPU request",
            &cpu50,
            1,
            vec![ready(100)],
            None,
            Err(HpaError::MissingCpuRequest),
        ),
        (
            "no pods",
            &cpu50,
            1,
            vec![],
            Some(100),
            Err(HpaError::NoPods),
        ),
        (
            "no metrics",
            &cpu50,
            2,
            vec![MISSING, PENDING],
            Some(100),
            Err(HpaError::NoMetrics),
        ),
        // Missing on a scale-up count as 0: (200 + 0) / 2 pods = 100 % ⇒ ⌈2 × 2⌉ = 4.
        (
            "missing on scale up count 0",
            &cpu50,
            2,
            vec![ready(200), MISSING],
            Some(100),
            p(4, 200),
        ),
        // Missing on a scale-down count at 100 % of the request: (10 + 100) / 2 = 55 %,
        // which turns the direction ⇒ stay.
        (
            "missing on scale down turns direction ⇒ stay",
            &cpu50,
            2,
            vec![ready(10), MISSING],
            Some(100),
            p(2, 10),
        ),
        // (0 + 0 + 100 + 100) / 4 = 50 % is within tolerance ⇒ stay.
        (
            "missing on scale down within tolerance",
            &cpu50,
            4,
            vec![ready(0), ready(0), MISSING, MISSING],
            Some(100),
            p(4, 0),
        ),
        // Ignored (unready) pods count 0 on a scale-up: (300 + 0) / 2 = 150 % ⇒ 6.
        (
            "unready cpu pods count 0 on scale up",
            &cpu50,
            2,
            vec![ready(300), unready(300)],
            Some(100),
            p(6, 300),
        ),
        // ...and are left out on a scale-down.
        (
            "unready cpu pods left out on scale down",
            &cpu50,
            2,
            vec![ready(10), unready(300)],
            Some(100),
            p(1, 10),
        ),
        (
            "pending pods count 0 on scale up",
            &cpu50,
            2,
            vec![ready(100), PENDING],
            Some(100),
            p(2, 100),
        ),
        // Memory: average value, unready pods count.
        (
            "memory average value",
            &mem,
            2,
            vec![ready(300_000), unready(100_000)],
            None,
            p(4, 200_000),
        ),
        (
            "memory within tolerance",
            &mem,
            2,
            vec![ready(105_000), ready(95_000)],
            None,
            p(2, 100_000),
        ),
        (
            "memory missing on scale down at target",
            &mem,
            3,
            vec![ready(10_000), ready(10_000), MISSING],
            None,
            p(2, 10_000),
        ),
        (
            "custom metric",
            &custom,
            1,
            vec![ready(1)],
            None,
            Err(HpaError::Custom("x".into())),
        ),
    ];
    for (name, target, current, pods, request, want) in cases {
        assert_eq!(
            replicas_for(target, current, &pods, request),
            want,
            "{name}"
        );
    }
}

fn spec(min: i32, max: i32, up: u64, down: u64) -> HpaSpec {
    HpaSpec {
        metric: HpaMetric::Cpu,
        target: HpaTarget::CpuUtilization(50),
        min_replicas: min,
        max_replicas: max,
        scale_up_window: Duration::from_secs(up),
        scale_down_window: Duration::from_secs(down),
        sync_period: Duration::from_secs(15),
    }
}

fn prop(replicas: i32) -> Result<Proposal, HpaError> {
    Ok(Proposal {
        replicas,
        current: 0,
    })
}

/// Runs (second, proposal) steps, applying each decision as the new current count;
/// returns the counts decided.
fn run(spec: &HpaSpec, start: i32, steps: &[(u64, i32)]) -> Vec<i32> {
    let mut hpa = Hpa::new();
    let mut current = start;
    steps
        .iter()
        .map(|&(t, p)| {
            current = hpa
                .reconcile(Duration::from_secs(1000 + t), spec, current, prop(p))
                .desired;
            current
        })
        .collect()
}

#[test]
fn bounds() {
    let s = spec(2, 5, 0, 0);
    assert_eq!(run(&s, 3, &[(0, 9)]), [5], "max");
    assert_eq!(run(&s, 3, &[(0, 0)]), [2], "min");
    assert_eq!(
        run(&s, 7, &[(0, 7)]),
        [5],
        "above max: max, whatever the metric"
    );
    assert_eq!(run(&s, 1, &[(0, 1)]), [2], "below min");
    // Never zero: the floor is 1 even when the metric says 0.
    assert_eq!(run(&spec(1, 3, 0, 0), 2, &[(0, 0)]), [1]);
}

#[test]
fn scale_up_is_immediate_and_rate_limited() {
    let s = spec(1, 100, 0, 300);
    // From 1: max(1 + 4, 2 × 1) = 5 in one period; 15 s later from 5: max(9, 10) = 10.
    assert_eq!(run(&s, 1, &[(0, 50), (15, 50), (30, 50)]), [5, 10, 20]);
    // Within the same period the limit counts the pods already added.
    assert_eq!(run(&s, 1, &[(0, 50), (5, 50)]), [5, 5]);
}

#[test]
fn scale_down_stabilization_window() {
    let s = spec(1, 10, 0, 300);
    // Up to 6, then the metric says 1: held at the highest recommendation of the last
    // 300 s, then down once the 6 is older than that.
    let got = run(
        &s,
        1,
        &[
            (0, 4),
            (15, 6),
            (30, 1),
            (200, 2),
            (314, 1),
            (316, 1),
            (500, 1),
        ],
    );
    assert_eq!(got, [4, 6, 6, 6, 6, 2, 1]);
}

#[test]
fn window_annotation_stabilizes_both_ways() {
    let s = spec(1, 10, 6, 6);
    // Scale-up waits until no recommendation of the last 6 s is lower.
    let got = run(&s, 1, &[(0, 3), (2, 3), (4, 3), (7, 3), (9, 1), (14, 1)]);
    assert_eq!(got, [1, 1, 1, 3, 3, 1]);
}

#[test]
fn missing_metrics_keep_the_count() {
    let s = spec(1, 10, 0, 300);
    let mut hpa = Hpa::new();
    let d = hpa.reconcile(Duration::from_secs(5), &s, 3, Err(HpaError::NoMetrics));
    assert_eq!(d.desired, 3);
    assert_eq!(d.error, Some(HpaError::NoMetrics));
    assert_eq!(d.current_metric, None);
    let d = hpa.reconcile(
        Duration::from_secs(20),
        &s,
        3,
        Ok(Proposal {
            replicas: 4,
            current: 90,
        }),
    );
    assert_eq!((d.desired, d.current_metric, d.error), (4, Some(90), None));
}
