// Module resolve hooks the Node runner registers (node:module `register`) for a tool
// that imports `@breadai/core`, `@toren-run/core` or `zod`: the first two become
// toolshed's compatibility modules beside this file, `zod` (and its subpaths) the zod 4
// installed in toolshed-dispatch's node/ folder (`data.deps`, as the tool's process sees
// it), whatever the tool's own folder has.

import { pathToFileURL } from 'node:url';

let deps;

export async function initialize(data) {
  deps = data?.deps;
}

const COMPAT = {
  '@breadai/core': './bread.mjs',
  '@toren-run/core': './toren.mjs',
};

export async function resolve(specifier, context, next) {
  const own = COMPAT[specifier];
  if (own) return { url: new URL(own, import.meta.url).href, format: 'module', shortCircuit: true };
  if (specifier === 'zod' || specifier.startsWith('zod/')) {
    if (!deps) {
      throw new Error(
        'zod is not available: install it with `npm ci --prefix crates/toolshed-dispatch/node` (toolshed runs bread and Toren tools with its own zod 4)',
      );
    }
    try {
      return await next(specifier, { ...context, parentURL: pathToFileURL(`${deps}/package.json`).href });
    } catch (err) {
      throw new Error(
        `zod is not installed in ${deps}: run \`npm ci --prefix crates/toolshed-dispatch/node\` (${err?.message ?? err})`,
      );
    }
  }
  return next(specifier, context);
}
