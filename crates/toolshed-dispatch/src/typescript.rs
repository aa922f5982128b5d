//! TypeScript tools made runnable without running anything on the host: a `.ts` (or
//! `.mts`) entry and the TypeScript files it imports by relative path are stripped of
//! their types in-process with oxc and written as `.mjs` files with content-hashed names
//! into a cache folder. Nothing of the tool's folder is loaded or executed here: sources
//! are read as text, and only regular files inside the entry's own folder are read (a
//! relative import leading out through `..` or a symlink is refused, so no host file
//! reaches the cache the sandbox reads).
//!
//! In the output, a relative import of a TypeScript file points at its transpiled sibling
//! (`./name-<hash>.mjs`); `import.meta.url`, `.dirname` and `.filename` are the source
//! file's; every other specifier is left as written. The Node runner, in the sandbox,
//! resolves those as if imported from the source file (runners/resolve-hooks.mjs, given
//! the output → source map): packages of the tool's own `node_modules`, plain `.js` and
//! `.json` files beside it, `@breadai/core`, `@toren-run/core` and `zod`. Imports are
//! found with oxc's own parse of the generated JavaScript (its module record and AST),
//! not by pattern matching.

use std::collections::{HashMap, VecDeque};
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Component, Path, PathBuf};

use oxc_allocator::Allocator;
use oxc_ast::ast::{Expression, ImportExpression, StaticMemberExpression};
use oxc_ast_visit::{Visit, walk};
use oxc_codegen::Codegen;
use oxc_diagnostics::{OxcDiagnostic, Severity};
use oxc_parser::Parser;
use oxc_semantic::SemanticBuilder;
use oxc_span::{SourceType, Span};
use oxc_transformer::{TransformOptions, Transformer};
use serde::{Deserialize, Serialize};

use crate::assets::{sha256_hex, write_atomically};
use crate::error::DispatchError;

/// Part of the cache key of transpiled output: a change to how output is made (the oxc
/// version, the rewriting below) must not reuse output made the old way.
pub(crate) const TRANSPILER_VERSION: &str = "oxc-0.110/1";

/// The largest TypeScript source read (bytes). With [`STACK_PER_BYTE`], it bounds the
/// stack one file can need (4 GiB reserved at most).
const MAX_SOURCE_BYTES: u64 = 512 * 1024;
/// The most TypeScript files one entry may pull in.
const MAX_MODULES: usize = 1000;
/// How many syntax errors a message lists.
const MAX_ERRORS_SHOWN: usize = 3;

/// What transpiling an entry wrote (kept beside it as `manifest.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Transpiled {
    /// The transpiled entry.
    pub entry: PathBuf,
    /// Every TypeScript source read (the entry first), with its output.
    pub modules: Vec<Module>,
    /// Whether some module leaves a specifier for the runner to resolve from its source
    /// (a package, a plain file beside it, a computed dynamic import): the runner then
    /// needs the output → source map.
    pub resolves: bool,
}

/// One transpiled source.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Module {
    /// The source, as the tool's folder names it.
    pub source: PathBuf,
    /// The SHA-256 of its text (hex): the output is reused while it still matches.
    pub sha256: String,
    /// The JavaScript written for it.
    pub output: PathBuf,
}

