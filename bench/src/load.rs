//! Load from outside wisp: `wrk` runs and their figures, CPU time from `/proc`, a sample
//! app started directly (the baseline), and a one-shot HTTP/1.1 probe.
//!
//! Every wait here is bounded: `wrk` is killed if it outlives its duration by
//! [`WRK_GRACE`], an app that does not answer within its timeout is an error, and
//! [`DirectApp`] kills its process when dropped.

use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpListener, TcpStream},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use nix::{sys::signal::Signal, unistd::Pid};

/// The Debian command that installs `wrk`.
pub const WRK_INSTALL: &str = "apt-get update && apt-get install -y wrk";

/// How long a `wrk` run may outlive its `-d` before it is killed.
pub const WRK_GRACE: Duration = Duration::from_secs(30);

/// `wrk` on the PATH (like `which wrk`); the error says how to install it.
pub fn find_wrk() -> anyhow::Result<PathBuf> {
    find_on_path("wrk")
        .ok_or_else(|| anyhow::anyhow!("wrk not found on PATH; install it with: {WRK_INSTALL}"))
}

/// The program `name` on the PATH, like `which name`.
pub fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// One `wrk` run.
#[derive(Debug, Clone)]
pub struct WrkRun {
    /// `-t`
    pub threads: u32,
    /// `-c`
    pub connections: u32,
    /// `-d`, whole seconds.
    pub duration: Duration,
    /// A `Host` header (`-H 'Host: …'`), if any.
    pub host: Option<String>,
    /// e.g. `http://127.0.0.1:8080/`
    pub url: String,
}

impl WrkRun {
    /// The arguments after `wrk` (`--latency` always, for the percentiles).
    pub fn args(&self) -> Vec<String> {
        let mut a = vec![
            format!("-t{}", self.threads),
            format!("-c{}", self.connections),
            format!("-d{}s", self.duration.as_secs().max(1)),
            "--latency".to_string(),
        ];
        if let Some(h) = &self.host {
            a.push("-H".into());
            a.push(format!("Host: {h}"));
        }
        a.push(self.url.clone());
        a
    }

    /// The command line, quoted for a shell, for the results.
    pub fn command_line(&self) -> String {
        let mut s = "wrk".to_string();
        for a in self.args() {
            s.push(' ');
            if a.contains(' ') {
                s.push_str(&format!("'{a}'"));
            } else {
                s.push_str(&a);
            }
        }
        s
    }

    /// Runs `wrk` (killed if it outlives its duration by [`WRK_GRACE`]) and parses its
    /// report.
    pub fn run(&self, wrk: &Path) -> anyhow::Result<WrkResult> {
        let mut child = Command::new(wrk)
            .args(self.args())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {}", wrk.display()))?;
        let mut stdout = child.stdout.take().expect("stdout is piped");
        let mut stderr = child.stderr.take().expect("stderr is piped");
        let out = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = stdout.read_to_string(&mut s);
            s
        });
        let err = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = stderr.read_to_string(&mut s);
            s
        });
        let deadline = Instant::now() + self.duration + WRK_GRACE;
        let status = loop {
            if let Some(status) = child.try_wait()? {
                break status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                bail!("`{}` did not end in time; killed", self.command_line());
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let out = out.join().unwrap_or_default();
        let err = err.join().unwrap_or_default();
        if !status.success() {
            bail!("`{}` failed ({status}): {err}{out}", self.command_line());
        }
        parse_wrk(&out).with_context(|| format!("parsing the output of `{}`", self.command_line()))
    }
}

/// What one `wrk --latency` run reported.
#[derive(Debug, Clone)]
pub struct WrkResult {
    /// `N requests in D`
    pub requests: u64,
    pub elapsed: Duration,
    /// `Requests/sec:`
    pub rps: f64,
    /// Latency distribution.
    pub p50: Duration,
    pub p75: Duration,
    pub p90: Duration,
    pub p99: Duration,
    /// `Non-2xx or 3xx responses:` (0 when absent).
    pub non_2xx: u64,
    /// Sum of `Socket errors: connect, read, write, timeout` (0 when absent).
    pub socket_errors: u64,
    /// The report as printed.
    pub raw: String,
}

