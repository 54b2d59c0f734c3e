//! Image references with Docker's normalisation: `hello` → `docker.io/library/hello:latest`.
//! The grammar is `distribution/reference`'s, as implemented by `oci_spec::distribution`.

use std::str::FromStr;

pub use oci_spec::distribution::Reference;

use crate::error::{Error, Result};

/// Parses and normalises a reference; a clear error names the reference and the rule broken.
pub fn parse(reference: &str) -> Result<Reference> {
    let trimmed = reference.trim();
    if trimmed.is_empty() {
        return Err(Error::InvalidReference {
            reference: reference.to_string(),
            reason: "empty reference".into(),
        });
    }
    let parsed = Reference::from_str(trimmed).map_err(|e| Error::InvalidReference {
        reference: reference.to_string(),
        reason: e.to_string(),
    })?;
    // distribution/reference: the path must be lowercase (`ErrNameContainsUppercase`).
    if parsed.repository().bytes().any(|b| b.is_ascii_uppercase()) {
        return Err(Error::InvalidReference {
            reference: reference.to_string(),
            reason: "repository name must be lowercase".into(),
        });
    }
    Ok(parsed)
}

/// The canonical name the store indexes: `registry/repository:tag`, or `…@digest` when the
/// reference has a digest and no tag.
pub fn canonical(r: &Reference) -> String {
    r.whole()
}

/// `registry/repository`, without tag or digest (Knative's `imageDigest` prefix).
pub fn repository(r: &Reference) -> String {
    format!("{}/{}", r.registry(), r.repository())
}

/// Whether `registry` (host[:port]) names a loopback address, which may be plain HTTP as
/// Docker allows (`localhost`, `127.0.0.0/8`, `[::1]`).
pub fn is_loopback_registry(registry: &str) -> bool {
    let host = if let Some(rest) = registry.strip_prefix('[') {
        rest.split(']').next().unwrap_or(rest)
    } else {
        registry.rsplit_once(':').map_or(registry, |(h, _)| h)
    };
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalisation() {
        let cases = [
            ("hello", "docker.io/library/hello:latest"),
            ("hello:1", "docker.io/library/hello:1"),
            ("user/app", "docker.io/user/app:latest"),
            ("ghcr.io/x/y", "ghcr.io/x/y:latest"),
            ("localhost:5000/x:tag", "localhost:5000/x:tag"),
            (
                "gcr.io/knative-samples/helloworld-go",
                "gcr.io/knative-samples/helloworld-go:latest",
            ),
        ];
        for (input, want) in cases {
            assert_eq!(canonical(&parse(input).unwrap()), want, "{input}");
        }
        let d = format!("repo@sha256:{}", "a".repeat(64));
        let r = parse(&d).unwrap();
        assert_eq!(
            r.digest(),
            Some(format!("sha256:{}", "a".repeat(64)).as_str())
        );
        assert_eq!(repository(&r), "docker.io/library/repo");
    }

    #[test]
    fn bad_references() {
        for bad in ["", "UPPER/case", "a@sha256:short", "x:", "-x", "a b"] {
            let e = parse(bad).unwrap_err();
            assert!(
                e.to_string().contains("invalid image reference"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn loopback() {
        for (r, want) in [
            ("localhost:5000", true),
            ("127.0.0.1:5000", true),
            ("127.1.2.3", true),
            ("[::1]:5000", true),
            ("ghcr.io", false),
            ("10.0.0.1:5000", false),
        ] {
            assert_eq!(is_loopback_registry(r), want, "{r}");
        }
    }
}
