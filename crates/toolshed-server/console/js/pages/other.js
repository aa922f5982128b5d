// Login, Test in Sandbox, Agents and Admin.

import { api, get, ApiFailure } from '../api.js';
import { h, fill, when, ms, json, pill, table, errorBox, link, field, announce } from '../ui.js';

/** The login page; `message` says why it is shown (an expired session, a logout). */
export function loginPage(main, ctx, message) {
  const user = h('input', { id: 'login-username', name: 'username', autocomplete: 'username', required: true });
  const pass = h('input', { id: 'login-password', name: 'password', type: 'password', autocomplete: 'current-password', required: true });
  const status = h('div', { 'aria-live': 'assertive', id: 'login-status' },
    message ? h('p', { class: 'notice', role: 'status', id: 'login-message' }, message) : null);
  const button = h('button', { type: 'submit' }, 'Log in');
  const form = h('form', { class: 'login', 'aria-labelledby': 'login-title' },
    h('h1', { id: 'login-title' }, 'Log in to toolshed'),
    status, field('User name', user), field('Password', pass), button);
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    if (!user.value || !pass.value) {
      fill(status, h('p', { class: 'error', role: 'alert' }, 'Enter your user name and password.'));
      (user.value ? pass : user).focus();
      return;
    }
    button.disabled = true;
    try {
      await api('POST', '/console/session', { username: user.value, password: pass.value });
      await ctx.loggedIn();
    } catch (e) {
      button.disabled = false;
      fill(status, errorBox(e));
      pass.value = '';
      pass.focus();
    }
  });
  fill(main, form);
  user.focus();
}

const SAMPLES = {
  python: 'def run(input):\n    return {"echo": input}\n',
  node: 'module.exports.run = async (input) => ({ echo: input });\n',
  bash: 'cat\n',
};

/** Test in Sandbox: a tool's code, or pasted code, with the seed's fields. */
export async function sandboxPage(main, ctx) {
  const params = new URLSearchParams(location.search);
  const toolId = params.get('tool') || '';
  const language = h('select', { id: 'sb-language' }, ['python', 'node', 'bash'].map((l) => h('option', { value: l }, l)));
  const code = h('textarea', { id: 'sb-code', rows: '10', class: 'mono', spellcheck: 'false' }, SAMPLES.python);
  const input = h('textarea', { id: 'sb-input', rows: '4', class: 'mono', spellcheck: 'false' }, '{"hello": "sandbox"}');
  const timeout = h('input', { id: 'sb-timeout', type: 'number', min: '1', max: '600', value: '30' });
  const memory = h('input', { id: 'sb-memory', type: 'number', min: '16', max: '65536', value: '256' });
  const network = h('input', { id: 'sb-network', type: 'checkbox' });
  const useTool = h('input', { id: 'sb-use-tool', type: 'checkbox' });
  useTool.checked = !!toolId;
  const status = h('div', { 'aria-live': 'polite', id: 'sb-status' });
  const out = h('div', { id: 'sb-result' });
  language.addEventListener('change', () => {
    if (Object.values(SAMPLES).includes(code.value)) code.value = SAMPLES[language.value];
  });
  const syncTool = () => {
    code.disabled = useTool.checked;
    language.disabled = useTool.checked;
  };
  useTool.addEventListener('change', syncTool);
  syncTool();
  const button = h('button', { type: 'submit', id: 'sb-run' }, 'Run in sandbox');
  if (!ctx.can('deployer')) {
    button.disabled = true;
    status.append(h('p', { class: 'muted' }, 'The sandbox needs the deployer role.'));
  }
  const form = h('form', { class: 'sandbox', novalidate: true, 'aria-label': 'Test in Sandbox' },
    toolId ? h('p', {}, 'Tool: ', link(`/tools/${encodeURIComponent(toolId)}`, toolId), ' ',
      h('label', { for: 'sb-use-tool', class: 'check' }, useTool, ' Run the tool\'s own code')) : null,
    h('div', { class: 'row' }, field('Language', language), field('Timeout (seconds)', timeout), field('Memory (MB)', memory),
      h('div', { class: 'field' }, h('label', { for: 'sb-network', class: 'check' }, network, ' Network'))),
    field('Code', code, 'Python defines run(input); Node exports run; bash reads the input on stdin.'),
    field('Input (JSON)', input), button, status);
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    let inputJson;
    try {
      inputJson = input.value.trim() ? JSON.parse(input.value) : {};
      input.removeAttribute('aria-invalid');
    } catch (e) {
      input.setAttribute('aria-invalid', 'true');
      fill(status, h('p', { class: 'error', role: 'alert' }, `Input is not valid JSON: ${e.message}`));
      input.focus();
      return;
    }
    const body = {
      input_json: inputJson,
      timeout_seconds: Number(timeout.value) || undefined,
      memory_mb: Number(memory.value) || undefined,
      network_enabled: network.checked,
    };
    if (toolId) body.tool_id = toolId;
    if (!useTool.checked) {
      body.code = code.value;
      body.language = language.value;
    }
    button.disabled = true;
    fill(status, h('p', { class: 'muted' }, 'Running in the sandbox…'));
    try {
      const r = (await api('POST', '/api/v1/tools/sandbox/execute', body)).data;
      fill(status);
      fill(out, h('section', { class: 'result', 'aria-label': 'Sandbox result', id: 'sb-panel' },
        h('h2', {}, r.error ? 'Error' : 'Output'),
        h('dl', { class: 'facts' },
          h('dt', {}, 'Exit code'), h('dd', { id: 'sb-exit' }, r.exit_code === null || r.exit_code === undefined ? '—' : String(r.exit_code)),
          h('dt', {}, 'Duration'), h('dd', {}, ms(r.duration_ms)),
          h('dt', {}, 'Timed out'), h('dd', {}, r.timed_out ? 'yes' : 'no'),
          h('dt', {}, 'Memory peak'), h('dd', {}, r.memory_peak_bytes ? `${Math.round(r.memory_peak_bytes / 1024)} KiB` : '—'),
          h('dt', {}, 'Network'), h('dd', {}, r.network_enabled ? 'on' : 'off'),
          h('dt', {}, 'Execution'), h('dd', {}, h('code', {}, r.execution_id || '—'))),
        r.error ? h('p', { class: 'error', role: 'alert' }, r.error) : null,
        h('h3', {}, 'Output'), json(r.output_value, 'Output'),
        h('h3', {}, 'stdout'), h('pre', { class: 'out', id: 'sb-stdout' }, r.stdout),
        h('h3', {}, 'stderr'), h('pre', { class: 'out', id: 'sb-stderr' }, r.stderr)));
      announce('Sandbox run finished');
    } catch (e) {
      fill(status, errorBox(e));
    } finally {
      button.disabled = !ctx.can('deployer');
    }
  });
  fill(main, h('h1', {}, 'Test in Sandbox'), form, out);
}

