// The dashboard's pages. Each is `async (main, route, ctx)` and fills `main`. Lists page
// through the API (page_size 20 here); nothing loads a whole table.
import { api, metrics } from "./api.js";
import {
  h, fill, when, relative, table, badge, button, field, parseJson, utcOffset, browserZone,
} from "./dom.js";

const PAGE_SIZE = 20;
const TASK_STATUSES = ["pending", "retrying", "running", "success", "failed", "canceled"];

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
  // (contract §11) refuses that filter: its card says so instead of failing the page.
  const totals = await Promise.all(TASK_STATUSES.map((s) =>
    api("GET", "/v1/tasks", { status: s, page_size: 1 }).then((d) => d.total, (err) => {
      if (err.status === 400) return null;
      throw err;
    })));
  if (ctx.stale()) return;
  fill(counts, TASK_STATUSES.map((s, i) => totals[i] === null
    ? h("div", { class: "card", title: "this server does not filter by " + s }, h("strong", null, "—"), h("span", null, s))
    : h("a", { class: "card " + s, href: "#/tasks?status=" + s }, h("strong", null, String(totals[i])), h("span", null, s))));

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

function card(label, value) {
  return h("div", { class: "card" }, h("strong", null, String(value)), h("span", null, label));
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
  const max = Math.max(1, ...buckets.map((b) => b.success + b.failed));
  const ok = buckets.reduce((n, b) => n + b.success, 0);
  const bad = buckets.reduce((n, b) => n + b.failed, 0);
  const bars = buckets.map((b, i) => {
    const hourStart = new Date(start + i * 3600e3).toISOString();
    const col = h("div", { class: "bar", title: `${when(hourStart)}: ${b.success} ok, ${b.failed} failed` },
      h("div", { class: "failed" }), h("div", { class: "success" }));
    // Heights set through the CSSOM (the CSP forbids inline style attributes, not this).
    col.children[0].style.height = (100 * b.failed) / max + "%";
    col.children[1].style.height = (100 * b.success) / max + "%";
    return col;
  });
  fill(chart,
    h("p", { class: "legend" }, badge(`${ok} succeeded`, "success"), " ", badge(`${bad} failed`, "failed"),
      capped ? h("small", null, " (counted from the newest 1000 tasks of each status)") : null,
      bad ? [" ", link("see failed tasks", "tasks", { status: "failed" })] : null),
    h("div", { class: "bars", role: "img", "aria-label": `${ok} succeeded, ${bad} failed` }, bars),
    h("div", { class: "axis" }, h("span", null, when(new Date(start).toISOString())), h("span", null, "now")));
}

// ---------------------------------------------------------------- endpoints

function health(e) {
  const parts = [];
  if (e.status === "disabled") parts.push(badge(e.disabled_reason ? `disabled: ${e.disabled_reason}` : "disabled", "disabled"));
  else parts.push(badge("enabled", "enabled"));
  if (e.consecutive_failures) parts.push(h("div", { class: "warn" }, `${e.consecutive_failures} failures in a row`));
  if (e.last_success_at !== undefined) parts.push(h("div", null, h("small", null, "last ok: "), timeCell(e.last_success_at)));
  if (e.last_failure_at) parts.push(h("div", null, h("small", null, "last failure: "), timeCell(e.last_failure_at)));
  return parts;
}

