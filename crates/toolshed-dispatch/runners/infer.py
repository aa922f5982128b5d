"""toolshed's Python schema inference: a tool's JSON Schema from its signature and docstring.

    python3 -S -E infer.py MODULE_PATH [FUNCTION]

Prints one JSON object: {"name", "description", "input_schema", "output_schema",
"warnings"} or {"error": {"message", "code"}}. Without FUNCTION (or with an empty one)
the tool's function is the one named like the file, else the file's only public
top-level function; several candidates are an error that lists them.

The module is parsed, never imported: pushing a tool to the registry or loading an
agent's tools folder runs none of its code (inference runs on the host, outside the
sandbox), and the tool's dependencies need not be installed where it is pushed from.
So annotations are read as written: `str`, `int`, `float`, `bool`, `list[T]` /
`List[T]`, `dict` / `Dict[K, V]`, `Optional[T]` / `T | None`, `Union[...]`,
`Literal[...]`, `Annotated[T, "description"]`, `Any`, and, defined in the same file,
`Enum` classes, dataclasses, `TypedDict`s and pydantic models (their fields, defaults,
`Field(...)` / `field(...)` arguments and docs; nested ones and self-references as
`$defs`). Anything else becomes an unconstrained schema and a warning naming the
parameter or field.

A module-level `SCHEMA` (AgentBreeder's convention) or `schema` dict literal, either an
input schema or a definition `{description?, input_schema | inputSchema | parameters,
output_schema?}`, replaces the schema inferred from the signature.

Descriptions come from a Google-style docstring: the first paragraph describes the
tool, the `Args:` section describes the parameters, `Returns:` the output; a class's
fields are described by `Field(description=...)`, an attribute docstring under the
field, or its docstring's `Attributes:` section.
"""

import ast
import json
import os
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
    "note", "notes", "see also", "todo", "warning", "warnings", "attributes", "references", "fields",
}
# How pydantic's `Field(...)` constraints are written in JSON Schema.
FIELD_CONSTRAINTS = {
    "ge": "minimum", "gt": "exclusiveMinimum", "le": "maximum", "lt": "exclusiveMaximum",
    "multiple_of": "multipleOf", "pattern": "pattern", "title": "title", "examples": "examples",
}
MISSING = object()
ARG_SECTIONS = {
    "args", "arguments", "parameters", "params", "keyword args", "keyword arguments", "attributes", "fields",
}
RETURN_SECTIONS = {"returns", "return", "yields", "yield"}


