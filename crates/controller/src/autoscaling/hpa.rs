//! The HPA class: what Knative's `pkg/reconciler/autoscaling/hpa/hpa.go` and Kubernetes'
//! HPA controller do together, for a revision annotated
//! `autoscaling.knative.dev/class: hpa.autoscaling.knative.dev`.
//!
//! Knative writes a HorizontalPodAutoscaler (`hpa/resources/hpa.go` `MakeHPA`) and lets
//! the cluster's HPA controller scale the Deployment on the pods' CPU or memory, as
//! metrics-server reports them. wisp has neither, so this reconciles in their place, every
//! `wisp-hpa-sync-period` (Kubernetes' `--horizontal-pod-autoscaler-sync-period`, 15 s):
//!
//! 1. reads each replica's CPU time and memory from the platform ([`Platform::usage`]);
//!    a replica's CPU usage is its CPU time over the last sync period (metrics-server's
//!    rate over its scrape window), its memory the working set now;
//! 2. sorts the replicas as `groupPods` does ([`pod_metrics`]) and runs the replica
//!    calculator and the controller's normalization ([`wisp_autoscaler::hpa`]);
//! 3. publishes the count (the activator stays out of the path, SKS mode Serve, as
//!    Knative's HPA class reconciles its SKS) and writes the PA status as `hpa.go` does:
//!    `Active` always, `SKSReady`, `ScaleTargetInitialized` once the replicas reached
//!    max(min-scale, initial-scale), `desiredScale` = the HPA's `desiredReplicas`,
//!    `actualScale` = its `currentReplicas`.
//!
//! [`Platform::usage`]: wisp_runtime::Platform::usage

use std::{collections::HashMap, time::Duration, time::SystemTime};

use wisp_api::serving::PodSpec;
use wisp_autoscaler::hpa::{
    Hpa, HpaError, HpaMetric, HpaSpec, PodMetric, PodState, Proposal, replicas_for,
};
use wisp_runtime::{ReplicaPhase, ReplicaStatus, ReplicaUsage};

/// A replica's CPU time at the last sync.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuSample {
    pub at: Duration,
    pub cpu: Duration,
}

/// One revision's HPA: the controller's memory of it, and what it last decided.
#[derive(Clone, Debug)]
pub struct HpaState {
    /// The revision's uid: a revision re-created under the same name starts afresh.
    pub uid: String,
    hpa: Hpa,
    /// The scale target's `spec.replicas`.
    pub replicas: u32,
    /// The HPA's `status.desiredReplicas` (what the PA's `desiredScale` shows).
    pub desired: i32,
    /// The metric's value at the last sync that read it (CPU: percent of the requests;
    /// memory: milli-bytes per pod).
    pub current_metric: Option<i64>,
    /// Why the last sync could not compute a count.
    pub error: Option<HpaError>,
    last_sync: Option<Duration>,
    samples: HashMap<String, CpuSample>,
}

impl HpaState {
    /// A new revision's HPA, starting at `initial` replicas (its Deployment's).
    pub fn new(uid: &str, initial: u32) -> Self {
        HpaState {
            uid: uid.to_owned(),
            hpa: Hpa::new(),
            replicas: initial,
            desired: i32::try_from(initial).unwrap_or(i32::MAX),
            current_metric: None,
            error: None,
            last_sync: None,
            samples: HashMap::new(),
        }
    }

    /// Time until the next sync is due at `now` (zero: due now).
    pub fn until_sync(&self, now: Duration, spec: &HpaSpec) -> Duration {
        self.last_sync.map_or(Duration::ZERO, |t| {
            (t + spec.sync_period).saturating_sub(now)
        })
    }

