//! Reading manifests for `apply -f` / `delete -f`: files, directories (non-recursive, sorted,
//! `*.yaml`, `*.yml`, `*.json`) and stdin (`-`); multi-document YAML; JSON objects; `List`s.

use std::io::Read;
use std::path::Path;

use anyhow::Context;
use serde_json::Value;

/// One object from a manifest, with where it came from (a path, or `STDIN`).
#[derive(Debug, Clone, PartialEq)]
pub struct Document {
    pub source: String,
    pub value: Value,
}

/// Reads every `-f` argument in order. `-` reads `stdin` (at most once is useful).
pub fn read_all(files: &[String], stdin: &mut dyn Read) -> anyhow::Result<Vec<Document>> {
    let mut docs = Vec::new();
    for f in files {
        if f == "-" {
            let mut text = String::new();
            stdin.read_to_string(&mut text).context("reading stdin")?;
            docs.extend(documents("STDIN", &text)?);
            continue;
        }
        let path = Path::new(f);
        let meta = std::fs::metadata(path)
            .map_err(|e| anyhow::anyhow!("the path \"{f}\" does not exist ({e})"))?;
        if meta.is_dir() {
            for file in manifest_files(path)? {
                let text = std::fs::read_to_string(&file)
                    .with_context(|| format!("reading {}", file.display()))?;
                docs.extend(documents(&file.display().to_string(), &text)?);
            }
        } else {
            let text = std::fs::read_to_string(path).with_context(|| format!("reading {f}"))?;
            docs.extend(documents(f, &text)?);
        }
    }
    Ok(docs)
}

/// The manifest files of a directory: `*.yaml`, `*.yml`, `*.json`, sorted, not recursive.
pub fn manifest_files(dir: &Path) -> anyhow::Result<Vec<std::path::PathBuf>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        let is_manifest = path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| matches!(e, "yaml" | "yml" | "json"));
        if is_manifest && path.is_file() {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// Splits one file's text into objects: JSON (one or more concatenated objects) when it starts
/// with `{`, else multi-document YAML (empty documents skipped). `kind: List` (or any
/// `…List` with `items`) is expanded into its items.
pub fn documents(source: &str, text: &str) -> anyhow::Result<Vec<Document>> {
    let values: Vec<Value> = if text.trim_start().starts_with('{') {
        serde_json::Deserializer::from_str(text)
            .into_iter::<Value>()
            .collect::<Result<_, _>>()
            .map_err(|e| anyhow::anyhow!("error parsing {source}: {e}"))?
    } else {
        serde_saphyr::from_multiple::<Value>(text)
            .map_err(|e| anyhow::anyhow!("error parsing {source}: {e}"))?
    };
    let mut out = Vec::new();
    for (i, v) in values.into_iter().enumerate() {
        match v {
            Value::Null => {}
            Value::Object(_) => expand(source, v, &mut out)?,
            _ => anyhow::bail!(
                "error parsing {source}: document {} is not an object",
                i + 1
            ),
        }
    }
    Ok(out)
}

fn expand(source: &str, v: Value, out: &mut Vec<Document>) -> anyhow::Result<()> {
    let is_list = v
        .get("kind")
        .and_then(Value::as_str)
        .is_some_and(|k| k.ends_with("List"))
        && v.get("items").is_some_and(Value::is_array);
    if !is_list {
        out.push(Document {
            source: source.to_string(),
            value: v,
        });
        return Ok(());
    }
    let Some(Value::Array(items)) = v.get("items").cloned() else {
        return Ok(());
    };
    for item in items {
        match item {
            Value::Object(_) => expand(source, item, out)?,
            Value::Null => {}
            _ => anyhow::bail!("error parsing {source}: a List item is not an object"),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn names(docs: &[Document]) -> Vec<String> {
        docs.iter()
            .map(|d| {
                d.value
                    .pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or("?")
                    .to_string()
            })
            .collect()
    }

    #[test]
    fn multi_document_yaml() {
        let text = "\
---
# a comment only
---
apiVersion: serving.knative.dev/v1
kind: Service
metadata:
  name: a
spec:
  template:
    spec:
      containerConcurrency: 10
      containers:
      - image: ghcr.io/x/hello:latest
        env:
        - name: TARGET
          value: \"42\"
---

---
apiVersion: serving.knative.dev/v1
kind: Route
metadata: {name: b}
...
";
        let docs = documents("f.yaml", text).unwrap();
        assert_eq!(names(&docs), ["a", "b"]);
        assert_eq!(docs[0].source, "f.yaml");
        let spec = &docs[0].value["spec"]["template"]["spec"];
        assert_eq!(spec["containerConcurrency"], json!(10));
        assert_eq!(spec["containers"][0]["env"][0]["value"], json!("42"));
    }

    #[test]
    fn json_and_lists() {
        let one =
            r#"{"apiVersion":"serving.knative.dev/v1","kind":"Service","metadata":{"name":"a"}}"#;
        assert_eq!(names(&documents("a.json", one).unwrap()), ["a"]);
        let two = format!("{one}\n{}", one.replace("\"a\"", "\"b\""));
        assert_eq!(names(&documents("a.json", &two).unwrap()), ["a", "b"]);
        let list = r#"{"apiVersion":"v1","kind":"List","items":[
            {"kind":"Service","metadata":{"name":"x"}},
            {"kind":"ServiceList","items":[{"kind":"Service","metadata":{"name":"y"}}]}]}"#;
        assert_eq!(names(&documents("l.json", list).unwrap()), ["x", "y"]);
        let yaml_list =
            "kind: List\napiVersion: v1\nitems:\n- kind: Route\n  metadata:\n    name: r\n";
        assert_eq!(names(&documents("l.yaml", yaml_list).unwrap()), ["r"]);
        assert!(documents("bad.json", "{\"a\":").is_err());
        assert!(documents("bad.yaml", "- 1\n- 2\n").is_err());
        assert!(documents("bad.yaml", "a: [\n").is_err());
        assert!(documents("empty.yaml", "").unwrap().is_empty());
    }

    #[test]
    fn files_directories_and_stdin() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(d.join("b.yaml"), "kind: Service\nmetadata: {name: b}\n").unwrap();
        std::fs::write(d.join("a.yml"), "kind: Service\nmetadata: {name: a}\n").unwrap();
        std::fs::write(
            d.join("c.json"),
            r#"{"kind":"Service","metadata":{"name":"c"}}"#,
        )
        .unwrap();
        std::fs::write(d.join("notes.txt"), "kind: Service\nmetadata: {name: z}\n").unwrap();
        std::fs::create_dir(d.join("sub")).unwrap();
        std::fs::write(d.join("sub/d.yaml"), "kind: Service\nmetadata: {name: d}\n").unwrap();

        let mut stdin = "kind: Route\nmetadata: {name: s}\n".as_bytes();
        let args = vec![
            d.display().to_string(),
            "-".to_string(),
            d.join("sub/d.yaml").display().to_string(),
        ];
        let docs = read_all(&args, &mut stdin).unwrap();
        assert_eq!(names(&docs), ["a", "b", "c", "s", "d"]);
        assert_eq!(docs[3].source, "STDIN");
        assert!(docs[0].source.ends_with("a.yml"));

        let missing = read_all(
            &[d.join("nope.yaml").display().to_string()],
            &mut "".as_bytes(),
        );
        assert!(missing.unwrap_err().to_string().contains("does not exist"));
    }
}
