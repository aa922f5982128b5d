// The "Try it" form, generated from a tool's input schema: strings (with their formats),
// numbers with bounds, booleans, enums, arrays with add and remove, nested objects,
// oneOf/anyOf as a choice, defaults filled in, required fields marked. `read()` checks
// every field before anything is sent; `showViolations` puts the server's at their fields.

import { h, fill } from './ui.js';
import { resolve, typeOf, nullable, checkScalar, violationPointer } from './schema.js';

let counter = 0;
const uid = (p) => `${p}-${++counter}`;

const INPUT_TYPES = {
  email: 'email', uri: 'url', url: 'url', date: 'date', time: 'time', 'date-time': 'text',
};

function labelText(name, schema, required) {
  return h('span', {},
    schema.title || name,
    required ? h('span', { class: 'req', 'aria-hidden': 'true' }, ' *') : null,
    required ? h('span', { class: 'visually-hidden' }, ' (required)') : null,
  );
}

function pointerOf(path) {
  return path.map((p) => `/${String(p).replace(/~/g, '~0').replace(/\//g, '~1')}`).join('');
}

/** A node of the form: `el`, `read(errors)` (the value or `undefined`), `pointer`, `fields`. */
function build(root, rawSchema, path, name, required, registry) {
  const schema = resolve(root, rawSchema);
  const pointer = pointerOf(path);
  const variants = schema.oneOf || schema.anyOf;
  if (Array.isArray(variants) && variants.length) return choice(root, schema, variants, path, name, required, registry);
  const type = typeOf(schema);
  if (type === 'object') return object(root, schema, path, name, required, registry);
  if (type === 'array') return array(root, schema, path, name, required, registry);
  return scalar(schema, type, pointer, name, required, registry);
}

function message(id) {
  return h('span', { class: 'field-error', id, role: 'alert', hidden: true });
}

function register(registry, pointer, control, msg) {
  registry.set(pointer, {
    control,
    show(text) {
      msg.hidden = !text;
      msg.textContent = text || '';
      if (text) control.setAttribute('aria-invalid', 'true');
      else control.removeAttribute('aria-invalid');
    },
  });
}

function scalar(schema, type, pointer, name, required, registry) {
  const id = uid('arg');
  const msgId = `${id}-msg`;
  const msg = message(msgId);
  const describedBy = schema.description ? `${id}-desc ${msgId}` : msgId;
  let control;
  const isEnum = Array.isArray(schema.enum);
  if (isEnum) {
    control = h('select', { id, name: pointer, 'aria-describedby': describedBy, 'aria-required': required ? 'true' : null },
      h('option', { value: '' }, required ? '— choose —' : '— none —'),
      schema.enum.map((v, i) => h('option', { value: String(i) }, typeof v === 'string' ? v : JSON.stringify(v))));
    if (schema.default !== undefined) {
      const i = schema.enum.findIndex((v) => JSON.stringify(v) === JSON.stringify(schema.default));
      if (i >= 0) control.value = String(i);
    }
  } else if (type === 'boolean') {
    control = h('input', { id, type: 'checkbox', name: pointer, 'aria-describedby': describedBy });
    control.checked = schema.default === true;
  } else if (type === 'number' || type === 'integer') {
    control = h('input', {
      id, type: 'number', name: pointer, inputmode: type === 'integer' ? 'numeric' : 'decimal',
      min: schema.minimum, max: schema.maximum, step: type === 'integer' ? '1' : 'any',
      'aria-describedby': describedBy, 'aria-required': required ? 'true' : null,
    });
    if (schema.default !== undefined) control.value = String(schema.default);
  } else if (type === 'string') {
    const long = (schema.maxLength || 0) > 200 || schema.format === 'textarea';
    control = long
      ? h('textarea', { id, name: pointer, rows: '4', 'aria-describedby': describedBy, 'aria-required': required ? 'true' : null })
      : h('input', {
        id, type: INPUT_TYPES[schema.format] || 'text', name: pointer,
        minlength: schema.minLength, maxlength: schema.maxLength,
        placeholder: schema.format === 'date-time' ? '2026-01-31T12:00:00Z' : (schema.examples && schema.examples[0]) || null,
        'aria-describedby': describedBy, 'aria-required': required ? 'true' : null,
      });
    if (schema.default !== undefined) control.value = String(schema.default);
  } else {
    control = h('textarea', { id, name: pointer, rows: '3', class: 'mono', 'aria-describedby': describedBy, 'aria-required': required ? 'true' : null });
    if (schema.default !== undefined) control.value = JSON.stringify(schema.default);
  }
  register(registry, pointer, control, msg);
  const el = h('div', { class: `field field-${type}` },
    type === 'boolean'
      ? h('label', { for: id, class: 'check' }, control, ' ', labelText(name, schema, required))
      : h('label', { for: id }, labelText(name, schema, required)),
    type === 'boolean' ? null : control,
    schema.description ? h('small', { class: 'hint', id: `${id}-desc` }, schema.description) : null,
    msg);
  const read = (errors) => {
    let value;
    if (isEnum) {
      value = control.value === '' ? undefined : schema.enum[Number(control.value)];
    } else if (type === 'boolean') {
      value = control.checked;
    } else if (type === 'number' || type === 'integer') {
      if (control.value.trim() === '') {
        value = control.validity && control.validity.badInput ? NaN : undefined;
      } else value = Number(control.value);
      if (type === 'integer' && value !== undefined && !Number.isInteger(value)) {
        errors.push({ pointer, message: 'must be a whole number' });
        return value;
      }
    } else if (type === 'string') {
      value = control.value === '' ? undefined : control.value;
    } else if (control.value.trim() !== '') {
      try {
        value = JSON.parse(control.value);
      } catch {
        errors.push({ pointer, message: 'not valid JSON' });
        return undefined;
      }
    }
    if (value === undefined) {
      if (required) errors.push({ pointer, message: 'required: fill this in' });
      return undefined;
    }
    for (const p of checkScalar(schema, value)) errors.push({ pointer, message: p });
    return value;
  };
  return { el, read, pointer };
}

