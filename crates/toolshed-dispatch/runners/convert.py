"""toolshed's Python runner, part two: build each argument as its parameter declares.

Loaded by runner.py only for a function with an annotation that a JSON value is not
(a dataclass, a pydantic model, a TypedDict holding them, an Enum, a tuple or a set),
so plain tools never pay for compiling it or importing `typing`.

    converters(fn, annotations) -> {parameter: convert}

`convert(value)` returns the value built as declared; a value whose shape does not fit
(the JSON validation has normally refused it) passes as it came; an exception of the
declared type's own (a pydantic validator, a dataclass's `__post_init__`) propagates.
"""

import sys

# Annotations that need no conversion: the JSON value already is what they declare.
_PLAIN = frozenset(
    [str, int, float, bool, dict, list, object, type(None), None]
    + ["str", "int", "float", "bool", "dict", "list", "object", "None", "Any", "typing.Any"]
)


def converters(fn, annotations):
    """{parameter: convert} for the parameters of `fn` (already unwrapped) whose
    annotation needs a conversion; a parameter whose annotation cannot be resolved or
    understood is left out, and its value passes as it came."""
    hints = _hints(fn, annotations)
    convert = {}
    cache = {}
    for name, hint in hints.items():
        try:
            c = _converter(hint, cache)
        except Exception:  # noqa: BLE001 - an odd annotation: this argument passes as it came
            import traceback

            traceback.print_exc(file=sys.stderr)
            continue
        if c is not None:
            convert[name] = _lenient(c)
    return convert


def _lenient(convert):
    def run(value):
        try:
            return convert(value)
        except _Mismatch:
            return value

    return run


def _hints(owner, annotations):
    """Resolved annotations (string ones evaluated in the owner's module); one that does
    not resolve is left out, so its value passes as it came."""
    import typing

    try:
        hints = typing.get_type_hints(owner)
        return {k: v for k, v in hints.items() if k in annotations}
    except Exception:  # noqa: BLE001 - fall back to one annotation at a time
        pass
    module = sys.modules.get(getattr(owner, "__module__", None) or "")
    scope = dict(vars(module)) if module is not None else {}
    scope.update(getattr(owner, "__globals__", {}) or {})
    out = {}
    for key, value in annotations.items():
        if isinstance(value, str):
            try:
                value = eval(value, scope)  # noqa: S307 - the tool's own annotation, in its own process
            except Exception:  # noqa: BLE001
                continue
        out[key] = value
    return out


class _Mismatch(Exception):
    """A value does not have the shape a converter needs (tried in a union)."""