class Inferrer:
    def __init__(self, tree):
        self.warnings = []
        self.enums = {}
        self.members = {}
        # Classes of this file that become object schemas: name -> (kind, node), kind
        # one of "dataclass", "pydantic", "typeddict"; their schemas go to `$defs`.
        self.classes = {}
        self.defs = {}
        # Names imported from other modules, to say why such an annotation is unknown.
        self.imported = {}
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                kind = self.class_kind(node)
                if kind:
                    self.classes[node.name] = (kind, node)
            elif isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    self.imported[alias.asname or alias.name] = node.module or "."
            elif (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.Call)
                and self.name_of(node.value.func) == "TypedDict"
            ):
                # The functional form: `Movie = TypedDict("Movie", {"title": str}, total=False)`.
                self.classes[node.targets[0].id] = ("typeddict", node.value)
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
        if isinstance(node, ast.Name) and name in self.classes:
            return self.class_ref(name)
        if name in self.enums:
            return enum_schema(self.enums[name])
        if name in SCALARS:
            return dict(SCALARS[name])
        if isinstance(node, ast.Name) and name in self.imported:
            self.warnings.append(
                "%s: `%s` is imported from `%s`, and inference reads only this file; define it here "
                "(a dataclass, TypedDict or pydantic model), or declare a module-level SCHEMA; any value is accepted"
                % (where, name, self.imported[name])
            )
            return {}
        self.warnings.append(
            "%s: the annotation `%s` has no JSON Schema equivalent here; any value is accepted"
            % (where, ast.unparse(node))
        )
        return {}

    @staticmethod
    def decorator_name(dec):
        return Inferrer.name_of(dec.func if isinstance(dec, ast.Call) else dec)

    def class_kind(self, node):
        """"dataclass", "pydantic", "typeddict" or None for a class of this file."""
        if any(self.decorator_name(d) == "dataclass" for d in node.decorator_list):
            return "dataclass"
        for base in node.bases:
            name = self.name_of(base)
            if name == "BaseModel":
                return "pydantic"
            if name == "TypedDict":
                return "typeddict"
            if isinstance(base, ast.Name) and name in self.classes and self.classes[name][0] != "dataclass":
                return self.classes[name][0]
        return None

    def class_ref(self, name):
        """A `$ref` to the class's schema in `$defs`, built on first use (a placeholder
        goes in first, so a class that refers to itself ends)."""
        if name not in self.defs:
            self.defs[name] = {}
            self.defs[name] = self.class_schema(name)
        return {"$ref": "#/$defs/%s" % name}

    def class_schema(self, name):
        kind, node = self.classes[name]
        if isinstance(node, ast.Call):
            return self.typeddict_call(name, node)
        summary, docs, _ = parse_docstring(ast.get_docstring(node))
        out = {"type": "object"}
        if summary:
            out["description"] = summary
        properties = {}
        required = []
        for fname, (owner, ann, value, doc, total) in self.class_fields(node, kind).items():
            where = "field `%s.%s`" % (name, fname)
            key, schema, is_required = self.field(kind, owner, fname, ann, value, where, total)
            if key is None:
                continue
            description = doc or docs.get(fname) or self.field_docs(owner).get(fname)
            if description and "description" not in schema:
                schema["description"] = description
            properties[key] = schema
            if is_required:
                required.append(key)
        out["properties"] = properties
        out["required"] = required
        if kind == "dataclass" or (kind == "pydantic" and self.forbids_extra(node)):
            # A dataclass's constructor refuses unknown keywords, so validation does first.
            out["additionalProperties"] = False
        return out

    def field_docs(self, node):
        return parse_docstring(ast.get_docstring(node))[1] if isinstance(node, ast.ClassDef) else {}

    def class_fields(self, node, kind):
        """{name: (owner, annotation, value, attribute docstring, total)}, inherited
        fields of this file's classes first, as Python orders them."""
        fields = {}
        for base in node.bases:
            bname = self.name_of(base)
            if isinstance(base, ast.Name) and bname in self.classes and self.classes[bname][0] == kind:
                bnode = self.classes[bname][1]
                if isinstance(bnode, ast.ClassDef):
                    fields.update(self.class_fields(bnode, kind))
        total = True
        for kw in node.keywords:
            if kw.arg == "total":
                try:
                    total = bool(ast.literal_eval(kw.value))
                except ValueError:
                    pass
        body = node.body
        for i, item in enumerate(body):
            if not (isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)):
                continue
            fname = item.target.id
            ann = item.annotation
            head = self.name_of(ann.value) if isinstance(ann, ast.Subscript) else self.name_of(ann)
            if head in ("ClassVar", "KW_ONLY") or (kind == "pydantic" and fname.startswith("_")):
                continue
            doc = None
            nxt = body[i + 1] if i + 1 < len(body) else None
            if isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant) and isinstance(nxt.value.value, str):
                doc = " ".join(line.strip() for line in nxt.value.value.strip().splitlines() if line.strip())
            fields.pop(fname, None)
            fields[fname] = (node, ann, item.value, doc, total)
        return fields

    def field(self, kind, owner, fname, ann, value, where, total):
        """(JSON key or None to leave out, schema, required) of one field."""
        required_override = None
        if isinstance(ann, ast.Subscript) and self.name_of(ann.value) in ("InitVar", "Required", "NotRequired", "ReadOnly"):
            wrapper = self.name_of(ann.value)
            if wrapper == "Required":
                required_override = True
            elif wrapper == "NotRequired":
                required_override = False
            ann = ann.slice
        schema = self.schema(ann, where)
        schema = dict(schema)
        key = fname
        if kind == "typeddict":
            if value is not None:
                self.warnings.append("%s: a TypedDict field cannot have a default; it is ignored" % where)
            return key, schema, total if required_override is None else required_override
        default = MISSING if value is None else value
        has_default = value is not None
        if isinstance(value, ast.Call) and self.name_of(value.func) in ("field", "Field"):
            call = value
            default = MISSING
            has_default = False
            if call.args and not (isinstance(call.args[0], ast.Constant) and call.args[0].value is Ellipsis):
                default, has_default = call.args[0], True
            for kw in call.keywords:
                if kw.arg == "default":
                    if not (isinstance(kw.value, ast.Constant) and kw.value.value is Ellipsis):
                        default, has_default = kw.value, True
                elif kw.arg in ("default_factory", "factory"):
                    has_default = True
                elif kw.arg == "init":
                    if isinstance(kw.value, ast.Constant) and kw.value.value is False:
                        return None, schema, False
                elif kw.arg in ("alias", "validation_alias") and isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, str):
                    key = kw.value.value
                elif kw.arg == "metadata" and isinstance(kw.value, ast.Dict):
                    for k, v in zip(kw.value.keys, kw.value.values):
                        if isinstance(k, ast.Constant) and k.value in ("description", "doc") and isinstance(v, ast.Constant) and isinstance(v.value, str):
                            schema["description"] = v.value
                else:
                    self.apply_field_keyword(schema, kw, where)
        if default is not MISSING:
            self.apply_default(schema, default, where)
        return key, schema, not has_default

    def apply_field_keyword(self, schema, kw, where):
        """`Field(description=..., ge=..., max_length=..., ...)` onto the schema."""
        if kw.arg is None:
            return
        try:
            value = ast.literal_eval(kw.value)
        except ValueError:
            self.warnings.append("%s: `%s=` is not a constant; it is left out of the schema" % (where, kw.arg))
            return
        if kw.arg == "description" and isinstance(value, str):
            schema["description"] = value
        elif kw.arg in FIELD_CONSTRAINTS:
            schema[FIELD_CONSTRAINTS[kw.arg]] = value
        elif kw.arg in ("min_length", "max_length"):
            kind = schema.get("type")
            kinds = kind if isinstance(kind, list) else [kind]
            if "array" in kinds:
                schema["minItems" if kw.arg == "min_length" else "maxItems"] = value
            elif "object" in kinds:
                schema["minProperties" if kw.arg == "min_length" else "maxProperties"] = value
            else:
                schema["minLength" if kw.arg == "min_length" else "maxLength"] = value

    def forbids_extra(self, node):
        """Whether a pydantic model refuses unknown keys (`extra="forbid"`), in
        `model_config`, a v1 `class Config`, or the class keywords; or a base does."""
        for kw in node.keywords:
            if kw.arg == "extra" and isinstance(kw.value, ast.Constant) and kw.value.value == "forbid":
                return True
        for item in node.body:
            if isinstance(item, (ast.Assign, ast.AnnAssign)):
                targets = item.targets if isinstance(item, ast.Assign) else [item.target]
                if any(isinstance(t, ast.Name) and t.id == "model_config" for t in targets) and item.value is not None:
                    value = item.value
                    pairs = []
                    if isinstance(value, ast.Call):
                        pairs = [(kw.arg, kw.value) for kw in value.keywords]
                    elif isinstance(value, ast.Dict):
                        pairs = [(k.value if isinstance(k, ast.Constant) else None, v) for k, v in zip(value.keys, value.values)]
                    for k, v in pairs:
                        if k == "extra" and (
                            (isinstance(v, ast.Constant) and v.value == "forbid")
                            or (isinstance(v, ast.Attribute) and v.attr == "forbid")
                        ):
                            return True
            if isinstance(item, ast.ClassDef) and item.name == "Config":
                for sub in item.body:
                    if (
                        isinstance(sub, ast.Assign)
                        and any(isinstance(t, ast.Name) and t.id == "extra" for t in sub.targets)
                        and (
                            (isinstance(sub.value, ast.Constant) and sub.value.value == "forbid")
                            or (isinstance(sub.value, ast.Attribute) and sub.value.attr == "forbid")
                        )
                    ):
                        return True
        for base in node.bases:
            name = self.name_of(base)
            if isinstance(base, ast.Name) and name in self.classes and isinstance(self.classes[name][1], ast.ClassDef):
                if self.classes[name][0] == "pydantic" and self.forbids_extra(self.classes[name][1]):
                    return True
        return False

    def typeddict_call(self, name, call):
        total = True
        for kw in call.keywords:
            if kw.arg == "total":
                try:
                    total = bool(ast.literal_eval(kw.value))
                except ValueError:
                    pass
        properties = {}
        required = []
        spec = call.args[1] if len(call.args) > 1 else None
        if not isinstance(spec, ast.Dict):
            self.warnings.append("`%s`: the TypedDict's fields are not a dict literal; any object is accepted" % name)
            return {"type": "object"}
        for k, v in zip(spec.keys, spec.values):
            if not (isinstance(k, ast.Constant) and isinstance(k.value, str)):
                continue
            key, schema, is_required = self.field("typeddict", None, k.value, v, None, "field `%s.%s`" % (name, k.value), total)
            properties[key] = schema
            if is_required:
                required.append(key)
        return {"type": "object", "properties": properties, "required": required}

    def apply_default(self, schema, default, where):
        """Put a default into the schema, or warn when it is not a JSON constant."""
        try:
            value = self.default_of(default)
            json.dumps(value)
        except (ValueError, TypeError, SyntaxError, RecursionError):
            self.warnings.append(
                "%s: the default `%s` is not a JSON constant; it is left out of the schema"
                % (where, ast.unparse(default))
            )
            return
        schema["default"] = value
        if value is None and schema != {"type": "null"}:
            if "$ref" in schema:
                ref = dict(schema)
                schema.clear()
                schema["anyOf"] = [{"$ref": ref.pop("$ref")}, {"type": "null"}]
                schema.update(ref)
            elif "type" in schema:
                make_nullable(schema)

    def defs_for(self, schema):
        """The `$defs` a schema refers to, transitively."""
        wanted = []
        stack = [schema]
        while stack:
            node = stack.pop()
            if isinstance(node, dict):
                ref = node.get("$ref")
                if isinstance(ref, str) and ref.startswith("#/$defs/"):
                    name = ref[len("#/$defs/"):]
                    if name in self.defs and name not in wanted:
                        wanted.append(name)
                        stack.append(self.defs[name])
                stack.extend(node.values())
            elif isinstance(node, list):
                stack.extend(node)
        return {name: self.defs[name] for name in sorted(wanted)}

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
            inner = dict(self.schema(items[0], where))
            for meta in items[1:]:
                if isinstance(meta, ast.Constant) and isinstance(meta.value, str):
                    inner.setdefault("description", meta.value)
                elif isinstance(meta, ast.Call) and self.name_of(meta.func) == "Field":
                    for kw in meta.keywords:
                        if kw.arg not in ("default", "default_factory", "alias", "validation_alias"):
                            self.apply_field_keyword(inner, kw, where)
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
    """The top-level function `name` (its last definition, the one Python keeps)."""
    found = None
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            found = node
    return found