/// Transpile `entry` and the TypeScript files it imports by relative path into
/// `out_dir`. Blocking: file reads, parsing and writes.
pub(crate) fn transpile(entry: &Path, out_dir: &Path) -> Result<Transpiled, DispatchError> {
    let entry = normalize(entry);
    let folder = entry.parent().map(Path::to_path_buf).unwrap_or_default();
    let root = std::fs::canonicalize(&folder).map_err(|e| DispatchError::Transpile {
        path: entry.clone(),
        message: format!("its folder cannot be read ({e})"),
    })?;
    std::fs::create_dir_all(out_dir).map_err(|e| DispatchError::Io {
        what: format!("cannot create {}", out_dir.display()),
        source: e,
    })?;
    let mut graph = Graph {
        root,
        out_dir: out_dir.to_path_buf(),
        names: HashMap::new(),
        queue: VecDeque::new(),
        modules: Vec::new(),
        resolves: false,
    };
    let text = read_source(&graph.root, &entry).map_err(|why| DispatchError::Transpile {
        path: entry.clone(),
        message: why.describe(None),
    })?;
    let entry_out = graph.enqueue(&entry, text);
    while let Some((source, text)) = graph.queue.pop_front() {
        let code = graph.module(&source, &text)?;
        let output = out_dir.join(&graph.names[&source]);
        write_atomically(&output, code.as_bytes()).map_err(|e| DispatchError::Io {
            what: format!("cannot write {}", output.display()),
            source: e,
        })?;
    }
    Ok(Transpiled {
        entry: entry_out,
        modules: graph.modules,
        resolves: graph.resolves,
    })
}

/// The text of a TypeScript entry, read as [`transpile`] reads it (a regular file inside
/// its own folder, at most the cap).
pub(crate) fn entry_text(entry: &Path) -> Result<String, DispatchError> {
    let entry = normalize(entry);
    let fail = |message: String| DispatchError::Transpile {
        path: entry.clone(),
        message,
    };
    let folder = entry.parent().map(Path::to_path_buf).unwrap_or_default();
    let root = std::fs::canonicalize(&folder)
        .map_err(|e| fail(format!("its folder cannot be read ({e})")))?;
    read_source(&root, &entry).map_err(|why| fail(why.describe(None)))
}

/// Whether every source of `transpiled` still reads the same and its outputs exist.
pub(crate) fn unchanged(transpiled: &Transpiled) -> bool {
    let Some(root) = transpiled
        .modules
        .first()
        .and_then(|m| m.source.parent())
        .and_then(|dir| std::fs::canonicalize(dir).ok())
    else {
        return false;
    };
    transpiled.modules.iter().all(|m| {
        read_source(&root, &m.source).is_ok_and(|text| sha256_hex(text.as_bytes()) == m.sha256)
            && std::fs::metadata(&m.output).is_ok_and(|meta| meta.is_file())
    })
}

/// The sources found so far and those left to transpile.
struct Graph {
    /// The entry's folder, with every symlink resolved: no source may be outside it.
    root: PathBuf,
    out_dir: PathBuf,
    /// Source → output file name.
    names: HashMap<PathBuf, String>,
    /// Sources read but not transpiled yet, with their text.
    queue: VecDeque<(PathBuf, String)>,
    modules: Vec<Module>,
    resolves: bool,
}

impl Graph {
    /// Name the output of a source just read and queue it; its output path.
    fn enqueue(&mut self, source: &Path, text: String) -> PathBuf {
        let sha256 = sha256_hex(text.as_bytes());
        // The path is part of the name: two sources with the same text in different
        // folders differ in their `import.meta` and in what their imports reach.
        let mut keyed = source.as_os_str().as_encoded_bytes().to_vec();
        keyed.push(0);
        keyed.extend_from_slice(text.as_bytes());
        let stem = source
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let stem = stem
            .strip_suffix(".mts")
            .or_else(|| stem.strip_suffix(".ts"))
            .unwrap_or(&stem);
        let name = format!("{stem}-{}.mjs", &sha256_hex(&keyed)[..12]);
        let output = self.out_dir.join(&name);
        self.names.insert(source.to_path_buf(), name);
        self.modules.push(Module {
            source: source.to_path_buf(),
            sha256,
            output: output.clone(),
        });
        self.queue.push_back((source.to_path_buf(), text));
        output
    }

