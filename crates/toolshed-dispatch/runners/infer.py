"""toolshed's Python schema inference: a tool's JSON Schema from its signature and docstring.

    python3 -S -E infer.py MODULE_PATH FUNCTION

Prints one JSON object: {"name", "description", "input_schema", "output_schema",
"warnings"} or {"error": {"message", "code"}}.

The module is parsed, never imported: pushing a tool to the registry runs none of its
code, and the tool's dependencies need not be installed where it is pushed from. So
annotations are read as written: `str`, `int`, `float`, `bool`, `list[T]` / `List[T]`,
`dict` / `Dict[K, V]`, `Optional[T]` / `T | None`, `Union[...]`, `Literal[...]`,
`Annotated[T, "description"]`, `Any`, and `Enum` classes defined in the same file.
Anything else becomes an unconstrained schema and a warning.

Descriptions come from a Google-style docstring: the first paragraph describes the
tool, the `Args:` section describes the parameters, `Returns:` the output.
"""

import ast
import json
import sys

SCALARS = {
    "str": {"type": "string"},
    "int": {"type": "integer"},
    "float": {"type": "number"},
    "bool": {"type": "boolean"},
    "bytes": {"type": "string"},
    "dict": {"type": "object"},
    "Dict": {"type": "object"},
    "Mapping": {"type": "object"},
    "MutableMapping": {"type": "object"},
    "list": {"type": "array"},
    "List": {"type": "array"},
    "Sequence": {"type": "array"},
    "Iterable": {"type": "array"},
    "tuple": {"type": "array"},
    "Tuple": {"type": "array"},
    "set": {"type": "array", "uniqueItems": True},
    "Set": {"type": "array", "uniqueItems": True},
    "frozenset": {"type": "array", "uniqueItems": True},
    "FrozenSet": {"type": "array", "uniqueItems": True},
    "None": {"type": "null"},
    "NoneType": {"type": "null"},
    "Any": {},
    "object": {},
    "datetime": {"type": "string", "format": "date-time"},
    "date": {"type": "string", "format": "date"},
    "time": {"type": "string", "format": "time"},
    "UUID": {"type": "string", "format": "uuid"},
    "Path": {"type": "string"},
    "Decimal": {"type": "number"},
}

ARRAYS = {"list", "List", "Sequence", "Iterable", "tuple", "Tuple", "set", "Set", "frozenset", "FrozenSet"}
OBJECTS = {"dict", "Dict", "Mapping", "MutableMapping"}
SECTIONS = {
    "args", "arguments", "parameters", "params", "keyword args", "keyword arguments",
    "returns", "return", "yields", "yield", "raises", "exceptions", "examples", "example",
    "note", "notes", "see also", "todo", "warning", "warnings", "attributes", "references",
}
ARG_SECTIONS = {"args", "arguments", "parameters", "params", "keyword args", "keyword arguments"}
RETURN_SECTIONS = {"returns", "return", "yields", "yield"}