def public_functions(tree):
    names = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_"):
            if node.name not in names:
                names.append(node.name)
    return names


def choose_function(tree, path, fn_name):
    """(function node, None) or (None, error): the named function; without a name, the
    one named like the file, else the only public one."""
    if fn_name:
        fn = find_function(tree, fn_name)
        if fn is None:
            names = public_functions(tree)
            return None, error(
                "%s defines no top-level function `%s`; it defines %s"
                % (path, fn_name, ", ".join("`%s`" % n for n in names) or "no public functions"),
                "FunctionNotFound",
            )
        return fn, None
    stem = os.path.splitext(os.path.basename(path))[0]
    fn = find_function(tree, stem)
    if fn is not None:
        return fn, None
    names = public_functions(tree)
    if len(names) == 1:
        return find_function(tree, names[0]), None
    if not names:
        return None, error(
            "%s defines no public top-level function; a tool file defines its tool as a `def` "
            "(named like the file, or the only one whose name does not start with `_`)" % path,
            "FunctionNotFound",
        )
    return None, error(
        "%s defines %d public functions (%s), so which one is the tool is ambiguous: name the tool's "
        "function like the file (`def %s(...)`), make the others private with a leading `_`, or name "
        "it in the endpoint (`python:%s:%s`)"
        % (path, len(names), ", ".join("`%s`" % n for n in names), stem if stem.isidentifier() else "<file stem>", path, names[0]),
        "AmbiguousFunction",
    )


