// A webhook receiver that verifies webhookd's two signatures, with Node's standard library.
//
//     node receiver.mjs --port 9000 --secret 'whsec_...'
//
// It prints each delivery and answers 204, or 401 when a signature does not verify or the
// timestamp is more than --tolerance seconds from this clock. docs/API.md ("Signatures on
// deliveries") says what each header covers:
// - X-Service-Signature: hex HMAC-SHA256 keyed with the secret's UTF-8 bytes AS WRITTEN (a
//   whsec_ prefix included) over X-Service-Timestamp + "\n" + body.
// - webhook-signature (Standard Webhooks): "v1," + base64 HMAC-SHA256 keyed with the base64-
//   decoded part after whsec_ (or the secret's UTF-8 bytes without that prefix) over
//   webhook-id + "." + webhook-timestamp + "." + body.
// During a secret rotation each header carries two signatures (hex ones separated by ",",
// v1 ones by " "); one made with your secret is enough.

import { createHmac, timingSafeEqual } from "node:crypto";
import { createServer } from "node:http";
import { parseArgs } from "node:util";

const { values: args } = parseArgs({
  options: {
    port: { type: "string", default: "9000" },
    secret: { type: "string" },
    tolerance: { type: "string", default: "300" },
  },
});
if (!args.secret) {
  console.error("usage: node receiver.mjs --port 9000 --secret 'whsec_...'");
  process.exit(2);
}

const equal = (a, b) => a.length === b.length && timingSafeEqual(Buffer.from(a), Buffer.from(b));

// Returns null when the delivery verifies, else the reason it does not.
export function verify(secret, headers, body, tolerance, now = Math.floor(Date.now() / 1000)) {
  const timestamp = headers["x-service-timestamp"];
  if (!/^[0-9]+$/.test(timestamp ?? "")) return "no X-Service-Timestamp in Unix seconds";
  if (Math.abs(now - Number(timestamp)) > tolerance) {
    return `X-Service-Timestamp ${timestamp} is more than ${tolerance} s from this clock`;
  }
  if (headers["webhook-timestamp"] !== timestamp) {
    return "webhook-timestamp is missing or differs from X-Service-Timestamp";
  }

  // X-Service-Signature: keyed with the secret exactly as written.
  const expectedHex = createHmac("sha256", Buffer.from(secret, "utf8"))
    .update(`${timestamp}\n`)
    .update(body)
    .digest("hex");
  const sentHex = (headers["x-service-signature"] ?? "").split(",");
  if (!sentHex.some((s) => equal(expectedHex, s.trim().toLowerCase()))) {
    return "X-Service-Signature does not verify";
  }

  // webhook-signature: keyed with the decoded bytes of a whsec_ secret.
  const key = secret.startsWith("whsec_")
    ? Buffer.from(secret.slice(6), "base64")
    : Buffer.from(secret, "utf8");
  const expectedV1 =
    "v1," +
    createHmac("sha256", key)
      .update(`${headers["webhook-id"] ?? ""}.${timestamp}.`)
      .update(body)
      .digest("base64");
  const sentV1 = (headers["webhook-signature"] ?? "").split(" ");
  if (!sentV1.some((s) => equal(expectedV1, s))) return "webhook-signature does not verify";
  return null;
}

const server = createServer((req, res) => {
  const chunks = [];
  req.on("data", (chunk) => chunks.push(chunk));
  req.on("end", () => {
    const body = Buffer.concat(chunks);
    const why = verify(args.secret, req.headers, body, Number(args.tolerance));
    const verdict = why === null ? "verified" : `REFUSED: ${why}`;
    console.log(
      `${req.method} ${req.url} webhook-id=${req.headers["webhook-id"]} ` +
        `attempt=${req.headers["x-service-attempt"]}: ${verdict}\n  ${body.toString("utf8")}`,
    );
    res.writeHead(why === null ? 204 : 401).end();
  });
});
server.listen(Number(args.port), "127.0.0.1", () => {
  console.log(`listening on http://127.0.0.1:${server.address().port}/`);
});
