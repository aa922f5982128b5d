// The "Try it" form, generated from a tool's input schema: strings (with their formats),
// numbers with bounds, booleans (optional ones tri-state: not set, true, false), enums
// (`enum`, or a `oneOf` of `const`s as Rust enums are written), arrays with add and
// remove, nested objects, free-form maps as JSON, oneOf/anyOf as a choice (with "none"
// when optional), defaults filled in (a `null` default is no default), required fields
// marked. Whatever is left unset is not sent: the tool applies its own defaults.
// `read()` checks every field before anything is sent; `showViolations` puts the
// server's at their fields.

import { h, fill } from './ui.js';
import { resolve, typeOf, nullable, checkScalar, violationPointer, constChoices, normalize, hasDefault } from './schema.js';

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
  const schema = normalize(root, rawSchema);
  const pointer = pointerOf(path);
  const consts = constChoices(root, schema);
  if (consts) return enumField(schema, consts, pointer, name, required, registry);
  const variants = schema.oneOf || schema.anyOf;
  if (Array.isArray(variants) && variants.length) return choice(root, schema, variants, path, name, required, registry);
  const type = typeOf(schema);
  if (type === 'object') {
    // An object that names no properties is a free-form map: edited as JSON.
    return schema.properties ? object(root, schema, path, name, required, registry) : mapField(schema, pointer, name, required && path.length > 0, registry);
  }
  if (type === 'array') return array(root, schema, path, name, required, registry);
  if (type === 'null') return nullField(schema, pointer, name);
  return scalar(schema, type, pointer, name, required, registry);
}

/** The label of an enum's value: the value, and its description when it has one. */
function optionText(o) {
  const text = typeof o.value === 'string' ? o.value : JSON.stringify(o.value);
  return o.description ? `${text} — ${o.description}` : text;
}

/** A select over a list of values (`enum`, or a `oneOf`/`anyOf` of `const`s). */
function enumField(schema, consts, pointer, name, required, registry) {
  const id = uid('arg');
  const msgId = `${id}-msg`;
  const msg = message(msgId);
  const describedBy = schema.description ? `${id}-desc ${msgId}` : msgId;
  const control = h('select', { id, name: pointer, 'aria-describedby': describedBy, 'aria-required': required ? 'true' : null },
    h('option', { value: '' }, required ? '— choose —' : '— none (not sent) —'),
    consts.options.map((o, i) => h('option', { value: String(i) }, optionText(o))));
  if (hasDefault(schema)) {
    const i = consts.options.findIndex((o) => JSON.stringify(o.value) === JSON.stringify(schema.default));
    if (i >= 0) control.value = String(i);
  }
  register(registry, pointer, control, msg);
  const el = h('div', { class: 'field field-enum' },
    h('label', { for: id }, labelText(name, schema, required)), control,
    schema.description ? h('small', { class: 'hint', id: `${id}-desc` }, schema.description) : null,
    msg);
  const read = (errors) => {
    if (control.value !== '') return consts.options[Number(control.value)].value;
    if (required && consts.nullable) return null;
    if (required) errors.push({ pointer, message: 'required: choose one' });
    return undefined;
  };
  return { el, read, pointer };
}

/** A free-form map (`type: object` naming no properties): a JSON object typed in. */
function mapField(schema, pointer, name, required, registry) {
  const id = uid('arg');
  const msgId = `${id}-msg`;
  const msg = message(msgId);
  const control = h('textarea', {
    id, name: pointer, rows: '3', class: 'mono', placeholder: '{"key": "value"}',
    'aria-describedby': schema.description ? `${id}-desc ${msgId}` : msgId, 'aria-required': required ? 'true' : null,
  });
  if (hasDefault(schema)) control.value = JSON.stringify(schema.default, null, 2);
  register(registry, pointer, control, msg);
  const el = h('div', { class: 'field field-map' },
    h('label', { for: id }, labelText(name, schema, required), ' (JSON object)'), control,
    schema.description ? h('small', { class: 'hint', id: `${id}-desc` }, schema.description) : null,
    msg);
  const read = (errors) => {
    if (control.value.trim() === '') {
      if (required) errors.push({ pointer, message: 'required: write a JSON object, e.g. {"key": "value"}' });
      return undefined;
    }
    let value;
    try {
      value = JSON.parse(control.value);
    } catch (e) {
      errors.push({ pointer, message: `not valid JSON (${e.message})` });
      return undefined;
    }
    if (value === null || typeof value !== 'object' || Array.isArray(value)) {
      errors.push({ pointer, message: 'must be a JSON object, e.g. {"key": "value"}' });
      return undefined;
    }
    return value;
  };
  return { el, read, pointer };
}

