"""toolshed's Python runner: runs one tool function behind the subprocess wire protocol.

    python3 -S -E runner.py MODULE_PATH FUNCTION

Reads newline-delimited JSON requests `{"id", "tool", "args", "context", "credentials"}`
on stdin and answers each with zero or more `{"id", "partial"}` lines and exactly one
`{"id", "result"}` or `{"id", "error": {"message", "code"}}` line on stdout; a generator
sends each value as a partial the moment it yields it, and ends with `{"id", "end":
true}` (its last value is the result). It serves
requests one at a time until stdin closes, or until it has answered a request marked
`once` (a cold call's only one, whose stdin stays open for answers to the tool's
questions); a warm worker keeps stdin open.

Start-up is kept near the bare interpreter's: the runtime starts it with `-S -E` and
passes the `sys.path` a normal interpreter would have in TOOLSHED_SYS_PATH (so the
`site` module and its `.pth` files are never run), and nothing heavy is imported
unless a tool needs it (asyncio only for coroutines, traceback only on errors).

A function that declares a `ctx` parameter gets the call's context: its ids, `tool`,
`credentials`, `env`, and three ways to ask the client of the call (an MCP client;
anything else answers with an AskError coded ASK_NO_CLIENT):
`ctx.elicit(message, schema)` (input from the person there), `ctx.sample(messages,
max_tokens)` (a completion from its model) and `ctx.ask(method, params)`. Each writes
`{"id", "ask": {"method", "params", "seq"}}` and waits for the line answering that seq.

Each argument is passed as its parameter declares: a dataclass, a pydantic model, an
Enum, a tuple or a set (and containers of them) is built from the validated JSON by
convert.py, beside this file, which is loaded only for a function that needs it.
"""

import os
import sys
import types

_MISSING = object()


def _make_json():
    """(loads, dumps) built on the C accelerator `_json`.

    Importing the `json` package costs about ten milliseconds (it pulls in `re`); its C
    core does the same work without it. Falls back to `json` where `_json` is missing.
    """
    try:
        import _json

        class _Options:
            strict = True
            object_hook = None
            object_pairs_hook = None
            parse_float = float
            parse_int = int
            parse_constant = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}.__getitem__
            memo = {}

        scan = _json.make_scanner(_Options())

        def loads(text):
            if isinstance(text, bytes):
                text = text.decode("utf-8")
            text = text.strip()
            try:
                value, end = scan(text, 0)
            except StopIteration as stop:
                raise ValueError("invalid JSON at character %s" % stop.value) from None
            if end != len(text):
                raise ValueError("extra data after the JSON value at character %d" % end)
            return value

        def dumps(value):
            encode = _json.make_encoder({}, _json_default, _json.encode_basestring, None, ":", ",", False, False, False)
            return "".join(encode(value, 0))

        return loads, dumps
    except (ImportError, AttributeError, TypeError):
        import json

        def dumps(value):
            return json.dumps(value, ensure_ascii=False, allow_nan=False, default=_json_default, separators=(",", ":"))

        return json.loads, dumps


