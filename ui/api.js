// The signed API client of the dashboard (docs/design.md §2). The key id and secret live in this
// tab's sessionStorage only: never a cookie, never a URL.
import { hmacSha256, hex, utf8 } from "./sha256.js";

const STORE = "webhookd.credentials";

/** An API error: the envelope's code, message and HTTP status. */
export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

let credentials = null;
let lastTimestamp = 0;
/** Server clock minus ours (ms), learned from a 40104 reply's Date header. */
let clockOffset = 0;

export function loadCredentials() {
  if (credentials) return credentials;
  try {
    const saved = JSON.parse(sessionStorage.getItem(STORE) || "null");
    if (saved && saved.keyId && saved.secret) credentials = saved;
  } catch (_) {
    credentials = null;
  }
  return credentials;
}

export function signOut() {
  credentials = null;
  sessionStorage.removeItem(STORE);
}

/** Checks the credentials with one signed call, learns the key's scope, then keeps them for this tab. */
export async function signIn(keyId, secret) {
  credentials = { keyId, secret };
  try {
    await api("GET", "/v1/endpoints", { page_size: 1 });
    await learnScope();
  } catch (e) {
    credentials = null;
    throw e;
  }
}

/**
 * Reads the signed-in key's own record (every scope may: docs/API.md, "Keys") and keeps its
 * scope with the credentials. A server without the keys routes (404/405) predates scopes: every
 * key may do everything there, and `scope` stays null.
 */
export async function learnScope() {
  const creds = loadCredentials();
  if (!creds) return;
  try {
    const key = await api("GET", "/v1/keys/" + encodeURIComponent(creds.keyId));
    creds.scope = key.scope;
  } catch (e) {
    if (e.status !== 404 && e.status !== 405) throw e;
    creds.scope = null;
  }
  sessionStorage.setItem(STORE, JSON.stringify(creds));
}

const RANK = { read: 0, write: 1, admin: 2 };

/** The least scope a request needs: the server's rule (`auth::required_scope`). */
function needs(method, path, keyId) {
  if (path === "/v1/keys" || path.startsWith("/v1/keys/")) {
    return method === "GET" && path === "/v1/keys/" + keyId ? "read" : "admin";
  }
  return method === "GET" || (method === "POST" && path === "/v1/cron/preview") ? "read" : "write";
}

/** Why the signed-in key may not send `method path`, or null when it may (or its scope is unknown). */
export function denied(method, path) {
  const creds = loadCredentials();
  const scope = creds && creds.scope;
  if (!(scope in RANK)) return null;
  if (RANK[scope] >= RANK[needs(method, path, creds.keyId)]) return null;
  return `key scope "${scope}" does not allow ${method} ${path}`;
}

/** Milliseconds since the epoch, strictly increasing: the replay rule refuses a reused signature. */
function timestamp() {
  const now = Date.now() + clockOffset;
  lastTimestamp = Math.max(now, lastTimestamp + 1);
  return String(lastTimestamp);
}

function queryString(query) {
  const parts = [];
  for (const [k, v] of Object.entries(query || {})) {
    if (v === undefined || v === null || v === "") continue;
    parts.push(encodeURIComponent(k) + "=" + encodeURIComponent(v));
  }
  return parts.length ? "?" + parts.join("&") : "";
}

/**
 * Sends one signed request; resolves to the envelope's `data`, rejects with an ApiError.
 * `query` is an object for GET parameters; `body` an object sent as JSON.
 */
export async function api(method, path, query, body, retried) {
  const creds = loadCredentials();
  if (!creds) throw new ApiError(401, 40101, "not signed in");
  const pathAndQuery = path + queryString(query);
  const text = body === undefined ? "" : JSON.stringify(body);
  const ts = timestamp();
  const payload = text === "" ? method + " " + pathAndQuery : text;
  const signature = hex(hmacSha256(utf8(creds.secret), utf8(ts + "\n" + payload)));
  const headers = { "X-Key-ID": creds.keyId, "X-Timestamp": ts, "X-Signature": signature };
  if (text !== "") headers["Content-Type"] = "application/json";
  let reply;
  try {
    reply = await fetch(pathAndQuery, {
      method,
      headers,
      body: text === "" ? undefined : text,
      credentials: "omit",
      cache: "no-store",
    });
  } catch (e) {
    throw new ApiError(0, 0, "the server did not answer (" + e.message + ")");
  }
  let envelope = null;
  try {
    envelope = await reply.json();
  } catch (_) {
    throw new ApiError(reply.status, 0, "the server answered " + reply.status + " with no JSON");
  }
  if (envelope.code === 40104 && !retried) {
    // This device's clock is off: sign with the server's clock, learned from its Date header.
    const serverDate = Date.parse(reply.headers.get("Date") || "");
    if (!Number.isNaN(serverDate)) {
      clockOffset = serverDate - Date.now();
      // Timestamps signed so far followed the wrong clock; from now on they follow the server's.
      lastTimestamp = 0;
      return api(method, path, query, body, true);
    }
  }
  if (envelope.code === 40105 && !retried) {
    // Another tab with the same key signed the same request in the same millisecond: sign
    // again with a later timestamp.
    return api(method, path, query, body, true);
  }
  if (envelope.code !== 0) {
    throw new ApiError(reply.status, envelope.code, envelope.message || "request failed");
  }
  return envelope.data;
}

/** GET /metrics (Prometheus text; no signature needed). Null when metrics are off. */
export async function metrics() {
  const reply = await fetch("/metrics", { credentials: "omit", cache: "no-store" });
  if (!reply.ok) return null;
  const values = new Map();
  for (const line of (await reply.text()).split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const space = line.lastIndexOf(" ");
    values.set(line.slice(0, space), Number(line.slice(space + 1)));
  }
  return values;
}
