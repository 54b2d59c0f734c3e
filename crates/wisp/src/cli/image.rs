//! `wisp image …`: the local image store (`<data-dir>/images`, crates/image) from the
//! command line — load archives, list, pull with a progress bar, tag, remove, prune, and pack
//! a local binary as an image. These work on the store directly, with or without a running
//! `wisp serve` (the store's file locks keep both consistent).

use std::collections::HashSet;
use std::path::PathBuf;

use anyhow::Context as _;
use wisp_image::{RegistryOptions, Store};

#[derive(Debug, clap::Args)]
pub struct ImageArgs {
    /// Data directory (the store is `<data-dir>/images`).
    #[arg(long, env = "WISP_DATA_DIR", default_value = ".wisp", global = true)]
    pub data_dir: PathBuf,
    #[command(subcommand)]
    pub command: ImageCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum ImageCommand {
    /// Load a `docker save` archive or an OCI image-layout archive.
    Load {
        #[arg(short = 'i', long = "input")]
        input: PathBuf,
    },
    /// List images (REPOSITORY TAG DIGEST SIZE).
    #[command(alias = "list")]
    Ls,
    /// Pull an image from a registry.
    Pull {
        reference: String,
        /// Registries (host:port) that may be plain HTTP (loopback ones always may).
        #[arg(long = "insecure-registry")]
        insecure: Vec<String>,
    },
    /// Push a stored image to a registry under another name (credentials from Docker's
    /// `config.json`).
    Push {
        source: String,
        target: String,
        /// Registries (host:port) that may be plain HTTP (loopback ones always may).
        #[arg(long = "insecure-registry")]
        insecure: Vec<String>,
    },
    /// Give a stored image another name.
    Tag { source: String, target: String },
    /// Remove names (the blobs stay until `prune`).
    #[command(alias = "remove")]
    Rm {
        #[arg(required = true)]
        references: Vec<String>,
    },
    /// Remove blobs and unpacked root filesystems no name refers to.
    Prune,
    /// Build a single-layer image from a local binary and its shared libraries.
    Pack {
        #[arg(long)]
        binary: PathBuf,
        #[arg(long)]
        tag: String,
        /// Also write the image as an OCI image-layout archive.
        #[arg(long)]
        output: Option<PathBuf>,
        /// An environment variable of the image, `KEY=VALUE` (repeatable); the sample apps
        /// need `HOST=0.0.0.0` to listen beyond the container's loopback.
        #[arg(long = "env", value_name = "KEY=VALUE")]
        env: Vec<String>,
    },
    /// Write stored images as an OCI image-layout archive.
    Save {
        #[arg(required = true)]
        references: Vec<String>,
        #[arg(short = 'o', long)]
        output: PathBuf,
    },
}

pub fn run(args: ImageArgs) -> anyhow::Result<bool> {
    let dir = args.data_dir.join("images");
    let store =
        Store::open(&dir).with_context(|| format!("opening the image store {}", dir.display()))?;
    match args.command {
        ImageCommand::Load { input } => {
            let loaded = wisp_image::archive::load(&store, &input)?;
            for (name, digest) in &loaded.names {
                super::out(format_args!("Loaded image: {name} ({digest})\n"))?;
            }
            if loaded.names.is_empty() {
                for d in &loaded.digests {
                    super::out(format_args!("Loaded image ID: {d}\n"))?;
                }
            }
        }
        ImageCommand::Ls => {
            // kubectl-style columns, as `wisp get` prints them.
            let mut rows = vec![
                ["REPOSITORY", "TAG", "DIGEST", "SIZE"]
                    .map(String::from)
                    .to_vec(),
            ];
            for e in store.list()? {
                let (repo, tag) = split_name(&e.name);
                rows.push(vec![repo, tag, short(&e.digest), human(e.size)]);
            }
            let table = super::printers::format_table(&rows);
            super::out(format_args!("{table}"))?;
        }
        ImageCommand::Push {
            source,
            target,
            insecure,
        } => {
            let opts = RegistryOptions {
                insecure_registries: insecure,
                ..Default::default()
            };
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let digest = rt
                .block_on(wisp_image::registry::push(&store, &source, &target, &opts))
                .with_context(|| format!("pushing {source} to {target}"))?;
            super::out(format_args!("Pushed {target} ({digest})\n"))?;
        }
        ImageCommand::Pull {
            reference,
            insecure,
        } => {
            let opts = RegistryOptions {
                insecure_registries: insecure,
                ..Default::default()
            };
            let bar = indicatif::ProgressBar::new(0);
            bar.set_style(
                indicatif::ProgressStyle::with_template(
                    "{msg} [{bar:30}] {bytes}/{total_bytes} ({bytes_per_sec})",
                )
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            bar.set_message(reference.clone());
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let pulled = rt.block_on(wisp_image::registry::pull(
                &store,
                &reference,
                &opts,
                &|p| {
                    bar.set_length(p.total);
                    bar.set_position(p.done);
                },
            ));
            bar.finish_and_clear();
            let pulled = pulled?;
            store.prepare(&pulled.pinned, wisp_image::Limits::default())?;
            super::out(format_args!(
                "Pulled {reference}\nDigest: {}\n",
                pulled.pinned
            ))?;
        }
        ImageCommand::Tag { source, target } => {
            let digest = store
                .lookup(&source)?
                .ok_or_else(|| wisp_image::Error::NotLocal(source.clone()))?;
            store.tag(&target, &digest)?;
        }
        ImageCommand::Rm { references } => {
            for r in references {
                let d = store.untag(&r)?;
                super::out(format_args!("Untagged: {r} ({d})\n"))?;
            }
        }
        ImageCommand::Prune => {
            // In-use rootfs are known only to a running `wisp serve`; the CLI keeps every
            // named image, which is what a running revision uses.
            let r = store.prune(&HashSet::new())?;
            super::out(format_args!(
                "Removed {} blobs ({}) and {} unpacked images\n",
                r.blobs_removed,
                human(r.bytes_removed),
                r.rootfs_removed
            ))?;
        }
        ImageCommand::Pack {
            binary,
            tag,
            output,
            env,
        } => {
            let digest = wisp_image::pack::pack_binary(&store, &binary, &tag, &env)?;
            super::out(format_args!("Packed {tag} ({digest})\n"))?;
            if let Some(out) = output {
                wisp_image::archive::save(&store, &[tag], &out)?;
                super::out(format_args!("Wrote {}\n", out.display()))?;
            }
        }
        ImageCommand::Save { references, output } => {
            wisp_image::archive::save(&store, &references, &output)?;
        }
    }
    Ok(true)
}

/// `registry/repo:tag` → (`registry/repo`, `tag`); `…@digest` → (`…`, `<none>`).
fn split_name(name: &str) -> (String, String) {
    if let Some((repo, _)) = name.split_once('@') {
        return (repo.to_string(), "<none>".into());
    }
    match name.rsplit_once(':') {
        Some((repo, tag)) if !tag.contains('/') => (repo.to_string(), tag.to_string()),
        _ => (name.to_string(), "<none>".into()),
    }
}

fn short(digest: &str) -> String {
    digest
        .trim_start_matches("sha256:")
        .chars()
        .take(12)
        .collect()
}

/// Docker's sizes: decimal units.
fn human(bytes: u64) -> String {
    let b = bytes as f64;
    if b >= 1e9 {
        format!("{:.2}GB", b / 1e9)
    } else if b >= 1e6 {
        format!("{:.1}MB", b / 1e6)
    } else if b >= 1e3 {
        format!("{:.1}kB", b / 1e3)
    } else {
        format!("{bytes}B")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_sizes() {
        assert_eq!(
            split_name("docker.io/library/hello:latest"),
            ("docker.io/library/hello".into(), "latest".into())
        );
        assert_eq!(
            split_name("localhost:5000/x:1"),
            ("localhost:5000/x".into(), "1".into())
        );
        assert_eq!(
            split_name("localhost:5000/x"),
            ("localhost:5000/x".into(), "<none>".into())
        );
        assert_eq!(human(999), "999B");
        assert_eq!(human(10_500_000), "10.5MB");
    }
}
