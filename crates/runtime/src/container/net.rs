//! Pod networking: one bridge per platform, one network namespace and veth pair per replica,
//! outbound traffic masqueraded.
//!
//! The data plane reaches a replica at `<its IP>:<containerPort>` straight through the
//! kernel (host → bridge → veth → the replica's `eth0`): no helper process, no copy. Names
//! derive from the bridge's, so that everything one platform created can be found again
//! after a `kill -9` and nothing of another platform (another test) is touched:
//! namespace `<bridge>-<n>`, host-side veth `<bridge>v<n>`, where `n` is the replica's host
//! number in the subnet.
//!
//! Links and addresses are set with iproute2's `ip` (two short `ip -batch` runs per replica,
//! measured below 10 ms together here); NAT with one `iptables` rule per platform.

use std::{
    io,
    net::Ipv4Addr,
    path::{Path, PathBuf},
    process::Stdio,
};

use tokio::{io::AsyncWriteExt, process::Command};

/// A platform's subnet and bridge.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Network {
    pub bridge: String,
    pub base: Ipv4Addr,
    pub prefix: u8,
}

/// Longest bridge name: `<bridge>v<n>` must fit Linux's 15-byte interface names with a
/// host number of up to 6 digits.
pub(crate) const MAX_BRIDGE_NAME: usize = 8;

impl Network {
    pub fn gateway(&self) -> Ipv4Addr {
        self.host(1)
    }

    /// The `n`th address of the subnet.
    pub fn host(&self, n: u32) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.base) + n)
    }

    /// Host numbers replicas may use: after the gateway, before the broadcast address.
    pub fn replica_hosts(&self) -> std::ops::Range<u32> {
        let size = 1u32 << (32 - u32::from(self.prefix));
        2..size.saturating_sub(1)
    }

    /// The host number of `ip` in this subnet.
    pub fn host_number(&self, ip: Ipv4Addr) -> Option<u32> {
        let n = u32::from(ip).checked_sub(u32::from(self.base))?;
        self.replica_hosts().contains(&n).then_some(n)
    }

    pub fn netns_name(&self, n: u32) -> String {
        format!("{}-{n}", self.bridge)
    }

    pub fn netns_path(&self, n: u32) -> PathBuf {
        Path::new("/var/run/netns").join(self.netns_name(n))
    }

    fn veth_name(&self, n: u32) -> String {
        format!("{}v{n}", self.bridge)
    }

    fn cidr(&self) -> String {
        format!("{}/{}", self.base, self.prefix)
    }

    /// The bridge with the gateway address, forwarding on, and outbound NAT for the subnet.
    /// Idempotent: an earlier run's bridge and rule are reused.
    pub async fn set_up(&self) -> io::Result<()> {
        let br = &self.bridge;
        if !Path::new("/sys/class/net").join(br).exists() {
            ip(None, &format!("link add {br} type bridge\n")).await?;
        }
        ip(
            None,
            &format!(
                "addr replace {}/{} dev {br}\nlink set {br} up\n",
                self.gateway(),
                self.prefix
            ),
        )
        .await?;
        tokio::fs::write("/proc/sys/net/ipv4/ip_forward", "1").await?;
        if run("iptables", &self.nat_rule("-C")).await.is_err() {
            run("iptables", &self.nat_rule("-A")).await?;
        }
        Ok(())
    }

    /// `iptables -t nat <op> …`: masquerade what the subnet sends anywhere but the bridge.
    fn nat_rule(&self, op: &str) -> Vec<String> {
        let cidr = self.cidr();
        [
            // Wait for the xtables lock rather than fail when another platform (a parallel
            // test, another wisp) changes rules at the same moment.
            "-w",
            "-t",
            "nat",
            op,
            "POSTROUTING",
            "-s",
            &cidr,
            "!",
            "-o",
            &self.bridge,
            "-j",
            "MASQUERADE",
        ]
        .map(String::from)
        .to_vec()
    }

    /// Removes the bridge and the NAT rule (at shutdown, once no replica is left).
    pub async fn tear_down(&self) {
        let _ = run("iptables", &self.nat_rule("-D")).await;
        let _ = ip(None, &format!("link del {}\n", self.bridge)).await;
    }

    /// A replica's namespace, with `eth0` at host number `n` on the bridge and `lo` up.
    pub async fn add_sandbox(&self, n: u32) -> io::Result<()> {
        let (ns, veth, br) = (self.netns_name(n), self.veth_name(n), &self.bridge);
        // A leftover of the same name (a failed earlier attempt) would make `add` fail.
        self.remove_sandbox(n).await;
        ip(
            None,
            &format!(
                "netns add {ns}\nlink add {veth} type veth peer name eth0 netns {ns}\n\
                 link set {veth} master {br} up\n"
            ),
        )
        .await?;
        ip(
            Some(&ns),
            &format!(
                "link set lo up\naddr add {}/{} dev eth0\nlink set eth0 up\n\
                 route add default via {}\n",
                self.host(n),
                self.prefix,
                self.gateway()
            ),
        )
        .await
    }

    /// Deletes a replica's namespace (its veth pair goes with it) and the host side of the
    /// pair should it linger.
    pub async fn remove_sandbox(&self, n: u32) {
        let _ = ip(None, &format!("netns del {}\n", self.netns_name(n))).await;
        if Path::new("/sys/class/net").join(self.veth_name(n)).exists() {
            let _ = ip(None, &format!("link del {}\n", self.veth_name(n))).await;
        }
    }

    /// Host numbers of every namespace of this platform that exists now.
    pub async fn existing_sandboxes(&self) -> Vec<u32> {
        let prefix = format!("{}-", self.bridge);
        let mut found = Vec::new();
        let Ok(mut dir) = tokio::fs::read_dir("/var/run/netns").await else {
            return found;
        };
        while let Ok(Some(entry)) = dir.next_entry().await {
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some(n) = name.strip_prefix(&prefix).and_then(|n| n.parse().ok()) {
                found.push(n);
            }
        }
        found
    }
}

