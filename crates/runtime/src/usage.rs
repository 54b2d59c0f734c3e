//! What a replica uses: its CPU time and memory, read as the kubelet's cAdvisor reads a
//! pod's (the HPA class scales on them, `wisp_autoscaler::hpa`).
//!
//! A process replica is a process tree: the sum over its main process and every live
//! descendant of `/proc/<pid>/stat`'s utime + stime + cutime + cstime (the children's
//! fields keep the time of descendants that already exited and were reaped) and of
//! `/proc/<pid>/status`'s `VmRSS`. A container is read from its cgroups where it has them
//! (cgroup v1 `cpuacct.usage`, `memory.usage_in_bytes` − `total_inactive_file` = the
//! working set; v2 `cpu.stat` `usage_usec`, `memory.current` − `inactive_file`), else from
//! its process tree (wisp's runtime puts a container in a CPU cgroup only when it has a
//! CPU limit: `container/native/cgroups.rs` `joined`).

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    time::Duration,
};

/// One replica's counters at one moment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplicaUsage {
    /// The replica's name (its Pod's).
    pub name: String,
    /// CPU time used since it started (all its containers).
    pub cpu: Duration,
    /// Memory in use now: the working set (bytes).
    pub memory: u64,
}

/// Where one container's (or process replica's) usage is read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Meter {
    /// The main process: its tree is read for whatever no cgroup gives.
    pub pid: i32,
    /// A cgroup directory with CPU accounting, and whether it is v2's.
    pub cpu: Option<(PathBuf, bool)>,
    /// A cgroup directory with memory accounting, and whether it is v2's.
    pub memory: Option<(PathBuf, bool)>,
}

impl Meter {
    /// A plain process tree.
    pub fn tree(pid: i32) -> Meter {
        Meter {
            pid,
            cpu: None,
            memory: None,
        }
    }

    /// (CPU time, memory bytes) now; None when the process is gone.
    pub fn read(&self, procs: &mut Option<Procs>) -> Option<(Duration, u64)> {
        let cgroup_cpu = self.cpu.as_ref().and_then(|(d, v2)| cgroup_cpu(d, *v2));
        let cgroup_mem = self
            .memory
            .as_ref()
            .and_then(|(d, v2)| cgroup_memory(d, *v2));
        if let (Some(cpu), Some(mem)) = (cgroup_cpu, cgroup_mem) {
            return Some((cpu, mem));
        }
        let procs = procs.get_or_insert_with(Procs::read);
        let (ticks, rss) = procs.tree(self.pid)?;
        let cpu = cgroup_cpu.unwrap_or_else(|| ticks_to_duration(ticks));
        Some((cpu, cgroup_mem.unwrap_or(rss)))
    }
}

/// Clock ticks per second of `/proc`'s times (`sysconf(_SC_CLK_TCK)`).
fn clock_ticks() -> u64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .and_then(|t| u64::try_from(t).ok())
        .filter(|t| *t > 0)
        .unwrap_or(100)
}

fn ticks_to_duration(ticks: u64) -> Duration {
    let hz = clock_ticks();
    Duration::from_secs(ticks / hz) + Duration::from_nanos((ticks % hz) * 1_000_000_000 / hz)
}

/// The fields of `/proc/<pid>/stat` usage needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ProcStat {
    pub ppid: i32,
    /// utime + stime + cutime + cstime, in clock ticks.
    pub ticks: u64,
}

/// Parses `/proc/<pid>/stat`. Field 2 (the command) is in parentheses and may hold spaces
/// and parentheses itself, so fields are counted after the last `)`.
pub(crate) fn parse_stat(stat: &str) -> Option<ProcStat> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // `rest` begins with field 3 (state): ppid is field 4, utime..cstime are 14..17.
    let f: Vec<&str> = rest.split_whitespace().collect();
    let num = |i: usize| f.get(i - 3)?.parse::<u64>().ok();
    Some(ProcStat {
        ppid: f.get(1)?.parse().ok()?,
        ticks: num(14)? + num(15)? + num(16)? + num(17)?,
    })
}

/// `VmRSS` of `/proc/<pid>/status`, in bytes (0 for a kernel thread or a zombie).
pub(crate) fn parse_vm_rss(status: &str) -> u64 {
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// A snapshot of the machine's processes (read once per usage read of a revision).
#[derive(Debug, Default)]
pub(crate) struct Procs {
    stats: HashMap<i32, ProcStat>,
    children: HashMap<i32, Vec<i32>>,
}

impl Procs {
    pub fn read() -> Procs {
        let mut procs = Procs::default();
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return procs;
        };
        for entry in dir.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<i32>().ok())
            else {
                continue;
            };
            if let Some(stat) = std::fs::read_to_string(entry.path().join("stat"))
                .ok()
                .and_then(|s| parse_stat(&s))
            {
                procs.children.entry(stat.ppid).or_default().push(pid);
                procs.stats.insert(pid, stat);
            }
        }
        procs
    }

    /// (CPU ticks, RSS bytes) of `root` and its live descendants; None when `root` is gone.
    pub fn tree(&self, root: i32) -> Option<(u64, u64)> {
        self.stats.get(&root)?;
        let (mut ticks, mut rss) = (0, 0);
        let mut todo = vec![root];
        while let Some(pid) = todo.pop() {
            let Some(stat) = self.stats.get(&pid) else {
                continue;
            };
            ticks += stat.ticks;
            rss += std::fs::read_to_string(format!("/proc/{pid}/status"))
                .map_or(0, |s| parse_vm_rss(&s));
            if let Some(kids) = self.children.get(&pid) {
                todo.extend(kids);
            }
        }
        Some((ticks, rss))
    }
}

