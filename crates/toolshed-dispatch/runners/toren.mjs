// `@toren-run/core` as toolshed runs it: defineTool mapped onto toolshed's spec (see
// compat.mjs). Toren's durability contract is toolshed's own: effects, idempotency,
// approval (a predicate function is evaluated in the tool's own worker, by the
// runner's `approval` request), timeoutMs and maxAttempts.

import { COMPAT, CompatError, checkSchema, kindOf, onlyKnown } from './compat.mjs';

const FRAMEWORK = 'Toren';
const FIELDS = [
  'name',
  'description',
  'input',
  'effects',
  'idempotency',
  'approval',
  'timeoutMs',
  'maxAttempts',
  'handler',
];
const HINTS = {
  schema: 'is not a Toren field: Toren names the input schema `input`',
  execute: 'is not a Toren field: Toren names the function `handler`',
};

/** Toren's defineTool, checked and branded for toolshed. */
export function defineTool(def) {
  if (def === null || typeof def !== 'object') {
    throw new CompatError(FRAMEWORK, undefined, 'defineTool', 'needs an object {name, description, input, handler}');
  }
  const tool = def.name;
  if (typeof tool !== 'string' || !/^[A-Za-z0-9_-]{1,64}$/.test(tool)) {
    throw new CompatError(FRAMEWORK, tool, 'name', 'must be a string of letters, digits, `_` and `-` (1 to 64)');
  }
  onlyKnown(FRAMEWORK, tool, '', def, FIELDS, HINTS);
  if (def.description !== undefined && typeof def.description !== 'string') {
    throw new CompatError(FRAMEWORK, tool, 'description', 'must be a string');
  }
  checkSchema(FRAMEWORK, tool, 'input', def.input, { required: true });
  const effects = def.effects ?? 'none';
  if (!['none', 'sandbox', 'external'].includes(effects)) {
    throw new CompatError(FRAMEWORK, tool, 'effects', `is ${JSON.stringify(effects)}; use "none", "sandbox" or "external"`);
  }
  const idempotency = def.idempotency ?? 'none';
  if (!['keyed', 'none'].includes(idempotency)) {
    throw new CompatError(FRAMEWORK, tool, 'idempotency', `is ${JSON.stringify(idempotency)}; use "keyed" or "none"`);
  }
  const approval = def.approval ?? 'never';
  let gate;
  if (approval === 'never' || approval === 'always') {
    gate = approval;
  } else if (kindOf(approval) === 'function') {
    gate = 'predicate';
  } else {
    throw new CompatError(
      FRAMEWORK,
      tool,
      'approval',
      'must be "never", "always" or a predicate function over the parsed args ((args) => boolean)',
    );
  }
  for (const field of ['timeoutMs', 'maxAttempts']) {
    const v = def[field];
    if (v !== undefined && (!Number.isInteger(v) || v < 1)) {
      throw new CompatError(FRAMEWORK, tool, field, 'must be a whole number of at least 1');
    }
  }
  if (typeof def.handler !== 'function') {
    throw new CompatError(FRAMEWORK, tool, 'handler', 'is missing or not a function');
  }
  if (kindOf(def.handler) === 'generator') {
    throw new CompatError(FRAMEWORK, tool, 'handler', 'is a generator; a Toren handler returns a string (or a promise of one)');
  }
  return Object.freeze({
    [COMPAT]: FRAMEWORK,
    name: tool,
    description: def.description ?? '',
    input: def.input,
    output: undefined,
    credentials: [],
    hooks: {},
    retry: 0,
    streaming: false,
    human: false,
    effects,
    idempotency,
    approval: gate,
    predicate: gate === 'predicate' ? approval : undefined,
    timeoutMs: def.timeoutMs,
    maxAttempts: def.maxAttempts,
    run: def.handler,
  });
}