function object(root, schema, path, name, required, registry) {
  const pointer = pointerOf(path);
  const msg = message(uid('obj-msg'));
  const props = schema.properties || {};
  const req = new Set(schema.required || []);
  const children = Object.entries(props).map(([k, s]) => [k, build(root, s, [...path, k], k, req.has(k), registry)]);
  const legendId = uid('legend');
  const body = children.map(([, c]) => c.el);
  const el = path.length === 0
    ? h('div', { class: 'object root' }, body, msg)
    : h('fieldset', { class: 'object', 'aria-labelledby': legendId },
      h('legend', { id: legendId }, labelText(name, schema, required)),
      schema.description ? h('small', { class: 'hint' }, schema.description) : null,
      body, msg);
  const focusTarget = el.querySelector('input, select, textarea, button') || el;
  register(registry, pointer, focusTarget, msg);
  const read = (errors) => {
    const out = {};
    for (const [k, c] of children) {
      const v = c.read(errors);
      if (v !== undefined) out[k] = v;
    }
    if (Object.keys(out).length === 0 && !required && path.length > 0) return undefined;
    return out;
  };
  return { el, read, pointer };
}

function array(root, schema, path, name, required, registry) {
  const pointer = pointerOf(path);
  const itemSchema = resolve(root, schema.items || {});
  const items = [];
  const list = h('ol', { class: 'items' });
  const msg = message(uid('arr-msg'));
  const legendId = uid('legend');
  const label = schema.title || name;
  const add = h('button', { type: 'button', class: 'small' }, `Add ${itemSchema.title || 'item'}`);
  const renumber = () => {
    items.forEach((it, i) => {
      it.remove.setAttribute('aria-label', `Remove ${label} item ${i + 1}`);
    });
  };
  const addItem = (value) => {
    const index = items.length;
    const sub = new Map();
    const node = build(root, itemSchema, [...path, index], `${label} ${index + 1}`, true, sub);
    const remove = h('button', { type: 'button', class: 'small secondary' }, 'Remove');
    const li = h('li', {}, node.el, remove);
    const item = { node, li, remove, sub };
    remove.addEventListener('click', () => {
      const at = items.indexOf(item);
      items.splice(at, 1);
      li.remove();
      renumber();
      add.focus();
    });
    items.push(item);
    list.appendChild(li);
    if (value !== undefined) prefill(node.el, value);
    renumber();
    return item;
  };
  add.addEventListener('click', () => {
    const it = addItem();
    const first = it.li.querySelector('input, select, textarea');
    if (first) first.focus();
  });
  const start = Array.isArray(schema.default) ? schema.default.length : (schema.minItems || 0);
  for (let i = 0; i < start; i += 1) addItem(Array.isArray(schema.default) ? schema.default[i] : undefined);
  const el = h('fieldset', { class: 'array', 'aria-labelledby': legendId },
    h('legend', { id: legendId }, labelText(name, schema, required)),
    schema.description ? h('small', { class: 'hint' }, schema.description) : null,
    list, add, msg);
  register(registry, pointer, add, msg);
  const read = (errors) => {
    // Item pointers follow the items' current places, so errors land where they show.
    const out = items.map((it, i) => {
      const e = [];
      const v = it.node.read(e);
      const from = it.node.pointer;
      const to = `${pointer}/${i}`;
      for (const x of e) errors.push({ ...x, pointer: to + x.pointer.slice(from.length), item: it, inner: x.pointer });
      return v;
    });
    if (out.length === 0 && !required) return undefined;
    if (schema.minItems !== undefined && out.length < schema.minItems) errors.push({ pointer, message: `at least ${schema.minItems} items` });
    if (schema.maxItems !== undefined && out.length > schema.maxItems) errors.push({ pointer, message: `at most ${schema.maxItems} items` });
    return out;
  };
  const node = { el, read, pointer, items };
  registry.set(`${pointer}#array`, node);
  return node;
}

