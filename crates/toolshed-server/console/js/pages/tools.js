// Tools: the list (filters, search, server-side pages) and a tool's page (schemas,
// endpoint, code hash, versions with a diff, usage graph, and Try it).

import { api, get, query, ApiFailure } from '../api.js';
import { h, fill, when, ms, json, pill, table, errorBox, link, field, announce, hiddenNote } from '../ui.js';
import { schemaForm } from '../form.js';
import { resolve, typeOf } from '../schema.js';

const PER_PAGE = 50;

/** The tools list. */
export async function toolsPage(main, ctx) {
  const params = new URLSearchParams(location.search);
  const state = {
    search: params.get('search') || '',
    tool_type: params.get('tool_type') || '',
    source: params.get('source') || '',
    tenant: params.get('tenant') || '',
    status: params.get('status') || '',
    page: Math.max(1, Number(params.get('page')) || 1),
  };
  const search = h('input', { type: 'search', id: 'tool-search', value: state.search, placeholder: 'name or description', autocomplete: 'off' });
  const select = (id, options, value) => {
    const s = h('select', { id }, options.map(([v, l]) => h('option', { value: v }, l)));
    s.value = value;
    return s;
  };
  const type = select('filter-type', [['', 'any type'], ['function', 'function'], ['mcp', 'mcp'], ['api', 'api']], state.tool_type);
  const source = h('input', { id: 'filter-source', value: state.source, placeholder: 'manual, cli, stdlib…', size: '10' });
  const tenant = h('input', { id: 'filter-tenant', value: state.tenant, placeholder: 'any tenant', size: '10' });
  const status = select('filter-status', [['', 'active'], ['deleted', 'deleted']], state.status);
  const results = h('div', { id: 'tool-results', 'aria-live': 'polite' });
  const form = h('form', { class: 'filters', role: 'search', 'aria-label': 'Find tools' },
    field('Search', search), field('Type', type), field('Source', source), field('Tenant', tenant), field('Status', status),
    h('button', { type: 'submit' }, 'Search'));
  fill(main, h('h1', {}, 'Tools'), form, results);
  const load = async () => {
    const q = {
      search: state.search, tool_type: state.tool_type, source: state.source,
      tenant: state.tenant, status: state.status, page: state.page, per_page: PER_PAGE,
    };
    history.replaceState(null, '', `/tools${query({ ...q, per_page: undefined, page: state.page > 1 ? state.page : undefined })}`);
    fill(results, h('p', { class: 'muted' }, 'Loading…'));
    try {
      const answer = await api('GET', `/api/v1/registry/tools${query(q)}`);
      const { total, page, per_page: perPage } = answer.meta;
      const pages = Math.max(1, Math.ceil(total / perPage));
      const rows = answer.data.map((t) => [
        [link(`/tools/${encodeURIComponent(t.id)}`, t.name),
          t.hidden_characters && t.hidden_characters.length
            ? h('span', { class: 'pill pill-error', title: 'Its definition holds characters a reader does not see' }, ' hidden characters') : null],
        t.description, t.tool_type, t.source, t.tenant, pill(t.status), String(t.revision),
      ]);
      const nav = h('nav', { class: 'pager', 'aria-label': 'Pages' },
        h('button', { type: 'button', disabled: page <= 1, onclick: () => { state.page = page - 1; load(); } }, 'Previous'),
        h('span', { id: 'page-info' }, `Page ${page} of ${pages} · ${total} tools`),
        h('button', { type: 'button', disabled: page >= pages, onclick: () => { state.page = page + 1; load(); } }, 'Next'));
      fill(results,
        rows.length ? table(`Tools, page ${page} of ${pages}`, ['Name', 'Description', 'Type', 'Source', 'Tenant', 'Status', 'Rev'], rows)
          : h('p', { class: 'muted' }, 'No tool matches.'),
        nav);
      results.dataset.ready = 'true';
      announce(`${total} tools`);
    } catch (e) {
      fill(results, errorBox(e));
    }
  };
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    Object.assign(state, {
      search: search.value.trim(), tool_type: type.value, source: source.value.trim(),
      tenant: tenant.value.trim(), status: status.value, page: 1,
    });
    load();
  });
  await load();
  search.focus();
}

