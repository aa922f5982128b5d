// toolshed's Node runner: runs one exported function behind the subprocess wire protocol.
//
//   node runner.mjs [--once] MODULE_PATH EXPORT STEM
//   node runner.mjs --schema MODULE_PATH EXPORT STEM
//
// Reads newline-delimited JSON requests {"id", "tool", "args", "context", "credentials"}
// on stdin and answers each with zero or more {"id", "partial"} lines and exactly one
// {"id", "result"} or {"id", "error": {"message", "code"}} line on stdout (a generator
// sends each value as it yields it, then {"id", "end": true}: its last value is the
// result), one request
// at a time until stdin closes (--once: a one-shot call, whose stdin is read whole).
// EXPORT may be empty: then the default export is used,
// falling back to the export named like the file (STEM, or its camelCase form).
//
// With --schema it prints the tool's declared schema as one JSON line instead.
//
// A request may carry `"op"`: absent (or "call") runs the tool; "approval" evaluates a
// Toren tool's approval predicate over `args` and answers {"result": true|false};
// "hook" runs one of a bread tool's hooks (`hook`: beforeRun, afterRun or onError,
// with `args`, `result`, `error`, `attempt`) and answers {"result": {"decision", …}}.
// Tool files written for bread (`@breadai/core`) or Toren (`@toren-run/core`) get our
// compatibility modules (bread.mjs, toren.mjs) and zod 4 from TOOLSHED_NODE_DEPS,
// through resolve-hooks.mjs, registered only when the file imports one of them. A
// transpiled TypeScript module gets the same hooks when TOOLSHED_MODULE_SOURCES maps
// the transpiled files to their sources (JSON, paths as this process sees them): what
// they import is then resolved as if imported from the source, here in the sandbox.

import { readFileSync, realpathSync, writeSync } from 'node:fs';
import { register } from 'node:module';
import { pathToFileURL } from 'node:url';
import { format } from 'node:util';

import { COMPAT, CompatError, makeContext, parseArgs } from './compat.mjs';

// Keep fd 1 for the protocol: process.stdout (and so console.log) is stderr for the
// tool. fd 1 is never wrapped in a stream, so it stays a blocking pipe and a write is
// out when writeSync returns; EAGAIN is still retried in case someone made it
// non-blocking. Not touching process.stdout at start-up also saves start-up time.
Object.defineProperty(process, 'stdout', {
  configurable: true,
  enumerable: true,
  get: () => process.stderr,
});

// While a call runs, what the tool logs with console.log (console.info, console.debug)
// reaches the runtime as {"id", "stdout": text} lines: a person sees it as the tool's
// stdout, apart from its stderr. Other writes (process.stdout.write, child processes)
// still go to stderr, as between calls.
// At most PRINT_LIMIT characters are relayed per call (the protocol's stdout is capped,
// and a chatty tool must not fail for it); past it they are dropped.
const PRINT_LIMIT = 256 * 1024;
let printingFor = null;
let printed = 0;
for (const method of ['log', 'info', 'debug']) {
  const original = console[method].bind(console);
  console[method] = (...args) => {
    if (printingFor === null) return original(...args);
    const text = `${format(...args)}\n`.slice(0, Math.max(PRINT_LIMIT - printed, 0));
    if (text.length === 0) return;
    printed += text.length;
    protoWrite(`${JSON.stringify({ id: printingFor, stdout: text })}\n`);
  };
}

let pause;
function protoWrite(text) {
  const bytes = Buffer.from(text, 'utf8');
  let offset = 0;
  while (offset < bytes.length) {
    try {
      offset += writeSync(1, bytes, offset, bytes.length - offset);
    } catch (err) {
      if (err?.code !== 'EAGAIN') throw err;
      pause ??= new Int32Array(new SharedArrayBuffer(4));
      Atomics.wait(pause, 0, 0, 1);
    }
  }
}

function describe(err) {
  if (err instanceof Error) {
    return err.message ? `${err.name}: ${err.message}` : err.name;
  }
  try {
    return `thrown value: ${JSON.stringify(err)}`;
  } catch {
    return `thrown value: ${String(err)}`;
  }
}

function errorCode(err) {
  if (err && typeof err.code === 'string') return err.code;
  if (err instanceof Error) return err.name;
  return 'Error';
}

function camel(stem) {
  return stem.replace(/[-_.\s]+([a-zA-Z0-9])/g, (_, c) => c.toUpperCase());
}

function isCompat(value) {
  return value !== null && typeof value === 'object' && value[COMPAT] !== undefined;
}

