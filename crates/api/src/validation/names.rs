//! Kubernetes name checks (`k8s.io/apimachinery/pkg/util/validation`) with the exact messages
//! Kubernetes returns, because Knative embeds them verbatim in its webhook errors.

/// `a DNS-1035 label must consist of …` — Kubernetes' wording, including its double space
/// before `or` (its `RegexError` helper joins examples with `", "` and prefixes each later one
/// with `" or "`).
const DNS1035_LABEL_MSG: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')";
const DNS1123_LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const DNS1123_SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const QUALIFIED_NAME_MSG: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";

/// `MaxLenError` (`k8s.io/apimachinery/pkg/api/validate/content/errors.go`): Kubernetes counts
/// (and says) bytes.
fn max_len(n: usize) -> String {
    format!("must be no more than {n} bytes")
}

fn lower_alnum(c: u8) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit()
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`
fn is_1123_label_shape(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && lower_alnum(b[0])
        && lower_alnum(b[b.len() - 1])
        && b.iter().all(|&c| lower_alnum(c) || c == b'-')
}

/// `IsDNS1035Label`: empty when valid.
pub fn dns1035_label(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    if s.len() > 63 {
        out.push(max_len(63));
    }
    let b = s.as_bytes();
    let ok = !b.is_empty()
        && b[0].is_ascii_lowercase()
        && lower_alnum(b[b.len() - 1])
        && b.iter().all(|&c| lower_alnum(c) || c == b'-');
    if !ok {
        out.push(DNS1035_LABEL_MSG.to_string());
    }
    out
}

/// `NameIsDNS1035Label(name, prefix)`: a generateName prefix may end in `-`, so Kubernetes
/// masks a trailing dash before checking it.
pub fn name_is_dns1035_label(name: &str, prefix: bool) -> Vec<String> {
    if prefix && name.ends_with('-') {
        let masked = format!("{}a", &name[..name.len() - 1]);
        return dns1035_label(&masked);
    }
    dns1035_label(name)
}

/// `IsDNS1123Label` (`content/dns.go`): a valid subdomain that is no label has dots.
pub fn dns1123_label(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    if s.len() > 63 {
        out.push(max_len(63));
    }
    if !is_1123_label_shape(s) {
        if s.split('.').all(is_1123_label_shape) {
            out.push("must not contain dots".to_string());
        } else {
            out.push(DNS1123_LABEL_MSG.to_string());
        }
    }
    out
}

/// `IsDNS1123Subdomain`.
pub fn dns1123_subdomain(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    if s.len() > 253 {
        out.push(max_len(253));
    }
    if !s.split('.').all(is_1123_label_shape) {
        out.push(DNS1123_SUBDOMAIN_MSG.to_string());
    }
    out
}

/// `IsQualifiedName` (`[prefix/]name`), used for traffic revision/configuration names. Today's
/// apimachinery makes it `content.IsLabelKey` (`content/kube.go`), whose texts these are.
pub fn qualified_name(s: &str) -> Vec<String> {
    let parts: Vec<&str> = s.split('/').collect();
    let mut out = Vec::new();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                out.push("prefix part must be non-empty".to_string());
            } else {
                out.extend(
                    dns1123_subdomain(prefix)
                        .into_iter()
                        .map(|m| format!("prefix part {m}")),
                );
            }
            name
        }
        _ => {
            out.push(format!("a valid label key {QUALIFIED_NAME_MSG} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"));
            return out;
        }
    };
    if name.is_empty() {
        out.push("name part must be non-empty".to_string());
    } else if name.len() > 63 {
        out.push(format!("name part {}", max_len(63)));
    }
    let b = name.as_bytes();
    let alnum = |c: u8| c.is_ascii_alphanumeric();
    let ok = !b.is_empty()
        && alnum(b[0])
        && alnum(b[b.len() - 1])
        && b.iter()
            .all(|&c| alnum(c) || matches!(c, b'-' | b'_' | b'.'));
    // The shape is checked even for an empty name, which then fails twice.
    if !ok {
        out.push(format!("name part {QUALIFIED_NAME_MSG}"));
    }
    out
}

/// Go's `fmt.Sprint([]string{...})`: `[a b]`.
pub fn go_list(msgs: &[String]) -> String {
    format!("[{}]", msgs.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_and_subdomains() {
        assert!(dns1035_label("hello").is_empty());
        assert!(dns1035_label("a-1").is_empty());
        assert_eq!(dns1035_label("1a").len(), 1);
        assert_eq!(dns1035_label("A_B").len(), 1);
        assert_eq!(
            dns1035_label(&"a".repeat(64)),
            vec!["must be no more than 63 bytes".to_string()]
        );
        // content/dns.go: a subdomain that is no label "must not contain dots".
        assert_eq!(
            dns1123_label("a.b"),
            vec!["must not contain dots".to_string()]
        );
        assert_eq!(qualified_name("p/").len(), 2);
        assert!(name_is_dns1035_label("hello-", true).is_empty());
        assert!(!name_is_dns1035_label("hello-", false).is_empty());
        assert!(dns1123_label("0abc").is_empty());
        assert!(dns1123_subdomain("my.sa-1").is_empty());
        assert!(!dns1123_subdomain("My.sa").is_empty());
        assert!(!dns1123_subdomain("a..b").is_empty());
        assert!(qualified_name("hello-00001").is_empty());
        assert!(qualified_name("Hello_1").is_empty());
        assert!(!qualified_name("-bad").is_empty());
        assert_eq!(go_list(&["a".into(), "b".into()]), "[a b]");
    }
}
