// MCP servers: the tenant's entries (literal env/headers values masked and named) and
// an entry's page, where the changes its server made to its tools wait for an admin:
// the accepted definition beside the new one, what the new one hides, and Accept.

import { api, get } from '../api.js';
import { h, fill, when, pill, table, errorBox, link, announce, hiddenNote } from '../ui.js';
import { diffLines } from './tools.js';

/** The entries of the caller's tenant. */
export async function mcpServersPage(main) {
  fill(main, h('h1', {}, 'MCP servers'), h('p', { class: 'muted' }, 'Loading…'));
  const answer = await api('GET', '/api/v1/mcp-servers?per_page=500');
  const rows = answer.data.map((s) => [
    link(`/mcp-servers/${encodeURIComponent(s.id)}`, s.name),
    s.transport, pill(s.status), s.enabled ? 'yes' : 'no', String(s.tool_count),
    s.pending_changes ? h('span', { class: 'pill pill-parked' }, `${s.pending_changes} waiting`) : '—',
    s.literal_values.length ? h('span', { class: 'pill pill-error' }, `${s.literal_values.length} literal`) : '—',
    h('code', {}, s.endpoint),
  ]);
  fill(main, h('h1', {}, 'MCP servers'),
    rows.length
      ? table(`MCP servers, ${answer.meta.total}`, ['Name', 'Transport', 'Status', 'Enabled', 'Tools', 'Tool changes', 'Secrets', 'Endpoint'], rows)
      : h('p', { class: 'muted' }, 'No MCP server is registered in your tenant.'));
}

function change(entry, p, ctx, reload) {
  const text = (description, schema) => `${description}\n\n${JSON.stringify(schema, null, 2)}`;
  const rows = diffLines(text(p.description, p.schema_definition), text(p.pending_description, p.pending_schema_definition));
  const status = h('div', { 'aria-live': 'polite', id: `accept-status-${p.name}` });
  const button = h('button', { type: 'button', id: `accept-${p.name}` }, `Accept the change to ${p.name}`);
  if (!ctx.can('admin')) {
    button.disabled = true;
    status.append(h('p', { class: 'muted' }, 'Accepting a change needs the admin role.'));
  }
  button.addEventListener('click', async () => {
    button.disabled = true;
    try {
      const r = await api('POST', `/api/v1/mcp-servers/${encodeURIComponent(entry.id)}/accept`, { tools: [p.name] });
      announce(`Accepted: ${r.data.accepted.join(', ')}`);
      await reload(`Accepted the change to ${p.name}: it is now in force for every client.`);
    } catch (e) {
      button.disabled = false;
      fill(status, errorBox(e));
    }
  });
  return h('section', { class: 'change', 'aria-label': `Change to ${p.name}`, id: `change-${p.name}` },
    h('h3', {}, link(`/tools/${encodeURIComponent(p.tool_id)}`, p.registry_name), ` · revision ${p.revision} in force · changed ${when(p.since)}`),
    hiddenNote(p.hidden_characters, `hidden-${p.name}`),
    h('pre', { class: 'diff', tabindex: '0', 'aria-label': `What changes in ${p.name}` },
      rows.map(([sign, line]) => h('span', { class: sign === '+' ? 'add' : sign === '-' ? 'del' : 'same' }, `${sign} ${line}\n`))),
    button, status);
}

/** One entry: its facts, masked env/headers, and the tool changes waiting. */
export async function mcpServerPage(main, ctx, id, notice = '') {
  fill(main, h('p', { class: 'muted' }, 'Loading…'));
  const path = `/api/v1/mcp-servers/${encodeURIComponent(id)}`;
  const [entry, pending] = await Promise.all([get(path), get(`${path}/pending`)]);
  const reload = (message) => mcpServerPage(main, ctx, id, message);
  const values = { ...entry.env, ...entry.headers };
  const facts = [
    ['Transport', entry.transport], ['Endpoint', h('code', {}, entry.endpoint)],
    ['Status', pill(entry.status)], ['Enabled', entry.enabled ? 'yes' : 'no'],
    ['Tools', String(entry.tool_count)], ['Source', entry.source], ['Tenant', entry.tenant],
    ['Takes tool changes', entry.auto_accept ? 'at once (auto_accept)' : 'after an admin accepts them'],
    ['Updated', when(entry.updated_at)],
  ];
  fill(main,
    h('p', {}, link('/mcp-servers', '← MCP servers')),
    h('h1', {}, entry.name),
    notice ? h('p', { class: 'notice', role: 'status', id: 'mcp-notice' }, notice) : null,
    h('p', { class: 'lead' }, entry.description),
    h('dl', { class: 'facts' }, facts.map(([k, v]) => [h('dt', {}, k), h('dd', {}, v)])),
    entry.literal_values.length
      ? h('div', { class: 'warning', role: 'note', id: 'literal-values' },
        h('strong', {}, 'Secrets stored in clear: '),
        `${entry.literal_values.join(', ')} hold literal values stored before they were refused. They are never shown; replace each with a \${NAME} credential reference.`)
      : null,
    Object.keys(values).length
      ? table('Environment and headers', ['Name', 'Value'], Object.entries(values).map(([k, v]) => [h('code', {}, k), h('code', {}, v)]))
      : null,
    h('section', { 'aria-label': 'Tool changes', id: 'tool-changes' },
      h('h2', {}, 'Tool changes waiting'),
      pending.length
        ? [h('p', {}, 'The server changed these tools since they were accepted. Every client keeps the accepted definition until an admin accepts the change.'),
          pending.map((p) => change(entry, p, ctx, reload))]
        : h('p', { class: 'muted', id: 'no-changes' }, 'None: every tool is as accepted.')));
}

