// Plain words for what the API returns: counts with their plural, a cron expression read out
// ("at 09:00 on weekdays"), an endpoint's health. Pure functions, no DOM: checked with fixed
// vectors (tests/browser/words.json) under node and in Chromium.

/** "1 failure", "2 failures"; `many` for an irregular plural ("1 entry", "3 entries"). */
export function plural(n, one, many) {
  return `${n} ${n === 1 ? one : many || one + "s"}`;
}

/** "a", "a and b", "a, b and c". */
export function joinAnd(items) {
  if (items.length <= 1) return items.join("");
  return items.slice(0, -1).join(", ") + " and " + items[items.length - 1];
}

const MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
  "September", "October", "November", "December"];
const DAYS = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"];
const MONTH_NAMES = ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"];
const DAY_NAMES = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];
const SHORTHANDS = {
  "@YEARLY": "0 0 1 1 *", "@ANNUALLY": "0 0 1 1 *", "@MONTHLY": "0 0 1 * *",
  "@WEEKLY": "0 0 * * 0", "@DAILY": "0 0 * * *", "@MIDNIGHT": "0 0 * * *", "@HOURLY": "0 * * * *",
};
const BOUNDS = { minute: [0, 59], hour: [0, 23], dom: [1, 31], month: [1, 12], dow: [0, 7] };

function number(text, kind, names, rangeEnd) {
  if (/^\d{1,4}$/.test(text)) return Number(text);
  const i = names ? names.indexOf(text) : -1;
  if (i < 0) throw new Error(`bad ${kind} value ${text}`);
  // SUN ending a range (MON-SUN) is 7, as the server reads it.
  return kind === "month" ? i + 1 : i === 0 && rangeEnd ? 7 : i;
}

/**
 * One field as `{ star, values, special }`: `star` when it is `*` (unrestricted), `values`
 * the sorted numbers it matches, `special` the L / W / # items (day fields only). Throws on
 * what the server would refuse or this reader does not know.
 */
