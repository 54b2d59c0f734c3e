//! Test harness: Debian's `docker-registry` on an ephemeral loopback port, with its own
//! config in a temp dir (optionally htpasswd basic auth), killed when the guard drops.

#![allow(dead_code)]

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use wisp_image::Store;
use wisp_image::pack::Layer;

pub struct Registry {
    pub addr: String,
    child: Child,
    pub dir: tempfile::TempDir,
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Registry {
    /// Starts a registry; with `auth`, a user `(name, password)` in an htpasswd file.
    pub fn start(auth: Option<(&str, &str)>) -> Registry {
        for _attempt in 0..5 {
            let dir = tempfile::tempdir().unwrap();
            let port = TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            let addr = format!("127.0.0.1:{port}");
            let mut config = format!(
                "version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: {addr}\n",
                dir.path().join("data").display()
            );
            if let Some((user, pass)) = auth {
                let hash = bcrypt::hash(pass, 4).unwrap();
                std::fs::write(dir.path().join("htpasswd"), format!("{user}:{hash}\n")).unwrap();
                config.push_str(&format!(
                    "auth:\n  htpasswd:\n    realm: wisp-test\n    path: {}\n",
                    dir.path().join("htpasswd").display()
                ));
            }
            let cfg = dir.path().join("config.yml");
            std::fs::write(&cfg, config).unwrap();
            let log = std::fs::File::create(dir.path().join("registry.log")).unwrap();
            let mut child = Command::new("/usr/bin/docker-registry")
                .arg("serve")
                .arg(&cfg)
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .expect("docker-registry (apt-get install docker-registry)");
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                if TcpStream::connect(&addr).is_ok() {
                    return Registry { addr, child, dir };
                }
                if child.try_wait().unwrap().is_some() || Instant::now() > deadline {
                    let _ = child.kill();
                    let _ = child.wait();
                    break; // port taken meanwhile, or slow: try another
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        panic!("docker-registry did not start");
    }

    /// A Docker config.json with credentials for this registry.
    pub fn docker_config(&self, user: &str, pass: &str) -> PathBuf {
        use base64::Engine as _;
        let p = self.dir.path().join("docker-config.json");
        let auth = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"));
        std::fs::write(
            &p,
            format!(r#"{{"auths":{{"{}":{{"auth":"{auth}"}}}}}}"#, self.addr),
        )
        .unwrap();
        p
    }
}

/// An uncompressed tar from `(path, contents)` files.
pub fn tar_of(files: &[(&str, &[u8])]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (p, data) in files {
        let mut h = wisp_image::pack::header(tar::EntryType::Regular, 0o755, data.len() as u64);
        b.append_data(&mut h, p, *data).unwrap();
    }
    b.into_inner().unwrap()
}

/// An image of one gzip layer holding `files`, named `name` in `store`.
pub fn image_of(store: &Store, files: &[(&str, &[u8])], arch: &str, name: Option<&str>) -> String {
    let layer = Layer::gzip(&tar_of(files)).unwrap();
    wisp_image::pack::build_image(
        store,
        &[layer],
        serde_json::json!({"Entrypoint": ["/bin/app"], "Env": ["PATH=/bin"]}),
        arch,
        name,
    )
    .unwrap()
}

/// Pseudo-random, incompressible bytes (deterministic).
pub fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    let mut v = Vec::with_capacity(len);
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.write_all(&x.to_le_bytes()).unwrap();
    }
    v.truncate(len);
    v
}

pub fn files_under(p: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(p) {
        for e in rd.flatten() {
            out.push(e.path());
            if e.file_type().unwrap().is_dir() {
                out.extend(files_under(&e.path()));
            }
        }
    }
    out
}
