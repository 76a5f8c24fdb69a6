// The dashboard's pages. Each is `async (main, route, ctx)` and fills `main`. Lists page
// through the API (page_size 20 here); nothing loads a whole table.
import { api, metrics, denied, loadCredentials } from "./api.js";
import {
  h, fill, when, relative, table, badge, button, field, parseJson, utcOffset, browserZone,
} from "./dom.js";
import { plural, cronWords, endpointHealth, attemptBuckets } from "./words.js";

const PAGE_SIZE = 20;
const TASK_STATUSES = ["pending", "retrying", "running", "success", "failed", "canceled"];
/** The task filter's choices: `retrying` is a subset of `pending` (the API's filter). */
const STATUS_CHOICES = TASK_STATUSES.map((s) => [s, s === "retrying" ? "retrying (pending after a failure)" : s]);

/** Runs an action, reports its outcome, and re-renders the view on success. */
async function act(ctx, fn, done) {
  try {
    const result = await fn();
    if (done) ctx.notify(typeof done === "function" ? done(result) : done, "ok");
    ctx.go(...currentPage());
    return result;
  } catch (err) {
    ctx.notify(describe(err), "error");
    return undefined;
  }
}

function currentPage() {
  const raw = location.hash.replace(/^#\/?/, "");
  const [path, qs] = raw.split("?");
  return [path || "overview", Object.fromEntries(new URLSearchParams(qs || ""))];
}

/** A readable message; a 404 for a route this server does not have says so. */
function describe(err) {
  // A route this server lacks is a 404 "no route", or a 405 where its path looks like
  // another route's (`/v1/tasks/retry` against `GET /v1/tasks/{id}`).
  if ((err.status === 404 && /no route/i.test(err.message)) || err.status === 405) {
    return "This webhookd does not offer that yet (" + err.message + "); upgrade the server to use it.";
  }
  return err.message || String(err);
}

function pager(data, params, ctx, name) {
  const page = data.page, pages = Math.max(1, Math.ceil(data.total / data.page_size));
  const to = (p) => () => ctx.go(name, { ...params, page: p });
  return h("div", { class: "pager" },
    button("‹ Newer", to(page - 1), page <= 1 ? "hidden" : ""),
    h("span", null, `page ${page} of ${pages} · ${data.total} in all`),
    button("Older ›", to(page + 1), page >= pages ? "hidden" : ""));
}

function pageQuery(params, extra) {
  return { page: params.get("page") || 1, page_size: PAGE_SIZE, ...extra };
}

function link(text, name, params) {
  const q = new URLSearchParams(params || {}).toString();
  return h("a", { href: "#/" + name + (q ? "?" + q : "") }, text);
}

function timeCell(iso) {
  if (!iso) return "—";
  return h("time", { datetime: iso, title: iso }, when(iso), h("small", null, " " + relative(iso)));
}

/**
 * A button for an action that sends `method path`: when the signed-in key's scope does not
 * allow it, greyed out (disabled) with the reason as its tooltip and `data-denied`.
 */
function allowed(method, path, label, action, cls) {
  const b = button(label, action, cls);
  const reason = denied(method, path);
  return reason ? greyOut(b, reason) : b;
}

/** Disables a control and says why (tooltip and `data-denied`, which the browser test reads). */
function greyOut(b, reason) {
  b.disabled = true;
  b.classList.add("denied");
  b.title = reason;
  b.setAttribute("data-denied", reason);
  return b;
}

/** A section with a heading and a toolbar. */
function section(title, ...tools) {
  return h("div", { class: "titlebar" }, h("h2", null, title), h("div", { class: "tools" }, tools));
}

/** A collapsible form panel; `build(panel)` fills it. */
function panel(main) {
  const box = h("section", { class: "panel", hidden: true });
  main.append(box);
  return {
    open(title, ...content) {
      box.hidden = false;
      fill(box, h("h3", null, title), content);
      box.scrollIntoView({ block: "nearest" });
    },
    close() {
      box.hidden = true;
      box.replaceChildren();
    },
  };
}

/** A form whose submit runs `onSubmit`; its errors show inside it. */
function form(fields, submitLabel, onSubmit, onCancel) {
  const error = h("p", { class: "error", role: "alert" });
  const f = h("form", { class: "grid" }, fields,
    h("div", { class: "actions" },
      h("button", { type: "submit", class: "primary" }, submitLabel),
      onCancel ? h("button", { type: "button", onclick: onCancel }, "Cancel") : null),
    error);
  f.addEventListener("submit", async (e) => {
    e.preventDefault();
    error.textContent = "";
    try {
      await onSubmit();
    } catch (err) {
      error.textContent = describe(err);
    }
  });
  return f;
}

function input(name, value, attrs) {
  return h("input", { name, value: value === null || value === undefined ? "" : String(value), ...attrs });
}

function select(name, options, value) {
  return h("select", { name }, options.map(([v, label]) => h("option", { value: v, selected: String(v) === String(value ?? "") }, label)));
}

function textarea(name, value) {
  const t = h("textarea", { name, rows: 4, spellcheck: "false" });
  t.value = value;
  return t;
}

function numberOrNull(text, what) {
  const t = text.trim();
  if (t === "") return null;
  const n = Number(t);
  if (!Number.isFinite(n)) throw new Error(`${what}: must be a number`);
  return n;
}

/** A record's instant as a `datetime-local` value in this browser's zone ("" for null). */
function localInput(iso) {
  if (!iso) return "";
  const d = new Date(iso);
  return new Date(d.getTime() - d.getTimezoneOffset() * 60000).toISOString().slice(0, 19);
}

/** A `datetime-local` value (this browser's zone) as an RFC 3339 instant in UTC, or null. */
function instantOrNull(value) {
  return value ? new Date(value).toISOString().replace(/\.\d{3}Z$/, "Z") : null;
}

/** For PATCH: only the fields that differ from the record. */
function changed(record, values) {
  const out = {};
  for (const [k, v] of Object.entries(values)) {
    if (JSON.stringify(record[k] ?? null) !== JSON.stringify(v ?? null)) out[k] = v;
  }
  return out;
}

// ---------------------------------------------------------------- overview

async function overview(main, r, ctx) {
  const hours = Math.min(168, Math.max(1, Number(r.params.get("hours")) || 24));
  const chart = h("div", { class: "chart" }, h("p", { class: "empty" }, "Loading deliveries…"));
  const counts = h("div", { class: "cards" });
  const server = h("div", { class: "cards" });
  fill(main,
    section("Overview"),
    h("h3", null, "Tasks by status"), counts,
    h("div", { class: "titlebar" }, h("h3", null, `Finished deliveries, last ${hours} h`),
      h("div", { class: "tools" }, [6, 24, 72].map((n) => link(`${n} h`, "overview", { hours: n })))),
    chart,
    h("h3", null, "Server"), server);

  // One count per status (`total` of a one-item page). A server older than `retrying`
  // (docs/design.md §11) refuses that filter: its card says so instead of failing the page.
  const totals = await Promise.all(TASK_STATUSES.map((s) =>
    api("GET", "/v1/tasks", { status: s, page_size: 1 }).then((d) => d.total, (err) => {
      if (err.status === 400) return null;
      throw err;
    })));
  if (ctx.stale()) return;
  // `retrying` tasks are `pending` ones (the API's filter): shown inside the pending card,
  // so that the cards add up to the number of tasks.
  const count = Object.fromEntries(TASK_STATUSES.map((s, i) => [s, totals[i]]));
  fill(counts, TASK_STATUSES.filter((s) => s !== "retrying").map((s) => {
    if (count[s] === null) {
      return h("div", { class: "card", title: "this server does not filter by " + s }, h("strong", null, "—"), h("span", null, s));
    }
    const retrying = s === "pending" && count.retrying !== null
      ? h("a", { class: "sub", href: "#/tasks?status=retrying" }, `of which ${count.retrying} retrying`) : null;
    return h("div", { class: "card " + s },
      h("a", { href: "#/tasks?status=" + s }, h("strong", null, String(count[s])), h("span", null, s)), retrying);
  }));

  const m = await metrics().catch(() => null);
  if (ctx.stale()) return;
  if (m) {
    const lag = m.get("webhookd_scheduler_lag_seconds");
    fill(server,
      lag === undefined ? card("scheduler lag (nothing fired yet)", "—") : card("scheduler lag", `${lag.toFixed(3)} s`),
      card("attempts ok since start", m.get('webhookd_deliveries_total{outcome="success"}') ?? 0),
      card("attempts failed since start",
        (m.get('webhookd_deliveries_total{outcome="http_error"}') ?? 0) + (m.get('webhookd_deliveries_total{outcome="network_error"}') ?? 0)));
  } else {
    fill(server, h("p", { class: "empty" }, "Metrics are off on this server (--no-metrics)."));
  }

  await deliveriesChart(chart, hours, ctx);
}

function card(label, value, kind) {
  return h("div", { class: "card" + (kind ? " " + kind : "") }, h("strong", null, String(value)), h("span", null, label));
}

/**
 * Buckets finished tasks (success / failed) by the hour of `finished_at`. Reads the newest
 * pages of each status until a page holds nothing inside the window (ids grow with creation,
 * so older pages finished earlier, give or take retries), at most 10 pages of 100 each.
 */
async function deliveriesChart(chart, hours, ctx) {
  const now = Date.now();
  const start = now - hours * 3600e3;
  const buckets = Array.from({ length: hours }, () => ({ success: 0, failed: 0 }));
  let capped = false;
  for (const status of ["success", "failed"]) {
    for (let page = 1; page <= 10; page++) {
      const d = await api("GET", "/v1/tasks", { status, page, page_size: 100 });
      if (ctx.stale()) return;
      let inside = 0;
      for (const t of d.items) {
        const at = Date.parse(t.finished_at || t.updated_at);
        if (at >= start && at <= now) {
          inside++;
          buckets[Math.min(hours - 1, Math.floor((at - start) / 3600e3))][status]++;
        }
      }
      if (inside === 0 || page * 100 >= d.total) break;
      if (page === 10) capped = true;
    }
  }
  const ok = buckets.reduce((n, b) => n + b.success, 0);
  const bad = buckets.reduce((n, b) => n + b.failed, 0);
  fill(chart,
    h("p", { class: "legend" }, badge(`${ok} succeeded`, "success"), " ", badge(`${bad} failed`, "failed"),
      capped ? h("small", null, " (counted from the newest 1000 tasks of each status)") : null,
      bad ? [" ", link("see failed tasks", "tasks", { status: "failed" })] : null),
    bars(buckets.map((b, i) => ({
      title: `${when(new Date(start + i * 3600e3).toISOString())}: ${b.success} ok, ${b.failed} failed`,
      parts: [["failed", b.failed], ["success", b.success]],
    })), `${ok} succeeded, ${bad} failed`),
    h("div", { class: "axis" }, h("span", null, when(new Date(start).toISOString())), h("span", null, "now")));
}

/**
 * A bar chart: one column per entry, `parts` stacked top to bottom as [class, value], scaled
 * to the largest column; `label` is read out to screen readers.
 */
function bars(columns, label) {
  const max = Math.max(1, ...columns.map((c) => c.parts.reduce((n, [, v]) => n + (v || 0), 0)));
  return h("div", { class: "bars", role: "img", "aria-label": label }, columns.map((c) => {
    const col = h("div", { class: "bar", title: c.title }, c.parts.map(([cls]) => h("div", { class: cls })));
    // Heights set through the CSSOM (the CSP forbids inline style attributes, not this).
    c.parts.forEach(([, v], i) => { col.children[i].style.height = (100 * (v || 0)) / max + "%"; });
    return col;
  }));
}

// ---------------------------------------------------------------- endpoints

/** Enabled or disabled, and beside it how its deliveries go (a failing endpoint is not green). */
function health(e, detailed) {
  const state = endpointHealth(e);
  const parts = [
    e.status === "disabled"
      ? badge(e.disabled_reason ? `disabled: ${e.disabled_reason}` : "disabled", "disabled")
      : badge("enabled", "enabled"),
    " ", badge(state.state === "untried" || state.state === "healthy" ? state.text : state.state, "health " + state.state),
  ];
  if (state.state === "failing" || state.state === "degraded") {
    parts.push(h("div", { class: "warn" }, plural(e.consecutive_failures, "failure") + " in a row"));
  }
  if (detailed) {
    if (e.last_success_at !== undefined) parts.push(h("div", null, h("small", null, "last ok: "), timeCell(e.last_success_at)));
    if (e.last_failure_at) parts.push(h("div", null, h("small", null, "last failure: "), timeCell(e.last_failure_at)));
  }
  return parts;
}

/** The actions on one endpoint, in its list row and on its page. */
function endpointActions(e, forms, result, ctx, onPage) {
  return h("div", { class: "row-actions" },
    allowed("PATCH", `/v1/endpoints/${e.id}`, "Edit", () => endpointForm(forms, e, ctx)),
    e.status === "enabled"
      ? allowed("POST", `/v1/endpoints/${e.id}/disable`, "Disable", () => act(ctx, () => api("POST", `/v1/endpoints/${e.id}/disable`), `Endpoint ${e.name} disabled.`))
      : allowed("POST", `/v1/endpoints/${e.id}/enable`, "Enable", () => act(ctx, () => api("POST", `/v1/endpoints/${e.id}/enable`), `Endpoint ${e.name} enabled.`)),
    allowed("POST", `/v1/endpoints/${e.id}/test`, "Send test", () => testDelivery(result, e, ctx)),
    allowed("POST", `/v1/endpoints/${e.id}/rotate-secret`, "Rotate secret", () => rotateForm(forms, e, ctx)),
    link("Tasks", "tasks", { endpoint_id: e.id }),
    allowed("DELETE", `/v1/endpoints/${e.id}`, "Delete", async () => {
      if (!confirm(`Delete endpoint ${e.name}? Its pending tasks are canceled.`)) return;
      try {
        await api("DELETE", `/v1/endpoints/${e.id}`);
        ctx.notify(`Endpoint ${e.name} deleted.`, "ok");
        ctx.go(onPage ? "endpoints" : currentPage()[0], onPage ? {} : currentPage()[1]);
      } catch (err) {
        ctx.notify(describe(err), "error");
      }
    }, "danger"));
}

async function endpoints(main, r, ctx) {
  if (r.id) return endpointPage(main, r.id, ctx);
  const status = r.params.get("status") || "";
  const forms = panel(main);
  const list = h("div", null, h("p", { class: "empty" }, "Loading…"));
  const result = h("div");
  main.prepend(section("Endpoints",
    select("filter-status", [["", "all"], ["enabled", "enabled"], ["disabled", "disabled"]], status),
    allowed("POST", "/v1/endpoints", "New endpoint", () => endpointForm(forms, null, ctx), "primary")));
  main.querySelector("select[name=filter-status]").addEventListener("change", (e) => ctx.go("endpoints", { status: e.target.value }));
  main.append(result, list);
  const data = await api("GET", "/v1/endpoints", pageQuery(r.params, { status }));
  if (ctx.stale()) return;
  fill(list, table([
    ["Id", (e) => String(e.id)],
    ["Name", (e) => h("a", { class: "name strong", href: `#/endpoints/${e.id}` }, e.name)],
    ["Target", (e) => h("code", { class: "url" }, `${e.method} ${e.url}`)],
    ["Health", (e) => health(e, true)],
    ["Actions", (e) => endpointActions(e, forms, result, ctx, false)],
  ], data.items, "No endpoints yet: add one with “New endpoint”."), pager(data, Object.fromEntries(r.params), ctx, "endpoints"));
}

/** Tasks whose attempts the endpoint page reads for its charts (one request each). */
const ENDPOINT_PAGE_TASKS = 25;

/**
 * One endpoint: its settings, health and actions, its success rate and latency over time,
 * its recent attempts and tasks. The API lists attempts per task, so the figures come from
 * the attempts of its newest tasks that were attempted (at most ENDPOINT_PAGE_TASKS).
 */
async function endpointPage(main, id, ctx) {
  const [e, recent] = await Promise.all([
    api("GET", `/v1/endpoints/${id}`),
    api("GET", "/v1/tasks", { endpoint_id: id, page_size: 100 }),
  ]);
  if (ctx.stale()) return;
  const policy = e.retry_policy_id
    ? await api("GET", `/v1/retries/policies/${e.retry_policy_id}`).catch(() => null) : null;
  // Attempted at least once (a retry sets `attempts` back to 0 but keeps the last result).
  const tried = recent.items.filter((t) => t.attempts > 0 || t.last_status_code !== null || t.last_error !== null)
    .slice(0, ENDPOINT_PAGE_TASKS);
  const pages = await Promise.all(tried.map((t) =>
    api("GET", `/v1/tasks/${t.id}/attempts`, { page_size: 100 }).then((d) => d.items.map((a) => ({ ...a, task: t })))));
  if (ctx.stale()) return;
  const attempts = pages.flat().sort((a, b) => Date.parse(b.started_at) - Date.parse(a.started_at) || b.id - a.id);
  fill(main,
    h("div", { class: "titlebar" },
      h("div", null, h("small", null, link("Endpoints", "endpoints"), " ›"), h("h2", { class: "name" }, e.name),
        h("div", { class: "health-line" }, health(e, false))),
      h("div", { class: "tools" }, allowed("POST", "/v1/tasks", "New task to it", () => taskForm(forms, ctx, e.id)))));
  const forms = panel(main);
  const result = h("div");
  // (h() skips a null child; the DOM's own append would print "null".)
  main.append(h("div", null, endpointActions(e, forms, result, ctx, true), result,
    h("dl", { class: "facts" },
      fact("Target", h("code", { class: "url" }, `${e.method} ${e.url}`)),
      fact("Retry policy", policy ? `${policy.name}: ${plural(policy.max_attempts, "attempt")}, ${policy.backoff_type}` : "default: 5 attempts, exponential"),
      fact("Timeout", `${e.timeout_ms} ms`),
      fact("Events it receives", e.filter_events || "every event"),
      fact("Payload filter", e.filter_payload ? h("pre", null, JSON.stringify(e.filter_payload, null, 1)) : "none: every payload"),
      fact("Signing", e.secret ? (e.previous_secret_expires_at ? ["signed; the old secret too until ", timeCell(e.previous_secret_expires_at)] : "signed") : "unsigned (no secret)"),
      fact("Limits", [e.rate_limit_per_sec ? `${e.rate_limit_per_sec}/s` : "no rate limit", ", ",
        e.max_in_flight ? `${e.max_in_flight} in flight` : "no in-flight cap"]),
      fact("Failures in a row", String(e.consecutive_failures)),
      fact("Last success", timeCell(e.last_success_at)), fact("Last failure", timeCell(e.last_failure_at)),
      Object.keys(e.headers || {}).length ? fact("Headers", h("pre", null, Object.entries(e.headers).map(([k, v]) => `${k}: ${v}`).join("\n"))) : null),
    deliveryFigures(attempts, tried.length, recent.total),
    h("h3", null, "Recent attempts"),
    table([
      ["Started", (a) => timeCell(a.started_at)],
      ["Task", (a) => [link(`task ${a.task.id}`, "tasks/" + a.task.id), h("small", null, ` attempt ${a.attempt}`)]],
      ["Result", (a) => resultBadge(a)],
      ["Duration", (a) => `${a.duration_ms} ms`],
      ["Error", (a) => a.error ? h("small", { class: "error" }, a.error) : "—"],
    ], attempts.slice(0, 20), "No attempts yet."),
    h("h3", null, "Recent tasks"),
    await taskTable(recent.items.slice(0, 10), ctx, { [e.id]: e }),
    recent.total > 10 ? h("p", null, link(`all ${plural(recent.total, "task")} of this endpoint`, "tasks", { endpoint_id: e.id })) : null));
}

/** An attempt's outcome as a badge: `HTTP 200` (green), `HTTP 500` or `no reply` (red). */
function resultBadge(a) {
  if (a.status_code === null || a.status_code === undefined) return badge("no reply", "failed");
  return badge(`HTTP ${a.status_code}`, a.status_code >= 200 && a.status_code < 300 ? "success" : "failed");
}

/** Success rate and latency over time, from attempts (see `attemptBuckets`). */
function deliveryFigures(attempts, taskCount, taskTotal) {
  const box = h("section", { class: "figures" });
  if (!attempts.length) {
    return fill(box, h("h3", null, "Deliveries"), h("p", { class: "empty" }, "No attempts yet: success rate and latency show here once it has been sent to."));
  }
  const b = attemptBuckets(attempts, Date.now());
  const n = b.total.ok + b.total.failed;
  const rate = Math.round((1000 * b.total.ok) / n) / 10;
  const span = (ms) => ms >= 86400e3 ? `${ms / 86400e3} d` : ms >= 3600e3 ? `${ms / 3600e3} h` : `${ms / 60e3} min`;
  const axis = h("div", { class: "axis" }, h("span", null, when(new Date(b.start).toISOString())), h("span", null, "now"));
  return fill(box,
    h("h3", null, "Deliveries"),
    h("p", null, h("small", null, `From the ${plural(attempts.length, "attempt")} of this endpoint's newest ${plural(taskCount, "attempted task")}`,
      taskTotal > taskCount ? ` (of ${plural(taskTotal, "task")} in all)` : "", `; the last ${span(b.size * b.buckets.length)}, one bar per ${span(b.size)}.`)),
    h("div", { class: "cards" },
      card("success rate", `${rate}%`, rate >= 99 ? "success" : rate >= 90 ? "retrying" : "failed"),
      card(`attempts, ${b.total.failed} failed`, n),
      card("median latency", `${b.total.p50} ms`),
      card("95th percentile", `${b.total.p95} ms`)),
    h("div", { class: "chart-pair" },
      h("div", { class: "chart" }, h("p", { class: "legend" }, "Success rate: ", badge("ok", "success"), " ", badge("failed", "failed")),
        bars(b.buckets.map((x) => ({
          title: `${when(new Date(x.at).toISOString())}: ${x.ok} ok, ${x.failed} failed`
            + (x.ok + x.failed ? ` (${Math.round((100 * x.ok) / (x.ok + x.failed))}% ok)` : ""),
          parts: [["failed", x.failed], ["success", x.ok]],
        })), `success rate ${rate}%`), axis),
      h("div", { class: "chart" }, h("p", { class: "legend" }, "Latency: ", badge("median", "latency"), " ", badge("95th percentile", "p95")),
        bars(b.buckets.map((x) => ({
          title: x.p50 === null ? `${when(new Date(x.at).toISOString())}: no attempts`
            : `${when(new Date(x.at).toISOString())}: median ${x.p50} ms, 95th percentile ${x.p95} ms`,
          parts: [["p95", x.p95 === null ? 0 : x.p95 - x.p50], ["latency", x.p50]],
        })), `median latency ${b.total.p50} ms`), axis.cloneNode(true))));
}

async function testDelivery(result, e, ctx) {
  fill(result, h("p", { class: "notice info" }, `Sending a test delivery to endpoint ${e.id}…`));
  try {
    const d = await api("POST", `/v1/endpoints/${e.id}/test`);
    const a = d.attempt || {};
    const ok = a.status_code >= 200 && a.status_code < 300;
    fill(result, h("section", { class: "panel" },
      h("h3", null, `Test delivery to ${e.name}: `, badge(ok ? "success" : "failed")),
      attemptView(a), link(`task ${d.task_id}`, "tasks/" + d.task_id)));
  } catch (err) {
    fill(result);
    ctx.notify(describe(err), "error");
  }
}

async function policyOptions() {
  try {
    const d = await api("GET", "/v1/retries/policies", { page_size: 100 });
    return [["", "default (5 attempts, exponential)"], ...d.items.map((p) => [p.id, `${p.name} (${plural(p.max_attempts, "attempt")}, ${p.backoff_type})`])];
  } catch (_) {
    return [["", "default"]];
  }
}

async function endpointForm(forms, e, ctx) {
  const v = e || { method: "POST", timeout_ms: 30000, headers: {} };
  const inputs = {
    name: input("name", v.name, { required: true, maxlength: 200 }),
    url: input("url", v.url, { required: true, type: "url", placeholder: "https://receiver.example/hook" }),
    method: select("method", ["POST", "PUT", "PATCH", "GET", "DELETE"].map((m) => [m, m]), v.method),
    timeout_ms: input("timeout_ms", v.timeout_ms, { type: "number", min: 1, max: 300000 }),
    retry_policy_id: select("retry_policy_id", await policyOptions(), v.retry_policy_id),
    filter_events: input("filter_events", v.filter_events, { placeholder: "order.*, invoice.paid" }),
    filter_payload: textarea("filter_payload", v.filter_payload ? JSON.stringify(v.filter_payload, null, 1) : ""),
    headers: textarea("headers", JSON.stringify(v.headers || {}, null, 1)),
    secret: input("secret", "", { type: "password", autocomplete: "new-password", placeholder: e ? "unchanged" : "generated" }),
    rate_limit_per_sec: input("rate_limit_per_sec", v.rate_limit_per_sec, { type: "number", step: "any", min: 0.01 }),
    max_in_flight: input("max_in_flight", v.max_in_flight, { type: "number", min: 1, max: 1000 }),
  };
  inputs.filter_payload.placeholder = '{"customer.tier": {"$in": ["pro"]}, "total": {"$gte": 100}}';
  // The server's 40001 for a bad filter, shown next to the box it is about.
  const filterError = h("small", { class: "error filter-error", role: "alert" });
  const clear = h("input", { type: "checkbox", name: "clear_secret" });
  forms.open(e ? `Edit endpoint ${e.id}` : "New endpoint", form([
    field("Name", inputs.name), field("URL", inputs.url), field("Method", inputs.method),
    field("Timeout (ms)", inputs.timeout_ms), field("Retry policy", inputs.retry_policy_id),
    field("Events it receives", inputs.filter_events, "comma-separated patterns; empty = every event"),
    h("div", { class: "wide" },
      field("Payload filter (JSON object)", inputs.filter_payload,
        "conditions that must all hold: dotted paths, a value or one of $eq $ne $in $nin $exists $gt $gte $lt $lte; empty = every payload"),
      filterError,
      e ? filterTester(e) : null),
    field("Headers (JSON object)", inputs.headers),
    field("Signing secret", inputs.secret, e ? (e.secret ? "has a secret" : "no secret") : "empty = a new whsec_… secret is made (signed by default)"),
    h("label", { class: "check" }, clear, e ? " remove the secret" : " unsigned (no secret)"),
    field("Rate limit (per second)", inputs.rate_limit_per_sec, "empty = no limit"),
    field("Max in flight", inputs.max_in_flight, "empty = no limit; 1 = in order"),
  ], e ? "Save" : "Create", async () => {
    const values = {
      name: inputs.name.value,
      url: inputs.url.value,
      method: inputs.method.value,
      timeout_ms: numberOrNull(inputs.timeout_ms.value, "timeout_ms"),
      retry_policy_id: numberOrNull(inputs.retry_policy_id.value, "retry_policy_id"),
      filter_events: inputs.filter_events.value.trim() || null,
      filter_payload: inputs.filter_payload.value.trim() ? parseJson(inputs.filter_payload.value, "filter_payload") : null,
      headers: parseJson(inputs.headers.value, "headers"),
      rate_limit_per_sec: numberOrNull(inputs.rate_limit_per_sec.value, "rate_limit_per_sec"),
      max_in_flight: numberOrNull(inputs.max_in_flight.value, "max_in_flight"),
    };
    let body;
    if (e) {
      body = changed(e, values);
      if (body.filter_events === null && !e.filter_events) delete body.filter_events;
      if (body.filter_payload === null && !e.filter_payload) delete body.filter_payload;
    } else {
      body = Object.fromEntries(Object.entries(values).filter(([, x]) => x !== null));
    }
    if (inputs.secret.value) body.secret = inputs.secret.value;
    if (clear.checked && e) body.clear_secret = true;
    if (clear.checked && !e) body.secret = null;
    filterError.textContent = "";
    let saved;
    try {
      saved = e
        ? await api("PATCH", `/v1/endpoints/${e.id}`, null, body)
        : await api("POST", "/v1/endpoints", null, body);
    } catch (err) {
      if (/^filter_payload/.test(err.message || "")) filterError.textContent = err.message;
      throw err;
    }
    forms.close();
    ctx.notify(`Endpoint ${saved.id} saved.`, "ok");
    ctx.go(...currentPage());
  }, () => forms.close()));
}

/** Beside the filter editor: an event name and payload tried against the endpoint's saved
 *  filters (`POST /v1/endpoints/{id}/filter-test`), answered with matches/reason. */
function filterTester(e) {
  const name = input("test_event_name", "", { placeholder: "order.created" });
  const payload = textarea("test_payload", "{}");
  payload.rows = 3;
  const answer = h("p", { class: "filter-answer", role: "status" });
  const run = async () => {
    fill(answer);
    try {
      const d = await api("POST", `/v1/endpoints/${e.id}/filter-test`, null,
        { event_name: name.value.trim(), payload: parseJson(payload.value, "payload") });
      fill(answer, badge(d.matches ? "matches" : "no match", d.matches ? "success" : "failed"), " ", d.reason);
    } catch (err) {
      fill(answer, h("span", { class: "error" }, describe(err)));
    }
  };
  return h("fieldset", { class: "filter-test" }, h("legend", null, "Try the saved filters"),
    field("Event name", name), field("Payload (JSON object)", payload),
    h("button", { type: "button", class: "filter-test-run", onclick: run }, "Test filter"), answer);
}

function rotateForm(forms, e, ctx) {
  const secret = input("secret", "", { placeholder: "empty = a new random whsec_ secret" });
  const overlap = input("overlap_secs", 86400, { type: "number", min: 0, max: 604800 });
  const shown = h("div");
  forms.open(`Rotate the secret of ${e.name}`, form([
    field("New secret", secret),
    field("Overlap (seconds)", overlap, "deliveries are signed with both secrets meanwhile"),
    shown,
  ], "Rotate", async () => {
    const body = { overlap_secs: numberOrNull(overlap.value, "overlap_secs") ?? 86400 };
    if (secret.value) body.secret = secret.value;
    const d = await api("POST", `/v1/endpoints/${e.id}/rotate-secret`, null, body);
    fill(shown, h("p", null, "New secret (give it to the receiver): "),
      h("input", { readonly: true, class: "secret", value: d.secret || "" }),
      h("p", null, "Old secret accepted until ", when(d.previous_secret_expires_at)));
  }, () => forms.close()));
}

// ---------------------------------------------------------------- schedules

/** Runs in the schedule's zone and the browser's; DST changes marked by a change of offset. */
function runsTable(runs, zone) {
  let previous = null;
  return h("table", { class: "runs" },
    h("thead", null, h("tr", null, h("th", null, `In ${zone}`), h("th", null, `Here (${browserZone})`), h("th", null, "UTC offset"))),
    h("tbody", null, runs.map((iso) => {
      const offset = utcOffset(iso, zone);
      const shift = previous !== null && offset !== previous;
      const from = previous;
      previous = offset;
      return h("tr", { class: shift ? "dst" : "" },
        h("td", null, when(iso, zone)), h("td", null, when(iso)),
        h("td", null, offset, shift ? h("span", { class: "badge dst" }, `DST change from ${from}`) : null));
    })));
}

async function schedules(main, r, ctx) {
  const status = r.params.get("status") || "";
  const forms = panel(main);
  const list = h("div", null, h("p", { class: "empty" }, "Loading…"));
  main.prepend(section("Schedules",
    select("filter-status", [["", "all"], ["active", "active"], ["paused", "paused"]], status),
    allowed("POST", "/v1/schedules", "New schedule", () => scheduleForm(forms, null, ctx), "primary")));
  main.querySelector("select[name=filter-status]").addEventListener("change", (e) => ctx.go("schedules", { status: e.target.value }));
  main.append(list);
  const data = await api("GET", "/v1/schedules", pageQuery(r.params, { status }));
  // The outcome of each schedule's latest run: its newest tasks (one request per row).
  const newest = await Promise.all(data.items.map((s) =>
    api("GET", "/v1/tasks", { schedule_id: s.id, page_size: 20 }).then((d) => d.items, () => null)));
  const latest = Object.fromEntries(data.items.map((s, i) => [s.id, newest[i]]));
  if (ctx.stale()) return;
  fill(list, table([
    ["Id", (s) => String(s.id)],
    ["Name", (s) => h("strong", { class: "name" }, s.name)],
    ["When", (s) => {
      const words = cronWords(s.cron_expr);
      return [h("code", null, s.cron_expr), words ? h("div", { class: "cron-words" }, words) : null, h("div", null, h("small", null, s.timezone)),
        s.starts_at || s.ends_at ? h("div", { class: "window" }, h("small", null,
          s.starts_at ? `from ${when(s.starts_at, s.timezone)} ` : "", s.ends_at ? `until ${when(s.ends_at, s.timezone)}` : "")) : null,
        s.jitter_sec ? h("div", null, h("small", null, `jitter up to ${s.jitter_sec} s`)) : null];
    }],
    ["Status", (s) => [badge(s.status), s.paused_reason ? h("small", null, " " + s.paused_reason) : null]],
    ["Last run", (s) => lastRun(s, latest[s.id])],
    ["Next run", (s) => s.next_run_at
      ? [h("div", null, when(s.next_run_at, s.timezone)), h("div", null, h("small", null, "here: " + when(s.next_run_at)))]
      // Active with no next run: past its window's end (a later ends_at revives it).
      : s.status === "active" && s.ends_at ? h("span", { class: "badge ended", title: "past ends_at; move ends_at later to revive it" }, "ended")
        : "—"],
    ["Targets", (s) => s.endpoint_ids.length
      ? s.endpoint_ids.map((id) => h("div", null, (s.endpoint_names || {})[id]
        ? h("a", { href: `#/endpoints/${id}` }, s.endpoint_names[id]) : `endpoint ${id}`))
      : "every enabled endpoint"],
    ["Actions", (s) => {
      const runs = h("div", { class: "runs-box" });
      return h("div", { class: "row-actions" },
        s.status === "deleted" ? null : allowed("PATCH", `/v1/schedules/${s.id}`, "Edit", () => scheduleForm(forms, s, ctx)),
        s.status === "active" ? allowed("POST", `/v1/schedules/${s.id}/pause`, "Pause", () => act(ctx, () => api("POST", `/v1/schedules/${s.id}/pause`), `Schedule ${s.name} paused.`)) : null,
        s.status === "paused" ? allowed("POST", `/v1/schedules/${s.id}/resume`, "Resume", () => act(ctx, () => api("POST", `/v1/schedules/${s.id}/resume`), `Schedule ${s.name} resumed.`)) : null,
        s.status === "deleted" ? null : allowed("POST", `/v1/schedules/${s.id}/trigger`, "Trigger now", () => act(ctx, () => api("POST", `/v1/schedules/${s.id}/trigger`),
          (d) => `Schedule ${s.name} fired: ${plural(d.task_ids.length, "task")}.`)),
        s.status === "deleted" ? null : button("Backfill", () => backfillForm(forms, s, ctx)),
        button("Next runs", async () => {
          try {
            const p = await api("POST", "/v1/cron/preview", null, { cron_expr: s.cron_expr, timezone: s.timezone, count: 10,
              starts_at: s.starts_at, ends_at: s.ends_at });
            fill(runs, runsTable(p.next_runs, s.timezone));
          } catch (err) {
            ctx.notify(describe(err), "error");
          }
        }),
        link("Tasks", "tasks", { schedule_id: s.id }),
        s.status === "deleted" ? null : allowed("DELETE", `/v1/schedules/${s.id}`, "Delete", () => confirm(`Delete schedule ${s.id}?`) &&
          act(ctx, () => api("DELETE", `/v1/schedules/${s.id}`), `Schedule ${s.id} deleted.`), "danger"),
        runs);
    }],
  ], data.items, "No schedules yet."), pager(data, Object.fromEntries(r.params), ctx, "schedules"));
}

/**
 * A schedule's latest run: when (its newest task's `run_at`: the scheduled instant, or the
 * moment of a trigger or a resend), how its tasks ended (the tasks of that run: the newest ones sharing its
 * `run_at`), and how many runs were skipped (`skipped_runs`).
 */
function lastRun(s, tasks) {
  const skipped = s.skipped_runs ? h("div", { class: "warn" }, plural(s.skipped_runs, "skipped run")) : null;
  if (!tasks || !tasks.length) return [s.last_run_at ? timeCell(s.last_run_at) : "never", skipped];
  const run = tasks.filter((t) => t.run_at === tasks[0].run_at);
  const count = {};
  for (const t of run) count[t.status] = (count[t.status] || 0) + 1;
  return [
    h("div", null, timeCell(tasks[0].run_at), tasks[0].task_type === "manual"
      ? h("small", { title: "a trigger or a resend, not a scheduled firing" }, " (by hand)") : null),
    h("div", { class: "outcome" }, Object.entries(count).map(([status, n]) =>
      link(badge(`${n} ${status}`, status), "tasks", { schedule_id: s.id, status }))),
    skipped,
  ];
}

/** Backfill: fire the schedule's instants in [from, to] that have not fired (pickers in this browser's zone). */
function backfillForm(forms, s, ctx) {
  const from = input("from", "", { type: "datetime-local", step: 1, required: true });
  const to = input("to", "", { type: "datetime-local", step: 1, required: true });
  const result = h("div", { class: "backfill-result", "aria-live": "polite" });
  forms.open(`Backfill schedule ${s.name}`, form([
    field("From", from, "in this browser's time zone; included"),
    field("To", to, "included; at most 1,000 runs between them"),
    h("p", { class: "wide" }, h("small", null, "Fires each run in the interval (inside the schedule's window) that has not fired yet, oldest first, due now. Runs that already fired are counted, not fired again, so a backfill can be repeated.")),
    h("div", { class: "wide" }, result),
  ], "Backfill", async () => {
    const d = await api("POST", `/v1/schedules/${s.id}/backfill`, null, { from: instantOrNull(from.value), to: instantOrNull(to.value) });
    const text = `Backfill of ${s.name}: ${plural(d.fired, "run")} fired, ${d.already_fired} already fired.`;
    fill(result, h("p", { class: "ok" }, text));
    ctx.notify(text, "ok");
  }, () => forms.close()));
}

async function scheduleForm(forms, s, ctx) {
  const v = s || { timezone: browserZone, payload: {}, endpoint_ids: [], catchup: "latest", overlap: "allow" };
  const zones = typeof Intl.supportedValuesOf === "function" ? Intl.supportedValuesOf("timeZone") : [];
  const inputs = {
    name: input("name", v.name, { required: true, maxlength: 200 }),
    cron_expr: input("cron_expr", v.cron_expr, { required: true, placeholder: "30 2 * * *", spellcheck: "false", autocomplete: "off" }),
    timezone: input("timezone", v.timezone, { list: "zones", required: true }),
    payload: textarea("payload", JSON.stringify(v.payload || {}, null, 1)),
    catchup: select("catchup", [["latest", "latest missed run"], ["none", "none"], ["all", "all missed runs"]], v.catchup || "latest"),
    overlap: select("overlap", [["allow", "allow"], ["skip", "skip while the previous run is pending"]], v.overlap || "allow"),
    starts_at: input("starts_at", localInput(v.starts_at), { type: "datetime-local", step: 1 }),
    ends_at: input("ends_at", localInput(v.ends_at), { type: "datetime-local", step: 1 }),
    jitter_sec: input("jitter_sec", v.jitter_sec || 0, { type: "number", min: 0, max: 3600 }),
  };
  const preview = h("div", { class: "preview", "aria-live": "polite" });
  const eps = await api("GET", "/v1/endpoints", { page_size: 100 });
  const boxes = eps.items.map((e) => h("label", { class: "check" },
    h("input", { type: "checkbox", value: String(e.id), checked: v.endpoint_ids.includes(e.id) }), " ", e.name,
    e.status === "disabled" ? h("small", null, " (disabled)") : null));
  let timer = 0, seq = 0;
  const refresh = () => {
    clearTimeout(timer);
    timer = setTimeout(async () => {
      const mine = ++seq;
      const expr = inputs.cron_expr.value.trim();
      if (!expr) return fill(preview);
      try {
        const p = await api("POST", "/v1/cron/preview", null, { cron_expr: expr, timezone: inputs.timezone.value.trim() || "UTC", count: 8,
          starts_at: instantOrNull(inputs.starts_at.value), ends_at: instantOrNull(inputs.ends_at.value) });
        const words = cronWords(expr);
        if (mine === seq) {
          fill(preview, words ? h("p", { class: "cron-words" }, `Runs ${words} (${inputs.timezone.value.trim() || "UTC"} time).`) : null,
            runsTable(p.next_runs, inputs.timezone.value.trim() || "UTC"));
        }
      } catch (err) {
        if (mine === seq) fill(preview, h("p", { class: "error" }, describe(err)));
      }
    }, 250);
  };
  inputs.cron_expr.addEventListener("input", refresh);
  inputs.timezone.addEventListener("input", refresh);
  inputs.starts_at.addEventListener("input", refresh);
  inputs.ends_at.addEventListener("input", refresh);
  forms.open(s ? `Edit schedule ${s.id}` : "New schedule", form([
    field("Name", inputs.name),
    field("Cron expression", inputs.cron_expr, "minute hour day-of-month month day-of-week, or @daily…"),
    field("Time zone", inputs.timezone), h("datalist", { id: "zones" }, zones.map((z) => h("option", { value: z }))),
    h("div", { class: "wide" }, h("span", null, "Next runs"), preview),
    field("Payload (JSON object)", inputs.payload),
    h("fieldset", { class: "wide" }, h("legend", null, "Endpoints (none ticked = every enabled endpoint)"), boxes,
      eps.total > eps.items.length ? h("small", null, `showing the newest ${eps.items.length} of ${eps.total}`) : null),
    field("Missed runs", inputs.catchup), field("Overlap", inputs.overlap),
    field("Starts at", inputs.starts_at, "runs before it do not fire; this browser's time zone; empty = no start"),
    field("Ends at", inputs.ends_at, "runs after it do not fire; the schedule stays active, ended"),
    field("Jitter (seconds)", inputs.jitter_sec, "each run's deliveries are due at a random moment up to this long after it"),
  ], s ? "Save" : "Create", async () => {
    const values = {
      name: inputs.name.value,
      cron_expr: inputs.cron_expr.value.trim(),
      timezone: inputs.timezone.value.trim() || "UTC",
      payload: parseJson(inputs.payload.value, "payload"),
      endpoint_ids: boxes.map((b) => b.firstChild).filter((b) => b.checked).map((b) => Number(b.value)),
      catchup: inputs.catchup.value,
      overlap: inputs.overlap.value,
      starts_at: instantOrNull(inputs.starts_at.value),
      ends_at: instantOrNull(inputs.ends_at.value),
      jitter_sec: numberOrNull(inputs.jitter_sec.value, "jitter_sec") ?? 0,
    };
    // catchup/overlap/window/jitter are sent only when they differ from the default (or the
    // record), so a server without them still takes the form.
    const base = { catchup: (s && s.catchup) || "latest", overlap: (s && s.overlap) || "allow",
      starts_at: (s && s.starts_at) || null, ends_at: (s && s.ends_at) || null, jitter_sec: (s && s.jitter_sec) || 0 };
    const body = s ? changed(s, values) : { ...values };
    for (const k of Object.keys(base)) if (values[k] === base[k]) delete body[k];
    const saved = s
      ? await api("PATCH", `/v1/schedules/${s.id}`, null, body)
      : await api("POST", "/v1/schedules", null, body);
    forms.close();
    ctx.notify(saved.next_run_at
      ? `Schedule ${saved.id} saved; next run ${when(saved.next_run_at, saved.timezone)} (${when(saved.next_run_at)} here).`
      : `Schedule ${saved.id} saved; no next run${saved.status === "active" && saved.ends_at ? " (ended: past ends_at)" : ""}.`, "ok");
    ctx.go(...currentPage());
  }, () => forms.close()));
  refresh();
}

// ---------------------------------------------------------------- tasks

/**
 * Records by id, for the ids a view shows (names instead of bare numbers): one GET per
 * distinct id, in parallel (a page holds at most 20 tasks). A record that is gone maps to null.
 */
async function byId(path, ids) {
  const distinct = [...new Set(ids.filter((id) => id !== null && id !== undefined))];
  const records = await Promise.all(distinct.map((id) => api("GET", `${path}/${id}`).catch((err) => {
    if (err.status === 404) return null;
    throw err;
  })));
  return Object.fromEntries(distinct.map((id, i) => [id, records[i]]));
}

/** Picker options for endpoints: their names, with the id only where two share a name. */
function endpointOptions(items) {
  const seen = {};
  for (const e of items) seen[e.name] = (seen[e.name] || 0) + 1;
  return items.map((e) => [e.id, e.name + (seen[e.name] > 1 ? ` (id ${e.id})` : "") + (e.status === "disabled" ? " (disabled)" : "")]);
}

function endpointRef(id, endpoints) {
  const e = endpoints[id];
  return e ? h("a", { class: "name", href: `#/endpoints/${id}` }, e.name) : h("span", { class: "muted" }, `endpoint ${id} (deleted)`);
}

/** Where a task came from: its schedule or event, by name. */
function origin(t, names) {
  if (t.schedule_id) {
    const s = names.schedules[t.schedule_id];
    return h("small", null, " of schedule ", link(s ? s.name : `#${t.schedule_id}`, "tasks", { schedule_id: t.schedule_id }));
  }
  if (t.event_id) {
    const e = names.events[t.event_id];
    return h("small", null, " of event ", link(e ? e.event_name : `#${t.event_id}`, "tasks", { event_id: t.event_id }));
  }
  return null;
}

function statusCell(t) {
  return [badge(t.status), t.status === "pending" && t.attempts > 0
    ? h("div", { class: "warn" }, `retrying after ${plural(t.attempts, "failed attempt")}`) : null];
}

/** A table of tasks with their endpoint, schedule and event named. */
async function taskTable(items, ctx, knownEndpoints) {
  const known = knownEndpoints || {};
  const [endpoints, schedules, events] = await Promise.all([
    byId("/v1/endpoints", items.map((t) => t.endpoint_id).filter((id) => !known[id])),
    byId("/v1/schedules", items.map((t) => t.schedule_id)),
    byId("/v1/events", items.map((t) => t.event_id)),
  ]);
  const names = { endpoints: { ...endpoints, ...known }, schedules, events };
  return table([
    ["Id", (t) => link(String(t.id), "tasks/" + t.id)],
    ["Type", (t) => [t.task_type, origin(t, names)]],
    ["Endpoint", (t) => endpointRef(t.endpoint_id, names.endpoints)],
    ["Status", statusCell],
    ["Attempts", (t) => `${t.attempts} / ${t.max_attempts}`],
    ["Last result", (t) => t.last_error
      ? h("small", { class: "error" }, (t.last_status_code && !t.last_error.includes(String(t.last_status_code)) ? `HTTP ${t.last_status_code}: ` : "") + t.last_error)
      : t.last_status_code ? `HTTP ${t.last_status_code}` : "—"],
    ["Next / finished", (t) => t.finished_at ? timeCell(t.finished_at) : timeCell(t.next_attempt_at || t.run_at)],
    ["Actions", (t) => taskActions(t, ctx)],
  ], items, "No tasks match.");
}

/** The headers an attempt was sent with (`request_headers`: [name, value] pairs in the order
 * sent, credentials as their length only, docs/API.md "Attempt"); for an attempt without them,
 * what its record implies (given the task page's context). */
function requestView(a, context) {
  const sent = a.request_headers;
  if (Array.isArray(sent)) {
    const redacted = sent.some(([, v]) => /^(\S+ )?… \(\d+ bytes\)$/.test(v));
    return h("details", { class: "request" }, h("summary", null, `Request headers (${sent.length})`),
      h("pre", null, sent.map(([k, v]) => `${k}: ${v}`).join("\n")),
      h("small", null, "As sent, besides the HTTP client's own host, content-length, accept and accept-encoding.",
        redacted ? " Credentials (Authorization, Cookie, API keys, …) are recorded as their length only." : null));
  }
  return context ? impliedRequestView(a, context.task, context.endpoint, context.event) : null;
}

/** For an attempt without recorded headers: the headers its record implies, and the
 * endpoint's current settings, marked as such. */
function impliedRequestView(a, t, endpoint, event) {
  const ts = String(Math.floor(Date.parse(a.started_at) / 1000));
  const lines = [
    `X-Service-Task-Id: ${t.id}`,
    `X-Service-Attempt: ${a.attempt}`,
    `X-Service-Timestamp: ${ts}`,
    t.event_id ? `X-Service-Event: ${event ? event.event_name : `(the name of event ${t.event_id}, no longer stored)`}` : null,
    !t.event_id && t.schedule_id ? `X-Service-Schedule-Id: ${t.schedule_id}` : null,
    `webhook-id: task_${t.id}`,
    `webhook-timestamp: ${ts}`,
  ].filter(Boolean);
  const now = endpoint ? [
    `${endpoint.method} ${endpoint.url}`,
    ["POST", "PUT", "PATCH"].includes(endpoint.method) ? "Content-Type: application/json" : null,
    ...Object.entries(endpoint.headers || {}).map(([k, v]) => `${k}: ${v}`),
    endpoint.secret ? "X-Service-Signature: (signed with the secret of that moment)" : null,
    endpoint.secret ? "webhook-signature: (signed with the secret of that moment)" : null,
  ].filter(Boolean) : [];
  return h("details", { class: "request" }, h("summary", null, "Request headers"),
    h("pre", null, lines.join("\n")),
    now.length ? [h("small", null, "From the endpoint's settings as they are now (they may have changed since this attempt):"),
      h("pre", null, now.join("\n"))] : null,
    h("small", null, "This attempt has no recorded headers (it was made before webhookd recorded them, or cut short by shutdown): the lines above are those its record implies."));
}

function attemptView(a, context) {
  return h("div", { class: "attempt" },
    h("div", null,
      h("strong", null, `#${a.attempt ?? "?"} `), resultBadge(a),
      ` ${when(a.started_at)} · ${a.duration_ms ?? "?"} ms`),
    a.error ? h("p", { class: "error" }, a.error) : null,
    requestView(a, context),
    a.response_body ? h("details", { open: true }, h("summary", null, "Reply body"), h("pre", null, a.response_body)) : h("small", null, "empty reply body"));
}

async function tasks(main, r, ctx) {
  if (r.id) return taskDetail(main, r.id, ctx);
  const p = Object.fromEntries(r.params);
  const query = pageQuery(r.params, {});
  for (const k of ["status", "task_type", "endpoint_id", "schedule_id", "event_id"]) if (p[k]) query[k] = p[k];
  const [data, eps, scheds, evs, current] = await Promise.all([
    api("GET", "/v1/tasks", query),
    api("GET", "/v1/endpoints", { page_size: 100 }),
    api("GET", "/v1/schedules", { page_size: 100 }),
    api("GET", "/v1/events", { page_size: 100 }),
    // The filtered endpoint or schedule, when it is not among the newest 100.
    byId("/v1/endpoints", [p.endpoint_id ? Number(p.endpoint_id) : null]),
  ]);
  if (ctx.stale()) return;
  const withCurrent = (items, id) => id && !items.some((x) => String(x.id) === String(id)) && current[id]
    ? [current[id], ...items] : items;
  const filters = {
    status: select("filter-status", [["", "any status"], ...STATUS_CHOICES], p.status),
    task_type: select("filter-task_type", [["", "any type"], ["schedule", "schedule"], ["event", "event"], ["manual", "manual"]], p.task_type),
    endpoint_id: select("filter-endpoint_id", [["", "any endpoint"], ...endpointOptions(withCurrent(eps.items, p.endpoint_id))], p.endpoint_id),
    schedule_id: select("filter-schedule_id", [["", "any schedule"],
      ...scheds.items.map((s) => [s.id, s.name + (s.status === "deleted" ? " (deleted)" : "")]),
      ...(p.schedule_id && !scheds.items.some((s) => String(s.id) === p.schedule_id) ? [[p.schedule_id, `schedule ${p.schedule_id}`]] : [])], p.schedule_id),
    event_id: select("filter-event_id", [["", "any event"],
      ...evs.items.map((e) => [e.id, `${e.event_name}, ${when(e.created_at)}`]),
      ...(p.event_id && !evs.items.some((e) => String(e.id) === p.event_id) ? [[p.event_id, `event ${p.event_id}`]] : [])], p.event_id),
  };
  const apply = () => ctx.go("tasks", Object.fromEntries(Object.entries(filters).map(([k, el]) => [k, el.value])));
  for (const el of Object.values(filters)) el.addEventListener("change", apply);
  const forms = panel(main);
  const list = h("div", null, h("p", { class: "empty" }, "Loading…"));
  // Bulk retry (docs/design.md §12) of what the filter shows, when it names an endpoint, schedule or
  // event and shows failed or canceled tasks.
  const scoped = ["endpoint_id", "schedule_id", "event_id"].filter((k) => p[k]);
  const bulkStatus = p.status === "canceled" ? "canceled" : "failed";
  const bulk = scoped.length && (!p.status || p.status === bulkStatus)
    ? allowed("POST", "/v1/tasks/retry", `Retry all ${bulkStatus}`, () => confirm(`Retry every ${bulkStatus} task that matches this filter?`) &&
      act(ctx, () => api("POST", "/v1/tasks/retry", null,
        { status: bulkStatus, ...Object.fromEntries(scoped.map((k) => [k, Number(p[k])])) }),
      (d) => `${plural(d.count, "task")} ${d.count === 1 ? "is" : "are"} pending again${d.more ? " (more remain: retry again)" : ""}.`))
    : null;
  main.prepend(section("Tasks", bulk, allowed("POST", "/v1/tasks", "New manual task", () => taskForm(forms, ctx, p.endpoint_id), "primary")),
    h("div", { class: "filters" }, Object.values(filters)));
  main.append(list);
  fill(list, await taskTable(data.items, ctx), pager(data, p, ctx, "tasks"));
}

function taskActions(t, ctx, inDetail) {
  return h("div", { class: "row-actions" },
    inDetail ? null : link("Attempts", "tasks/" + t.id),
    t.status === "failed" || t.status === "canceled"
      ? allowed("POST", `/v1/tasks/${t.id}/retry`, "Retry", () => act(ctx, () => api("POST", `/v1/tasks/${t.id}/retry`), `Task ${t.id} is pending again.`), "primary") : null,
    t.status === "pending"
      ? allowed("POST", `/v1/tasks/${t.id}/cancel`, "Cancel", () => act(ctx, () => api("POST", `/v1/tasks/${t.id}/cancel`), `Task ${t.id} canceled.`), "danger") : null,
    allowed("POST", `/v1/tasks/${t.id}/resend`, "Resend", async () => {
      try {
        const copy = await api("POST", `/v1/tasks/${t.id}/resend`);
        ctx.notify(`Task ${t.id} resent as task ${copy.id} (the same payload, a new delivery).`, "ok");
        ctx.go("tasks/" + copy.id);
      } catch (err) {
        ctx.notify(describe(err), "error");
      }
    }));
}

async function taskDetail(main, id, ctx) {
  const page = Number(new URLSearchParams(location.hash.split("?")[1] || "").get("page")) || 1;
  const [t, attempts] = await Promise.all([
    api("GET", `/v1/tasks/${id}`),
    api("GET", `/v1/tasks/${id}/attempts`, { page, page_size: PAGE_SIZE }),
  ]);
  const [endpoints, schedules, events] = await Promise.all([
    byId("/v1/endpoints", [t.endpoint_id]), byId("/v1/schedules", [t.schedule_id]), byId("/v1/events", [t.event_id]),
  ]);
  if (ctx.stale()) return;
  const names = { endpoints, schedules, events };
  const context = { task: t, endpoint: endpoints[t.endpoint_id], event: events[t.event_id] };
  fill(main,
    section(`Task ${t.id}`, link("← this endpoint's tasks", "tasks", { endpoint_id: t.endpoint_id }), taskActions(t, ctx, true)),
    h("dl", { class: "facts" },
      fact("Status", statusCell(t)),
      fact("Type", [t.task_type, origin(t, names)]), fact("Endpoint", endpointRef(t.endpoint_id, endpoints)),
      fact("Attempts", `${t.attempts} of ${t.max_attempts}`), fact("Run at", timeCell(t.run_at)),
      fact("Next attempt", timeCell(t.next_attempt_at)), fact("Finished", timeCell(t.finished_at)),
      t.last_error ? fact("Last error", h("span", { class: "error" }, t.last_error)) : null,
      fact("Trace id", t.trace_id ? copyable(t.trace_id, ctx) : h("small", null, "none (made before traces)"))),
    h("details", null, h("summary", null, "Payload"), h("pre", null, JSON.stringify(t.payload, null, 2))),
    h("h3", null, `Attempts (${attempts.total})`),
    attempts.items.length ? attempts.items.map((a) => attemptView(a, context)) : h("p", { class: "empty" }, "Not attempted yet."),
    pager(attempts, {}, ctx, "tasks/" + t.id));
}

function fact(name, value) {
  return h("div", null, h("dt", null, name), h("dd", null, value));
}

/** `text` in monospace with a button that copies it (to search a trace viewer or the logs). */
function copyable(text, ctx) {
  return [h("code", null, text), " ", button("Copy", async () => {
    try {
      await navigator.clipboard.writeText(text);
      ctx.notify("Copied.", "ok");
    } catch {
      ctx.notify("The browser refused the clipboard; select the text to copy it.", "error");
    }
  })];
}

/** A manual task: the endpoint picked by name (`endpointId` preselected). */
async function taskForm(forms, ctx, endpointId) {
  const eps = await api("GET", "/v1/endpoints", { page_size: 100 });
  if (!eps.items.length) {
    return forms.open("New manual task", h("p", null, "Add an endpoint first: ", link("Endpoints", "endpoints"), "."));
  }
  const endpoint = select("endpoint_id", endpointOptions(eps.items), endpointId);
  const payload = textarea("payload", "{}");
  const runAt = input("run_at", "", { type: "datetime-local" });
  forms.open("New manual task", form([
    field("Endpoint", endpoint, eps.total > eps.items.length ? `the newest ${eps.items.length} of ${eps.total}` : null),
    field("Payload (JSON object)", payload),
    field("Deliver at", runAt, "empty = now; in this browser's time zone"),
  ], "Create", async () => {
    const body = { endpoint_id: Number(endpoint.value), payload: parseJson(payload.value, "payload") };
    if (runAt.value) body.run_at = new Date(runAt.value).toISOString().replace(/\.\d{3}Z$/, "Z");
    const t = await api("POST", "/v1/tasks", null, body);
    forms.close();
    ctx.go("tasks/" + t.id);
  }, () => forms.close()));
}

// ---------------------------------------------------------------- events

async function events(main, r, ctx) {
  const name = r.params.get("event_name") || "";
  const forms = panel(main);
  const filter = input("filter-event_name", name, { placeholder: "event name" });
  filter.addEventListener("change", () => ctx.go("events", { event_name: filter.value.trim() }));
  const list = h("div", null, h("p", { class: "empty" }, "Loading…"));
  main.prepend(section("Events", filter, allowed("POST", "/v1/events", "Publish event", () => eventForm(forms, ctx), "primary")));
  main.append(list);
  const data = await api("GET", "/v1/events", pageQuery(r.params, { event_name: name }));
  if (ctx.stale()) return;
  fill(list, table([
    ["Id", (e) => String(e.id)],
    ["Name", (e) => h("code", null, e.event_name)],
    ["Key", (e) => e.event_key || "—"],
    ["Published", (e) => timeCell(e.created_at)],
    ["Tasks", (e) => link(plural(e.task_count, "task"), "tasks", { event_id: e.id })],
    ["Payload", (e) => h("details", null, h("summary", null, "show"), h("pre", null, JSON.stringify(e.payload, null, 2)))],
  ], data.items, "No events yet."), pager(data, Object.fromEntries(r.params), ctx, "events"));
}

function eventForm(forms, ctx) {
  const name = input("event_name", "", { required: true, maxlength: 200, pattern: "[A-Za-z0-9._:\\-]+", placeholder: "order.created" });
  const key = input("event_key", "", { placeholder: "optional idempotency key" });
  const payload = textarea("payload", "{}");
  forms.open("Publish an event", form([field("Event name", name), field("Event key", key), field("Payload (JSON object)", payload)],
    "Publish", async () => {
      const body = { event_name: name.value.trim(), payload: parseJson(payload.value, "payload") };
      if (key.value.trim()) body.event_key = key.value.trim();
      const e = await api("POST", "/v1/events", null, body);
      forms.close();
      ctx.notify(`Event ${e.id} published: ${plural(e.task_count, "task")}.`, "ok");
      ctx.go("events");
    }, () => forms.close()));
}

// ---------------------------------------------------------------- retry policies

async function policies(main, r, ctx) {
  const forms = panel(main);
  const list = h("div", null, h("p", { class: "empty" }, "Loading…"));
  main.prepend(section("Retry policies", allowed("POST", "/v1/retries/policies", "New policy", () => policyForm(forms, null, ctx), "primary")));
  main.append(list);
  const data = await api("GET", "/v1/retries/policies", pageQuery(r.params, {}));
  if (ctx.stale()) return;
  fill(list, h("p", null, h("small", null, "Endpoints without a policy use the default: 5 attempts, exponential, 60 s initial, 3600 s max.")),
    table([
      ["Id", (p) => String(p.id)],
      ["Name", (p) => h("strong", { class: "name" }, p.name)],
      ["Attempts", (p) => String(p.max_attempts)],
      ["Backoff", (p) => `${p.backoff_type}, ${p.initial_delay_sec} s … ${p.max_delay_sec} s${p.jitter === "full" ? ", jittered" : ""}`],
      ["Max age", (p) => p.max_age_sec ? `${p.max_age_sec} s` : "—"],
      ["Actions", (p) => h("div", { class: "row-actions" },
        allowed("PATCH", `/v1/retries/policies/${p.id}`, "Edit", () => policyForm(forms, p, ctx)),
        allowed("DELETE", `/v1/retries/policies/${p.id}`, "Delete", () => confirm(`Delete retry policy ${p.id}?`) &&
          act(ctx, () => api("DELETE", `/v1/retries/policies/${p.id}`), `Policy ${p.id} deleted.`), "danger"))],
    ], data.items, "No retry policies yet."), pager(data, Object.fromEntries(r.params), ctx, "policies"));
}

function policyForm(forms, p, ctx) {
  const v = p || { max_attempts: 5, backoff_type: "exponential", initial_delay_sec: 60, max_delay_sec: 3600, max_age_sec: null, jitter: "none" };
  const inputs = {
    name: input("name", v.name, { required: true, maxlength: 200 }),
    max_attempts: input("max_attempts", v.max_attempts, { type: "number", min: 1, max: 100, required: true }),
    backoff_type: select("backoff_type", [["exponential", "exponential"], ["linear", "linear"], ["fixed", "fixed"]], v.backoff_type),
    initial_delay_sec: input("initial_delay_sec", v.initial_delay_sec, { type: "number", min: 0, max: 86400 }),
    max_delay_sec: input("max_delay_sec", v.max_delay_sec, { type: "number", min: 0, max: 604800 }),
    max_age_sec: input("max_age_sec", v.max_age_sec, { type: "number", min: 1, placeholder: "no limit" }),
    jitter: select("jitter", [["none", "none"], ["full", "full: each delay drawn from [delay/2, delay]"]], v.jitter),
  };
  forms.open(p ? `Edit retry policy ${p.id}` : "New retry policy", form(
    Object.entries(inputs).map(([k, el]) => field(k.replaceAll("_", " "), el)),
    p ? "Save" : "Create", async () => {
      const values = {
        name: inputs.name.value,
        max_attempts: numberOrNull(inputs.max_attempts.value, "max_attempts"),
        backoff_type: inputs.backoff_type.value,
        initial_delay_sec: numberOrNull(inputs.initial_delay_sec.value, "initial_delay_sec"),
        max_delay_sec: numberOrNull(inputs.max_delay_sec.value, "max_delay_sec"),
        max_age_sec: numberOrNull(inputs.max_age_sec.value, "max_age_sec"),
        jitter: inputs.jitter.value,
      };
      const saved = p
        ? await api("PATCH", `/v1/retries/policies/${p.id}`, null, changed(p, values))
        : await api("POST", "/v1/retries/policies", null, values);
      forms.close();
      ctx.notify(`Retry policy ${saved.id} saved.`, "ok");
      ctx.go(...currentPage());
    }, () => forms.close()));
}

// ---------------------------------------------------------------- API keys

const SCOPES = [
  ["admin", "admin: everything, API keys included"],
  ["write", "write: everything but API keys"],
  ["read", "read: look (GET) and preview cron only"],
];

/**
 * The app's API keys (admin keys only; docs/API.md, "Keys"): list, create (the secret shown
 * once), revoke. Another scope sees why it cannot, and its own key's record.
 */
async function keys(main, r, ctx) {
  const creds = loadCredentials();
  const forms = panel(main);
  const list = h("div", null, h("p", { class: "empty" }, "Loading…"));
  main.prepend(section("API keys", allowed("POST", "/v1/keys", "New key", () => keyForm(forms, ctx), "primary")));
  main.append(list);
  const reason = denied("GET", "/v1/keys");
  if (reason) {
    const own = await api("GET", "/v1/keys/" + encodeURIComponent(creds.keyId));
    if (ctx.stale()) return;
    fill(list,
      h("p", { class: "denied-note", "data-denied": reason }, `Only admin keys manage API keys (${reason}). The key you are signed in with:`),
      keyTable([own], ctx, creds));
    return;
  }
  const data = await api("GET", "/v1/keys", pageQuery(r.params, {}));
  if (ctx.stale()) return;
  fill(list,
    h("p", null, h("small", null, "Every request signed with a key is checked against its scope. Revoking a key refuses it at once, on every node.")),
    keyTable(data.items, ctx, creds),
    pager(data, Object.fromEntries(r.params), ctx, "keys"));
}

function keyState(k) {
  if (k.revoked_at) return badge("revoked", "canceled");
  if (k.expires_at && new Date(k.expires_at).getTime() <= Date.now()) return badge("expired", "failed");
  return badge("active", "active");
}

function keyTable(items, ctx, creds) {
  return table([
    ["Key id", (k) => h("code", null, k.id)],
    ["Name", (k) => h("strong", { class: "name" }, k.name)],
    ["Scope", (k) => badge(k.scope, "scope")],
    ["State", keyState],
    ["Created", (k) => timeCell(k.created_at)],
    ["Expires", (k) => (k.expires_at ? timeCell(k.expires_at) : "never")],
    ["Last used", (k) => (k.last_used_at ? timeCell(k.last_used_at) : "never")],
    ["Actions", (k) => (k.revoked_at ? h("small", null, "revoked ", timeCell(k.revoked_at)) : revokeButton(k, ctx, creds))],
  ], items, "No keys.");
}

function revokeButton(k, ctx, creds) {
  const b = allowed("DELETE", `/v1/keys/${k.id}`, "Revoke", () =>
    confirm(`Revoke key ${k.name} (${k.id})? Requests signed with it are refused from now on.`) &&
    act(ctx, () => api("DELETE", `/v1/keys/${encodeURIComponent(k.id)}`), `Key ${k.name} revoked.`), "danger");
  if (k.id === creds.keyId && !b.disabled) {
    greyOut(b, "this is the key you are signed in with; a key cannot revoke itself");
  }
  return b;
}

function keyForm(forms, ctx) {
  const inputs = {
    name: input("name", "", { required: true, maxlength: 200, placeholder: "status page" }),
    scope: select("scope", SCOPES, "read"),
    expires_in_days: input("expires_in_days", "", { type: "number", min: 1, max: 36500, placeholder: "never" }),
  };
  forms.open("New API key", form([
    field("name", inputs.name),
    field("scope", inputs.scope),
    field("expires in (days)", inputs.expires_in_days, "Empty: the key never expires."),
  ], "Create", async () => {
    const body = { name: inputs.name.value, scope: inputs.scope.value };
    const days = numberOrNull(inputs.expires_in_days.value, "expires in (days)");
    if (days !== null) body.expires_at = Math.floor(Date.now() / 1000) + Math.round(days * 86400);
    const key = await api("POST", "/v1/keys", null, body);
    // The secret is in this reply only: show it until the user closes the panel.
    forms.open(`Key ${key.name} created`,
      h("p", { class: "secret-once", role: "alert" }, "Copy the secret now: it is shown this once and never again."),
      h("dl", { class: "facts" },
        h("dt", null, "Key id"), h("dd", null, h("code", { class: "key-id" }, key.id)),
        h("dt", null, "Secret"), h("dd", null, h("code", { class: "key-secret" }, key.secret)),
        h("dt", null, "Scope"), h("dd", null, key.scope),
        h("dt", null, "Expires"), h("dd", null, key.expires_at ? when(key.expires_at) : "never")),
      h("div", { class: "actions" }, button("Done", () => {
        forms.close();
        ctx.go(...currentPage());
      }, "primary")));
  }, () => forms.close()));
}

export const PAGES = { overview, endpoints, schedules, tasks, events, policies, keys };
