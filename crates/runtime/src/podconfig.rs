//! Secrets and ConfigMaps as a pod consumes them, resolved the way the kubelet does when it
//! creates a container: `env[].valueFrom` (`secretKeyRef`, `configMapKeyRef`, `fieldRef`),
//! `envFrom`, and the files of `secret`, `configMap` and `projected` volumes, written with
//! the kubelet's atomic writer so an app watching a mounted file sees whole updates.
//!
//! Sources: `pkg/kubelet/kubelet_pods.go` (`makeEnvironmentVariables`, its messages),
//! `pkg/volume/secret/secret.go` and `pkg/volume/configmap/configmap.go` (`MakePayload`),
//! `pkg/volume/projected/projected.go`, `pkg/volume/util/atomic_writer.go`.
//!
//! Objects are read through [`ObjectSource`], which `wisp serve` implements over its store:
//! the runtime stays free of the store, as a kubelet reads through its managers.

use std::{
    collections::{BTreeMap, BTreeSet},
    io,
    path::{Component, Path, PathBuf},
};

use serde_json::Value;
use wisp_api::{
    core::{ConfigMap, Secret},
    serving::{Container, EnvVar, PodSpec, Volume},
};

use crate::Failure;

/// Kubernetes' waiting reason for a container whose env (or config) cannot be built: the
/// kubelet keeps retrying, so the replica recovers once the object appears.
pub const CREATE_CONTAINER_CONFIG_ERROR: &str = "CreateContainerConfigError";

/// Kubernetes' waiting reason while a pod's volumes cannot be set up (a Secret of a volume
/// is missing, say); retried like [`CREATE_CONTAINER_CONFIG_ERROR`].
pub const CONTAINER_CREATING: &str = "ContainerCreating";

/// Kubernetes' waiting reason of a pod's app containers while its init containers have not
/// all completed (the kubelet's `convertToAPIContainerStatuses`, `kubelet_pods.go`).
pub const POD_INITIALIZING: &str = "PodInitializing";

/// Reasons a replica reports while the kubelet would keep retrying: the revision shows them
/// but is not given up on.
pub const WAITING_REASONS: [&str; 2] = [CREATE_CONTAINER_CONFIG_ERROR, CONTAINER_CREATING];

/// Kubernetes' reason for a failed image pull (kubelet's `pkg/kubelet/images/types.go`).
pub const ERR_IMAGE_PULL: &str = "ErrImagePull";

/// Kubernetes' reason while the kubelet waits to pull an image again.
pub const IMAGE_PULL_BACK_OFF: &str = "ImagePullBackOff";

/// What a replica shows while it waits to prepare its sandbox again after `failure`, as the
/// kubelet shows a container's waiting state: a pull that failed before (`again`) is
/// `ImagePullBackOff`, with what the last attempt said; anything else as it was.
pub fn backing_off(failure: crate::Failure, again: bool) -> crate::Failure {
    if again && failure.reason == ERR_IMAGE_PULL {
        crate::Failure {
            reason: IMAGE_PULL_BACK_OFF.into(),
            message: format!("Back-off pulling image: {}", failure.message),
        }
    } else {
        failure
    }
}

/// Where Secrets and ConfigMaps come from (`wisp serve`: its store). `Ok(None)`: not found.
pub trait ObjectSource: Send + Sync + std::fmt::Debug + 'static {
    fn secret(&self, namespace: &str, name: &str) -> Result<Option<Secret>, String>;
    fn config_map(&self, namespace: &str, name: &str) -> Result<Option<ConfigMap>, String>;
}

/// A source with no objects (platforms built without a store, tests).
#[derive(Debug, Default)]
pub struct NoObjects;

impl ObjectSource for NoObjects {
    fn secret(&self, _: &str, _: &str) -> Result<Option<Secret>, String> {
        Ok(None)
    }
    fn config_map(&self, _: &str, _: &str) -> Result<Option<ConfigMap>, String> {
        Ok(None)
    }
}