// The packages resolve-hooks.mjs provides. Hooks cost a loader thread, so they are
// registered only for a module that names one of them.
const COMPAT_IMPORT = /(['"])(?:@breadai\/core|@toren-run\/core|zod)(?:\/[^'"]*)?\1/;

// Transpiled module URL -> source file URL, from TOOLSHED_MODULE_SOURCES. Node names a
// module by its real path, so the transpiled side is resolved through symlinks.
function moduleSources() {
  const given = process.env.TOOLSHED_MODULE_SOURCES;
  if (!given) return undefined;
  const sources = {};
  for (const [output, source] of Object.entries(JSON.parse(given))) {
    let real = output;
    try {
      real = realpathSync(output);
    } catch {
      // load() reports a missing module
    }
    sources[pathToFileURL(real).href] = pathToFileURL(source).href;
  }
  return sources;
}

function registerHooks(modulePath) {
  const sources = moduleSources();
  if (!sources) {
    let text;
    try {
      text = readFileSync(modulePath, 'utf8');
    } catch {
      return; // load() reports the unreadable module
    }
    if (!COMPAT_IMPORT.test(text)) return;
  }
  register(new URL('./resolve-hooks.mjs', import.meta.url), {
    data: {
      deps: process.env.TOOLSHED_NODE_DEPS || undefined,
      missing: process.env.TOOLSHED_NODE_DEPS_MISSING || undefined,
      sources,
      libraries: (process.env.NODE_PATH || '').split(':').filter(Boolean),
    },
  });
}

function pick(mod, exportName, stem) {
  const candidates = exportName ? [exportName] : ['default', stem, camel(stem)];
  for (const name of candidates) {
    const direct = mod[name];
    if (direct !== undefined) return [name, direct];
    // CommonJS modules arrive as { default: module.exports }.
    const nested = mod.default?.[name];
    if (name !== 'default' && nested !== undefined) return [name, nested];
  }
  return [candidates[0], undefined];
}

function listExports(mod) {
  const names = new Set(Object.keys(mod));
  if (mod.default && typeof mod.default === 'object') {
    for (const k of Object.keys(mod.default)) names.add(k);
  }
  return [...names].map((n) => `\`${n}\``).join(', ') || 'nothing';
}

async function load(modulePath, exportName, stem) {
  let mod;
  try {
    mod = await import(pathToFileURL(modulePath).href);
  } catch (err) {
    process.stderr.write(`${err?.stack ?? describe(err)}\n`);
    // A bread or Toren definition we cannot map, or one whose zod is missing, keeps
    // its own code.
    const code =
      err?.code === 'COMPAT_UNMAPPABLE' || err?.code === 'NODE_DEPS_NOT_INSTALLED' ? err.code : 'LoadError';
    return { error: { message: `cannot load ${modulePath}: ${describe(err)}`, code } };
  }
  const [name, fn] = pick(mod, exportName, stem);
  if (isCompat(fn)) {
    // A bread or Toren definition: the runner calls its execute/handler itself.
    return { mod, def: fn, fn: fn.run, name };
  }
  if (typeof fn !== 'function') {
    const what = exportName
      ? `has no exported function \`${exportName}\``
      : `has no default export and no export named \`${stem}\``;
    return {
      mod,
      error: {
        message: `${modulePath} ${what}; it exports ${listExports(mod)}`,
        code: 'ExportNotFound',
      },
    };
  }
  return { mod, fn, name };
}

// Written to stderr before each final answer (see CALL_END_MARK in process.rs), so the
// runtime knows it has every log line of the call once it reads the answer. Writes to
// a pipe are synchronous on Linux, so the mark is in the pipe before the answer.
const CALL_END = '\x1etoolshed:call-end\x1e\n';

function send(message) {
  let line;
  try {
    line = JSON.stringify(message);
  } catch (err) {
    const kind = 'partial' in message ? 'partial result' : 'result';
    line = JSON.stringify({
      id: message.id,
      error: { message: `the tool's ${kind} is not JSON-serializable: ${describe(err)}`, code: 'InvalidResult' },
    });
    printingFor = null;
    process.stderr.write(CALL_END);
    protoWrite(`${line}\n`);
    return false;
  }
  if (!('partial' in message)) {
    // The call's last line: what it prints from now on is not the call's.
    printingFor = null;
    process.stderr.write(CALL_END);
  }
  protoWrite(`${line}\n`);
  return true;
}

function isGenerator(value) {
  const tag = Object.prototype.toString.call(value);
  return tag === '[object Generator]' || tag === '[object AsyncGenerator]';
}

async function handle(tool, raw) {
  let request;
  try {
    request = JSON.parse(raw);
    if (request === null || typeof request !== 'object' || !('id' in request)) throw new Error('no id');
  } catch (err) {
    send({ id: null, error: { message: `runner got a malformed request: ${describe(err)}`, code: 'BadRequest' } });
    return;
  }
  const id = request.id;
  if (tool.error) {
    send({ id, error: tool.error });
    return;
  }
  const op = request.op ?? 'call';
  if (op !== 'call') {
    await answerOp(tool, request, id, op);
    return;
  }
  let args = request.args ?? {};
  let ctx;
  if (tool.def) {
    ctx = makeContext(tool.def, request);
  } else {
    ctx = {
      ...(request.context ?? {}),
      tool: request.tool,
      credentials: request.credentials ?? {},
      env: request.env ?? {},
    };
  }
  Object.assign(ctx, askers(id));
  printingFor = id;
  printed = 0;
  try {
    if (tool.def) {
      if (tool.def.human) throw Object.assign(new Error('a human tool is answered by a person, not run'), { code: 'HumanTool' });
      args = parseArgs(tool.def, args);
    }
    let value = await tool.fn(args, ctx);
    if (isGenerator(value)) {
      // Each value goes out the moment it is yielded; `end` then says the last one was
      // the result (holding each back until the next came delivered them one late).
      let any = false;
      for await (const item of value) {
        if (!send({ id, partial: item === undefined ? null : item })) return;
        any = true;
      }
      if (!any) {
        send({ id, error: { message: "the tool's generator yielded nothing; its last yield is the result", code: 'EmptyStream' } });
        return;
      }
      send({ id, end: true });
      return;
    }
    send({ id, result: value === undefined ? null : value });
  } catch (err) {
    process.stderr.write(`${err?.stack ?? describe(err)}\n`);
    send({ id, error: { message: describe(err), code: errorCode(err) } });
  }
}

// Questions for the client of the call (an MCP client): each writes
// {"id", "ask": {"method", "params", "seq"}} and waits for the line answering that seq.
// A one-shot call (--once) has no stdin to read answers from: it is refused at once.
class AskError extends Error {
  constructor(message, code) {
    super(message);
    this.name = 'AskError';
    this.code = code;
  }
}

const pendingAsks = new Map();
let oneShot = false;
let nextSeq = 0;

function askers(id) {
  const ask = (method, params) => {
    if (oneShot) {
      return Promise.reject(
        new AskError('a one-shot node: tool cannot ask the client of the call: run it in pool mode (mode: pool)', 'ASK_UNSUPPORTED'),
      );
    }
    nextSeq += 1;
    const seq = nextSeq;
    return new Promise((resolve, reject) => {
      pendingAsks.set(`${id}\u0000${seq}`, { resolve, reject });
      protoWrite(`${JSON.stringify({ id, ask: { method, params, seq } })}\n`);
    });
  };
  return {
    ask,
    elicit: (message, requestedSchema = { type: 'object', properties: {} }, extra = {}) =>
      ask('elicitation/create', { message, requestedSchema, ...extra }),
    sample: (messages, maxTokens = 1000, extra = {}) =>
      ask('sampling/createMessage', {
        messages: typeof messages === 'string' ? [{ role: 'user', content: { type: 'text', text: messages } }] : messages,
        maxTokens,
        ...extra,
      }),
  };
}

// A line answering a pending ask settles it; anything else is a request.
function settleAsk(line) {
  if (pendingAsks.size === 0) return false;
  let message;
  try {
    message = JSON.parse(line);
  } catch {
    return false;
  }
  if (!message || typeof message !== 'object' || !('seq' in message) || 'tool' in message) return false;
  const key = `${message.id}\u0000${message.seq}`;
  const pending = pendingAsks.get(key);
  if (!pending) return true;
  pendingAsks.delete(key);
  if ('answer' in message) {
    pending.resolve(message.answer);
  } else {
    const error = message.error ?? {};
    pending.reject(new AskError(String(error.message ?? 'the question got no answer'), String(error.code ?? 'ASK_FAILED')));
  }
  return true;
}

// What a hook's return value means, as the dispatcher reads it.
function decision(hook, value) {
  const bad = (what) => {
    throw Object.assign(new Error(`the ${hook} hook returned ${what}`), { code: 'BadHookResult' });
  };
  if (value === undefined || value === null) {
    return { decision: hook === 'beforeRun' ? 'continue' : hook === 'afterRun' ? 'keep' : 'propagate' };
  }
  if (typeof value !== 'object') bad(`${typeof value} ${JSON.stringify(value)}; return nothing or an object {action, …}`);
  const action = value.action;
  if (hook === 'beforeRun') {
    if (action === 'continue') return { decision: 'continue' };
    if (action === 'override' || action === 'replace' || (action === undefined && 'args' in value)) {
      return { decision: 'replace_args', args: value.args ?? null };
    }
    if (['skip', 'shortCircuit', 'short_circuit', 'return'].includes(action) || (action === undefined && 'output' in value)) {
      return { decision: 'short_circuit', output: value.output ?? value.result ?? null };
    }
    bad(`${JSON.stringify(value)}; return nothing, {args} to override them, or {action: 'shortCircuit', output}`);
  }
  if (hook === 'afterRun') {
    if (action === 'keep' || action === 'continue') return { decision: 'keep' };
    if (action === 'replace' || (action === undefined && ('output' in value || 'result' in value))) {
      return { decision: 'replace', output: value.output ?? value.result ?? null };
    }
    bad(`${JSON.stringify(value)}; return nothing or {action: 'replace', output}`);
  }
  if (action === 'recover') return { decision: 'recover', output: value.output ?? null };
  if (action === 'retry') return { decision: 'retry' };
  if (action === 'propagate' || action === 'rethrow') return { decision: 'propagate' };
  if (action === 'fail') {
    const e = value.error;
    const message = e instanceof Error ? describe(e) : typeof e === 'string' ? e : 'failed by the onError hook';
    return { decision: 'fail', message, code: e && typeof e.code === 'string' ? e.code : null };
  }
  return bad(`${JSON.stringify(value)}; return nothing, {action: 'recover', output}, {action: 'retry'} or {action: 'fail', error}`);
}

// An `approval` or `hook` request for a bread or Toren tool.
async function answerOp(tool, request, id, op) {
  const def = tool.def;
  if (!def) {
    send({ id, error: { message: `\`${op}\` requests are for bread and Toren tools only`, code: 'BadRequest' } });
    return;
  }
  try {
    if (op === 'approval') {
      if (typeof def.predicate !== 'function') throw new Error(`tool \`${def.name}\` has no approval predicate`);
      const verdict = await def.predicate(parseArgs(def, request.args ?? {}));
      if (typeof verdict !== 'boolean') {
        throw Object.assign(new Error(`the approval predicate of \`${def.name}\` returned ${JSON.stringify(verdict) ?? typeof verdict}, not a boolean`), {
          code: 'ApprovalNotBoolean',
        });
      }
      send({ id, result: verdict });
    } else if (op === 'hook') {
      const hook = request.hook;
      const fn = def.hooks[hook];
      if (typeof fn !== 'function') throw new Error(`tool \`${def.name}\` has no ${hook} hook`);
      const ctx = makeContext(def, request);
      let error;
      if (request.error) {
        error = new Error(request.error.message);
        error.code = request.error.code;
      }
      const value = await fn(
        {
          toolName: def.name,
          toolCallId: request.context?.tool_call_id,
          args: request.args ?? {},
          result: request.result,
          error,
          attempt: request.attempt ?? 1,
        },
        ctx,
      );
      send({ id, result: decision(hook, value) });
    } else {
      send({ id, error: { message: `unknown request op ${JSON.stringify(op)}`, code: 'BadRequest' } });
    }
  } catch (err) {
    process.stderr.write(`${err?.stack ?? describe(err)}\n`);
    send({ id, error: { message: describe(err), code: errorCode(err) } });
  }
}

// JSON Schema of a bread/Toren schema field: zod 4 converts its own; a plain object is
// already one. Anything zod cannot express (dates, transforms, …) is a load-time error.
async function jsonSchemaOf(def, field, schema, io) {
  if (schema === undefined) return null;
  if (typeof schema?._zod !== 'object') return schema;
  const { z } = await import('zod');
  let out;
  try {
    out = z.toJSONSchema(schema, { io, unrepresentable: 'throw' });
  } catch (err) {
    throw new CompatError(
      def[COMPAT],
      def.name,
      field,
      `cannot be expressed as JSON Schema (${err?.message ?? err}); use types JSON can carry (no dates, transforms, functions)`,
    );
  }
  delete out.$schema;
  return out;
}

async function compatSchema(def) {
  const field = def[COMPAT] === 'Toren' ? 'input' : 'schema';
  const input = await jsonSchemaOf(def, field, def.input, 'input');
  if (input.type !== 'object') {
    throw new CompatError(def[COMPAT], def.name, field, 'must describe an object of named arguments: use z.object({...})');
  }
  const output = await jsonSchemaOf(def, 'outputSchema', def.output, 'output');
  const hooks = Object.keys(def.hooks);
  return {
    name: def.name,
    description: def.description,
    input_schema: input,
    output_schema: output,
    compat: {
      framework: def[COMPAT] === 'Toren' ? 'toren' : 'bread',
      effects: def.effects ?? null,
      idempotency: def.idempotency ?? null,
      approval: def.approval ?? null,
      timeout_ms: def.timeoutMs ?? null,
      max_attempts: def.maxAttempts ?? null,
      credentials: def.credentials,
      human: def.human,
      streaming: def.streaming,
      hooks,
      retry: def.retry,
    },
  };
}

async function schema(tool, modulePath, exportName, stem) {
  if (tool.error && !tool.mod) {
    return { error: tool.error };
  }
  if (tool.def) {
    try {
      return await compatSchema(tool.def);
    } catch (err) {
      return { error: { message: describe(err), code: errorCode(err) } };
    }
  }
  const mod = tool.mod;
  const fn = tool.fn;
  const ownSchema = fn?.schema ?? fn?.SCHEMA ?? (tool.name ? mod[`${tool.name}Schema`] : undefined);
  // AgentBreeder's convention is a module-level SCHEMA; a lowercase `schema` works too.
  const declared = ownSchema ?? mod.schema ?? mod.SCHEMA ?? mod.default?.schema ?? mod.default?.SCHEMA;
  if (declared === undefined || declared === null || typeof declared !== 'object') {
    const where = exportName || 'default';
    return {
      error: {
        message:
          `${modulePath} declares no schema: export one beside the function ` +
          `(\`export const SCHEMA = {...}\` or \`export const schema = {...}\`) or set \`${where}.schema = {...}\``,
        code: 'SchemaNotFound',
      },
    };
  }
  const definition =
    'input_schema' in declared || 'inputSchema' in declared || 'parameters' in declared ? declared : null;
  const input = definition ? (definition.input_schema ?? definition.inputSchema ?? definition.parameters) : declared;
  const output = definition ? (definition.output_schema ?? definition.outputSchema ?? null) : null;
  const description =
    (definition && typeof definition.description === 'string' && definition.description) ||
    (typeof fn?.description === 'string' && fn.description) ||
    (typeof mod.description === 'string' && mod.description) ||
    '';
  const name =
    (definition && typeof definition.name === 'string' && definition.name) ||
    (exportName && exportName !== 'default' ? exportName : stem);
  return { name, description, input_schema: input, output_schema: output };
}

async function main() {
  const argv = process.argv.slice(2);
  const mode = argv[0] === '--schema' || argv[0] === '--once' ? argv.shift() : '--serve';
  if (argv.length !== 3) {
    process.stderr.write('usage: runner.mjs [--schema|--once] MODULE_PATH EXPORT STEM\n');
    process.exit(2);
  }
  const [modulePath, exportName, stem] = argv;
  registerHooks(modulePath);
  if (mode === '--once') {
    oneShot = true;
    // A one-shot call: the request is written and stdin closed at once, so read it
    // whole without setting up a stdin stream (which costs start-up time).
    let input;
    try {
      input = readFileSync(0, 'utf8');
    } catch {
      input = undefined;
    }
    if (input !== undefined) {
      const tool = await load(modulePath, exportName, stem);
      for (const line of input.split('\n')) {
        if (line.trim()) await handle(tool, line);
      }
      process.exit(0);
    }
  }
  const tool = await load(modulePath, exportName, stem);
  if (mode === '--schema') {
    const answer = await schema(tool, modulePath, exportName, stem);
    protoWrite(`${JSON.stringify(answer)}\n`);
    process.exit(0);
  }
  // Requests are served one at a time, in order, until stdin ends.
  let chain = Promise.resolve();
  let buffered = '';
  const serve = (line) => {
    if (line.trim() && !settleAsk(line)) chain = chain.then(() => handle(tool, line));
  };
  process.stdin.setEncoding('utf8');
  process.stdin.on('data', (chunk) => {
    buffered += chunk;
    let newline = buffered.indexOf('\n');
    while (newline >= 0) {
      serve(buffered.slice(0, newline));
      buffered = buffered.slice(newline + 1);
      newline = buffered.indexOf('\n');
    }
  });
  process.stdin.on('end', () => {
    serve(buffered);
    chain.then(() => process.exit(0));
  });
}

main().catch((err) => {
  process.stderr.write(`toolshed runner failed: ${err?.stack ?? describe(err)}\n`);
  process.exit(70);
});
