// Module resolve hooks the Node runner registers (node:module `register`), in the tool's
// process (in the sandbox unless the operator runs tools unsandboxed):
//
// - `@breadai/core` and `@toren-run/core` become toolshed's compatibility modules beside
//   this file; `zod` (and its subpaths) the zod 4 of toolshed's Node helper package
//   (`data.deps`, as this process sees it), whatever the tool's own folder has. When the
//   helper package is missing, importing zod fails with code NODE_DEPS_NOT_INSTALLED and
//   `data.missing`, which says what to install and where.
// - A specifier imported by a transpiled TypeScript module (`data.sources`: its URL ->
//   its source's URL) is resolved as if the source imported it: packages of the tool's
//   own node_modules, plain files beside the source. A bare specifier found nowhere
//   from there is looked for in the installed dependency folders (`data.libraries`, the
//   NODE_PATH entries, which ESM import does not read). A relative import of another
//   transpiled module (`./name-<hash>.mjs`) resolves beside the transpiled file.

import { pathToFileURL } from 'node:url';

let deps;
let missing;
let sources = {};
let libraries = [];

export async function initialize(data) {
  deps = data?.deps;
  missing = data?.missing;
  sources = data?.sources ?? {};
  libraries = data?.libraries ?? [];
}

const COMPAT = {
  '@breadai/core': './bread.mjs',
  '@toren-run/core': './toren.mjs',
};

function notInstalled(detail) {
  const err = new Error(
    `${missing ?? "toolshed's Node helper package (zod 4) is not installed"}${detail ? ` (${detail})` : ''}`,
  );
  err.code = 'NODE_DEPS_NOT_INSTALLED';
  return err;
}

const isBare = (specifier) => !/^(?:\.{1,2}\/|\/|[a-zA-Z][a-zA-Z0-9+.-]*:)/.test(specifier);

export async function resolve(specifier, context, next) {
  const own = COMPAT[specifier];
  if (own) return { url: new URL(own, import.meta.url).href, format: 'module', shortCircuit: true };
  if (specifier === 'zod' || specifier.startsWith('zod/')) {
    if (!deps) throw notInstalled();
    try {
      return await next(specifier, { ...context, parentURL: pathToFileURL(`${deps}/package.json`).href });
    } catch (err) {
      throw notInstalled(`zod is not in ${deps}: ${err?.message ?? err}`);
    }
  }
  const source = context.parentURL && sources[context.parentURL];
  if (!source) return next(specifier, context);
  if (specifier.startsWith('./') && sources[new URL(specifier, context.parentURL).href]) {
    return next(specifier, context);
  }
  try {
    return await next(specifier, { ...context, parentURL: source });
  } catch (err) {
    if (err?.code !== 'ERR_MODULE_NOT_FOUND' || !isBare(specifier)) throw err;
    for (const dir of libraries) {
      try {
        return await next(specifier, { ...context, parentURL: pathToFileURL(`${dir}/`).href });
      } catch {
        // not in this folder either
      }
    }
    throw err;
  }
}
