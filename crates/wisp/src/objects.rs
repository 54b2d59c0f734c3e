//! The runtime's [`ObjectSource`] over wisp's store: replicas read the Secrets and
//! ConfigMaps their pods reference where the API stored them (as a kubelet reads them
//! through its API server).

use wisp_api::{
    core::{ConfigMap, Secret},
    kinds,
};
use wisp_runtime::podconfig::ObjectSource;
use wisp_store::Store;

#[derive(Debug)]
pub struct StoreObjects {
    store: Store,
}

impl StoreObjects {
    pub fn new(store: Store) -> Self {
        StoreObjects { store }
    }

    fn read<T: serde::de::DeserializeOwned>(
        &self,
        kind: &kinds::ResourceKind,
        namespace: &str,
        name: &str,
    ) -> Result<Option<T>, String> {
        // One short SQLite read (the store's primary key) per object a replica references.
        let Some(raw) = self
            .store
            .get_raw(&kind.store_key(), namespace, name)
            .map_err(|e| e.to_string())?
        else {
            return Ok(None);
        };
        serde_json::from_str(&raw)
            .map(Some)
            .map_err(|e| format!("decoding the stored {}: {e}", kind.kind))
    }
}

impl ObjectSource for StoreObjects {
    fn secret(&self, namespace: &str, name: &str) -> Result<Option<Secret>, String> {
        self.read(&kinds::SECRET, namespace, name)
    }

    fn config_map(&self, namespace: &str, name: &str) -> Result<Option<ConfigMap>, String> {
        self.read(&kinds::CONFIG_MAP, namespace, name)
    }
}