fn read_u64(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// A `key value` line of a cgroup's `*.stat` file.
fn stat_field(path: &Path, key: &str) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok())?
    })
}

fn cgroup_cpu(dir: &Path, v2: bool) -> Option<Duration> {
    if v2 {
        stat_field(&dir.join("cpu.stat"), "usage_usec").map(Duration::from_micros)
    } else {
        read_u64(&dir.join("cpuacct.usage")).map(Duration::from_nanos)
    }
}

/// The working set, as cAdvisor computes it: usage minus inactive file pages.
fn cgroup_memory(dir: &Path, v2: bool) -> Option<u64> {
    let (usage, inactive) = if v2 {
        (
            read_u64(&dir.join("memory.current"))?,
            stat_field(&dir.join("memory.stat"), "inactive_file"),
        )
    } else {
        (
            read_u64(&dir.join("memory.usage_in_bytes"))?,
            stat_field(&dir.join("memory.stat"), "total_inactive_file"),
        )
    };
    Some(usage.saturating_sub(inactive.unwrap_or(0)))
}

/// The usage of replicas whose meters are known: `meters` by replica name (a replica with
/// several containers has one meter each, summed). A replica whose processes are gone is
/// left out (its metric is missing).
pub(crate) fn read(meters: Vec<(String, Vec<Meter>)>) -> Vec<ReplicaUsage> {
    let mut procs = None;
    meters
        .into_iter()
        .filter_map(|(name, ms)| {
            let mut usage = ReplicaUsage {
                name,
                cpu: Duration::ZERO,
                memory: 0,
            };
            for m in &ms {
                let (cpu, mem) = m.read(&mut procs)?;
                usage.cpu += cpu;
                usage.memory += mem;
            }
            (!ms.is_empty()).then_some(usage)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields() {
        let stat = "4242 (we (ird) name) S 77 4242 4242 0 -1 4194560 100 0 0 0 11 22 33 44 \
                    20 0 1 0 987654 1000000 100 18446744073709551615";
        assert_eq!(
            parse_stat(stat),
            Some(ProcStat {
                ppid: 77,
                ticks: 110
            })
        );
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn vm_rss() {
        let status = "Name:\tx\nVmPeak:\t  9000 kB\nVmRSS:\t    1234 kB\nThreads:\t1\n";
        assert_eq!(parse_vm_rss(status), 1234 * 1024);
        assert_eq!(parse_vm_rss("Name:\tkthreadd\n"), 0);
    }

    #[test]
    fn cgroup_files() {
        let dir = std::env::temp_dir().join(format!("wisp-usage-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("cpuacct.usage"), "2500000000\n").unwrap();
        std::fs::write(dir.join("memory.usage_in_bytes"), "10000\n").unwrap();
        std::fs::write(
            dir.join("memory.stat"),
            "cache 5\ntotal_inactive_file 4000\ninactive_file 1\n",
        )
        .unwrap();
        std::fs::write(dir.join("cpu.stat"), "usage_usec 1500000\nuser_usec 1\n").unwrap();
        std::fs::write(dir.join("memory.current"), "900\n").unwrap();
        assert_eq!(cgroup_cpu(&dir, false), Some(Duration::from_millis(2500)));
        assert_eq!(cgroup_memory(&dir, false), Some(6000));
        assert_eq!(cgroup_cpu(&dir, true), Some(Duration::from_millis(1500)));
        assert_eq!(cgroup_memory(&dir, true), Some(899));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// This test's own process: its tree has at least its CPU time and some memory.
    #[test]
    fn own_tree() {
        let me = std::process::id() as i32;
        // Burn a little CPU so the count is not 0.
        let t = std::time::Instant::now();
        let mut x = 0u64;
        while t.elapsed() < Duration::from_millis(50) {
            x = x.wrapping_add(std::hint::black_box(1));
        }
        std::hint::black_box(x);
        let got = read(vec![("me".into(), vec![Meter::tree(me)])]);
        assert_eq!(got.len(), 1);
        assert!(got[0].cpu > Duration::ZERO, "{got:?}");
        assert!(got[0].memory > 1024 * 1024, "{got:?}");
        assert!(
            read(vec![("gone".into(), vec![Meter::tree(i32::MAX)])]).is_empty(),
            "a gone process has no usage"
        );
    }
}
