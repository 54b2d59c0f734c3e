//! The task that owns one replica, whatever runs it (a [`Launcher`](super::launch::Launcher)):
//! prepares its sandbox, starts it, reads its output, probes it,
//! restarts it after a crash (with back-off) or a failed liveness probe, and stops it.
//!
//! Everything about a replica's process happens in this one task, so there is no shared
//! handle to race on: the rest of the platform talks to it only through the stop signal,
//! and it reports back by updating the replica's status in the platform's map (short,
//! synchronous critical sections; never across an `.await`).

use std::{
    collections::VecDeque,
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::{Duration, SystemTime},
};

use nix::sys::signal::Signal;
use tokio::{
    io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, BufReader},
    sync::watch,
    task::JoinHandle,
    time::{Instant, sleep, timeout},
};

use super::{
    Inner,
    backoff::Backoff,
    launch::{Exit, Launched, ReplicaInfo, Running, Sandbox},
    lock, probe,
};
use crate::{ExitInfo, LogLine, ReplicaPhase, ReplicaSpec, RevisionKey};

/// Lines longer than this are split, so that a process writing without newlines cannot
/// grow a buffer without bound.
const MAX_LINE: u64 = 64 * 1024;

/// How long to wait for the rest of a process's output after it exited. Output pipes close
/// when the whole group is gone; a process that escaped the group (`setsid`) could keep
/// them open forever.
const DRAIN_OUTPUT: Duration = Duration::from_secs(1);

/// One replica, as its supervising task knows it.
pub(crate) struct Replica {
    pub inner: Arc<Inner>,
    pub key: RevisionKey,
    pub id: u64,
    pub name: String,
    pub spec: Arc<ReplicaSpec>,
    pub address: SocketAddr,
}

/// How one run of the process ended.
enum End {
    /// Stopped on request: the replica is going away.
    Stopped,
    /// Exited on its own, or was killed for failing a probe: restart after back-off.
    Exited(ExitInfo),
}

