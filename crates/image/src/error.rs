//! One error type for the crate, classified so callers can map a failure to Kubernetes'
//! reasons (`ErrImagePull`, `ImagePullBackOff`, Knative's `ContainerMissing`) and show the
//! registry's own message.

use std::path::PathBuf;

/// What went wrong, by cause. [`Error::kind`] gives the class a caller maps to a reason.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The reference does not parse (Docker's grammar).
    #[error("invalid image reference {reference:?}: {reason}")]
    InvalidReference { reference: String, reason: String },
    /// The registry refused our credentials (or asked for some and we had none).
    #[error("unauthorized: pulling {reference}: {message}")]
    Unauthorized { reference: String, message: String },
    /// The tag or digest does not exist in the repository (or the repository does not exist).
    #[error("manifest unknown: {reference}: {message}")]
    NotFound { reference: String, message: String },
    /// An index / manifest list without an entry for this machine.
    #[error("no matching platform ({wanted}) in {reference} (has: {has})")]
    UnsupportedPlatform {
        reference: String,
        wanted: String,
        has: String,
    },
    /// The registry could not be reached, or timed out.
    #[error("network error talking to {registry}: {message}")]
    Network { registry: String, message: String },
    /// Content did not hash to the digest that names it.
    #[error("digest mismatch for {what}: expected {expected}, got {actual}")]
    DigestMismatch {
        what: String,
        expected: String,
        actual: String,
    },
    /// The registry answered something else we cannot use (a server error, bad JSON).
    #[error("registry error for {reference}: {message}")]
    Registry { reference: String, message: String },
    /// A manifest, index or config we cannot read.
    #[error("invalid {what}: {message}")]
    InvalidContent { what: String, message: String },
    /// A layer that cannot be unpacked safely or is malformed; names the layer's digest.
    #[error("layer {digest}: {message}")]
    Layer { digest: String, message: String },
    /// The image is not in the local store.
    #[error("image not found locally: {0}")]
    NotLocal(String),
    /// An archive (`docker save` or OCI layout) we cannot load.
    #[error("archive {path}: {message}")]
    Archive { path: PathBuf, message: String },
    /// A local filesystem failure, with what we were doing.
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
}

/// The class of an [`Error`], for mapping to Kubernetes' waiting reasons.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    InvalidReference,
    Unauthorized,
    NotFound,
    UnsupportedPlatform,
    Network,
    DigestMismatch,
    Registry,
    InvalidContent,
    Layer,
    NotLocal,
    Archive,
    Io,
}

impl Error {
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::InvalidReference { .. } => ErrorKind::InvalidReference,
            Error::Unauthorized { .. } => ErrorKind::Unauthorized,
            Error::NotFound { .. } => ErrorKind::NotFound,
            Error::UnsupportedPlatform { .. } => ErrorKind::UnsupportedPlatform,
            Error::Network { .. } => ErrorKind::Network,
            Error::DigestMismatch { .. } => ErrorKind::DigestMismatch,
            Error::Registry { .. } => ErrorKind::Registry,
            Error::InvalidContent { .. } => ErrorKind::InvalidContent,
            Error::Layer { .. } => ErrorKind::Layer,
            Error::NotLocal(_) => ErrorKind::NotLocal,
            Error::Archive { .. } => ErrorKind::Archive,
            Error::Io { .. } => ErrorKind::Io,
        }
    }

    pub(crate) fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
        let context = context.into();
        move |source| Error::Io { context, source }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
