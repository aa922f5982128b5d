// The console's entry point: the session (who is logged in), the client-side router
// (History API; every route is also a server path answering this page) and the nav.

import { api, get, whenSessionEnds, SessionEnded, readCookie } from './api.js';
import { h, fill, errorBox } from './ui.js';
import { toolsPage, toolPage } from './pages/tools.js';
import { approvalsPage, runsPage, runPage } from './pages/runs.js';
import { loginPage, sandboxPage, agentsPage, agentPage, adminPage } from './pages/other.js';
import { mcpServersPage, mcpServerPage } from './pages/mcp.js';

const RANK = { viewer: 0, deployer: 1, admin: 2, owner: 3 };

const routes = [
  [/^\/(tools)?$/, (m, c) => toolsPage(m, c)],
  [/^\/tools\/([^/]+)$/, (m, c, id) => toolPage(m, c, decodeURIComponent(id))],
  [/^\/approvals$/, (m, c) => approvalsPage(m, c)],
  [/^\/runs$/, (m, c) => runsPage(m, c)],
  [/^\/runs\/([^/]+)$/, (m, c, id) => runPage(m, c, decodeURIComponent(id))],
  [/^\/sandbox$/, (m, c) => sandboxPage(m, c)],
  [/^\/agents$/, (m, c) => agentsPage(m, c)],
  [/^\/agents\/([^/]+)$/, (m, c, id) => agentPage(m, c, decodeURIComponent(id))],
  [/^\/mcp-servers$/, (m, c) => mcpServersPage(m, c)],
  [/^\/mcp-servers\/([^/]+)$/, (m, c, id) => mcpServerPage(m, c, decodeURIComponent(id))],
  [/^\/admin$/, (m, c) => adminPage(m, c)],
];

const main = document.getElementById('main');
const header = document.querySelector('header.top');
let leaving = [];
let booting = true;

const ctx = {
  me: null,
  can(role) {
    return !!this.me && RANK[this.me.role] >= RANK[role];
  },
  onLeave(f) {
    leaving.push(f);
  },
  setApprovals(n) {
    const badge = document.getElementById('approvals-count');
    if (badge) badge.textContent = n ? String(n) : '';
  },
  /** Ask the server how many calls wait for a decision, and show it in the navigation. */
  async refreshApprovals() {
    if (!this.me) return;
    try {
      this.setApprovals((await get('/api/v1/approvals')).length);
    } catch {
      // The badge is a hint; the page itself reports errors.
    }
  },
  async loggedIn() {
    await loadMe();
    const to = location.pathname === '/login' ? '/tools' : location.pathname + location.search;
    navigate(to, true);
  },
};

function leave() {
  for (const f of leaving) f();
  leaving = [];
}

async function loadMe() {
  ctx.me = await get('/api/v1/auth/me');
  header.hidden = false;
  fill(document.getElementById('who'), `${ctx.me.username} · ${ctx.me.role} · ${ctx.me.tenant}`);
  document.getElementById('nav-admin').hidden = !ctx.can('admin');
}

function showLogin(message) {
  leave();
  ctx.me = null;
  header.hidden = true;
  if (location.pathname !== '/login') {
    const back = location.pathname + location.search;
    history.replaceState({ back }, '', '/login');
  }
  loginPage(main, ctx, message);
}

whenSessionEnds((message) => {
  // At start-up with no session at all, the login page needs no explanation.
  showLogin(booting && !readCookie('toolshed_csrf') ? '' : message);
});

let rendered = '';

async function render() {
  leave();
  const path = location.pathname;
  rendered = path + location.search;
  for (const a of document.querySelectorAll('nav a')) {
    const current = path === a.getAttribute('href') || path.startsWith(`${a.getAttribute('href')}/`);
    if (current) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  if (path === '/login') {
    if (ctx.me) {
      navigate('/tools', true);
      return;
    }
    loginPage(main, ctx, '');
    return;
  }
  // Every page shown brings the approvals count up to date, not only the timer.
  ctx.refreshApprovals();
  for (const [re, page] of routes) {
    const m = re.exec(path);
    if (!m) continue;
    try {
      await page(main, ctx, ...m.slice(1));
    } catch (e) {
      if (!(e instanceof SessionEnded)) fill(main, h('h1', {}, 'Something went wrong'), errorBox(e));
    }
    const heading = main.querySelector('h1');
    document.title = heading ? `${heading.textContent} · toolshed` : 'toolshed console';
    return;
  }
  fill(main, h('h1', {}, 'Not found'), h('p', {}, 'No console page is at this address. ', h('a', { href: '/tools' }, 'Go to the tools.')));
}

/** Go to a console path (pushing history unless `replace`). */
export function navigate(to, replace = false) {
  if (replace) history.replaceState(null, '', to);
  else history.pushState(null, '', to);
  render().then(() => main.focus({ preventScroll: true }));
}

document.addEventListener('click', (ev) => {
  const a = ev.target.closest && ev.target.closest('a[href]');
  if (!a || a.target || ev.defaultPrevented || ev.button !== 0 || ev.metaKey || ev.ctrlKey || ev.shiftKey || ev.altKey) return;
  const url = new URL(a.href, location.href);
  if (url.origin !== location.origin || url.pathname.startsWith('/api/') || url.pathname.startsWith('/assets/')) return;
  if (url.hash && url.pathname === location.pathname) {
    // An in-page link (the skip link): move focus there, nothing to render.
    const target = document.getElementById(url.hash.slice(1));
    if (target) {
      ev.preventDefault();
      target.focus();
    }
    return;
  }
  ev.preventDefault();
  navigate(url.pathname + url.search);
});

window.addEventListener('popstate', () => {
  // A change of the fragment alone is no new page.
  if (location.pathname + location.search === rendered) return;
  render();
});

document.getElementById('logout').addEventListener('click', async () => {
  // The server ends the session (every copy of its tokens is refused from now on) and
  // clears the cookies; if it could not record that, say the session lives on.
  let message = 'You are logged out.';
  try {
    await api('POST', '/console/logout');
  } catch (e) {
    if (!(e instanceof SessionEnded)) {
      message = `You are logged out of this page, but the server could not end the session (${e.message}); it ends when it expires.`;
    }
  }
  showLogin(message);
});

async function boot() {
  try {
    await loadMe();
  } catch (e) {
    booting = false;
    if (!(e instanceof SessionEnded)) fill(main, errorBox(e));
    return;
  }
  booting = false;
  if (location.pathname === '/login') history.replaceState(null, '', '/tools');
  await render();
  // The approvals badge, kept current while anywhere in the console (each page shown
  // and each decision refresh it too).
  setInterval(() => ctx.refreshApprovals(), 15000);
}

boot();
