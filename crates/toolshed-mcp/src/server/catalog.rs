//! Prompts and resources offered beside the tools, read from one YAML file
//! (`mcp.yaml` in an agent project, or `toolshed serve --mcp-catalog FILE`):
//!
//! ```yaml
//! prompts:
//!   - name: greet
//!     description: Greet someone
//!     arguments: [{name: who, description: Whom to greet, required: true}]
//!     messages:
//!       - role: user
//!         content: {type: text, text: "Say hello to {{who}}"}
//! resources:
//!   - uri: docs://readme
//!     name: readme
//!     description: The readme
//!     mimeType: text/plain
//!     text: "…"            # or `blob: BASE64`
//! templates:
//!   - uriTemplate: "orders://{id}"
//!     name: order
//!     description: One order
//!     mimeType: application/json
//!     text: '{"id": "{id}"}'
//! ```
//!
//! `{{arg}}` in a prompt's strings is replaced by the argument; `{var}` in a template's
//! text by the URI's segment. Everything is checked when the file is read: a broken
//! file is an error naming the field.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use serde_json::{Map, Value, json};

/// The largest catalog file, in bytes.
pub const MAX_CATALOG_BYTES: u64 = 4 * 1024 * 1024;

/// Prompts, resources and resource templates.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Catalog {
    /// The prompts.
    pub prompts: Vec<Prompt>,
    /// The resources.
    pub resources: Vec<Resource>,
    /// The resource templates.
    pub templates: Vec<Template>,
}

/// One prompt.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Prompt {
    /// Its name.
    pub name: String,
    /// What it is for.
    #[serde(default)]
    pub description: String,
    /// Its arguments.
    #[serde(default)]
    pub arguments: Vec<PromptArgument>,
    /// Its messages (MCP `PromptMessage`s), `{{arg}}` replaced on `prompts/get`.
    pub messages: Vec<Value>,
}

/// One argument of a prompt.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PromptArgument {
    /// Its name.
    pub name: String,
    /// What it is.
    #[serde(default)]
    pub description: String,
    /// Whether `prompts/get` must give it.
    #[serde(default)]
    pub required: bool,
}

/// One resource.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Resource {
    /// Its URI.
    pub uri: String,
    /// Its name.
    pub name: String,
    /// What it is.
    #[serde(default)]
    pub description: String,
    /// Its MIME type.
    #[serde(rename = "mimeType")]
    pub mime_type: Option<String>,
    /// Its text.
    pub text: Option<String>,
    /// Its bytes, base64.
    pub blob: Option<String>,
}

/// One resource template.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Template {
    /// The URI template (`{var}` stands for one path segment).
    #[serde(rename = "uriTemplate")]
    pub uri_template: String,
    /// Its name.
    pub name: String,
    /// What it is.
    #[serde(default)]
    pub description: String,
    /// Its MIME type.
    #[serde(rename = "mimeType")]
    pub mime_type: Option<String>,
    /// Its text, `{var}` replaced.
    pub text: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CatalogFile {
    #[serde(default)]
    prompts: Vec<Prompt>,
    #[serde(default)]
    resources: Vec<Resource>,
    #[serde(default)]
    templates: Vec<Template>,
}

/// Why a catalog could not be read or a request on it failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CatalogError {
    /// The file is unreadable or invalid (the message names the field).
    #[error("MCP catalog {file}: {reason}")]
    Invalid {
        /// The file.
        file: String,
        /// What is wrong.
        reason: String,
    },
    /// No prompt or resource of that name or URI.
    #[error("{0}")]
    NotFound(String),
    /// A required prompt argument is missing.
    #[error("{0}")]
    MissingArgument(String),
}

impl Catalog {
    /// Read a catalog file.
    pub fn load(path: &Path) -> Result<Catalog, CatalogError> {
        let file = path.display().to_string();
        let bad = |reason: String| CatalogError::Invalid {
            file: file.clone(),
            reason,
        };
        let meta = std::fs::metadata(path).map_err(|e| bad(e.to_string()))?;
        if meta.len() > MAX_CATALOG_BYTES {
            return Err(bad(format!(
                "is {} bytes; the most is {MAX_CATALOG_BYTES}",
                meta.len()
            )));
        }
        let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
        Catalog::parse(&text).map_err(bad)
    }

