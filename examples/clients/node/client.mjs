// Sends one signed request to webhookd's API, with Node's standard library (Node 18+).
//
//     export WEBHOOKD_URL=http://127.0.0.1:8080 WEBHOOKD_KEY_ID=whk_... WEBHOOKD_SECRET=whs_...
//     node client.mjs GET /v1/endpoints
//     node client.mjs POST /v1/events '{"event_name":"order.created","payload":{"order":42}}'
//
// Prints the reply and exits 1 unless it is HTTP 200. The signature (docs/API.md,
// "Authentication"): lowercase hex HMAC-SHA256 keyed with the key's secret (UTF-8) over
// X-Timestamp + "\n" + payload, where payload is the body as sent, or for a request without a
// body METHOD + " " + path-and-query.

import { createHmac } from "node:crypto";

const [methodArg, path, body = ""] = process.argv.slice(2);
if (!methodArg || !path) {
  console.error("usage: node client.mjs METHOD PATH [JSON-BODY]");
  process.exit(2);
}
const method = methodArg.toUpperCase();
const base = (process.env.WEBHOOKD_URL ?? "http://127.0.0.1:8080").replace(/\/$/, "");

// Milliseconds: two requests in the same second still get different signatures (each
// signature is accepted once).
const timestamp = String(Date.now());
const payload = body !== "" ? body : `${method} ${path}`;
const signature = createHmac("sha256", Buffer.from(process.env.WEBHOOKD_SECRET, "utf8"))
  .update(`${timestamp}\n${payload}`)
  .digest("hex");

const headers = {
  "X-Key-ID": process.env.WEBHOOKD_KEY_ID,
  "X-Timestamp": timestamp,
  "X-Signature": signature,
};
if (body !== "") headers["Content-Type"] = "application/json";

const reply = await fetch(base + path, { method, headers, body: body !== "" ? body : undefined });
console.log(`HTTP ${reply.status}\n${await reply.text()}`);
process.exit(reply.status === 200 ? 0 : 1);