/// What a replica's `fieldRef`s can see.
#[derive(Clone, Debug, Default)]
pub struct PodInfo {
    /// The replica's pod-style name.
    pub name: String,
    pub namespace: String,
    /// The replica's own address, where it has one (a container sandbox).
    pub pod_ip: Option<String>,
    pub service_account: String,
}

fn config_error(message: String) -> Failure {
    Failure {
        reason: CREATE_CONTAINER_CONFIG_ERROR.into(),
        message,
    }
}

/// The two kinds a key reference names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Secret,
    ConfigMap,
}

impl Kind {
    /// The kubelet's object managers' resource names (`corev1.Resource("secret")`), which
    /// their NotFound errors print: `secret "x" not found`.
    fn resource(self) -> &'static str {
        match self {
            Kind::Secret => "secret",
            Kind::ConfigMap => "configmap",
        }
    }
    fn kind(self) -> &'static str {
        match self {
            Kind::Secret => "Secret",
            Kind::ConfigMap => "ConfigMap",
        }
    }
}

/// An object's data as bytes by key, or None when it does not exist.
fn fetch(
    src: &dyn ObjectSource,
    kind: Kind,
    ns: &str,
    name: &str,
) -> Result<Option<BTreeMap<String, Vec<u8>>>, Failure> {
    let got = match kind {
        Kind::Secret => src.secret(ns, name).map(|s| {
            s.map(|s| {
                s.data
                    .into_iter()
                    .map(|(k, v)| (k, v.0))
                    .collect::<BTreeMap<_, _>>()
            })
        }),
        Kind::ConfigMap => src.config_map(ns, name).map(|c| {
            c.map(|c| {
                let mut data: BTreeMap<String, Vec<u8>> =
                    c.binary_data.into_iter().map(|(k, v)| (k, v.0)).collect();
                data.extend(c.data.into_iter().map(|(k, v)| (k, v.into_bytes())));
                data
            })
        }),
    };
    got.map_err(|e| config_error(format!("reading {} {ns}/{name}: {e}", kind.kind())))
}

fn not_found(kind: Kind, name: &str) -> String {
    format!("{} {name:?} not found", kind.resource())
}

fn str_of<'a>(v: &'a Value, field: &str) -> &'a str {
    v.get(field).and_then(Value::as_str).unwrap_or_default()
}

fn optional(v: &Value) -> bool {
    v.get("optional").and_then(Value::as_bool) == Some(true)
}

/// `IsEnvVarName` (apimachinery `validation.go`): `[-._a-zA-Z][-._a-zA-Z0-9]*`.
pub fn is_env_var_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || "-._".contains(c))
        && chars.all(|c| c.is_ascii_alphanumeric() || "-._".contains(c))
}

/// Kubernetes expands `$(VAR)` only in literal `value`s, never in what a Secret or
/// ConfigMap holds; the resolved values go into the container's `env` as literals, so their
/// `$` are escaped (`$$` expands to `$`).
fn literal(value: &str) -> String {
    value.replace('$', "$$")
}

