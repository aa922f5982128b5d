// JSON Schema helpers for the generated form: local `$ref`s, the type of a schema, and
// the checks the form makes before sending (the server checks again, fully).

/** Follow a local `$ref` (`#/$defs/x`, `#/definitions/x`), at most 32 deep. */
export function resolve(root, schema, depth = 0) {
  let s = schema || {};
  while (s && typeof s.$ref === 'string' && s.$ref.startsWith('#') && depth < 32) {
    let target = root;
    for (const raw of s.$ref.slice(1).split('/').filter(Boolean)) {
      const key = raw.replace(/~1/g, '/').replace(/~0/g, '~');
      target = target && typeof target === 'object' ? target[key] : undefined;
    }
    const { $ref, ...rest } = s;
    s = { ...(target || {}), ...rest };
    depth += 1;
  }
  return s || {};
}

/** The schema's main type: `string`, `number`, `integer`, `boolean`, `object`, `array`, or `any`. */
export function typeOf(schema) {
  let t = schema.type;
  if (Array.isArray(t)) t = t.find((x) => x !== 'null') || 'any';
  if (!t) {
    if (schema.properties) return 'object';
    if (schema.items) return 'array';
    if (Array.isArray(schema.enum)) return 'enum';
    return 'any';
  }
  return t;
}

/** Whether the schema allows null (a type union with `null`, or `nullable: true`). */
export function nullable(schema) {
  return (Array.isArray(schema.type) && schema.type.includes('null')) || schema.nullable === true;
}

/** Whether the schema has a default worth showing: `default: null` means none. */
export function hasDefault(schema) {
  return schema.default !== undefined && schema.default !== null;
}

const isNullSchema = (s) => s.type === 'null' || (Array.isArray(s.enum) && s.enum.length === 1 && s.enum[0] === null) || s.const === null;

/**
 * A schema as the form shows it: `$ref`s followed, and an `Option<T>` written as
 * `anyOf: [T, {type: null}]` (schemars' way) made T marked `nullable`, with the
 * outer title, description and default.
 */
export function normalize(root, raw) {
  const s = resolve(root, raw);
  const key = Array.isArray(s.anyOf) ? 'anyOf' : Array.isArray(s.oneOf) ? 'oneOf' : null;
  if (!key) return s;
  const variants = s[key].map((v) => resolve(root, v));
  const real = variants.filter((v) => !isNullSchema(v));
  if (real.length !== 1 || real.length === variants.length) return s;
  const { [key]: _variants, title, description, default: dflt, ...outer } = s;
  const { title: _innerTitle, ...inner } = real[0];
  const merged = { ...inner, ...outer, nullable: true };
  if (title !== undefined) merged.title = title;
  if (description !== undefined || inner.description !== undefined) merged.description = description !== undefined ? description : inner.description;
  if (dflt !== undefined) merged.default = dflt;
  else delete merged.default;
  return normalize(root, merged);
}

/**
 * The values of an enum, whichever way it is written: `enum`, a single `const`, or a
 * `oneOf`/`anyOf` of `const`s (how Rust enums come out of schemars, each with its doc
 * comment as `description`). `{options: [{value, description}], nullable}` or null.
 */
export function constChoices(root, schema) {
  if (Array.isArray(schema.enum)) {
    const options = schema.enum.filter((v) => v !== null).map((value) => ({ value }));
    return options.length ? { options, nullable: options.length !== schema.enum.length || nullable(schema) } : null;
  }
  if (schema.const !== undefined) return { options: [{ value: schema.const, description: schema.description }], nullable: false };
  const variants = schema.oneOf || schema.anyOf;
  if (!Array.isArray(variants) || !variants.length) return null;
  const options = [];
  let allowsNull = nullable(schema);
  for (const raw of variants) {
    const v = resolve(root, raw);
    if (isNullSchema(v)) {
      allowsNull = true;
    } else if (v.const !== undefined) {
      options.push({ value: v.const, description: v.description || v.title });
    } else if (Array.isArray(v.enum)) {
      for (const value of v.enum) {
        if (value === null) allowsNull = true;
        else options.push({ value, description: v.enum.length === 1 ? v.description || v.title : undefined });
      }
    } else {
      return null;
    }
  }
  return options.length ? { options, nullable: allowsNull } : null;
}

const FORMATS = {
  email: /^[^@\s]+@[^@\s]+\.[^@\s]+$/,
  uri: /^[a-zA-Z][a-zA-Z0-9+.-]*:\S+$/,
  url: /^[a-zA-Z][a-zA-Z0-9+.-]*:\S+$/,
  uuid: /^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/,
  date: /^\d{4}-\d{2}-\d{2}$/,
  'date-time': /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:\d{2})?$/,
  time: /^\d{2}:\d{2}(:\d{2})?$/,
  ipv4: /^(\d{1,3}\.){3}\d{1,3}$/,
};

/** The problems of a scalar value against its schema (empty when it is fine). */
export function checkScalar(schema, value) {
  const problems = [];
  if (Array.isArray(schema.enum) && !schema.enum.some((x) => JSON.stringify(x) === JSON.stringify(value))) {
    problems.push(`choose one of: ${schema.enum.map((x) => JSON.stringify(x)).join(', ')}`);
  }
  if (typeof value === 'string') {
    if (schema.minLength !== undefined && value.length < schema.minLength) {
      problems.push(`at least ${schema.minLength} characters`);
    }
    if (schema.maxLength !== undefined && value.length > schema.maxLength) {
      problems.push(`at most ${schema.maxLength} characters`);
    }
    if (schema.pattern) {
      try {
        if (!new RegExp(schema.pattern, 'u').test(value)) problems.push(`must match ${schema.pattern}`);
      } catch {
        // A pattern this browser cannot compile is left to the server.
      }
    }
    const f = FORMATS[schema.format];
    if (f && !f.test(value)) problems.push(`not a valid ${schema.format}`);
  }
  if (typeof value === 'number') {
    if (Number.isNaN(value)) problems.push('not a number');
    if (schema.minimum !== undefined && value < schema.minimum) problems.push(`at least ${schema.minimum}`);
    if (schema.maximum !== undefined && value > schema.maximum) problems.push(`at most ${schema.maximum}`);
    if (schema.exclusiveMinimum !== undefined && typeof schema.exclusiveMinimum === 'number' && value <= schema.exclusiveMinimum) {
      problems.push(`more than ${schema.exclusiveMinimum}`);
    }
    if (schema.exclusiveMaximum !== undefined && typeof schema.exclusiveMaximum === 'number' && value >= schema.exclusiveMaximum) {
      problems.push(`less than ${schema.exclusiveMaximum}`);
    }
    if (schema.multipleOf && Math.abs(value / schema.multipleOf - Math.round(value / schema.multipleOf)) > 1e-9) {
      problems.push(`a multiple of ${schema.multipleOf}`);
    }
  }
  return problems;
}

/** Where a server violation belongs: its pointer, or for `required` the missing property's. */
export function violationPointer(v) {
  if (v.keyword === 'required') {
    const m = /"([^"]+)"/.exec(v.expected || '');
    if (m) return `${v.pointer || ''}/${m[1].replace(/~/g, '~0').replace(/\//g, '~1')}`;
  }
  return v.pointer || '';
}
