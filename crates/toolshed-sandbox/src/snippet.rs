//! Code in a language, run on a JSON input the way the seed's Sandbox Test runs it: a
//! Python file defining `run(input)`, a Node module exporting `run`, or a shell script
//! reading its input on stdin. [`Snippet::spec`] makes the [`RunSpec`];
//! [`Snippet::result`] reads the JSON-encoded result and the error out of the
//! [`Outcome`]. The CLI's `toolshed sandbox run` and the server's
//! `POST /api/v1/tools/sandbox/execute` both run code through it.
//!
//! ```no_run
//! # async fn demo() -> Result<(), toolshed_sandbox::SandboxError> {
//! use toolshed_sandbox::snippet::{Code, Language, Snippet};
//! use toolshed_sandbox::{Sandbox, SandboxConfig};
//!
//! let sandbox = Sandbox::new(SandboxConfig::default())?;
//! let snippet = Snippet::new(
//!     Language::Python,
//!     Code::Inline("def run(input):\n    return {\"doubled\": input[\"n\"] * 2}".into()),
//! );
//! let input = serde_json::json!({"n": 21});
//! let outcome = sandbox.run(snippet.spec(&input)?, snippet.stdin(&input)).await?;
//! let result = snippet.result(&outcome);
//! assert_eq!(result.output.as_deref(), Some("{\"doubled\": 42}"));
//! # Ok(()) }
//! ```

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::config::{Bind, RunSpec};
use crate::error::SandboxError;
use crate::run::{KillReason, Outcome};
use crate::spawn::Exit;

/// The languages code can be written in.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    strum::Display,
    strum::EnumString,
    strum::EnumIter,
    strum::IntoStaticStr,
)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum Language {
    /// Python 3 (`/usr/bin/python3`, isolated mode): the code defines `run(input)`.
    #[default]
    Python,
    /// Node (`/usr/bin/node`): the module exports `run` (named, as its default export, or
    /// on it); CommonJS and ES modules both work.
    Node,
    /// A shell script (`/usr/bin/bash`): the input is on stdin and in `TOOLSHED_INPUT`;
    /// its stdout is the result (JSON if it parses, else the text).
    Bash,
}

impl Language {
    /// The language of a tool file, by its extension: `.py`, `.js`/`.mjs`/`.cjs`, `.sh`.
    pub fn of_path(file: &Path) -> Option<Language> {
        match file.extension().and_then(|e| e.to_str()) {
            Some("py") => Some(Language::Python),
            Some("js" | "mjs" | "cjs") => Some(Language::Node),
            Some("sh" | "bash") => Some(Language::Bash),
            _ => None,
        }
    }

    /// The name on the wire: `python`, `node` or `bash`.
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// The interpreter, under `/usr/bin` (the sandbox shows the host's `/usr`), and the
    /// Debian package that provides it.
    pub fn interpreter(self) -> (&'static str, &'static str) {
        match self {
            Language::Python => ("/usr/bin/python3", "python3"),
            Language::Node => ("/usr/bin/node", "nodejs"),
            Language::Bash => ("/usr/bin/bash", "bash"),
        }
    }

    /// The file name inline code is written to in the scratch folder.
    fn inline_name(self) -> &'static str {
        match self {
            Language::Python => "tool.py",
            // `.js` lets Node detect CommonJS or an ES module by the syntax.
            Language::Node => "tool.js",
            Language::Bash => "tool.sh",
        }
    }
}

/// Where the code is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Code {
    /// The code itself: written into the scratch folder before the start.
    Inline(String),
    /// A host file: bound read-only at `/tool/<its name>`.
    File(PathBuf),
    /// A file of a folder of code (a registered tool's uploaded files, or the folder of
    /// its file on the server): the folder bound read-only at `/tool`, the file run from
    /// there, so it imports the modules beside it.
    InFolder {
        /// The folder, on the host.
        folder: PathBuf,
        /// The file, relative to the folder (plain names, no `.` or `..`).
        file: PathBuf,
    },
}