    /// The JavaScript of one source, its imports pointed where they must.
    fn module(&mut self, source: &Path, text: &str) -> Result<String, DispatchError> {
        let fail = |message: String| DispatchError::Transpile {
            path: source.to_path_buf(),
            message,
        };
        let (js, found) = on_deep_stack(text.len(), {
            let text = text.to_owned();
            move || analyze(&text)
        })
        .map_err(fail)?;
        let mut edits: Vec<(Span, String)> = Vec::new();
        for (specifier, span) in &found.requests {
            if let Some(target) = self.specifier(source, specifier)? {
                edits.push((*span, json_string(&target)));
            }
        }
        if found.computed_imports {
            self.resolves = true;
        }
        for (specifier, span) in &found.dynamic {
            if let Some(target) = self.specifier(source, specifier)? {
                edits.push((*span, json_string(&target)));
            }
        }
        for (property, span) in &found.metas {
            let value = match property.as_str() {
                "url" => url::Url::from_file_path(source)
                    .map(String::from)
                    .unwrap_or_default(),
                "dirname" => source
                    .parent()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default(),
                _ => source.display().to_string(),
            };
            edits.push((*span, json_string(&value)));
        }
        edits.sort_by_key(|(span, _)| std::cmp::Reverse(span.start));
        let mut code = js;
        for (span, text) in edits {
            code.replace_range(span.start as usize..span.end as usize, &text);
        }
        Ok(code)
    }

    /// What a specifier of `source` becomes: `Some` for a relative import of a
    /// TypeScript file (its transpiled sibling), `None` to leave it as written.
    fn specifier(
        &mut self,
        source: &Path,
        specifier: &str,
    ) -> Result<Option<String>, DispatchError> {
        let path = if specifier.starts_with("./") || specifier.starts_with("../") {
            source
                .parent()
                .map_or_else(|| PathBuf::from(specifier), |dir| dir.join(specifier))
        } else if specifier.starts_with('/') {
            PathBuf::from(specifier)
        } else if specifier.starts_with("file:") {
            match url::Url::parse(specifier)
                .ok()
                .and_then(|u| u.to_file_path().ok())
            {
                Some(p) => p,
                None => return Ok(None),
            }
        } else {
            // A package, a `node:` built-in or a URL: the runner resolves it from the
            // source, in the sandbox (built-ins and toolshed's own packages need no map).
            if !specifier.starts_with("node:")
                && !specifier.starts_with("data:")
                && !is_provided(specifier)
            {
                self.resolves = true;
            }
            return Ok(None);
        };
        let path = normalize(&path);
        let Some(target) = typescript_target(&path) else {
            // A plain `.js` / `.json` file (or nothing): left for the runner, which reads
            // it in the sandbox.
            self.resolves = true;
            return Ok(None);
        };
        if let Some(name) = self.names.get(&target) {
            return Ok(Some(format!("./{name}")));
        }
        if self.modules.len() >= MAX_MODULES {
            return Err(DispatchError::Transpile {
                path: source.to_path_buf(),
                message: format!(
                    "its import `{specifier}` is one TypeScript file too many: an entry may pull in at most {MAX_MODULES}"
                ),
            });
        }
        let text = read_source(&self.root, &target).map_err(|why| DispatchError::Transpile {
            path: source.to_path_buf(),
            message: why.describe(Some(specifier)),
        })?;
        let output = self.enqueue(&target, text);
        let name = output
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        Ok(Some(format!("./{name}")))
    }
}

/// `@breadai/core`, `@toren-run/core`, `zod` and their subpaths: the runner's resolve
/// hooks give toolshed's own, wherever the module is.
fn is_provided(specifier: &str) -> bool {
    ["@breadai/core", "@toren-run/core", "zod"].iter().any(|p| {
        specifier
            .strip_prefix(p)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    })
}

