// Approvals (the queue, live by polling), runs (the list) and a run's page (the call
// timeline, crumbs, resume and cancel).

import { api, get, query, ApiFailure } from '../api.js';
import { h, fill, when, ms, json, pill, table, errorBox, link, field, announce } from '../ui.js';

const POLL_MS = 2000;

function poll(ctx, f) {
  let stopped = false;
  let timer = null;
  const tick = async () => {
    if (stopped) return;
    try {
      await f();
    } finally {
      if (!stopped) timer = setTimeout(tick, POLL_MS);
    }
  };
  ctx.onLeave(() => {
    stopped = true;
    clearTimeout(timer);
  });
  timer = setTimeout(tick, POLL_MS);
}

/**
 * A card of the queue: `{el, settle(outcome)}`. Once decided (here, or elsewhere as the
 * poll finds), the card shows the outcome in its pill and its buttons are gone.
 */
function approvalCard(call, ctx, refresh) {
  const gate = call.gate || {};
  const reason = h('input', { type: 'text', id: `reason-${call.call_id}`, autocomplete: 'off' });
  const status = h('div', { class: 'card-status', 'aria-live': 'polite' });
  const isApproval = gate.kind === 'approval';
  const selfAsked = gate.four_eyes && gate.requested_by === ctx.me.username;
  const state = h('span', { class: 'card-state' }, pill(call.status));
  const actionsBox = h('div', { class: 'actions' });
  let settled = false;
  const settle = (outcome) => {
    if (settled) return;
    settled = true;
    fill(state, pill(outcome));
    fill(actionsBox);
    el.classList.add('decided');
  };
  const decide = async (verb) => {
    for (const b of actionsBox.querySelectorAll('button')) b.disabled = true;
    fill(status, h('p', { class: 'muted' }, verb === 'approve' ? 'Approving…' : 'Denying…'));
    try {
      await api('POST', `/api/v1/approvals/${encodeURIComponent(call.call_id)}/${verb}`, { reason: reason.value || null });
    } catch (e) {
      fill(status, errorBox(e));
      for (const b of actionsBox.querySelectorAll('button')) b.disabled = b.classList.contains('approve') && selfAsked;
      return;
    }
    // Decided: the card and the navigation's count say so before the run goes on.
    settle(verb === 'approve' ? 'approved' : 'denied');
    await ctx.refreshApprovals();
    try {
      fill(status, h('p', {}, verb === 'approve' ? 'Approved; running…' : 'Denied; finishing the run…'));
      // Drive the run on, so it visibly finishes.
      const resumed = await api('POST', `/api/v1/runs/${encodeURIComponent(call.run_id)}/resume`);
      const run = resumed.data.run;
      fill(status, h('p', { class: 'done', id: `decided-${call.call_id}` }, 'Run ', link(`/runs/${encodeURIComponent(run.id)}`, run.id), ' is ', pill(run.status), '.'));
      announce(`Run ${run.id} is ${run.status}`);
      refresh();
    } catch (e) {
      fill(status, errorBox(e));
    }
  };
  const actions = [];
  if (ctx.can('deployer')) {
    actions.push(field('Reason (recorded with the decision)', reason));
    if (isApproval) {
      actions.push(h('button', {
        type: 'button', class: 'approve', disabled: selfAsked,
        'aria-describedby': selfAsked ? `fe-${call.call_id}` : null,
        onclick: () => decide('approve'),
      }, `Approve ${call.tool}`));
    }
    actions.push(h('button', { type: 'button', class: 'secondary deny', onclick: () => decide('deny') }, `Deny ${call.tool}`));
    if (selfAsked) actions.push(h('p', { class: 'muted', id: `fe-${call.call_id}` }, 'Four-eyes: you asked for this call, so another user must approve it.'));
  } else {
    actions.push(h('p', { class: 'muted' }, 'Deciding needs the deployer role.'));
  }
  fill(actionsBox, actions);
  const el = h('article', { class: 'card approval', 'data-call': call.call_id, 'aria-label': `Approval for ${call.tool}` },
    h('h2', {}, call.tool, ' ', state),
    h('dl', { class: 'facts' },
      h('dt', {}, 'Asked by'), h('dd', {}, gate.requested_by || 'unknown'),
      h('dt', {}, 'Asked at'), h('dd', {}, when(gate.requested_at_ms || call.created_at_ms)),
      h('dt', {}, 'Tool revision'), h('dd', {}, h('code', {}, gate.revision || '—')),
      h('dt', {}, 'Why'), h('dd', {}, gate.reason || gate.kind || ''),
      h('dt', {}, 'Four-eyes'), h('dd', {}, gate.four_eyes ? 'yes' : 'no'),
      h('dt', {}, 'Run'), h('dd', {}, link(`/runs/${encodeURIComponent(call.run_id)}`, call.run_id))),
    h('h3', {}, 'Args'), json(call.args, `Args of ${call.tool}`),
    actionsBox, status);
  return { el, settle };
}

