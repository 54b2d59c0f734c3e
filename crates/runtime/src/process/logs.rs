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

pub(crate) struct RevisionLogs {
    seq: u64,
    replicas: HashMap<String, VecDeque<(u64, LogLine)>>,
    follow: broadcast::Sender<LogLine>,
}

impl Default for RevisionLogs {
    fn default() -> Self {
        RevisionLogs {
            seq: 0,
            replicas: HashMap::new(),
            follow: broadcast::channel(FOLLOW_CAPACITY).0,
        }
    }
}

impl RevisionLogs {
    pub fn push(&mut self, line: LogLine, per_replica: usize) {
        self.seq += 1;
        let buf = self.replicas.entry(line.replica.clone()).or_default();
        while buf.len() >= per_replica.max(1) {
            buf.pop_front();
        }
        // No receivers is the normal case.
        let _ = self.follow.send(line.clone());
        buf.push_back((self.seq, line));
    }

    pub fn forget_replica(&mut self, replica: &str) {
        self.replicas.remove(replica);
    }

    pub fn subscribe(&self) -> broadcast::Receiver<LogLine> {
        self.follow.subscribe()
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
        assert_eq!(follow.try_recv().unwrap(), line("a", "1"));
        logs.forget_replica("a");
        assert_eq!(text(logs.tail(None)), ["2", "5"]);
    }
}
