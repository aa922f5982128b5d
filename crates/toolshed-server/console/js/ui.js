// Small DOM helpers. Text from the server is always set as text (never as HTML), so a
// tool description or an argument cannot inject markup, and shown through `display`
// (hidden.js, the CLI's sanitiser): escapes, controls, bidi overrides, zero-width and
// tag characters read as \u{…}, so what a reader sees is what a model reads.

import { display } from './hidden.js';

/**
 * Make an element: `h('a', {href: '/x', class: 'y', onclick: f}, 'text', child)`.
 * Attributes starting with `on` are listeners; `null`/`false` attributes are left out.
 */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') {
      el.addEventListener(k.slice(2), v);
    } else if (k === 'class') {
      el.className = v;
    } else if (v === true) {
      el.setAttribute(k, '');
    } else {
      el.setAttribute(k, String(v));
    }
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else if (c instanceof Node) el.appendChild(c);
    else el.appendChild(document.createTextNode(display(String(c))));
  }
}

/** Replace an element's children. */
export function fill(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

/** A time from RFC 3339 text or epoch milliseconds, in the reader's locale. */
export function when(t) {
  if (t === null || t === undefined || t === '') return '';
  const d = typeof t === 'number' ? new Date(t) : new Date(t);
  return Number.isNaN(d.getTime()) ? String(t) : d.toLocaleString();
}

/** Milliseconds as text. */
export function ms(v) {
  if (v === null || v === undefined) return '';
  return v < 1000 ? `${Math.round(v * 10) / 10} ms` : `${(v / 1000).toFixed(2)} s`;
}

/** Pretty JSON in a <pre>. */
export function json(value, label) {
  return h('pre', { class: 'json', tabindex: '0', 'aria-label': label || 'JSON' },
    JSON.stringify(value, null, 2));
}

/** A status pill. */
export function pill(status) {
  return h('span', { class: `pill pill-${String(status).replace(/[^a-z_]/g, '')}` }, String(status));
}

/** A table from column headers and rows of cells. */
export function table(caption, headers, rows) {
  return h('table', {},
    h('caption', {}, caption),
    h('thead', {}, h('tr', {}, headers.map((x) => h('th', { scope: 'col' }, x)))),
    h('tbody', {}, rows.map((r) => h('tr', {}, r.map((c) => h('td', {}, c))))),
  );
}

/** An error message block (role=alert), from an Error or text. */
export function errorBox(e) {
  const text = e && e.message ? e.message : String(e);
  const code = e && e.code ? `${e.code}: ` : '';
  return h('p', { class: 'error', role: 'alert' }, code + text);
}

/** Announce text to screen readers. */
export function announce(text) {
  const live = document.getElementById('live');
  if (live) live.textContent = text;
}

/** A link handled by the client-side router. */
export function link(href, ...children) {
  return h('a', { href }, ...children);
}

/** A labelled field: the label, the control and a place for its message. */
export function field(labelText, control, hint) {
  const id = control.id || `f-${Math.random().toString(36).slice(2)}`;
  control.id = id;
  return h('div', { class: 'field' },
    h('label', { for: id }, labelText),
    control,
    hint ? h('small', { class: 'hint' }, hint) : null,
  );
}

/**
 * A warning naming the characters a tool's definition hides from a reader (the API's
 * `hidden_characters`), or null when there are none.
 */
export function hiddenNote(list, id = 'hidden-characters') {
  if (!list || !list.length) return null;
  const label = { zero_width: 'zero-width', tag: 'tag', bidi: 'bidirectional', control: 'control', escape: 'terminal escape' };
  return h('div', { class: 'warning', role: 'note', id },
    h('strong', {}, 'Hidden characters: '),
    'this definition holds characters a reader does not see, which a model reads. They are shown as \\u{…} here.',
    h('ul', {}, list.map((x) => h('li', {}, `${x.field}: ${x.count} ${label[x.kind] || x.kind} character${x.count === 1 ? '' : 's'}`))));
}