/// Parses `10.88.0.0/16`.
pub(crate) fn parse_subnet(s: &str) -> Option<(Ipv4Addr, u8)> {
    let (ip, prefix) = s.split_once('/')?;
    let ip: Ipv4Addr = ip.parse().ok()?;
    let prefix: u8 = prefix.parse().ok()?;
    if !(8..=30).contains(&prefix) || u32::from(ip) & !(u32::MAX << (32 - prefix)) != 0 {
        return None;
    }
    Some((ip, prefix))
}

/// Runs `ip [-n ns] -batch -` with `commands` on stdin.
async fn ip(netns: Option<&str>, commands: &str) -> io::Result<()> {
    let mut cmd = Command::new("ip");
    if let Some(ns) = netns {
        cmd.args(["-n", ns]);
    }
    cmd.args(["-batch", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd.spawn().map_err(|e| named("ip", e))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(commands.as_bytes()).await?;
    }
    let out = child.wait_with_output().await?;
    if out.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "ip {}: {}",
            commands.trim().replace('\n', "; "),
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

async fn run(program: &str, args: &[String]) -> io::Result<()> {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| named(program, e))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "{program} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

fn named(program: &str, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("running {program}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subnets_and_hosts() {
        assert_eq!(
            parse_subnet("10.88.0.0/16"),
            Some((Ipv4Addr::new(10, 88, 0, 0), 16))
        );
        assert_eq!(parse_subnet("10.88.0.1/16"), None, "host bits set");
        assert_eq!(parse_subnet("10.88.0.0/31"), None);
        assert_eq!(parse_subnet("nonsense"), None);
        let net = Network {
            bridge: "wisp0".into(),
            base: Ipv4Addr::new(10, 1, 2, 0),
            prefix: 28,
        };
        assert_eq!(net.gateway(), Ipv4Addr::new(10, 1, 2, 1));
        assert_eq!(net.replica_hosts(), 2..15);
        assert_eq!(net.host_number(Ipv4Addr::new(10, 1, 2, 14)), Some(14));
        assert_eq!(
            net.host_number(Ipv4Addr::new(10, 1, 2, 15)),
            None,
            "broadcast"
        );
        assert_eq!(
            (net.netns_name(3), net.veth_name(3)),
            ("wisp0-3".into(), "wisp0v3".into())
        );
    }
}
