//! Just enough of `/proc`: memory of a process and its children.

use std::{
    collections::{HashMap, HashSet},
    fmt,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
        mpsc,
    },
    time::{Duration, Instant},
};

/// A process, identified by pid *and* start time (so a recycled pid is never mistaken for
/// it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proc {
    pub pid: u32,
    pub start_time: u64,
    pub comm: String,
}

impl Proc {
    /// Reads `/proc/<pid>/stat`; `None` if the process is gone.
    pub fn read(pid: u32) -> Option<Proc> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let s = Stat::parse(&stat)?;
        Some(Proc {
            pid,
            start_time: s.start_time,
            comm: s.comm,
        })
    }

    /// Whether this very process is still alive (a zombie counts as gone).
    pub fn is_alive(&self) -> bool {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{}/stat", self.pid)) else {
            return false;
        };
        Stat::parse(&stat).is_some_and(|s| s.start_time == self.start_time && s.state != 'Z')
    }
}

struct Stat {
    comm: String,
    state: char,
    ppid: u32,
    start_time: u64,
}

impl Stat {
    /// `pid (comm) state ppid … starttime(22) …`; comm may hold spaces and parentheses.
    fn parse(stat: &str) -> Option<Stat> {
        let open = stat.find('(')?;
        let close = stat.rfind(')')?;
        let comm = stat[open + 1..close].to_string();
        let rest: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        // rest[0] is field 3 (state), so field n is rest[n - 3].
        Some(Stat {
            comm,
            state: rest.first()?.chars().next()?,
            ppid: rest.get(1)?.parse().ok()?,
            start_time: rest.get(19)?.parse().ok()?,
        })
    }
}

/// The live child processes of `parent`.
pub fn children(parent: u32) -> Vec<Proc> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        if let Some(s) = Stat::parse(&stat)
            && s.ppid == parent
            && s.state != 'Z'
        {
            out.push(Proc {
                pid,
                start_time: s.start_time,
                comm: s.comm,
            });
        }
    }
    out
}

/// The value of `key` in the environment of `pid` (`/proc/<pid>/environ`), as the
/// process was exec'ed.
pub fn env_var(pid: u32, key: &str) -> Option<String> {
    let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    environ.split(|b| *b == 0).find_map(|kv| {
        let kv = std::str::from_utf8(kv).ok()?;
        let (k, v) = kv.split_once('=')?;
        (k == key).then(|| v.to_string())
    })
}

/// A child process first seen by [`trace_children`].
#[derive(Debug, Clone)]
pub struct Spawned {
    /// When the poll first saw the process (after its fork, within one period).
    pub at: Instant,
    pub proc: Proc,
    /// The value of the traced environment variable, once the process has exec'ed.
    pub env: String,
}

/// Polls the children of `parent` every `period` until `stop` is set or `until` passes, and
/// sends each new one to `tx` once its environment holds `env_key` (read after exec; the
/// timestamp is still the first sighting). Costs one scan of `/proc` per period.
pub fn trace_children<T: From<Spawned> + Send + 'static>(
    parent: u32,
    env_key: &'static str,
    period: Duration,
    until: Instant,
    stop: Arc<AtomicBool>,
    tx: mpsc::Sender<T>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut first_seen: HashMap<(u32, u64), Instant> = HashMap::new();
        let mut reported: HashSet<(u32, u64)> = HashSet::new();
        while !stop.load(Ordering::Relaxed) && Instant::now() < until {
            let now = Instant::now();
            for p in children(parent) {
                let id = (p.pid, p.start_time);
                if reported.contains(&id) {
                    continue;
                }
                let at = *first_seen.entry(id).or_insert(now);
                if let Some(env) = env_var(p.pid, env_key) {
                    reported.insert(id);
                    if tx.send(Spawned { at, proc: p, env }.into()).is_err() {
                        return;
                    }
                }
            }
            std::thread::sleep(period);
        }
    })
}

/// A `Key:   123 kB` field of a `/proc` file, in KiB.
pub fn field_kib(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        if k.trim() != key {
            return None;
        }
        v.split_whitespace().next()?.parse().ok()
    })
}