/// A `wrk` duration: `45.00us`, `1.23ms`, `2.00s`, `1.00m`, `1.00h`.
pub fn parse_wrk_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    let split = s.find(|c: char| c.is_ascii_alphabetic())?;
    let (num, unit) = s.split_at(split);
    let v: f64 = num.trim().parse().ok()?;
    let secs = match unit {
        "us" => v / 1e6,
        "ms" => v / 1e3,
        "s" => v,
        "m" => v * 60.0,
        "h" => v * 3600.0,
        _ => return None,
    };
    (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs))
}

/// Parses the report of `wrk --latency`.
pub fn parse_wrk(out: &str) -> anyhow::Result<WrkResult> {
    let mut requests = None;
    let mut elapsed = None;
    let mut rps = None;
    let mut pct = [None; 4];
    let mut non_2xx = 0;
    let mut socket_errors = 0;
    for line in out.lines() {
        let l = line.trim();
        if let Some(v) = l.strip_prefix("Requests/sec:") {
            rps = v.trim().parse::<f64>().ok();
        } else if let Some(v) = l.strip_prefix("Non-2xx or 3xx responses:") {
            non_2xx = v.trim().parse().unwrap_or(0);
        } else if let Some(v) = l.strip_prefix("Socket errors:") {
            // connect 0, read 0, write 0, timeout 0
            socket_errors = v
                .split(',')
                .filter_map(|kv| kv.split_whitespace().nth(1)?.parse::<u64>().ok())
                .sum();
        } else if let Some((n, rest)) = l.split_once(" requests in ") {
            requests = n.trim().parse::<u64>().ok();
            elapsed = rest.split(',').next().and_then(parse_wrk_duration);
        } else {
            let mut it = l.split_whitespace();
            if let (Some(p), Some(v), None) = (it.next(), it.next(), it.next()) {
                let i = match p {
                    "50%" => 0,
                    "75%" => 1,
                    "90%" => 2,
                    "99%" => 3,
                    _ => continue,
                };
                pct[i] = parse_wrk_duration(v);
            }
        }
    }
    let missing = |what: &str| anyhow::anyhow!("no {what} in wrk's output:\n{out}");
    Ok(WrkResult {
        requests: requests.ok_or_else(|| missing("request count"))?,
        elapsed: elapsed.ok_or_else(|| missing("duration"))?,
        rps: rps.ok_or_else(|| missing("Requests/sec"))?,
        p50: pct[0].ok_or_else(|| missing("50% latency"))?,
        p75: pct[1].ok_or_else(|| missing("75% latency"))?,
        p90: pct[2].ok_or_else(|| missing("90% latency"))?,
        p99: pct[3].ok_or_else(|| missing("99% latency"))?,
        non_2xx,
        socket_errors,
        raw: out.to_string(),
    })
}

/// Clock ticks per second (`getconf CLK_TCK`; 100 if that fails).
pub fn clk_tck() -> u64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .filter(|&t| t > 0)
        .unwrap_or(100)
}

/// utime + stime of `pid` (all its threads), in clock ticks, from `/proc/<pid>/stat`.
pub fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest: Vec<&str> = stat[stat.rfind(')')? + 1..].split_whitespace().collect();
    // rest[0] is field 3 (state); utime is field 14, stime field 15.
    let utime: u64 = rest.get(11)?.parse().ok()?;
    let stime: u64 = rest.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// utime + stime of every process in `pids` together, in clock ticks; None when `pids` is
/// empty or one of them is gone.
pub fn cpu_ticks_of(pids: &[u32]) -> Option<u64> {
    if pids.is_empty() {
        return None;
    }
    pids.iter().map(|p| cpu_ticks(*p)).sum()
}

/// CPU microseconds per request between two [`cpu_ticks`] readings taken around a run that
/// served `requests`; None when a reading is missing or nothing was served.
pub fn micros_per_request(before: Option<u64>, after: Option<u64>, requests: u64) -> Option<f64> {
    match (before, after) {
        (Some(a), Some(b)) if requests > 0 => {
            Some(b.saturating_sub(a) as f64 / clk_tck() as f64 / requests as f64 * 1e6)
        }
        _ => None,
    }
}

/// CPU time of this process's waited-for children (cutime + cstime of `/proc/self/stat`),
/// in clock ticks: a `wrk` run counts here once it has been reaped.
pub fn children_ticks() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let rest: Vec<&str> = stat[stat.rfind(')')? + 1..].split_whitespace().collect();
    // cutime is field 16, cstime field 17.
    let cutime: u64 = rest.get(13)?.parse().ok()?;
    let cstime: u64 = rest.get(14)?.parse().ok()?;
    Some(cutime + cstime)
}

