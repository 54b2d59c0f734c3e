//! Sandboxes made ahead of demand: when a revision's replicas go to zero, the container
//! platform readies the sandbox its next replica will need — network namespace, `/etc`
//! files, overlay root, cgroups — and parks the serving container's init right before the
//! app's `execve` (`native::Parked`). The request that wakes the revision then waits only for
//! the app itself: the sandbox is taken as it is, the init told the replica's hostname and
//! let go.
//!
//! The bookkeeping is here ([`Standbys`]): which revision holds which address (a replica of
//! another revision must not get it), in the order they were made, and at most
//! [`MAX_STANDBYS`] of them — revisions that ran recently are the ones likely to be asked
//! again, and a parked sandbox holds a process, a namespace and a mount. A new standby
//! pushes out the oldest only if that one waited [`MIN_AGE`] already: when many revisions
//! go to zero together (100 at once, say) the first few get one and the rest none, instead
//! of each making a sandbox that the next removes while the machine is busiest. Making,
//! taking and dropping them is `ContainerLauncher`'s (`container/mod.rs`).

use std::{
    collections::{HashMap, HashSet, VecDeque},
    net::SocketAddr,
    sync::Arc,
    time::{Duration, Instant},
};

use tokio::sync::{Mutex, OwnedMutexGuard};
use wisp_api::serving::PodSpec;

use crate::RevisionKey;

/// How many revisions at zero have a sandbox readied at once (the most recent ones).
pub(super) const MAX_STANDBYS: usize = 8;

/// How long a standby is kept before a newer one may push it out.
pub(super) const MIN_AGE: Duration = Duration::from_secs(60);

/// A standby's content: empty while it is being made (whoever takes it waits for the lock),
/// and if making it failed.
pub(super) type Slot<T> = Arc<Mutex<Option<T>>>;

/// The standbys of a platform, by revision.
pub(super) struct Standbys<T> {
    by_key: HashMap<RevisionKey, (SocketAddr, Slot<T>)>,
    /// Oldest first, with when each was reserved.
    order: VecDeque<(RevisionKey, Instant)>,
    /// Addresses of standbys pushed out or forgotten whose sandbox is still being removed:
    /// no replica may get one until its namespace is gone ([`retired`](Self::retired)).
    retiring: HashSet<SocketAddr>,
}

impl<T> Default for Standbys<T> {
    fn default() -> Self {
        Self {
            by_key: HashMap::new(),
            order: VecDeque::new(),
            retiring: HashSet::new(),
        }
    }
}

impl<T> Standbys<T> {
    /// The address reserved for `key`'s next replica, if it has a standby.
    pub fn address_of(&self, key: &RevisionKey) -> Option<SocketAddr> {
        self.by_key.get(key).map(|(a, _)| *a)
    }