/** The approvals queue, polled while shown. */
export async function approvalsPage(main, ctx) {
  const list = h('div', { id: 'approvals' });
  const stamp = h('p', { class: 'muted', id: 'approvals-updated' });
  fill(main, h('h1', {}, 'Approvals'), stamp, list);
  const cards = new Map();
  const load = async () => {
    let calls;
    try {
      calls = await get('/api/v1/approvals');
    } catch (e) {
      fill(list, errorBox(e));
      return;
    }
    const ids = new Set(calls.map((c) => c.call_id));
    // Cards of decided calls stay until the page is left, so their outcome is seen.
    for (const c of calls) {
      if (!cards.has(c.call_id)) {
        const card = approvalCard(c, ctx, load);
        cards.set(c.call_id, card);
        list.appendChild(card.el);
      }
    }
    // A call gone from the queue was decided (here, or by someone else).
    for (const [id, card] of cards) {
      if (!ids.has(id)) card.settle('decided');
    }
    if (!cards.size) fill(list, h('p', { class: 'muted', id: 'no-approvals' }, 'Nothing waits for a decision.'));
    else list.querySelector('#no-approvals')?.remove();
    stamp.textContent = `${calls.length} waiting · updated ${new Date().toLocaleTimeString()} (every ${POLL_MS / 1000} s)`;
    ctx.setApprovals(calls.length);
  };
  await load();
  poll(ctx, load);
}

const RUNS_PER_PAGE = 50;

/** A run's marks in the list: its status, and an "error" pill when calls of it failed. */
function runMarks(r) {
  const n = r.calls_failed || 0;
  return [pill(r.status), n ? [' ', h('span', { class: 'pill pill-error', title: `${n} call${n > 1 ? 's' : ''} ended in an error` }, n > 1 ? `${n} errors` : 'error')] : null];
}

/**
 * The runs list, a page at a time (newest first). "failed" finds runs that failed and
 * runs whose calls ended in an error (a tool's error result leaves its run completed).
 */
export async function runsPage(main, ctx) {
  const params = new URLSearchParams(location.search);
  const status = h('select', { id: 'runs-status' }, [['', 'any status'], ['running', 'running'], ['parked', 'parked'], ['completed', 'completed'],
    ['failed', 'failed (the run, or a call)'], ['cancelled', 'cancelled']].map(([v, l]) => h('option', { value: v }, l)));
  status.value = params.get('failed') === 'true' ? 'failed' : (params.get('status') || '');
  const agent = h('input', { id: 'runs-agent', value: params.get('agent_id') || '', placeholder: 'registry, an agent…' });
  const results = h('div', { id: 'runs' });
  const form = h('form', { class: 'filters', 'aria-label': 'Filter runs' }, field('Status', status), field('Agent', agent), h('button', { type: 'submit' }, 'Filter'));
  fill(main, h('h1', {}, 'Runs'), form, results);
  let page = Math.max(1, Number(params.get('page')) || 1);
  const load = async () => {
    const failed = status.value === 'failed';
    const shown = { status: failed ? undefined : status.value, failed: failed ? 'true' : undefined, agent_id: agent.value.trim() };
    history.replaceState(null, '', `/runs${query({ ...shown, page: page > 1 ? page : undefined })}`);
    delete results.dataset.ready;
    try {
      const runs = await get(`/api/v1/runs${query({ ...shown, limit: RUNS_PER_PAGE, page })}`);
      // A full page may have older runs after it; a short one is the last.
      const nav = h('nav', { class: 'pager', 'aria-label': 'Pages of runs' },
        h('button', { type: 'button', disabled: page <= 1, onclick: () => { page -= 1; load(); } }, 'Newer'),
        h('span', { id: 'runs-page' }, `Page ${page}`),
        h('button', { type: 'button', disabled: runs.length < RUNS_PER_PAGE, onclick: () => { page += 1; load(); } }, 'Older'));
      fill(results, runs.length
        ? table(`Runs, newest first, page ${page}`, ['Run', 'Status', 'Agent', 'Started', 'Updated', 'By'], runs.map((r) => [
          link(`/runs/${encodeURIComponent(r.id)}`, r.id.slice(0, 13)), runMarks(r), r.agent_id, when(r.created_at), when(r.updated_at),
          (r.principal && r.principal.sub) || '']))
        : h('p', { class: 'muted' }, page > 1 ? 'No older runs.' : 'No runs.'),
        nav);
      results.dataset.ready = 'true';
    } catch (e) {
      fill(results, errorBox(e));
    }
  };
  form.addEventListener('submit', (ev) => { ev.preventDefault(); page = 1; load(); });
  await load();
}

