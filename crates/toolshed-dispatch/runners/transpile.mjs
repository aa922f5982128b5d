// toolshed's TypeScript step: strip the types of a .ts tool once, so it then runs like .mjs.
//
//   node --experimental-import-meta-resolve transpile.mjs DEPS_DIR ENTRY OUT_DIR
//
// Transpiles ENTRY (and the .ts files it imports, recursively) with sucrase into
// OUT_DIR, and points every import back where the source would have found it: relative
// imports at the source's folder (a sibling `.ts`, also written as `./x.js` the way
// TypeScript wants, is transpiled too), bare imports at the package the source's folder
// resolves to (but `@breadai/core`, `@toren-run/core` and `zod`, which the runner
// resolves), and `import.meta.url` / `dirname` / `filename` at the source file.
// Prints one JSON line: {"entry": OUT_PATH, "sources": [{"path", "sha256"}]} or
// {"error": {"message", "code"}}.
//
// sucrase and es-module-lexer are looked up in DEPS_DIR first (toolshed-dispatch's own
// `node/` folder, filled by `npm ci`), then from the tool's own folder.

import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, renameSync, statSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { basename, dirname, extname, join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';

const [depsDir, entry, outDir] = process.argv.slice(2);

function fail(message, code) {
  process.stdout.write(`${JSON.stringify({ error: { message, code } })}\n`);
  process.exit(0);
}

function need(name) {
  const bases = [join(depsDir, 'package.json'), entry];
  for (const base of bases) {
    try {
      return createRequire(base)(name);
    } catch (err) {
      if (err?.code !== 'MODULE_NOT_FOUND') throw err;
    }
  }
  return fail(
    `the npm package \`${name}\` is not installed: run \`npm ci --prefix ${depsDir}\` ` +
      `(or install sucrase and es-module-lexer beside the tool) to run TypeScript tools`,
    'TranspilerNotInstalled',
  );
}

const sucrase = need('sucrase');
const lexer = need('es-module-lexer');
// es-module-lexer 3 exports init() as a function, 1.x a promise.
await (typeof lexer.init === 'function' ? lexer.init() : lexer.init);

const TS = ['.ts', '.mts'];
const done = new Map(); // source path -> output path
const sources = [];

const isFile = (p) => {
  try {
    return statSync(p).isFile();
  } catch {
    return false;
  }
};

// Where a relative import of a TypeScript source points: a .ts file to transpile, or null.
function tsTarget(path) {
  const ext = extname(path);
  if (TS.includes(ext)) return isFile(path) ? path : null;
  if (ext === '.js' || ext === '.mjs') {
    const stem = path.slice(0, -ext.length);
    const candidate = ext === '.js' ? `${stem}.ts` : `${stem}.mts`;
    if (!isFile(path) && isFile(candidate)) return candidate;
    return null;
  }
  if (ext === '') {
    for (const e of TS) if (isFile(path + e)) return path + e;
    if (isFile(join(path, 'index.ts'))) return join(path, 'index.ts');
  }
  return null;
}

function resolveSpecifier(spec, from) {
  if (spec.startsWith('node:') || spec.startsWith('data:')) return spec;
  const fromUrl = pathToFileURL(from).href;
  if (spec.startsWith('./') || spec.startsWith('../') || spec.startsWith('/') || spec.startsWith('file:')) {
    const path = spec.startsWith('file:') ? new URL(spec).pathname : resolve(dirname(from), spec);
    const ts = tsTarget(path);
    // Transpiled files sit side by side: a relative specifier keeps working wherever
    // the folder is shown (in the sandbox, /tmp/x appears as /host/tmp/x).
    if (ts) return `./${basename(transpile(ts))}`;
    if (isFile(path)) return pathToFileURL(path).href;
    for (const e of ['.js', '.mjs', '.json']) if (isFile(path + e)) return pathToFileURL(path + e).href;
    return pathToFileURL(path).href;
  }
  // The runner resolves these itself (resolve-hooks.mjs): our compatibility modules
  // and our zod 4, in the sandbox, where the host's paths may not exist.
  if (/^(?:@breadai\/core|@toren-run\/core|zod)(?:\/|$)/.test(spec)) return spec;
  try {
    return import.meta.resolve(spec, fromUrl);
  } catch {
    // Left as written: the runtime then names the missing package itself.
    return spec;
  }
}

// es-module-lexer 3 describes an import with named fields, 1.x with one-letter ones.
function normalize(imp) {
  if (typeof imp.type === 'string') {
    return { kind: imp.type, specifier: imp.specifier ?? undefined, start: imp.start, end: imp.end };
  }
  const kind = imp.d === -2 ? 'import-meta' : imp.d > -1 ? 'dynamic' : 'static';
  return { kind, specifier: imp.n, start: imp.s, end: imp.e };
}

function transpile(source) {
  const known = done.get(source);
  if (known) return known;
  const text = readFileSync(source, 'utf8');
  const hash = createHash('sha256').update(text).digest('hex');
  const out = join(outDir, `${basename(source).replace(/\.[cm]?ts$/, '')}-${hash.slice(0, 12)}.mjs`);
  done.set(source, out);
  sources.push({ path: source, sha256: hash });
  let code;
  try {
    code = sucrase.transform(text, {
      transforms: ['typescript'],
      filePath: source,
      disableESTransforms: true,
      preserveDynamicImport: true,
    }).code;
  } catch (err) {
    fail(`cannot transpile ${source}: ${err?.message ?? err}`, 'TranspileError');
  }
  let imports;
  try {
    [imports] = lexer.parse(code, source);
  } catch (err) {
    fail(`cannot read the imports of ${source} after transpiling: ${err?.message ?? err}`, 'TranspileError');
  }
  const fileUrl = pathToFileURL(source).href;
  const edits = [];
  for (const raw of imports) {
    const imp = normalize(raw);
    if (imp.kind === 'import-meta') {
      // import.meta: point .url, .dirname and .filename at the source, not the cache.
      const m = /^\s*\.\s*(url|dirname|filename)\b/.exec(code.slice(imp.end));
      if (m) {
        const value = m[1] === 'url' ? fileUrl : m[1] === 'dirname' ? dirname(source) : source;
        edits.push([imp.start, imp.end + m[0].length, JSON.stringify(value)]);
      }
      continue;
    }
    if (typeof imp.specifier !== 'string') continue; // a dynamic import of a computed specifier
    const target = resolveSpecifier(imp.specifier, source);
    if (target === imp.specifier) continue;
    if (imp.kind === 'dynamic') {
      edits.push([imp.start, imp.end, JSON.stringify(target)]);
    } else {
      edits.push([imp.start, imp.end, target.replace(/["'\\\n]/g, (c) => encodeURIComponent(c))]);
    }
  }
  edits.sort((a, b) => b[0] - a[0]);
  for (const [s, e, text] of edits) code = code.slice(0, s) + text + code.slice(e);
  mkdirSync(outDir, { recursive: true });
  // Written aside, then renamed: a reader never sees half a module.
  const tmp = `${out}.${process.pid}.tmp`;
  writeFileSync(tmp, `${code}\n//# sourceURL=${fileUrl}\n`);
  renameSync(tmp, out);
  return out;
}

if (!existsSync(entry)) fail(`${entry} does not exist`, 'NotFound');
const entryOut = transpile(resolve(entry));
process.stdout.write(`${JSON.stringify({ entry: entryOut, sources })}\n`);