/// The TypeScript file a relative import names, if any: `x.ts` / `x.mts` itself, `x.js`
/// / `x.mjs` meaning `x.ts` / `x.mts` (as TypeScript wants imports written) when no such
/// JavaScript file exists, and `x` meaning `x.ts`, `x.mts` or `x/index.ts`.
fn typescript_target(path: &Path) -> Option<PathBuf> {
    let is_file = |p: &Path| std::fs::metadata(p).is_ok_and(|m| m.is_file());
    let with = |ext: &str| {
        let mut p = path.as_os_str().to_owned();
        p.push(ext);
        PathBuf::from(p)
    };
    match path.extension().and_then(|e| e.to_str()) {
        Some("ts" | "mts") => is_file(path).then(|| path.to_path_buf()),
        Some(ext @ ("js" | "mjs")) => {
            let candidate = path.with_extension(if ext == "js" { "ts" } else { "mts" });
            (!is_file(path) && is_file(&candidate)).then_some(candidate)
        }
        _ => [".ts", ".mts"]
            .iter()
            .map(|e| with(e))
            .find(|p| is_file(p))
            .or_else(|| Some(path.join("index.ts")).filter(|p| is_file(p))),
    }
}

/// Why a source could not be read.
enum Unreadable {
    /// It resolves to a path outside the entry's folder.
    Outside,
    /// It is not a regular file (a folder, a FIFO, a device).
    NotAFile,
    /// It is larger than [`MAX_SOURCE_BYTES`].
    TooLarge,
    /// It is not UTF-8.
    NotText,
    /// The file system said no.
    Io(std::io::Error),
}

impl Unreadable {
    /// The sentence for the error, naming the import (`None`: the entry itself).
    fn describe(&self, import: Option<&str>) -> String {
        let what = match import {
            Some(s) => format!("its import `{s}`"),
            None => "the file".to_owned(),
        };
        match self {
            Unreadable::Outside => format!(
                "{what} leads outside the tool's folder (through `..` or a symlink); TypeScript files are read on the host, so a tool may import only TypeScript files inside its own folder"
            ),
            Unreadable::NotAFile => format!("{what} is not a regular file"),
            Unreadable::TooLarge => {
                format!("{what} is larger than {MAX_SOURCE_BYTES} bytes")
            }
            Unreadable::NotText => format!("{what} is not UTF-8 text"),
            Unreadable::Io(e) => format!("{what} cannot be read ({e})"),
        }
    }
}

/// Read a TypeScript source, which must be a regular file inside `root` once every
/// symlink is resolved. The resolved path is opened without following a last symlink
/// and without blocking (a FIFO put in its place fails instead of hanging), and the
/// opened file itself is checked and read up to the cap.
fn read_source(root: &Path, path: &Path) -> Result<String, Unreadable> {
    let real = std::fs::canonicalize(path).map_err(Unreadable::Io)?;
    if !real.starts_with(root) {
        return Err(Unreadable::Outside);
    }
    let flags = rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::NONBLOCK;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(i32::try_from(flags.bits()).unwrap_or_default())
        .open(&real)
        .map_err(Unreadable::Io)?;
    let meta = file.metadata().map_err(Unreadable::Io)?;
    if !meta.is_file() {
        return Err(Unreadable::NotAFile);
    }
    if meta.len() > MAX_SOURCE_BYTES {
        return Err(Unreadable::TooLarge);
    }
    let mut bytes = Vec::new();
    file.take(MAX_SOURCE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(Unreadable::Io)?;
    if bytes.len() as u64 > MAX_SOURCE_BYTES {
        return Err(Unreadable::TooLarge);
    }
    String::from_utf8(bytes).map_err(|_| Unreadable::NotText)
}

/// Stack reserved per source byte for oxc's passes, which recurse once per level of
/// nesting (and a level takes at least one byte of source). Measured on an unoptimized
/// build: 32,000 levels of each of `(…)`, `!`, `?:`, `[…]`, `+`, `.a`, `{…}`, `()=>` and
/// `new` fit in 256 MiB, under 8 KiB a level; an optimized build needs less.
const STACK_PER_BYTE: usize = 8 * 1024;
/// The least stack a transpile thread gets.
const MIN_STACK: usize = 32 * 1024 * 1024;

/// Run `work` on a thread whose stack no nesting in `len` bytes of source can exhaust
/// (oxc has no depth limit of its own, and a stack overflow would abort the process).
/// The stack is reserved, not used: pages are touched only as deep as the source goes.
fn on_deep_stack<T: Send + 'static>(
    len: usize,
    work: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    let stack = len.saturating_mul(STACK_PER_BYTE).max(MIN_STACK);
    std::thread::Builder::new()
        .name("toolshed-transpile".into())
        .stack_size(stack)
        .spawn(work)
        .map_err(|e| format!("cannot start a transpile thread with a {stack}-byte stack ({e})"))?
        .join()
        .map_err(|_| "the transpiler failed on it".to_owned())?
}

