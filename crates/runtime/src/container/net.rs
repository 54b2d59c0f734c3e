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
//! Links, addresses and routes are set in-process over netlink (`rtnetlink`). A namespace is
//! made as `ip netns add` makes one, without forking: a short-lived thread `unshare`s its
//! network namespace and bind-mounts it at `/var/run/netns/<name>`; a netlink socket opened
//! on that thread stays in the new namespace after the thread ends, so the replica's side
//! is configured through it. NAT is one `iptables` rule per platform. A replica's network
//! takes ~3 ms here (two `ip -batch` runs took 6–8 ms).

use std::{
    io,
    net::{IpAddr, Ipv4Addr},
    os::fd::AsRawFd,
    path::{Path, PathBuf},
    process::Stdio,
};

use futures_util::TryStreamExt;
use nix::{
    mount::{MntFlags, MsFlags, mount, umount2},
    sched::{CloneFlags, unshare},
};
use rtnetlink::{
    Handle, LinkBridge, LinkUnspec, LinkVeth, RouteMessageBuilder,
    packet_route::link::{InfoData, InfoVeth},
};
use tokio::process::Command;

/// Where named network namespaces live (iproute2's convention, which tools like `ip netns`
/// and `nsenter --net=` understand).
const NETNS_DIR: &str = "/var/run/netns";

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
        Path::new(NETNS_DIR).join(self.netns_name(n))
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
        let host = host_handle()?;
        let br = &self.bridge;
        if link_index(&host, br).await?.is_none() {
            host.link()
                .add(LinkBridge::new(br).build())
                .execute()
                .await
                .map_err(|e| netlink(&format!("creating bridge {br}"), e))?;
        }
        let index = link_index(&host, br)
            .await?
            .ok_or_else(|| io::Error::other(format!("bridge {br} vanished")))?;
        host.address()
            .add(index, IpAddr::V4(self.gateway()), self.prefix)
            .replace()
            .execute()
            .await
            .map_err(|e| netlink(&format!("address of {br}"), e))?;
        set_up(&host, index, br).await?;
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

    /// Whether this platform's bridge exists (left by an earlier run, say).
    pub async fn bridge_exists(&self) -> bool {
        match host_handle() {
            Ok(host) => matches!(link_index(&host, &self.bridge).await, Ok(Some(_))),
            Err(_) => false,
        }
    }

    /// Removes the bridge and the NAT rule (at shutdown, once no replica is left).
    pub async fn tear_down(&self) {
        let _ = run("iptables", &self.nat_rule("-D")).await;
        if let Ok(host) = host_handle() {
            delete_link(&host, &self.bridge).await;
        }
    }

    /// A replica's namespace, with `eth0` at host number `n` on the bridge and `lo` up.
    pub async fn add_sandbox(&self, n: u32) -> io::Result<()> {
        // A leftover of the same name (a failed earlier attempt) would make creation fail.
        self.remove_sandbox(n).await;
        let (veth, path) = (self.veth_name(n), self.netns_path(n));
        let inside = new_netns(path.clone()).await?;
        let configured = self.configure(n, &inside, &veth).await;
        if configured.is_err() {
            self.remove_sandbox(n).await;
        }
        configured
    }

    async fn configure(&self, n: u32, inside: &Handle, veth: &str) -> io::Result<()> {
        let ctx = |what: &str| format!("{what} for {}", self.netns_name(n));
        // The pair is made from the host, its `eth0` end created right in the namespace and
        // the host end attached to the bridge and up, in one message: moving a link between
        // namespaces afterwards costs 20–40 ms here (the kernel waits for RCU grace periods).
        let host = host_handle()?;
        let bridge = link_index(&host, &self.bridge)
            .await?
            .ok_or_else(|| missing(&self.bridge))?;
        let netns = std::fs::File::open(self.netns_path(n))?;
        let peer = LinkUnspec::new_with_name("eth0")
            .setns_by_fd(netns.as_raw_fd())
            .build();
        host.link()
            .add(
                LinkVeth::new(veth, "eth0")
                    .set_info_data(InfoData::Veth(InfoVeth::Peer(peer)))
                    .controller(bridge)
                    .up()
                    .build(),
            )
            .execute()
            .await
            .map_err(|e| netlink(&ctx("veth pair"), e))?;
        let lo = link_index(inside, "lo")
            .await?
            .ok_or_else(|| missing("lo"))?;
        set_up(inside, lo, "lo").await?;
        let eth0 = link_index(inside, "eth0")
            .await?
            .ok_or_else(|| missing("eth0"))?;
        inside
            .address()
            .add(eth0, IpAddr::V4(self.host(n)), self.prefix)
            .execute()
            .await
            .map_err(|e| netlink(&ctx("eth0's address"), e))?;
        set_up(inside, eth0, "eth0").await?;
        inside
            .route()
            .add(
                RouteMessageBuilder::<Ipv4Addr>::new()
                    .gateway(self.gateway())
                    .output_interface(eth0)
                    .build(),
            )
            .execute()
            .await
            .map_err(|e| netlink(&ctx("default route"), e))
    }

    /// Deletes a replica's namespace (its veth pair goes with it once the kernel frees it)
    /// and the host side of the pair at once.
    pub async fn remove_sandbox(&self, n: u32) {
        if let Ok(host) = host_handle() {
            delete_link(&host, &self.veth_name(n)).await;
        }
        let path = self.netns_path(n);
        let _ = umount2(&path, MntFlags::MNT_DETACH);
        let _ = tokio::fs::remove_file(&path).await;
    }

    /// Host numbers of every namespace of this platform that exists now.
    pub async fn existing_sandboxes(&self) -> Vec<u32> {
        let prefix = format!("{}-", self.bridge);
        let mut found = Vec::new();
        let Ok(mut dir) = tokio::fs::read_dir(NETNS_DIR).await else {
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

/// A netlink connection in wisp's own network namespace. A new one per use: the socket
/// belongs to the namespace of the thread that opens it, and this runs on tokio's workers,
/// which never leave the host's.
fn host_handle() -> io::Result<Handle> {
    let (connection, handle, _) = rtnetlink::new_connection()?;
    tokio::spawn(connection);
    Ok(handle)
}

/// Creates a named network namespace at `path` and returns a netlink connection inside it.
async fn new_netns(path: PathBuf) -> io::Result<Handle> {
    tokio::fs::create_dir_all(NETNS_DIR).await?;
    // The thread's own network namespace changes; it ends right after, so no other work
    // ever runs in it. It enters the runtime only to register the socket with its reactor.
    let runtime = tokio::runtime::Handle::current();
    let made = std::thread::spawn(move || -> io::Result<_> {
        let _runtime = runtime.enter();
        unshare(CloneFlags::CLONE_NEWNET).map_err(io::Error::from)?;
        std::fs::File::create(&path)?;
        mount(
            Some("/proc/thread-self/ns/net"),
            &path,
            None::<&str>,
            MsFlags::MS_BIND,
            None::<&str>,
        )
        .map_err(|e| io::Error::other(format!("bind-mounting {}: {e}", path.display())))?;
        rtnetlink::new_connection()
    })
    .join()
    .map_err(|_| io::Error::other("the namespace thread panicked"))??;
    let (connection, handle, _) = made;
    tokio::spawn(connection);
    Ok(handle)
}

async fn link_index(handle: &Handle, name: &str) -> io::Result<Option<u32>> {
    let mut links = handle.link().get().match_name(name.to_string()).execute();
    match links.try_next().await {
        Ok(Some(link)) => Ok(Some(link.header.index)),
        Ok(None) => Ok(None),
        // The kernel answers ENODEV for a name it does not know.
        Err(rtnetlink::Error::NetlinkError(e)) if e.raw_code() == -19 => Ok(None),
        Err(e) => Err(netlink(&format!("looking up {name}"), e)),
    }
}

async fn set_up(handle: &Handle, index: u32, name: &str) -> io::Result<()> {
    handle
        .link()
        .set(LinkUnspec::new_with_index(index).up().build())
        .execute()
        .await
        .map_err(|e| netlink(&format!("setting {name} up"), e))
}

async fn delete_link(handle: &Handle, name: &str) {
    if let Ok(Some(index)) = link_index(handle, name).await {
        let _ = handle.link().del(index).execute().await;
    }
}

fn netlink(what: &str, e: rtnetlink::Error) -> io::Error {
    io::Error::other(format!("{what}: {e}"))
}

fn missing(name: &str) -> io::Error {
    io::Error::other(format!("link {name} is missing"))
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
