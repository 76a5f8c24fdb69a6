#!/usr/bin/env python3
"""Sends one signed request to webhookd's API, with Python's standard library.

    export WEBHOOKD_URL=http://127.0.0.1:8080 WEBHOOKD_KEY_ID=whk_... WEBHOOKD_SECRET=whs_...
    python3 client.py GET /v1/endpoints
    python3 client.py POST /v1/events '{"event_name":"order.created","payload":{"order":42}}'

Prints the reply and exits 1 unless it is HTTP 200. The signature (docs/API.md,
"Authentication"): lowercase hex HMAC-SHA256 keyed with the key's secret (UTF-8) over
X-Timestamp + "\\n" + payload, where payload is the body as sent, or for a request without
a body METHOD + " " + path-and-query.
"""

import hashlib
import hmac
import os
import sys
import time
import urllib.error
import urllib.request


def signed_headers(key_id, secret, method, path_and_query, body):
    # Milliseconds: two requests in the same second still get different signatures (each
    # signature is accepted once).
    timestamp = str(int(time.time() * 1000))
    payload = body if body else f"{method} {path_and_query}".encode()
    signature = hmac.new(
        secret.encode(), timestamp.encode() + b"\n" + payload, hashlib.sha256
    ).hexdigest()
    return {"X-Key-ID": key_id, "X-Timestamp": timestamp, "X-Signature": signature}


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: client.py METHOD PATH [JSON-BODY]")
    method, path = sys.argv[1].upper(), sys.argv[2]
    body = sys.argv[3].encode() if len(sys.argv) > 3 else b""
    base = os.environ.get("WEBHOOKD_URL", "http://127.0.0.1:8080").rstrip("/")
    headers = signed_headers(
        os.environ["WEBHOOKD_KEY_ID"], os.environ["WEBHOOKD_SECRET"], method, path, body
    )
    if body:
        headers["Content-Type"] = "application/json"
    request = urllib.request.Request(base + path, data=body or None, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request) as reply:
            status, text = reply.status, reply.read().decode()
    except urllib.error.HTTPError as error:
        status, text = error.code, error.read().decode()
    print(f"HTTP {status}\n{text}")
    sys.exit(0 if status == 200 else 1)


if __name__ == "__main__":
    main()