/// Resolves when the replica is asked to stop (or its entry is gone).
async fn stop_requested(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

impl Replica {
    pub async fn supervise(self, mut stop: watch::Receiver<bool>, mut nudge: watch::Receiver<u64>) {
        // Replicas of an earlier run are stopped before any of this run start.
        let mut cleaned_up = self.inner.cleaned_up.clone();
        tokio::select! {
            _ = cleaned_up.wait_for(|d| *d) => {}
            _ = stop_requested(&mut stop) => {}
        }
        let probes = match probe::plan(&self.spec.pod) {
            Ok(probes) => probes,
            // `scale` starts no replica of a spec without a serving container, or whose
            // probes cannot run (its failure).
            Err(_) => return self.inner.finish(&self.key, self.id, &self.name).await,
        };
        let opts = &self.inner.options;
        let mut backoff = Backoff::new(opts.backoff_initial, opts.backoff_max, opts.backoff_reset);
        let mut sandbox: Option<Box<dyn Sandbox>> = None;
        // The sandbox's init containers that ran to completion: each runs once per
        // sandbox, in order, before its app containers first start.
        let mut inits_done = 0usize;
        // The next run (of an init container or of the app) is a restart.
        let mut restarted = false;
        // Sandbox preparations that failed in a row.
        let mut failed_preparations = 0u32;
        while !*stop.borrow() {
            let started = Instant::now();
            let end = match &sandbox {
                Some(sandbox) if inits_done < sandbox.init_containers().len() => {
                    let restart = std::mem::take(&mut restarted);
                    match self
                        .run_init(&**sandbox, inits_done, restart, &mut stop)
                        .await
                    {
                        Some(end) => end,
                        None => {
                            inits_done += 1;
                            let done = u32::try_from(inits_done).unwrap_or(u32::MAX);
                            self.update(|s| s.init_done = done);
                            continue;
                        }
                    }
                }
                Some(sandbox) => {
                    let restart = std::mem::take(&mut restarted);
                    self.run_once(&**sandbox, &probes, restart, &mut stop, &mut nudge)
                        .await
                }
                None => match self.inner.launcher.sandbox(self.info()).await {
                    Ok(created) => {
                        failed_preparations = 0;
                        self.inner.set_waiting(&self.key, None);
                        inits_done = 0;
                        self.update(|s| {
                            s.failure = None;
                            s.init_done = 0;
                        });
                        sandbox = Some(created);
                        continue;
                    }
                    Err(failure) => {
                        self.inner.set_waiting(&self.key, None);
                        tracing::warn!(
                            revision = %self.key,
                            replica = %self.name,
                            "cannot prepare the replica: {}: {}",
                            failure.reason,
                            failure.message
                        );
                        let failure =
                            crate::podconfig::backing_off(failure, failed_preparations > 0);
                        failed_preparations = failed_preparations.saturating_add(1);
                        self.update(|s| s.failure = Some(failure));
                        let delay = backoff.next_delay(started.elapsed());
                        // A reconcile of the revision (a Secret it references appeared,
                        // say) retries at once instead of after the back-off.
                        nudge.mark_unchanged();
                        tokio::select! {
                            _ = sleep(delay) => {}
                            _ = nudge.changed() => {}
                            _ = stop_requested(&mut stop) => break,
                        }
                        continue;
                    }
                },
            };
            match end {
                End::Stopped => break,
                End::Exited(exit) => {
                    let delay = backoff.next_delay(started.elapsed());
                    tracing::info!(
                        revision = %self.key,
                        replica = %self.name,
                        init_container = ?exit.init_container,
                        code = ?exit.code,
                        signal = ?exit.signal,
                        reason = ?exit.reason,
                        "replica exited; restarting in {delay:?}"
                    );
                    self.update(|s| {
                        s.last_exit = Some(exit);
                        s.phase = ReplicaPhase::BackOff;
                    });
                    tokio::select! {
                        _ = sleep(delay) => {}
                        _ = stop_requested(&mut stop) => break,
                    }
                    restarted = true;
                }
            }
        }
        if let Some(sandbox) = sandbox {
            sandbox.remove().await;
        }
        self.inner.finish(&self.key, self.id, &self.name).await;
    }

    fn info(&self) -> ReplicaInfo {
        let (inner, key) = (self.inner.clone(), self.key.clone());
        ReplicaInfo {
            key: self.key.clone(),
            name: self.name.clone(),
            spec: self.spec.clone(),
            address: self.address,
            objects: lock(&self.inner.objects).clone(),
            waiting: Arc::new(move |message| inner.set_waiting(&key, Some(message))),
        }
    }

    async fn run_once(
        &self,
        sandbox: &dyn Sandbox,
        probes: &[(String, probe::Probes)],
        restarted: bool,
        stop: &mut watch::Receiver<bool>,
        nudge: &mut watch::Receiver<u64>,
    ) -> End {
        let mut containers = Vec::with_capacity(probes.len());
        for (i, (name, probes)) in probes.iter().enumerate() {
            let Some(target) = sandbox.target(name) else {
                return End::Exited(start_error(format!(
                    "no probe target for container {name:?}"
                )));
            };
            containers.push(probe::ContainerProbes {
                name: name.clone(),
                sidecar: i > 0,
                probes: probes.clone(),
                target: target.clone(),
            });
        }
        let launched = sandbox.start().await;
        let started_at = SystemTime::now();
        let mut run_no = 0;
        self.update(|s| {
            s.phase = ReplicaPhase::Starting;
            if restarted {
                s.restarts += 1;
            }
            s.times.started = Some(started_at);
            // Not ready until each probed container says so.
            s.unready = containers.iter().map(|c| c.name.clone()).collect();
            run_no = s.restarts;
        });
        let Launched { outputs, mut run } = match launched {
            Ok(launched) => launched,
            Err(message) => return End::Exited(start_error(message)),
        };
        let meters = run.meters();
        self.inner
            .update_replica(&self.key, self.id, |r| r.meters = meters);
        let tail = Arc::new(Mutex::new(VecDeque::new()));
        let readers: Vec<JoinHandle<()>> = outputs
            .into_iter()
            .map(|(stream, pipe)| self.read_output(stream, pipe, tail.clone(), run_no))
            .collect();

        // Ready once no probed container is unready; NotReady when one stops being ready
        // after that (before, the replica stays Starting).
        let report = |unready: Vec<String>| {
            self.update(|s| {
                let phase = if unready.is_empty() {
                    ReplicaPhase::Ready
                } else if s.phase == ReplicaPhase::Ready {
                    ReplicaPhase::NotReady
                } else {
                    s.phase
                };
                apply_phase(s, phase);
                s.unready = unready;
            })
        };
        enum Why {
            Exited(std::io::Result<Exit>),
            Stop,
            Restart(String),
        }
        let probing = probe::run(&containers, &self.inner.options, &report);
        tokio::pin!(probing);
        nudge.mark_unchanged();
        let why = loop {
            tokio::select! {
                status = run.wait() => break Why::Exited(status),
                _ = stop_requested(stop) => break Why::Stop,
                reason = &mut probing => break Why::Restart(reason),
                Ok(()) = nudge.changed() => sandbox.refresh().await,
            }
        };
        let stopped = matches!(why, Why::Stop);
        let status = match why {
            Why::Exited(status) => status,
            Why::Stop => self.terminate(&mut *run).await,
            Why::Restart(reason) => {
                tracing::warn!(revision = %self.key, replica = %self.name, "{reason}; restarting");
                self.set_phase(ReplicaPhase::Terminating);
                self.terminate(&mut *run).await
            }
        };
        self.inner
            .update_replica(&self.key, self.id, |r| r.meters.clear());
        let reason = end_run(run, readers).await;
        if stopped {
            return End::Stopped;
        }
        End::Exited(exit_info(status, reason, &tail, started_at))
    }

    /// Runs init container `i` of the sandbox to completion. None: it exited with code 0;
    /// else how the replica's start ended (stopped, or the init container failed: the
    /// replica backs off and runs it again, as the kubelet restarts a failed init
    /// container of a pod whose `restartPolicy` is `Always`).
    async fn run_init(
        &self,
        sandbox: &dyn Sandbox,
        i: usize,
        restarted: bool,
        stop: &mut watch::Receiver<bool>,
    ) -> Option<End> {
        let name = sandbox.init_containers()[i].clone();
        let launched = sandbox.start_init(i).await;
        let started_at = SystemTime::now();
        let mut run_no = 0;
        self.update(|s| {
            s.phase = ReplicaPhase::Starting;
            if restarted {
                s.restarts += 1;
            }
            run_no = s.restarts;
        });
        let Launched { outputs, mut run } = match launched {
            Ok(launched) => launched,
            Err(message) => {
                return Some(End::Exited(ExitInfo {
                    init_container: Some(name),
                    ..start_error(message)
                }));
            }
        };
        let tail = Arc::new(Mutex::new(VecDeque::new()));
        let readers: Vec<JoinHandle<()>> = outputs
            .into_iter()
            .map(|(stream, pipe)| self.read_output(stream, pipe, tail.clone(), run_no))
            .collect();
        let exited = tokio::select! {
            status = run.wait() => Some(status),
            _ = stop_requested(stop) => None,
        };
        let stopped = exited.is_none();
        let status = match exited {
            Some(status) => status,
            None => self.terminate(&mut *run).await,
        };
        let reason = end_run(run, readers).await;
        if stopped {
            return Some(End::Stopped);
        }
        let exit = ExitInfo {
            init_container: Some(name.clone()),
            ..exit_info(status, reason, &tail, started_at)
        };
        if exit.code == Some(0) && exit.signal.is_none() {
            tracing::debug!(revision = %self.key, replica = %self.name, "init container {name} completed");
            return None;
        }
        Some(End::Exited(exit))
    }

    /// SIGTERM; SIGKILL once the grace period is over.
    async fn terminate(&self, run: &mut dyn Running) -> std::io::Result<Exit> {
        run.signal(Signal::SIGTERM);
        match timeout(self.spec.grace_period, run.wait()).await {
            Ok(status) => status,
            Err(_) => {
                tracing::info!(
                    revision = %self.key,
                    replica = %self.name,
                    "still running {:?} after SIGTERM: sending SIGKILL",
                    self.spec.grace_period
                );
                run.signal(Signal::SIGKILL);
                run.wait().await
            }
        }
    }

    fn read_output(
        &self,
        stream: &'static str,
        pipe: Box<dyn AsyncRead + Unpin + Send>,
        tail: Arc<Mutex<VecDeque<String>>>,
        run: u32,
    ) -> JoinHandle<()> {
        let (inner, key, replica) = (self.inner.clone(), self.key.clone(), self.name.clone());
        let keep = inner.options.exit_message_lines;
        tokio::spawn(async move {
            let mut reader = BufReader::new(pipe);
            let mut buf = Vec::new();
            loop {
                buf.clear();
                match (&mut reader)
                    .take(MAX_LINE)
                    .read_until(b'\n', &mut buf)
                    .await
                {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
                while buf.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
                    buf.pop();
                }
                let line = String::from_utf8_lossy(&buf).into_owned();
                tracing::debug!(revision = %key, replica, stream, "{line}");
                {
                    let mut tail = lock(&tail);
                    if tail.len() >= keep {
                        tail.pop_front();
                    }
                    if keep > 0 {
                        tail.push_back(line.clone());
                    }
                }
                inner.push_log(
                    &key,
                    LogLine {
                        replica: replica.clone(),
                        stream,
                        line,
                        time: SystemTime::now(),
                        run,
                        seq: 0,
                    },
                );
            }
        })
    }

    fn update(&self, f: impl FnOnce(&mut crate::ReplicaStatus)) {
        self.inner.update_replica(&self.key, self.id, |r| {
            // A replica being stopped stays Terminating whatever its process does.
            let phase = r.status.phase;
            f(&mut r.status);
            if r.stopping {
                r.status.phase = phase;
            }
        });
    }

    fn set_phase(&self, phase: ReplicaPhase) {
        self.update(|s| apply_phase(s, phase));
    }
}

/// Moves the replica to `phase`, noting when it became ready or unready.
fn apply_phase(s: &mut crate::ReplicaStatus, phase: ReplicaPhase) {
    if (s.phase == ReplicaPhase::Ready) != (phase == ReplicaPhase::Ready) {
        s.times.ready_changed = Some(SystemTime::now());
    }
    s.phase = phase;
}

/// Removes what is left of an ended run, then waits (briefly) for the rest of its output.
/// Returns the reason the kernel gave for the exit, if any.
async fn end_run(run: Box<dyn Running>, readers: Vec<JoinHandle<()>>) -> Option<String> {
    // Before draining: output pipes close only once everything the run started is gone.
    let reason = run.finish().await;
    let _ = timeout(DRAIN_OUTPUT, async {
        for reader in readers {
            let _ = reader.await;
        }
    })
    .await;
    reason
}

/// How a run ended, with the last lines it wrote.
fn exit_info(
    status: std::io::Result<Exit>,
    reason: Option<String>,
    tail: &Mutex<VecDeque<String>>,
    started_at: SystemTime,
) -> ExitInfo {
    let message = lock(tail).iter().cloned().collect::<Vec<_>>().join("\n");
    let (started_at, finished_at) = (Some(started_at), Some(SystemTime::now()));
    match status {
        Ok(exit) => ExitInfo {
            code: exit.code,
            signal: exit.signal,
            reason,
            message,
            started_at,
            finished_at,
            init_container: None,
        },
        Err(e) => ExitInfo {
            code: None,
            signal: None,
            reason,
            message: format!("waiting for the process: {e}"),
            started_at,
            finished_at,
            init_container: None,
        },
    }
}

/// Kubernetes reports a container that could not be started with exit code 128.
fn start_error(message: String) -> ExitInfo {
    let now = Some(SystemTime::now());
    ExitInfo {
        code: Some(128),
        signal: None,
        reason: None,
        message,
        started_at: now,
        finished_at: now,
        init_container: None,
    }
}
