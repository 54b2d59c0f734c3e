//! The live configuration: Knative's ConfigMaps in `knative-serving` are the truth about
//! configuration, as in Knative.
//!
//! - [`seed`], at every start: each of [`CONFIG_MAPS`] that is not stored is created, from
//!   `--config FILE` when the file names it, else empty (Knative's defaults; `config-domain`
//!   holds wisp's `example.com` catch-all). A map that is stored wins over the file, which
//!   only seeds: where they differ, a warning says so.
//! - [`load`]: the configuration the stored maps give.
//! - [`run`]: watches the maps; on a change the new configuration replaces the live one for
//!   every reader at once (admission, the controllers, the KPA, the ingress), and the
//!   controllers are told to resync, as Knative's resync when their config store changes.
//!
//! Writes through the API are checked as Knative's config webhook checks them (the API's
//! admission), so a stored map parses; one that does not (written behind the API's back)
//! is left out with a warning, and its defaults, or its last good value, apply.

use std::collections::BTreeMap;

use serde_json::json;
use tracing::{info, warn};
use wisp_api::{
    config::{CONFIG_MAPS, Config, LiveConfig, NAMESPACE},
    kinds,
};
use wisp_store::{OnGone, Start, Store, StoreError, WatchBatch, WatchSpec};

/// ConfigMap name → its data.
pub type Maps = BTreeMap<String, BTreeMap<String, String>>;

/// What a map holds when nothing seeds it: Knative's defaults (no keys), except
/// `config-domain`, whose absence would mean no external domain; wisp ships `example.com`
/// as the catch-all (docs/differences.md "config-domain default").
fn default_data(name: &str) -> BTreeMap<String, String> {
    match name {
        "config-domain" => BTreeMap::from([("example.com".to_string(), String::new())]),
        _ => BTreeMap::new(),
    }
}