def declared_schema(tree, path, warnings):
    """(definition, None), (None, None) when the module declares none, or (None, error).

    A module-level `SCHEMA` (AgentBreeder's convention) must be a dict literal: it is
    read, not run. A lowercase `schema` is used only when it is one (a module may well
    have a variable of that name that is something else), else ignored with a warning.
    """
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        for target in targets:
            if isinstance(target, ast.Name) and target.id in ("SCHEMA", "schema"):
                found[target.id] = (value, node.lineno)
    chosen = None
    for name in ("SCHEMA", "schema"):
        if name not in found:
            continue
        value, line = found[name]
        try:
            literal = ast.literal_eval(value)
        except (ValueError, TypeError, SyntaxError, RecursionError):
            literal = None
        if not isinstance(literal, dict):
            if name == "SCHEMA":
                return None, error(
                    "%s: the module-level SCHEMA (line %d) is not a dict literal; inference reads the file "
                    "without running it, so write SCHEMA as a literal {\"type\": \"object\", \"properties\": {...}}, "
                    "or remove it to infer the schema from the function's signature" % (path, line),
                    "SchemaNotLiteral",
                )
            warnings.append(
                "the module-level `schema` (line %d) is not a dict literal, so it is ignored and the schema "
                "is inferred from the signature" % line
            )
            continue
        if chosen is None:
            chosen = (name, literal, line)
        else:
            warnings.append("both SCHEMA and `schema` are defined; SCHEMA is used")
    if chosen is None:
        return None, None
    name, literal, line = chosen
    keys = ("input_schema", "inputSchema", "parameters")
    is_definition = any(k in literal for k in keys)
    input_schema = next((literal[k] for k in keys if k in literal), None) if is_definition else literal
    output = (literal.get("output_schema") or literal.get("outputSchema")) if is_definition else None
    description = literal.get("description") if is_definition else None
    if not isinstance(input_schema, dict) or input_schema.get("type", "object") != "object":
        return None, error(
            "%s: the module-level %s (line %d) must describe the tool's arguments as a JSON object: "
            "{\"type\": \"object\", \"properties\": {...}} (or a definition with `input_schema`)" % (path, name, line),
            "InvalidSchema",
        )
    if output is not None and not isinstance(output, dict):
        return None, error("%s: the output_schema of %s (line %d) is not a JSON object" % (path, name, line), "InvalidSchema")
    return {
        "name": name,
        "input_schema": input_schema,
        "output_schema": output,
        "description": description if isinstance(description, str) else None,
    }, None