    /// Parse a catalog's YAML text.
    pub fn parse(text: &str) -> Result<Catalog, String> {
        let de = serde_yaml_ng::Deserializer::from_str(text);
        let file: CatalogFile = serde_path_to_error::deserialize(de).map_err(|e| {
            let path = e.path().to_string();
            format!("{path}: {}", e.into_inner())
        })?;
        let mut seen = BTreeMap::new();
        for (i, p) in file.prompts.iter().enumerate() {
            if p.name.is_empty() || seen.insert(p.name.clone(), i).is_some() {
                return Err(format!(
                    "prompts[{i}].name: `{}` is empty or used twice",
                    p.name
                ));
            }
        }
        seen.clear();
        for (i, r) in file.resources.iter().enumerate() {
            if r.text.is_some() == r.blob.is_some() {
                return Err(format!(
                    "resources[{i}]: give exactly one of `text` and `blob`"
                ));
            }
            if seen.insert(r.uri.clone(), i).is_some() {
                return Err(format!("resources[{i}].uri: `{}` is used twice", r.uri));
            }
        }
        Ok(Catalog {
            prompts: file.prompts,
            resources: file.resources,
            templates: file.templates,
        })
    }

    /// `prompts/list`'s entries.
    pub fn prompt_list(&self) -> Vec<Value> {
        self.prompts
            .iter()
            .map(|p| {
                json!({
                    "name": p.name,
                    "description": p.description,
                    "arguments": p.arguments.iter().map(|a| json!({"name": a.name, "description": a.description, "required": a.required})).collect::<Vec<_>>(),
                })
            })
            .collect()
    }

    /// `prompts/get`: the prompt's messages with its arguments filled in.
    pub fn get_prompt(&self, name: &str, args: &Map<String, Value>) -> Result<Value, CatalogError> {
        let prompt = self
            .prompts
            .iter()
            .find(|p| p.name == name)
            .ok_or_else(|| CatalogError::NotFound(format!("no prompt `{name}`")))?;
        let mut values = BTreeMap::new();
        for a in &prompt.arguments {
            match args.get(&a.name) {
                Some(Value::String(s)) => {
                    values.insert(a.name.clone(), s.clone());
                }
                Some(other) => {
                    values.insert(a.name.clone(), other.to_string());
                }
                None if a.required => {
                    return Err(CatalogError::MissingArgument(format!(
                        "prompt `{name}` needs the argument `{}`",
                        a.name
                    )));
                }
                None => {
                    values.insert(a.name.clone(), String::new());
                }
            }
        }
        let messages: Vec<Value> = prompt
            .messages
            .iter()
            .map(|m| {
                fill(m, &|s: &str| {
                    let mut out = s.to_owned();
                    for (k, v) in &values {
                        out = out.replace(&format!("{{{{{k}}}}}"), v);
                    }
                    out
                })
            })
            .collect();
        Ok(json!({"description": prompt.description, "messages": messages}))
    }

    /// `resources/list`'s entries.
    pub fn resource_list(&self) -> Vec<Value> {
        self.resources
            .iter()
            .map(|r| {
                let mut v = json!({"uri": r.uri, "name": r.name, "description": r.description});
                if let Some(m) = &r.mime_type {
                    v["mimeType"] = json!(m);
                }
                v
            })
            .collect()
    }

    /// `resources/templates/list`'s entries.
    pub fn template_list(&self) -> Vec<Value> {
        self.templates
            .iter()
            .map(|t| {
                let mut v = json!({"uriTemplate": t.uri_template, "name": t.name, "description": t.description});
                if let Some(m) = &t.mime_type {
                    v["mimeType"] = json!(m);
                }
                v
            })
            .collect()
    }