class Inferrer:
    def __init__(self, tree):
        self.warnings = []
        self.enums = {}
        self.members = {}
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and any(self.name_of(b) in ("Enum", "StrEnum", "IntEnum") for b in node.bases):
                values = []
                for item in node.body:
                    if isinstance(item, ast.Assign) and len(item.targets) == 1:
                        try:
                            value = ast.literal_eval(item.value)
                        except ValueError:
                            continue
                        values.append(value)
                        member = self.name_of(item.targets[0])
                        if member:
                            self.members[(node.name, member)] = value
                if values:
                    self.enums[node.name] = values

    def default_of(self, node):
        """The JSON value of a default: a constant, or a member of an Enum of this file."""
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            key = (node.value.id, node.attr)
            if key in self.members:
                return self.members[key]
        return ast.literal_eval(node)

    @staticmethod
    def name_of(node):
        """`str` for `str`, `List` for `typing.List` or `t.List`."""
        if isinstance(node, ast.Name):
            return node.id
        if isinstance(node, ast.Attribute):
            return node.attr
        if isinstance(node, ast.Constant) and node.value is None:
            return "None"
        return None

    def schema(self, node, where):
        if node is None:
            return {}
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            # A string annotation ("from __future__ import annotations" or a forward ref).
            try:
                return self.schema(ast.parse(node.value, mode="eval").body, where)
            except SyntaxError:
                self.warnings.append("%s: cannot parse the annotation %r; any value is accepted" % (where, node.value))
                return {}
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            return self.union(self.flatten_or(node), where)
        if isinstance(node, ast.Subscript):
            return self.generic(node, where)
        name = self.name_of(node)
        if name in self.enums:
            return enum_schema(self.enums[name])
        if name in SCALARS:
            return dict(SCALARS[name])
        self.warnings.append(
            "%s: the annotation `%s` has no JSON Schema equivalent here; any value is accepted"
            % (where, ast.unparse(node))
        )
        return {}

    def flatten_or(self, node):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            return self.flatten_or(node.left) + self.flatten_or(node.right)
        return [node]

    def generic(self, node, where):
        base = self.name_of(node.value)
        params = node.slice
        items = list(params.elts) if isinstance(params, ast.Tuple) else [params]
        if base == "Optional":
            return self.union(items + [ast.Constant(value=None)], where)
        if base == "Union":
            return self.union(items, where)
        if base == "Literal":
            values = []
            for item in items:
                try:
                    values.append(ast.literal_eval(item))
                except ValueError:
                    self.warnings.append("%s: a Literal value is not a constant" % where)
            return enum_schema(values)
        if base == "Annotated":
            inner = self.schema(items[0], where)
            for meta in items[1:]:
                if isinstance(meta, ast.Constant) and isinstance(meta.value, str):
                    inner["description"] = meta.value
                    break
            return inner
        if base in ARRAYS:
            out = dict(SCALARS[base])
            if base in ("tuple", "Tuple"):
                if len(items) == 2 and isinstance(items[1], ast.Constant) and items[1].value is Ellipsis:
                    out["items"] = self.schema(items[0], where)
                else:
                    out["prefixItems"] = [self.schema(i, where) for i in items]
                    out["minItems"] = out["maxItems"] = len(items)
            else:
                inner = self.schema(items[0], where)
                if inner:
                    out["items"] = inner
            return out
        if base in OBJECTS:
            out = {"type": "object"}
            if len(items) == 2:
                values = self.schema(items[1], where)
                if values:
                    out["additionalProperties"] = values
            return out
        self.warnings.append(
            "%s: the annotation `%s` has no JSON Schema equivalent here; any value is accepted"
            % (where, ast.unparse(node))
        )
        return {}

    def union(self, members, where):
        nullable = False
        schemas = []
        for member in members:
            s = self.schema(member, where)
            if s == {"type": "null"}:
                nullable = True
            else:
                schemas.append(s)
        if not schemas:
            return {"type": "null"}
        if len(schemas) == 1:
            only = dict(schemas[0])
            if nullable:
                make_nullable(only)
            return only
        if all(set(s) == {"type"} and isinstance(s["type"], str) for s in schemas):
            types = [s["type"] for s in schemas] + (["null"] if nullable else [])
            return {"type": types}
        if nullable:
            schemas.append({"type": "null"})
        return {"anyOf": schemas}


def enum_schema(values):
    out = {"enum": values}
    kinds = {type(v) for v in values if v is not None}
    names = {str: "string", int: "integer", float: "number", bool: "boolean"}
    if len(kinds) == 1 and next(iter(kinds)) in names:
        out = {"type": names[next(iter(kinds))], "enum": values}
        if None in values:
            out["type"] = [out["type"], "null"]
    return out


def make_nullable(schema):
    if "enum" in schema and None not in schema["enum"]:
        schema["enum"] = schema["enum"] + [None]
    kind = schema.get("type")
    if isinstance(kind, str):
        schema["type"] = [kind, "null"]
    elif isinstance(kind, list):
        if "null" not in kind:
            schema["type"] = kind + ["null"]
    elif "anyOf" not in schema and schema:
        wrapped = dict(schema)
        schema.clear()
        schema["anyOf"] = [wrapped, {"type": "null"}]