function parseField(raw, kind) {
  const [min, max] = BOUNDS[kind];
  const names = kind === "month" ? MONTH_NAMES : kind === "dow" ? DAY_NAMES : null;
  const values = new Set();
  const special = [];
  for (const item of raw.split(",")) {
    let m;
    if (kind === "dom" && (item === "L" || item === "LW" || /^\d{1,2}W$/.test(item))) {
      special.push(item);
      continue;
    }
    if (kind === "dow" && (m = /^(\w+?)(#[1-5L]|L)$/.exec(item))) {
      special.push([number(m[1], kind, names, false) % 7, m[2] === "L" ? "#L" : m[2]]);
      continue;
    }
    let [base, step] = item.split("/");
    step = step === undefined ? 1 : Number(step);
    if (!Number.isInteger(step) || step < 1) throw new Error(`bad step in ${item}`);
    let lo, hi;
    if (base === "*") [lo, hi] = [min, kind === "dow" ? 6 : max];
    else if (base.includes("-")) {
      const [a, b] = base.split("-");
      lo = number(a, kind, names, false);
      hi = number(b, kind, names, lo > 0);
    } else if (item.includes("/")) throw new Error(`a step needs * or a range: ${item}`);
    else lo = hi = number(base, kind, names, false);
    if (lo < min || hi > max || lo > hi) throw new Error(`out of range: ${item}`);
    for (let v = lo; v <= hi; v += step) values.add(kind === "dow" ? v % 7 : v);
  }
  return { star: raw === "*", values: [...values].sort((a, b) => a - b), special };
}

/** The common step of ≥ 3 sorted values (2 values: their difference), else 0. */
function stepOf(values) {
  if (values.length < 2) return 0;
  const d = values[1] - values[0];
  return values.every((v, i) => i === 0 || v - values[i - 1] === d) ? d : 0;
}

const pad = (n) => String(n).padStart(2, "0");
const ordinal = (n) => n + (n % 100 >= 11 && n % 100 <= 13 ? "th" : ["th", "st", "nd", "rd"][n % 10] || "th");

/** Every value of a field: `*`, or a list that happens to cover the range. */
function full(f, kind) {
  const [min, max] = BOUNDS[kind];
  const span = (kind === "dow" ? 6 : max) - min + 1;
  return f.star || (f.special.length === 0 && f.values.length === span);
}

/** "09, 12 and 18", "09 through 17": hours of the day. */
function hoursList(H) {
  return H.length > 2 && stepOf(H) === 1 ? `${pad(H[0])} through ${pad(H[H.length - 1])}` : joinAnd(H.map(pad));
}

function timePart(minute, hour) {
  const M = minute.values, H = hour.values;
  const allM = full(minute, "minute"), allH = full(hour, "hour");
  const mStep = stepOf(M), hStep = stepOf(H);
  // A few fixed times of day: list them.
  if (!allM && !allH && M.length * H.length <= 8) {
    return { text: "at " + joinAnd(H.flatMap((h) => M.map((m) => `${pad(h)}:${pad(m)}`))), daily: true };
  }
  const contiguous = H.length === 1 || hStep === 1;
  const from = () => `from ${pad(H[0])}:${pad(M[0])} through ${pad(H[H.length - 1])}:${pad(M[M.length - 1])}`;
  if (M.length === 1) {
    const m = M[0];
    if (allH) return { text: m === 0 ? "every hour, on the hour" : `at ${plural(m, "minute")} past every hour` };
    if (contiguous) return { text: `every hour ${from()}` };
    if (hStep) return { text: `every ${hStep} hours ${from()}` };
    return { text: `at minute ${m} of hours ${hoursList(H)}`, daily: true };
  }
  // Several minutes of each matching hour.
  let often;
  if (allM) often = "every minute";
  else if (mStep && M[0] === 0 && 60 % mStep === 0 && M.length === 60 / mStep) often = `every ${mStep} minutes`;
  else if (M.length <= 12) often = `at minutes ${joinAnd(M.map(String))}`;
  else if (mStep) often = `at every ${ordinal(mStep)} minute from ${M[0]} through ${M[M.length - 1]}`;
  else often = `at ${M.length} set minutes`;
  if (allH) return { text: often + (often.startsWith("at") ? " of every hour" : "") };
  if (contiguous && often.startsWith("every")) return { text: `${often} ${from()}` };
  return { text: `${often} ${often.startsWith("every") ? "during" : "of"} hours ${hoursList(H)}` };
}

function daysOfMonth(dom) {
  const parts = dom.special.map((s) => s === "L" ? "the last day of the month"
    : s === "LW" ? "the last weekday of the month"
      : `the weekday nearest day ${s.slice(0, -1)} of the month`);
  const V = dom.values;
  if (V.length) {
    const step = stepOf(V);
    if (V.length > 2 && step === 1) parts.unshift(`days ${V[0]} through ${V[V.length - 1]} of the month`);
    else if (V.length > 2 && step && V[0] === 1 && V[V.length - 1] + step > 31) parts.unshift(`every ${ordinal(step)} day of the month`);
    else parts.unshift(`${V.length === 1 ? "day" : "days"} ${joinAnd(V.map(String))} of the month`);
  }
  return joinAnd(parts);
}

function daysOfWeek(dow) {
  const V = dow.values;
  const parts = [];
  const key = V.join(",");
  if (key === "1,2,3,4,5") parts.push("weekdays");
  else if (key === "0,6") parts.push("weekends");
  else if (V.length > 2 && stepOf(V) === 1) parts.push(`${DAYS[V[0]]} through ${DAYS[V[V.length - 1]]}`);
  else if (V.length) parts.push(joinAnd(V.map((d) => DAYS[d])));
  for (const [d, nth] of dow.special) {
    parts.push(nth === "#L" ? `the last ${DAYS[d]} of the month` : `the ${ordinal(Number(nth.slice(1)))} ${DAYS[d]} of the month`);
  }
  return joinAnd(parts);
}

function monthsPart(month) {
  const V = month.values;
  if (V.length > 2 && stepOf(V) === 1) return `${MONTHS[V[0] - 1]} through ${MONTHS[V[V.length - 1] - 1]}`;
  return joinAnd(V.map((m) => MONTHS[m - 1]));
}

/**
 * A cron expression in plain words, in the schedule's own time zone: `30 2 * * *` → "at 02:30
 * every day", `0 9 * * 1-5` → "at 09:00 on weekdays". Null when the expression is not one the
 * server would take (the preview then says what is wrong). Follows the server's reading: day
 * of week 0 and 7 are Sunday; when both day fields are restricted, either one matches.
 */
export function cronWords(expr) {
  let text = String(expr || "").trim().toUpperCase();
  if (SHORTHANDS[text]) text = SHORTHANDS[text];
  const fields = text.split(/\s+/);
  if (fields.length !== 5) return null;
  let minute, hour, dom, month, dow;
  try {
    [minute, hour, dom, month, dow] = fields.map((f, i) => parseField(f, ["minute", "hour", "dom", "month", "dow"][i]));
  } catch (_) {
    return null;
  }
  const { text: time, daily } = timePart(minute, hour);
  const anyDom = full(dom, "dom"), anyDow = full(dow, "dow"), anyMonth = full(month, "month");
  let days = "";
  if (!anyDom && !anyDow) days = `on ${daysOfMonth(dom)} or on ${daysOfWeek(dow)}`;
  else if (!anyDow) days = `on ${daysOfWeek(dow)}`;
  else if (!anyDom && !anyMonth && month.values.length === 1 && dom.values.length === 1 && !dom.special.length) {
    // `0 0 1 1 *`: "on 1 January", not "on day 1 of the month in January".
    return `${time} on ${dom.values[0]} ${MONTHS[month.values[0] - 1]}`;
  } else if (!anyDom) days = `on ${daysOfMonth(dom)}`;
  else if (daily) days = "every day";
  return [time, days, anyMonth ? "" : `in ${monthsPart(month)}`].filter(Boolean).join(" ");
}

/**
 * An endpoint's health from its counters: `healthy` (its latest attempt succeeded),
 * `degraded` (1 to 4 failures in a row), `failing` (5 or more: at least as many as the
 * default policy's attempts at one task), `untried` (no attempt yet). Whether it is enabled is
 * a separate matter, shown beside this.
 */
export function endpointHealth(e) {
  const n = e.consecutive_failures || 0;
  if (n >= 5) return { state: "failing", text: `failing: ${plural(n, "failure")} in a row` };
  if (n >= 1) return { state: "degraded", text: `degraded: ${plural(n, "failure")} in a row` };
  if (e.last_success_at || e.last_failure_at) return { state: "healthy", text: "healthy" };
  return { state: "untried", text: "no deliveries yet" };
}

/** The nearest-rank percentile `q` (0 < q ≤ 1) of numbers; null for none. */
export function percentile(values, q) {
  if (!values.length) return null;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.max(0, Math.ceil(q * sorted.length) - 1)];
}

const BUCKET_SIZES = [60e3, 300e3, 900e3, 3600e3, 6 * 3600e3, 86400e3, 7 * 86400e3];
/** Buckets of a chart: a fixed number, so that every chart reads the same way. */
const BUCKETS = 24;

/**
 * Attempts (`started_at`, `duration_ms`, `status_code`) in 24 time buckets ending with the one
 * that holds `nowMs`: buckets of the smallest size among 1 min, 5 min, 15 min, 1 h, 6 h, 1 d
 * and 1 week whose 24 hold the oldest attempt, aligned to multiples of the size (UTC); older
 * attempts go in the first bucket. Each bucket and the total count `ok` (a 2xx reply) and
 * `failed` attempts and the median and 95th percentile of their durations (ms).
 */
export function attemptBuckets(attempts, nowMs) {
  const times = attempts.map((a) => Date.parse(a.started_at));
  const oldest = Math.min(nowMs, ...times);
  const first = (size) => (Math.floor(nowMs / size) - BUCKETS + 1) * size;
  const size = BUCKET_SIZES.find((s) => first(s) <= oldest) || BUCKET_SIZES[BUCKET_SIZES.length - 1];
  const start = first(size);
  const count = BUCKETS;
  const groups = Array.from({ length: count }, () => []);
  attempts.forEach((a, i) => groups[Math.min(count - 1, Math.max(0, Math.floor((times[i] - start) / size)))].push(a));
  const summary = (list) => {
    const ok = list.filter((a) => a.status_code >= 200 && a.status_code < 300).length;
    const durations = list.map((a) => a.duration_ms);
    return { ok, failed: list.length - ok, p50: percentile(durations, 0.5), p95: percentile(durations, 0.95) };
  };
  return {
    size, start,
    buckets: groups.map((list, i) => ({ at: start + i * size, ...summary(list) })),
    total: summary(attempts),
  };
}