/** The agents list. */
export async function agentsPage(main) {
  const answer = await api('GET', '/api/v1/registry/agents?per_page=200');
  fill(main, h('h1', {}, 'Agents'),
    answer.data.length
      ? table(`Agents (${answer.meta.total})`, ['Name', 'Framework', 'Status', 'Tenant', 'Tools', 'Updated'], answer.data.map((a) => [
        link(`/agents/${encodeURIComponent(a.id)}`, a.name), a.framework, pill(a.status), a.tenant, String(a.tool_ids.length), when(a.updated_at)]))
      : h('p', { class: 'muted' }, 'No agents are registered.'));
}

/** An agent's page: its tools and env. */
export async function agentPage(main, ctx, id) {
  const a = await get(`/api/v1/registry/agents/${encodeURIComponent(id)}`);
  const def = a.definition || {};
  const tools = await Promise.all(a.tool_ids.map((t) => get(`/api/v1/registry/tools/${encodeURIComponent(t)}`).catch(() => ({ id: t, name: t, description: '(not found)' }))));
  const env = def.env || def.environment || {};
  const envRows = Array.isArray(env)
    ? env.map((e) => (typeof e === 'string' ? [e, ''] : [e.name || '', e.description || (e.required === false ? 'optional' : 'required')]))
    : Object.entries(env).map(([k, v]) => [k, typeof v === 'object' ? JSON.stringify(v) : String(v)]);
  fill(main, h('p', {}, link('/agents', '← Agents')), h('h1', {}, a.name),
    h('dl', { class: 'facts' },
      h('dt', {}, 'Framework'), h('dd', {}, a.framework), h('dt', {}, 'Status'), h('dd', {}, pill(a.status)),
      h('dt', {}, 'Tenant'), h('dd', {}, a.tenant), h('dt', {}, 'Registered by'), h('dd', {}, a.created_by),
      h('dt', {}, 'Updated'), h('dd', {}, when(a.updated_at))),
    h('h2', {}, 'Tools'),
    tools.length ? table('Registry tools it uses', ['Tool', 'Description'], tools.map((t) => [link(`/tools/${encodeURIComponent(t.id)}`, t.name), t.description]))
      : h('p', { class: 'muted' }, 'It uses no registry tool.'),
    def.tools ? h('details', {}, h('summary', {}, 'Every tool entry of agent.yaml'), json(def.tools, 'tools')) : null,
    h('h2', {}, 'Env'),
    envRows.length ? table('Declared env (names only; values are never shown)', ['Name', 'About'], envRows) : h('p', { class: 'muted' }, 'No env declared.'),
    h('details', {}, h('summary', {}, 'agent.yaml as JSON'), json(def, 'agent.yaml')));
}