def parse_docstring(doc):
    """(description, {param: text}, returns text) from a Google-style docstring."""
    if not doc:
        return "", {}, None
    lines = doc.expandtabs().splitlines()
    summary = []
    i = 0
    while i < len(lines) and not lines[i].strip():
        i += 1
    while i < len(lines) and lines[i].strip() and not is_section(lines[i]):
        summary.append(lines[i].strip())
        i += 1
    params = {}
    returns = []
    section = None
    header_indent = 0
    entry_indent = None
    current = None
    for line in lines[i:]:
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        if is_section(line) and (section is None or indent <= header_indent):
            section = stripped[:-1].strip().lower()
            header_indent = indent
            entry_indent = None
            current = None
            continue
        if section is None or not stripped:
            continue
        if indent <= header_indent:
            section = None
            continue
        if section in ARG_SECTIONS:
            if entry_indent is None:
                entry_indent = indent
            if indent == entry_indent and ":" in stripped:
                head, _, text = stripped.partition(":")
                name = head.split("(")[0].strip().lstrip("*")
                if name.isidentifier():
                    current = name
                    params[current] = text.strip()
                    continue
            if current is not None:
                params[current] = (params[current] + " " + stripped).strip()
        elif section in RETURN_SECTIONS:
            returns.append(stripped)
    ret = " ".join(returns).strip() or None
    return " ".join(summary), params, ret


def is_section(line):
    stripped = line.strip()
    return stripped.endswith(":") and stripped[:-1].strip().lower() in SECTIONS


def find_function(tree, name):
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return node
    return None


def infer(path, fn_name):
    try:
        with open(path, "rb") as f:
            source = f.read()
    except OSError as e:
        return error("cannot read %s: %s" % (path, e.strerror or e), "ReadError")
    try:
        tree = ast.parse(source, filename=path)
    except SyntaxError as e:
        return error("%s does not parse: %s (line %s)" % (path, e.msg, e.lineno), "SyntaxError")
    fn = find_function(tree, fn_name)
    if fn is None:
        names = [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and not n.name.startswith("_")]
        return error(
            "%s defines no top-level function `%s`; it defines %s"
            % (path, fn_name, ", ".join("`%s`" % n for n in names) or "no public functions"),
            "FunctionNotFound",
        )
    inferrer = Inferrer(tree)
    description, docs, returns_doc = parse_docstring(ast.get_docstring(fn))
    args = fn.args
    positional = list(args.posonlyargs) + list(args.args)
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    params = list(zip(positional, defaults)) + list(zip(args.kwonlyargs, args.kw_defaults))
    properties = {}
    required = []
    for arg, default in params:
        name = arg.arg
        if name in ("self", "cls", "ctx"):
            continue
        schema = inferrer.schema(arg.annotation, "parameter `%s`" % name)
        if name in docs and docs[name]:
            schema["description"] = docs[name]
        if default is None:
            required.append(name)
        else:
            try:
                value = inferrer.default_of(default)
                json.dumps(value)
                schema["default"] = value
                if value is None and "type" in schema and schema != {"type": "null"}:
                    make_nullable(schema)
            except (ValueError, TypeError):
                inferrer.warnings.append(
                    "parameter `%s`: the default `%s` is not a JSON constant; it is left out of the schema"
                    % (name, ast.unparse(default))
                )
        properties[name] = schema
    if args.vararg is not None:
        inferrer.warnings.append("`*%s` cannot be passed by name; it is left out of the schema" % args.vararg.arg)
    input_schema = {"type": "object", "properties": properties, "required": required}
    output_schema = None
    if fn.returns is not None:
        ret = fn.returns
        if isinstance(ret, ast.Subscript) and inferrer.name_of(ret.value) in ("Iterator", "Generator", "AsyncIterator", "AsyncGenerator", "Iterable", "AsyncIterable"):
            items = ret.slice.elts if isinstance(ret.slice, ast.Tuple) else [ret.slice]
            ret = items[0]
        schema = inferrer.schema(ret, "the return annotation")
        if schema and schema != {"type": "null"}:
            output_schema = schema
            if returns_doc:
                output_schema["description"] = returns_doc
    return {
        "name": fn_name,
        "description": description,
        "input_schema": input_schema,
        "output_schema": output_schema,
        "warnings": inferrer.warnings,
    }


def error(message, code):
    return {"error": {"message": message, "code": code}}


def main():
    if len(sys.argv) != 3:
        sys.stderr.write("usage: infer.py MODULE_PATH FUNCTION\n")
        sys.exit(2)
    out = infer(sys.argv[1], sys.argv[2])
    sys.stdout.write(json.dumps(out, ensure_ascii=False) + "\n")


main()
