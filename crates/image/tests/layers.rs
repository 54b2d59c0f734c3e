//! Unpacking hostile layers, archives (docker save, OCI layout) and prune.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::HashSet;
use std::io::Write;

use common::{files_under, image_of, tar_of};
use wisp_image::pack::header;
use wisp_image::unpack::{Budget, apply_layer};
use wisp_image::{ErrorKind, Limits, Store};

/// A tar entry with a raw name (tar's builder refuses `..`, which is the point here).
fn raw_entry(b: &mut Vec<u8>, name: &str, kind: tar::EntryType, link: Option<&str>, data: &[u8]) {
    let mut h = header(kind, 0o644, data.len() as u64);
    h.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
    if let Some(l) = link {
        h.as_old_mut().linkname[..l.len()].copy_from_slice(l.as_bytes());
    }
    h.set_cksum();
    b.extend_from_slice(h.as_bytes());
    b.extend_from_slice(data);
    b.resize(b.len().div_ceil(512) * 512, 0);
}

fn finish(mut b: Vec<u8>) -> Vec<u8> {
    b.extend_from_slice(&[0u8; 1024]);
    b
}

#[test]
fn escaping_layers_are_refused_and_nothing_lands_outside() {
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret"), "host").unwrap();
    let out = outside.path().display().to_string();
    let before = files_under(outside.path());

    // `../x`: refused, naming the layer.
    let work = tempfile::tempdir().unwrap();
    let root = work.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let mut b = Vec::new();
    raw_entry(&mut b, "../x", tar::EntryType::Regular, None, b"boom");
    let e = apply_layer(
        &finish(b)[..],
        &root,
        "application/vnd.oci.image.layer.v1.tar",
        "sha256:l1",
        &mut Budget::new(Limits::default()),
    )
    .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Layer);
    assert!(
        e.to_string().contains("sha256:l1") && e.to_string().contains(".."),
        "{e}"
    );
    assert!(!work.path().join("x").exists());

    // A symlink to an outside directory, then a write through it: lands inside the root.
    let mut b = Vec::new();
    raw_entry(&mut b, "a", tar::EntryType::Symlink, Some(&out), b"");
    raw_entry(&mut b, "a/passwd", tar::EntryType::Regular, None, b"pwned");
    apply_layer(
        &finish(b)[..],
        &root,
        "x",
        "sha256:l2",
        &mut Budget::new(Limits::default()),
    )
    .unwrap();
    assert!(!outside.path().join("passwd").exists());
    let inside = root.join(out.trim_start_matches('/')).join("passwd");
    assert_eq!(std::fs::read(inside).unwrap(), b"pwned");
    // A symlink replaced by a file: the file is written at the link's place, not through it.
    let mut b = Vec::new();
    raw_entry(
        &mut b,
        "b",
        tar::EntryType::Symlink,
        Some(&format!("{out}/secret")),
        b"",
    );
    raw_entry(&mut b, "b", tar::EntryType::Regular, None, b"over");
    apply_layer(
        &finish(b)[..],
        &root,
        "x",
        "sha256:l3",
        &mut Budget::new(Limits::default()),
    )
    .unwrap();
    assert_eq!(
        std::fs::read(outside.path().join("secret")).unwrap(),
        b"host"
    );

    // A hard link to an absolute host path: resolved in the root, where it does not exist.
    let mut b = Vec::new();
    raw_entry(
        &mut b,
        "h",
        tar::EntryType::Link,
        Some(&format!("{out}/secret")),
        b"",
    );
    let e = apply_layer(
        &finish(b)[..],
        &root,
        "x",
        "sha256:l4",
        &mut Budget::new(Limits::default()),
    )
    .unwrap_err();
    assert!(e.to_string().contains("sha256:l4"), "{e}");
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        std::fs::metadata(outside.path().join("secret"))
            .unwrap()
            .nlink(),
        1
    );
    // `..` in a hard link target.
    let mut b = Vec::new();
    raw_entry(
        &mut b,
        "h2",
        tar::EntryType::Link,
        Some("../../etc/passwd"),
        b"",
    );
    assert!(
        apply_layer(
            &finish(b)[..],
            &root,
            "x",
            "sha256:l5",
            &mut Budget::new(Limits::default())
        )
        .is_err()
    );

    // A device node is skipped.
    let mut b = Vec::new();
    raw_entry(&mut b, "dev/evil", tar::EntryType::Char, None, b"");
    apply_layer(
        &finish(b)[..],
        &root,
        "x",
        "sha256:l6",
        &mut Budget::new(Limits::default()),
    )
    .unwrap();
    assert!(!root.join("dev/evil").exists());

    assert_eq!(
        files_under(outside.path()),
        before,
        "nothing written outside the root"
    );
}

