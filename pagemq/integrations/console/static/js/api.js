// The broker's JSON API as the console calls it: same-origin fetches relative to the
// console's own URL (so a reverse proxy may mount the broker under a path), HTTP Basic
// credentials kept for this browser tab only (sessionStorage), errors carrying the API's
// own text. `X-Requested-With` asks the broker not to challenge a 401 with
// WWW-Authenticate, so the console's login form is shown instead of the browser's dialog.

const CREDENTIALS = 'pagemq.credentials';
const USER = 'pagemq.user';

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }

  toString() {
    return `${this.status}: ${this.message}`;
  }
}

export function url(path) {
  return new URL(`../${path.replace(/^\//, '')}`, document.baseURI).href;
}

export async function api(method, path, body) {
  const headers = { Accept: 'application/json', 'X-Requested-With': 'XMLHttpRequest' };
  const credentials = sessionStorage.getItem(CREDENTIALS);
  if (credentials) headers.Authorization = `Basic ${credentials}`;
  const init = { method, headers, cache: 'no-store', credentials: 'same-origin' };
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(url(path), init);
  } catch (failure) {
    throw new ApiError(0, `the broker did not answer (${failure.message})`);
  }
  const text = await response.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = null;
  }
  if (!response.ok) {
    const message = data && data.error ? data.error : (response.statusText || 'request failed');
    throw new ApiError(response.status, message);
  }
  return data;
}

export const get = (path) => api('GET', path);

export function name(text) {
  return encodeURIComponent(text);
}

export function query(params) {
  const kept = Object.entries(params).filter(([, value]) => value !== undefined && value !== null && value !== '');
  return kept.length ? `?${new URLSearchParams(kept).toString()}` : '';
}

export function logIn(user, password) {
  const bytes = new TextEncoder().encode(`${user}:${password}`);
  sessionStorage.setItem(CREDENTIALS, btoa(String.fromCharCode(...bytes)));
  sessionStorage.setItem(USER, user);
}

export function logOut() {
  sessionStorage.removeItem(CREDENTIALS);
  sessionStorage.removeItem(USER);
}

export function currentUser() {
  return sessionStorage.getItem(USER);
}
