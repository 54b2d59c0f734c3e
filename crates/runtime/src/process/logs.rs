//! Replica output: a bounded ring buffer per replica and a broadcast per revision.
//!
//! Lines carry a per-revision sequence number so that `logs` can merge the buffers of all
//! replicas back into arrival order. A replica's buffer lives as long as the replica (it
//! spans its restarts, so the output of a crashed incarnation stays readable) and goes away
//! when the replica is stopped.

use std::collections::{HashMap, VecDeque};

use tokio::sync::broadcast;

use crate::LogLine;

/// Capacity of a revision's follow channel: a follower that falls further behind misses
/// lines (and is told so by `RecvError::Lagged`) rather than holding memory.
const FOLLOW_CAPACITY: usize = 1024;

#[derive(Default)]
pub(crate) struct RevisionLogs {
    seq: u64,
    replicas: HashMap<String, VecDeque<(u64, LogLine)>>,
    /// Made on the first follow and dropped when the last follower has gone: a tokio
    /// broadcast channel allocates (and touches) all its slots up front, ~100 KiB at this
    /// capacity, which with one per revision was a third of an idle `wisp serve`'s heap.
    follow: Option<broadcast::Sender<LogLine>>,
}

impl RevisionLogs {
    pub fn push(&mut self, mut line: LogLine, per_replica: usize) {
        self.seq += 1;
        line.seq = self.seq;
        let buf = self.replicas.entry(line.replica.clone()).or_default();
        while buf.len() >= per_replica.max(1) {
            buf.pop_front();
        }
        // No follower is the normal case.
        if let Some(follow) = &self.follow {
            if follow.receiver_count() == 0 {
                self.follow = None;
            } else {
                let _ = follow.send(line.clone());
            }
        }
        buf.push_back((self.seq, line));
    }

    pub fn forget_replica(&mut self, replica: &str) {
        self.replicas.remove(replica);
    }

    pub fn subscribe(&mut self) -> broadcast::Receiver<LogLine> {
        self.follow
            .get_or_insert_with(|| broadcast::channel(FOLLOW_CAPACITY).0)
            .subscribe()
    }

    /// The last `tail` lines of all replicas, oldest first.
    pub fn tail(&self, tail: Option<usize>) -> Vec<LogLine> {
        let mut all: Vec<&(u64, LogLine)> = self.replicas.values().flatten().collect();
        all.sort_unstable_by_key(|(seq, _)| *seq);
        let skip = tail.map_or(0, |t| all.len().saturating_sub(t));
        all.into_iter().skip(skip).map(|(_, l)| l.clone()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(replica: &str, text: &str) -> LogLine {
        LogLine {
            replica: replica.into(),
            stream: "stdout",
            line: text.into(),
            time: std::time::UNIX_EPOCH,
            run: 0,
            seq: 0,
        }
    }

    #[test]
    fn merges_in_arrival_order_and_bounds_each_replica() {
        let mut logs = RevisionLogs::default();
        let mut follow = logs.subscribe();
        for (r, t) in [
            ("a", "1"),
            ("b", "2"),
            ("a", "3"),
            ("a", "4"),
            ("b", "5"),
            ("a", "6"),
        ] {
            logs.push(line(r, t), 3);
        }
        let text = |v: Vec<LogLine>| v.into_iter().map(|l| l.line).collect::<Vec<_>>();
        // "1" fell out of a's buffer of 3.
        assert_eq!(text(logs.tail(None)), ["2", "3", "4", "5", "6"]);
        assert_eq!(text(logs.tail(Some(2))), ["5", "6"]);
        assert_eq!(text(logs.tail(Some(0))), Vec::<String>::new());
        assert_eq!(follow.try_recv().unwrap().line, "1");
        logs.forget_replica("a");
        assert_eq!(text(logs.tail(None)), ["2", "5"]);
    }

    #[test]
    fn the_follow_channel_exists_only_while_someone_follows() {
        let mut logs = RevisionLogs::default();
        logs.push(line("a", "1"), 10);
        assert!(logs.follow.is_none(), "no channel without a follower");
        let follow = logs.subscribe();
        logs.push(line("a", "2"), 10);
        drop(follow);
        logs.push(line("a", "3"), 10);
        assert!(logs.follow.is_none(), "dropped with its last follower");
        // A later follower gets what comes after it subscribed.
        let mut again = logs.subscribe();
        logs.push(line("a", "4"), 10);
        assert_eq!(again.try_recv().unwrap().line, "4");
        assert_eq!(logs.tail(None).len(), 4);
    }
}