/// Where [`Snippet::libraries`] appear inside the sandbox: `/tool-libs/0`, `/tool-libs/1`…
const LIBRARIES_INSIDE: &str = "/tool-libs";

/// What the runner calls.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Entry {
    /// `run(input)`, the seed's Sandbox Test convention (Node: the export `run`, else the
    /// default export or its `run`). Bash has no entry: the script runs.
    #[default]
    Run,
    /// A named function, called as a registry endpoint calls it: Python
    /// `name(**input)` (the input must be an object), Node `name(input, ctx)`. Node's
    /// `default` falls back to the export named like the file's stem.
    Function(String),
}

/// Code to run in the sandbox, its language and its entry point.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snippet {
    /// The language.
    pub language: Language,
    /// The code.
    pub code: Code,
    /// What the runner calls.
    pub entry: Entry,
    /// Folders of installed dependencies, bound read-only and searched first: Python's
    /// `sys.path` (after the code's own folder), Node's `NODE_PATH` (which `require`
    /// honours and an ES module's bare `import` does not, as for dispatched tools).
    pub libraries: Vec<PathBuf>,
}

/// What a run of a snippet produced, read from its [`Outcome`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnippetResult {
    /// The result, JSON-encoded as the code's language wrote it (`json.dumps` in
    /// Python, `JSON.stringify` in Node; a script's stdout if it is JSON, else that text
    /// as a JSON string). `None` when the run failed.
    pub output: Option<String>,
    /// Why the run failed (the last line of stderr for a non-zero exit, the limit hit,
    /// the signal), or `None`.
    pub error: Option<String>,
}

/// Where the runners leave the JSON-encoded result, relative to the scratch folder
/// (read back with beneath-only, no-symlink opens).
pub const RESULT_FILE: &str = ".toolshed-output.json";

/// The most bytes of a snippet's result that are read back: the output budget of a
/// call (1 MiB, as `toolshed_core::budget`). A larger result file is refused by its
/// size, before any of it is read, and the run's error says `RESULT_TOO_LARGE`.
pub const RESULT_MAX_BYTES: u64 = 1024 * 1024;

/// Loads the tool file, calls the entry with the JSON from stdin, and writes the
/// JSON-encoded result to the result file and to stdout (as the seed's sandbox prints
/// it). `argv`: the file, `run` or `function`, the function's name.
const PYTHON_RUNNER: &str = r#"
import json, sys, types
path, kind, name = sys.argv[1], sys.argv[2], sys.argv[3]
# The code's own folder, then its libraries, come first on the import path (isolated
# mode adds neither).
sys.path[:0] = [path.rsplit("/", 1)[0]] + json.loads(sys.argv[4])
# Loaded by hand: importlib.util and inspect would double the start-up time.
module = types.ModuleType("tool")
module.__file__ = path
sys.modules["tool"] = module
with open(path, "rb") as f:
    exec(compile(f.read(), path, "exec"), module.__dict__)
fn = getattr(module, name, None)
if not callable(fn):
    sys.exit(f"{path} defines no run(input) function" if kind == "run" else f"{path} defines no function {name}")
data = json.load(sys.stdin)
if kind == "run":
    result = fn(data)
else:
    if not isinstance(data, dict):
        sys.exit(f"the input of {name} must be a JSON object (its keyword arguments)")
    result = fn(**data)
if isinstance(result, types.CoroutineType) or hasattr(result, "__await__"):
    import asyncio
    async def _wait(r):
        return await r
    result = asyncio.run(_wait(result))
elif isinstance(result, types.GeneratorType):
    last = None
    for last in result:
        pass
    result = last
result = json.dumps(result)
with open("/work/.toolshed-output.json", "w") as f:
    f.write(result)
print(result)
"#;

