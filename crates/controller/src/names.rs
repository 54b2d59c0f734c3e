//! Derived names, and the well-known label and annotation keys the controllers write
//! (re-exported from `wisp-api`, where they are defined).
//!
//! [`child_name`] is Knative's `kmeta.ChildName`, so a long configuration name gives the
//! same revision name in wisp as in Knative.

use md5::{Digest, Md5};

/// The longest name Kubernetes allows for most objects (a DNS-1123 label).
const LONGEST: usize = 63;
/// Length of an md5 digest in hex.
const MD5_LEN: usize = 32;
/// How much of the parent is kept when the hash has to be spliced in.
const HEAD: usize = LONGEST - MD5_LEN;

/// Labels set by the controllers (defined in `wisp-api`).
pub use wisp_api::labels as label;

/// Annotations set or read by the controllers (Knative's `pkg/apis/serving/register.go`,
/// defined in `wisp-api`).
pub mod annotation {
    pub use wisp_api::annotations::serving::{
        CREATOR, LAST_MODIFIER, NO_GC, ROUTES, ROUTING_STATE_MODIFIED,
    };
    pub const PROGRESS_DEADLINE: &str = wisp_api::annotations::serving::PROGRESS_DEADLINE.name();
}

/// Values of the [`label::ROUTING_STATE`] label.
pub mod routing_state {
    pub const PENDING: &str = "pending";
    pub const ACTIVE: &str = "active";
    pub const RESERVE: &str = "reserve";
}

/// `kmeta.ChildName(parent, suffix)`: `parent + suffix` when that fits in 63 characters;
/// otherwise the parent is cut short and the hex md5 of the parent spliced in, so that two
/// long parents still give distinct children. A suffix so long that not even the hash fits
/// beside it hashes `parent + suffix` instead and keeps what room is left of the suffix.
pub fn child_name(parent: &str, suffix: &str) -> String {
    if parent.len() + suffix.len() <= LONGEST {
        return format!("{parent}{suffix}");
    }
    if suffix.len() >= HEAD {
        let hash = hex_md5(format!("{parent}{suffix}").as_bytes());
        let mut ret = format!("{}{hash}", prefix(parent, HEAD));
        if ret.len() < LONGEST {
            ret.push_str(prefix(suffix, LONGEST - ret.len()));
        }
        // Cutting may have left a trailing '-' or '.', which no name may end with.
        let trimmed = ret.trim_end_matches(|c: char| !c.is_ascii_alphanumeric());
        return trimmed.to_owned();
    }
    format!(
        "{}{}{suffix}",
        prefix(parent, HEAD - suffix.len()),
        hex_md5(parent.as_bytes())
    )
}

/// The name of a configuration's revision for one generation: `<config>-<gen:05>`.
pub fn revision_name(configuration: &str, generation: i64) -> String {
    child_name(configuration, &format!("-{generation:05}"))
}

/// The first `n` bytes of `s` (names are ASCII; a multi-byte character is never split).
fn prefix(s: &str, n: usize) -> &str {
    let mut end = n.min(s.len());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

fn hex_md5(data: &[u8]) -> String {
    Md5::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn child_names() {
        let long = "a".repeat(60);
        let b57 = "b".repeat(57);
        let s70 = "s".repeat(70);
        let cases: Vec<(&str, &str, &str, String)> = vec![
            ("short", "hello", "-00001", "hello-00001".into()),
            (
                "exactly 63",
                &b57,
                "-00001",
                format!("{}-00001", "b".repeat(57)),
            ),
            (
                "parent too long: cut + md5(parent)",
                &long,
                "-00001",
                format!("{}{}-00001", "a".repeat(25), hex_md5(long.as_bytes())),
            ),
            (
                "suffix too long: md5(parent+suffix) + start of suffix",
                "parent",
                &s70,
                {
                    let h = hex_md5(format!("parent{}", "s".repeat(70)).as_bytes());
                    format!("parent{h}{}", "s".repeat(63 - 6 - 32))
                },
            ),
        ];
        for (what, parent, suffix, want) in cases {
            let got = child_name(parent, suffix);
            assert_eq!(got, want, "{what}");
            assert!(got.len() <= 63, "{what}: {}", got.len());
        }
    }

    #[test]
    fn long_suffix_trailing_dash_is_trimmed() {
        // "ab" + 32 hex + the first 29 characters of the suffix, which end in '-'.
        let suffix = format!("{}--{}", "x".repeat(28), "y".repeat(40));
        let got = child_name("ab", &suffix);
        let h = hex_md5(format!("ab{suffix}").as_bytes());
        assert_eq!(got, format!("ab{h}{}", "x".repeat(28)));
    }

    #[test]
    fn known_md5() {
        // md5("") is well known; guards the hex encoding.
        assert_eq!(hex_md5(b""), "d41d8cd98f00b204e9800998ecf8427e");
    }

    #[test]
    fn revision_names() {
        assert_eq!(revision_name("hello", 1), "hello-00001");
        assert_eq!(revision_name("hello", 123456), "hello-123456");
        let n = revision_name(&"x".repeat(63), 2);
        assert_eq!(n.len(), 63);
        assert!(n.ends_with("-00002"));
    }
}