function callItem(c) {
  const d = c.diagnostics || {};
  return h('li', { class: `call call-${c.status}` },
    h('h3', {}, `#${c.ordinal} ${c.tool} `, pill(c.status)),
    h('dl', { class: 'facts' },
      h('dt', {}, 'Attempts'), h('dd', {}, String(c.attempts)),
      h('dt', {}, 'Duration'), h('dd', {}, ms(c.duration_ms) || '—'),
      h('dt', {}, 'Call id'), h('dd', {}, h('code', {}, c.call_id)),
      c.decision ? [h('dt', {}, 'Decision'), h('dd', {}, `${c.decision.approved ? 'approved' : 'denied'} by ${c.decision.by || c.decision.decided_by || '?'}${c.decision.reason ? `: ${c.decision.reason}` : ''}`)] : null),
    h('details', {}, h('summary', {}, 'Args'), json(c.args, 'Args')),
    c.result !== undefined && c.result !== null ? h('details', { open: true }, h('summary', {}, 'Result'), json(c.result, 'Result')) : null,
    c.error ? h('p', { class: 'error' }, `${c.error.code}: ${c.error.message}`) : null,
    Object.keys(d).length ? h('details', {}, h('summary', {}, 'Diagnostics'), json(d, 'Diagnostics')) : null);
}

/** An "error" pill when calls of the run ended in an error (the run may still be completed). */
function callErrors(calls) {
  const n = calls.filter((c) => c.status === 'failed').length;
  return n ? h('span', { class: 'pill pill-error', id: 'run-call-errors' }, `${n} call${n > 1 ? 's' : ''} ended in an error`) : null;
}

/** A crumb's time: RFC 3339 text, epoch milliseconds, or serde's SystemTime object. */
function crumbTime(at) {
  if (at && typeof at === 'object' && 'secs_since_epoch' in at) {
    return when(at.secs_since_epoch * 1000 + Math.floor((at.nanos_since_epoch || 0) / 1e6));
  }
  return when(at);
}

/** A run's page: its facts, the call timeline, crumbs, resume and cancel; polled while not finished. */
export async function runPage(main, ctx, id) {
  const body = h('div', { id: 'run' });
  fill(main, h('p', {}, link('/runs', '← Runs')), body);
  const status = h('div', { 'aria-live': 'polite', id: 'run-actions-status' });
  const act = async (verb) => {
    try {
      const body2 = verb === 'cancel' ? { reason: 'cancelled in the console' } : undefined;
      await api('POST', `/api/v1/runs/${encodeURIComponent(id)}/${verb}`, body2);
      fill(status, h('p', {}, verb === 'cancel' ? 'Cancelled.' : 'Resumed.'));
    } catch (e) {
      fill(status, errorBox(e));
    }
    await load();
  };
  let finished = false;
  const load = async () => {
    let run;
    try {
      run = await get(`/api/v1/runs/${encodeURIComponent(id)}?crumbs=true`);
    } catch (e) {
      fill(body, errorBox(e));
      finished = true;
      return;
    }
    finished = ['completed', 'failed', 'cancelled'].includes(run.status);
    const buttons = ctx.can('deployer') && !finished
      ? h('div', { class: 'actions' },
        h('button', { type: 'button', id: 'resume', onclick: () => act('resume') }, 'Resume'),
        h('button', { type: 'button', id: 'cancel', class: 'secondary', onclick: () => act('cancel') }, 'Cancel'))
      : null;
    fill(body,
      h('h1', {}, 'Run ', h('code', {}, run.id)),
      h('p', {}, 'Status ', h('span', { id: 'run-status' }, pill(run.status)), ' ', callErrors(run.calls || [])),
      h('dl', { class: 'facts' },
        h('dt', {}, 'Agent'), h('dd', {}, run.agent_id),
        h('dt', {}, 'By'), h('dd', {}, (run.principal && run.principal.sub) || ''),
        h('dt', {}, 'Started'), h('dd', {}, when(run.created_at)),
        h('dt', {}, 'Updated'), h('dd', {}, when(run.updated_at)),
        h('dt', {}, 'Resumes'), h('dd', {}, String(run.resumes)),
        viaMcp(run.driver),
        run.error ? [h('dt', {}, 'Error'), h('dd', {}, run.error)] : null),
      buttons, status,
      h('h2', {}, 'Calls'),
      (run.calls || []).length ? h('ol', { class: 'timeline' }, run.calls.map(callItem)) : h('p', { class: 'muted' }, 'No calls yet.'),
      h('h2', {}, 'Crumbs'),
      (run.crumbs || []).length ? h('ol', { class: 'crumbs' }, run.crumbs.map((c) => h('li', {}, h('code', { class: 'crumb-type' }, c.type || 'crumb'), ' ', c.tool_name || '', ' ', crumbTime(c.at), ' ', h('details', {}, h('summary', {}, 'data'), json(c, 'Crumb'))))) : h('p', { class: 'muted' }, 'No crumbs.'));
  };
  await load();
  poll(ctx, async () => { if (!finished) await load(); });
}

export { ApiFailure };

/** A run started over MCP: the client as it named itself, and the protocol it spoke. */
function viaMcp(driver) {
  const m = driver && driver.mcp;
  if (!m || typeof m !== 'object') return null;
  const era = [m.era, m.protocol_version].filter(Boolean).join(' ');
  return [h('dt', {}, 'Via'), h('dd', { id: 'run-via' }, `MCP client ${m.client || '(unnamed)'} (${era})`)];
}
