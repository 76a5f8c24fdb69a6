"""schemathesis hook: signs every request as webhookd expects (docs/design.md §2).

X-Signature = hex HMAC-SHA256(secret, X-Timestamp + "\\n" + payload), where payload is the
body bytes exactly as sent, or `METHOD path?query` for a request without a body. The hook
attaches a `requests` auth object, which runs on the prepared request, so it signs the final
bytes and the final (encoded) path. Timestamps are fresh milliseconds that never repeat, so
no two requests share a signature (the server refuses a replayed one).

Reads WEBHOOKD_FUZZ_KEY_ID and WEBHOOKD_FUZZ_SECRET; counts the requests it signed and the
replies by status into WEBHOOKD_FUZZ_COUNTS (a JSON file) for the run's figures.
"""

import atexit
import collections
import hashlib
import hmac
import json
import os
import threading
import time

import requests
import schemathesis

KEY_ID = os.environ["WEBHOOKD_FUZZ_KEY_ID"]
SECRET = os.environ["WEBHOOKD_FUZZ_SECRET"].encode()
COUNTS_FILE = os.environ.get("WEBHOOKD_FUZZ_COUNTS")

_lock = threading.Lock()
_last_ms = 0
_signed = 0
_statuses = collections.Counter()


def _fresh_timestamp_ms():
    global _last_ms
    with _lock:
        _last_ms = max(int(time.time() * 1000), _last_ms + 1)
        return _last_ms


class WebhookdSignature(requests.auth.AuthBase):
    def __call__(self, request):
        global _signed
        body = request.body or b""
        if isinstance(body, str):
            body = body.encode()
        payload = body if body else f"{request.method} {request.path_url}".encode()
        timestamp = str(_fresh_timestamp_ms())
        signature = hmac.new(SECRET, timestamp.encode() + b"\n" + payload, hashlib.sha256).hexdigest()
        request.headers["X-Key-ID"] = KEY_ID
        request.headers["X-Timestamp"] = timestamp
        request.headers["X-Signature"] = signature
        with _lock:
            _signed += 1
        return request


@schemathesis.hook
def before_call(context, case, kwargs):
    kwargs["auth"] = WebhookdSignature()


@schemathesis.hook
def after_call(context, case, response):
    with _lock:
        _statuses[str(response.status_code)] += 1


@atexit.register
def _write_counts():
    if COUNTS_FILE:
        with open(COUNTS_FILE, "w") as f:
            json.dump({"signed": _signed, "statuses": dict(_statuses)}, f)
