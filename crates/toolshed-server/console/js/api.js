// The console's client of the REST API: same-origin requests with the session cookie,
// the CSRF token (read from the `toolshed_csrf` cookie) on every changing request, and
// one silent refresh when the access cookie has expired.

/** An error answer of the API: its status, stable code, message and details. */
export class ApiFailure extends Error {
  constructor(status, body) {
    const e = (body && body.error) || {};
    super(e.message || `the server answered ${status}`);
    this.status = status;
    this.code = e.code || 'REQUEST_REJECTED';
    this.details = e.details || null;
  }
}

/** The session ended (expired, withdrawn or logged out): the login page is shown. */
export class SessionEnded extends Error {}

let onSessionEnded = () => {};

/** Set what happens when the session ends (the app shows the login page). */
export function whenSessionEnds(f) {
  onSessionEnded = f;
}

/** The value of a cookie the page may read. */
export function readCookie(name) {
  for (const part of document.cookie.split(';')) {
    const [k, ...v] = part.trim().split('=');
    if (k === name) return v.join('=');
  }
  return '';
}

async function send(method, path, body) {
  const headers = { Accept: 'application/json' };
  if (method !== 'GET') {
    headers['X-CSRF-Token'] = readCookie('toolshed_csrf');
  }
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const response = await fetch(path, {
    method,
    headers,
    credentials: 'same-origin',
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  let json = null;
  const text = await response.text();
  if (text) {
    try {
      json = JSON.parse(text);
    } catch {
      json = null;
    }
  }
  return { response, json };
}

let refreshing = null;

/** Ask for new cookies with the refresh cookie; true when the session goes on. */
export async function refreshSession() {
  if (!refreshing) {
    refreshing = send('POST', '/console/refresh').then(
      ({ response }) => response.ok,
      () => false,
    ).finally(() => {
      refreshing = null;
    });
  }
  return refreshing;
}

/**
 * Call the API; answers the parsed body (`{data, meta}`), throws `ApiFailure` on an
 * error answer and `SessionEnded` when the session is over.
 */
export async function api(method, path, body) {
  let { response, json } = await send(method, path, body);
  if (response.status === 401 && !path.startsWith('/console/')) {
    if (await refreshSession()) {
      ({ response, json } = await send(method, path, body));
    }
    if (response.status === 401) {
      onSessionEnded('Your session has expired. Log in again.');
      throw new SessionEnded('session ended');
    }
  }
  if (!response.ok) throw new ApiFailure(response.status, json);
  return json || {};
}

/** GET a path and answer its `data`. */
export async function get(path) {
  return (await api('GET', path)).data;
}

/** Build a query string from the set values of an object. */
export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v !== undefined && v !== null && v !== '') q.set(k, String(v));
  }
  const s = q.toString();
  return s ? `?${s}` : '';
}