    /// Addresses reserved for revisions other than `key`, and those still being freed.
    pub fn reserved_except<'a>(
        &'a self,
        key: &'a RevisionKey,
    ) -> impl Iterator<Item = SocketAddr> + 'a {
        self.by_key
            .iter()
            .filter(move |(k, _)| *k != key)
            .map(|(_, (a, _))| *a)
            .chain(self.retiring.iter().copied())
    }

    /// Reserves `address` for a standby of `key` (at `now`): returns the new slot, locked
    /// (the maker fills it and lets go), and the standby pushed out to stay within
    /// [`MAX_STANDBYS`], if any, which the caller must dispose of (its address stays held
    /// until [`retired`](Self::retired)). None if `key` has one already, or if every
    /// standby is younger than [`MIN_AGE`].
    #[allow(clippy::type_complexity)]
    pub fn reserve(
        &mut self,
        key: &RevisionKey,
        address: SocketAddr,
        now: Instant,
    ) -> Option<(OwnedMutexGuard<Option<T>>, Option<(SocketAddr, Slot<T>)>)> {
        if self.by_key.contains_key(key) {
            return None;
        }
        let mut evicted = None;
        if self.order.len() >= MAX_STANDBYS {
            let (oldest, since) = self.order.front()?.clone();
            if now.saturating_duration_since(since) < MIN_AGE {
                return None;
            }
            if let Some(gone) = self.detach(&oldest) {
                self.retiring.insert(gone.0);
                evicted = Some(gone);
            }
        }
        let slot: Slot<T> = Arc::new(Mutex::new(None));
        let guard = slot.clone().try_lock_owned().ok()?;
        self.by_key.insert(key.clone(), (address, slot));
        self.order.push_back((key.clone(), now));
        Some((guard, evicted))
    }

    /// Takes `key`'s standby for a replica at `address` (the one [`address_of`] gave it):
    /// no longer reserved, the caller owns it. None if it has none, or one for another
    /// address (two replicas started at once: the first took it).
    pub fn take(&mut self, key: &RevisionKey, address: SocketAddr) -> Option<Slot<T>> {
        match self.by_key.get(key) {
            Some((a, _)) if *a == address => self.detach(key).map(|(_, slot)| slot),
            _ => None,
        }
    }

    /// Removes `key`'s standby, to be disposed of by the caller: its address stays held
    /// until [`retired`](Self::retired).
    pub fn forget(&mut self, key: &RevisionKey) -> Option<(SocketAddr, Slot<T>)> {
        let gone = self.detach(key)?;
        self.retiring.insert(gone.0);
        Some(gone)
    }

    /// A disposed standby's address is free again.
    pub fn retired(&mut self, address: SocketAddr) {
        self.retiring.remove(&address);
    }

    /// Removes `key`'s standby if it is still `slot` (its maker failed, and removed what
    /// it made; a newer one stays).
    pub fn release(&mut self, key: &RevisionKey, slot: &Slot<T>) {
        if self
            .by_key
            .get(key)
            .is_some_and(|(_, s)| Arc::ptr_eq(s, slot))
        {
            self.detach(key);
        }
    }

    fn detach(&mut self, key: &RevisionKey) -> Option<(SocketAddr, Slot<T>)> {
        let gone = self.by_key.remove(key)?;
        self.order.retain(|(k, _)| k != key);
        Some(gone)
    }

    /// Every standby, for shutdown.
    pub fn drain(&mut self) -> Vec<Slot<T>> {
        self.order.clear();
        self.retiring.clear();
        self.by_key.drain().map(|(_, (_, s))| s).collect()
    }
}