    /// One sync at `now`: measures, computes and applies the new count. Returns whether
    /// the last error changed (to log it once).
    pub fn sync(
        &mut self,
        now: Duration,
        spec: &HpaSpec,
        pod: &PodSpec,
        replicas: &[ReplicaStatus],
        usage: &[ReplicaUsage],
    ) -> bool {
        self.last_sync = Some(now);
        let (pods, samples) = pod_metrics(&spec.metric, now, replicas, usage, &self.samples);
        self.samples = samples;
        let current = i32::try_from(self.replicas).unwrap_or(i32::MAX);
        let proposal: Result<Proposal, HpaError> =
            replicas_for(&spec.target, current, &pods, pod_cpu_request_milli(pod));
        let d = self.hpa.reconcile(now, spec, current, proposal);
        self.desired = d.desired;
        // The HPA's floor is 1: a desired count below it cannot come out of the bounds.
        self.replicas = u32::try_from(d.desired.max(1)).unwrap_or(1);
        if d.current_metric.is_some() {
            self.current_metric = d.current_metric;
        }
        let changed = self.error != d.error;
        self.error = d.error;
        changed
    }
}

/// The pod's CPU request in millicores, summed over its containers as
/// `calculatePodRequests` does; None when a container has none (the HPA cannot compute a
/// utilization then). wisp has no queue-proxy container (Knative's adds its own 25m).
pub fn pod_cpu_request_milli(pod: &PodSpec) -> Option<i64> {
    pod.containers.iter().try_fold(0i64, |sum, c| {
        let q = c.resources.as_ref()?.requests.get("cpu")?;
        Some(sum + q.scaled_value(3)?)
    })
}

fn since_epoch(t: SystemTime) -> Duration {
    t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default()
}

