//! The environment a replica sees, and Kubernetes' `$(VAR)` expansion.
//!
//! A Kubernetes container does not inherit the node's environment, and wisp keeps that rule
//! so that a revision behaves the same here as on a cluster: what the app sees is what its
//! spec says. A local process is different from a container image in one way, though: it
//! has no image filesystem with its own `PATH`, so a handful of variables that make a host
//! binary usable at all ([`PASS_THROUGH`]) are passed through from wisp's own environment.

use wisp_api::serving::Container;

/// Variables copied from wisp's environment into every replica (when wisp has them):
/// without `PATH` a process cannot find `python3`, without `HOME`/`USER` many runtimes
/// refuse to start, `LANG`/`TZ` keep text and times as the developer expects, and `TMPDIR`
/// points at a writable scratch directory.
pub const PASS_THROUGH: [&str; 6] = ["PATH", "HOME", "USER", "LANG", "TZ", "TMPDIR"];

/// Names of the revision a replica belongs to, for the `K_*` variables.
pub(crate) struct Identity<'a> {
    pub service: &'a str,
    pub configuration: &'a str,
    pub revision: &'a str,
}

/// The environment of a replica's process, in order (later entries win on duplicate names,
/// as in Kubernetes): the pass-through variables, `PORT` (the serving container's alone, as
/// Knative's `makeServingContainer` sets it; `port` is None for sidecars and init
/// containers), `K_SERVICE`, `K_CONFIGURATION`, `K_REVISION` (every app container's, as
/// Knative's `makeContainer` adds them; `id` is None for an init container, which
/// Knative's `BuildPodSpec` keeps as written), then the container's `env` with `$(VAR)`
/// references to anything earlier expanded. Entries with `valueFrom` cannot be resolved without ConfigMaps and Secrets and
/// are returned by name in the second vector so the caller can warn.
pub(crate) fn environment(
    container: &Container,
    port: Option<u16>,
    id: Option<&Identity<'_>>,
    host_env: impl Fn(&str) -> Option<String>,
) -> (Vec<(String, String)>, Vec<String>) {
    let mut env: Vec<(String, String)> = PASS_THROUGH
        .iter()
        .filter_map(|name| host_env(name).map(|v| (name.to_string(), v)))
        .collect();
    if let Some(port) = port {
        env.push(("PORT".into(), port.to_string()));
    }
    if let Some(id) = id {
        env.push(("K_SERVICE".into(), id.service.into()));
        env.push(("K_CONFIGURATION".into(), id.configuration.into()));
        env.push(("K_REVISION".into(), id.revision.into()));
    }
    let skipped = push_container_env(&mut env, container);
    (env, skipped)
}

/// Appends the container's `env` to `env`, each value's `$(VAR)` references expanded
/// against what comes before it (as the kubelet does); returns the names of the entries
/// with `valueFrom`, which are skipped.
pub(crate) fn push_container_env(
    env: &mut Vec<(String, String)>,
    container: &Container,
) -> Vec<String> {
    let mut skipped = Vec::new();
    for var in &container.env {
        match &var.value {
            Some(value) => {
                let expanded = expand(value, |name| lookup(env, name));
                env.push((var.name.clone(), expanded));
            }
            // Kubernetes treats a missing value as the empty string.
            None if var.value_from.is_none() => env.push((var.name.clone(), String::new())),
            None => skipped.push(var.name.clone()),
        }
    }
    skipped
}

/// The argv of a replica: `command` followed by `args`, each expanded against `env`.
pub(crate) fn argv(container: &Container, env: &[(String, String)]) -> Vec<String> {
    container
        .command
        .iter()
        .chain(&container.args)
        .map(|s| expand(s, |name| lookup(env, name)))
        .collect()
}

/// The last definition of `name` wins, as when Kubernetes builds the container's env map.
fn lookup<'a>(env: &'a [(String, String)], name: &str) -> Option<&'a str> {
    env.iter()
        .rev()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

/// Kubernetes' variable expansion (`third_party/forked/golang/expansion`): `$(NAME)` is
/// replaced by the value of NAME; `$$` is an escaped `$` (so `$$(NAME)` yields the literal
/// `$(NAME)`); a reference to an unknown variable, an unterminated `$(`, and a `$` before
/// any other character are all left as written.
pub fn expand<'a>(input: &str, mapping: impl Fn(&str) -> Option<&'a str>) -> String {
    let bytes = input.as_bytes();
    let mut out = String::with_capacity(input.len());
    // Everything before `checkpoint` has been copied or consumed. All syntax characters are
    // ASCII, so every index we slice at is a char boundary.
    let mut checkpoint = 0;
    let mut cursor = 0;
    while cursor < bytes.len() {
        if bytes[cursor] == b'$' && cursor + 1 < bytes.len() {
            out.push_str(&input[checkpoint..cursor]);
            match bytes[cursor + 1] {
                b'$' => {
                    out.push('$');
                    cursor += 2;
                }
                b'(' => match input[cursor + 2..].find(')') {
                    Some(len) => {
                        let name = &input[cursor + 2..cursor + 2 + len];
                        match mapping(name) {
                            Some(value) => out.push_str(value),
                            None => {
                                out.push_str("$(");
                                out.push_str(name);
                                out.push(')');
                            }
                        }
                        cursor += 2 + len + 1;
                    }
                    None => {
                        out.push_str("$(");
                        cursor += 2;
                    }
                },
                // Not an expression: keep the `$`; the next character is copied as usual.
                _ => {
                    out.push('$');
                    cursor += 1;
                }
            }
            checkpoint = cursor;
        } else {
            cursor += 1;
        }
    }
    out.push_str(&input[checkpoint..]);
    out
}

