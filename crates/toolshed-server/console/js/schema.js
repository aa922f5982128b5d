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

/** Whether the schema allows null. */
export function nullable(schema) {
  return Array.isArray(schema.type) && schema.type.includes('null');
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