/** `type: null` (a choice's "null" variant): nothing to fill in, the value is null. */
function nullField(schema, pointer, name) {
  const el = h('p', { class: 'muted field-null' }, `${schema.title || name}: null`);
  return { el, read: () => null, pointer };
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
  const preset = hasDefault(schema);
  // A required boolean is a checkbox (both values are answers); an optional one is
  // tri-state, so leaving it alone sends nothing rather than `false`.
  const check = type === 'boolean' && required;
  if (check) {
    control = h('input', { id, type: 'checkbox', name: pointer, 'aria-describedby': describedBy });
    control.checked = schema.default === true;
  } else if (type === 'boolean') {
    control = h('select', { id, name: pointer, 'aria-describedby': describedBy },
      h('option', { value: '' }, preset ? `\u2014 not set (the tool's default: ${schema.default}) \u2014` : '\u2014 not set \u2014'),
      h('option', { value: 'true' }, 'true'), h('option', { value: 'false' }, 'false'));
  } else if (type === 'number' || type === 'integer') {
    control = h('input', {
      id, type: 'number', name: pointer, inputmode: type === 'integer' ? 'numeric' : 'decimal',
      min: schema.minimum, max: schema.maximum, step: type === 'integer' ? '1' : 'any',
      'aria-describedby': describedBy, 'aria-required': required ? 'true' : null,
    });
    if (preset) control.value = String(schema.default);
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
    if (preset) control.value = String(schema.default);
  } else {
    control = h('textarea', { id, name: pointer, rows: '3', class: 'mono', 'aria-describedby': describedBy, 'aria-required': required ? 'true' : null });
    if (preset) control.value = JSON.stringify(schema.default);
  }
  register(registry, pointer, control, msg);
  const el = h('div', { class: `field field-${type}` },
    check
      ? h('label', { for: id, class: 'check' }, control, ' ', labelText(name, schema, required))
      : h('label', { for: id }, labelText(name, schema, required)),
    check ? null : control,
    schema.description ? h('small', { class: 'hint', id: `${id}-desc` }, schema.description) : null,
    msg);
  const read = (errors) => {
    let value;
    if (check) {
      value = control.checked;
    } else if (type === 'boolean') {
      value = control.value === '' ? undefined : control.value === 'true';
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
      // Left empty: a required field that allows null is null, an optional one is not sent.
      if (required && nullable(schema)) return null;
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
  // The object's own default (an array item's, say) gives its properties their values.
  const given = hasDefault(schema) && typeof schema.default === 'object' && !Array.isArray(schema.default) ? schema.default : {};
  const children = Object.entries(props).map(([k, s]) => {
    const child = Object.prototype.hasOwnProperty.call(given, k) ? { ...s, default: given[k] } : s;
    return [k, build(root, child, [...path, k], k, req.has(k), registry)];
  });
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
  // An optional object nobody touched is not sent, whatever defaults its fields show,
  // and its required fields then ask for nothing.
  const optional = !required && path.length > 0;
  let touched = false;
  const touch = () => { touched = true; };
  el.addEventListener('input', touch);
  el.addEventListener('change', touch);
  el.addEventListener('click', (ev) => { if (ev.target.closest && ev.target.closest('button')) touch(); });
  const read = (errors) => {
    const out = {};
    const own = [];
    for (const [k, c] of children) {
      const v = c.read(own);
      if (v !== undefined) out[k] = v;
    }
    if (optional && (!touched || Object.keys(out).length === 0)) return undefined;
    errors.push(...own);
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
    // A default item's values fill the item's fields (objects and arrays included).
    const schemaOfItem = value === undefined || value === null ? itemSchema : { ...itemSchema, default: value };
    const node = build(root, schemaOfItem, [...path, index], `${label} ${index + 1}`, true, sub);
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
    renumber();
    return item;
  };
  add.addEventListener('click', () => {
    const it = addItem();
    const first = it.li.querySelector('input, select, textarea');
    if (first) first.focus();
  });
  const defaults = Array.isArray(schema.default) ? schema.default : null;
  const start = defaults ? Math.max(defaults.length, schema.minItems || 0) : (schema.minItems || 0);
  for (let i = 0; i < start; i += 1) addItem(defaults ? defaults[i] : undefined);
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
  // An optional choice starts at "none": nothing is sent unless a kind is chosen.
  const select = h('select', { id },
    required ? null : h('option', { value: '' }, '\u2014 none (not sent) \u2014'),
    labels.map((l, i) => h('option', { value: String(i) }, l)));
  const fits = (v, value) => {
    const t = typeOf(v);
    const kind = value === null ? 'null' : Array.isArray(value) ? 'array' : typeof value;
    return t === kind || (kind === 'number' && t === 'integer' && Number.isInteger(value));
  };
  if (hasDefault(schema)) {
    const i = resolved.findIndex((v) => fits(v, schema.default));
    if (i >= 0) select.value = String(i);
  }
  const holder = h('div', { class: 'variant' });
  let current = null;
  let sub = new Map();
  const show = () => {
    sub = new Map();
    if (select.value === '') {
      current = null;
      fill(holder);
      return;
    }
    const v = { ...resolved[Number(select.value)] };
    if (schema.description && !v.description) v.description = schema.description;
    if (hasDefault(schema) && fits(v, schema.default) && !hasDefault(v)) v.default = schema.default;
    // A kind chosen is meant to be sent: its own fields are asked for.
    current = build(root, v, path, name, true, sub);
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
  const read = (errors) => (current ? current.read(errors) : undefined);
  return { el, read, pointer };
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
    /** The args as the form has them now, without showing any message. */
    peek() {
      const value = node.read([]);
      return value === undefined ? {} : value;
    },
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
