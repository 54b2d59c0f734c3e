//! The store's error type. Messages follow the Kubernetes API server's wording so the API layer
//! can put them into a `Status` body unchanged.

/// Everything a store call can fail with.
///
/// `resource` fields hold the caller's opaque resource string as given (the API server passes
/// group-qualified plurals such as `services.serving.knative.dev`), which is exactly what
/// Kubernetes prints in these messages.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// HTTP 404.
    #[error("{resource} \"{name}\" not found")]
    NotFound {
        resource: String,
        namespace: String,
        name: String,
    },
    /// HTTP 409 on create.
    #[error("{resource} \"{name}\" already exists")]
    AlreadyExists {
        resource: String,
        namespace: String,
        name: String,
    },
    /// HTTP 409: stale `resourceVersion` or failed uid precondition. `reason` is the part after
    /// the colon, e.g. [`CONFLICT_MODIFIED`].
    #[error("Operation cannot be fulfilled on {resource} \"{name}\": {reason}")]
    Conflict {
        resource: String,
        namespace: String,
        name: String,
        reason: String,
    },
    /// HTTP 410: the requested watch position has been compacted away. `oldest` is the highest
    /// compacted resourceVersion, i.e. the smallest `from` that still works.
    #[error("too old resource version: {requested} ({oldest})")]
    Gone { requested: u64, oldest: u64 },
    /// HTTP 400/422: bad selector, missing name or namespace, object not a JSON object, ...
    #[error("{0}")]
    Invalid(String),
    /// A stored row could not be decoded. Should never happen; means the file was edited or
    /// written by an incompatible version.
    #[error("corrupt store: {0}")]
    Corrupt(String),
    /// A commit reached the WAL but the disk did not sync it: readers see it, a power cut
    /// may lose it. Every later durable write fails the same way (an fsync that failed
    /// may have dropped what it could not write), until wisp is restarted.
    #[error("syncing the store to disk: {0}")]
    Sync(String),
    /// Anything SQLite reports (I/O error, disk full, busy beyond the timeout, ...).
    #[error("store database error: {0}")]
    Db(#[from] rusqlite::Error),
}

/// Kubernetes' reason text for an optimistic-concurrency failure.
pub const CONFLICT_MODIFIED: &str =
    "the object has been modified; please apply your changes to the latest version and try again";

impl StoreError {
    pub(crate) fn not_found(resource: &str, namespace: &str, name: &str) -> Self {
        StoreError::NotFound {
            resource: resource.to_owned(),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        }
    }

    pub(crate) fn already_exists(resource: &str, namespace: &str, name: &str) -> Self {
        StoreError::AlreadyExists {
            resource: resource.to_owned(),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        }
    }

    pub(crate) fn conflict(resource: &str, namespace: &str, name: &str, reason: String) -> Self {
        StoreError::Conflict {
            resource: resource.to_owned(),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            reason,
        }
    }

    /// Conflict for a uid precondition, worded like Kubernetes' `Preconditions.Check`.
    pub(crate) fn uid_precondition(
        resource: &str,
        namespace: &str,
        name: &str,
        wanted: &str,
        actual: &str,
    ) -> Self {
        Self::conflict(
            resource,
            namespace,
            name,
            format!(
                "Precondition failed: UID in precondition: {wanted}, UID in object meta: {actual}"
            ),
        )
    }

    /// True for errors a read-modify-write loop should retry after re-reading.
    pub fn is_conflict(&self) -> bool {
        matches!(self, StoreError::Conflict { .. })
    }

    /// True for [`StoreError::NotFound`].
    pub fn is_not_found(&self) -> bool {
        matches!(self, StoreError::NotFound { .. })
    }
}