/// The same for a module: `run` (named, default, or on the default export), or a named
/// export called with `(input, ctx)`.
const NODE_RUNNER: &str = r#"
import { readFileSync, writeFileSync } from "node:fs";
import { basename, extname } from "node:path";
const [path, kind, name] = process.argv.slice(1);
const mod = await import(path);
let fn;
if (kind === "run") {
  fn = typeof mod.run === "function" ? mod.run
    : typeof mod.default === "function" ? mod.default
    : typeof mod.default?.run === "function" ? mod.default.run : undefined;
} else {
  const stem = basename(path, extname(path));
  fn = typeof mod[name] === "function" ? mod[name]
    : typeof mod.default?.[name] === "function" ? mod.default[name]
    : name === "default" && typeof mod[stem] === "function" ? mod[stem] : undefined;
}
if (!fn) {
  console.error(kind === "run" ? `${path} exports no run(input) function` : `${path} exports no function ${name}`);
  process.exit(1);
}
const text = readFileSync(0, "utf8");
const input = text.trim() ? JSON.parse(text) : null;
const ctx = { agent_id: "sandbox", credentials: {} };
let result = kind === "run" ? fn(input) : fn(input, ctx);
result = await result;
if (result && typeof result[Symbol.asyncIterator] === "function") {
  let last; for await (last of result); result = last;
} else if (result && typeof result.next === "function" && typeof result[Symbol.iterator] === "function") {
  let last; for (last of result); result = last;
}
const encoded = JSON.stringify(result ?? null);
writeFileSync("/work/.toolshed-output.json", encoded);
console.log(encoded);
"#;

impl Snippet {
    /// `code` in `language`, calling `run(input)`.
    pub fn new(language: Language, code: Code) -> Snippet {
        Snippet {
            language,
            code,
            entry: Entry::Run,
            libraries: Vec::new(),
        }
    }

    /// The same, with these dependency folders (see [`Snippet::libraries`]).
    pub fn with_libraries(mut self, libraries: Vec<PathBuf>) -> Snippet {
        self.libraries = libraries;
        self
    }

    /// The same, calling `entry` instead.
    pub fn with_entry(mut self, entry: Entry) -> Snippet {
        self.entry = entry;
        self
    }

    /// The command running the snippet on `input`, with the default limits and the
    /// network off: set [`RunSpec::limits`] and [`RunSpec::network`] on it. Fails when the
    /// interpreter is not installed (`PROGRAM_NOT_FOUND`, naming the package).
    pub fn spec(&self, input: &Value) -> Result<RunSpec, SandboxError> {
        let (interpreter, package) = self.language.interpreter();
        if !Path::new(interpreter).is_file() {
            return Err(SandboxError::ProgramNotFound {
                program: interpreter.to_owned(),
                reason: format!(
                    "it is not installed; the sandbox runs the one under /usr (Debian: apt-get install {package})"
                ),
            });
        }
        let (inside, bind, file) = match &self.code {
            Code::Inline(text) => {
                let name = self.language.inline_name();
                (
                    format!("/work/{name}"),
                    None,
                    Some((PathBuf::from(name), text.clone().into_bytes())),
                )
            }
            Code::File(host) => {
                let name = host
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_else(|| self.language.inline_name().to_owned());
                let inside = format!("/tool/{name}");
                (inside.clone(), Some(Bind::read_only(host, inside)), None)
            }
            Code::InFolder { folder, file } => {
                if file.as_os_str().is_empty()
                    || file
                        .components()
                        .any(|c| !matches!(c, std::path::Component::Normal(_)))
                {
                    return Err(SandboxError::config(
                        "code.file",
                        "must be a path relative to the code's folder, without `.` or `..`",
                    ));
                }
                let inside = Path::new("/tool").join(file).to_string_lossy().into_owned();
                (inside, Some(Bind::read_only(folder, "/tool")), None)
            }
        };
        let libraries: Vec<String> = (0..self.libraries.len())
            .map(|i| format!("{LIBRARIES_INSIDE}/{i}"))
            .collect();
        let (kind, name) = match &self.entry {
            Entry::Run => ("run", "run"),
            Entry::Function(f) => ("function", f.as_str()),
        };
        let mut spec = match self.language {
            Language::Python => {
                let sys_path =
                    serde_json::to_string(&libraries).unwrap_or_else(|_| "[]".to_owned());
                RunSpec::new(
                    interpreter,
                    [
                        "-I",
                        "-c",
                        PYTHON_RUNNER,
                        inside.as_str(),
                        kind,
                        name,
                        sys_path.as_str(),
                    ],
                )
            }
            Language::Node => RunSpec::new(
                interpreter,
                [
                    "--experimental-detect-module",
                    "--no-warnings",
                    "--input-type=module",
                    "-e",
                    NODE_RUNNER,
                    inside.as_str(),
                    kind,
                    name,
                ],
            ),
            Language::Bash => RunSpec::new(interpreter, [inside.as_str()])
                .env("TOOLSHED_INPUT", input.to_string()),
        };
        if let Some(bind) = bind {
            spec = spec.bind(bind);
        }
        for (host, inside) in self.libraries.iter().zip(&libraries) {
            spec = spec.bind(Bind::read_only(host, inside));
        }
        if self.language == Language::Node && !libraries.is_empty() {
            spec = spec.env("NODE_PATH", libraries.join(":"));
        }
        if let Some(file) = file {
            spec.files.push(file);
        }
        if self.language != Language::Bash {
            spec.collect = vec![RESULT_FILE.into()];
            spec.collect_max_bytes = Some(RESULT_MAX_BYTES);
        }
        Ok(spec)
    }