/// The container with its environment resolved as the kubelet builds it: first every
/// `envFrom` source in order (with `prefix`; keys that are not valid names skipped), then
/// `env`, each `valueFrom` replaced by its value. Returns the container with only literal
/// `env` (no `envFrom`) and the kubelet's warnings (its events) for skipped keys; a missing
/// required object or key is [`CREATE_CONTAINER_CONFIG_ERROR`] with the kubelet's message.
pub fn resolve_env(
    c: &Container,
    pod: &PodInfo,
    src: &dyn ObjectSource,
) -> Result<(Container, Vec<String>), Failure> {
    if c.env_from.is_empty() && c.env.iter().all(|e| e.value_from.is_none()) {
        return Ok((c.clone(), Vec::new()));
    }
    let ns = pod.namespace.as_str();
    let mut env: Vec<EnvVar> = Vec::new();
    let mut warnings = Vec::new();
    let lit = |name: String, value: &str| EnvVar {
        name,
        value: Some(literal(value)),
        ..Default::default()
    };
    for from in &c.env_from {
        let prefix = str_of(from, "prefix");
        let (kind, r) = match (from.get("configMapRef"), from.get("secretRef")) {
            (Some(r), _) => (Kind::ConfigMap, r),
            (None, Some(r)) => (Kind::Secret, r),
            (None, None) => continue,
        };
        let name = str_of(r, "name");
        let Some(data) = fetch(src, kind, ns, name)? else {
            if optional(r) {
                continue;
            }
            return Err(config_error(not_found(kind, name)));
        };
        let mut invalid = Vec::new();
        for (k, v) in data {
            let key = format!("{prefix}{k}");
            if !is_env_var_name(&key) {
                invalid.push(key);
                continue;
            }
            env.push(lit(key, &String::from_utf8_lossy(&v)));
        }
        if !invalid.is_empty() {
            // kubelet_pods.go records this as an `InvalidEnvironmentVariableNames` event.
            let what = match kind {
                Kind::ConfigMap => "configMap",
                Kind::Secret => "secret",
            };
            warnings.push(format!(
                "Keys [{}] from the EnvFrom {what} {ns}/{name} were skipped since they are \
                 considered invalid environment variable names.",
                invalid.join(", ")
            ));
        }
    }
    for var in &c.env {
        let Some(from) = &var.value_from else {
            env.push(var.clone());
            continue;
        };
        let (kind, r) = match (&from.config_map_key_ref, &from.secret_key_ref) {
            (Some(r), _) => (Kind::ConfigMap, r),
            (None, Some(r)) => (Kind::Secret, r),
            (None, None) => {
                if let Some(f) = &from.field_ref {
                    let value = field_ref(str_of(f, "fieldPath"), pod).map_err(|m| {
                        config_error(format!("env {}: valueFrom.fieldRef: {m}", var.name))
                    })?;
                    env.push(lit(var.name.clone(), &value));
                } else if from.resource_field_ref.is_some() {
                    return Err(config_error(format!(
                        "env {}: valueFrom.resourceFieldRef is not supported by wisp",
                        var.name
                    )));
                }
                continue;
            }
        };
        let (name, key) = (str_of(r, "name"), str_of(r, "key"));
        let Some(data) = fetch(src, kind, ns, name)? else {
            if optional(r) {
                continue;
            }
            return Err(config_error(not_found(kind, name)));
        };
        match data.get(key) {
            Some(v) => env.push(lit(var.name.clone(), &String::from_utf8_lossy(v))),
            None if optional(r) => {}
            None => {
                return Err(config_error(format!(
                    "couldn't find key {key} in {} {ns}/{name}",
                    kind.kind()
                )));
            }
        }
    }
    let mut out = c.clone();
    out.env = env;
    out.env_from = Vec::new();
    Ok((out, warnings))
}

/// The downward API fields that mean something for a replica on one machine.
fn field_ref(path: &str, pod: &PodInfo) -> Result<String, String> {
    match path {
        "metadata.name" => Ok(pod.name.clone()),
        "metadata.namespace" => Ok(pod.namespace.clone()),
        "spec.serviceAccountName" => Ok(pod.service_account.clone()),
        "status.podIP" => pod
            .pod_ip
            .clone()
            .ok_or_else(|| "status.podIP: this replica has no address of its own".to_string()),
        other => Err(format!("fieldPath {other:?} is not supported by wisp")),
    }
}

/// One file of a volume: its content and mode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileProjection {
    pub data: Vec<u8>,
    pub mode: u32,
}

/// A volume's files by relative path.
pub type Payload = BTreeMap<String, FileProjection>;

/// What wisp makes of one pod volume.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VolumeContent {
    /// Files written with the atomic writer (secret, configMap, projected).
    Files(Payload),
    /// An empty directory; on a tmpfs when `medium: Memory`.
    EmptyDir { memory: bool },
}

