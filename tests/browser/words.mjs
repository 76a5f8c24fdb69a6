// Checks ui/words.js (cron expressions read out, plurals, endpoint health, attempt buckets)
// against tests/browser/words.json under node: `node tests/browser/words.mjs`. The browser
// test runs the same vectors in Chromium (checkWords below, passed to the page as text).
import { readFileSync } from "node:fs";

/** The failures of `m` (the words.js module) against the vectors `v`; [] when all pass. */
export function checkWords(m, v) {
  const out = [];
  const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);
  for (const c of v.cron) {
    const got = m.cronWords(c.expr);
    if (got !== c.want) out.push(`cronWords(${JSON.stringify(c.expr)}) = ${JSON.stringify(got)}, want ${JSON.stringify(c.want)}`);
  }
  for (const [n, one, many, want] of v.plural) {
    const got = m.plural(n, one, many || undefined);
    if (got !== want) out.push(`plural(${n}, ${one}) = ${got}, want ${want}`);
  }
  for (const c of v.health) {
    const got = m.endpointHealth(c.endpoint).text;
    if (got !== c.want) out.push(`endpointHealth(${JSON.stringify(c.endpoint)}) = ${got}, want ${c.want}`);
  }
  const b = m.attemptBuckets(v.buckets.attempts, Date.parse(v.buckets.now));
  const got = {
    size: b.size, count: b.buckets.length, total: b.total,
    nonEmpty: b.buckets.filter((x) => x.ok + x.failed).map((x) => ({ at: new Date(x.at).toISOString(), ok: x.ok, failed: x.failed, p50: x.p50, p95: x.p95 })),
  };
  if (!same(got, v.buckets.want)) out.push(`attemptBuckets = ${JSON.stringify(got)}, want ${JSON.stringify(v.buckets.want)}`);
  for (const c of v.bucket_sizes) {
    const one = [{ started_at: c.oldest, duration_ms: 1, status_code: 200 }];
    const got = m.attemptBuckets(one, Date.parse(c.now));
    if (got.size !== c.want_ms || got.buckets.reduce((n, x) => n + x.ok, 0) !== 1) {
      out.push(`attemptBuckets from ${c.oldest} to ${c.now}: size ${got.size}, want ${c.want_ms}`);
    }
  }
  return out;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const m = await import(new URL("../../ui/words.js", import.meta.url));
  const v = JSON.parse(readFileSync(new URL("./words.json", import.meta.url), "utf8"));
  const failures = checkWords(m, v);
  for (const f of failures) console.error(f);
  const total = v.cron.length + v.plural.length + v.health.length + 1 + v.bucket_sizes.length;
  console.log(`${total - failures.length} passed, ${failures.length} failed`);
  process.exit(failures.length ? 1 : 0);
}
