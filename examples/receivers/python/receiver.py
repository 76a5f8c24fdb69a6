#!/usr/bin/env python3
"""A webhook receiver that verifies webhookd's two signatures, with Python's standard library.

    python3 receiver.py --port 9000 --secret 'whsec_...'

It prints each delivery and answers 204, or 401 when a signature does not verify or the
timestamp is more than --tolerance seconds from this clock. docs/API.md ("Signatures on
deliveries") says what each header covers; this file is that text as code:

- X-Service-Signature: hex HMAC-SHA256 keyed with the secret's UTF-8 bytes AS WRITTEN (a
  whsec_ prefix included) over  X-Service-Timestamp + "\\n" + body.
- webhook-signature (Standard Webhooks): "v1," + base64 HMAC-SHA256 keyed with the base64-
  decoded part after whsec_ (or the secret's UTF-8 bytes when it has no such prefix) over
  webhook-id + "." + webhook-timestamp + "." + body.

During a secret rotation each header carries two signatures (hex ones separated by ",",
v1 ones by " "); one made with your secret is enough.
"""

import argparse
import base64
import hashlib
import hmac
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def verify(secret, headers, body, tolerance, now=None):
    """Returns None when the delivery verifies, else the reason it does not."""
    timestamp = headers.get("X-Service-Timestamp")
    if timestamp is None or not timestamp.isdigit():
        return "no X-Service-Timestamp in Unix seconds"
    now = int(time.time()) if now is None else now
    if abs(now - int(timestamp)) > tolerance:
        return f"X-Service-Timestamp {timestamp} is more than {tolerance} s from this clock"
    if headers.get("webhook-timestamp") != timestamp:
        return "webhook-timestamp is missing or differs from X-Service-Timestamp"

    # X-Service-Signature: keyed with the secret exactly as written.
    expected_hex = hmac.new(
        secret.encode(), timestamp.encode() + b"\n" + body, hashlib.sha256
    ).hexdigest()
    sent_hex = (headers.get("X-Service-Signature") or "").split(",")
    if not any(hmac.compare_digest(expected_hex, s.strip().lower()) for s in sent_hex):
        return "X-Service-Signature does not verify"

    # webhook-signature: keyed with the decoded bytes of a whsec_ secret.
    key = base64.b64decode(secret[6:]) if secret.startswith("whsec_") else secret.encode()
    msg_id = headers.get("webhook-id", "")
    signed = f"{msg_id}.{timestamp}.".encode() + body
    expected_v1 = "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    sent_v1 = (headers.get("webhook-signature") or "").split(" ")
    if not any(hmac.compare_digest(expected_v1, s) for s in sent_v1):
        return "webhook-signature does not verify"
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=9000, help="0: any free port")
    parser.add_argument("--secret", required=True, help="the endpoint's signing secret")
    parser.add_argument("--tolerance", type=int, default=300, help="seconds of clock difference")
    args = parser.parse_args()

    class Handler(BaseHTTPRequestHandler):
        def handle_delivery(self):
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length)
            why = verify(args.secret, self.headers, body, args.tolerance)
            verdict = "verified" if why is None else f"REFUSED: {why}"
            print(
                f"{self.command} {self.path} webhook-id={self.headers.get('webhook-id')} "
                f"attempt={self.headers.get('X-Service-Attempt')}: {verdict}\n  "
                + body.decode("utf-8", "replace"),
                flush=True,
            )
            self.send_response(204 if why is None else 401)
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_POST = do_PUT = do_PATCH = do_GET = do_DELETE = handle_delivery

        def log_message(self, format, *args):  # the line above says it all
            pass

    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    print(f"listening on http://127.0.0.1:{server.server_address[1]}/", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