function choice(root, schema, variants, path, name, required, registry) {
  const id = uid('choice');
  const resolved = variants.map((v) => resolve(root, v));
  const labels = resolved.map((v, i) => v.title || (v.const !== undefined ? JSON.stringify(v.const) : null) || typeOf(v) || `option ${i + 1}`);
  const select = h('select', { id }, labels.map((l, i) => h('option', { value: String(i) }, l)));
  const holder = h('div', { class: 'variant' });
  let current = null;
  let sub = new Map();
  const show = () => {
    sub = new Map();
    const v = { ...resolved[Number(select.value)] };
    if (schema.description && !v.description) v.description = schema.description;
    current = build(root, v, path, name, required, sub);
    fill(holder, current.el);
  };
  select.addEventListener('change', show);
  show();
  const legendId = uid('legend');
  const el = h('fieldset', { class: 'choice', 'aria-labelledby': legendId },
    h('legend', { id: legendId }, labelText(name, schema, required)),
    h('label', { for: id }, `Which kind of ${schema.title || name}`), select, holder);
  const pointer = pointerOf(path);
  registry.set(`${pointer}#choice`, { lookup: (p) => sub.get(p), sub: () => sub });
  const read = (errors) => current.read(errors);
  return { el, read, pointer };
}

/** Fill a generated node's controls from a value (array defaults). */
function prefill(el, value) {
  const first = el.querySelector('input, select, textarea');
  if (!first || value === undefined || typeof value === 'object') return;
  if (first.type === 'checkbox') first.checked = !!value;
  else first.value = String(value);
}

/**
 * The form of `schema`: `{el, read()}`. `read()` answers `{value, errors}`, each error
 * shown at its field; `showViolations(violations)` shows the server's.
 */
export function schemaForm(schema) {
  const registry = new Map();
  const root = schema || { type: 'object' };
  const node = build(root, { type: 'object', ...root }, [], 'args', true, registry);
  // A field by JSON pointer, at any depth: a map holds its own fields, its choices'
  // current variants and its arrays' items, each item a map of its own (registered
  // under the pointer it was created at; the pointer given names its current place).
  const findIn = (map, pointer) => {
    const own = map.get(pointer);
    if (own && own.show) return own;
    for (const [k, v] of map) {
      if (k.endsWith('#choice')) {
        const hit = findIn(v.sub(), pointer);
        if (hit) return hit;
      } else if (k.endsWith('#array')) {
        const base = k.slice(0, -'#array'.length);
        const m = pointer.startsWith(`${base}/`) ? /^\/(\d+)(.*)$/.exec(pointer.slice(base.length)) : null;
        const it = m && v.items[Number(m[1])];
        if (!it) continue;
        const hit = findIn(it.sub, it.node.pointer + m[2]);
        if (hit) return hit;
      }
    }
    return null;
  };
  const find = (pointer) => findIn(registry, pointer);
  const all = () => {
    const out = [];
    const walk = (map) => {
      for (const [k, v] of map) {
        if (k.endsWith('#array')) v.items.forEach((it) => walk(it.sub));
        else if (k.endsWith('#choice')) walk(v.sub());
        else if (v.show) out.push(v);
      }
    };
    walk(registry);
    return out;
  };
  const clear = () => all().forEach((f) => f.show(''));
  const show = (errors) => {
    clear();
    const unplaced = [];
    const byField = new Map();
    for (const e of errors) {
      const f = find(e.pointer);
      if (!f) {
        unplaced.push(e);
        continue;
      }
      byField.set(f, [...(byField.get(f) || []), e.message]);
    }
    for (const [f, msgs] of byField) f.show(msgs.join('; '));
    const first = [...byField.keys()][0];
    if (first) first.control.focus();
    return unplaced;
  };
  return {
    el: node.el,
    read() {
      const errors = [];
      const value = node.read(errors);
      show(errors);
      return { value: value === undefined ? {} : value, errors };
    },
    showViolations(violations) {
      return show(violations.map((v) => ({ pointer: violationPointer(v), message: v.expected })));
    },
    clear,
  };
}

export { nullable };
