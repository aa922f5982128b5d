// toolshed's Node runner: runs one exported function behind the subprocess wire protocol.
//
//   node runner.mjs [--once] MODULE_PATH EXPORT STEM
//   node runner.mjs --schema MODULE_PATH EXPORT STEM
//
// Reads newline-delimited JSON requests {"id", "tool", "args", "context", "credentials"}
// on stdin and answers each with zero or more {"id", "partial"} lines and exactly one
// {"id", "result"} or {"id", "error": {"message", "code"}} line on stdout, one request
// at a time until stdin closes (--once: a one-shot call, whose stdin is read whole).
// EXPORT may be empty: then the default export is used,
// falling back to the export named like the file (STEM, or its camelCase form).
//
// With --schema it prints the tool's declared schema as one JSON line instead.

import { readFileSync, writeSync } from 'node:fs';
import { pathToFileURL } from 'node:url';

// Keep fd 1 for the protocol: process.stdout (and so console.log) is stderr for the
// tool. fd 1 is never wrapped in a stream, so it stays a blocking pipe and a write is
// out when writeSync returns; EAGAIN is still retried in case someone made it
// non-blocking. Not touching process.stdout at start-up also saves start-up time.
Object.defineProperty(process, 'stdout', {
  configurable: true,
  enumerable: true,
  get: () => process.stderr,
});

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
    return { error: { message: `cannot load ${modulePath}: ${describe(err)}`, code: 'LoadError' } };
  }
  const [name, fn] = pick(mod, exportName, stem);
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
    process.stderr.write(CALL_END);
    protoWrite(`${line}\n`);
    return false;
  }
  if (!('partial' in message)) process.stderr.write(CALL_END);
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
  const args = request.args ?? {};
  // ctx.env: the agent's declared env, never in process.env.
  const ctx = { ...(request.context ?? {}), tool: request.tool, credentials: request.credentials ?? {}, env: request.context?.env ?? {} };
  try {
    let value = await tool.fn(args, ctx);
    if (isGenerator(value)) {
      let last;
      let any = false;
      for await (const item of value) {
        if (any && !send({ id, partial: last === undefined ? null : last })) return;
        last = item;
        any = true;
      }
      if (!any) {
        send({ id, error: { message: "the tool's generator yielded nothing; its last yield is the result", code: 'EmptyStream' } });
        return;
      }
      value = last;
    }
    send({ id, result: value === undefined ? null : value });
  } catch (err) {
    process.stderr.write(`${err?.stack ?? describe(err)}\n`);
    send({ id, error: { message: describe(err), code: errorCode(err) } });
  }
}

async function schema(tool, modulePath, exportName, stem) {
  if (tool.error && !tool.mod) {
    return { error: tool.error };
  }
  const mod = tool.mod;
  const fn = tool.fn;
  const ownSchema = fn?.schema ?? (tool.name ? mod[`${tool.name}Schema`] : undefined);
  const declared = ownSchema ?? mod.schema ?? mod.default?.schema;
  if (declared === undefined || declared === null || typeof declared !== 'object') {
    const where = exportName || 'default';
    return {
      error: {
        message:
          `${modulePath} declares no schema: export one beside the function ` +
          `(\`export const schema = {...}\`) or set \`${where}.schema = {...}\``,
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
  if (mode === '--once') {
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
    if (line.trim()) chain = chain.then(() => handle(tool, line));
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