    /// What to write on the snippet's stdin: the input as JSON.
    pub fn stdin(&self, input: &Value) -> Vec<u8> {
        input.to_string().into_bytes()
    }

    /// The JSON-encoded result and the error of a finished run.
    pub fn result(&self, o: &Outcome) -> SnippetResult {
        let output = if !o.success() {
            None
        } else {
            match self.language {
                Language::Bash => {
                    let stdout = String::from_utf8_lossy(&o.stdout);
                    Some(match serde_json::from_str::<Value>(stdout.trim()) {
                        Ok(v) => v.to_string(),
                        Err(_) => Value::String(stdout.into_owned()).to_string(),
                    })
                }
                Language::Python | Language::Node => o
                    .file(RESULT_FILE)
                    .map(|b| String::from_utf8_lossy(b).into_owned()),
            }
        };
        let too_large = o
            .files
            .iter()
            .find(|f| f.path == Path::new(RESULT_FILE))
            .and_then(|f| f.too_large);
        let error = match (&output, failure(o)) {
            (_, Some(e)) => Some(e),
            (None, None) if let Some(size) = too_large => Some(format!(
                "RESULT_TOO_LARGE: the result is {size} bytes, more than the output budget of {RESULT_MAX_BYTES} bytes; return less (a summary, a page), or write large data to a file"
            )),
            (None, None) => {
                let why = o
                    .files
                    .iter()
                    .find(|f| f.path == Path::new(RESULT_FILE))
                    .and_then(|f| f.contents.as_ref().err())
                    .map(|e| format!(" ({e})"))
                    .unwrap_or_default();
                Some(format!(
                    "the tool exited with code 0 but its result could not be read from {RESULT_FILE}{why}"
                ))
            }
            (Some(_), None) => None,
        };
        SnippetResult { output, error }
    }
}