def _converter(hint, cache):
    """A function JSON value -> declared type, or None where the value is used as is."""
    import typing

    try:
        if hint in _PLAIN or hint is typing.Any:
            return None
    except TypeError:  # an unhashable annotation (e.g. Annotated metadata): look closer
        pass
    if isinstance(hint, type) and hint in cache:
        # A class seen before, or being built (a self-reference): look it up at call time.
        return lambda v, hint=hint: cache[hint](v) if cache[hint] is not None else v
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Annotated or getattr(origin, "_name", None) in ("Required", "NotRequired", "ReadOnly"):
        return _converter(args[0], cache)
    if origin is typing.Union or (origin is not None and type(hint).__name__ == "UnionType"):
        members = [(a, _converter(a, cache)) for a in args]
        if all(c is None for _, c in members):
            return None

        def union(value, members=members):
            if value is None and any(a is type(None) for a, _ in members):
                return None
            for member, convert in members:
                if convert is None:
                    if _fits(value, member):
                        return value
                    continue
                try:
                    return convert(value)
                except _Mismatch:
                    continue
            return value

        return union
    if origin in (list, set, frozenset, tuple) or (origin is not None and getattr(origin, "__module__", "") == "collections.abc"):
        import collections.abc as abc

        if origin is not None and origin not in (list, set, frozenset, tuple):
            if issubclass(origin, abc.Mapping):
                return _mapping(args, cache)
            if origin in (abc.Set, abc.MutableSet):
                origin = set
            else:
                origin = list
        if origin is tuple and args and not (len(args) == 2 and args[1] is Ellipsis):
            items = [_converter(a, cache) for a in args]

            def fixed(value, items=items):
                if not isinstance(value, list):
                    raise _Mismatch()
                return tuple(c(v) if c is not None else v for c, v in zip(items, value))

            return fixed
        item = _converter(args[0], cache) if args else None
        if item is None and origin is list:
            return None
        build = origin

        def sequence(value, item=item, build=build):
            if not isinstance(value, list):
                raise _Mismatch()
            return build(item(v) for v in value) if item is not None else build(value)

        return sequence
    if origin is dict:
        return _mapping(args, cache)
    if not isinstance(hint, type):
        return None
    if hint in (tuple, set, frozenset):
        return lambda v, hint=hint: hint(v) if isinstance(v, list) else v
    validate = getattr(hint, "model_validate", None) or getattr(hint, "parse_obj", None)
    if callable(validate) and (hasattr(hint, "model_fields") or hasattr(hint, "__fields__")):
        # A pydantic model (v2 `model_validate`, v1 `parse_obj`) builds itself, nested
        # models, validators and aliases included.
        def model(value, validate=validate):
            if not isinstance(value, dict):
                raise _Mismatch()
            return validate(value)

        return model
    if hasattr(hint, "__dataclass_fields__"):
        return _dataclass(hint, cache)
    if issubclass(hint, dict) and hasattr(hint, "__total__") and isinstance(getattr(hint, "__annotations__", None), dict):
        # A TypedDict, from `typing` or `typing_extensions` (whose classes `typing`
        # does not recognise before 3.13): it stays a dict, its fields converted.
        cache[hint] = None
        fields = {k: _converter(v, cache) for k, v in _hints(hint, hint.__annotations__).items()}
        fields = {k: c for k, c in fields.items() if c is not None}
        if not fields:
            return None

        def typed_dict(value, fields=fields):
            if not isinstance(value, dict):
                raise _Mismatch()
            return {k: fields[k](v) if k in fields else v for k, v in value.items()}

        cache[hint] = typed_dict
        return typed_dict
    import enum

    if issubclass(hint, enum.Enum):
        return hint
    return None


def _mapping(args, cache):
    value_conv = _converter(args[1], cache) if len(args) == 2 else None
    if value_conv is None:
        return None

    def mapping(value, convert=value_conv):
        if not isinstance(value, dict):
            raise _Mismatch()
        return {k: convert(v) for k, v in value.items()}

    return mapping


def _dataclass(cls, cache):
    """Build the dataclass from an object, its fields converted in turn; fields it does
    not take at construction (`init=False`) are left to it."""
    cache[cls] = None
    specs = [f for f in cls.__dataclass_fields__.values() if getattr(f, "init", True)]
    hints = _hints(cls, {f.name: f.type for f in specs})
    fields = {}
    for f in specs:
        hint = hints.get(f.name)
        if hint is not None and type(hint).__name__ == "InitVar":
            hint = hint.type
        c = _converter(hint, cache) if hint is not None else None
        if c is not None:
            fields[f.name] = c

    def build(value, cls=cls, fields=fields):
        if not isinstance(value, dict):
            raise _Mismatch()
        return cls(**{k: fields[k](v) if k in fields else v for k, v in value.items()})

    cache[cls] = build
    return build


def _fits(value, hint):
    """Whether a value already is of a union member that needs no conversion."""
    import typing

    if hint is typing.Any or hint is object:
        return True
    base = typing.get_origin(hint) or hint
    if base is typing.Literal:
        return value in typing.get_args(hint)
    if isinstance(base, type):
        if base is float:
            return isinstance(value, (int, float)) and not isinstance(value, bool)
        if base is int:
            return isinstance(value, int) and not isinstance(value, bool)
        return isinstance(value, base)
    return True