/// What the generated JavaScript of a module imports, found with oxc's own parse: its
/// module record's static requests, and from the AST its dynamic imports and
/// `import.meta.<url|dirname|filename>`.
struct Analysis {
    requests: Vec<(String, Span)>,
    dynamic: Vec<(String, Span)>,
    computed_imports: bool,
    metas: Vec<(String, Span)>,
}

/// The JavaScript of a TypeScript module and what it imports (see [`Analysis`]).
fn analyze(text: &str) -> Result<(String, Analysis), String> {
    let js = strip_types(text)?;
    let allocator = Allocator::default();
    let parsed = Parser::new(&allocator, &js, SourceType::mjs()).parse();
    if parsed.panicked || has_errors(&parsed.errors) {
        return Err(format!(
            "the JavaScript made from it does not parse: {}",
            describe_errors(&js, &parsed.errors)
        ));
    }
    let mut requests = Vec::new();
    for (specifier, found) in &parsed.module_record.requested_modules {
        for request in found {
            requests.push((specifier.to_string(), request.span));
        }
    }
    let mut found = Found::default();
    found.visit_program(&parsed.program);
    let analysis = Analysis {
        requests,
        dynamic: found.dynamic,
        computed_imports: found.computed_imports,
        metas: found.metas,
    };
    Ok((js, analysis))
}

/// The JavaScript of a TypeScript module: types, interfaces and type-only imports
/// removed, enums, namespaces and parameter properties made JavaScript; nothing else
/// lowered (the output keeps the source's ECMAScript level).
fn strip_types(text: &str) -> Result<String, String> {
    let allocator = Allocator::default();
    let parsed = Parser::new(&allocator, text, SourceType::ts()).parse();
    if parsed.panicked || has_errors(&parsed.errors) {
        return Err(describe_errors(text, &parsed.errors));
    }
    let mut program = parsed.program;
    let scoping = SemanticBuilder::new()
        .build(&program)
        .semantic
        .into_scoping();
    let options = TransformOptions::default();
    let transformed = Transformer::new(&allocator, Path::new("tool.ts"), &options)
        .build_with_scoping(scoping, &mut program);
    if has_errors(&transformed.errors) {
        return Err(describe_errors(text, &transformed.errors));
    }
    Ok(Codegen::new().build(&program).code)
}

fn has_errors(diagnostics: &[OxcDiagnostic]) -> bool {
    diagnostics.iter().any(|d| d.severity == Severity::Error)
}

/// The first errors, each with its line and column in `text`.
fn describe_errors(text: &str, diagnostics: &[OxcDiagnostic]) -> String {
    let errors: Vec<&OxcDiagnostic> = diagnostics
        .iter()
        .filter(|d| d.severity == Severity::Error)
        .collect();
    let mut shown: Vec<String> = errors
        .iter()
        .take(MAX_ERRORS_SHOWN)
        .map(|d| {
            let at = d
                .labels
                .as_ref()
                .and_then(|l| l.first())
                .map(|l| l.offset());
            match at {
                Some(offset) => {
                    let (line, column) = line_column(text, offset);
                    format!("line {line}, column {column}: {}", d.message)
                }
                None => d.message.to_string(),
            }
        })
        .collect();
    if errors.len() > MAX_ERRORS_SHOWN {
        shown.push(format!("and {} more", errors.len() - MAX_ERRORS_SHOWN));
    }
    if shown.is_empty() {
        "the parser gave up".to_owned()
    } else {
        shown.join("; ")
    }
}

/// 1-based line and column (in characters) of a byte offset.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = text.get(..offset.min(text.len())).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