#[test]
fn whiteouts_opaque_dirs_links_and_modes() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let mut lower = tar::Builder::new(Vec::new());
    for (p, d) in [
        ("etc/a", "a"),
        ("etc/b", "b"),
        ("opq/old", "old"),
        ("bin/tool", "t"),
    ] {
        let mut h = header(tar::EntryType::Regular, 0o644, d.len() as u64);
        lower.append_data(&mut h, p, d.as_bytes()).unwrap();
    }
    let mut h = header(tar::EntryType::Regular, 0o4755, 1);
    lower.append_data(&mut h, "bin/suid", &b"s"[..]).unwrap();
    let mut h = header(tar::EntryType::Symlink, 0o777, 0);
    lower.append_link(&mut h, "lib", "usr/lib").unwrap();
    let lower = lower.into_inner().unwrap();
    let mut upper = tar::Builder::new(Vec::new());
    for p in ["etc/.wh.a", "opq/.wh..wh..opq", "opq/new"] {
        let mut h = header(tar::EntryType::Regular, 0o644, 0);
        upper.append_data(&mut h, p, &b""[..]).unwrap();
    }
    let mut h = header(tar::EntryType::Link, 0o644, 0);
    upper.append_link(&mut h, "bin/tool2", "bin/tool").unwrap();
    let mut h = header(tar::EntryType::Regular, 0o644, 2);
    upper.append_data(&mut h, "lib/x.so", &b"so"[..]).unwrap();
    let upper = upper.into_inner().unwrap();
    let layers = [
        wisp_image::pack::Layer::gzip(&lower).unwrap(),
        wisp_image::pack::Layer::gzip(&upper).unwrap(),
    ];
    wisp_image::pack::build_image(
        &store,
        &layers,
        serde_json::json!({}),
        "amd64",
        Some("t/w:1"),
    )
    .unwrap();
    let root = store.prepare("t/w:1", Limits::default()).unwrap().rootfs;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    assert!(!root.join("etc/a").exists());
    assert!(root.join("etc/b").exists());
    assert!(!root.join("opq/old").exists());
    assert!(root.join("opq/new").exists());
    assert_eq!(std::fs::metadata(root.join("bin/tool")).unwrap().nlink(), 2);
    assert_eq!(
        std::fs::metadata(root.join("bin/suid"))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777,
        0o4755
    );
    assert_eq!(std::fs::read(root.join("usr/lib/x.so")).unwrap(), b"so");
    assert!(
        std::fs::symlink_metadata(root.join("lib"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
}

#[test]
fn gzip_bomb_is_stopped_by_the_limit() {
    let zeros = vec![0u8; 64 << 20];
    let t = tar_of(&[("big", &zeros)]);
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    enc.write_all(&t).unwrap();
    let bomb = enc.finish().unwrap();
    assert!(bomb.len() < 1 << 20);
    let work = tempfile::tempdir().unwrap();
    let limits = Limits {
        max_bytes: 8 << 20,
        max_entries: 100,
    };
    let e = apply_layer(
        &bomb[..],
        work.path(),
        "application/vnd.oci.image.layer.v1.tar+gzip",
        "sha256:bomb",
        &mut Budget::new(limits),
    )
    .unwrap_err();
    assert!(
        e.to_string().contains("sha256:bomb") && e.to_string().contains("limit"),
        "{e}"
    );
    // Entry count too.
    let many: Vec<(String, Vec<u8>)> = (0..20).map(|i| (format!("f{i}"), vec![])).collect();
    let refs: Vec<(&str, &[u8])> = many
        .iter()
        .map(|(p, d)| (p.as_str(), d.as_slice()))
        .collect();
    let e = apply_layer(
        &tar_of(&refs)[..],
        work.path(),
        "x",
        "sha256:many",
        &mut Budget::new(Limits {
            max_bytes: 1 << 30,
            max_entries: 10,
        }),
    )
    .unwrap_err();
    assert!(e.to_string().contains("entries"), "{e}");
    // Garbage: an error naming the layer, no panic.
    let e = apply_layer(
        &b"\x1f\x8bnot gzip at all"[..],
        work.path(),
        "x",
        "sha256:junk",
        &mut Budget::new(Limits::default()),
    )
    .unwrap_err();
    assert!(e.to_string().contains("sha256:junk"), "{e}");
}

#[test]
fn docker_save_archive_loads() {
    let work = tempfile::tempdir().unwrap();
    let layer = tar_of(&[("bin/app", b"docker")]);
    let config = br#"{"architecture":"amd64","os":"linux","config":{"Cmd":["/bin/app"],"WorkingDir":"/srv","User":"1000","ExposedPorts":{"8080/tcp":{}}},"rootfs":{"type":"layers","diff_ids":[]}}"#;
    let manifest = br#"[{"Config":"abc.json","RepoTags":["hello:latest","gcr.io/knative-samples/autoscale-go:0.1"],"Layers":["l1/layer.tar"]}]"#;
    let mut b = tar::Builder::new(Vec::new());
    for (p, d) in [
        ("abc.json", &config[..]),
        ("l1/layer.tar", &layer[..]),
        ("manifest.json", &manifest[..]),
    ] {
        let mut h = header(tar::EntryType::Regular, 0o644, d.len() as u64);
        b.append_data(&mut h, p, d).unwrap();
    }
    let archive = work.path().join("save.tar");
    std::fs::write(&archive, b.into_inner().unwrap()).unwrap();
    let store = Store::open(work.path().join("store")).unwrap();
    let loaded = wisp_image::archive::load(&store, &archive).unwrap();
    let names: Vec<_> = loaded.names.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "docker.io/library/hello:latest",
            "gcr.io/knative-samples/autoscale-go:0.1"
        ]
    );
    let p = store
        .prepare("gcr.io/knative-samples/autoscale-go:0.1", Limits::default())
        .unwrap();
    assert_eq!(std::fs::read(p.rootfs.join("bin/app")).unwrap(), b"docker");
    assert_eq!(p.config.cmd, ["/bin/app"]);
    assert_eq!(p.config.working_dir.as_deref(), Some("/srv"));
    assert_eq!(p.config.user.as_deref(), Some("1000"));
    assert_eq!(p.config.exposed_ports, ["8080/tcp"]);
    // Not an archive: a clear error.
    std::fs::write(work.path().join("junk.tar"), tar_of(&[("x", b"y")])).unwrap();
    let e = wisp_image::archive::load(&store, &work.path().join("junk.tar")).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Archive, "{e}");
}