/// Creates the maps that are not stored, from `file` (the `--config` file's maps) or their
/// defaults; warns where a stored map differs from the file's.
pub fn seed(store: &Store, file: &Maps) -> Result<(), StoreError> {
    let res = kinds::CONFIG_MAP.store_key();
    for name in CONFIG_MAPS {
        let from_file = file.get(name);
        match store.get(&res, NAMESPACE, name)? {
            None => {
                let data = from_file.cloned().unwrap_or_else(|| default_data(name));
                let cm = json!({
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": name, "namespace": NAMESPACE},
                    "data": data,
                });
                match store.create(&res, cm) {
                    Ok(_) | Err(StoreError::AlreadyExists { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
            Some(stored) => {
                if let Some(want) = from_file
                    && stored_data(&stored) != *want
                {
                    warn!(
                        configmap = name,
                        "--config differs from the stored ConfigMap {NAMESPACE}/{name}, which \
                         wins (the file only seeds a first start); change it with `kubectl edit \
                         configmap {name} -n {NAMESPACE}`"
                    );
                }
            }
        }
    }
    Ok(())
}

fn stored_data(cm: &serde_json::Value) -> BTreeMap<String, String> {
    serde_json::from_value(cm["data"].clone()).unwrap_or_default()
}

/// The stored maps of [`CONFIG_MAPS`].
fn read(store: &Store) -> Result<Maps, StoreError> {
    let (items, _) = store.list(&kinds::CONFIG_MAP.store_key(), Some(NAMESPACE), None)?;
    Ok(items
        .iter()
        .filter_map(|cm| {
            let name = cm["metadata"]["name"].as_str()?;
            CONFIG_MAPS
                .contains(&name)
                .then(|| (name.to_string(), stored_data(cm)))
        })
        .collect())
}

/// The configuration `maps` give, each map checked alone: one that does not parse keeps
/// its entry in `good` (its last good data; none: its defaults), with a warning.
fn config_of(maps: &Maps, good: &mut Maps) -> Config {
    good.retain(|name, _| maps.contains_key(name));
    for (name, data) in maps {
        let one = Maps::from([(name.clone(), data.clone())]);
        match Config::from_maps(&one) {
            Ok(_) => {
                good.insert(name.clone(), data.clone());
            }
            Err(e) => warn!(
                configmap = %name,
                error = %e,
                "the stored ConfigMap does not parse; its last good value applies"
            ),
        }
    }
    // Every map in `good` parsed alone, and maps do not depend on each other.
    Config::from_maps(good).unwrap_or_default()
}

/// The configuration the stored maps give now, and the maps it was made of.
pub fn load(store: &Store) -> Result<(Config, Maps), StoreError> {
    let mut good = Maps::new();
    let config = config_of(&read(store)?, &mut good);
    Ok((config, good))
}

/// Keeps `live` in line with the stored maps until `shutdown`; each change bumps `version`.
pub async fn run(
    store: Store,
    live: LiveConfig,
    mut good: Maps,
    version: tokio::sync::watch::Sender<u64>,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let mut shutdown = std::pin::pin!(shutdown);
    let spec = WatchSpec::new([kinds::CONFIG_MAP.store_key()])
        .namespace(Some(NAMESPACE.to_string()))
        .start(Start::List)
        .on_gone(OnGone::Relist);
    let mut watch: wisp_store::Watch<wisp_store::WatchEvent> = loop {
        match store.watch(spec.clone()).await {
            Ok(w) => break w,
            Err(e) => {
                warn!(error = %e, "live configuration: watching the ConfigMaps failed; retrying");
                tokio::select! {
                    _ = &mut shutdown => return,
                    _ = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}
                }
            }
        }
    };
    loop {
        let batch = tokio::select! {
            _ = &mut shutdown => return,
            b = watch.next() => b,
        };
        let events = match batch {
            Ok(WatchBatch::Listed { events, .. } | WatchBatch::Changed(events)) => events,
            Err(e) => {
                warn!(error = %e, "live configuration: reading the ConfigMaps failed");
                continue;
            }
        };
        let names: Vec<String> = events
            .iter()
            .filter_map(|ev| ev.object["metadata"]["name"].as_str())
            .filter(|n| CONFIG_MAPS.contains(n))
            .map(String::from)
            .collect();
        if names.is_empty() {
            continue;
        }
        let reader = store.clone();
        let maps = match tokio::task::spawn_blocking(move || read(&reader)).await {
            Ok(Ok(m)) => m,
            Ok(Err(e)) => {
                warn!(error = %e, "live configuration: reading the ConfigMaps failed");
                continue;
            }
            Err(e) => {
                warn!(error = %e, "live configuration: the read task failed");
                continue;
            }
        };
        let next = config_of(&maps, &mut good);
        if *live.load() != next {
            live.set(next);
            version.send_modify(|v| *v += 1);
            info!(configmaps = ?names, "configuration changed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn maps(pairs: &[(&str, &[(&str, &str)])]) -> Maps {
        pairs
            .iter()
            .map(|(n, kv)| {
                (
                    n.to_string(),
                    kv.iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                )
            })
            .collect()
    }

    #[test]
    fn first_start_seeds_and_later_starts_keep_what_is_stored() {
        let store = Store::open_in_memory().unwrap();
        let file = maps(&[("config-autoscaler", &[("min-scale", "1")])]);
        seed(&store, &file).unwrap();
        let (config, good) = load(&store).unwrap();
        assert_eq!(config.autoscaler.min_scale, 1);
        assert_eq!(good.len(), CONFIG_MAPS.len());
        // wisp's example.com catch-all is seeded where nothing else names a domain.
        assert_eq!(config.domain, Config::default().domain);
        assert_eq!(good["config-domain"], default_data("config-domain"));
        assert!(good["config-observability"].is_empty());

        // Edited through the API later; a second start with another file keeps the edit.
        let res = kinds::CONFIG_MAP.store_key();
        let mut cm = store
            .get(&res, NAMESPACE, "config-autoscaler")
            .unwrap()
            .unwrap();
        cm["data"]["min-scale"] = "2".into();
        store.update(&res, cm).unwrap();
        let other = maps(&[("config-autoscaler", &[("min-scale", "3")])]);
        seed(&store, &other).unwrap();
        assert_eq!(load(&store).unwrap().0.autoscaler.min_scale, 2);

        // A deleted map comes back on the next start.
        store.delete(&res, NAMESPACE, "config-gc", None).unwrap();
        seed(&store, &Maps::new()).unwrap();
        assert!(store.get(&res, NAMESPACE, "config-gc").unwrap().is_some());
    }

    #[test]
    fn a_map_that_does_not_parse_keeps_its_last_good_value() {
        let mut good = Maps::new();
        let first = config_of(
            &maps(&[("config-autoscaler", &[("stable-window", "2m")])]),
            &mut good,
        );
        assert_eq!(first.autoscaler.stable_window.0, 120_000_000_000);
        let next = config_of(
            &maps(&[
                ("config-autoscaler", &[("stable-window", "soon")]),
                ("config-defaults", &[("revision-timeout-seconds", "100")]),
            ]),
            &mut good,
        );
        assert_eq!(next.autoscaler.stable_window.0, 120_000_000_000);
        assert_eq!(next.defaults.revision_timeout_seconds, 100);
        // A map that is gone is gone from the configuration too: its defaults apply.
        let gone = config_of(&maps(&[]), &mut good);
        assert_eq!(gone, Config::default());
    }
}