async function endpoints(main, r, ctx) {
  const status = r.params.get("status") || "";
  const forms = panel(main);
  const list = h("div", null, h("p", { class: "empty" }, "Loading…"));
  const result = h("div");
  main.prepend(section("Endpoints",
    select("filter-status", [["", "all"], ["enabled", "enabled"], ["disabled", "disabled"]], status),
    button("New endpoint", () => endpointForm(forms, null, ctx), "primary")));
  main.querySelector("select[name=filter-status]").addEventListener("change", (e) => ctx.go("endpoints", { status: e.target.value }));
  main.append(result, list);
  const data = await api("GET", "/v1/endpoints", pageQuery(r.params, { status }));
  if (ctx.stale()) return;
  fill(list, table([
    ["Id", (e) => String(e.id)],
    ["Name", (e) => h("strong", { class: "name" }, e.name)],
    ["Target", (e) => h("code", { class: "url" }, `${e.method} ${e.url}`)],
    ["Health", health],
    ["Actions", (e) => h("div", { class: "row-actions" },
      button("Edit", () => endpointForm(forms, e, ctx)),
      e.status === "enabled"
        ? button("Disable", () => act(ctx, () => api("POST", `/v1/endpoints/${e.id}/disable`), `Endpoint ${e.id} disabled.`))
        : button("Enable", () => act(ctx, () => api("POST", `/v1/endpoints/${e.id}/enable`), `Endpoint ${e.id} enabled.`)),
      button("Send test", () => testDelivery(result, e, ctx)),
      button("Rotate secret", () => rotateForm(forms, e, ctx)),
      link("Tasks", "tasks", { endpoint_id: e.id }),
      button("Delete", () => confirm(`Delete endpoint ${e.id}? Its pending tasks are canceled.`) &&
        act(ctx, () => api("DELETE", `/v1/endpoints/${e.id}`), `Endpoint ${e.id} deleted.`), "danger"))],
  ], data.items, "No endpoints yet: add one with “New endpoint”."), pager(data, Object.fromEntries(r.params), ctx, "endpoints"));
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
    return [["", "default (5 attempts, exponential)"], ...d.items.map((p) => [p.id, `${p.id}: ${p.name}`])];
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
    headers: textarea("headers", JSON.stringify(v.headers || {}, null, 1)),
    secret: input("secret", "", { type: "password", autocomplete: "new-password", placeholder: e ? "unchanged" : "none" }),
    rate_limit_per_sec: input("rate_limit_per_sec", v.rate_limit_per_sec, { type: "number", step: "any", min: 0.01 }),
    max_in_flight: input("max_in_flight", v.max_in_flight, { type: "number", min: 1, max: 1000 }),
  };
  const clear = h("input", { type: "checkbox", name: "clear_secret" });
  forms.open(e ? `Edit endpoint ${e.id}` : "New endpoint", form([
    field("Name", inputs.name), field("URL", inputs.url), field("Method", inputs.method),
    field("Timeout (ms)", inputs.timeout_ms), field("Retry policy", inputs.retry_policy_id),
    field("Events it receives", inputs.filter_events, "comma-separated patterns; empty = every event"),
    field("Headers (JSON object)", inputs.headers),
    field("Signing secret", inputs.secret, e ? (e.secret ? "has a secret" : "no secret") : "optional; whsec_… for Standard Webhooks"),
    e ? h("label", { class: "check" }, clear, " remove the secret") : null,
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
      headers: parseJson(inputs.headers.value, "headers"),
      rate_limit_per_sec: numberOrNull(inputs.rate_limit_per_sec.value, "rate_limit_per_sec"),
      max_in_flight: numberOrNull(inputs.max_in_flight.value, "max_in_flight"),
    };
    let body;
    if (e) {
      body = changed(e, values);
      if (body.filter_events === null && !e.filter_events) delete body.filter_events;
    } else {
      body = Object.fromEntries(Object.entries(values).filter(([, x]) => x !== null));
    }
    if (inputs.secret.value) body.secret = inputs.secret.value;
    if (clear.checked) body.clear_secret = true;
    const saved = e
      ? await api("PATCH", `/v1/endpoints/${e.id}`, null, body)
      : await api("POST", "/v1/endpoints", null, body);
    forms.close();
    ctx.notify(`Endpoint ${saved.id} saved.`, "ok");
    ctx.go(...currentPage());
  }, () => forms.close()));
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
    button("New schedule", () => scheduleForm(forms, null, ctx), "primary")));
  main.querySelector("select[name=filter-status]").addEventListener("change", (e) => ctx.go("schedules", { status: e.target.value }));
  main.append(list);
  const data = await api("GET", "/v1/schedules", pageQuery(r.params, { status }));
  if (ctx.stale()) return;
  fill(list, table([
    ["Id", (s) => String(s.id)],
    ["Name", (s) => h("strong", { class: "name" }, s.name)],
    ["When", (s) => [h("code", null, s.cron_expr), h("div", null, h("small", null, s.timezone))]],
    ["Status", (s) => [badge(s.status), s.paused_reason ? h("small", null, " " + s.paused_reason) : null]],
    ["Next run", (s) => s.next_run_at
      ? [h("div", null, when(s.next_run_at, s.timezone)), h("div", null, h("small", null, "here: " + when(s.next_run_at)))]
      : "—"],
    ["Targets", (s) => s.endpoint_ids.length
      ? s.endpoint_ids.map((id) => h("div", null, `${id}: `, (s.endpoint_names || {})[id] || "?"))
      : "every enabled endpoint"],
    ["Actions", (s) => {
      const runs = h("div", { class: "runs-box" });
      return h("div", { class: "row-actions" },
        s.status === "deleted" ? null : button("Edit", () => scheduleForm(forms, s, ctx)),
        s.status === "active" ? button("Pause", () => act(ctx, () => api("POST", `/v1/schedules/${s.id}/pause`), `Schedule ${s.id} paused.`)) : null,
        s.status === "paused" ? button("Resume", () => act(ctx, () => api("POST", `/v1/schedules/${s.id}/resume`), `Schedule ${s.id} resumed.`)) : null,
        s.status === "deleted" ? null : button("Trigger now", () => act(ctx, () => api("POST", `/v1/schedules/${s.id}/trigger`),
          (d) => `Schedule ${s.id} fired: ${d.task_ids.length} task(s).`)),
        button("Next runs", async () => {
          try {
            const p = await api("POST", "/v1/cron/preview", null, { cron_expr: s.cron_expr, timezone: s.timezone, count: 10 });
            fill(runs, runsTable(p.next_runs, s.timezone));
          } catch (err) {
            ctx.notify(describe(err), "error");
          }
        }),
        link("Tasks", "tasks", { schedule_id: s.id }),
        s.status === "deleted" ? null : button("Delete", () => confirm(`Delete schedule ${s.id}?`) &&
          act(ctx, () => api("DELETE", `/v1/schedules/${s.id}`), `Schedule ${s.id} deleted.`), "danger"),
        runs);
    }],
  ], data.items, "No schedules yet."), pager(data, Object.fromEntries(r.params), ctx, "schedules"));
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
  };
  const preview = h("div", { class: "preview", "aria-live": "polite" });
  const eps = await api("GET", "/v1/endpoints", { page_size: 100 });
  const boxes = eps.items.map((e) => h("label", { class: "check" },
    h("input", { type: "checkbox", value: String(e.id), checked: v.endpoint_ids.includes(e.id) }), ` ${e.id}: `, e.name));
  let timer = 0, seq = 0;
  const refresh = () => {
    clearTimeout(timer);
    timer = setTimeout(async () => {
      const mine = ++seq;
      const expr = inputs.cron_expr.value.trim();
      if (!expr) return fill(preview);
      try {
        const p = await api("POST", "/v1/cron/preview", null, { cron_expr: expr, timezone: inputs.timezone.value.trim() || "UTC", count: 8 });
        if (mine === seq) fill(preview, runsTable(p.next_runs, inputs.timezone.value.trim() || "UTC"));
      } catch (err) {
        if (mine === seq) fill(preview, h("p", { class: "error" }, describe(err)));
      }
    }, 250);
  };
  inputs.cron_expr.addEventListener("input", refresh);
  inputs.timezone.addEventListener("input", refresh);
  forms.open(s ? `Edit schedule ${s.id}` : "New schedule", form([
    field("Name", inputs.name),
    field("Cron expression", inputs.cron_expr, "minute hour day-of-month month day-of-week, or @daily…"),
    field("Time zone", inputs.timezone), h("datalist", { id: "zones" }, zones.map((z) => h("option", { value: z }))),
    h("div", { class: "wide" }, h("span", null, "Next runs"), preview),
    field("Payload (JSON object)", inputs.payload),
    h("fieldset", { class: "wide" }, h("legend", null, "Endpoints (none ticked = every enabled endpoint)"), boxes,
      eps.total > eps.items.length ? h("small", null, `showing the newest ${eps.items.length} of ${eps.total}`) : null),
    field("Missed runs", inputs.catchup), field("Overlap", inputs.overlap),
  ], s ? "Save" : "Create", async () => {
    const values = {
      name: inputs.name.value,
      cron_expr: inputs.cron_expr.value.trim(),
      timezone: inputs.timezone.value.trim() || "UTC",
      payload: parseJson(inputs.payload.value, "payload"),
      endpoint_ids: boxes.map((b) => b.firstChild).filter((b) => b.checked).map((b) => Number(b.value)),
      catchup: inputs.catchup.value,
      overlap: inputs.overlap.value,
    };
    // catchup/overlap are sent only when they differ from the default (or the record), so a
    // server without them still takes the form.
    const base = { catchup: (s && s.catchup) || "latest", overlap: (s && s.overlap) || "allow" };
    const body = s ? changed(s, values) : { ...values };
    for (const k of ["catchup", "overlap"]) if (values[k] === base[k]) delete body[k];
    const saved = s
      ? await api("PATCH", `/v1/schedules/${s.id}`, null, body)
      : await api("POST", "/v1/schedules", null, body);
    forms.close();
    ctx.notify(`Schedule ${saved.id} saved; next run ${when(saved.next_run_at, saved.timezone)} (${when(saved.next_run_at)} here).`, "ok");
    ctx.go(...currentPage());
  }, () => forms.close()));
  refresh();
}