/// The kubelet's default file mode of secret/configMap/projected volumes (0644).
pub const DEFAULT_MODE: u32 = 0o644;

fn mode_of(v: &Value, field: &str) -> Option<u32> {
    v.get(field)
        .and_then(Value::as_u64)
        .and_then(|m| u32::try_from(m).ok())
}

/// The payload of one secret/configMap source (`MakePayload`): every key at its own name, or
/// only the `items` (key → path, with their own `mode`). A missing object is an error unless
/// `optional` (then nothing); a missing item key likewise.
fn source_payload(
    kind: Kind,
    ns: &str,
    name: &str,
    src_spec: &Value,
    default_mode: u32,
    objects: &dyn ObjectSource,
    payload: &mut Payload,
) -> Result<(), String> {
    let data = match fetch(objects, kind, ns, name).map_err(|f| f.message)? {
        Some(d) => d,
        None if optional(src_spec) => return Ok(()),
        None => return Err(not_found(kind, name)),
    };
    let items = src_spec.get("items").and_then(Value::as_array);
    match items.filter(|i| !i.is_empty()) {
        None => {
            for (k, v) in data {
                payload.insert(
                    k,
                    FileProjection {
                        data: v,
                        mode: default_mode,
                    },
                );
            }
        }
        Some(items) => {
            for item in items {
                let key = str_of(item, "key");
                let Some(v) = data.get(key) else {
                    if optional(src_spec) {
                        continue;
                    }
                    // secret.go / configmap.go wording.
                    return Err(match kind {
                        Kind::Secret => format!("references non-existent secret key: {key}"),
                        Kind::ConfigMap => {
                            format!("configmap references non-existent config key: {key}")
                        }
                    });
                };
                payload.insert(
                    str_of(item, "path").to_owned(),
                    FileProjection {
                        data: v.clone(),
                        mode: mode_of(item, "mode").unwrap_or(default_mode),
                    },
                );
            }
        }
    }
    Ok(())
}

/// What one volume holds now. Errors are kubelet's `MountVolume.SetUp failed` messages,
/// reported as [`CONTAINER_CREATING`] (or, for what wisp cannot do, a permanent reason).
pub fn volume_content(
    v: &Volume,
    ns: &str,
    objects: &dyn ObjectSource,
) -> Result<VolumeContent, Failure> {
    let setup = |m: String| Failure {
        reason: CONTAINER_CREATING.into(),
        message: format!("MountVolume.SetUp failed for volume {:?} : {m}", v.name),
    };
    let unsupported = |what: &str| Failure {
        reason: "VolumeUnsupported".into(),
        message: format!("volume {:?}: {what} is not supported by wisp", v.name),
    };
    let mut payload = Payload::new();
    if let Some(s) = v.source.get("secret") {
        let mode = mode_of(s, "defaultMode").unwrap_or(DEFAULT_MODE);
        source_payload(
            Kind::Secret,
            ns,
            str_of(s, "secretName"),
            s,
            mode,
            objects,
            &mut payload,
        )
        .map_err(setup)?;
    } else if let Some(c) = v.source.get("configMap") {
        let mode = mode_of(c, "defaultMode").unwrap_or(DEFAULT_MODE);
        source_payload(
            Kind::ConfigMap,
            ns,
            str_of(c, "name"),
            c,
            mode,
            objects,
            &mut payload,
        )
        .map_err(setup)?;
    } else if let Some(p) = v.source.get("projected") {
        let mode = mode_of(p, "defaultMode").unwrap_or(DEFAULT_MODE);
        for s in p
            .get("sources")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(sec) = s.get("secret") {
                let name = str_of(sec, "name");
                source_payload(Kind::Secret, ns, name, sec, mode, objects, &mut payload)
                    .map_err(setup)?;
            } else if let Some(cm) = s.get("configMap") {
                let name = str_of(cm, "name");
                source_payload(Kind::ConfigMap, ns, name, cm, mode, objects, &mut payload)
                    .map_err(setup)?;
            } else if s.get("serviceAccountToken").is_some() {
                return Err(unsupported("a projected serviceAccountToken"));
            } else if s.get("downwardAPI").is_some() {
                return Err(unsupported("a projected downwardAPI source"));
            } else {
                return Err(unsupported("this projected source"));
            }
        }
    } else if let Some(e) = v.source.get("emptyDir") {
        return Ok(VolumeContent::EmptyDir {
            memory: str_of(e, "medium") == "Memory",
        });
    } else {
        let kind = v.source.keys().next().map_or("(none)", String::as_str);
        return Err(unsupported(&format!("a {kind} volume")));
    }
    for path in payload.keys() {
        valid_path(path).map_err(|m| setup(format!("invalid path {path:?}: {m}")))?;
    }
    Ok(VolumeContent::Files(payload))
}