/** A readable rendering of a JSON Schema: each property, its type, constraints and description. */
export function schemaView(root, schema, depth = 0) {
  const s = resolve(root, schema || {});
  const props = s.properties || {};
  const req = new Set(s.required || []);
  const describe = (p) => {
    const r = resolve(root, p);
    const bits = [];
    const variants = r.oneOf || r.anyOf;
    let t = Array.isArray(variants) ? `one of ${variants.map((v) => resolve(root, v).title || typeOf(resolve(root, v))).join(' | ')}` : typeOf(r);
    if (t === 'array') t = `array of ${typeOf(resolve(root, r.items || {}))}`;
    if (r.format) bits.push(`format ${r.format}`);
    if (Array.isArray(r.enum)) bits.push(`one of ${r.enum.map((x) => JSON.stringify(x)).join(', ')}`);
    for (const k of ['minimum', 'maximum', 'minLength', 'maxLength', 'minItems', 'maxItems', 'pattern']) {
      if (r[k] !== undefined) bits.push(`${k} ${r[k]}`);
    }
    if (r.default !== undefined) bits.push(`default ${JSON.stringify(r.default)}`);
    return { r, t, bits };
  };
  if (!Object.keys(props).length) {
    return h('p', { class: 'muted' }, `${typeOf(s)}${s.description ? `: ${s.description}` : ''}`);
  }
  return h('dl', { class: `schema depth-${depth}` }, Object.entries(props).map(([name, p]) => {
    const { r, t, bits } = describe(p);
    const nested = depth < 4 && (typeOf(r) === 'object' && r.properties)
      ? schemaView(root, r, depth + 1)
      : (depth < 4 && typeOf(r) === 'array' && resolve(root, r.items || {}).properties ? schemaView(root, resolve(root, r.items), depth + 1) : null);
    return [
      h('dt', {}, h('code', {}, name), ' ', h('span', { class: 'type' }, t), req.has(name) ? h('span', { class: 'req' }, ' required') : null),
      h('dd', {}, r.description || '', bits.length ? h('small', { class: 'hint' }, ` (${bits.join('; ')})`) : null, nested),
    ];
  }));
}

function schemaSection(title, root) {
  const raw = json(root, `${title}, raw JSON`);
  raw.hidden = true;
  const readable = schemaView(root, root);
  const toggle = h('button', { type: 'button', class: 'small secondary', 'aria-expanded': 'false' }, 'Show raw JSON');
  toggle.addEventListener('click', () => {
    const show = raw.hidden;
    raw.hidden = !show;
    readable.hidden = show;
    toggle.textContent = show ? 'Show readable' : 'Show raw JSON';
    toggle.setAttribute('aria-expanded', String(show));
  });
  return h('section', { 'aria-label': title }, h('h2', {}, title, ' ', toggle), readable, raw);
}

/** Line diff of two texts (longest common subsequence): rows of [sign, line]. */
export function diffLines(a, b) {
  const x = a.split('\n');
  const y = b.split('\n');
  const n = x.length;
  const m = y.length;
  const dp = Array.from({ length: n + 1 }, () => new Uint32Array(m + 1));
  for (let i = n - 1; i >= 0; i -= 1) {
    for (let j = m - 1; j >= 0; j -= 1) {
      dp[i][j] = x[i] === y[j] ? dp[i + 1][j + 1] + 1 : Math.max(dp[i + 1][j], dp[i][j + 1]);
    }
  }
  const out = [];
  let i = 0;
  let j = 0;
  while (i < n && j < m) {
    if (x[i] === y[j]) { out.push([' ', x[i]]); i += 1; j += 1; } else if (dp[i + 1][j] >= dp[i][j + 1]) { out.push(['-', x[i]]); i += 1; } else { out.push(['+', y[j]]); j += 1; }
  }
  while (i < n) { out.push(['-', x[i]]); i += 1; }
  while (j < m) { out.push(['+', y[j]]); j += 1; }
  return out;
}