#[cfg(test)]
mod tests {
    use wisp_api::serving::{EnvVar, EnvVarSource};

    use super::*;

    #[test]
    fn expansion_follows_kubernetes() {
        let vars = [
            ("VAR_A", "A"),
            ("VAR_B", "B"),
            ("VAR_EMPTY", ""),
            ("PORT", "8080"),
        ];
        let map = |name: &str| vars.iter().find(|(n, _)| *n == name).map(|(_, v)| *v);
        // Cases from Kubernetes' expand_test.go.
        let cases = [
            ("$(VAR_A)", "A"),
            ("___$(VAR_A)___", "___A___"),
            ("$(VAR_A)-$(VAR_B)", "A-B"),
            ("$(VAR_A)$(VAR_B)", "AB"),
            ("$(VAR_EMPTY)", ""),
            ("f$(VAR_EMPTY)x", "fx"),
            ("$(UNKNOWN)", "$(UNKNOWN)"),
            ("$$(VAR_A)", "$(VAR_A)"),
            ("$$$(VAR_A)", "$A"),
            ("$$$$(VAR_A)", "$$(VAR_A)"),
            ("$$", "$"),
            ("$$$", "$$"),
            ("$", "$"),
            ("abc$", "abc$"),
            ("$VAR_A", "$VAR_A"),
            ("$(VAR_A", "$(VAR_A"),
            ("$(VAR_A)$(", "A$("),
            ("$()", "$()"),
            ("$(", "$("),
            ("$)", "$)"),
            ("--port=$(PORT)", "--port=8080"),
            ("é$(VAR_A)ü$x", "éAü$x"),
            ("$é", "$é"),
            ("no refs", "no refs"),
            ("", ""),
        ];
        for (input, want) in cases {
            assert_eq!(expand(input, map), want, "input {input:?}");
        }
    }

    fn var(name: &str, value: &str) -> EnvVar {
        EnvVar {
            name: name.into(),
            value: Some(value.into()),
            ..Default::default()
        }
    }

    #[test]
    fn environment_is_clean_ordered_and_expanded() {
        let container = Container {
            command: vec!["app".into(), "--listen=:$(PORT)".into()],
            args: vec![
                "$(GREETING)".into(),
                "$$(GREETING)".into(),
                "$(NOPE)".into(),
            ],
            env: vec![
                var("NAME", "world"),
                var("GREETING", "hello $(NAME) from $(K_REVISION)"),
                // Refers to a later variable: left as written, as in Kubernetes.
                var("EARLY", "$(LATE)"),
                var("LATE", "x"),
                EnvVar {
                    name: "SECRET".into(),
                    value_from: Some(EnvVarSource::default()),
                    ..Default::default()
                },
                EnvVar {
                    name: "EMPTY".into(),
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        let host = |name: &str| match name {
            "PATH" => Some("/bin".to_string()),
            "SECRET_HOST_VAR" => Some("leak".to_string()),
            _ => None,
        };
        let id = Identity {
            service: "svc",
            configuration: "cfg",
            revision: "cfg-00001",
        };
        let (env, skipped) = environment(&container, Some(4321), Some(&id), host);
        let names: Vec<&str> = env.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "PATH",
                "PORT",
                "K_SERVICE",
                "K_CONFIGURATION",
                "K_REVISION",
                "NAME",
                "GREETING",
                "EARLY",
                "LATE",
                "EMPTY"
            ]
        );
        assert_eq!(lookup(&env, "GREETING"), Some("hello world from cfg-00001"));
        assert_eq!(lookup(&env, "EARLY"), Some("$(LATE)"));
        assert_eq!(lookup(&env, "PORT"), Some("4321"));
        assert_eq!(lookup(&env, "EMPTY"), Some(""));
        assert_eq!(skipped, ["SECRET"]);
        assert_eq!(
            argv(&container, &env),
            [
                "app",
                "--listen=:4321",
                "hello world from cfg-00001",
                "$(GREETING)",
                "$(NOPE)"
            ]
        );
        // A sidecar's: no PORT, the rest the same.
        let (sidecar, _) = environment(&container, None, Some(&id), host);
        let without_port: Vec<_> = env.iter().filter(|(n, _)| n != "PORT").cloned().collect();
        assert_eq!(sidecar, without_port);
        // An init container's: no Knative variables either.
        let (init, _) = environment(&container, None, None, host);
        let names: Vec<&str> = init.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            ["PATH", "NAME", "GREETING", "EARLY", "LATE", "EMPTY"]
        );
        assert_eq!(
            lookup(&init, "GREETING"),
            Some("hello world from $(K_REVISION)")
        );
    }
}