def parameters(fn):
    """[(arg, default node or None)] of the parameters a call passes by name."""
    args = fn.args
    positional = list(args.posonlyargs) + list(args.args)
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    params = list(zip(positional, defaults)) + list(zip(args.kwonlyargs, args.kw_defaults))
    return [(arg, default) for arg, default in params if arg.arg not in ("self", "cls", "ctx")]


def check_declared(fn, declared, warnings):
    """Warn where the declared schema and the function disagree: a call would fail."""
    props = declared["input_schema"].get("properties")
    props = props if isinstance(props, dict) else {}
    params = parameters(fn)
    names = {arg.arg for arg, _ in params}
    for arg, default in params:
        if default is None and arg.arg not in props:
            warnings.append(
                "%s does not list the required parameter `%s` of `%s`; a call fails without it"
                % (declared["name"], arg.arg, fn.name)
            )
    if fn.args.kwarg is None:
        for key in props:
            if key not in names:
                warnings.append(
                    "%s lists `%s`, which `%s` does not accept; a call that sends it fails"
                    % (declared["name"], key, fn.name)
                )


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
    fn, failure = choose_function(tree, path, fn_name)
    if failure is not None:
        return failure
    inferrer = Inferrer(tree)
    declared, failure = declared_schema(tree, path, inferrer.warnings)
    if failure is not None:
        return failure
    description, docs, returns_doc = parse_docstring(ast.get_docstring(fn))
    if declared is not None:
        check_declared(fn, declared, inferrer.warnings)
        input_schema = declared["input_schema"]
        if declared["description"]:
            description = declared["description"]
        elif not description:
            # AgentBreeder describes a tool by its module docstring's first line.
            description = (ast.get_docstring(tree) or "").strip().split("\n")[0]
    else:
        properties = {}
        required = []
        for arg, default in parameters(fn):
            name = arg.arg
            schema = dict(inferrer.schema(arg.annotation, "parameter `%s`" % name))
            if name in docs and docs[name]:
                schema["description"] = docs[name]
            if default is None:
                required.append(name)
            else:
                inferrer.apply_default(schema, default, "parameter `%s`" % name)
            properties[name] = schema
        if fn.args.vararg is not None:
            inferrer.warnings.append("`*%s` cannot be passed by name; it is left out of the schema" % fn.args.vararg.arg)
        input_schema = {"type": "object", "properties": properties, "required": required}
        defs = inferrer.defs_for(input_schema)
        if defs:
            input_schema["$defs"] = defs
    output_schema = declared["output_schema"] if declared is not None else None
    if output_schema is None and fn.returns is not None:
        ret = fn.returns
        if isinstance(ret, ast.Subscript) and inferrer.name_of(ret.value) in ("Iterator", "Generator", "AsyncIterator", "AsyncGenerator", "Iterable", "AsyncIterable"):
            items = ret.slice.elts if isinstance(ret.slice, ast.Tuple) else [ret.slice]
            ret = items[0]
        schema = dict(inferrer.schema(ret, "the return annotation"))
        if schema and schema != {"type": "null"}:
            output_schema = schema
            if returns_doc:
                output_schema["description"] = returns_doc
            defs = inferrer.defs_for(output_schema)
            if defs:
                output_schema["$defs"] = defs
    return {
        "name": fn.name,
        "description": description,
        "input_schema": input_schema,
        "output_schema": output_schema,
        "warnings": inferrer.warnings,
    }


def error(message, code):
    return {"error": {"message": message, "code": code}}


def main():
    if len(sys.argv) not in (2, 3):
        sys.stderr.write("usage: infer.py MODULE_PATH [FUNCTION]\n")
        sys.exit(2)
    out = infer(sys.argv[1], sys.argv[2] if len(sys.argv) == 3 else "")
    sys.stdout.write(json.dumps(out, ensure_ascii=False) + "\n")


main()