function versionsSection(versions) {
  const pick = (id, value) => {
    const s = h('select', { id }, versions.map((v) => h('option', { value: String(v.revision) }, `revision ${v.revision} · ${when(v.updated_at)} · ${v.created_by}`)));
    s.value = String(value);
    return s;
  };
  const last = versions[versions.length - 1];
  const from = pick('diff-from', versions.length > 1 ? versions[versions.length - 2].revision : last.revision);
  const to = pick('diff-to', last.revision);
  const out = h('pre', { class: 'diff', id: 'diff', tabindex: '0', 'aria-label': 'Differences between the two revisions' });
  const render = () => {
    const a = versions.find((v) => String(v.revision) === from.value);
    const b = versions.find((v) => String(v.revision) === to.value);
    const text = (v) => JSON.stringify({ definition: v.definition, endpoint: v.endpoint, code: v.code || null }, null, 2);
    const rows = diffLines(text(a), text(b));
    const changed = rows.filter((r) => r[0] !== ' ').length;
    fill(out, changed === 0 ? 'No differences.' : rows.map(([sign, line]) => h('span', { class: sign === '+' ? 'add' : sign === '-' ? 'del' : 'same' }, `${sign} ${line}\n`)));
  };
  from.addEventListener('change', render);
  to.addEventListener('change', render);
  render();
  return h('section', { 'aria-label': 'Versions' }, h('h2', {}, 'Versions'),
    table('Revisions', ['Revision', 'Version', 'Written', 'By', 'Code hash'], versions.map((v) => [
      String(v.revision), v.version || '', when(v.updated_at), v.created_by, v.code ? h('code', {}, v.code.sha256.slice(0, 16)) : '—'])),
    h('div', { class: 'row' }, field('Compare revision', from), field('with revision', to)), out);
}

function usageSection(tool, usage) {
  // The usage graph: the tool in the middle, an edge to each agent that uses it.
  const size = Math.max(1, usage.length);
  const height = Math.max(80, size * 36 + 20);
  const svgNS = 'http://www.w3.org/2000/svg';
  const svg = document.createElementNS(svgNS, 'svg');
  svg.setAttribute('viewBox', `0 0 520 ${height}`);
  svg.setAttribute('role', 'img');
  svg.setAttribute('aria-label', `Usage graph: ${usage.length} agents use ${tool.name}`);
  svg.setAttribute('class', 'graph');
  const node = (x, y, text, cls) => {
    const g = document.createElementNS(svgNS, 'g');
    const r = document.createElementNS(svgNS, 'rect');
    r.setAttribute('x', String(x)); r.setAttribute('y', String(y - 14)); r.setAttribute('width', '180'); r.setAttribute('height', '28'); r.setAttribute('rx', '6');
    r.setAttribute('class', cls);
    const t = document.createElementNS(svgNS, 'text');
    t.setAttribute('x', String(x + 90)); t.setAttribute('y', String(y + 5)); t.setAttribute('text-anchor', 'middle');
    t.textContent = text.length > 24 ? `${text.slice(0, 23)}…` : text;
    g.append(r, t);
    return g;
  };
  const cy = height / 2;
  usage.forEach((u, i) => {
    const y = 24 + i * 36;
    const line = document.createElementNS(svgNS, 'line');
    line.setAttribute('x1', '190'); line.setAttribute('y1', String(cy)); line.setAttribute('x2', '330'); line.setAttribute('y2', String(y));
    line.setAttribute('class', 'edge');
    svg.appendChild(line);
    svg.appendChild(node(330, y, u.agent_name, 'agent'));
  });
  svg.appendChild(node(10, cy, tool.name, 'tool'));
  return h('section', { 'aria-label': 'Usage' }, h('h2', {}, 'Usage'),
    usage.length ? [svg, h('ul', {}, usage.map((u) => h('li', {}, link(`/agents/${encodeURIComponent(u.agent_id)}`, u.agent_name), ' ', pill(u.agent_status))))]
      : h('p', { class: 'muted' }, 'No registered agent uses this tool.'));
}

