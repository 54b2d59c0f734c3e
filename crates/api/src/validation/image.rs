//! Image reference grammar, after go-containerregistry's `name.ParseReference(s,
//! name.WeakValidation)` which Knative uses: `[registry/]repository[:tag][@digest]`.
//! Only the verdict matters — Knative reports every failure as
//! `could not parse reference: <image>`.

/// True if `image` parses as a tag or digest reference.
pub fn is_valid_reference(image: &str) -> bool {
    match image.split_once('@') {
        Some((base, digest)) => {
            // A digest reference may still carry a tag, which is ignored.
            !digest.contains('@') && valid_digest(digest) && valid_tagged(base)
        }
        None => valid_tagged(image),
    }
}

/// `sha256:` + 64 lower-case hex digits.
fn valid_digest(d: &str) -> bool {
    d.strip_prefix("sha256:").is_some_and(|h| {
        h.len() == 64
            && h.bytes()
                .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
    })
}

/// `repository[:tag]`; a colon followed by a `/` belongs to a registry port, not a tag.
fn valid_tagged(s: &str) -> bool {
    let (repo, tag) = match s.rsplit_once(':') {
        Some((base, tag)) if !tag.contains('/') => (base, Some(tag)),
        _ => (s, None),
    };
    if let Some(tag) = tag {
        // Weak validation lets an empty tag default to `latest`.
        let ok = tag.len() <= 128
            && tag
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'.'));
        if !ok {
            return false;
        }
    }
    valid_repository(repo)
}

fn valid_repository(s: &str) -> bool {
    let (registry, repo) = match s.split_once('/') {
        Some((first, rest))
            if first.contains('.') || first.contains(':') || first == "localhost" =>
        {
            (Some(first), rest)
        }
        _ => (None, s),
    };
    if let Some(reg) = registry
        && !valid_registry(reg)
    {
        return false;
    }
    (2..=255).contains(&repo.len())
        && repo.bytes().all(|c| {
            c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, b'_' | b'-' | b'.' | b'/')
        })
        && !repo.starts_with('/')
        && !repo.ends_with('/')
        && !repo.contains("//")
}

/// `host[:port]` where host is a DNS name or an IPv4 address.
fn valid_registry(reg: &str) -> bool {
    let (host, port) = match reg.rsplit_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (reg, None),
    };
    if let Some(p) = port
        && (p.is_empty()
            || !p.bytes().all(|c| c.is_ascii_digit())
            || p.parse::<u32>().map_or(true, |n| n > 65535))
    {
        return false;
    }
    !host.is_empty()
        && host.split('.').all(|l| {
            !l.is_empty()
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references() {
        for ok in [
            "helloworld",
            "busybox:1.36",
            "gcr.io/knative-samples/helloworld-go",
            "ghcr.io/knative/helloworld-go:latest",
            "localhost:5000/app:v1",
            "localhost/app",
            "registry.example.com:443/a/b/c:1.0-rc.1",
            "ko.local/app@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            "app:v1@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        ] {
            assert!(is_valid_reference(ok), "{ok}");
        }
        for bad in [
            "foo:bar:baz",
            "Foo",
            "a",
            "app@sha256:1234",
            "app@md5:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            "app:bad tag",
            "gcr.io//app",
            "gcr.io:xx/app",
            "",
        ] {
            assert!(!is_valid_reference(bad), "{bad}");
        }
    }
}