/// The names of the Secrets and ConfigMaps a pod references (env, envFrom, volumes), for
/// whoever must react when one changes. (kind is `"Secret"` or `"ConfigMap"`.)
pub fn references(pod: &PodSpec) -> BTreeSet<(&'static str, String)> {
    let mut out = BTreeSet::new();
    let mut add = |kind: &'static str, name: &str| {
        if !name.is_empty() {
            out.insert((kind, name.to_owned()));
        }
    };
    for c in pod.containers.iter().chain(&pod.init_containers) {
        for e in &c.env {
            if let Some(f) = &e.value_from {
                if let Some(r) = &f.secret_key_ref {
                    add("Secret", str_of(r, "name"));
                }
                if let Some(r) = &f.config_map_key_ref {
                    add("ConfigMap", str_of(r, "name"));
                }
            }
        }
        for f in &c.env_from {
            if let Some(r) = f.get("secretRef") {
                add("Secret", str_of(r, "name"));
            }
            if let Some(r) = f.get("configMapRef") {
                add("ConfigMap", str_of(r, "name"));
            }
        }
    }
    for v in &pod.volumes {
        if let Some(s) = v.source.get("secret") {
            add("Secret", str_of(s, "secretName"));
        }
        if let Some(c) = v.source.get("configMap") {
            add("ConfigMap", str_of(c, "name"));
        }
        for s in v
            .source
            .get("projected")
            .and_then(|p| p.get("sources"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(r) = s.get("secret") {
                add("Secret", str_of(r, "name"));
            }
            if let Some(r) = s.get("configMap") {
                add("ConfigMap", str_of(r, "name"));
            }
        }
    }
    for r in &pod.image_pull_secrets {
        add("Secret", str_of(r, "name"));
    }
    out
}

/// `validatePath` of atomic_writer.go: relative, no `..` element, not starting with `..`.
fn valid_path(path: &str) -> Result<(), &'static str> {
    if path.is_empty() {
        return Err("empty path");
    }
    let p = Path::new(path);
    if p.is_absolute() {
        return Err("must be relative path");
    }
    if p.components().any(|c| c == Component::ParentDir) {
        return Err("must not contain '..'");
    }
    if path.starts_with("..") {
        return Err("must not start with '..'");
    }
    Ok(())
}

/// The name of the symlink to the current payload directory (atomic_writer.go).
pub const DATA_DIR: &str = "..data";
const DATA_DIR_TMP: &str = "..data_tmp";