/** The result panel of an execute answer. */
export function resultPanel(r) {
  const rows = [
    ['Status', pill(r.status)],
    ['Exit code', r.exit_code === null || r.exit_code === undefined ? '—' : String(r.exit_code)],
    ['Duration', ms(r.duration_ms)],
    ['Run', r.run_id ? link(`/runs/${encodeURIComponent(r.run_id)}`, r.run_id) : '—'],
  ];
  return h('section', { class: 'result', id: 'result', 'aria-label': 'Result', tabindex: '-1' },
    h('h3', {}, r.error ? 'Error' : r.status === 'parked' ? 'Waiting for approval' : 'Output'),
    h('dl', { class: 'facts' }, rows.map(([k, v]) => [h('dt', {}, k), h('dd', {}, v)])),
    r.error ? h('p', { class: 'error', role: 'alert' }, `${r.error.code}: ${r.error.message}`) : null,
    r.status === 'parked' ? h('p', {}, 'The call waits for a decision: ', link('/approvals', 'open the approvals queue'), '.') : null,
    h('h4', {}, 'Output'), json(r.output, 'Output'),
    h('h4', {}, 'stdout'), h('pre', { class: 'out', id: 'stdout' }, r.stdout || ''),
    h('h4', {}, 'stderr'), h('pre', { class: 'out', id: 'stderr' }, r.stderr || ''));
}

/**
 * The args as JSON instead of the form: a checkbox switches between the two (the text
 * starts from what the form holds), and the text is checked to be a JSON object before
 * anything is sent.
 */
function rawArgs(form) {
  const toggle = h('input', { type: 'checkbox', id: 'try-raw' });
  const text = h('textarea', { id: 'try-raw-args', class: 'mono', rows: '8', spellcheck: 'false', 'aria-describedby': 'try-raw-msg' });
  const msg = h('span', { class: 'field-error', id: 'try-raw-msg', role: 'alert', hidden: true });
  const box = h('div', { class: 'field', hidden: true }, h('label', { for: 'try-raw-args' }, 'Args (JSON object)'), text, msg);
  toggle.addEventListener('change', () => {
    if (toggle.checked) text.value = JSON.stringify(form.peek(), null, 2);
    box.hidden = !toggle.checked;
    form.el.hidden = toggle.checked;
    msg.hidden = true;
    (toggle.checked ? text : toggle).focus();
  });
  const show = (problem) => {
    msg.hidden = !problem;
    msg.textContent = problem || '';
    if (problem) text.setAttribute('aria-invalid', 'true');
    else text.removeAttribute('aria-invalid');
  };
  return {
    switch: h('label', { for: 'try-raw', class: 'check' }, toggle, ' Edit the args as JSON'),
    box,
    active: () => toggle.checked,
    /** `{value}` or `{problem}`, the problem shown at the text. */
    read() {
      let value;
      try {
        value = JSON.parse(text.value);
      } catch (e) {
        const problem = `not valid JSON: ${e.message}`;
        show(problem);
        return { problem };
      }
      if (value === null || typeof value !== 'object' || Array.isArray(value)) {
        const problem = 'the args must be a JSON object, e.g. {"name": "value"}';
        show(problem);
        return { problem };
      }
      show('');
      return { value };
    },
  };
}