/// Busy and total jiffies of the whole machine (`cpu` line of `/proc/stat`).
pub fn machine_ticks() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal guest guest_nice; guest time is
    // already counted in user.
    let total: u64 = v.iter().take(8).sum();
    let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
    Some((total - idle, total))
}

/// CPU time of a few processes and of the machine over an interval.
#[derive(Debug, Clone)]
pub struct CpuMeter {
    pids: Vec<u32>,
    start: Vec<Option<u64>>,
    children: Option<u64>,
    machine: Option<(u64, u64)>,
}

/// What a [`CpuMeter`] measured.
#[derive(Debug, Clone)]
pub struct CpuUsage {
    /// CPU seconds of each process (`None` if it could not be read).
    pub seconds: Vec<Option<f64>>,
    /// CPU seconds of this process's children reaped during the interval (e.g. `wrk`).
    pub children: Option<f64>,
    /// Busy share of all CPUs of the machine over the interval (0..=1).
    pub machine_busy: Option<f64>,
    /// Busy CPU seconds of the whole machine (all CPUs) over the interval.
    pub machine_seconds: Option<f64>,
}

impl CpuUsage {
    /// Machine CPU seconds not spent by the measured processes nor the reaped children:
    /// other processes on the machine (and the kernel's own work), a sign of interference.
    pub fn others(&self) -> Option<f64> {
        let mut ours = self.children?;
        for s in &self.seconds {
            ours += (*s)?;
        }
        Some((self.machine_seconds? - ours).max(0.0))
    }
}

impl CpuMeter {
    pub fn start(pids: &[u32]) -> CpuMeter {
        CpuMeter {
            pids: pids.to_vec(),
            start: pids.iter().map(|&p| cpu_ticks(p)).collect(),
            children: children_ticks(),
            machine: machine_ticks(),
        }
    }

    pub fn stop(&self) -> CpuUsage {
        let tck = clk_tck() as f64;
        let seconds = self
            .pids
            .iter()
            .zip(&self.start)
            .map(|(&p, s)| Some((cpu_ticks(p)?.checked_sub((*s)?)?) as f64 / tck))
            .collect();
        let children = children_ticks()
            .zip(self.children)
            .and_then(|(now, then)| now.checked_sub(then))
            .map(|t| t as f64 / tck);
        let (machine_busy, machine_seconds) = match (self.machine, machine_ticks()) {
            (Some((b0, t0)), Some((b1, t1))) if t1 > t0 => (
                Some((b1 - b0) as f64 / (t1 - t0) as f64),
                Some((b1 - b0) as f64 / tck),
            ),
            _ => (None, None),
        };
        CpuUsage {
            seconds,
            children,
            machine_busy,
            machine_seconds,
        }
    }
}

/// Waits until the machine's CPUs are at most `max_busy` busy (0..=1) over one second, or
/// until `timeout`; returns the last one-second figure.
pub fn wait_quiet(max_busy: f64, timeout: Duration) -> Option<f64> {
    let deadline = Instant::now() + timeout;
    loop {
        let m = CpuMeter::start(&[]);
        std::thread::sleep(Duration::from_secs(1));
        let busy = m.stop().machine_busy;
        if busy.is_none_or(|b| b <= max_busy) || Instant::now() >= deadline {
            return busy;
        }
    }
}

/// A free loopback port (bound, read and released: another process may take it first,
/// which the caller notices when its app fails to answer).
pub fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// A sample app started directly on `127.0.0.1:<port>` (no wisp in between), killed when
/// dropped.
#[derive(Debug)]
pub struct DirectApp {
    child: Option<Child>,
    pub addr: SocketAddr,
}