// ---------------------------------------------------------------- tasks

function attemptView(a) {
  return h("div", { class: "attempt" },
    h("div", null,
      h("strong", null, `#${a.attempt ?? "?"} `),
      a.status_code === null || a.status_code === undefined ? badge("no reply", "failed") : badge(`HTTP ${a.status_code}`, a.status_code >= 200 && a.status_code < 300 ? "success" : "failed"),
      ` ${when(a.started_at)} · ${a.duration_ms ?? "?"} ms`),
    a.error ? h("p", { class: "error" }, a.error) : null,
    a.response_body ? h("details", { open: true }, h("summary", null, "Reply body"), h("pre", null, a.response_body)) : h("small", null, "empty reply body"));
}

async function tasks(main, r, ctx) {
  if (r.id) return taskDetail(main, r.id, ctx);
  const p = Object.fromEntries(r.params);
  const filters = {
    status: select("filter-status", [["", "any status"], ...TASK_STATUSES.map((s) => [s, s])], p.status),
    task_type: select("filter-task_type", [["", "any type"], ["schedule", "schedule"], ["event", "event"], ["manual", "manual"]], p.task_type),
    endpoint_id: input("filter-endpoint_id", p.endpoint_id, { type: "number", min: 1, placeholder: "endpoint id" }),
    schedule_id: input("filter-schedule_id", p.schedule_id, { type: "number", min: 1, placeholder: "schedule id" }),
    event_id: input("filter-event_id", p.event_id, { type: "number", min: 1, placeholder: "event id" }),
  };
  const apply = () => ctx.go("tasks", Object.fromEntries(Object.entries(filters).map(([k, el]) => [k, el.value])));
  for (const el of Object.values(filters)) el.addEventListener("change", apply);
  const forms = panel(main);
  const list = h("div", null, h("p", { class: "empty" }, "Loading…"));
  // Bulk retry (contract §12) of what the filter shows, when it names an endpoint, schedule or
  // event and shows failed or canceled tasks.
  const scoped = ["endpoint_id", "schedule_id", "event_id"].filter((k) => p[k]);
  const bulkStatus = p.status === "canceled" ? "canceled" : "failed";
  const bulk = scoped.length && (!p.status || p.status === bulkStatus)
    ? button(`Retry all ${bulkStatus}`, () => confirm(`Retry every ${bulkStatus} task that matches this filter?`) &&
      act(ctx, () => api("POST", "/v1/tasks/retry", null,
        { status: bulkStatus, ...Object.fromEntries(scoped.map((k) => [k, Number(p[k])])) }),
      (d) => `${d.count} task(s) are pending again${d.more ? " (more remain: retry again)" : ""}.`))
    : null;
  main.prepend(section("Tasks", bulk, button("New manual task", () => taskForm(forms, ctx), "primary")),
    h("div", { class: "filters" }, Object.values(filters)));
  main.append(list);
  const query = pageQuery(r.params, {});
  for (const k of Object.keys(filters)) if (p[k]) query[k] = p[k];
  const data = await api("GET", "/v1/tasks", query);
  if (ctx.stale()) return;
  fill(list, table([
    ["Id", (t) => link(String(t.id), "tasks/" + t.id)],
    ["Type", (t) => [t.task_type, t.schedule_id ? h("small", null, ` schedule ${t.schedule_id}`) : null, t.event_id ? h("small", null, ` event ${t.event_id}`) : null]],
    ["Endpoint", (t) => link(String(t.endpoint_id), "tasks", { endpoint_id: t.endpoint_id })],
    ["Status", (t) => [badge(t.status), t.status === "pending" && t.attempts > 0 ? badge("retrying", "retrying") : null]],
    ["Attempts", (t) => `${t.attempts} / ${t.max_attempts}`],
    ["Last result", (t) => t.last_error
      ? h("small", { class: "error" }, (t.last_status_code && !t.last_error.includes(String(t.last_status_code)) ? `HTTP ${t.last_status_code}: ` : "") + t.last_error)
      : t.last_status_code ? `HTTP ${t.last_status_code}` : "—"],
    ["Next / finished", (t) => t.finished_at ? timeCell(t.finished_at) : timeCell(t.next_attempt_at || t.run_at)],
    ["Actions", (t) => taskActions(t, ctx)],
  ], data.items, "No tasks match."), pager(data, p, ctx, "tasks"));
}