function tryIt(tool, ctx) {
  const schema = tool.schema_definition || { type: 'object' };
  const form = schemaForm(schema);
  const raw = rawArgs(form);
  const status = h('div', { id: 'try-status' });
  const out = h('div', { id: 'try-result' });
  const run = h('button', { type: 'submit', id: 'run' }, 'Run');
  const el = h('form', { class: 'try', novalidate: true, 'aria-label': 'Try it' }, raw.switch, form.el, raw.box, run, status);
  if (!ctx.can('deployer')) {
    run.disabled = true;
    status.append(h('p', { class: 'muted' }, 'Running a tool needs the deployer role.'));
  }
  el.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    fill(status);
    let value;
    if (raw.active()) {
      const typed = raw.read();
      if (typed.problem) {
        fill(status, h('p', { class: 'error', role: 'alert', id: 'form-errors' }, `Args (JSON): ${typed.problem}; nothing was sent.`));
        return;
      }
      value = typed.value;
    } else {
      const read = form.read();
      if (read.errors.length) {
        const n = read.errors.length;
        fill(status, h('p', { class: 'error', role: 'alert', id: 'form-errors' }, `${n} field${n > 1 ? 's need' : ' needs'} fixing; nothing was sent.`));
        return;
      }
      value = read.value;
    }
    run.disabled = true;
    fill(status, h('p', { class: 'muted' }, 'Running…'));
    try {
      const answer = await api('POST', `/api/v1/registry/tools/${encodeURIComponent(tool.id)}/execute`, { args: value });
      fill(status);
      fill(out, resultPanel(answer.data));
      out.firstChild.focus();
      // A call parked for approval is one more in the navigation's count.
      if (answer.data.status === 'parked') ctx.refreshApprovals();
    } catch (e) {
      if (e instanceof ApiFailure && e.details && e.details.violations) {
        // Typed as JSON, the form's fields are hidden: every violation is listed.
        const unplaced = raw.active()
          ? e.details.violations.map((v) => ({ pointer: v.pointer, message: v.expected }))
          : form.showViolations(e.details.violations);
        fill(status, h('p', { class: 'error', role: 'alert', id: 'server-errors' }, `The server refused the args (${e.code}).`),
          unplaced.length ? h('ul', {}, unplaced.map((u) => h('li', {}, `${u.pointer || '(args)'}: ${u.message}`))) : null);
      } else {
        fill(status, errorBox(e));
      }
    } finally {
      run.disabled = !ctx.can('deployer');
    }
  });
  return h('section', { 'aria-label': 'Try it' }, h('h2', {}, 'Try it'), el, out);
}

/** A tool's page. */
export async function toolPage(main, ctx, id) {
  fill(main, h('p', { class: 'muted' }, 'Loading…'));
  const tool = await get(`/api/v1/registry/tools/${encodeURIComponent(id)}`);
  const [versions, usage] = await Promise.all([
    get(`/api/v1/registry/tools/${encodeURIComponent(tool.id)}/versions`).catch(() => [tool]),
    get(`/api/v1/registry/tools/${encodeURIComponent(tool.id)}/usage`).catch(() => []),
  ]);
  const facts = [
    ['Endpoint', h('code', {}, tool.endpoint || '—')],
    ['Type', tool.tool_type], ['Source', tool.source], ['Tenant', tool.tenant],
    ['Status', pill(tool.status)], ['Revision', String(tool.revision)], ['Version', tool.version || '—'],
    ['Code hash', tool.code ? h('code', { id: 'code-hash' }, tool.code.sha256) : '— (no uploaded code)'],
    ['Registered by', tool.created_by], ['Updated', when(tool.updated_at)],
  ];
  fill(main,
    h('p', {}, link('/tools', '← Tools')),
    h('h1', {}, tool.name),
    hiddenNote(tool.hidden_characters),
    h('p', { class: 'lead', id: 'tool-description' }, tool.description),
    h('dl', { class: 'facts' }, facts.map(([k, v]) => [h('dt', {}, k), h('dd', {}, v)])),
    h('p', {}, h('a', { href: `/sandbox?tool=${encodeURIComponent(tool.id)}`, class: 'button' }, 'Test in Sandbox')),
    tryIt(tool, ctx),
    schemaSection('Input schema', tool.schema_definition || {}),
    tool.output_schema ? schemaSection('Output schema', tool.output_schema) : h('section', {}, h('h2', {}, 'Output schema'), h('p', { class: 'muted' }, 'None declared.')),
    versionsSection(versions),
    usageSection(tool, usage));
}
