// DOM helpers. Everything shown goes in as text nodes or attribute values: nothing a user
// typed is ever parsed as HTML.

/**
 * Builds an element. `attrs` keys: `class`, `on<event>` (a function), `value`/`checked`/
 * `disabled`/`selected` (properties), anything else via setAttribute. Children are nodes or
 * strings (text); null/false children are skipped.
 */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2), v);
    else if (k === "value" || k === "checked" || k === "disabled" || k === "selected") el[k] = v;
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

/** Replaces the children of `el`. */
export function fill(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

const browserZone = Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC";
export { browserZone };

const formats = new Map();
function formatter(zone) {
  let f = formats.get(zone);
  if (!f) {
    f = new Intl.DateTimeFormat("en-GB", {
      timeZone: zone,
      year: "numeric", month: "2-digit", day: "2-digit",
      hour: "2-digit", minute: "2-digit", second: "2-digit",
      hourCycle: "h23", timeZoneName: "short",
    });
    formats.set(zone, f);
  }
  return f;
}

/** An RFC 3339 instant as wall-clock time in `zone` (default: the browser's), e.g. `2026-03-29 03:00:00 CEST`. */
export function when(iso, zone) {
  if (!iso) return "—";
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return String(iso);
  const p = {};
  for (const part of formatter(zone || browserZone).formatToParts(d)) p[part.type] = part.value;
  return `${p.year}-${p.month}-${p.day} ${p.hour}:${p.minute}:${p.second} ${p.timeZoneName || ""}`.trim();
}

const offsetFormats = new Map();
/** The UTC offset of `zone` at an instant, as "GMT+02:00" ("GMT" for zero). */
export function utcOffset(iso, zone) {
  let f = offsetFormats.get(zone);
  if (!f) {
    f = new Intl.DateTimeFormat("en-US", { timeZone: zone, timeZoneName: "longOffset" });
    offsetFormats.set(zone, f);
  }
  const part = f.formatToParts(new Date(iso)).find((x) => x.type === "timeZoneName");
  return part ? part.value : "";
}

/** "3 min ago" / "in 2 h" for an instant. */
export function relative(iso) {
  if (!iso) return "";
  const s = Math.round((new Date(iso).getTime() - Date.now()) / 1000);
  const a = Math.abs(s);
  const n = a < 90 ? `${a} s` : a < 5400 ? `${Math.round(a / 60)} min` : a < 172800 ? `${Math.round(a / 3600)} h` : `${Math.round(a / 86400)} d`;
  return s < 0 ? `${n} ago` : `in ${n}`;
}

/** A table: `columns` is a list of [heading, (row) => cell content]. */
export function table(columns, rows, empty) {
  if (!rows.length) return h("p", { class: "empty" }, empty || "Nothing here yet.");
  return h("div", { class: "scroll" },
    h("table", null,
      h("thead", null, h("tr", null, columns.map(([name]) => h("th", null, name)))),
      h("tbody", null, rows.map((r) => h("tr", null, columns.map(([name, cell]) => h("td", { "data-label": name }, cell(r))))))));
}

/** A status badge. */
export function badge(text, kind) {
  return h("span", { class: "badge " + (kind || String(text)) }, text);
}

/** A button that runs `action`; disabled while it runs. */
export function button(label, action, cls) {
  const b = h("button", { type: "button", class: cls || "" }, label);
  b.addEventListener("click", async () => {
    b.disabled = true;
    try {
      await action();
    } finally {
      b.disabled = false;
    }
  });
  return b;
}

/** A labelled form field around `input`, with an optional hint. */
export function field(label, input, hint) {
  return h("label", { class: "field" }, h("span", null, label), input, hint ? h("small", null, hint) : null);
}

/** A JSON text box's value as an object; throws a readable Error on bad JSON. */
export function parseJson(text, what) {
  if (!text.trim()) return {};
  try {
    return JSON.parse(text);
  } catch (e) {
    throw new Error(`${what}: not valid JSON (${e.message})`);
  }
}
