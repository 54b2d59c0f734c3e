//! Pid records: how a restarted wisp finds the replicas a crashed wisp left running.
//!
//! A replica runs in its own process group and wisp does not ask the kernel to kill it when
//! wisp dies (there is no portable way to, and a graceful stop of wisp stops it anyway). So
//! if wisp is `kill -9`ed its replicas live on, holding their ports. For every running
//! replica wisp keeps a small JSON file `<pgid>.json` in the state directory; the next
//! [`ProcessPlatform::new`](super::ProcessPlatform::new) stops the groups those files name
//! and deletes the files.
//!
//! A pid can be reused by an unrelated process after the original exits, so a record also
//! holds the process's start time (field 22 of `/proc/<pid>/stat`, in clock ticks since
//! boot): a group is signalled only when its leader still has the recorded start time.
//! Where `/proc` does not exist the start time cannot be checked and nothing is killed.

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use nix::{
    errno::Errno,
    sys::signal::{Signal, killpg},
    unistd::Pid,
};
use serde::{Deserialize, Serialize};
use tokio::time::{Instant, sleep};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Record {
    pub pid: i32,
    /// Equal to `pid`: each replica leads its own group.
    pub pgid: i32,
    pub start_time: u64,
    pub namespace: String,
    pub revision: String,
    pub replica: String,
}

pub(crate) fn path(dir: &Path, pgid: i32) -> PathBuf {
    dir.join(format!("{pgid}.json"))
}

pub(crate) async fn write(dir: &Path, record: &Record) -> std::io::Result<()> {
    let json = serde_json::to_vec(record).map_err(std::io::Error::other)?;
    tokio::fs::write(path(dir, record.pgid), json).await
}

pub(crate) async fn remove(dir: &Path, pgid: i32) {
    if let Err(e) = tokio::fs::remove_file(path(dir, pgid)).await
        && e.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!("removing pid record {}: {e}", path(dir, pgid).display());
    }
}

/// The start time of a running process, None if it does not exist (or on a system
/// without `/proc`).
pub(crate) async fn start_time(pid: i32) -> Option<u64> {
    let stat = tokio::fs::read_to_string(format!("/proc/{pid}/stat"))
        .await
        .ok()?;
    parse_start_time(&stat)
}

/// Field 22 of `/proc/<pid>/stat`. Field 2 (the command name) is in parentheses and may
/// itself contain spaces and parentheses, so counting starts after the last `)`.
pub(crate) fn parse_start_time(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // `rest` begins with field 3 (state), so field 22 is the 20th.
    rest.split_ascii_whitespace().nth(19)?.parse().ok()
}

/// Stops the replicas an earlier run left behind, all in parallel, and deletes their
/// records. Bounded by `grace` (plus the SIGKILL).
pub(crate) async fn clean_up(dir: PathBuf, grace: Duration) {
    let mut entries = match tokio::fs::read_dir(&dir).await {
        Ok(e) => e,
        Err(e) => {
            tracing::warn!("reading state directory {}: {e}", dir.display());
            return;
        }
    };
    let mut stops = tokio::task::JoinSet::new();
    while let Ok(Some(entry)) = entries.next_entry().await {
        let file = entry.path();
        if file.extension().is_none_or(|e| e != "json") {
            continue;
        }
        let record = tokio::fs::read(&file)
            .await
            .ok()
            .and_then(|bytes| serde_json::from_slice::<Record>(&bytes).ok());
        stops.spawn(async move {
            match record {
                Some(r) if r.pgid > 1 && start_time(r.pid).await == Some(r.start_time) => {
                    tracing::info!(
                        pid = r.pid,
                        "stopping replica {} of {}/{} left running by an earlier wisp",
                        r.replica,
                        r.namespace,
                        r.revision
                    );
                    stop_group(r.pgid, grace).await;
                }
                Some(_) => {}
                None => tracing::warn!("ignoring unreadable pid record {}", file.display()),
            }
            if let Err(e) = tokio::fs::remove_file(&file).await {
                tracing::warn!("removing pid record {}: {e}", file.display());
            }
        });
    }
    while stops.join_next().await.is_some() {}
}

/// SIGTERM to the group, up to `grace` for it to go away, then SIGKILL.
async fn stop_group(pgid: i32, grace: Duration) {
    let group = Pid::from_raw(pgid);
    if killpg(group, Signal::SIGTERM) == Err(Errno::ESRCH) {
        return;
    }
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if killpg(group, None) == Err(Errno::ESRCH) {
            return;
        }
        sleep(Duration::from_millis(50)).await;
    }
    let _ = killpg(group, Signal::SIGKILL);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_time_is_field_22() {
        let stat = "4242 (we (ird) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 \
                    987654 12345678 100 18446744073709551615";
        assert_eq!(parse_start_time(stat), Some(987654));
        assert_eq!(parse_start_time("1 (x) S 1 2"), None);
        assert_eq!(parse_start_time("garbage"), None);
    }
}