def _setup_protocol():
    """Keep the real stdin and stdout for the protocol, out of the tool's reach.

    File descriptor 1 is pointed at stderr, so `print()`, C extensions and child
    processes that inherit stdout write logs, never a corrupt protocol line; fd 0 is
    pointed at /dev/null, so a tool that reads stdin cannot swallow the next request.
    """
    proto_out = os.fdopen(os.dup(1), "w", encoding="utf-8", newline="\n", buffering=1 << 16)
    proto_in = os.fdopen(os.dup(0), "rb")
    os.dup2(2, 1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    sys.stdout = sys.stderr
    return proto_in, proto_out


def _set_sys_path(module_path):
    paths = os.environ.get("TOOLSHED_SYS_PATH")
    tool_dir = os.path.dirname(module_path)
    if paths:
        try:
            extra = [p for p in _loads(paths) if isinstance(p, str) and p]
        except ValueError:
            extra = []
        sys.path[:] = [tool_dir] + [p for p in extra if p != tool_dir]
    else:
        sys.path.insert(0, tool_dir)


def _load(module_path, fn_name):
    """Import the tool's module from its path; return (function, None) or (None, error)."""
    try:
        # The frozen import machinery is already loaded; `importlib.util` costs ~8 ms.
        from _frozen_importlib import module_from_spec
        from _frozen_importlib_external import spec_from_file_location
    except ImportError:
        from importlib.util import module_from_spec, spec_from_file_location

    stem = os.path.splitext(os.path.basename(module_path))[0]
    # Register under the file's own name so the tool's siblings (and pickle, dataclasses)
    # can find it, unless that would replace a module that is already loaded.
    name = stem if stem.isidentifier() and stem not in sys.modules else "_toolshed_tool_" + stem
    try:
        spec = spec_from_file_location(name, module_path)
        if spec is None or spec.loader is None:
            return None, {"message": "cannot load %s: not a Python module" % module_path, "code": "LoadError"}
        module = module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    except BaseException as e:  # noqa: BLE001 - a broken module must not kill the worker
        sys.modules.pop(name, None)
        _print_traceback()
        return None, {"message": "cannot load %s: %s" % (module_path, _describe(e)), "code": "LoadError"}
    fn = getattr(module, fn_name, None)
    if fn is None:
        names = sorted(
            k for k, v in vars(module).items()
            if callable(v) and not k.startswith("_") and getattr(v, "__module__", None) == name
        )
        return None, {
            "message": "%s has no function `%s`; it defines %s"
            % (module_path, fn_name, ", ".join("`%s`" % n for n in names) or "no public functions"),
            "code": "FunctionNotFound",
        }
    if not callable(fn):
        return None, {"message": "`%s` in %s is not callable" % (fn_name, module_path), "code": "FunctionNotFound"}
    return fn, None


def _wants_ctx(fn):
    """Whether the function declares a `ctx` parameter (it then gets the call's context)."""
    seen = 0
    while hasattr(fn, "__wrapped__") and seen < 16:
        fn = fn.__wrapped__
        seen += 1
    code = getattr(fn, "__code__", None)
    if code is None:
        return False
    names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
    return "ctx" in names


# Annotations that need no conversion: the JSON value already is what they declare.
_PLAIN = frozenset(
    [str, int, float, bool, dict, list, object, type(None), None]
    + ["str", "int", "float", "bool", "dict", "list", "object", "None", "Any", "typing.Any"]
)


def _converters(fn):
    """{parameter: convert} for the parameters whose declared type a JSON value is not
    (convert.py, loaded only then), or None: the common case, found without compiling
    convert.py or importing `typing`."""
    seen = 0
    while hasattr(fn, "__wrapped__") and seen < 16:
        fn = fn.__wrapped__
        seen += 1
    annotations = getattr(fn, "__annotations__", None)
    if not isinstance(annotations, dict) or not annotations:
        return None
    wanted = {k: v for k, v in annotations.items() if k not in ("return", "ctx")}
    try:
        if all(v in _PLAIN for v in wanted.values()):
            return None
    except TypeError:  # an unhashable annotation: convert.py looks closer
        pass
    try:
        from _frozen_importlib import module_from_spec
        from _frozen_importlib_external import spec_from_file_location
    except ImportError:
        from importlib.util import module_from_spec, spec_from_file_location
    # Beside this file (the runner folder is shown to the sandbox whole), loaded under a
    # private name so a tool's own module called `convert` is never shadowed.
    here = os.path.dirname(os.path.abspath(__file__))
    spec = spec_from_file_location("_toolshed_convert", os.path.join(here, "convert.py"))
    module = module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.converters(fn, wanted) or None


def _describe(e):
    text = str(e)
    return "%s: %s" % (type(e).__name__, text) if text else type(e).__name__


def _print_traceback():
    import traceback

    traceback.print_exc(file=sys.stderr)


def _json_default(value):
    """Make common non-JSON values serializable: pydantic models, dataclasses, dates,
    sets, Enum members."""
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    if hasattr(value, "__dataclass_fields__") and not isinstance(value, type):
        import dataclasses

        return dataclasses.asdict(value)
    iso = getattr(value, "isoformat", None)
    if callable(iso):
        return iso()
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    import enum

    if isinstance(value, enum.Enum):
        # Arguments arrive as Enum members, so results may hold them: their values.
        return value.value
    raise TypeError("%s is not JSON-serializable" % type(value).__name__)


_loads, _dumps = _make_json()


# Written to stderr before each final answer (see CALL_END_MARK in process.rs).
_CALL_END = "\x1etoolshed:call-end\x1e\n"


class AskError(Exception):
    """The client of the call could not answer a question (`code`: ASK_NO_CLIENT,
    ASK_UNSUPPORTED, ASK_INVALID or ASK_FAILED)."""

    def __init__(self, message, code):
        super().__init__(message)
        self.code = code


class _Context(types.SimpleNamespace):
    """The call's context: ids, `tool`, `credentials`, `env`, and questions for the
    client of the call."""

    def ask(self, method, params):
        """Put one MCP request (`elicitation/create`, `sampling/createMessage`) to the
        client of the call; returns its result object or raises AskError."""
        return self._ask(method, params)

    def elicit(self, message, schema=None, **extra):
        """Ask the person at the client for input shaped by `schema` (a flat JSON Schema
        object); returns {"action": "accept"|"decline"|"cancel", "content"?}."""
        params = {"message": message, "requestedSchema": schema or {"type": "object", "properties": {}}}
        params.update(extra)
        return self._ask("elicitation/create", params)

    def sample(self, messages, max_tokens=1000, system_prompt=None, **extra):
        """Ask the client's model for a completion of `messages` (a string, or MCP
        sampling messages); returns {"role", "content", "model", "stopReason"?}."""
        if isinstance(messages, str):
            messages = [{"role": "user", "content": {"type": "text", "text": messages}}]
        params = {"messages": messages, "maxTokens": max_tokens}
        if system_prompt is not None:
            params["systemPrompt"] = system_prompt
        params.update(extra)
        return self._ask("sampling/createMessage", params)


class _ToolStdout:
    """`sys.stdout` while a call runs: what the tool prints reaches the runtime as
    `{"id", "stdout": text}` lines, so a person sees it as the tool's stdout (the real
    stdout carries the protocol). Between calls, and below Python (fd 1, C extensions,
    child processes), output goes to stderr as before."""

    encoding = "utf-8"
    errors = "strict"
    # Relayed per call at most (the protocol's stdout is capped, and a chatty tool must
    # not fail for it); past it, what is printed is counted and dropped.
    LIMIT = 256 * 1024

    def __init__(self, runner):
        self._runner = runner
        self._rid = None
        self._parts = []
        self._sent = 0
        self._dropped = 0

    def begin(self, rid):
        self._rid = rid
        self._sent = 0
        self._dropped = 0

    def end(self):
        self.flush()
        if self._rid is not None and self._dropped:
            self._runner.send({"id": self._rid, "stdout": "\n[toolshed: %d more characters printed were dropped]\n" % self._dropped})
        self._rid = None

    def write(self, text):
        if not isinstance(text, str):
            raise TypeError("write() argument must be str, not %s" % type(text).__name__)
        if self._rid is None:
            return sys.stderr.write(text)
        room = self.LIMIT - self._sent
        if len(text) > room:
            self._dropped += len(text) - max(room, 0)
            text = text[: max(room, 0)]
        if text:
            self._sent += len(text)
            self._parts.append(text)
            if "\n" in text:
                self.flush()
        return len(text)

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def flush(self):
        if self._rid is not None and self._parts:
            text = "".join(self._parts)
            self._parts = []
            self._runner.send({"id": self._rid, "stdout": text})

    @property
    def buffer(self):
        return sys.stderr.buffer

    def fileno(self):
        return sys.stderr.fileno()

    def isatty(self):
        return False

    def writable(self):
        return True

    def readable(self):
        return False


class _Runner:
    def __init__(self, proto, fn, load_error, proto_in=None):
        self.proto = proto
        self.out = _ToolStdout(self)
        sys.stdout = self.out
        self.proto_in = proto_in
        self.fn = fn
        self.load_error = load_error
        self.wants_ctx = fn is not None and _wants_ctx(fn)
        # Set by a request with `once`: the process's only one; exit after answering it.
        self.last = False
        self.convert = None
        if fn is not None:
            try:
                self.convert = _converters(fn)
            except Exception:  # noqa: BLE001 - odd annotations: pass the JSON values as they are
                _print_traceback()

    def build_args(self, args):
        """The call's keyword arguments, each of the type its parameter declares."""
        kwargs = dict(args)
        if self.convert:
            for name, convert in self.convert.items():
                if name in kwargs:
                    try:
                        kwargs[name] = convert(kwargs[name])
                    except Exception as e:  # noqa: BLE001 - the type's own constructor refused
                        raise _ArgumentError(name, e) from e
        return kwargs

    def send(self, message):
        try:
            line = _dumps(message)
        except (TypeError, ValueError) as e:
            kind = "partial result" if "partial" in message else "result"
            line = _dumps(
                {
                    "id": message.get("id"),
                    "error": {"message": "the tool's %s is not JSON-serializable: %s" % (kind, e), "code": "InvalidResult"},
                }
            )
            if "partial" in message:
                # The stream cannot go on without a value; end the call here.
                raise _Stop(line)
        self.proto.write(line)
        self.proto.write("\n")
        self.proto.flush()

    def finish(self, message):
        # What the tool printed goes out before its answer.
        self.out.end()
        # Logs written before the answer go out before it, followed by the end-of-call
        # mark, so the runtime knows it has them all when it reads the answer.
        sys.stderr.flush()
        sys.stderr.write(_CALL_END)
        sys.stderr.flush()
        self.send(message)

    def handle(self, raw):
        try:
            request = _loads(raw)
            rid = request["id"]
            self.last = request.get("once") is True
            args = request.get("args") or {}
            if not isinstance(args, dict):
                raise ValueError("args must be a JSON object")
        except (ValueError, KeyError, TypeError) as e:
            self.finish({"id": None, "error": {"message": "runner got a malformed request: %s" % e, "code": "BadRequest"}})
            return
        if self.load_error is not None:
            self.finish({"id": rid, "error": self.load_error})
            return
        self.out.begin(rid)
        try:
            self.run(rid, request, args)
        except _Stop as stop:
            self.out.end()
            sys.stderr.flush()
            sys.stderr.write(_CALL_END)
            sys.stderr.flush()
            self.proto.write(stop.line + "\n")
            self.proto.flush()
        except _Empty as e:
            self.finish({"id": rid, "error": {"message": str(e), "code": "EmptyStream"}})
        except _ArgumentError as e:
            self.finish({"id": rid, "error": {"message": str(e), "code": e.code}})
        except SystemExit as e:
            self.finish({"id": rid, "error": {"message": "the tool called sys.exit(%r)" % (e.code,), "code": "SystemExit"}})
        except BaseException as e:  # noqa: BLE001 - every failure is an error line
            _print_traceback()
            code = getattr(e, "code", None)
            self.finish({"id": rid, "error": {"message": _describe(e), "code": code if isinstance(code, str) else type(e).__name__}})

    def run(self, rid, request, args):
        kwargs = self.build_args(args)
        if self.wants_ctx and "ctx" not in kwargs:
            context = dict(request.get("context") or {})
            context["tool"] = request.get("tool")
            context["credentials"] = dict(request.get("credentials") or {})
            # The agent's declared env: here, never in os.environ.
            context["env"] = dict(request.get("env") or {})
            context["_ask"] = self.asker(rid)
            kwargs["ctx"] = _Context(**context)
        value = self.fn(**kwargs)
        kind = type(value)
        if kind is types.CoroutineType:
            import asyncio

            value = asyncio.run(value)
        elif kind is types.GeneratorType:
            self.stream_sync(rid, value)
            self.finish({"id": rid, "end": True})
            return
        elif kind is types.AsyncGeneratorType:
            self.stream_async(rid, value)
            self.finish({"id": rid, "end": True})
            return
        self.finish({"id": rid, "result": value})

    def asker(self, rid):
        """The call's `ask`: one question out, then the line that answers it."""
        seq = [0]

        def ask(method, params):
            seq[0] += 1
            number = seq[0]
            self.send({"id": rid, "ask": {"method": method, "params": params, "seq": number}})
            while True:
                raw = self.proto_in.readline() if self.proto_in is not None else b""
                if not raw:
                    raise AskError("the runtime ended the call while the tool waited for an answer", "ASK_FAILED")
                if not raw.strip():
                    continue
                try:
                    line = _loads(raw)
                except ValueError:
                    continue
                if not isinstance(line, dict) or line.get("id") != rid or line.get("seq") != number:
                    continue
                if "answer" in line:
                    return line["answer"]
                error = line.get("error") if isinstance(line.get("error"), dict) else {}
                raise AskError(str(error.get("message") or "the question got no answer"), str(error.get("code") or "ASK_FAILED"))

        return ask

    def stream_sync(self, rid, gen):
        """Send each value the moment it is yielded; the runtime takes the last as the
        result once `end` says there are no more."""
        any_value = False
        for item in gen:
            self.send({"id": rid, "partial": item})
            any_value = True
        if not any_value:
            raise _Empty()

    def stream_async(self, rid, agen):
        import asyncio

        loop = asyncio.new_event_loop()
        any_value = False
        try:
            while True:
                try:
                    item = loop.run_until_complete(agen.__anext__())
                except StopAsyncIteration:
                    break
                self.send({"id": rid, "partial": item})
                any_value = True
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()
        if not any_value:
            raise _Empty()


class _Stop(Exception):
    def __init__(self, line):
        super().__init__(line)
        self.line = line


class _ArgumentError(Exception):
    """An argument's declared type refused the value (a pydantic validator, a
    dataclass's `__post_init__`)."""

    code = "InvalidArgument"

    def __init__(self, name, cause):
        super().__init__("argument `%s`: %s" % (name, _describe(cause)))


class _Empty(Exception):
    code = "EmptyStream"

    def __str__(self):
        return "the tool's generator yielded nothing; its last yield is the result"


def main():
    if len(sys.argv) != 3:
        sys.stderr.write("usage: runner.py MODULE_PATH FUNCTION\n")
        os._exit(2)
    module_path, fn_name = sys.argv[1], sys.argv[2]
    proto_in, proto = _setup_protocol()
    _set_sys_path(module_path)
    fn, load_error = _load(module_path, fn_name)
    runner = _Runner(proto, fn, load_error, proto_in)
    readline = proto_in.readline
    while True:
        raw = readline()
        if not raw:
            break
        if raw.strip():
            runner.handle(raw)
            if runner.last:
                # A one-shot call: its stdin stayed open only for answers; nothing
                # more comes, so the process ends with its answer.
                break
    sys.stderr.flush()
    proto.flush()
    # Skip interpreter teardown: nothing is left to flush, and it costs milliseconds.
    os._exit(0)


main()