/// The kubelet's atomic writer (`pkg/volume/util/atomic_writer.go`): writes `payload` into
/// `dir` so that a reader sees either the old set of files or the new one, never a mix:
///
/// 1. nothing happens when the files under `..data` already equal the payload;
/// 2. the payload is written into a new timestamped directory `..<time>.<n>`;
/// 3. a `..data_tmp` symlink to it is renamed over `..data` (one atomic rename);
/// 4. each top-level user-visible name is a symlink into `..data` (created once);
/// 5. user-visible names no longer in the payload and the old directory are removed.
///
/// Returns whether anything was written.
pub fn write_atomic(dir: &Path, payload: &Payload) -> io::Result<bool> {
    for path in payload.keys() {
        valid_path(path).map_err(|m| io::Error::new(io::ErrorKind::InvalidInput, m))?;
    }
    std::fs::create_dir_all(dir)?;
    let data_link = dir.join(DATA_DIR);
    let old_ts = std::fs::read_link(&data_link).ok();
    if let Some(old) = &old_ts
        && same_payload(&dir.join(old), payload)?
    {
        return Ok(false);
    }
    let ts_dir = new_ts_dir(dir)?;
    for (path, f) in payload {
        let file = ts_dir.join(path);
        if let Some(parent) = file.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&file, &f.data)?;
        set_mode(&file, f.mode)?;
    }
    let tmp = dir.join(DATA_DIR_TMP);
    let _ = std::fs::remove_file(&tmp);
    let ts_name = ts_dir
        .file_name()
        .ok_or_else(|| io::Error::other("timestamped directory without a name"))?;
    std::os::unix::fs::symlink(ts_name, &tmp)?;
    std::fs::rename(&tmp, &data_link)?;
    let visible: BTreeSet<String> = payload.keys().map(|p| top_level(p).to_owned()).collect();
    for name in &visible {
        let link = dir.join(name);
        if std::fs::symlink_metadata(&link).is_err() {
            std::os::unix::fs::symlink(Path::new(DATA_DIR).join(name), &link)?;
        }
    }
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.starts_with("..") && !visible.contains(&name) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
    if let Some(old) = old_ts
        && old.as_os_str() != ts_name
    {
        let _ = std::fs::remove_dir_all(dir.join(old));
    }
    Ok(true)
}

fn top_level(path: &str) -> &str {
    path.split('/').next().unwrap_or(path)
}

fn set_mode(path: &Path, mode: u32) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode & 0o7777))
}

/// Whether `ts_dir` holds exactly the payload (contents and modes).
fn same_payload(ts_dir: &Path, payload: &Payload) -> io::Result<bool> {
    use std::os::unix::fs::PermissionsExt;
    let mut existing = Vec::new();
    collect_files(ts_dir, ts_dir, &mut existing)?;
    if existing.len() != payload.len() {
        return Ok(false);
    }
    for rel in existing {
        let Some(want) = payload.get(&rel) else {
            return Ok(false);
        };
        let file = ts_dir.join(&rel);
        if std::fs::metadata(&file)?.permissions().mode() & 0o7777 != want.mode & 0o7777
            || std::fs::read(&file)? != want.data
        {
            return Ok(false);
        }
    }
    Ok(true)
}

fn collect_files(root: &Path, dir: &Path, out: &mut Vec<String>) -> io::Result<()> {
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for entry in rd {
        let entry = entry?;
        let path = entry.path();
        if entry.file_type()?.is_dir() {
            collect_files(root, &path, out)?;
        } else if let Ok(rel) = path.strip_prefix(root) {
            out.push(rel.to_string_lossy().into_owned());
        }
    }
    Ok(())
}

/// A new `..2006_01_02_15_04_05.<n>` directory (Go: `os.MkdirTemp(dir, time.Now().UTC()
/// .Format("..2006_01_02_15_04_05."))`).
fn new_ts_dir(dir: &Path) -> io::Result<PathBuf> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = now.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    let stamp = format!(
        "..{y:04}_{m:02}_{d:02}_{:02}_{:02}_{:02}.",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    );
    for n in 0..1000u32 {
        let candidate = dir.join(format!("{stamp}{}", now.subsec_nanos() + n));
        match std::fs::create_dir(&candidate) {
            Ok(()) => return Ok(candidate),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        "no free timestamped directory name",
    ))
}

/// Days since 1970-01-01 → (year, month, day) (Howard Hinnant's `civil_from_days`).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests;
