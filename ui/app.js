// The dashboard's shell: sign-in, navigation, and a hash router (`#/tasks?status=failed`),
// so that every view has a link and the back button works.
import { loadCredentials, signIn, signOut, learnScope, denied } from "./api.js";
import { h, fill } from "./dom.js";
import { PAGES } from "./pages.js";

const root = document.getElementById("app");
const NAV = [
  ["overview", "Overview"],
  ["endpoints", "Endpoints"],
  ["schedules", "Schedules"],
  ["tasks", "Tasks"],
  ["events", "Events"],
  ["policies", "Retry policies"],
  ["keys", "Keys"],
];

/** What a key of each scope is told, under the navigation, when it is not admin. */
const SCOPE_NOTES = {
  write: "This key's scope is write: it can do everything but manage API keys.",
  read: "This key's scope is read: it can look but not change anything. Greyed-out actions say why.",
};

/** A navigation link, or for a page the key's scope cannot read, a greyed-out label saying why. */
function navItem(id, label, page) {
  const reason = id === "keys" ? denied("GET", "/v1/keys") : null;
  if (reason) return h("span", { class: "denied", title: reason, "data-denied": reason, "aria-disabled": "true" }, label);
  return h("a", { href: "#/" + id, class: id === page ? "active" : "", "aria-current": id === page ? "page" : null }, label);
}

/** A success message to show again after the re-render that follows the action it reports. */
let carried = null;

/** Shows a message at the top of the page; it stays until dismissed or the next view. */
export function notify(text, kind) {
  if (kind === "ok") carried = [text, kind];
  const box = document.getElementById("notice");
  if (!box) return;
  fill(box, h("div", { class: "notice " + (kind || "info"), role: kind === "error" ? "alert" : "status" },
    h("span", null, text),
    h("button", { type: "button", class: "link", "aria-label": "dismiss", onclick: () => box.replaceChildren() }, "×")));
}

/** The current route: page name, id (for `#/tasks/7`) and query parameters. */
export function route() {
  const raw = location.hash.replace(/^#\/?/, "");
  const [path, qs] = raw.split("?");
  const [name, id] = (path || "overview").split("/");
  return { name, id: id ? Number(id) : null, params: new URLSearchParams(qs || "") };
}

/** Navigates to a page with query parameters (empty values dropped). */
export function go(name, params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) if (v !== undefined && v !== null && v !== "") q.set(k, v);
  const hash = "#/" + name + (q.toString() ? "?" + q : "");
  if (location.hash === hash) render();
  else location.hash = hash;
}

function signInView(message) {
  const keyId = h("input", { name: "key_id", autocomplete: "username", required: true, spellcheck: "false" });
  const secret = h("input", { name: "secret", type: "password", autocomplete: "current-password", required: true });
  const error = h("p", { class: "error", role: "alert" }, message || "");
  const form = h("form", { class: "signin" },
    h("h1", null, "webhookd"),
    h("p", null, "Sign in with an API key (", h("code", null, "webhookd keys create"), ")."),
    h("label", { class: "field" }, h("span", null, "Key id"), keyId),
    h("label", { class: "field" }, h("span", null, "Secret"), secret),
    h("button", { type: "submit", class: "primary" }, "Sign in"),
    error,
    h("small", null, "The secret stays in this tab (session storage) and signs each request; it is never sent."));
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    performance.mark("webhookd:sign-in-submitted");
    error.textContent = "Signing in…";
    try {
      await signIn(keyId.value.trim(), secret.value);
      render();
    } catch (err) {
      // An expired key is told so (the server tells only the secret's holder); an unknown key or a
      // wrong secret gets one message, so that the form does not tell which was wrong.
      error.textContent = (err.code === 40102 && !/expired/.test(err.message)) || err.code === 40103
        ? "Unknown key id or wrong secret."
        : err.message;
    }
  });
  fill(root, form);
  keyId.focus();
  // The first useful render of a fresh load, read by the browser test's timing.
  performance.mark("webhookd:sign-in-shown");
}

let generation = 0;

async function render() {
  // Tests and scripts wait for `data-ready=<page>`: it is set once the page's data is shown.
  document.body.removeAttribute("data-ready");
  const creds = loadCredentials();
  if (!creds) return signInView();
  if (creds.scope === undefined) {
    // Signed in by an older page: learn the scope once.
    try {
      await learnScope();
    } catch (err) {
      if (err.status === 401) {
        signOut();
        return signInView("Signed out: " + err.message);
      }
    }
  }
  const r = route();
  const page = PAGES[r.name] ? r.name : "overview";
  const main = h("main", { id: "main" });
  fill(root,
    h("header", null,
      h("a", { class: "brand", href: "#/overview" }, "webhookd"),
      h("nav", null, NAV.map(([id, label]) => navItem(id, label, page))),
      h("span", { class: "who" }, h("span", null, creds.keyId),
        creds.scope ? h("span", { class: "badge scope", title: "this key's scope" }, creds.scope) : null,
        h("button", { type: "button", class: "link", onclick: () => { signOut(); render(); } }, "Sign out"))),
    SCOPE_NOTES[creds.scope] ? h("p", { class: "scope-note", role: "note" }, SCOPE_NOTES[creds.scope]) : null,
    h("div", { id: "notice" }),
    main);
  if (carried) notify(...carried);
  carried = null;
  const mine = ++generation;
  try {
    await PAGES[page](main, r, { go, notify, stale: () => mine !== generation });
  } catch (err) {
    if (mine !== generation) return;
    if (err.status === 401) {
      signOut();
      return signInView("Signed out: " + err.message);
    }
    notify(err.message, "error");
  }
  if (mine !== generation) {
    // Left before its data came: the view rendered since owns `data-ready`. Marking this
    // page ready here would overwrite the newer page's mark (or set it before that page
    // is shown), and a script waiting for the newer page would wait for ever.
    performance.mark("webhookd:left:" + page);
    return;
  }
  document.body.setAttribute("data-ready", page);
  performance.mark("webhookd:ready:" + page);
}

window.addEventListener("hashchange", render);
render();