/// Whether a revision's replica can be readied ahead, as its sandbox would be made when a
/// request comes: one container (no sidecars, no init containers, which run first, per
/// sandbox) and nothing that is read when the container is created and could change while
/// it waits — env from Secrets, ConfigMaps or the downward API (which also names the pod),
/// volumes.
pub(super) fn parkable(pod: &PodSpec) -> bool {
    let [c] = pod.containers.as_slice() else {
        return false;
    };
    pod.init_containers.is_empty()
        && pod.volumes.is_empty()
        && c.env_from.is_empty()
        && c.env.iter().all(|e| e.value_from.is_none())
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, SocketAddr};

    use wisp_api::serving::{Container, EnvVar, EnvVarSource, PodSpec, Volume};

    use super::*;

    fn key(name: &str) -> RevisionKey {
        RevisionKey {
            namespace: "default".into(),
            name: name.into(),
        }
    }

    fn addr(n: u8) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::new(10, 0, 0, n), 8080))
    }

    #[test]
    fn the_oldest_standbys_make_way_and_reserved_addresses_are_kept_from_others() {
        let mut s: Standbys<u32> = Standbys::default();
        let t0 = Instant::now();
        let mut guards = Vec::new();
        for i in 0..MAX_STANDBYS {
            let at = t0 + Duration::from_secs(i as u64);
            let (g, evicted) = s
                .reserve(&key(&format!("r{i}")), addr(i as u8 + 2), at)
                .unwrap();
            assert!(evicted.is_none());
            guards.push(g);
        }
        // One more while all are young: none is pushed out, the new one gets nothing.
        let young = t0 + MIN_AGE - Duration::from_millis(1);
        assert!(s.reserve(&key("new"), addr(100), young).is_none());
        // Once the oldest has waited long enough it goes, handed back to be disposed of;
        // its address stays held until it is.
        let (_g, evicted) = s.reserve(&key("new"), addr(100), t0 + MIN_AGE).unwrap();
        assert_eq!(evicted.map(|e| e.0), Some(addr(2)));
        assert_eq!(s.address_of(&key("r0")), None);
        assert!(s.reserved_except(&key("new")).any(|a| a == addr(2)));
        s.retired(addr(2));
        assert!(!s.reserved_except(&key("new")).any(|a| a == addr(2)));
        assert_eq!(s.address_of(&key("new")), Some(addr(100)));
        // A revision has one at most.
        assert!(s.reserve(&key("new"), addr(101), t0 + MIN_AGE).is_none());
        let others: Vec<SocketAddr> = s.reserved_except(&key("new")).collect();
        assert_eq!(others.len(), MAX_STANDBYS - 1);
        assert!(!others.contains(&addr(100)));
        assert!(others.contains(&addr(3)));
    }

    #[test]
    fn a_standby_is_taken_only_for_its_address_and_released_only_by_its_maker() {
        let mut s: Standbys<u32> = Standbys::default();
        let (guard, _) = s.reserve(&key("a"), addr(2), Instant::now()).unwrap();
        let slot = OwnedMutexGuard::mutex(&guard).clone();
        // Another address: a second replica started at once; the first keeps it.
        assert!(s.take(&key("a"), addr(3)).is_none());
        assert_eq!(s.address_of(&key("a")), Some(addr(2)));
        // A forgotten standby's address is held until it is disposed of.
        let (gone, _) = s.forget(&key("a")).unwrap();
        assert_eq!(gone, addr(2));
        assert_eq!(
            s.reserved_except(&key("b")).collect::<Vec<_>>(),
            vec![addr(2)]
        );
        s.retired(gone);
        // A failed maker releases its own reservation, not a newer one.
        let (_g2, _) = s.reserve(&key("a"), addr(4), Instant::now()).unwrap();
        s.release(&key("a"), &slot);
        assert_eq!(s.address_of(&key("a")), Some(addr(4)));
        let taken = s.take(&key("a"), addr(4));
        assert!(taken.is_some());
        assert_eq!(s.address_of(&key("a")), None);
        assert!(s.drain().is_empty());
    }

    #[tokio::test]
    async fn whoever_takes_a_standby_waits_for_its_maker() {
        let mut s: Standbys<u32> = Standbys::default();
        let (mut guard, _) = s.reserve(&key("a"), addr(2), Instant::now()).unwrap();
        let slot = s.take(&key("a"), addr(2)).unwrap();
        let taker = tokio::spawn(async move { slot.lock().await.take() });
        tokio::task::yield_now().await;
        *guard = Some(7);
        drop(guard);
        assert_eq!(taker.await.unwrap(), Some(7));
    }

    #[test]
    fn only_a_lone_container_whose_config_cannot_change_while_it_waits_is_parked() {
        let c = || Container {
            image: "hello".into(),
            ..Default::default()
        };
        let pod = |containers: Vec<Container>| PodSpec {
            containers,
            ..Default::default()
        };
        let with_env = |source: Option<EnvVarSource>| {
            pod(vec![Container {
                env: vec![EnvVar {
                    name: "X".into(),
                    value: source.is_none().then(|| "1".into()),
                    value_from: source,
                    ..Default::default()
                }],
                ..c()
            }])
        };
        let cases: Vec<(&str, PodSpec, bool)> = vec![
            ("one container", pod(vec![c()]), true),
            ("plain env", with_env(None), true),
            ("a sidecar", pod(vec![c(), c()]), false),
            (
                "an init container",
                PodSpec {
                    init_containers: vec![c()],
                    ..pod(vec![c()])
                },
                false,
            ),
            (
                "a volume",
                PodSpec {
                    volumes: vec![Volume::default()],
                    ..pod(vec![c()])
                },
                false,
            ),
            (
                "env from a source",
                with_env(Some(EnvVarSource::default())),
                false,
            ),
            (
                "envFrom",
                pod(vec![Container {
                    env_from: vec![serde_json::json!({"secretRef": {"name": "s"}})],
                    ..c()
                }]),
                false,
            ),
        ];
        for (what, pod, want) in cases {
            assert_eq!(parkable(&pod), want, "{what}");
        }
    }
}