function taskActions(t, ctx, inDetail) {
  return h("div", { class: "row-actions" },
    inDetail ? null : link("Attempts", "tasks/" + t.id),
    t.status === "failed" || t.status === "canceled"
      ? button("Retry", () => act(ctx, () => api("POST", `/v1/tasks/${t.id}/retry`), `Task ${t.id} is pending again.`), "primary") : null,
    t.status === "pending"
      ? button("Cancel", () => act(ctx, () => api("POST", `/v1/tasks/${t.id}/cancel`), `Task ${t.id} canceled.`), "danger") : null);
}

async function taskDetail(main, id, ctx) {
  const page = Number(new URLSearchParams(location.hash.split("?")[1] || "").get("page")) || 1;
  const [t, attempts] = await Promise.all([
    api("GET", `/v1/tasks/${id}`),
    api("GET", `/v1/tasks/${id}/attempts`, { page, page_size: PAGE_SIZE }),
  ]);
  if (ctx.stale()) return;
  fill(main,
    section(`Task ${t.id}`, link("← this endpoint's tasks", "tasks", { endpoint_id: t.endpoint_id }), taskActions(t, ctx, true)),
    h("dl", { class: "facts" },
      fact("Status", [badge(t.status), t.status === "pending" && t.attempts > 0 ? badge("retrying", "retrying") : null]),
      fact("Type", t.task_type), fact("Endpoint", link(String(t.endpoint_id), "tasks", { endpoint_id: t.endpoint_id })),
      t.schedule_id ? fact("Schedule", String(t.schedule_id)) : null, t.event_id ? fact("Event", String(t.event_id)) : null,
      fact("Attempts", `${t.attempts} of ${t.max_attempts}`), fact("Run at", timeCell(t.run_at)),
      fact("Next attempt", timeCell(t.next_attempt_at)), fact("Finished", timeCell(t.finished_at)),
      t.last_error ? fact("Last error", h("span", { class: "error" }, t.last_error)) : null,
      fact("Trace id", t.trace_id ? copyable(t.trace_id, ctx) : h("small", null, "none (made before traces)"))),
    h("details", null, h("summary", null, "Payload"), h("pre", null, JSON.stringify(t.payload, null, 2))),
    h("h3", null, `Attempts (${attempts.total})`),
    attempts.items.length ? attempts.items.map(attemptView) : h("p", { class: "empty" }, "Not attempted yet."),
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

function taskForm(forms, ctx) {
  const endpoint = input("endpoint_id", "", { type: "number", min: 1, required: true });
  const payload = textarea("payload", "{}");
  const runAt = input("run_at", "", { type: "datetime-local" });
  forms.open("New manual task", form([
    field("Endpoint id", endpoint), field("Payload (JSON object)", payload),
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
  main.prepend(section("Events", filter, button("Publish event", () => eventForm(forms, ctx), "primary")));
  main.append(list);
  const data = await api("GET", "/v1/events", pageQuery(r.params, { event_name: name }));
  if (ctx.stale()) return;
  fill(list, table([
    ["Id", (e) => String(e.id)],
    ["Name", (e) => h("code", null, e.event_name)],
    ["Key", (e) => e.event_key || "—"],
    ["Published", (e) => timeCell(e.created_at)],
    ["Tasks", (e) => link(`${e.task_count} task(s)`, "tasks", { event_id: e.id })],
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
      ctx.notify(`Event ${e.id} published: ${e.task_count} task(s).`, "ok");
      ctx.go("events");
    }, () => forms.close()));
}

// ---------------------------------------------------------------- retry policies

async function policies(main, r, ctx) {
  const forms = panel(main);
  const list = h("div", null, h("p", { class: "empty" }, "Loading…"));
  main.prepend(section("Retry policies", button("New policy", () => policyForm(forms, null, ctx), "primary")));
  main.append(list);
  const data = await api("GET", "/v1/retries/policies", pageQuery(r.params, {}));
  if (ctx.stale()) return;
  fill(list, h("p", null, h("small", null, "Endpoints without a policy use the default: 5 attempts, exponential, 60 s initial, 3600 s max.")),
    table([
      ["Id", (p) => String(p.id)],
      ["Name", (p) => h("strong", { class: "name" }, p.name)],
      ["Attempts", (p) => String(p.max_attempts)],
      ["Backoff", (p) => `${p.backoff_type}, ${p.initial_delay_sec} s … ${p.max_delay_sec} s`],
      ["Actions", (p) => h("div", { class: "row-actions" },
        button("Edit", () => policyForm(forms, p, ctx)),
        button("Delete", () => confirm(`Delete retry policy ${p.id}?`) &&
          act(ctx, () => api("DELETE", `/v1/retries/policies/${p.id}`), `Policy ${p.id} deleted.`), "danger"))],
    ], data.items, "No retry policies yet."), pager(data, Object.fromEntries(r.params), ctx, "policies"));
}

function policyForm(forms, p, ctx) {
  const v = p || { max_attempts: 5, backoff_type: "exponential", initial_delay_sec: 60, max_delay_sec: 3600 };
  const inputs = {
    name: input("name", v.name, { required: true, maxlength: 200 }),
    max_attempts: input("max_attempts", v.max_attempts, { type: "number", min: 1, max: 100, required: true }),
    backoff_type: select("backoff_type", [["exponential", "exponential"], ["linear", "linear"], ["fixed", "fixed"]], v.backoff_type),
    initial_delay_sec: input("initial_delay_sec", v.initial_delay_sec, { type: "number", min: 0, max: 86400 }),
    max_delay_sec: input("max_delay_sec", v.max_delay_sec, { type: "number", min: 0, max: 604800 }),
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
      };
      const saved = p
        ? await api("PATCH", `/v1/retries/policies/${p.id}`, null, changed(p, values))
        : await api("POST", "/v1/retries/policies", null, values);
      forms.close();
      ctx.notify(`Retry policy ${saved.id} saved.`, "ok");
      ctx.go(...currentPage());
    }, () => forms.close()));
}

export const PAGES = { overview, endpoints, schedules, tasks, events, policies };
