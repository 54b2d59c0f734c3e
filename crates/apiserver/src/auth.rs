//! Who is calling: bearer tokens, as kube-apiserver authenticates them.
//!
//! The server's generated admin token plus, optionally, a token file in kube-apiserver's
//! `--token-auth-file` format ([`parse_token_file`]) giving each person their own token.
//! The authenticated [`User`] rides on the request (an extension) to the write handlers,
//! which record its name in `serving.knative.dev/creator` / `lastModifier`.

use std::sync::Arc;

use subtle::ConstantTimeEq;

/// An authenticated user (k8s.io/apiserver/pkg/authentication/user.DefaultInfo).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserInfo {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
}

/// The user a request was authenticated as; put into the request's extensions by the
/// authentication middleware.
#[derive(Debug, Clone)]
pub struct User(pub Arc<UserInfo>);

impl User {
    pub fn name(&self) -> &str {
        &self.0.name
    }
}

/// One line of a token file: the token and whom it stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenEntry {
    pub token: String,
    pub user: UserInfo,
}

/// Why a token file was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TokenFileError {
    /// tokenfile.go: "token file '%s' must have at least 3 columns (token, user name, user
    /// uid), found %d" — with the line added, so the bad line can be found.
    #[error(
        "token file '{path}' must have at least 3 columns (token, user name, user uid), found {found} (line {line})"
    )]
    TooFewColumns {
        path: String,
        line: u64,
        found: usize,
    },
    /// The CSV itself is malformed (an unterminated quote, invalid UTF-8).
    #[error("token file '{path}': parse error on line {line}: {detail}")]
    Csv {
        path: String,
        line: u64,
        detail: String,
    },
}

/// What parsing kept, and the lines it skipped (with kube-apiserver's warning text).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct TokenFile {
    pub entries: Vec<TokenEntry>,
    pub warnings: Vec<String>,
}

/// Parses kube-apiserver's token file: CSV records `token,user,uid[,"group1,group2"]`,
/// any number of columns from three on (extra ones ignored). The rules of
/// k8s.io/apiserver/plugin/pkg/authenticator/token/tokenfile/tokenfile.go (`NewCSV`):
/// fewer than three columns fails the file; an empty token is skipped with a warning; a
/// token seen again replaces the earlier line (with a warning); groups are the fourth
/// column split on `,`. Blank lines are skipped (encoding/csv does the same).
pub fn parse_token_file(path: &str, text: &str) -> Result<TokenFile, TokenFileError> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .from_reader(text.as_bytes());
    let mut out = TokenFile::default();
    let mut record_num = 0;
    for record in reader.records() {
        let record = record.map_err(|e| TokenFileError::Csv {
            path: path.to_string(),
            line: e.position().map_or(0, csv::Position::line),
            detail: match e.kind() {
                csv::ErrorKind::Utf8 { .. } => "invalid UTF-8".to_string(),
                _ => e.to_string(),
            },
        })?;
        let line = record.position().map_or(0, csv::Position::line);
        if record.len() < 3 {
            return Err(TokenFileError::TooFewColumns {
                path: path.to_string(),
                line,
                found: record.len(),
            });
        }
        record_num += 1;
        let token = &record[0];
        if token.is_empty() {
            out.warnings.push(format!(
                "empty token has been found in token file '{path}', record number '{record_num}'"
            ));
            continue;
        }
        let user = UserInfo {
            name: record[1].to_string(),
            uid: record[2].to_string(),
            groups: record
                .get(3)
                .map(|g| g.split(',').map(str::to_string).collect())
                .unwrap_or_default(),
        };
        if let Some(seen) = out.entries.iter_mut().find(|e| e.token == token) {
            out.warnings.push(format!(
                "duplicate token has been found in token file '{path}', record number '{record_num}'"
            ));
            seen.user = user;
            continue;
        }
        out.entries.push(TokenEntry {
            token: token.to_string(),
            user,
        });
    }
    Ok(out)
}

/// Checks bearer tokens against the admin token and the token file's.
#[derive(Debug)]
pub struct Authenticator {
    tokens: Vec<(Box<[u8]>, User)>,
}

impl Authenticator {
    /// The admin token (for `admin`) first, then the file's entries.
    pub fn new(admin_token: &str, admin: UserInfo, file: Vec<TokenEntry>) -> Authenticator {
        let mut tokens = vec![(admin_token.as_bytes().into(), User(Arc::new(admin)))];
        tokens.extend(
            file.into_iter()
                .map(|e| (e.token.into_bytes().into(), User(Arc::new(e.user)))),
        );
        Authenticator { tokens }
    }

    /// The user an `Authorization` header's bearer token stands for. Every token is
    /// compared, in constant time, so neither a token nor which user matched can be
    /// guessed by timing.
    pub fn authenticate(&self, authorization: Option<&str>) -> Option<User> {
        let presented = bearer_token(authorization?)?.as_bytes();
        let mut found = None;
        for (token, user) in &self.tokens {
            let eq = token.len() == presented.len() && bool::from(token.ct_eq(presented));
            if eq && found.is_none() {
                found = Some(user.clone());
            }
        }
        found
    }
}

