// toolshed's compatibility layer for tool files written for bread (`@breadai/core`) and
// Toren (`@toren-run/core`): the shared part. The runner resolves both packages to
// bread.mjs and toren.mjs beside this file; their `defineTool` returns a definition
// branded with COMPAT, which the runner reads (--schema) and calls.
//
// Everything a definition says is checked when the module loads: a field we cannot
// map onto toolshed's spec throws a CompatError naming the field and what to do, so
// the tool fails at load time, never at its first call.

/** The brand on every definition made by our defineTool / defineHumanTool. */
export const COMPAT = Symbol.for('toolshed.compat.tool');

/** A definition we cannot map; `field` is the field's path, e.g. `hooks.onSuccess`. */
export class CompatError extends Error {
  constructor(framework, tool, field, fix) {
    super(`${framework} tool \`${tool ?? '?'}\`: \`${field}\` ${fix}`);
    this.name = 'CompatError';
    this.code = 'COMPAT_UNMAPPABLE';
    this.field = field;
  }
}

/** An error with bread's or Toren's code (CREDENTIAL_NOT_DECLARED, …). */
export class CodedError extends Error {
  constructor(name, code, message) {
    super(message);
    this.name = name;
    this.code = code;
  }
}

export function isZod(schema) {
  return schema !== null && typeof schema === 'object' && typeof schema._zod === 'object';
}

export function isPlainObject(v) {
  return v !== null && typeof v === 'object' && Object.getPrototypeOf(v) === Object.prototype;
}

export function kindOf(fn) {
  if (typeof fn !== 'function') return 'none';
  const tag = fn.constructor?.name;
  if (tag === 'AsyncGeneratorFunction' || tag === 'GeneratorFunction') return 'generator';
  return 'function';
}

/** A schema field: a zod 4 schema, or a plain JSON Schema object. */
export function checkSchema(framework, tool, field, schema, { required }) {
  if (schema === undefined || schema === null) {
    if (required) throw new CompatError(framework, tool, field, 'is missing: give a zod schema, e.g. z.object({...})');
    return;
  }
  if (isZod(schema)) return;
  if (typeof schema._def === 'object' && typeof schema.safeParse === 'function') {
    throw new CompatError(
      framework,
      tool,
      field,
      'is a zod 3 schema; toolshed runs tools with zod 4 (`import { z } from "zod"` gets it), which converts schemas to JSON Schema',
    );
  }
  if (!isPlainObject(schema)) {
    throw new CompatError(framework, tool, field, 'is neither a zod schema nor a JSON Schema object');
  }
}

/** Refuse every key of `object` not in `known`, naming the first one. */
export function onlyKnown(framework, tool, prefix, object, known, hint) {
  for (const key of Object.keys(object)) {
    if (!known.includes(key)) {
      throw new CompatError(
        framework,
        tool,
        prefix ? `${prefix}.${key}` : key,
        hint?.[key] ??
          `cannot be mapped onto a toolshed tool; the fields toolshed reads are ${known.map((k) => `\`${k}\``).join(', ')}`,
      );
    }
  }
}

/**
 * The context a tool's function receives: bread's ToolContext and Toren's ctx in one.
 * `credentials.get` enforces the tool's declared allowlist (bread's
 * CREDENTIAL_NOT_DECLARED), even though toolshed only sends declared ones anyway.
 */
export function makeContext(def, request) {
  const context = request.context ?? {};
  const sent = request.credentials ?? {};
  const declared = new Set(def.credentials ?? []);
  const credentials = {
    async get(name) {
      if (!declared.has(name)) {
        throw new CodedError(
          'BreadError',
          'CREDENTIAL_NOT_DECLARED',
          `credential \`${name}\` is not declared by tool \`${def.name}\`: add it to its \`credentials\` array`,
        );
      }
      if (!Object.prototype.hasOwnProperty.call(sent, name)) {
        throw new CodedError(
          'BreadError',
          'CREDENTIAL_NOT_FOUND',
          `credential \`${name}\` is declared by tool \`${def.name}\` but the credential provider has no value for it`,
        );
      }
      return sent[name];
    },
  };
  const env = Object.freeze({ ...(request.env ?? {}) });
  return {
    agentId: context.agent_id,
    runId: context.run_id,
    sessionId: context.session_id,
    toolCallId: context.tool_call_id,
    idempotencyKey: context.idempotency_key ?? undefined,
    principal: context.principal ?? undefined,
    blobStore: undefined,
    credentials,
    env,
    tool: request.tool,
  };
}

/** Validate args with the tool's own zod schema (refinements JSON Schema cannot say). */
export function parseArgs(def, args) {
  const schema = def.input;
  if (!isZod(schema)) return args;
  const parsed = schema.safeParse(args);
  if (parsed.success) return parsed.data;
  const issues = parsed.error.issues
    .map((i) => `${i.path.length ? i.path.join('.') : '(args)'}: ${i.message}`)
    .join('; ');
  throw new CodedError('ZodError', 'INVALID_ARGS', `the arguments do not match \`${def.name}\`'s schema: ${issues}`);
}