#[test]
fn oci_layout_roundtrip_and_prune() {
    let work = tempfile::tempdir().unwrap();
    let a = Store::open(work.path().join("a")).unwrap();
    let d1 = image_of(
        &a,
        &[("bin/app", b"one")],
        "amd64",
        Some("example.com/one:1"),
    );
    let archive = work.path().join("oci.tar");
    wisp_image::archive::save(&a, &["example.com/one:1".to_string()], &archive).unwrap();
    let b = Store::open(work.path().join("b")).unwrap();
    let loaded = wisp_image::archive::load(&b, &archive).unwrap();
    assert_eq!(
        loaded.names,
        [("example.com/one:1".to_string(), d1.clone())]
    );
    let p1 = b.prepare("example.com/one:1", Limits::default()).unwrap();
    assert_eq!(std::fs::read(p1.rootfs.join("bin/app")).unwrap(), b"one");

    // Prune: an untagged image goes (blobs and rootfs) unless its rootfs is in use; named
    // images stay.
    let d2 = image_of(
        &b,
        &[("bin/app", b"two")],
        "amd64",
        Some("example.com/two:1"),
    );
    let d3 = image_of(
        &b,
        &[("bin/app", b"three")],
        "amd64",
        Some("example.com/three:1"),
    );
    let p2 = b.prepare("example.com/two:1", Limits::default()).unwrap();
    let p3 = b.prepare("example.com/three:1", Limits::default()).unwrap();
    b.untag("example.com/two:1").unwrap();
    b.untag("example.com/three:1").unwrap();
    let in_use: HashSet<String> = [d3.clone()].into();
    let report = b.prune(&in_use).unwrap();
    assert_eq!(report.rootfs_removed, 1);
    assert_eq!(report.blobs_removed, 3, "{report:?}");
    assert!(!b.has_blob(&d2) && !p2.rootfs.exists());
    assert!(b.has_blob(&d3) && p3.rootfs.exists());
    assert!(b.has_blob(&d1) && p1.rootfs.exists());
    assert_eq!(
        b.list()
            .unwrap()
            .iter()
            .map(|e| e.name.as_str())
            .collect::<Vec<_>>(),
        ["example.com/one:1"]
    );
}

#[test]
fn pack_a_binary_into_a_runnable_rootfs() {
    let work = tempfile::tempdir().unwrap();
    let store = Store::open(work.path()).unwrap();
    let bin = std::path::Path::new("/usr/bin/env");
    wisp_image::pack::pack_binary(&store, bin, "gcr.io/knative-samples/helloworld:latest", &[])
        .unwrap();
    let p = store
        .prepare("gcr.io/knative-samples/helloworld", Limits::default())
        .unwrap();
    assert_eq!(p.config.entrypoint, ["/usr/local/bin/env"]);
    // The binary runs in its rootfs with only the libraries packed (a chroot, we are root).
    let out = std::process::Command::new("chroot")
        .arg(&p.rootfs)
        .args(["/usr/local/bin/env", "-i", "A=b"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(out.stdout, b"A=b\n");
}