/// Why a run failed, in a sentence: the limit it hit, the signal that ended it, or its
/// exit code with the last line of its stderr. `None` for a successful run.
pub fn failure(o: &Outcome) -> Option<String> {
    if o.success() {
        return None;
    }
    Some(match (o.killed, o.exit) {
        (Some(KillReason::Timeout), _) => format!(
            "the tool ran past its timeout of {} s and was killed",
            o.limits.timeout_ms.div_ceil(1000)
        ),
        (Some(KillReason::OutputCap), _) => {
            "the tool wrote more output than the cap and was killed".into()
        }
        _ if o.oom_killed => format!(
            "the tool ran out of memory (limit {} MB) and was killed",
            o.limits.memory_bytes / (1024 * 1024)
        ),
        (_, Exit::Signal(s)) => format!("the tool was killed by signal {s}"),
        (_, Exit::Code(c)) => {
            let stderr = String::from_utf8_lossy(&o.stderr);
            let last = stderr.lines().rev().find(|l| !l.trim().is_empty());
            match last {
                Some(line) => format!("the tool exited with code {c}: {}", line.trim()),
                None => format!("the tool exited with code {c}"),
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn languages_have_one_name_each() {
        use strum::IntoEnumIterator;
        for l in Language::iter() {
            assert_eq!(l.as_str().parse::<Language>().ok(), Some(l));
            let wire = serde_json::to_value(l).unwrap_or_default();
            assert_eq!(wire, l.as_str());
        }
        assert_eq!(Language::default(), Language::Python);
        assert_eq!(Language::of_path(Path::new("a.mjs")), Some(Language::Node));
        assert_eq!(Language::of_path(Path::new("a.txt")), None);
    }

    #[test]
    fn inline_code_is_written_into_scratch_and_a_file_is_bound_read_only() {
        let input = serde_json::json!({"n": 1});
        let inline = Snippet::new(
            Language::Python,
            Code::Inline("def run(i): return i".into()),
        );
        // python3 and bash are installed wherever the sandbox's tests run (scripts/test).
        let spec = inline.spec(&input).unwrap_or_else(|e| panic!("{e}"));
        {
            assert_eq!(spec.files.len(), 1);
            assert_eq!(spec.files[0].0, PathBuf::from("tool.py"));
            assert!(spec.binds.is_empty());
            assert_eq!(spec.collect, vec![PathBuf::from(RESULT_FILE)]);
        }
        let file = Snippet::new(Language::Bash, Code::File("/srv/t/echo.sh".into()));
        let spec = file.spec(&input).unwrap_or_else(|e| panic!("{e}"));
        {
            assert!(spec.files.is_empty());
            assert_eq!(
                spec.binds,
                vec![Bind::read_only("/srv/t/echo.sh", "/tool/echo.sh")]
            );
            assert!(spec.collect.is_empty());
            assert!(
                spec.env
                    .iter()
                    .any(|(k, v)| k == "TOOLSHED_INPUT" && v == "{\"n\":1}")
            );
        }
    }

    #[test]
    fn a_file_in_a_folder_binds_the_folder_and_its_libraries_join_the_path() {
        let input = serde_json::json!({});
        let folder = Snippet::new(
            Language::Python,
            Code::InFolder {
                folder: "/srv/code/abc".into(),
                file: "pkg/tool.py".into(),
            },
        )
        .with_entry(Entry::Function("lookup".into()))
        .with_libraries(vec!["/srv/deps/1".into()]);
        let spec = folder.spec(&input).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            spec.binds,
            vec![
                Bind::read_only("/srv/code/abc", "/tool"),
                Bind::read_only("/srv/deps/1", "/tool-libs/0"),
            ]
        );
        let args: Vec<String> = spec
            .args
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            args[3..],
            [
                "/tool/pkg/tool.py",
                "function",
                "lookup",
                "[\"/tool-libs/0\"]"
            ]
        );
        let node = Snippet::new(
            Language::Node,
            Code::InFolder {
                folder: "/srv/code/abc".into(),
                file: "tool.mjs".into(),
            },
        )
        .with_libraries(vec!["/srv/deps/2".into()]);
        let spec = node.spec(&input).unwrap_or_else(|e| panic!("{e}"));
        assert!(
            spec.env
                .iter()
                .any(|(k, v)| k == "NODE_PATH" && v == "/tool-libs/0")
        );
        // The file must stay inside its folder.
        for bad in ["../x.py", "/etc/passwd", ""] {
            let escape = Snippet::new(
                Language::Python,
                Code::InFolder {
                    folder: "/srv/code/abc".into(),
                    file: bad.into(),
                },
            );
            assert!(escape.spec(&input).is_err(), "{bad:?} was accepted");
        }
    }
}
