//! `wisp delete KIND NAME…` and `wisp delete -f FILE`.

use wisp_api::kinds::ResourceKind;

use super::client::{ApiError, Client};
use super::{GlobalArgs, Outcome, kind_of_document, manifest, obj, parse_resource_args};

/// Flags of `wisp delete`.
#[derive(Debug, Clone, clap::Args)]
pub struct DeleteArgs {
    #[command(flatten)]
    pub global: GlobalArgs,
    /// `KIND NAME…` or `KIND/NAME…`.
    #[arg(value_name = "RESOURCE")]
    pub resources: Vec<String>,
    /// Delete the objects of a manifest file, directory or `-` (stdin) (repeatable).
    #[arg(short = 'f', long = "filename")]
    pub files: Vec<String>,
    /// Treat "not found" as success, silently.
    #[arg(long)]
    pub ignore_not_found: bool,
}

/// kubectl's `service.serving.knative.dev "hello" deleted`.
pub fn deleted_line(kind: &ResourceKind, name: &str) -> String {
    format!("{} \"{name}\" deleted", kind.qualified())
}

/// One object to delete, and the manifest it came from (for error messages).
#[derive(Debug)]
struct Target {
    kind: &'static ResourceKind,
    ns: String,
    name: String,
    source: Option<String>,
}

fn delete_one(client: &Client, t: &Target, ignore_not_found: bool) -> anyhow::Result<bool> {
    match client.delete(t.kind, &t.ns, &t.name) {
        Ok(_) => {
            super::out(format_args!("{}\n", deleted_line(t.kind, &t.name)))?;
            Ok(true)
        }
        Err(e) if e.is_not_found() && ignore_not_found => Ok(true),
        Err(ApiError::Status(mut s)) => {
            if s.code == 404 && s.message.is_empty() {
                s.message = format!("{} \"{}\" not found", t.kind.store_key(), t.name);
            }
            let ctx = t
                .source
                .as_ref()
                .map(|src| format!("error when deleting \"{src}\""));
            eprintln!("{}", super::client::server_error_line(&s, ctx.as_deref()));
            Ok(false)
        }
        Err(e) => Err(e.into()),
    }
}

pub fn run(args: DeleteArgs) -> Outcome {
    if args.files.is_empty() && args.resources.is_empty() {
        anyhow::bail!("You must provide one or more resources by argument or filename.");
    }
    if !args.files.is_empty() && !args.resources.is_empty() {
        anyhow::bail!("cannot specify both resource arguments and -f/--filename");
    }
    let mut ok = true;
    let mut targets = Vec::new();
    if !args.files.is_empty() {
        let docs = manifest::read_all(&args.files, &mut std::io::stdin().lock())?;
        if docs.is_empty() {
            anyhow::bail!("no objects passed to delete");
        }
        for doc in docs {
            match kind_of_document(&doc.value, &doc.source) {
                Ok(kind) => {
                    let ns =
                        super::apply::namespace_for(&doc.value, &args.global.namespace).to_string();
                    let name = obj::name(&doc.value).to_string();
                    if name.is_empty() {
                        eprintln!(
                            "error: resource name may not be empty (in \"{}\")",
                            doc.source
                        );
                        ok = false;
                        continue;
                    }
                    targets.push(Target {
                        kind,
                        ns,
                        name,
                        source: Some(doc.source),
                    });
                }
                Err(msg) => {
                    eprintln!("error: {msg}");
                    ok = false;
                }
            }
        }
    } else {
        for (kind, names) in parse_resource_args(&args.resources)? {
            if names.is_empty() {
                anyhow::bail!("resource(s) were provided, but no name was specified");
            }
            for name in names {
                targets.push(Target {
                    kind,
                    ns: args.global.namespace.clone(),
                    name,
                    source: None,
                });
            }
        }
    }
    let client = args.global.client()?;
    for t in &targets {
        ok &= delete_one(&client, t, args.ignore_not_found)?;
    }
    Ok(ok)
}

#[cfg(test)]
mod tests {
    use super::*;
    use wisp_api::kinds;

    #[test]
    fn deleted_lines() {
        assert_eq!(
            deleted_line(&kinds::SERVICE, "hello"),
            "service.serving.knative.dev \"hello\" deleted"
        );
        assert_eq!(
            deleted_line(&kinds::POD_AUTOSCALER, "hello-00001"),
            "podautoscaler.autoscaling.internal.knative.dev \"hello-00001\" deleted"
        );
    }
}
