//! The task that owns one replica: starts its process, reads its output, probes it,
//! restarts it after a crash (with back-off) or a failed liveness probe, and stops it.
//!
//! Everything about a replica's process happens in this one task, so there is no shared
//! handle to race on: the rest of the platform talks to it only through the stop signal,
//! and it reports back by updating the replica's status in the platform's map (short,
//! synchronous critical sections; never across an `.await`).

use std::{
    collections::VecDeque,
    os::unix::process::ExitStatusExt,
    process::{ExitStatus, Stdio},
    sync::{Arc, Mutex},
    time::Duration,
};

use nix::{
    sys::signal::{Signal, killpg},
    unistd::Pid,
};
use tokio::{
    io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, BufReader},
    process::{Child, Command},
    sync::watch,
    task::JoinHandle,
    time::{Instant, sleep, timeout},
};

use super::{Inner, backoff::Backoff, expand, lock, probe, records};
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
    pub port: u16,
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
    pub async fn supervise(self, mut stop: watch::Receiver<bool>) {
        // Replicas of an earlier run are stopped before any of this run start.
        let mut cleaned_up = self.inner.cleaned_up.clone();
        tokio::select! {
            _ = cleaned_up.wait_for(|d| *d) => {}
            _ = stop_requested(&mut stop) => {}
        }
        // `scale` starts no replica of a spec without a serving container (its failure).
        let Some(c) = self.spec.serving_container() else {
            return;
        };
        let id = expand::Identity {
            service: &self.spec.service,
            configuration: &self.spec.configuration,
            revision: &self.key.name,
        };
        let (env, skipped) = expand::environment(c, self.port, &id, |n| std::env::var(n).ok());
        if !skipped.is_empty() {
            tracing::warn!(
                revision = %self.key,
                "env {skipped:?} use valueFrom, which the process runtime cannot resolve: skipped"
            );
        }
        let argv = expand::argv(c, &env);
        let target = probe::Target {
            port: self.port,
            env: env.into(),
            working_dir: (!c.working_dir.is_empty()).then(|| c.working_dir.clone().into()),
        };
        let probes = probe::Probes::of(c);
        let opts = &self.inner.options;
        let mut backoff = Backoff::new(opts.backoff_initial, opts.backoff_max, opts.backoff_reset);
        let mut restarted = false;
        while !*stop.borrow() {
            let started = Instant::now();
            match self
                .run_once(&argv, &target, &probes, restarted, &mut stop)
                .await
            {
                End::Stopped => break,
                End::Exited(exit) => {
                    let delay = backoff.next_delay(started.elapsed());
                    tracing::info!(
                        revision = %self.key,
                        replica = %self.name,
                        code = ?exit.code,
                        signal = ?exit.signal,
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
        self.inner.finish(&self.key, self.id, &self.name).await;
    }

    async fn run_once(
        &self,
        argv: &[String],
        target: &probe::Target,
        probes: &probe::Probes,
        restarted: bool,
        stop: &mut watch::Receiver<bool>,
    ) -> End {
        let Some((program, args)) = argv.split_first() else {
            // scale() never starts a replica without a command; be defensive anyway.
            return End::Exited(start_error("the container has no command".into()));
        };
        let mut cmd = Command::new(program);
        cmd.args(args)
            .env_clear()
            .envs(target.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own group, so that stopping it reaches everything it started.
            .process_group(0)
            // Stopping is explicit and graceful; dropping a handle must not SIGKILL.
            .kill_on_drop(false);
        if let Some(dir) = &target.working_dir {
            cmd.current_dir(dir);
        }
        let spawned = cmd.spawn();
        self.update(|s| {
            s.phase = ReplicaPhase::Starting;
            if restarted {
                s.restarts += 1;
            }
        });
        let mut child = match spawned {
            Ok(child) => child,
            Err(e) => return End::Exited(start_error(format!("starting {program:?}: {e}"))),
        };
        let Some(pid) = child.id().map(|p| p as i32) else {
            return End::Exited(start_error("the process vanished at start".into()));
        };
        let tail = Arc::new(Mutex::new(VecDeque::new()));
        let readers = [
            child
                .stdout
                .take()
                .map(|p| self.read_output("stdout", p, tail.clone())),
            child
                .stderr
                .take()
                .map(|p| self.read_output("stderr", p, tail.clone())),
        ];
        self.write_record(pid).await;

        let report = |ready: bool| {
            self.set_phase(if ready {
                ReplicaPhase::Ready
            } else {
                ReplicaPhase::NotReady
            })
        };
        enum Why {
            Exited(std::io::Result<ExitStatus>),
            Stop,
            Restart(String),
        }
        let why = tokio::select! {
            status = child.wait() => Why::Exited(status),
            _ = stop_requested(stop) => Why::Stop,
            reason = probe::run(probes, target, &self.inner.options, &report) => Why::Restart(reason),
        };
        let stopped = matches!(why, Why::Stop);
        let status = match why {
            Why::Exited(status) => {
                // Like a container, a replica ends when its main process does: whatever it
                // left running in its group goes too.
                let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
                status
            }
            Why::Stop => self.terminate(&mut child, pid).await,
            Why::Restart(reason) => {
                tracing::warn!(revision = %self.key, replica = %self.name, "{reason}; restarting");
                self.set_phase(ReplicaPhase::Terminating);
                self.terminate(&mut child, pid).await
            }
        };
        let _ = timeout(DRAIN_OUTPUT, async {
            for reader in readers.into_iter().flatten() {
                let _ = reader.await;
            }
        })
        .await;
        records::remove(&self.inner.state_dir, pid).await;
        if stopped {
            return End::Stopped;
        }
        let message = lock(&tail).iter().cloned().collect::<Vec<_>>().join("\n");
        End::Exited(match status {
            Ok(status) => ExitInfo {
                code: status.code(),
                signal: status.signal(),
                message,
            },
            Err(e) => ExitInfo {
                code: None,
                signal: None,
                message: format!("waiting for the process: {e}"),
            },
        })
    }

    /// SIGTERM to the group; SIGKILL once the grace period is over.
    async fn terminate(&self, child: &mut Child, pgid: i32) -> std::io::Result<ExitStatus> {
        let group = Pid::from_raw(pgid);
        let _ = killpg(group, Signal::SIGTERM);
        let status = match timeout(self.spec.grace_period, child.wait()).await {
            Ok(status) => status,
            Err(_) => {
                tracing::info!(
                    revision = %self.key,
                    replica = %self.name,
                    "still running {:?} after SIGTERM: sending SIGKILL",
                    self.spec.grace_period
                );
                let _ = killpg(group, Signal::SIGKILL);
                child.wait().await
            }
        };
        // Anything else in the group goes with the main process.
        let _ = killpg(group, Signal::SIGKILL);
        status
    }

    async fn write_record(&self, pid: i32) {
        let Some(start_time) = records::start_time(pid).await else {
            // Exited already, or no /proc: nothing could be verified on cleanup anyway.
            return;
        };
        let record = records::Record {
            pid,
            pgid: pid,
            start_time,
            namespace: self.key.namespace.clone(),
            revision: self.key.name.clone(),
            replica: self.name.clone(),
        };
        if let Err(e) = records::write(&self.inner.state_dir, &record).await {
            tracing::warn!("writing pid record for {}: {e}", self.name);
        }
    }

    fn read_output(
        &self,
        stream: &'static str,
        pipe: impl AsyncRead + Unpin + Send + 'static,
        tail: Arc<Mutex<VecDeque<String>>>,
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
        self.update(|s| s.phase = phase);
    }
}

/// Kubernetes reports a container that could not be started with exit code 128.
fn start_error(message: String) -> ExitInfo {
    ExitInfo {
        code: Some(128),
        signal: None,
        message,
    }
}
