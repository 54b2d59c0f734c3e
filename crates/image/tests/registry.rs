//! Pull, resolve, auth and platform selection against a real `docker-registry` on loopback.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use common::{Registry, image_of, noise};
use wisp_image::{ErrorKind, Limits, RegistryOptions, Store, registry};

fn no_progress(_: wisp_image::Progress) {}

fn skip_default() -> HashSet<String> {
    ["kind.local", "ko.local", "dev.local"]
        .map(String::from)
        .into()
}

#[tokio::test]
async fn pull_unpack_and_tag_moves() {
    let reg = Registry::start(None);
    let src = tempfile::tempdir().unwrap();
    let src = Store::open(src.path()).unwrap();
    let opts = RegistryOptions::default();
    let v1 = image_of(
        &src,
        &[("bin/app", b"one"), ("etc/msg", b"v1")],
        "amd64",
        Some("local/app:v1"),
    );
    let remote = format!("{}/test/app:latest", reg.addr);
    registry::push(&src, "local/app:v1", &remote, &opts)
        .await
        .unwrap();

    let dst_dir = tempfile::tempdir().unwrap();
    let dst = Store::open(dst_dir.path()).unwrap();
    let resolved = registry::resolve(
        &dst,
        &remote,
        &skip_default(),
        Duration::from_secs(5),
        &opts,
    )
    .await
    .unwrap();
    assert_eq!(resolved, format!("{}/test/app@{v1}", reg.addr));

    let seen = std::sync::Mutex::new(Vec::new());
    let pulled = registry::pull(&dst, &resolved, &opts, &|p| seen.lock().unwrap().push(p))
        .await
        .unwrap();
    assert_eq!(pulled.manifest_digest, v1);
    let last = *seen.lock().unwrap().last().unwrap();
    assert_eq!(last.done, last.total);
    assert!(last.total > 0);
    let prepared = dst.prepare(&resolved, Limits::default()).unwrap();
    assert_eq!(
        std::fs::read(prepared.rootfs.join("etc/msg")).unwrap(),
        b"v1"
    );
    assert_eq!(prepared.config.entrypoint, vec!["/bin/app".to_string()]);

    // The tag moves: resolution follows it, the old digest still pulls.
    let v2 = image_of(
        &src,
        &[("bin/app", b"two"), ("etc/msg", b"v2")],
        "amd64",
        Some("local/app:v2"),
    );
    registry::push(&src, "local/app:v2", &remote, &opts)
        .await
        .unwrap();
    let again = registry::resolve(
        &dst,
        &remote,
        &skip_default(),
        Duration::from_secs(5),
        &opts,
    )
    .await
    .unwrap();
    assert_eq!(again, format!("{}/test/app@{v2}", reg.addr));
    let fresh_dir = tempfile::tempdir().unwrap();
    let fresh = Store::open(fresh_dir.path()).unwrap();
    let old = registry::pull(&fresh, &resolved, &opts, &no_progress)
        .await
        .unwrap();
    assert_eq!(old.manifest_digest, v1);
    let rootfs = fresh.prepare(&resolved, Limits::default()).unwrap().rootfs;
    assert_eq!(std::fs::read(rootfs.join("etc/msg")).unwrap(), b"v1");
}

#[tokio::test]
async fn skip_list_and_digest_references_are_returned_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let opts = RegistryOptions::default();
    for image in [
        "ko.local/app:latest",
        &format!("ghcr.io/x/y@sha256:{}", "a".repeat(64)),
    ] {
        let r = registry::resolve(
            &store,
            image,
            &skip_default(),
            Duration::from_secs(1),
            &opts,
        )
        .await
        .unwrap();
        assert_eq!(r, image);
    }
    // A locally tagged image resolves without any registry (this one does not exist).
    let d = image_of(
        &store,
        &[("bin/app", b"x")],
        "amd64",
        Some("gcr.io/knative-samples/helloworld:latest"),
    );
    let r = registry::resolve(
        &store,
        "gcr.io/knative-samples/helloworld",
        &skip_default(),
        Duration::from_secs(1),
        &opts,
    )
    .await
    .unwrap();
    assert_eq!(r, format!("gcr.io/knative-samples/helloworld@{d}"));
}

#[tokio::test]
async fn manifest_unknown_and_unreachable() {
    let reg = Registry::start(None);
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let opts = RegistryOptions::default();
    let e = registry::pull(
        &store,
        &format!("{}/nope/app:v9", reg.addr),
        &opts,
        &no_progress,
    )
    .await
    .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    let e = registry::resolve(
        &store,
        &format!("{}/nope/app:v9", reg.addr),
        &HashSet::new(),
        Duration::from_secs(5),
        &opts,
    )
    .await
    .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    // A closed loopback port: a network error, not a hang.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let e = registry::pull(
        &store,
        &format!("127.0.0.1:{port}/x:1"),
        &opts,
        &no_progress,
    )
    .await
    .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Network, "{e}");
}