impl DirectApp {
    /// Starts `app` with `PORT` set and waits (up to `timeout`) until `GET /` answers 200.
    pub fn start(app: &Path, timeout: Duration) -> anyhow::Result<DirectApp> {
        let port = free_port()?;
        let child = Command::new(app)
            .env("PORT", port.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {}", app.display()))?;
        let mut direct = DirectApp {
            child: Some(child),
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
        };
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(c) = direct.child.as_mut()
                && let Some(status) = c.try_wait()?
            {
                bail!("{} exited before answering: {status}", app.display());
            }
            match get(direct.addr, None, Duration::from_secs(2)) {
                Ok(r) if r.status == 200 => return Ok(direct),
                _ if Instant::now() > deadline => {
                    bail!(
                        "{} did not answer on {} in {timeout:?}",
                        app.display(),
                        direct.addr
                    )
                }
                _ => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// SIGTERM, then SIGKILL after `timeout`; waits for the exit.
    pub fn stop(mut self, timeout: Duration) -> anyhow::Result<()> {
        self.stop_inner(timeout)
    }

    fn stop_inner(&mut self, timeout: Duration) -> anyhow::Result<()> {
        match self.child.take() {
            Some(mut child) => terminate(&mut child, timeout),
            None => Ok(()),
        }
    }
}

/// SIGTERM to `child`, SIGKILL after `timeout`; waits for the exit either way.
pub fn terminate(child: &mut Child, timeout: Duration) -> anyhow::Result<()> {
    let _ = nix::sys::signal::kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM);
    let deadline = Instant::now() + timeout;
    loop {
        if child.try_wait()?.is_some() {
            return Ok(());
        }
        if Instant::now() > deadline {
            child.kill()?;
            child.wait()?;
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

impl Drop for DirectApp {
    fn drop(&mut self) {
        let _ = self.stop_inner(Duration::from_secs(2));
    }
}

/// The answer to one [`get`].
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub body: String,
    /// From before connecting to the end of the response.
    pub took: Duration,
}

/// One `GET /` over a fresh HTTP/1.1 connection (`Connection: close`), with `Host: host`
/// if given; every step bounded by `timeout`.
pub fn get(addr: SocketAddr, host: Option<&str>, timeout: Duration) -> anyhow::Result<Reply> {
    let start = Instant::now();
    let mut s = TcpStream::connect_timeout(&addr, timeout)?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    s.set_nodelay(true)?;
    let host = host.map_or_else(|| addr.to_string(), str::to_string);
    write!(
        s,
        "GET / HTTP/1.1\r\nHost: {host}\r\nUser-Agent: wisp-bench\r\nConnection: close\r\n\r\n"
    )?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf)?;
    let took = start.elapsed();
    let text = String::from_utf8_lossy(&buf);
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| anyhow::anyhow!("no HTTP status from {addr}: {text:?}"))?;
    let body = text
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    Ok(Reply { status, body, took })
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPORT: &str = "Running 10s test @ http://127.0.0.1:8080/
  2 threads and 50 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency   512.34us  200.00us   8.12ms   90.00%
    Req/Sec    48.01k     2.10k   52.00k    70.00%
  Latency Distribution
     50%  450.00us
     75%  600.00us
     90%  800.00us
     99%    1.50ms
  955000 requests in 10.00s, 110.00MB read
  Socket errors: connect 0, read 2, write 0, timeout 1
  Non-2xx or 3xx responses: 7
Requests/sec:  95500.12
Transfer/sec:     11.00MB
";

    #[test]
    fn parses_a_report() {
        let r = parse_wrk(REPORT).unwrap();
        assert_eq!(r.requests, 955_000);
        assert_eq!(r.elapsed, Duration::from_secs(10));
        assert!((r.rps - 95500.12).abs() < 1e-6);
        assert_eq!(r.p50, Duration::from_micros(450));
        assert_eq!(r.p99, Duration::from_micros(1500));
        assert_eq!(r.non_2xx, 7);
        assert_eq!(r.socket_errors, 3);
        assert!(parse_wrk("garbage").is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(
            parse_wrk_duration("45.00us"),
            Some(Duration::from_micros(45))
        );
        assert_eq!(parse_wrk_duration("2.00s"), Some(Duration::from_secs(2)));
        assert_eq!(parse_wrk_duration("1.00m"), Some(Duration::from_secs(60)));
        assert_eq!(parse_wrk_duration("3"), None);
    }

    #[test]
    fn wrk_command_line() {
        let run = WrkRun {
            threads: 1,
            connections: 1,
            duration: Duration::from_secs(10),
            host: Some("a.default.example.com".into()),
            url: "http://127.0.0.1:1/".into(),
        };
        assert_eq!(
            run.command_line(),
            "wrk -t1 -c1 -d10s --latency -H 'Host: a.default.example.com' http://127.0.0.1:1/"
        );
    }

    #[test]
    fn own_cpu_ticks() {
        assert!(cpu_ticks(std::process::id()).is_some());
        let (busy, total) = machine_ticks().unwrap();
        assert!(busy <= total);
    }
}
