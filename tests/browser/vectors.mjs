// Checks ui/sha256.js against tests/browser/vectors.json (FIPS 180-4, RFC 4231) under node:
// `node tests/browser/vectors.mjs`. The browser test runs the same vectors in Chromium.
import { readFileSync } from "node:fs";
const mod = await import(new URL("../../ui/sha256.js", import.meta.url));
const vectors = JSON.parse(readFileSync(new URL("./vectors.json", import.meta.url), "utf8"));
const bytes = (hex) => new Uint8Array((hex.match(/../g) || []).map((b) => parseInt(b, 16)));
let passed = 0, failed = 0;
for (const v of vectors.sha256) {
  const got = mod.hex(mod.sha256(mod.utf8(v.text.repeat(v.repeat))));
  if (got === v.want) passed++; else { failed++; console.error(`sha256 ${v.text.slice(0, 12)}×${v.repeat}: ${got}`); }
}
for (const v of vectors.hmac) {
  const got = mod.hex(mod.hmacSha256(bytes(v.key_hex), bytes(v.data_hex)));
  if (got === v.want) passed++; else { failed++; console.error(`${v.name}: ${got}`); }
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