/// The replicas as `groupPods` sees them, with their metric; and the CPU samples to keep
/// for the next sync. CPU usage is (CPU time now − at the last sync) / the time between, in
/// millicores; a replica seen for the first time has none yet (missing). A ready replica
/// that became ready after the last sample is ignored for CPU, as Kubernetes ignores a
/// sample whose window began before the pod's last readiness change.
pub fn pod_metrics(
    metric: &HpaMetric,
    now: Duration,
    replicas: &[ReplicaStatus],
    usage: &[ReplicaUsage],
    prev: &HashMap<String, CpuSample>,
) -> (Vec<PodMetric>, HashMap<String, CpuSample>) {
    let samples: HashMap<String, CpuSample> = usage
        .iter()
        .map(|u| {
            (
                u.name.clone(),
                CpuSample {
                    at: now,
                    cpu: u.cpu,
                },
            )
        })
        .collect();
    let pods = replicas
        .iter()
        .filter(|r| r.phase != ReplicaPhase::Terminating)
        .map(|r| {
            let mut state = match r.phase {
                ReplicaPhase::Starting => PodState::Pending,
                ReplicaPhase::Ready => PodState::Ready,
                _ => PodState::Unready,
            };
            let u = usage.iter().find(|u| u.name == r.name);
            let value = match metric {
                HpaMetric::Memory => u.map(|u| {
                    i64::try_from(u.memory)
                        .unwrap_or(i64::MAX)
                        .saturating_mul(1000)
                }),
                _ => {
                    let p = prev.get(&r.name);
                    if let (PodState::Ready, Some(p), Some(changed)) =
                        (state, p, r.times.ready_changed)
                        && since_epoch(changed) > p.at
                    {
                        state = PodState::Unready;
                    }
                    match (u, p) {
                        (Some(u), Some(p)) if now > p.at && u.cpu >= p.cpu => {
                            let used = (u.cpu - p.cpu).as_nanos();
                            let over = (now - p.at).as_nanos();
                            Some(i64::try_from(used * 1000 / over).unwrap_or(i64::MAX))
                        }
                        _ => None,
                    }
                }
            };
            PodMetric { state, value }
        })
        .collect();
    (pods, samples)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;
    use wisp_api::quantity::Quantity;
    use wisp_api::serving::{Container, ResourceRequirements};
    use wisp_runtime::ReplicaTimes;

    fn replica(name: &str, phase: ReplicaPhase, ready_at: Option<u64>) -> ReplicaStatus {
        ReplicaStatus {
            name: name.into(),
            address: SocketAddr::from(([127, 0, 0, 1], 1)),
            phase,
            restarts: 0,
            init_done: 0,
            unready: Vec::new(),
            last_exit: None,
            failure: None,
            times: ReplicaTimes {
                ready_changed: ready_at.map(|s| SystemTime::UNIX_EPOCH + Duration::from_secs(s)),
                ..Default::default()
            },
        }
    }

    fn used(name: &str, cpu_ms: u64, mem: u64) -> ReplicaUsage {
        ReplicaUsage {
            name: name.into(),
            cpu: Duration::from_millis(cpu_ms),
            memory: mem,
        }
    }

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn cpu_is_a_rate_over_the_sync_period() {
        let replicas = [
            replica("a", ReplicaPhase::Ready, Some(1)),
            replica("b", ReplicaPhase::Ready, Some(1)),
            replica("c", ReplicaPhase::Starting, None),
            replica("d", ReplicaPhase::NotReady, Some(1)),
            replica("e", ReplicaPhase::Terminating, Some(1)),
            replica("f", ReplicaPhase::Ready, Some(15)),
        ];
        let prev: HashMap<String, CpuSample> = ["a", "d", "f"]
            .iter()
            .map(|n| {
                (
                    n.to_string(),
                    CpuSample {
                        at: secs(10),
                        cpu: Duration::from_millis(1000),
                    },
                )
            })
            .collect();
        // 5 s later: a used 2.5 s of CPU (500 m), b is new, f became ready in between.
        let usage = [
            used("a", 3500, 1),
            used("b", 100, 2),
            used("d", 1500, 3),
            used("f", 2000, 4),
        ];
        let (pods, samples) = pod_metrics(
            &HpaMetric::Cpu,
            secs(15) + Duration::from_millis(1),
            &replicas,
            &usage,
            &prev,
        );
        let want = [
            (PodState::Ready, Some(499)),
            (PodState::Ready, None),
            (PodState::Pending, None),
            (PodState::Unready, Some(99)),
            (PodState::Unready, Some(199)),
        ];
        let got: Vec<_> = pods.iter().map(|p| (p.state, p.value)).collect();
        assert_eq!(got, want);
        assert_eq!(samples.len(), 4);
        assert_eq!(samples["b"].cpu, Duration::from_millis(100));

        let (pods, _) = pod_metrics(&HpaMetric::Memory, secs(15), &replicas, &usage, &prev);
        let got: Vec<_> = pods.iter().map(|p| p.value).collect();
        assert_eq!(got, [Some(1000), Some(2000), None, Some(3000), Some(4000)]);
    }

    fn pod(requests: &[Option<&str>]) -> PodSpec {
        PodSpec {
            containers: requests
                .iter()
                .map(|r| Container {
                    resources: r.map(|q| ResourceRequirements {
                        requests: [("cpu".to_string(), Quantity::parse(q).unwrap())].into(),
                        ..Default::default()
                    }),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn cpu_request_sums_every_container() {
        assert_eq!(pod_cpu_request_milli(&pod(&[Some("100m")])), Some(100));
        assert_eq!(
            pod_cpu_request_milli(&pod(&[Some("1"), Some("250m")])),
            Some(1250)
        );
        assert_eq!(pod_cpu_request_milli(&pod(&[Some("100m"), None])), None);
    }

    #[test]
    fn sync_scales_on_cpu_and_holds_without_metrics() {
        let cfg = wisp_api::config::AutoscalerConfig::default();
        let ann = [
            (
                "autoscaling.knative.dev/class",
                "hpa.autoscaling.knative.dev",
            ),
            ("autoscaling.knative.dev/metric", "cpu"),
            ("autoscaling.knative.dev/target", "10"),
            ("autoscaling.knative.dev/max-scale", "3"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let spec = HpaSpec::resolve(&ann, true, &cfg);
        let p = pod(&[Some("100m")]);
        let mut st = HpaState::new("u", 1);
        let reps = [replica("a", ReplicaPhase::Ready, Some(1))];
        // First sync: no rate yet ⇒ no metrics, the count holds.
        st.sync(secs(100), &spec, &p, &reps, &[used("a", 0, 0)]);
        assert_eq!(
            (st.replicas, st.error.clone()),
            (1, Some(HpaError::NoMetrics))
        );
        assert_eq!(st.until_sync(secs(105), &spec), secs(10));
        // 15 s at a whole CPU: 1000 % of a 100m request against 10 % ⇒ max-scale.
        st.sync(secs(115), &spec, &p, &reps, &[used("a", 15_000, 0)]);
        assert_eq!((st.replicas, st.desired, st.error.clone()), (3, 3, None));
        assert_eq!(st.current_metric, Some(1000));
    }
}