/// Memory of one process, in KiB.
#[derive(Debug, Clone, Copy, Default)]
pub struct Memory {
    /// Resident set size now (`VmRSS`).
    pub rss: u64,
    /// Peak resident set size (`VmHWM`).
    pub hwm: u64,
    /// Of the RSS: anonymous memory (heap, stacks) (`RssAnon`).
    pub rss_anon: u64,
    /// Of the RSS: file-backed pages (the binary's code and data) (`RssFile`).
    pub rss_file: u64,
    /// Proportional set size (`smaps_rollup` `Pss`): shared pages divided among sharers.
    pub pss: u64,
    /// Private dirty pages (`smaps_rollup` `Private_Dirty`): what the process alone costs.
    pub private_dirty: u64,
    /// Virtual size (`VmSize`).
    pub vm_size: u64,
    /// Threads.
    pub threads: u64,
}

impl Memory {
    /// Reads `/proc/<pid>/status` and `/proc/<pid>/smaps_rollup`.
    pub fn read(pid: u32) -> anyhow::Result<Memory> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
        let rollup =
            std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap_or_default();
        let s = |k| field_kib(&status, k).unwrap_or(0);
        let r = |k| field_kib(&rollup, k).unwrap_or(0);
        Ok(Memory {
            rss: s("VmRSS"),
            hwm: s("VmHWM"),
            rss_anon: s("RssAnon"),
            rss_file: s("RssFile"),
            pss: r("Pss"),
            private_dirty: r("Private_Dirty"),
            vm_size: s("VmSize"),
            threads: s("Threads"),
        })
    }
}

/// KiB shown as MiB with one decimal.
#[derive(Debug, Clone, Copy)]
pub struct Mib(pub u64);

impl fmt::Display for Mib {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.1} MiB", self.0 as f64 / 1024.0)
    }
}

/// `/proc/loadavg`'s 1, 5 and 15 minute figures: other work on the machine skews results.
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" / ")
}

/// The first non-loopback IPv4 address of the network namespace `pid` is in.
pub fn local_ipv4(pid: u32) -> Option<std::net::Ipv4Addr> {
    local_ipv4_of(&std::fs::read_to_string(format!("/proc/{pid}/net/fib_trie")).ok()?)
}

/// In a `/proc/<pid>/net/fib_trie`: an address line, then `/32 host LOCAL` for a local one.
fn local_ipv4_of(trie: &str) -> Option<std::net::Ipv4Addr> {
    let mut last: Option<std::net::Ipv4Addr> = None;
    for line in trie.lines() {
        let line = line.trim();
        if let Some(addr) = line.strip_prefix("|-- ") {
            last = addr.parse().ok();
        } else if line.starts_with("/32 host LOCAL")
            && let Some(ip) = last.filter(|ip| !ip.is_loopback())
        {
            return Some(ip);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_odd_comm() {
        let line = "42 (a (b) c) S 7 42 42 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 12345 1000 10";
        let s = Stat::parse(line).unwrap();
        assert_eq!(s.comm, "a (b) c");
        assert_eq!(s.state, 'S');
        assert_eq!(s.ppid, 7);
        assert_eq!(s.start_time, 12345);
    }

    #[test]
    fn reads_own_memory() {
        let m = Memory::read(std::process::id()).unwrap();
        assert!(m.rss > 0 && m.hwm >= m.rss && m.threads >= 1);
        assert!(Proc::read(std::process::id()).unwrap().is_alive());
    }

    #[test]
    fn the_local_address_comes_from_the_fib_trie() {
        let trie = "Main:\n  +-- 0.0.0.0/0 3 0 5\n     |-- 0.0.0.0\n        /0 universe UNICAST\n     \
                    +-- 10.88.0.0/16 2 0 2\n        |-- 10.88.0.0\n           /16 link UNICAST\n        \
                    |-- 10.88.0.2\n           /32 host LOCAL\n     +-- 127.0.0.0/8 2 0 2\n        \
                    |-- 127.0.0.1\n           /32 host LOCAL\n";
        assert_eq!(
            local_ipv4_of(trie),
            Some(std::net::Ipv4Addr::new(10, 88, 0, 2))
        );
        assert_eq!(local_ipv4_of("|-- 127.0.0.1\n   /32 host LOCAL\n"), None);
    }
}