/** Admin: users, roles and tenants. */
export async function adminPage(main, ctx) {
  if (!ctx.can('admin')) {
    fill(main, h('h1', {}, 'Admin'), h('p', {}, 'Managing users needs the admin role.'));
    return;
  }
  const status = h('div', { 'aria-live': 'polite', id: 'admin-status' });
  const list = h('div', { id: 'users' });
  const roles = ['viewer', 'deployer', 'admin', 'owner'].filter((r) => ctx.can(r));
  const username = h('input', { id: 'nu-name', autocomplete: 'off' });
  const password = h('input', { id: 'nu-password', type: 'password', autocomplete: 'new-password' });
  const role = h('select', { id: 'nu-role' }, roles.map((r) => h('option', { value: r }, r)));
  const tenant = h('input', { id: 'nu-tenant', placeholder: ctx.me.tenant });
  const add = h('form', { class: 'filters', 'aria-label': 'Add a user' },
    field('User name', username), field('Password', password), field('Role', role),
    ctx.can('owner') ? field('Tenant', tenant) : null, h('button', { type: 'submit' }, 'Add user'));
  const load = async () => {
    // Both in the caller's scope: an admin's own tenant, an owner's every tenant.
    const [users, tenants] = await Promise.all([get('/api/v1/users'), get('/api/v1/tenants')]);
    const roleSelect = (u) => {
      const s = h('select', { 'aria-label': `Role of ${u.username}` }, roles.concat(roles.includes(u.role) ? [] : [u.role]).map((r) => h('option', { value: r }, r)));
      s.value = u.role;
      s.addEventListener('change', async () => {
        try {
          await api('PATCH', `/api/v1/users/${encodeURIComponent(u.username)}`, { role: s.value });
          fill(status, h('p', {}, `${u.username} is now ${s.value}.`));
        } catch (e) {
          s.value = u.role;
          fill(status, errorBox(e));
        }
      });
      return s;
    };
    fill(list,
      table('Users', ['User', 'Role', 'Tenant', 'Added', ''], users.map((u) => [u.username, roleSelect(u), u.tenant, when(u.created_at),
        u.username === ctx.me.username ? '(you)' : h('button', {
          type: 'button', class: 'small secondary', 'aria-label': `Remove ${u.username}`,
          onclick: async () => {
            if (!window.confirm(`Remove ${u.username}?`)) return;
            try {
              await api('DELETE', `/api/v1/users/${encodeURIComponent(u.username)}`);
              fill(status, h('p', {}, `${u.username} removed.`));
              await load();
            } catch (e) {
              fill(status, errorBox(e));
            }
          },
        }, 'Remove')])),
      h('h2', {}, 'Tenants'),
      table('Tenants', ['Tenant', 'Users', 'Admins', 'Tools', 'Agents', 'MCP servers'], tenants.map((t) => [
        t.name, String(t.users), t.admins.join(', ') || '—', String(t.tools), String(t.agents), String(t.mcp_servers)])),
      h('p', { class: 'muted' }, ctx.can('owner')
        ? 'A tenant comes with its first user: add a user with a new tenant name.'
        : 'You manage your own tenant; an organisation owner adds users to other tenants.'));
  };
  add.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    try {
      await api('POST', '/api/v1/users', { username: username.value, password: password.value, role: role.value, tenant: tenant.value || undefined });
      fill(status, h('p', {}, `${username.value} added.`));
      username.value = '';
      password.value = '';
      await load();
    } catch (e) {
      fill(status, errorBox(e), e instanceof ApiFailure && e.details && e.details.fields
        ? h('ul', {}, e.details.fields.map((f) => h('li', {}, `${f.field}: ${f.message}`))) : null);
    }
  });
  fill(main, h('h1', {}, 'Admin'), h('h2', {}, 'Users'), list, h('h2', {}, 'Add a user'), add, status);
  await load();
}