#[tokio::test]
async fn basic_auth_from_docker_config() {
    let reg = Registry::start(Some(("wisp", "s3cret")));
    let src_dir = tempfile::tempdir().unwrap();
    let src = Store::open(src_dir.path()).unwrap();
    image_of(
        &src,
        &[("bin/app", b"private")],
        "amd64",
        Some("local/private:1"),
    );
    let remote = format!("{}/team/private:1", reg.addr);

    let anonymous = RegistryOptions {
        docker_config: Some(reg.dir.path().join("missing.json")),
        ..Default::default()
    };
    let e = registry::push(&src, "local/private:1", &remote, &anonymous)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unauthorized, "{e}");

    let with_creds = RegistryOptions {
        docker_config: Some(reg.docker_config("wisp", "s3cret")),
        ..Default::default()
    };
    registry::push(&src, "local/private:1", &remote, &with_creds)
        .await
        .unwrap();

    let dst_dir = tempfile::tempdir().unwrap();
    let dst = Store::open(dst_dir.path()).unwrap();
    let e = registry::pull(&dst, &remote, &anonymous, &no_progress)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unauthorized, "{e}");
    let e = registry::resolve(
        &dst,
        &remote,
        &HashSet::new(),
        Duration::from_secs(5),
        &anonymous,
    )
    .await
    .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unauthorized, "{e}");
    let wrong = RegistryOptions {
        docker_config: Some(reg.docker_config("wisp", "wrong")),
        ..Default::default()
    };
    let e = registry::pull(&dst, &remote, &wrong, &no_progress)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unauthorized, "{e}");

    let with_creds = RegistryOptions {
        docker_config: Some(reg.docker_config("wisp", "s3cret")),
        ..Default::default()
    };
    registry::pull(&dst, &remote, &with_creds, &no_progress)
        .await
        .unwrap();
    let rootfs = dst.prepare(&remote, Limits::default()).unwrap().rootfs;
    assert_eq!(std::fs::read(rootfs.join("bin/app")).unwrap(), b"private");
}

/// Stores an index over `manifests` (digest, arch) and names it.
fn index_of(store: &Store, manifests: &[(&str, &str)], name: &str) -> String {
    let entries: Vec<_> = manifests
        .iter()
        .map(|(d, arch)| {
            let size = std::fs::metadata(store.blob_path(d).unwrap()).unwrap().len();
            serde_json::json!({"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": d, "size": size,
                               "platform": {"os": "linux", "architecture": arch}})
        })
        .collect();
    let bytes = serde_json::to_vec(&serde_json::json!({"schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": entries}))
    .unwrap();
    let digest = wisp_image::store::sha256_digest(&bytes);
    store.put_blob(&bytes, &digest, "index").unwrap();
    store.tag(name, &digest).unwrap();
    digest
}

#[tokio::test]
async fn multi_platform_index_picks_this_machine() {
    let reg = Registry::start(None);
    let src_dir = tempfile::tempdir().unwrap();
    let src = Store::open(src_dir.path()).unwrap();
    let arch = wisp_image::platform::current_arch();
    let other = if arch == "amd64" { "arm64" } else { "amd64" };
    let mine = image_of(&src, &[("etc/arch", arch.as_bytes())], arch, None);
    let theirs = image_of(&src, &[("etc/arch", other.as_bytes())], other, None);
    let idx = index_of(&src, &[(&theirs, other), (&mine, arch)], "local/multi:1");
    let remote = format!("{}/multi/app:1", reg.addr);
    let opts = RegistryOptions::default();
    registry::push(&src, "local/multi:1", &remote, &opts)
        .await
        .unwrap();

    let dst_dir = tempfile::tempdir().unwrap();
    let dst = Store::open(dst_dir.path()).unwrap();
    let resolved = registry::resolve(
        &dst,
        &remote,
        &HashSet::new(),
        Duration::from_secs(5),
        &opts,
    )
    .await
    .unwrap();
    assert_eq!(
        resolved,
        format!("{}/multi/app@{idx}", reg.addr),
        "the index's own digest"
    );
    let pulled = registry::pull(&dst, &remote, &opts, &no_progress)
        .await
        .unwrap();
    assert_eq!(pulled.digest, idx);
    assert_eq!(pulled.manifest_digest, mine);
    assert!(
        !dst.has_blob(&theirs),
        "only this platform's manifest is fetched"
    );
    let rootfs = dst.prepare(&remote, Limits::default()).unwrap().rootfs;
    assert_eq!(
        std::fs::read(rootfs.join("etc/arch")).unwrap(),
        arch.as_bytes()
    );

    // An index without this machine's platform: a clear error listing what it has.
    index_of(&src, &[(&theirs, other)], "local/foreign:1");
    let remote = format!("{}/foreign/app:1", reg.addr);
    registry::push(&src, "local/foreign:1", &remote, &opts)
        .await
        .unwrap();
    let e = registry::pull(&dst, &remote, &opts, &no_progress)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::UnsupportedPlatform);
    assert_eq!(
        e.to_string(),
        format!("no matching platform (linux/{arch}) in {remote} (has: linux/{other})")
    );
}

/// Reports the time from pull start to an unpacked rootfs for a ~10 MB image.
#[tokio::test]
async fn pull_to_rootfs_time_for_10mb_image() {
    let reg = Registry::start(None);
    let src_dir = tempfile::tempdir().unwrap();
    let src = Store::open(src_dir.path()).unwrap();
    let big = noise(10 << 20, 7);
    image_of(
        &src,
        &[("bin/app", b"x"), ("data/blob", &big)],
        "amd64",
        Some("local/big:1"),
    );
    let remote = format!("{}/big/app:1", reg.addr);
    let opts = RegistryOptions::default();
    registry::push(&src, "local/big:1", &remote, &opts)
        .await
        .unwrap();

    let dst_dir = tempfile::tempdir().unwrap();
    let dst = Store::open(dst_dir.path()).unwrap();
    let start = Instant::now();
    registry::pull(&dst, &remote, &opts, &no_progress)
        .await
        .unwrap();
    let pulled = start.elapsed();
    let rootfs = dst.prepare(&remote, Limits::default()).unwrap().rootfs;
    let total = start.elapsed();
    assert_eq!(
        std::fs::metadata(rootfs.join("data/blob")).unwrap().len(),
        10 << 20
    );
    eprintln!("10 MiB image: pull {pulled:?}, pull + unpack {total:?}");
}
