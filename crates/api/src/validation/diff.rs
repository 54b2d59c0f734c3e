//! A readable `-old +new` diff for the immutability errors. Knative prints a go-cmp diff of
//! the Go structs; wisp prints a line diff of the pretty JSON, which carries the same
//! information in a form users can read.

use serde::Serialize;

/// Unchanged lines shown around each change.
const CONTEXT: usize = 1;

/// The diff of two values, or an empty string when they serialise identically.
pub fn json_diff<T: Serialize>(old: &T, new: &T) -> String {
    let render = |v: &T| serde_json::to_string_pretty(v).unwrap_or_default();
    let (a, b) = (render(old), render(new));
    if a == b {
        return String::new();
    }
    let a: Vec<&str> = a.lines().collect();
    let b: Vec<&str> = b.lines().collect();
    line_diff(&a, &b)
}

fn line_diff(a: &[&str], b: &[&str]) -> String {
    // Longest-common-subsequence table; objects are small (a revision template).
    let (n, m) = (a.len(), b.len());
    let mut lcs = vec![vec![0usize; m + 1]; n + 1];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let mut ops: Vec<(char, &str)> = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < n || j < m {
        if i < n && j < m && a[i] == b[j] {
            ops.push((' ', a[i]));
            i += 1;
            j += 1;
        } else if i < n && (j == m || lcs[i + 1][j] >= lcs[i][j + 1]) {
            // Deletions first, so that `-old` precedes `+new` as in the message.
            ops.push(('-', a[i]));
            i += 1;
        } else {
            ops.push(('+', b[j]));
            j += 1;
        }
    }
    let changed: Vec<usize> = ops
        .iter()
        .enumerate()
        .filter(|(_, o)| o.0 != ' ')
        .map(|(k, _)| k)
        .collect();
    let near = |k: usize| changed.iter().any(|&c| c.abs_diff(k) <= CONTEXT);
    let mut out = Vec::new();
    let mut skipped = false;
    for (k, (op, line)) in ops.iter().enumerate() {
        if *op == ' ' && !near(k) {
            skipped = true;
            continue;
        }
        if skipped {
            out.push("  ...".to_string());
        }
        skipped = false;
        out.push(format!("{op} {line}"));
    }
    if skipped {
        out.push("  ...".to_string());
    }
    out.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn shows_changed_lines_with_context() {
        let old = json!({"a": 1, "b": 2, "c": 3, "d": 4, "e": 5});
        let new = json!({"a": 1, "b": 2, "c": 30, "d": 4, "e": 5});
        assert_eq!(
            json_diff(&old, &new),
            "  ...\n    \"b\": 2,\n-   \"c\": 3,\n+   \"c\": 30,\n    \"d\": 4,\n  ..."
        );
        assert_eq!(json_diff(&old, &old), "");
    }
}