    /// `resources/read`: a resource, or a template's text for a URI it matches.
    pub fn read(&self, uri: &str) -> Result<Value, CatalogError> {
        if let Some(r) = self.resources.iter().find(|r| r.uri == uri) {
            let mut c = json!({"uri": r.uri});
            if let Some(m) = &r.mime_type {
                c["mimeType"] = json!(m);
            }
            if let Some(t) = &r.text {
                c["text"] = json!(t);
            }
            if let Some(b) = &r.blob {
                c["blob"] = json!(b);
            }
            return Ok(json!({"contents": [c]}));
        }
        for t in &self.templates {
            if let Some(vars) = match_template(&t.uri_template, uri) {
                let mut text = t.text.clone();
                for (k, v) in &vars {
                    text = text.replace(&format!("{{{k}}}"), v);
                }
                let mut c = json!({"uri": uri, "text": text});
                if let Some(m) = &t.mime_type {
                    c["mimeType"] = json!(m);
                }
                return Ok(json!({"contents": [c]}));
            }
        }
        Err(CatalogError::NotFound(format!("no resource `{uri}`")))
    }
}

/// Replace in every string of `v`.
fn fill(v: &Value, f: &dyn Fn(&str) -> String) -> Value {
    match v {
        Value::String(s) => Value::String(f(s)),
        Value::Array(a) => Value::Array(a.iter().map(|x| fill(x, f)).collect()),
        Value::Object(o) => Value::Object(o.iter().map(|(k, x)| (k.clone(), fill(x, f))).collect()),
        other => other.clone(),
    }
}

/// The variables of `uri` under `template` (`{var}` is one non-empty segment without
/// `/`), or `None` when it does not match.
fn match_template(template: &str, uri: &str) -> Option<Vec<(String, String)>> {
    let mut vars = Vec::new();
    let mut rest = uri;
    let mut tpl = template;
    while !tpl.is_empty() {
        if let Some(after) = tpl.strip_prefix('{') {
            let end = after.find('}')?;
            let name = &after[..end];
            tpl = &after[end + 1..];
            // The variable runs to the template's next literal character (or the end).
            let stop = tpl.chars().next();
            let len = match stop {
                Some(c) => rest.find(c)?,
                None => rest.len(),
            };
            let value = &rest[..len];
            if value.is_empty() || value.contains('/') {
                return None;
            }
            vars.push((name.to_owned(), value.to_owned()));
            rest = &rest[len..];
        } else {
            let lit_len = tpl.find('{').unwrap_or(tpl.len());
            let lit = &tpl[..lit_len];
            rest = rest.strip_prefix(lit)?;
            tpl = &tpl[lit_len..];
        }
    }
    rest.is_empty().then_some(vars)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_match_segments() {
        assert_eq!(
            match_template("test://template/{id}/data", "test://template/123/data"),
            Some(vec![("id".into(), "123".into())])
        );
        assert_eq!(
            match_template("test://template/{id}/data", "test://template//data"),
            None
        );
        assert_eq!(
            match_template("test://template/{id}/data", "test://template/1/2/data"),
            None
        );
        assert_eq!(match_template("a://{x}", "b://1"), None);
    }

    #[test]
    fn a_broken_catalog_names_the_field() {
        let e = Catalog::parse("resources:\n  - uri: a\n    name: b\n").unwrap_err();
        assert!(e.contains("resources[0]"), "{e}");
        let e =
            Catalog::parse("prompts:\n  - name: p\n    messages: []\n    extra: 1\n").unwrap_err();
        assert!(e.contains("prompts[0]"), "{e}");
    }

    #[test]
    fn prompts_fill_their_arguments() {
        let c = Catalog::parse(
            "prompts:\n  - name: p\n    arguments: [{name: a, required: true}]\n    messages:\n      - {role: user, content: {type: text, text: \"x={{a}}\"}}\n",
        )
        .unwrap();
        let mut args = Map::new();
        args.insert("a".into(), json!("1"));
        let v = c.get_prompt("p", &args).unwrap();
        assert_eq!(v["messages"][0]["content"]["text"], "x=1");
        assert!(matches!(
            c.get_prompt("p", &Map::new()),
            Err(CatalogError::MissingArgument(_))
        ));
    }
}