/// A JavaScript string literal of `value`.
fn json_string(value: &str) -> String {
    serde_json::Value::String(value.to_owned()).to_string()
}

/// `path` with `.` and `..` taken out without touching the file system (a `..` at the
/// root stays at the root).
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// What the module record leaves out: dynamic imports of a string literal, dynamic
/// imports of anything else, and `import.meta.<url|dirname|filename>`.
#[derive(Default)]
struct Found {
    dynamic: Vec<(String, Span)>,
    computed_imports: bool,
    metas: Vec<(String, Span)>,
}

impl<'a> Visit<'a> for Found {
    fn visit_import_expression(&mut self, it: &ImportExpression<'a>) {
        match &it.source {
            Expression::StringLiteral(s) => self.dynamic.push((s.value.to_string(), s.span)),
            _ => self.computed_imports = true,
        }
        walk::walk_import_expression(self, it);
    }

    fn visit_static_member_expression(&mut self, it: &StaticMemberExpression<'a>) {
        if let Expression::MetaProperty(meta) = &it.object
            && meta.meta.name == "import"
            && meta.property.name == "meta"
            && matches!(it.property.name.as_str(), "url" | "dirname" | "filename")
        {
            self.metas.push((it.property.name.to_string(), it.span));
        }
        walk::walk_static_member_expression(self, it);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn folder(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (name, text) in files {
            let p = dir.path().join(name);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        dir
    }

    #[test]
    fn types_are_stripped_and_imports_pointed_at_siblings_or_left_for_the_runner() {
        let dir = folder(&[
            (
                "main.ts",
                "import { a } from './a.js';\nimport type { T } from './types';\nimport { b } from './sub';\n\
                 import pkg from 'pkg/x';\nimport { z } from 'zod';\nimport data from './data.json' with { type: 'json' };\n\
                 export * from './a';\n\
                 enum E { X = 'x' }\nconst t: T = 1 as any;\n\
                 export default async function main(n: number): Promise<string> {\n\
                   const lazy = await import('./lazy.mts');\n\
                   return [a, b, pkg, z, data, E.X, t, lazy, import.meta.url, import.meta.dirname, import.meta.filename].join();\n}\n",
            ),
            ("a.ts", "export const a: number = 1;\n"),
            ("types.ts", "export type T = number;\n"),
            ("sub/index.ts", "export const b = 2 as number;\n"),
            ("lazy.mts", "export const lazy = 'z';\n"),
            ("data.json", "[]"),
        ]);
        let out = tempfile::tempdir().unwrap();
        let entry = dir.path().join("main.ts");
        let t = transpile(&entry, out.path()).unwrap();
        assert!(t.resolves, "pkg/x and ./data.json are left for the runner");
        let sources: Vec<_> = t
            .modules
            .iter()
            .map(|m| m.source.strip_prefix(dir.path()).unwrap().to_owned())
            .collect();
        assert_eq!(
            sources,
            ["main.ts", "a.ts", "sub/index.ts", "lazy.mts"].map(PathBuf::from)
        );
        assert_eq!(t.entry, t.modules[0].output);
        let main = std::fs::read_to_string(&t.entry).unwrap();
        let name = |i: usize| {
            t.modules[i]
                .output
                .file_name()
                .unwrap()
                .to_string_lossy()
                .into_owned()
        };
        assert!(main.contains(&format!("from \"./{}\"", name(1))), "{main}");
        assert!(main.contains(&format!("from \"./{}\"", name(2))), "{main}");
        assert!(
            main.contains(&format!("import(\"./{}\")", name(3))),
            "{main}"
        );
        assert!(main.contains("from \"pkg/x\""), "{main}");
        assert!(main.contains("from \"zod\""), "{main}");
        assert!(main.contains("from \"./data.json\""), "{main}");
        assert!(
            !main.contains("types"),
            "a type-only import is gone: {main}"
        );
        assert!(!main.contains(": number"), "{main}");
        let url = url::Url::from_file_path(&entry).unwrap().to_string();
        assert!(main.contains(&json_string(&url)), "{main}");
        assert!(
            main.contains(&json_string(&dir.path().display().to_string())),
            "{main}"
        );
        assert!(
            main.contains(&json_string(&entry.display().to_string())),
            "{main}"
        );
        assert!(!main.contains("import.meta"), "{main}");
        // The same source transpiled again names the same files.
        let again = transpile(&entry, out.path()).unwrap();
        assert_eq!(again.modules, t.modules);
    }

    #[test]
    fn a_module_with_only_typescript_imports_needs_no_map() {
        let dir = folder(&[
            (
                "main.ts",
                "import { a } from './a';\nimport { readFileSync } from 'node:fs';\nexport default () => a + readFileSync.name;\n",
            ),
            ("a.ts", "export const a: string = 'a';\n"),
        ]);
        let out = tempfile::tempdir().unwrap();
        let t = transpile(&dir.path().join("main.ts"), out.path()).unwrap();
        assert!(!t.resolves);
    }

    #[test]
    fn syntax_errors_name_the_line_and_column() {
        let dir = folder(&[("bad.ts", "export const x: number = 1;\nconst y = ;\n")]);
        let out = tempfile::tempdir().unwrap();
        let err = transpile(&dir.path().join("bad.ts"), out.path()).unwrap_err();
        assert_eq!(err.code().as_str(), "TRANSPILE_FAILED");
        assert!(err.to_string().contains("line 2, column 11"), "{err}");
    }

    #[test]
    fn a_fifo_or_folder_is_refused_without_blocking() {
        let dir = folder(&[("sub/x.ts", "")]);
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let pipe = dir.path().join("pipe.ts");
        rustix::fs::mkfifoat(
            rustix::fs::CWD,
            &pipe,
            rustix::fs::Mode::from_raw_mode(0o644),
        )
        .unwrap();
        assert!(matches!(
            read_source(&root, &pipe),
            Err(Unreadable::NotAFile)
        ));
        assert!(matches!(
            read_source(&root, &dir.path().join("sub")),
            Err(Unreadable::NotAFile)
        ));
        let outside = tempfile::tempdir().unwrap();
        assert!(matches!(
            read_source(&root, outside.path()),
            Err(Unreadable::Outside)
        ));
    }

    /// oxc recurses once per level of nesting; a deeply nested source (here 20,000
    /// levels, which overflows a default thread stack) is transpiled on a thread whose
    /// stack its size cannot exhaust, instead of aborting the process.
    #[test]
    fn deep_nesting_cannot_exhaust_the_stack() {
        let depth = 20_000;
        let dir = folder(&[(
            "deep.ts",
            &format!(
                "export const x = {}1{};\n",
                "(".repeat(depth),
                ")".repeat(depth)
            ),
        )]);
        let out = tempfile::tempdir().unwrap();
        let t = std::thread::Builder::new()
            .stack_size(2 * 1024 * 1024)
            .spawn({
                let entry = dir.path().join("deep.ts");
                let out = out.path().to_path_buf();
                move || transpile(&entry, &out).map(|t| t.modules.len())
            })
            .unwrap()
            .join()
            .unwrap();
        assert_eq!(t.unwrap(), 1);
        let dir = folder(&[("big.ts", &"!".repeat(MAX_SOURCE_BYTES as usize + 1))]);
        let err = transpile(&dir.path().join("big.ts"), out.path()).unwrap_err();
        assert!(err.to_string().contains("larger than"), "{err}");
    }

    #[test]
    fn paths_are_normalized_without_the_file_system() {
        assert_eq!(
            normalize(Path::new("/a/b/../c/./d.ts")),
            Path::new("/a/c/d.ts")
        );
        assert_eq!(normalize(Path::new("/../x")), Path::new("/x"));
        assert_eq!(line_column("ab\ncd", 4), (2, 2));
        assert!(is_provided("zod") && is_provided("zod/v4") && !is_provided("zodiac"));
    }
}