/// The token of an `Authorization: Bearer <token>` header, as
/// k8s.io/apiserver/pkg/authentication/request/bearertoken/bearertoken.go reads it: the
/// header trimmed, split on the first spaces, the scheme compared case-insensitively.
pub fn bearer_token(header: &str) -> Option<&str> {
    let mut parts = header.trim().splitn(3, ' ');
    let scheme = parts.next()?;
    let token = parts.next()?;
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(name: &str, uid: &str, groups: &[&str]) -> UserInfo {
        UserInfo {
            name: name.into(),
            uid: uid.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
        }
    }

    fn entry(token: &str, u: UserInfo) -> TokenEntry {
        TokenEntry {
            token: token.into(),
            user: u,
        }
    }

    #[test]
    fn token_file_parses_as_kube_apiserver_does() {
        struct Case {
            name: &'static str,
            text: &'static str,
            want: Result<(Vec<TokenEntry>, usize), TokenFileError>,
        }
        let err = |line, found| {
            Err(TokenFileError::TooFewColumns {
                path: "f.csv".into(),
                line,
                found,
            })
        };
        let cases = [
            Case {
                name: "three columns",
                text: "tok1,alice,1\n",
                want: Ok((vec![entry("tok1", user("alice", "1", &[]))], 0)),
            },
            Case {
                name: "quoted groups split on commas",
                text: "tok1,alice,1,\"dev,ops\"\ntok2,bob,2,admins\n",
                want: Ok((
                    vec![
                        entry("tok1", user("alice", "1", &["dev", "ops"])),
                        entry("tok2", user("bob", "2", &["admins"])),
                    ],
                    0,
                )),
            },
            Case {
                name: "extra columns ignored, no trailing newline",
                text: "tok1,alice,1,g,extra",
                want: Ok((vec![entry("tok1", user("alice", "1", &["g"]))], 0)),
            },
            Case {
                name: "blank lines skipped",
                text: "\ntok1,alice,1\n\n",
                want: Ok((vec![entry("tok1", user("alice", "1", &[]))], 0)),
            },
            Case {
                name: "empty token skipped with a warning",
                text: ",alice,1\ntok2,bob,2\n",
                want: Ok((vec![entry("tok2", user("bob", "2", &[]))], 1)),
            },
            Case {
                name: "duplicate token: the later line wins, with a warning",
                text: "tok1,alice,1\ntok1,bob,2\n",
                want: Ok((vec![entry("tok1", user("bob", "2", &[]))], 1)),
            },
            Case {
                name: "empty file",
                text: "",
                want: Ok((vec![], 0)),
            },
            Case {
                name: "two columns fail naming the line",
                text: "tok1,alice,1\ntok2,bob\n",
                want: err(2, 2),
            },
            Case {
                name: "one column",
                text: "justatoken\n",
                want: err(1, 1),
            },
        ];
        for c in cases {
            let got = parse_token_file("f.csv", c.text).map(|f| (f.entries, f.warnings.len()));
            assert_eq!(got, c.want, "{}", c.name);
        }
    }

    #[test]
    fn malformed_csv_names_the_line() {
        let e = parse_token_file("f.csv", "tok1,alice,1\ntok2,\"bob,2\n").unwrap_err();
        assert!(
            matches!(e, TokenFileError::Csv { .. })
                || matches!(e, TokenFileError::TooFewColumns { .. }),
            "{e}"
        );
        assert!(e.to_string().contains("f.csv"), "{e}");
    }

    #[test]
    fn bearer_tokens_are_read_like_kube_apiserver() {
        for (header, want) in [
            ("Bearer abc", Some("abc")),
            ("bearer abc", Some("abc")),
            ("  Bearer abc  ", Some("abc")),
            ("Bearer abc extra", Some("abc")),
            ("Bearer ", None),
            ("Bearer", None),
            ("Basic abc", None),
            ("", None),
        ] {
            assert_eq!(bearer_token(header), want, "{header:?}");
        }
    }

    #[test]
    fn authenticates_the_admin_and_file_users() {
        let a = Authenticator::new(
            "admintok",
            user("wisp-admin", "", &[]),
            vec![entry("alicetok", user("alice", "1", &["dev"]))],
        );
        let name = |h: Option<&str>| a.authenticate(h).map(|u| u.name().to_string());
        assert_eq!(name(Some("Bearer admintok")).as_deref(), Some("wisp-admin"));
        assert_eq!(name(Some("Bearer alicetok")).as_deref(), Some("alice"));
        assert_eq!(name(Some("Bearer alicetokx")), None);
        assert_eq!(name(Some("Bearer admin")), None);
        assert_eq!(name(None), None);
    }
}
