#!/usr/bin/env python3
"""Black-box conformance client for webhookd, written from docs/API.md and docs/design.md
only (not from webhookd's source).

Usage:
    python3 tests/conformance/client.py BASE_URL KEY_ID SECRET [KEY_ID2 SECRET2]

KEY_ID2/SECRET2 (or the env vars WEBHOOKD_KEY_ID2 / WEBHOOKD_SECRET2) name a key of a second
app, for the isolation checks; without them those checks are skipped. WEBHOOKD_REVOKED_KEY_ID /
WEBHOOKD_REVOKED_SECRET may name a revoked key (checked for 40102).

Run it against a fresh app on a test server: it creates records, publishes events and fires
schedules to every enabled endpoint of the app. It starts its own loopback receiver for the
deliveries. Standard library only; when the `standardwebhooks` package is importable, the
`webhook-signature` header is also verified with it.

It prints one line per check (PASS/FAIL; INFO lines are observations that docs/design.md leaves
open and are not counted) and ends with exactly `N passed, M failed`; the exit status is 1 when
anything failed.
"""

import base64
import hashlib
import hmac
import json
import os
import re
import secrets
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TS_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")
TS_FIELDS = {
    "created_at",
    "updated_at",
    "next_run_at",
    "last_run_at",
    "next_attempt_at",
    "finished_at",
    "started_at",
    "run_at",
}
# Seconds a delivery may take to show up. Waits end as soon as what they wait for is there, so a
# long limit costs nothing; it keeps a busy machine (two cores shared with builds) from failing.
WAIT = 60.0
# What a busy machine may add to a delay between attempts (claiming and sending take time);
# checks of a delay are exact below, tolerant by this much above.
LATE = 4.5

# --------------------------------------------------------------------------------------------
# results


class Results:
    def __init__(self):
        self.passed = 0
        self.failed = 0
        self.failures = []

    def check(self, name, cond, detail=""):
        if cond:
            self.passed += 1
            print(f"PASS {name}", flush=True)
        else:
            self.failed += 1
            self.failures.append(name)
            extra = f" -- {detail}" if detail else ""
            print(f"FAIL {name}{extra}", flush=True)
        return bool(cond)

    def info(self, text):
        print(f"INFO {text}", flush=True)


R = Results()


def short(value, limit=300):
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return text if len(text) <= limit else text[:limit] + "..."


# --------------------------------------------------------------------------------------------
# the signed client (docs/design.md §2, §3)


class Reply:
    def __init__(self, method, path, status, headers, raw):
        self.method = method
        self.path = path
        self.status = status
        self.headers = headers  # lower-cased names
        self.raw = raw
        try:
            self.json = json.loads(raw.decode("utf-8")) if raw else None
        except (ValueError, UnicodeDecodeError):
            self.json = None

    @property
    def code(self):
        return self.json.get("code") if isinstance(self.json, dict) else None

    @property
    def data(self):
        return self.json.get("data") if isinstance(self.json, dict) else None

    @property
    def message(self):
        m = self.json.get("message") if isinstance(self.json, dict) else None
        return m if isinstance(m, str) else ""

    def brief(self):
        return f"{self.method} {self.path} -> HTTP {self.status} {short(self.raw.decode('utf-8', 'replace'))}"


ENVELOPE_PROBLEMS = []
TIMESTAMP_PROBLEMS = []
REPLIES_SEEN = [0]
STATUS_OF_CODE = {
    40001: 400,
    40002: 400,
    40101: 401,
    40102: 401,
    40103: 401,
    40104: 401,
    40105: 401,
    40401: 404,
    40501: 405,
    40901: 409,
    41301: 413,
    42901: 429,
    50001: 500,
}


def audit_envelope(reply):
    """docs/design.md §3: every /v1 reply is the envelope, X-Request-Id equals request_id."""
    REPLIES_SEEN[0] += 1
    body = reply.json
    problems = []
    if not isinstance(body, dict):
        problems.append("body is not a JSON object")
    else:
        for k in ("code", "message", "request_id", "data"):
            if k not in body:
                problems.append(f"no '{k}'")
        rid = body.get("request_id")
        if not isinstance(rid, str) or not rid:
            problems.append("request_id is not a non-empty string")
        if reply.headers.get("x-request-id") != rid:
            problems.append(f"X-Request-Id {reply.headers.get('x-request-id')!r} != request_id {rid!r}")
        code = body.get("code")
        if code == 0:
            if reply.status != 200:
                problems.append(f"code 0 with HTTP {reply.status}")
            if body.get("message") != "success":
                problems.append(f"success message {body.get('message')!r}")
        else:
            if body.get("data", "missing") is not None:
                problems.append("error reply with non-null data")
            if STATUS_OF_CODE.get(code) != reply.status:
                problems.append(f"code {code} with HTTP {reply.status}")
            if not isinstance(body.get("message"), str) or not body.get("message"):
                problems.append("empty error message")
    if problems:
        ENVELOPE_PROBLEMS.append(f"{reply.method} {reply.path}: {'; '.join(problems)}")
    if isinstance(body, dict):
        audit_timestamps(body.get("data"), f"{reply.method} {reply.path}")


def audit_timestamps(value, where, key=None):
    """docs/design.md §4: timestamps in replies are RFC 3339 UTC with Z, seconds precision."""
    if isinstance(value, dict):
        for k, v in value.items():
            audit_timestamps(v, where, k)
    elif isinstance(value, list):
        for v in value:
            audit_timestamps(v, where, key)
    elif key in TS_FIELDS and value is not None:
        if key == "run_at" and isinstance(value, int):
            return  # SPEC: run_at may be epoch seconds
        if not (isinstance(value, str) and TS_RE.match(value)):
            TIMESTAMP_PROBLEMS.append(f"{where}: {key}={value!r}")


class Api:
    def __init__(self, base_url, key_id, secret, label="app1"):
        self.base = base_url.rstrip("/")
        self.key_id = key_id
        self.secret = secret
        self.label = label
        self._last_ms = 0
        self._lock = threading.Lock()
        self.revoked = None

    def timestamp(self):
        """Milliseconds, strictly increasing, so no two requests share a signature (§2 replay)."""
        with self._lock:
            ms = max(int(time.time() * 1000), self._last_ms + 1)
            self._last_ms = ms
            return str(ms)

    def url(self, path):
        return self.base + path

    def signed_payload(self, method, path, body):
        if body:
            return body
        parsed = urllib.parse.urlsplit(self.url(path))
        pq = parsed.path + (("?" + parsed.query) if parsed.query else "")
        return f"{method} {pq}".encode("utf-8")

    def sign(self, method, path, body, timestamp=None, secret=None, key_id=None):
        ts = timestamp if timestamp is not None else self.timestamp()
        payload = self.signed_payload(method, path, body)
        key = (secret if secret is not None else self.secret).encode("utf-8")
        sig = hmac.new(key, ts.encode("utf-8") + b"\n" + payload, hashlib.sha256).hexdigest()
        return {
            "X-Key-ID": key_id if key_id is not None else self.key_id,
            "X-Timestamp": ts,
            "X-Signature": sig,
        }

    def raw(self, method, path, body=b"", headers=None, audit=True):
        data = body if body else None
        req = urllib.request.Request(self.url(path), data=data, method=method)
        for k, v in (headers or {}).items():
            req.add_header(k, v)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                reply = Reply(method, path, resp.status, {k.lower(): v for k, v in resp.headers.items()}, resp.read())
        except urllib.error.HTTPError as e:
            reply = Reply(method, path, e.code, {k.lower(): v for k, v in e.headers.items()}, e.read())
        if audit:
            audit_envelope(reply)
        return reply

    def call(self, method, path, body=None):
        if body is None:
            raw = b""
        elif isinstance(body, (bytes, bytearray)):
            raw = bytes(body)
        elif isinstance(body, str):
            raw = body.encode("utf-8")
        else:
            raw = json.dumps(body).encode("utf-8")
        return self.raw(method, path, raw, self.sign(method, path, raw))


# --------------------------------------------------------------------------------------------
# check helpers


def ok(name, reply):
    """Expects success; returns data (or None)."""
    good = reply.status == 200 and reply.code == 0
    R.check(name, good, "" if good else reply.brief())
    return reply.data if good else None


def expect_err(name, reply, status, code, field=None):
    good = reply.status == status and reply.code == code and reply.data is None
    detail = ""
    if good and field is not None:
        names = [field] if isinstance(field, str) else list(field)
        if not any(n.lower() in reply.message.lower() for n in names):
            good = False
            detail = f"message {reply.message!r} does not name {names}"
    if not good and not detail:
        detail = f"expected HTTP {status} code {code}; got {reply.brief()}"
    label = f"{name} -> {status} {code}" + (f" naming '{field}'" if isinstance(field, str) else "")
    R.check(label, good, detail)
    return reply


def has_fields(name, record, fields):
    missing = [f for f in fields if not isinstance(record, dict) or f not in record]
    R.check(name, not missing, f"missing {missing} in {short(record)}")


def ids_of(items):
    return [i.get("id") for i in items or []]


def parse_ts(value):
    if isinstance(value, int):
        return value
    return int(datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp())


def iso(epoch):
    return datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def list_all(api, path):
    """Every item of a list route, through the pages."""
    items, page = [], 1
    sep = "&" if "?" in path else "?"
    while True:
        data = api.call("GET", f"{path}{sep}page={page}&page_size=100").data or {}
        got = data.get("items") or []
        items.extend(got)
        if len(got) < 100:
            return items
        page += 1


def poll(fn, pred, timeout=WAIT, interval=0.05):
    deadline = time.time() + timeout
    last = None
    while True:
        last = fn()
        if pred(last):
            return last, True
        if time.time() > deadline:
            return last, False
        time.sleep(interval)


def get_task(api, tid):
    return api.call("GET", f"/v1/tasks/{tid}").data or {}


def wait_task(api, tid, pred, timeout=WAIT):
    return poll(lambda: get_task(api, tid), pred, timeout)


def filter_matches(filter_events, event_name):
    """docs/design.md §5: comma-separated patterns, `*` any run of characters; empty = every event."""
    if filter_events is None or filter_events.strip() == "":
        return True
    for pat in filter_events.split(","):
        pat = pat.strip()
        if not pat:
            continue
        rx = "^" + ".*".join(re.escape(p) for p in pat.split("*")) + "$"
        if re.match(rx, event_name):
            return True
    return False


# --------------------------------------------------------------------------------------------
# the loopback receiver (deliveries, docs/design.md §6)


class Receiver:
    def __init__(self):
        self.records = []
        self.cond = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def handle_one(self):
                length = self.headers.get("Content-Length")
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    body = b""
                    while True:
                        size = int(self.rfile.readline().strip().split(b";")[0], 16)
                        if size == 0:
                            self.rfile.readline()
                            break
                        body += self.rfile.read(size)
                        self.rfile.readline()
                else:
                    body = self.rfile.read(int(length)) if length else b""
                rec = {
                    "method": self.command,
                    "path": self.path,
                    "headers": {k.lower(): v for k, v in self.headers.items()},
                    "header_names": [k.lower() for k in self.headers.keys()],
                    "body": body,
                    "at": time.time(),
                }
                with receiver.cond:
                    receiver.records.append(rec)
                    receiver.cond.notify_all()
                status, extra, reply, delay = receiver.answer(rec)
                if delay:
                    time.sleep(delay)
                try:
                    self.send_response(status)
                    for k, v in extra.items():
                        self.send_header(k, v)
                    self.send_header("Content-Length", str(len(reply)))
                    self.end_headers()
                    self.wfile.write(reply)
                except OSError:
                    pass

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = handle_one

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def answer(self, rec):
        path = rec["path"].split("?")[0]
        attempt = rec["headers"].get("x-service-attempt")
        if path.startswith("/retry-after-"):
            # /retry-after-N: the first attempt answers 503 with Retry-After: N, then 200
            secs = path.rsplit("-", 1)[1]
            return (503, {"Retry-After": secs}, b"busy", 0) if attempt == "1" else (200, {}, b"ok", 0)
        if path.startswith("/retry"):
            return (500, {}, b"try again", 0) if attempt == "1" else (200, {}, b"ok", 0)
        if path.startswith("/fail"):
            return 500, {}, b"broken", 0
        if path.startswith("/gone"):
            return 410, {}, b"gone", 0
        if path.startswith("/redirect"):
            return 302, {"Location": self.url + "/ok/redirected"}, b"", 0
        if path.startswith("/slow"):
            return 200, {}, b"late", 1.5
        if path.startswith("/big"):
            return 200, {}, b"x" * 10000, 0
        return 200, {"Content-Type": "application/json"}, b'{"received":true}', 0

    def for_task(self, tid):
        with self.cond:
            return [r for r in self.records if r["headers"].get("x-service-task-id") == str(tid)]

    def wait_task(self, tid, n=1, timeout=WAIT):
        deadline = time.time() + timeout
        with self.cond:
            while True:
                got = [r for r in self.records if r["headers"].get("x-service-task-id") == str(tid)]
                left = deadline - time.time()
                if len(got) >= n or left <= 0:
                    return got
                self.cond.wait(left)

    def stop(self):
        self.server.shutdown()


def std_webhooks_key(secret):
    if secret.startswith("whsec_"):
        return base64.b64decode(secret[len("whsec_"):])
    return secret.encode("utf-8")


def verify_signatures(name, rec, secret):
    """docs/design.md §6: X-Service-Signature and webhook-signature, computed from the text of docs/API.md."""
    h = rec["headers"]
    ts = h.get("x-service-timestamp", "")
    want = hmac.new(secret.encode("utf-8"), ts.encode() + b"\n" + rec["body"], hashlib.sha256).hexdigest()
    got = h.get("x-service-signature")
    R.check(f"{name}: X-Service-Signature = hex HMAC(secret, ts \\n body)", got == want, f"got {got!r}, want {want!r}")
    signed = f"{h.get('webhook-id', '')}.{h.get('webhook-timestamp', '')}.".encode() + rec["body"]
    mac = base64.b64encode(hmac.new(std_webhooks_key(secret), signed, hashlib.sha256).digest()).decode()
    sigs = (h.get("webhook-signature") or "").split(" ")
    good = any(s.startswith("v1,") and hmac.compare_digest(s[3:], mac) for s in sigs)
    R.check(f"{name}: webhook-signature = v1,base64 HMAC(key, id.ts.body)", good, f"got {h.get('webhook-signature')!r}, want v1,{mac}")
    try:
        from standardwebhooks.webhooks import Webhook  # type: ignore
    except ImportError:
        try:
            from standardwebhooks import Webhook  # type: ignore
        except ImportError:
            Webhook = None
    if Webhook is None:
        R.info(f"{name}: standardwebhooks package not importable; library verification skipped")
        return
    try:
        key = secret if secret.startswith("whsec_") else secret.encode("utf-8")
        hdrs = {
            "webhook-id": h.get("webhook-id", ""),
            "webhook-timestamp": h.get("webhook-timestamp", ""),
            "webhook-signature": h.get("webhook-signature", ""),
        }
        try:
            Webhook(key).verify(rec["body"], hdrs, json_parse=False)
        except TypeError:  # older releases have no json_parse (and parse the body as JSON)
            Webhook(key).verify(rec["body"], hdrs)
        R.check(f"{name}: standardwebhooks library verifies webhook-signature", True)
    except Exception as e:  # noqa: BLE001 - any failure of the library is the finding
        R.check(f"{name}: standardwebhooks library verifies webhook-signature", False, repr(e))


def check_delivery_headers(name, rec, tid, attempt=1):
    h = rec["headers"]
    R.check(f"{name}: X-Service-Task-Id = {tid}", h.get("x-service-task-id") == str(tid), short(h))
    R.check(f"{name}: X-Service-Attempt = {attempt}", h.get("x-service-attempt") == str(attempt), h.get("x-service-attempt"))
    ts = h.get("x-service-timestamp", "")
    R.check(
        f"{name}: X-Service-Timestamp is epoch seconds near now",
        ts.isdigit() and abs(int(ts) - time.time()) < 120,
        repr(ts),
    )
    R.check(f"{name}: webhook-id = task_{tid}", h.get("webhook-id") == f"task_{tid}", repr(h.get("webhook-id")))
    R.check(f"{name}: webhook-timestamp = X-Service-Timestamp", h.get("webhook-timestamp") == ts, repr(h.get("webhook-timestamp")))
    R.check(f"{name}: User-Agent webhookd/<version>", (h.get("user-agent") or "").startswith("webhookd/"), repr(h.get("user-agent")))


# --------------------------------------------------------------------------------------------
# the checks


class Ctx:
    pass


def phase_health(api):
    for path in ("/healthz",):
        try:
            with urllib.request.urlopen(api.url(path), timeout=10) as resp:
                status, body = resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as e:
            status, body = e.code, None
        R.check("GET /healthz unsigned -> 200 {\"status\":\"ok\",\"version\":\"<semver>\"} (§10)", status == 200 and isinstance(body, dict) and body.get("status") == "ok" and re.match(r"^\d+\.\d+\.\d+", str(body.get("version", ""))) is not None and set(body) == {"status", "version"}, f"{status} {body}")
    try:
        req = urllib.request.Request(api.url("/healthz"), method="HEAD")
        with urllib.request.urlopen(req, timeout=10) as resp:
            status, body = resp.status, resp.read()
    except urllib.error.HTTPError as e:
        status, body = e.code, b""
    R.check("HEAD /healthz -> 200, no body", status == 200 and body == b"", f"{status} {body[:100]!r}")
    try:
        with urllib.request.urlopen(api.url("/metrics"), timeout=10) as resp:
            status, text = resp.status, resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        status, text = e.code, ""
    R.check("GET /metrics unsigned -> 200 Prometheus text", status == 200 and "# TYPE" in text, f"HTTP {status}")


def phase_auth(api):
    path = "/v1/endpoints"
    # 40101: headers missing
    for missing in ("X-Key-ID", "X-Timestamp", "X-Signature"):
        h = api.sign("GET", path, b"")
        del h[missing]
        expect_err(f"GET {path} without {missing}", api.raw("GET", path, b"", h), 401, 40101, missing)
    expect_err(f"GET {path} with no auth headers", api.raw("GET", path, b"", {}), 401, 40101)
    # 40102: unknown key
    h = api.sign("GET", path, b"", key_id="whk_doesnotexist0000")
    r = expect_err(f"GET {path} unknown X-Key-ID", api.raw("GET", path, b"", h), 401, 40102)
    if "key" not in r.message.lower():
        R.info(f"40102 message does not mention the key: {r.message!r}")
    if api.revoked:
        rk, rs = api.revoked
        h = api.sign("GET", path, b"", secret=rs, key_id=rk)
        expect_err(f"GET {path} with a revoked key", api.raw("GET", path, b"", h), 401, 40102)
    else:
        R.info("no revoked key given (WEBHOOKD_REVOKED_KEY_ID/WEBHOOKD_REVOKED_SECRET): revoked-key check skipped")
    # 40103: bad signature
    h = api.sign("GET", path, b"", secret=api.secret + "x")
    r = expect_err(f"GET {path} wrong secret", api.raw("GET", path, b"", h), 401, 40103)
    if "signature" not in r.message.lower():
        R.info(f"40103 message does not mention the signature: {r.message!r}")
    # The bodyless payload is bound to the request: a signature for /v1/endpoints does not fit
    # /v1/endpoints?page=2 nor DELETE.
    h = api.sign("GET", path, b"")
    expect_err("signature of GET /v1/endpoints reused for GET /v1/endpoints?page=2", api.raw("GET", path + "?page=2", b"", h), 401, 40103)
    h = api.sign("GET", "/v1/endpoints/1", b"")
    expect_err("signature of GET /v1/endpoints/1 reused for DELETE", api.raw("DELETE", "/v1/endpoints/1", b"", h), 401, 40103)
    # a body signature covers the raw body
    body = b'{"cron_expr":"* * * * *"}'
    h = api.sign("POST", "/v1/cron/preview", body)
    expect_err("body changed after signing", api.raw("POST", "/v1/cron/preview", b'{"cron_expr":"0 * * * *"}', h), 401, 40103)
    # upper-case hex accepted
    h = api.sign("GET", path, b"")
    h["X-Signature"] = h["X-Signature"].upper()
    ok("upper-case hex X-Signature accepted", api.raw("GET", path, b"", h))
    # seconds and milliseconds
    time.sleep(0.001)
    ts = str(int(time.time()))
    h = api.sign("GET", path + "?page_size=3", b"", timestamp=ts)
    ok("X-Timestamp in seconds accepted", api.raw("GET", path + "?page_size=3", b"", h))
    h = api.sign("GET", path + "?page_size=4", b"")
    R.check("client's X-Timestamp has 13 digits (milliseconds)", len(h["X-Timestamp"]) == 13, h["X-Timestamp"])
    ok("X-Timestamp in milliseconds accepted", api.raw("GET", path + "?page_size=4", b"", h))
    h = api.sign("GET", path + "?page_size=5", b"", timestamp=str(int(time.time()) - 240))
    ok("X-Timestamp 240 s old accepted (window ±300 s)", api.raw("GET", path + "?page_size=5", b"", h))
    # 40104: outside the window
    for label, ts in (
        ("400 s old (seconds)", str(int(time.time()) - 400)),
        ("400 s ahead (seconds)", str(int(time.time()) + 400)),
        ("400 s old (milliseconds)", str(int(time.time() * 1000) - 400000)),
    ):
        h = api.sign("GET", path, b"", timestamp=ts)
        expect_err(f"X-Timestamp {label}", api.raw("GET", path, b"", h), 401, 40104, "X-Timestamp")
    # 40105: replay
    h = api.sign("GET", path + "?page=1", b"")
    first = api.raw("GET", path + "?page=1", b"", h)
    ok("first use of a signature accepted", first)
    expect_err("same (key id, signature) sent again", api.raw("GET", path + "?page=1", b"", h), 401, 40105)
    body = json.dumps({"cron_expr": "0 * * * *", "count": 1}).encode()
    h = api.sign("POST", "/v1/cron/preview", body)
    ok("signed POST accepted once", api.raw("POST", "/v1/cron/preview", body, h))
    expect_err("signed POST replayed", api.raw("POST", "/v1/cron/preview", body, h), 401, 40105)


def phase_generic_errors(api):
    expect_err("GET /v1/no-such-route", api.call("GET", "/v1/no-such-route"), 404, 40401)
    expect_err("GET /v1/endpoints/1/nothing", api.call("GET", "/v1/endpoints/1/nothing"), 404, 40401)
    expect_err("GET /v1/endpoints/999999999 (missing id)", api.call("GET", "/v1/endpoints/999999999"), 404, 40401)
    for method, path in (
        ("PUT", "/v1/endpoints"),
        ("DELETE", "/v1/endpoints"),
        ("PUT", "/v1/endpoints/1"),
        ("POST", "/v1/endpoints/1"),
        ("GET", "/v1/endpoints/1/enable"),
        ("PUT", "/v1/retries/policies/1"),
        ("DELETE", "/v1/events/1"),
        ("PATCH", "/v1/events"),
        ("GET", "/v1/cron/preview"),
        ("GET", "/v1/schedules/1/trigger"),
        ("DELETE", "/v1/tasks/1"),
        ("GET", "/v1/tasks/1/cancel"),
        ("POST", "/v1/tasks/1/attempts"),
    ):
        expect_err(f"{method} {path}", api.call(method, path), 405, 40501)
    # 40002
    for label, body in (("not JSON", b"name=x"), ("a JSON array", b"[1,2]"), ("a JSON string", b'"x"'), ("JSON null", b"null"), ("truncated JSON", b'{"name": "x"')):
        expect_err(f"POST /v1/endpoints body {label}", api.call("POST", "/v1/endpoints", body), 400, 40002)
    expect_err("POST /v1/events body not JSON", api.call("POST", "/v1/events", b"{nope"), 400, 40002)
    expect_err("PATCH /v1/endpoints/1 body a JSON array", api.call("PATCH", "/v1/endpoints/1", b"[]"), 400, 40002)
    # 413 (1 MiB limit) and the boundary
    # padded with JSON whitespace: an unknown padding field would be refused (§3)
    base = b'{"cron_expr":"* * * * *"'
    tail = b'}'
    exact = base + b" " * (1048576 - len(base) - len(tail)) + tail
    r = api.call("POST", "/v1/cron/preview", exact)
    R.check("body of exactly 1 MiB is not over the limit (200)", r.status == 200 and r.code == 0, r.brief())
    over = base + b" " * (1048577 - len(base) - len(tail)) + tail
    expect_err("body of 1 MiB + 1 byte", api.call("POST", "/v1/cron/preview", over), 413, 41301)
    # malformed query parameters
    expect_err("GET /v1/endpoints?page=abc", api.call("GET", "/v1/endpoints?page=abc"), 400, 40001, "page")
    expect_err("GET /v1/endpoints?page_size=x", api.call("GET", "/v1/endpoints?page_size=x"), 400, 40001, "page_size")
    expect_err("GET /v1/endpoints?page=0 (page ≥ 1)", api.call("GET", "/v1/endpoints?page=0"), 400, 40001, "page")
    expect_err("GET /v1/tasks?schedule_id=abc", api.call("GET", "/v1/tasks?schedule_id=abc"), 400, 40001, "schedule_id")
    expect_err("GET /v1/tasks?event_id=1.5", api.call("GET", "/v1/tasks?event_id=1.5"), 400, 40001, "event_id")
    expect_err("GET /v1/tasks?endpoint_id=x", api.call("GET", "/v1/tasks?endpoint_id=x"), 400, 40001, "endpoint_id")
    r = api.call("GET", "/v1/endpoints/abc")
    R.check(
        "GET /v1/endpoints/abc (non-integer id) -> 40001 or 40401",
        (r.status, r.code) in ((400, 40001), (404, 40401)),
        r.brief(),
    )
    R.info(f"GET /v1/endpoints/abc answered HTTP {r.status} code {r.code} (docs/design.md does not pick one)")
    for path, field in (
        ("/v1/endpoints?status=weird", "status"),
        ("/v1/schedules?status=weird", "status"),
        ("/v1/tasks?status=weird", "status"),
        ("/v1/tasks?task_type=weird", "task_type"),
    ):
        r = api.call("GET", path)
        if r.status == 400:
            expect_err(f"GET {path}", r, 400, 40001, field)
        else:
            R.info(f"GET {path} (unknown enum value) answered HTTP {r.status} code {r.code}")


def phase_policies(api, ctx):
    d = ok("POST /v1/retries/policies (defaults)", api.call("POST", "/v1/retries/policies", {"name": "conf-fixed", "max_attempts": 3, "backoff_type": "fixed"})) or {}
    has_fields("policy record has SPEC fields", d, ["id", "app_id", "name", "max_attempts", "backoff_type", "initial_delay_sec", "max_delay_sec", "status", "created_at"])
    R.check("policy defaults initial_delay_sec 60, max_delay_sec 3600, status active", (d.get("initial_delay_sec"), d.get("max_delay_sec"), d.get("status")) == (60, 3600, "active"), short(d))
    R.check("policy id is a positive integer", isinstance(d.get("id"), int) and d["id"] > 0, short(d))
    p1 = d.get("id")
    ctx.app1_id = d.get("app_id")
    d2 = ok("POST /v1/retries/policies linear with delays", api.call("POST", "/v1/retries/policies", {"name": "conf-linear", "max_attempts": 100, "backoff_type": "linear", "initial_delay_sec": 0, "max_delay_sec": 604800})) or {}
    R.check("policy bounds accepted: max_attempts 100, initial 0, max 604800", (d2.get("max_attempts"), d2.get("initial_delay_sec"), d2.get("max_delay_sec"), d2.get("backoff_type")) == (100, 0, 604800, "linear"), short(d2))
    p2 = d2.get("id")
    d3 = ok("POST /v1/retries/policies exponential", api.call("POST", "/v1/retries/policies", {"name": "conf-exp", "max_attempts": 1, "backoff_type": "exponential", "initial_delay_sec": 86400, "max_delay_sec": 86400})) or {}
    p3 = d3.get("id")
    got = ok("GET /v1/retries/policies/{id}", api.call("GET", f"/v1/retries/policies/{p1}")) or {}
    R.check("GET policy returns the created record", got == d, f"{short(got)} vs {short(d)}")
    page = ok("GET /v1/retries/policies?page_size=2", api.call("GET", "/v1/retries/policies?page_size=2")) or {}
    R.check("policy list: page object with page 1, page_size 2, 2 items, total ≥ 3", page.get("page") == 1 and page.get("page_size") == 2 and len(page.get("items") or []) == 2 and (page.get("total") or 0) >= 3, short(page))
    R.check("policy list newest first", ids_of(page.get("items"))[:2] == [p3, p2], f"{ids_of(page.get('items'))} vs {[p3, p2]}")
    pg2 = ok("GET /v1/retries/policies?page=2&page_size=2", api.call("GET", "/v1/retries/policies?page=2&page_size=2")) or {}
    a, b = ids_of(page.get("items")), ids_of(pg2.get("items"))
    R.check("policy list page 2 continues the order (older ids, no overlap)", b and a and max(b) < min(a) and b == sorted(b, reverse=True) and p1 in b, f"{a} then {b}")
    # PATCH
    pd = ok("PATCH /v1/retries/policies/{id} max_attempts", api.call("PATCH", f"/v1/retries/policies/{p1}", {"max_attempts": 7})) or {}
    R.check("policy PATCH changes only the sent field", pd.get("max_attempts") == 7 and all(pd.get(k) == d.get(k) for k in ("name", "backoff_type", "initial_delay_sec", "max_delay_sec")), short(pd))
    pd = ok("PATCH policy backoff_type + name", api.call("PATCH", f"/v1/retries/policies/{p1}", {"backoff_type": "exponential", "name": "conf-renamed"})) or {}
    R.check("policy PATCH applied", pd.get("backoff_type") == "exponential" and pd.get("name") == "conf-renamed" and pd.get("max_attempts") == 7, short(pd))
    expect_err("PATCH policy initial_delay_sec above its max_delay_sec", api.call("PATCH", f"/v1/retries/policies/{p1}", {"initial_delay_sec": 5000}), 400, 40001, ("initial_delay_sec", "max_delay_sec"))
    expect_err("PATCH policy max_attempts null (not nullable)", api.call("PATCH", f"/v1/retries/policies/{p1}", {"max_attempts": None}), 400, 40001, "max_attempts")
    expect_err("PATCH policy max_attempts 0", api.call("PATCH", f"/v1/retries/policies/{p1}", {"max_attempts": 0}), 400, 40001, "max_attempts")
    expect_err("PATCH missing policy", api.call("PATCH", "/v1/retries/policies/999999999", {"max_attempts": 2}), 404, 40401)
    # validation on create
    base = {"name": "v", "max_attempts": 3, "backoff_type": "fixed"}
    cases = [
        ("missing name", {k: v for k, v in base.items() if k != "name"}, "name"),
        ("empty name", dict(base, name=""), "name"),
        ("name of 201 characters", dict(base, name="n" * 201), "name"),
        ("missing max_attempts", {k: v for k, v in base.items() if k != "max_attempts"}, "max_attempts"),
        ("max_attempts 0", dict(base, max_attempts=0), "max_attempts"),
        ("max_attempts 101", dict(base, max_attempts=101), "max_attempts"),
        ("max_attempts \"3\" (string)", dict(base, max_attempts="3"), "max_attempts"),
        ("max_attempts 2.5", dict(base, max_attempts=2.5), "max_attempts"),
        ("missing backoff_type", {k: v for k, v in base.items() if k != "backoff_type"}, "backoff_type"),
        ("backoff_type random", dict(base, backoff_type="random"), "backoff_type"),
        ("initial_delay_sec -1", dict(base, initial_delay_sec=-1), "initial_delay_sec"),
        ("initial_delay_sec 86401", dict(base, initial_delay_sec=86401, max_delay_sec=604800), "initial_delay_sec"),
        ("max_delay_sec below initial", dict(base, initial_delay_sec=100, max_delay_sec=50), "max_delay_sec"),
        ("max_delay_sec 604801", dict(base, max_delay_sec=604801), "max_delay_sec"),
    ]
    for label, body, field in cases:
        expect_err(f"POST /v1/retries/policies {label}", api.call("POST", "/v1/retries/policies", body), 400, 40001, field)
    ok("POST policy with 200-character name", api.call("POST", "/v1/retries/policies", dict(base, name="p" * 200)))
    # max_delay_sec defaults to 3600 and must be ≥ initial: an initial above 3600 without a max
    # breaks the rule.
    expect_err("POST /v1/retries/policies initial_delay_sec 7200 without max_delay_sec (default 3600 < initial)", api.call("POST", "/v1/retries/policies", dict(base, initial_delay_sec=7200)), 400, 40001, "max_delay_sec")
    r = expect_err("unknown JSON field is refused (§3, changed 2026-11-23)", api.call("POST", "/v1/retries/policies", dict(base, name="conf-extra", surprise={"x": 1})), 400, 40001, "surprise")
    r = expect_err("misspelt field is refused with the nearest name", api.call("POST", "/v1/retries/policies", dict(base, name="conf-extra", max_attempt=3)), 400, 40001, "max_attempt")
    R.check("misspelt field: message suggests max_attempts", r is not None and '"max_attempts"' in (r.message or ""), r.brief() if r else "")
    ctx.p1, ctx.p2, ctx.p3 = p1, p2, p3


def endpoint_body(ctx, name, path, **extra):
    body = {"name": name, "url": ctx.rx.url + path}
    body.update(extra)
    return body


def phase_endpoints(api, ctx):
    rx = ctx.rx
    fields = ["id", "app_id", "name", "url", "method", "headers", "secret", "timeout_ms", "retry_policy_id", "filter_events", "status", "created_at", "updated_at"]
    d = ok("POST /v1/endpoints (defaults)", api.call("POST", "/v1/endpoints", {"name": "conf-basic", "url": rx.url + "/ok/basic"})) or {}
    has_fields("endpoint record has every SPEC field (secret included)", d, fields)
    R.check("endpoint defaults: method POST, timeout_ms 30000, status enabled", (d.get("method"), d.get("timeout_ms"), d.get("status")) == ("POST", 30000, "enabled"), short(d))
    R.check("endpoint without policy/filter has them null or empty", d.get("retry_policy_id") is None and not d.get("filter_events"), short(d))
    # §22: signed by default: no secret given → a whsec_ secret of 32 random bytes, returned.
    secret = d.get("secret") or ""
    try:
        key = base64.b64decode(secret[len("whsec_"):], validate=True) if secret.startswith("whsec_") else b""
    except ValueError:
        key = b""
    R.check("endpoint without secret gets a whsec_ secret of 32 bytes (§22)", len(key) == 32, short(d))
    du = ok("POST /v1/endpoints with secret null (unsigned)", api.call("POST", "/v1/endpoints", {"name": "conf-unsigned", "url": rx.url + "/ok/unsigned", "filter_events": "zz.never", "secret": None})) or {}
    R.check("endpoint with secret null is unsigned (§22)", du.get("secret") is None, short(du))
    R.check("endpoint app_id is the key's app", d.get("app_id") == ctx.app1_id, short(d))
    e_basic = d.get("id")
    ctx.e_basic = d
    full = {
        "name": "conf-full ✓ café",
        "url": rx.url + "/ok/full?x=1",
        "method": "PUT",
        "headers": {"X-Tenant": "t1", "Authorization": "Bearer abc"},
        "secret": "s3cret-ünïcode",
        "timeout_ms": 300000,
        "retry_policy_id": ctx.p1,
        "filter_events": "order.*,invoice.paid",
    }
    d = ok("POST /v1/endpoints with every field (unicode name and secret)", api.call("POST", "/v1/endpoints", full)) or {}
    R.check("endpoint stores every field as sent", all(d.get(k) == v for k, v in full.items()), short(d))
    e_full = d.get("id")
    g = ok("GET /v1/endpoints/{id}", api.call("GET", f"/v1/endpoints/{e_full}")) or {}
    R.check("GET endpoint returns the created record", g == d, f"{short(g)} vs {short(d)}")
    for m in ("GET", "POST", "PUT", "PATCH", "DELETE"):
        dm = ok(f"POST /v1/endpoints method {m}", api.call("POST", "/v1/endpoints", {"name": f"conf-m-{m}", "url": rx.url + "/ok/m", "method": m})) or {}
        R.check(f"endpoint record carries method {m}", dm.get("method") == m, short(dm))
        ctx.extra_endpoints.append(dm.get("id"))
    ok("POST endpoint with https URL and timeout_ms 1", api.call("POST", "/v1/endpoints", {"name": "conf-https", "url": "https://example.com/hook", "timeout_ms": 1, "filter_events": "zz.never"}))
    ok("POST endpoint with 200-character unicode name", api.call("POST", "/v1/endpoints", {"name": "é" * 200, "url": rx.url + "/ok/long", "filter_events": "zz.never"}))
    # validation
    base = {"name": "v", "url": rx.url + "/ok/v"}
    cases = [
        ("missing name", {"url": base["url"]}, "name"),
        ("empty name", dict(base, name=""), "name"),
        ("name of 201 characters", dict(base, name="é" * 201), "name"),
        ("name 42 (number)", dict(base, name=42), "name"),
        ("missing url", {"name": "v"}, "url"),
        ("url ftp://", dict(base, url="ftp://example.com/x"), "url"),
        ("url relative", dict(base, url="/hook"), "url"),
        ("url without host", dict(base, url="http://"), "url"),
        ("url not a URL", dict(base, url="not a url"), "url"),
        ("url 5 (number)", dict(base, url=5), "url"),
        ("method FETCH", dict(base, method="FETCH"), "method"),
        ("timeout_ms 0", dict(base, timeout_ms=0), "timeout_ms"),
        ("timeout_ms 300001", dict(base, timeout_ms=300001), "timeout_ms"),
        ("timeout_ms \"100\" (string)", dict(base, timeout_ms="100"), "timeout_ms"),
        ("retry_policy_id 999999999 (missing)", dict(base, retry_policy_id=999999999), "retry_policy_id"),
        ("headers a list", dict(base, headers=["a"]), "headers"),
        ("headers value a number", dict(base, headers={"X-A": 1}), "headers"),
        ("reserved header X-Service-Task-Id", dict(base, headers={"X-Service-Task-Id": "1"}), "headers"),
        ("reserved header x-service-anything", dict(base, headers={"x-service-anything": "1"}), "headers"),
        ("reserved header webhook-id", dict(base, headers={"webhook-id": "x"}), "headers"),
        ("reserved header Webhook-Signature", dict(base, headers={"Webhook-Signature": "x"}), "headers"),
        ("reserved header Content-Type", dict(base, headers={"Content-Type": "text/plain"}), "headers"),
        ("reserved header content-length", dict(base, headers={"content-length": "3"}), "headers"),
        ("reserved header Host", dict(base, headers={"Host": "evil"}), "headers"),
        ("filter_events a number", dict(base, filter_events=5), "filter_events"),
        ("secret a number", dict(base, secret=5), "secret"),
        ("headers a string holding an object (string form is for PATCH only)", dict(base, headers=json.dumps({"X-A": "1"}), filter_events="zz.never"), "headers"),
    ]
    for label, body, field in cases:
        expect_err(f"POST /v1/endpoints {label}", api.call("POST", "/v1/endpoints", body), 400, 40001, field)
    # lists
    page = ok("GET /v1/endpoints", api.call("GET", "/v1/endpoints")) or {}
    R.check("endpoint list: page 1, page_size 20 by default", page.get("page") == 1 and page.get("page_size") == 20, short(page))
    items = page.get("items") or []
    R.check("endpoint list newest first (id descending)", ids_of(items) == sorted(ids_of(items), reverse=True) and len(items) > 1, str(ids_of(items)))
    total = page.get("total")
    R.check("endpoint list total counts all", isinstance(total, int) and total >= len(items) and total >= 9, str(total))
    p1 = ok("GET /v1/endpoints?page=1&page_size=3", api.call("GET", "/v1/endpoints?page=1&page_size=3")) or {}
    p2 = ok("GET /v1/endpoints?page=2&page_size=3", api.call("GET", "/v1/endpoints?page=2&page_size=3")) or {}
    a, b = ids_of(p1.get("items")), ids_of(p2.get("items"))
    R.check("pages follow each other (3 + 3, descending, no overlap)", len(a) == 3 and len(b) == 3 and a + b == sorted(a + b, reverse=True) and not set(a) & set(b), f"{a} {b}")
    for q, want in (("page_size=0", 1), ("page_size=-5", 1), ("page_size=1000", 100), ("page_size=100", 100), ("page_size=1", 1)):
        pg = ok(f"GET /v1/endpoints?{q}", api.call("GET", f"/v1/endpoints?{q}")) or {}
        R.check(f"page_size clamped: {q} reports page_size {want}", pg.get("page_size") == want and len(pg.get("items") or []) <= want, f"page_size {pg.get('page_size')} items {len(pg.get('items') or [])}")
    far = ok("GET /v1/endpoints?page=9999", api.call("GET", "/v1/endpoints?page=9999")) or {}
    R.check("page past the end: empty items, total kept", far.get("items") == [] and far.get("total") == total and far.get("page") == 9999, short(far))
    # PATCH: omitted unchanged, null clears
    pd = ok("PATCH endpoint name only", api.call("PATCH", f"/v1/endpoints/{e_full}", {"name": "conf-full-renamed"})) or {}
    R.check("PATCH: omitted fields unchanged", pd.get("name") == "conf-full-renamed" and all(pd.get(k) == v for k, v in full.items() if k != "name"), short(pd))
    pd = ok("PATCH endpoint retry_policy_id null, filter_events null", api.call("PATCH", f"/v1/endpoints/{e_full}", {"retry_policy_id": None, "filter_events": None})) or {}
    R.check("PATCH null clears retry_policy_id", pd.get("retry_policy_id") is None, short(pd))
    R.check("PATCH null clears filter_events", not pd.get("filter_events"), short(pd))
    if pd.get("filter_events") is not None:
        R.info(f"cleared filter_events reads back as {pd.get('filter_events')!r}, not null")
    R.check("PATCH null of two fields keeps the rest", pd.get("headers") == full["headers"] and pd.get("secret") == full["secret"] and pd.get("method") == "PUT", short(pd))
    pd = ok("PATCH endpoint headers as a string holding a JSON object", api.call("PATCH", f"/v1/endpoints/{e_full}", {"headers": json.dumps({"X-From-String": "yes"})})) or {}
    R.check("headers string stored as the object", pd.get("headers") == {"X-From-String": "yes"}, short(pd.get("headers")))
    pd = ok("PATCH endpoint headers as an object", api.call("PATCH", f"/v1/endpoints/{e_full}", {"headers": {"X-Obj": "1"}})) or {}
    R.check("headers object stored", pd.get("headers") == {"X-Obj": "1"}, short(pd.get("headers")))
    expect_err("PATCH endpoint headers string that is not an object", api.call("PATCH", f"/v1/endpoints/{e_full}", {"headers": "[1]"}), 400, 40001, "headers")
    expect_err("PATCH endpoint headers string, reserved name", api.call("PATCH", f"/v1/endpoints/{e_full}", {"headers": json.dumps({"Host": "x"})}), 400, 40001, "headers")
    for m in ("GET", "DELETE", "PATCH"):
        pd = ok(f"PATCH endpoint method {m}", api.call("PATCH", f"/v1/endpoints/{e_full}", {"method": m})) or {}
        R.check(f"PATCH method {m} stored", pd.get("method") == m, short(pd))
    pd = ok("PATCH endpoint url, timeout_ms, retry_policy_id, filter_events", api.call("PATCH", f"/v1/endpoints/{e_full}", {"url": rx.url + "/ok/patched", "timeout_ms": 1234, "retry_policy_id": ctx.p2, "filter_events": "zz.never"})) or {}
    R.check("PATCH values stored", (pd.get("url"), pd.get("timeout_ms"), pd.get("retry_policy_id"), pd.get("filter_events")) == (rx.url + "/ok/patched", 1234, ctx.p2, "zz.never"), short(pd))
    for label, body, field in (
        ("url ftp", {"url": "ftp://x/y"}, "url"),
        ("method FETCH", {"method": "FETCH"}, "method"),
        ("timeout_ms 0", {"timeout_ms": 0}, "timeout_ms"),
        ("timeout_ms 300001", {"timeout_ms": 300001}, "timeout_ms"),
        ("name empty", {"name": ""}, "name"),
        ("name null (not nullable)", {"name": None}, "name"),
        ("retry_policy_id missing policy", {"retry_policy_id": 999999999}, "retry_policy_id"),
        ("clear_secret \"yes\"", {"clear_secret": "yes"}, "clear_secret"),
    ):
        expect_err(f"PATCH /v1/endpoints/{{id}} {label}", api.call("PATCH", f"/v1/endpoints/{e_full}", body), 400, 40001, field)
    pd = ok("PATCH clear_secret true", api.call("PATCH", f"/v1/endpoints/{e_full}", {"clear_secret": True})) or {}
    R.check("clear_secret removes the secret", not pd.get("secret"), short(pd))
    pd = ok("PATCH secret again", api.call("PATCH", f"/v1/endpoints/{e_full}", {"secret": "again"})) or {}
    R.check("secret set again", pd.get("secret") == "again", short(pd))
    expect_err("PATCH missing endpoint", api.call("PATCH", "/v1/endpoints/999999999", {"name": "x"}), 404, 40401)
    # enable/disable, idempotent
    for verb, status in (("disable", "disabled"), ("disable", "disabled"), ("enable", "enabled"), ("enable", "enabled")):
        dd = ok(f"POST /v1/endpoints/{{id}}/{verb}", api.call("POST", f"/v1/endpoints/{e_basic}/{verb}")) or {}
        R.check(f"{verb} -> status {status} (full record)", dd.get("status") == status and dd.get("id") == e_basic and "url" in dd, short(dd))
    expect_err("POST /v1/endpoints/999999999/enable", api.call("POST", "/v1/endpoints/999999999/enable"), 404, 40401)
    ok("disable an endpoint for the status filter", api.call("POST", f"/v1/endpoints/{e_basic}/disable"))
    dis = list_all(api, "/v1/endpoints?status=disabled")
    ena = list_all(api, "/v1/endpoints?status=enabled")
    R.check("GET /v1/endpoints?status=disabled lists only disabled ones", e_basic in ids_of(dis) and all(i.get("status") == "disabled" for i in dis), str(ids_of(dis)))
    R.check("GET /v1/endpoints?status=enabled lists only enabled ones", e_basic not in ids_of(ena) and all(i.get("status") == "enabled" for i in ena), str(ids_of(ena)))
    ok("enable it again", api.call("POST", f"/v1/endpoints/{e_basic}/enable"))
    # policy attached -> 409
    expect_err("DELETE /v1/retries/policies/{id} while an endpoint uses it", api.call("DELETE", f"/v1/retries/policies/{ctx.p2}"), 409, 40901)
    ok("detach the policy", api.call("PATCH", f"/v1/endpoints/{e_full}", {"retry_policy_id": None}))
    dd = ok("DELETE /v1/retries/policies/{id} once detached", api.call("DELETE", f"/v1/retries/policies/{ctx.p2}"))
    R.check("policy delete answers {id, deleted: true}", dd == {"id": ctx.p2, "deleted": True}, short(dd))
    expect_err("GET deleted policy", api.call("GET", f"/v1/retries/policies/{ctx.p2}"), 404, 40401)
    expect_err("DELETE missing policy", api.call("DELETE", "/v1/retries/policies/999999999"), 404, 40401)
    expect_err("POST endpoint naming a deleted policy", api.call("POST", "/v1/endpoints", dict(base, retry_policy_id=ctx.p2)), 400, 40001, "retry_policy_id")
    ctx.e_full = e_full
    ctx.e_full_created = g


def phase_preview(api):
    P = "/v1/cron/preview"
    cases = [
        ("fixed-time spring forward (Berlin 30 2)", {"cron_expr": "30 2 * * *", "timezone": "Europe/Berlin", "from": "2025-03-29T12:00:00Z", "count": 2}, ["2025-03-30T01:00:00Z", "2025-03-31T00:30:00Z"]),
        ("fixed-time fall back (Berlin 30 2)", {"cron_expr": "30 2 * * *", "timezone": "Europe/Berlin", "from": "2025-10-25T12:00:00Z", "count": 2}, ["2025-10-26T00:30:00Z", "2025-10-27T01:30:00Z"]),
        ("gap times collapse into one firing (Berlin 0,30 2)", {"cron_expr": "0,30 2 * * *", "timezone": "Europe/Berlin", "from": "2025-03-29T12:00:00Z", "count": 3}, ["2025-03-30T01:00:00Z", "2025-03-31T00:00:00Z", "2025-03-31T00:30:00Z"]),
        ("interval-like spring forward skips gap (Berlin */30)", {"cron_expr": "*/30 * * * *", "timezone": "Europe/Berlin", "from": "2025-03-30T00:00:00Z", "count": 3}, ["2025-03-30T00:30:00Z", "2025-03-30T01:00:00Z", "2025-03-30T01:30:00Z"]),
        ("interval-like fall back fires both (Berlin */30)", {"cron_expr": "*/30 * * * *", "timezone": "Europe/Berlin", "from": "2025-10-26T00:00:00Z", "count": 4}, ["2025-10-26T00:30:00Z", "2025-10-26T01:00:00Z", "2025-10-26T01:30:00Z", "2025-10-26T02:00:00Z"]),
        ("interval-like hourly fall back (Berlin 0 *)", {"cron_expr": "0 * * * *", "timezone": "Europe/Berlin", "from": "2025-10-25T23:30:00Z", "count": 3}, ["2025-10-26T00:00:00Z", "2025-10-26T01:00:00Z", "2025-10-26T02:00:00Z"]),
        ("strictly after from", {"cron_expr": "0 0 * * *", "from": "2025-07-01T00:00:00Z", "count": 1}, ["2025-07-02T00:00:00Z"]),
        ("from as epoch seconds", {"cron_expr": "0 0 * * *", "from": 1751328000, "count": 1}, ["2025-07-02T00:00:00Z"]),
        ("from with a UTC offset", {"cron_expr": "0 0 * * *", "from": "2025-07-01T02:00:00+02:00", "count": 1}, ["2025-07-02T00:00:00Z"]),
        ("Vixie OR of both day fields (13 and FRI)", {"cron_expr": "0 0 13 * FRI", "from": "2025-07-01T00:00:00Z", "count": 4}, ["2025-07-04T00:00:00Z", "2025-07-11T00:00:00Z", "2025-07-13T00:00:00Z", "2025-07-18T00:00:00Z"]),
        ("day-of-week 7 is Sunday", {"cron_expr": "0 0 * * 7", "from": "2025-07-01T00:00:00Z", "count": 1}, ["2025-07-06T00:00:00Z"]),
        ("day-of-week 0 is Sunday", {"cron_expr": "0 0 * * 0", "from": "2025-07-01T00:00:00Z", "count": 1}, ["2025-07-06T00:00:00Z"]),
        ("1-5 is Monday-Friday", {"cron_expr": "0 0 * * 1-5", "from": "2025-07-05T00:00:00Z", "count": 2}, ["2025-07-07T00:00:00Z", "2025-07-08T00:00:00Z"]),
        ("month name JAN", {"cron_expr": "0 12 1 JAN *", "from": "2025-07-01T00:00:00Z", "count": 1}, ["2026-01-01T12:00:00Z"]),
        ("weekday name MON", {"cron_expr": "0 0 * * MON", "from": "2025-07-01T00:00:00Z", "count": 1}, ["2025-07-07T00:00:00Z"]),
        ("range with step 9-17/4", {"cron_expr": "0 9-17/4 * * *", "from": "2025-07-01T00:00:00Z", "count": 3}, ["2025-07-01T09:00:00Z", "2025-07-01T13:00:00Z", "2025-07-01T17:00:00Z"]),
        ("list 5,35", {"cron_expr": "5,35 1 * * *", "from": "2025-07-01T00:00:00Z", "count": 2}, ["2025-07-01T01:05:00Z", "2025-07-01T01:35:00Z"]),
        ("L (last day of month)", {"cron_expr": "0 0 L * *", "from": "2025-02-01T00:00:00Z", "count": 1}, ["2025-02-28T00:00:00Z"]),
        ("# (second Friday)", {"cron_expr": "0 0 * * 5#2", "from": "2025-07-01T00:00:00Z", "count": 1}, ["2025-07-11T00:00:00Z"]),
        ("W (nearest weekday to the 15th)", {"cron_expr": "0 0 15W * *", "from": "2025-06-01T00:00:00Z", "count": 1}, ["2025-06-16T00:00:00Z"]),
        ("@hourly", {"cron_expr": "@hourly", "from": "2025-07-01T00:10:00Z", "count": 2}, ["2025-07-01T01:00:00Z", "2025-07-01T02:00:00Z"]),
        ("@daily", {"cron_expr": "@daily", "from": "2025-07-01T00:10:00Z", "count": 1}, ["2025-07-02T00:00:00Z"]),
        ("@weekly (Sunday midnight)", {"cron_expr": "@weekly", "from": "2025-07-01T00:00:00Z", "count": 1}, ["2025-07-06T00:00:00Z"]),
        ("@monthly", {"cron_expr": "@monthly", "from": "2025-07-01T00:00:00Z", "count": 1}, ["2025-08-01T00:00:00Z"]),
        ("@yearly", {"cron_expr": "@yearly", "from": "2025-07-01T00:00:00Z", "count": 1}, ["2026-01-01T00:00:00Z"]),
        ("half-hour zone Asia/Kolkata", {"cron_expr": "0 0 * * *", "timezone": "Asia/Kolkata", "from": "2025-07-01T00:00:00Z", "count": 1}, ["2025-07-01T18:30:00Z"]),
        ("New York fall back fixed-time 30 1", {"cron_expr": "30 1 * * *", "timezone": "America/New_York", "from": "2025-11-02T00:00:00Z", "count": 2}, ["2025-11-02T05:30:00Z", "2025-11-03T06:30:00Z"]),
    ]
    for label, body, want in cases:
        r = api.call("POST", P, body)
        got = (r.data or {}).get("next_runs") if r.code == 0 else None
        R.check(f"POST /v1/cron/preview {label}", got == want, f"want {want}, got {got if got is not None else r.brief()}")
    d = ok("POST /v1/cron/preview defaults (count 5, from now, UTC)", api.call("POST", P, {"cron_expr": "*/5 * * * *"})) or {}
    runs = d.get("next_runs") or []
    R.check("preview default count is 5, all in the future, ascending, 5 minutes apart", len(runs) == 5 and parse_ts(runs[0]) > time.time() - 1 and all(parse_ts(b) - parse_ts(a) == 300 for a, b in zip(runs, runs[1:])), str(runs))
    d = ok("POST /v1/cron/preview count 100", api.call("POST", P, {"cron_expr": "* * * * *", "count": 100})) or {}
    R.check("preview count 100 gives 100 runs", len(d.get("next_runs") or []) == 100, str(len(d.get("next_runs") or [])))
    for label, body, field in (
        ("missing cron_expr", {"timezone": "UTC"}, "cron_expr"),
        ("six fields", {"cron_expr": "0 0 0 * * *"}, "cron_expr"),
        ("four fields", {"cron_expr": "0 0 * *"}, "cron_expr"),
        ("@reboot", {"cron_expr": "@reboot"}, "cron_expr"),
        ("wrap-around range 22-2", {"cron_expr": "0 22-2 * * *"}, "cron_expr"),
        ("never fires 0 0 30 2 *", {"cron_expr": "0 0 30 2 *"}, "cron_expr"),
        ("minute 60", {"cron_expr": "60 * * * *"}, "cron_expr"),
        ("garbage", {"cron_expr": "every day"}, "cron_expr"),
        ("cron_expr a number", {"cron_expr": 5}, "cron_expr"),
        ("unknown time zone", {"cron_expr": "* * * * *", "timezone": "Mars/Olympus_Mons"}, "timezone"),
        ("count 0", {"cron_expr": "* * * * *", "count": 0}, "count"),
        ("count 101", {"cron_expr": "* * * * *", "count": 101}, "count"),
        ("from garbage", {"cron_expr": "* * * * *", "from": "yesterday"}, "from"),
    ):
        expect_err(f"POST /v1/cron/preview {label}", api.call("POST", P, body), 400, 40001, field)


def phase_schedules(api, ctx):
    rx = ctx.rx
    ea = ok("endpoint for schedules A", api.call("POST", "/v1/endpoints", endpoint_body(ctx, "conf-sched-a", "/ok/sched-a", filter_events="zz.never"))) or {}
    eb = ok("endpoint for schedules B", api.call("POST", "/v1/endpoints", endpoint_body(ctx, "conf-sched-b", "/ok/sched-b", filter_events="zz.never"))) or {}
    ec = ok("endpoint for schedules C (disabled)", api.call("POST", "/v1/endpoints", endpoint_body(ctx, "conf-sched-c", "/ok/sched-c", filter_events="zz.never"))) or {}
    a, b, c = ea.get("id"), eb.get("id"), ec.get("id")
    ok("disable endpoint C", api.call("POST", f"/v1/endpoints/{c}/disable"))
    now = time.time()
    year = datetime.now(timezone.utc).year
    d = ok("POST /v1/schedules (defaults)", api.call("POST", "/v1/schedules", {"name": "conf-yearly", "cron_expr": "0 0 1 1 *"})) or {}
    has_fields("schedule record has every SPEC field", d, ["id", "app_id", "name", "cron_expr", "timezone", "payload", "status", "next_run_at", "created_at", "updated_at", "endpoint_ids", "endpoint_names"])
    R.check("schedule defaults: timezone UTC, payload {}, endpoint_ids [], status active", (d.get("timezone"), d.get("payload"), d.get("endpoint_ids"), d.get("status")) == ("UTC", {}, [], "active"), short(d))
    R.check("schedule endpoint_names {} for no endpoints", d.get("endpoint_names") == {}, short(d.get("endpoint_names")))
    R.check("next_run_at of 0 0 1 1 * UTC is next 1 January", d.get("next_run_at") == f"{year + 1}-01-01T00:00:00Z", str(d.get("next_run_at")))
    s1 = d.get("id")
    berlin_ny = f"{year}-12-31T23:00:00Z" if parse_ts(f"{year}-12-31T23:00:00Z") > now else f"{year + 1}-12-31T23:00:00Z"
    pd = ok("PATCH schedule timezone Europe/Berlin", api.call("PATCH", f"/v1/schedules/{s1}", {"timezone": "Europe/Berlin"})) or {}
    R.check("PATCH timezone recomputes next_run_at (Berlin midnight = 23:00Z)", pd.get("next_run_at") == berlin_ny and pd.get("timezone") == "Europe/Berlin", str(pd.get("next_run_at")))
    pd = ok("PATCH schedule cron_expr 0 12 1 1 *", api.call("PATCH", f"/v1/schedules/{s1}", {"cron_expr": "0 12 1 1 *"})) or {}
    R.check("PATCH cron_expr recomputes next_run_at", pd.get("next_run_at") == f"{year + 1}-01-01T11:00:00Z" and pd.get("cron_expr") == "0 12 1 1 *", str(pd.get("next_run_at")))
    pd = ok("PATCH schedule payload as a string holding an object", api.call("PATCH", f"/v1/schedules/{s1}", {"payload": json.dumps({"k": [1, 2]})})) or {}
    R.check("payload string stored as the object", pd.get("payload") == {"k": [1, 2]}, short(pd.get("payload")))
    pd = ok("PATCH schedule payload as an object + name", api.call("PATCH", f"/v1/schedules/{s1}", {"payload": {"job": "report"}, "name": "conf-renamed"})) or {}
    R.check("PATCH payload object and name stored, rest unchanged", pd.get("payload") == {"job": "report"} and pd.get("name") == "conf-renamed" and pd.get("timezone") == "Europe/Berlin" and pd.get("cron_expr") == "0 12 1 1 *", short(pd))
    pd = ok("PATCH schedule endpoint_ids [a, b]", api.call("PATCH", f"/v1/schedules/{s1}", {"endpoint_ids": [a, b]})) or {}
    R.check("endpoint_ids and endpoint_names follow", sorted(pd.get("endpoint_ids") or []) == sorted([a, b]) and pd.get("endpoint_names") == {str(a): "conf-sched-a", str(b): "conf-sched-b"}, short(pd))
    for label, body, field in (
        ("cron_expr six fields", {"cron_expr": "0 0 0 * * *"}, "cron_expr"),
        ("timezone unknown", {"timezone": "Nowhere/Land"}, "timezone"),
        ("payload a list", {"payload": [1]}, "payload"),
        ("payload string that is not an object", {"payload": "[1]"}, "payload"),
        ("endpoint_ids unknown", {"endpoint_ids": [999999999]}, "endpoint_ids"),
        ("endpoint_ids not a list", {"endpoint_ids": "1"}, "endpoint_ids"),
        ("name empty", {"name": ""}, "name"),
        ("cron_expr null (not nullable)", {"cron_expr": None}, "cron_expr"),
    ):
        expect_err(f"PATCH /v1/schedules/{{id}} {label}", api.call("PATCH", f"/v1/schedules/{s1}", body), 400, 40001, field)
    expect_err("PATCH missing schedule", api.call("PATCH", "/v1/schedules/999999999", {"name": "x"}), 404, 40401)
    # create validation
    for label, body, field in (
        ("missing name", {"cron_expr": "* * * * *"}, "name"),
        ("name of 201 characters", {"name": "n" * 201, "cron_expr": "* * * * *"}, "name"),
        ("missing cron_expr", {"name": "x"}, "cron_expr"),
        ("six fields", {"name": "x", "cron_expr": "0 0 0 * * *"}, "cron_expr"),
        ("@reboot", {"name": "x", "cron_expr": "@reboot"}, "cron_expr"),
        ("wrap-around range 22-2", {"name": "x", "cron_expr": "0 22-2 * * *"}, "cron_expr"),
        ("never fires 0 0 30 2 *", {"name": "x", "cron_expr": "0 0 30 2 *"}, "cron_expr"),
        ("unknown time zone", {"name": "x", "cron_expr": "* * * * *", "timezone": "Europe/Atlantis"}, "timezone"),
        ("payload a list", {"name": "x", "cron_expr": "* * * * *", "payload": [1]}, "payload"),
        ("payload a string holding an object (string form is for PATCH only)", {"name": "x", "cron_expr": "0 0 1 1 *", "payload": "{\"a\":1}"}, "payload"),
        ("unknown endpoint_ids", {"name": "x", "cron_expr": "* * * * *", "endpoint_ids": [a, 999999999]}, "endpoint_ids"),
        ("endpoint_ids of strings", {"name": "x", "cron_expr": "* * * * *", "endpoint_ids": ["a"]}, "endpoint_ids"),
    ):
        expect_err(f"POST /v1/schedules {label}", api.call("POST", "/v1/schedules", body), 400, 40001, field)
    d = ok("POST /v1/schedules @daily", api.call("POST", "/v1/schedules", {"name": "conf-daily", "cron_expr": "@daily", "timezone": "UTC", "payload": {"p": 1}, "endpoint_ids": [a, c]})) or {}
    tomorrow = (int(now) // 86400 + 1) * 86400
    R.check("shorthand stored as given; next_run_at next UTC midnight", d.get("cron_expr") == "@daily" and d.get("next_run_at") == iso(tomorrow), short(d))
    s2 = d.get("id")
    # trigger: manual tasks with schedule_id, disabled endpoint C skipped
    td = ok("POST /v1/schedules/{id}/trigger", api.call("POST", f"/v1/schedules/{s2}/trigger")) or {}
    tids = td.get("task_ids") if isinstance(td, dict) else None
    R.check("trigger data is {task_ids: [...]} with one task (C is disabled)", isinstance(tids, list) and len(tids) == 1 and set(td.keys()) == {"task_ids"}, short(td))
    for tid in tids or []:
        t = get_task(api, tid)
        R.check("triggered task: task_type manual, schedule_id set, endpoint A, schedule payload", t.get("task_type") == "manual" and t.get("schedule_id") == s2 and t.get("endpoint_id") == a and t.get("payload") == {"p": 1}, short(t))
        ctx.trigger_task = tid
        ctx.trigger_schedule = s2
    listed = list_all(api, f"/v1/tasks?schedule_id={s2}")
    R.check("GET /v1/tasks?schedule_id= lists the triggered tasks", sorted(ids_of(listed)) == sorted(tids or []), f"{ids_of(listed)} vs {tids}")
    # pause / resume / delete
    pd = ok("POST /v1/schedules/{id}/pause", api.call("POST", f"/v1/schedules/{s2}/pause")) or {}
    R.check("paused: status paused, next_run_at null", pd.get("status") == "paused" and pd.get("next_run_at") is None, short(pd))
    paused = list_all(api, "/v1/schedules?status=paused")
    active = list_all(api, "/v1/schedules?status=active")
    R.check("GET /v1/schedules?status=paused lists it, only paused ones", s2 in ids_of(paused) and all(i.get("status") == "paused" for i in paused), str(ids_of(paused)))
    R.check("GET /v1/schedules?status=active lists active ones only", s2 not in ids_of(active) and s1 in ids_of(active) and all(i.get("status") == "active" for i in active), str(ids_of(active)))
    pd = ok("POST /v1/schedules/{id}/resume", api.call("POST", f"/v1/schedules/{s2}/resume")) or {}
    R.check("resumed: status active, next_run_at from now", pd.get("status") == "active" and pd.get("next_run_at") == iso((int(time.time()) // 86400 + 1) * 86400), short(pd))
    sp = ok("GET /v1/schedules?page_size=1", api.call("GET", "/v1/schedules?page_size=1")) or {}
    R.check("schedule list page object, newest first", sp.get("page_size") == 1 and ids_of(sp.get("items")) == [max(s1, s2)] and (sp.get("total") or 0) >= 2, short(sp))
    # deleting endpoint B drops it from s1's endpoint_ids
    dd = ok("DELETE /v1/endpoints/{id} (B, named by a schedule)", api.call("DELETE", f"/v1/endpoints/{b}"))
    R.check("endpoint delete answers {id, deleted: true}", dd == {"id": b, "deleted": True}, short(dd))
    g = ok("GET schedule after its endpoint was deleted", api.call("GET", f"/v1/schedules/{s1}")) or {}
    R.check("deleted endpoint dropped from endpoint_ids and endpoint_names", g.get("endpoint_ids") == [a] and g.get("endpoint_names") == {str(a): "conf-sched-a"}, short(g))
    expect_err("GET deleted endpoint", api.call("GET", f"/v1/endpoints/{b}"), 404, 40401)
    expect_err("DELETE deleted endpoint", api.call("DELETE", f"/v1/endpoints/{b}"), 404, 40401)
    expect_err("PATCH deleted endpoint", api.call("PATCH", f"/v1/endpoints/{b}", {"name": "x"}), 404, 40401)
    expect_err("POST schedule naming a deleted endpoint", api.call("POST", "/v1/schedules", {"name": "x", "cron_expr": "* * * * *", "endpoint_ids": [b]}), 400, 40001, "endpoint_ids")
    # delete schedule
    dd = ok("DELETE /v1/schedules/{id}", api.call("DELETE", f"/v1/schedules/{s1}"))
    R.check("schedule delete answers {id, deleted: true}", dd == {"id": s1, "deleted": True}, short(dd))
    g = ok("GET deleted schedule stays readable", api.call("GET", f"/v1/schedules/{s1}")) or {}
    R.check("deleted schedule: status deleted, next_run_at null", g.get("status") == "deleted" and g.get("next_run_at") is None, short(g))
    expect_err("POST /v1/schedules/{id}/resume of a deleted schedule", api.call("POST", f"/v1/schedules/{s1}/resume"), 409, 40901)
    expect_err("GET /v1/schedules/999999999", api.call("GET", "/v1/schedules/999999999"), 404, 40401)
    expect_err("POST /v1/schedules/999999999/pause", api.call("POST", "/v1/schedules/999999999/pause"), 404, 40401)
    expect_err("POST /v1/schedules/999999999/trigger", api.call("POST", "/v1/schedules/999999999/trigger"), 404, 40401)
    # a schedule with endpoint_ids [] fires to every enabled endpoint of the app
    d = ok("POST /v1/schedules with endpoint_ids [] (every endpoint)", api.call("POST", "/v1/schedules", {"name": "conf-all", "cron_expr": "0 0 1 1 *"})) or {}
    s3 = d.get("id")
    enabled = {i["id"] for i in list_all(api, "/v1/endpoints?status=enabled")}
    td = ok("trigger the every-endpoint schedule", api.call("POST", f"/v1/schedules/{s3}/trigger")) or {}
    got = {get_task(api, t).get("endpoint_id") for t in (td.get("task_ids") or [])}
    R.check("endpoint_ids [] = one task per enabled endpoint of the app", got == enabled and len(td.get("task_ids") or []) == len(enabled), f"{sorted(got)} vs {sorted(enabled)}")
    ok("delete the every-endpoint schedule", api.call("DELETE", f"/v1/schedules/{s3}"))
    ctx.sched_endpoint = a
    ctx.s2 = s2


def phase_events(api, ctx):
    rx = ctx.rx
    specs = {
        "order_star": "order.*",
        "star_created": "*.created",
        "invoice_paid": "invoice.paid",
        "empty": "",
        "absent": None,
        "list": "a.b,invoice.*",
    }
    eps = {}
    for tag, filt in specs.items():
        body = endpoint_body(ctx, f"conf-ev-{tag}", f"/ok/ev-{tag}")
        if filt is not None:
            body["filter_events"] = filt
        eps[tag] = (ok(f"endpoint with filter_events {filt!r}", api.call("POST", "/v1/endpoints", body)) or {}).get("id")
    dis = (ok("endpoint without filter, disabled", api.call("POST", "/v1/endpoints", endpoint_body(ctx, "conf-ev-disabled", "/ok/ev-disabled"))) or {}).get("id")
    ok("disable it", api.call("POST", f"/v1/endpoints/{dis}/disable"))
    enabled = list_all(api, "/v1/endpoints?status=enabled")
    run = secrets.token_hex(4)
    expect_sets = {
        "order.created": {"order_star", "star_created", "empty", "absent"},
        "invoice.paid": {"invoice_paid", "empty", "absent", "list"},
        "invoice.sent": {"empty", "absent", "list"},
        "user.created": {"star_created", "empty", "absent"},
        "order": {"empty", "absent"},
    }
    first_order = None
    for name, tags in expect_sets.items():
        key = f"k-{run}-{name}"
        d = ok(f"POST /v1/events {name}", api.call("POST", "/v1/events", {"event_name": name, "event_key": key, "payload": {"n": name}})) or {}
        if name == "order.created":
            first_order = d
            has_fields("event record has SPEC fields + task_count", d, ["id", "app_id", "event_name", "event_key", "payload", "status", "created_at", "task_count"])
            R.check("event status dispatched, payload and key as sent", d.get("status") == "dispatched" and d.get("payload") == {"n": name} and d.get("event_key") == key, short(d))
        tasks = list_all(api, f"/v1/tasks?event_id={d.get('id')}")
        got_eps = {t.get("endpoint_id") for t in tasks}
        want_known = {eps[t] for t in tags}
        ours = set(eps.values()) | {dis}
        R.check(f"event {name}: tasks for exactly the matching filters of this run", got_eps & ours == want_known, f"got {sorted(got_eps & ours)} want {sorted(want_known)}")
        want_all = {e["id"] for e in enabled if filter_matches(e.get("filter_events"), name)}
        R.check(f"event {name}: one task per enabled matching endpoint of the app, task_count agrees", got_eps == want_all and d.get("task_count") == len(want_all) == len(tasks), f"tasks {sorted(got_eps)} want {sorted(want_all)} task_count {d.get('task_count')}")
        R.check(f"event {name}: tasks are task_type event with event_id and the event payload", all(t.get("task_type") == "event" and t.get("event_id") == d.get("id") and t.get("payload") == {"n": name} for t in tasks), short(tasks))
    # idempotency key
    again = ok("POST /v1/events again with the same event_name and event_key", api.call("POST", "/v1/events", {"event_name": "order.created", "event_key": f"k-{run}-order.created", "payload": {"n": "other"}})) or {}
    R.check("same key returns the first event (same id)", again.get("id") == (first_order or {}).get("id"), f"{again.get('id')} vs {(first_order or {}).get('id')}")
    n_tasks = len(list_all(api, f"/v1/tasks?event_id={(first_order or {}).get('id')}"))
    R.check("same key creates no tasks", n_tasks == (first_order or {}).get("task_count"), f"{n_tasks} vs {(first_order or {}).get('task_count')}")
    other = ok("same event_key with another event_name", api.call("POST", "/v1/events", {"event_name": "order.updated", "event_key": f"k-{run}-order.created"})) or {}
    R.check("another event_name with the same key is a new event", other.get("id") not in (None, (first_order or {}).get("id")), short(other))
    nokey = ok("POST /v1/events without event_key and payload", api.call("POST", "/v1/events", {"event_name": "Zz:Ok_name-1.x"})) or {}
    R.check("event payload defaults to {}; characters A-Z a-z 0-9 . _ - : accepted", nokey.get("payload") == {} and nokey.get("event_name") == "Zz:Ok_name-1.x", short(nokey))
    ok("event_name of 200 characters", api.call("POST", "/v1/events", {"event_name": "e" * 200}))
    for label, body, field in (
        ("missing event_name", {"payload": {}}, "event_name"),
        ("empty event_name", {"event_name": ""}, "event_name"),
        ("event_name of 201 characters", {"event_name": "e" * 201}, "event_name"),
        ("event_name with a space", {"event_name": "order created"}, "event_name"),
        ("event_name with /", {"event_name": "order/created"}, "event_name"),
        ("event_name with é", {"event_name": "café"}, "event_name"),
        ("event_name a number", {"event_name": 7}, "event_name"),
        ("payload a list", {"event_name": "x", "payload": [1]}, "payload"),
        ("payload a string holding an object (string form is for PATCH /schedules only)", {"event_name": "x", "payload": "{}"}, "payload"),
        ("event_key a number", {"event_name": "x", "event_key": 5}, "event_key"),
    ):
        expect_err(f"POST /v1/events {label}", api.call("POST", "/v1/events", body), 400, 40001, field)
    eid = (first_order or {}).get("id")
    g = ok("GET /v1/events/{id}", api.call("GET", f"/v1/events/{eid}")) or {}
    R.check("GET event returns the record", g.get("id") == eid and g.get("event_name") == "order.created" and g.get("payload") == {"n": "order.created"}, short(g))
    lst = ok("GET /v1/events?event_name=order.created", api.call("GET", "/v1/events?event_name=order.created")) or {}
    items = lst.get("items") or []
    R.check("event list filtered by event_name", eid in ids_of(items) and all(i.get("event_name") == "order.created" for i in items), str(ids_of(items)))
    lst = ok("GET /v1/events", api.call("GET", "/v1/events?page_size=2")) or {}
    R.check("event list newest first, page_size 2", lst.get("page_size") == 2 and ids_of(lst.get("items")) == sorted(ids_of(lst.get("items")), reverse=True) and (lst.get("total") or 0) >= 7, short(lst))
    expect_err("GET /v1/events/999999999", api.call("GET", "/v1/events/999999999"), 404, 40401)
    # the delivery of an event task carries X-Service-Event
    ev_task = next((t for t in list_all(api, f"/v1/tasks?event_id={eid}") if t.get("endpoint_id") == eps["order_star"]), None)
    if ev_task:
        recs = rx.wait_task(ev_task["id"])
        R.check("event delivery received", len(recs) >= 1, f"task {ev_task['id']}")
        if recs:
            h = recs[0]["headers"]
            R.check("event delivery: X-Service-Event = event_name, no X-Service-Schedule-Id", h.get("x-service-event") == "order.created" and "x-service-schedule-id" not in h, short(h))
            R.check("event delivery: body is the event payload", json.loads(recs[0]["body"] or b"null") == {"n": "order.created"}, recs[0]["body"][:200])
    ctx.event_id = eid


def phase_tasks(api, ctx):
    """Manual tasks and deliveries. Starts the slow scenarios, then checks them together."""
    rx = ctx.rx
    never = "zz.never"

    def ep(name, path, **extra):
        body = endpoint_body(ctx, name, path, filter_events=never)
        body.update(extra)
        d = ok(f"endpoint {name}", api.call("POST", "/v1/endpoints", body)) or {}
        return d.get("id")

    def pol(name, n, initial=0, maxd=None, backoff="fixed"):
        body = {"name": name, "max_attempts": n, "backoff_type": backoff, "initial_delay_sec": initial}
        if maxd is not None:
            body["max_delay_sec"] = maxd
        return (ok(f"policy {name}", api.call("POST", "/v1/retries/policies", body)) or {}).get("id")

    one = pol("conf-once", 1)
    retry_pol = pol("conf-retry", 3, 1, 1)
    whsec = "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()
    e_sig = ep("conf-signed", "/ok/signed?q=1", secret=whsec, headers={"X-Tenant": "t1"})
    e_plain = ep("conf-plain-secret", "/ok/plain", secret="plain secret ✓", method="PUT")
    e_get = ep("conf-get", "/ok/get", method="GET", secret="s-get")
    e_del = ep("conf-delete-method", "/ok/delete", method="DELETE")
    e_cleared = ep("conf-cleared", "/ok/cleared", secret="to-be-cleared")
    ok("clear_secret on conf-cleared", api.call("PATCH", f"/v1/endpoints/{e_cleared}", {"clear_secret": True}))
    # 10 s between the attempts: the pending state between them is checked, and a busy machine
    # may take seconds to look.
    e_retry = ep("conf-retry", "/retry", retry_policy_id=pol("conf-retry-10", 3, 10, 10))
    e_fail = ep("conf-fail", "/fail", retry_policy_id=one)
    e_gone = ep("conf-gone", "/gone", retry_policy_id=retry_pol)
    e_redirect = ep("conf-redirect", "/redirect", retry_policy_id=one)
    e_slow = ep("conf-slow", "/slow", retry_policy_id=one, timeout_ms=500)
    e_big = ep("conf-big", "/big")
    e_refused = ep("conf-refused", "/x", retry_policy_id=one)
    ok("point conf-refused at a closed port", api.call("PATCH", f"/v1/endpoints/{e_refused}", {"url": "http://127.0.0.1:1/refused"}))
    e_linklocal = (ok("endpoint at a link-local address", api.call("POST", "/v1/endpoints", {"name": "conf-linklocal", "url": "http://169.254.169.254/latest", "retry_policy_id": one, "filter_events": never})) or {}).get("id")
    e_disabled = ep("conf-disabled", "/ok/disabled")
    ok("disable conf-disabled", api.call("POST", f"/v1/endpoints/{e_disabled}/disable"))
    e_todelete = ep("conf-todelete", "/ok/todelete")

    def task(name, body):
        return ok(f"POST /v1/tasks {name}", api.call("POST", "/v1/tasks", body)) or {}

    payload = {"b": [1, 2], "a": "x y", "u": "ü"}
    t_sig = task("signed (whsec_ secret)", {"endpoint_id": e_sig, "payload": payload})
    has_fields("task record has SPEC + added fields", t_sig, ["id", "app_id", "schedule_id", "event_id", "endpoint_id", "task_type", "payload", "status", "run_at", "created_at", "attempts", "max_attempts", "next_attempt_at", "last_status_code", "last_error", "finished_at", "updated_at"])
    R.check("manual task: task_type manual, status pending, payload as sent, endpoint_id", (t_sig.get("task_type"), t_sig.get("status"), t_sig.get("payload"), t_sig.get("endpoint_id")) in (("manual", "pending", payload, e_sig), ("manual", "running", payload, e_sig)), short(t_sig))
    R.check("task without policy: max_attempts 5 (default policy)", t_sig.get("max_attempts") == 5, short(t_sig))
    t_plain = task("plain secret, PUT", {"endpoint_id": e_plain, "payload": {"k": 1}})
    t_get = task("GET endpoint", {"endpoint_id": e_get, "payload": {"k": 1}})
    t_del = task("DELETE endpoint", {"endpoint_id": e_del, "payload": {"k": 1}})
    t_cleared = task("cleared secret", {"endpoint_id": e_cleared})
    R.check("manual task payload defaults to {}", t_cleared.get("payload") == {}, short(t_cleared))
    t_retry = task("500 then 200 (fixed 10 s)", {"endpoint_id": e_retry})
    R.check("task max_attempts from the endpoint's policy", t_retry.get("max_attempts") == 3, short(t_retry))
    t_fail = task("always 500, one attempt", {"endpoint_id": e_fail})
    t_gone = task("410 Gone", {"endpoint_id": e_gone})
    t_redirect = task("302 redirect", {"endpoint_id": e_redirect})
    t_slow = task("slower than timeout_ms", {"endpoint_id": e_slow})
    t_big = task("big reply body", {"endpoint_id": e_big})
    t_refused = task("refused connection", {"endpoint_id": e_refused})
    t_ll = task("link-local target", {"endpoint_id": e_linklocal})
    t_dis = task("for a disabled endpoint (accepted)", {"endpoint_id": e_disabled})
    R.check("manual task for a disabled endpoint is accepted, pending", t_dis.get("status") == "pending", short(t_dis))
    future = int(time.time()) + 7200
    t_later = task("run_at epoch seconds in 2 h", {"endpoint_id": e_todelete, "run_at": future})
    R.check("run_at (epoch) read back as the same instant", t_later.get("run_at") is not None and parse_ts(t_later["run_at"]) == future, short(t_later))
    if isinstance(t_later.get("run_at"), int):
        R.info("run_at is returned as epoch seconds (SPEC allows either form)")
    t_later2 = task("run_at RFC 3339 string", {"endpoint_id": e_sig, "run_at": "2030-01-01T09:00:00Z"})
    R.check("run_at (RFC 3339) read back as the same instant", t_later2.get("run_at") is not None and parse_ts(t_later2["run_at"]) == parse_ts("2030-01-01T09:00:00Z"), short(t_later2))
    t_off = task("run_at RFC 3339 with an offset", {"endpoint_id": e_cleared, "run_at": "2030-01-01T10:00:00+01:00"})
    R.check("run_at 10:00+01:00 read back as 09:00Z", t_off.get("run_at") is not None and parse_ts(t_off["run_at"]) == parse_ts("2030-01-01T09:00:00Z"), short(t_off))
    ok("cancel the offset task", api.call("POST", f"/v1/tasks/{t_off.get('id')}/cancel"))
    soon = int(time.time()) + 2
    t_soon = task("run_at 2 s ahead", {"endpoint_id": e_plain, "run_at": soon, "payload": {"soon": True}})
    # validation
    for label, body, field in (
        ("missing endpoint_id", {"payload": {}}, "endpoint_id"),
        ("endpoint_id a string", {"endpoint_id": "1"}, "endpoint_id"),
        ("endpoint_id unknown (by analogy with schedules' endpoint_ids)", {"endpoint_id": 999999999}, "endpoint_id"),
        ("payload a list", {"endpoint_id": e_sig, "payload": [1]}, "payload"),
        ("payload a string holding an object", {"endpoint_id": e_cleared, "payload": "{\"a\":1}", "run_at": "2031-01-01T00:00:00Z"}, "payload"),
        ("run_at garbage", {"endpoint_id": e_sig, "run_at": "tomorrow"}, "run_at"),
        ("run_at a boolean", {"endpoint_id": e_sig, "run_at": True}, "run_at"),
    ):
        expect_err(f"POST /v1/tasks {label}", api.call("POST", "/v1/tasks", body), 400, 40001, field)
    # cancel / retry state rules
    cd = ok("POST /v1/tasks/{id}/cancel (pending, run_at later)", api.call("POST", f"/v1/tasks/{t_later2['id']}/cancel")) or {}
    R.check("cancel -> status canceled", cd.get("status") == "canceled", short(cd))
    expect_err("cancel a canceled task", api.call("POST", f"/v1/tasks/{t_later2['id']}/cancel"), 409, 40901)
    rd = ok("POST /v1/tasks/{id}/retry (canceled)", api.call("POST", f"/v1/tasks/{t_later2['id']}/retry")) or {}
    R.check("retry of a canceled task -> pending, attempts 0", rd.get("status") in ("pending", "running") and rd.get("attempts") == 0, short(rd))
    r = api.call("POST", f"/v1/tasks/{t_later2['id']}/cancel")
    if r.code == 0:
        pass  # back to canceled; a retried task may also have been delivered already
    expect_err("retry a pending task", api.call("POST", f"/v1/tasks/{t_later['id']}/retry"), 409, 40901)
    expect_err("cancel a missing task", api.call("POST", "/v1/tasks/999999999/cancel"), 404, 40401)
    expect_err("retry a missing task", api.call("POST", "/v1/tasks/999999999/retry"), 404, 40401)
    expect_err("GET /v1/tasks/999999999", api.call("GET", "/v1/tasks/999999999"), 404, 40401)
    expect_err("GET /v1/tasks/999999999/attempts", api.call("GET", "/v1/tasks/999999999/attempts"), 404, 40401)
    # deleting an endpoint cancels its pending tasks
    ok("DELETE endpoint with a pending task", api.call("DELETE", f"/v1/endpoints/{e_todelete}"))
    t = get_task(api, t_later["id"])
    R.check("endpoint delete cancels its pending tasks", t.get("status") == "canceled", short(t))

    # ---- deliveries
    recs = rx.wait_task(t_sig["id"])
    if R.check("delivery (whsec_ secret) received", recs, f"task {t_sig['id']}"):
        rec = recs[0]
        R.check("delivery: endpoint's method and URL (path and query)", rec["method"] == "POST" and rec["path"] == "/ok/signed?q=1", f"{rec['method']} {rec['path']}")
        R.check("delivery: Content-Type application/json", rec["headers"].get("content-type") == "application/json", repr(rec["headers"].get("content-type")))
        try:
            body_val = json.loads(rec["body"])
        except ValueError:
            body_val = None
        R.check("delivery: body is the payload", body_val == payload, rec["body"][:200])
        compact = body_val is not None and rec["body"] in (
            json.dumps(body_val, separators=(",", ":"), ensure_ascii=False).encode(),
            json.dumps(body_val, separators=(",", ":")).encode(),
        )
        R.check("delivery: body is compact JSON", compact, rec["body"][:200])
        R.check("delivery: endpoint's own header added", rec["headers"].get("x-tenant") == "t1", short(rec["headers"]))
        R.check("manual delivery: no X-Service-Event / X-Service-Schedule-Id", "x-service-event" not in rec["headers"] and "x-service-schedule-id" not in rec["headers"], short(rec["headers"]))
        check_delivery_headers("delivery", rec, t_sig["id"])
        verify_signatures("delivery (whsec_ secret)", rec, whsec)
    recs = rx.wait_task(t_plain["id"])
    if R.check("delivery (plain secret, PUT) received", recs):
        rec = recs[0]
        R.check("PUT delivery: method PUT with the JSON body", rec["method"] == "PUT" and json.loads(rec["body"] or b"null") == {"k": 1}, f"{rec['method']} {rec['body'][:100]}")
        verify_signatures("delivery (non-whsec secret, key = UTF-8 bytes)", rec, "plain secret ✓")
    for label, tk, method, secret in (("GET", t_get, "GET", "s-get"), ("DELETE", t_del, "DELETE", None)):
        recs = rx.wait_task(tk["id"])
        if R.check(f"{label} delivery received", recs):
            rec = recs[0]
            R.check(f"{label} delivery sends no body", rec["method"] == method and rec["body"] == b"" and rec["headers"].get("content-length", "0") == "0" and "transfer-encoding" not in rec["headers"], f"{rec['method']} {rec['headers']}")
            if secret:
                verify_signatures(f"{label} delivery (empty body)", rec, secret)
    recs = rx.wait_task(t_cleared["id"])
    if R.check("delivery after clear_secret received", recs):
        h = recs[0]["headers"]
        R.check("after clear_secret: no X-Service-Signature, no webhook-signature", "x-service-signature" not in h and "webhook-signature" not in h, short(h))
        R.check("after clear_secret: webhook-id still sent", h.get("webhook-id") == f"task_{t_cleared['id']}", short(h))
    # success task record
    t, good = wait_task(api, t_sig["id"], lambda t: t.get("status") == "success")
    R.check("delivered task: success, attempts 1, last_status_code 200, finished_at set, next_attempt_at null", good and t.get("attempts") == 1 and t.get("last_status_code") == 200 and t.get("finished_at") and t.get("next_attempt_at") is None, short(t))
    att = ok("GET /v1/tasks/{id}/attempts", api.call("GET", f"/v1/tasks/{t_sig['id']}/attempts")) or {}
    items = att.get("items") or []
    R.check("attempts is a page object", all(k in att for k in ("total", "page", "page_size", "items")) and att.get("total") == 1, short(att))
    if items:
        has_fields("attempt record fields", items[0], ["id", "task_id", "attempt", "started_at", "duration_ms", "status_code", "error", "response_body"])
        a0 = items[0]
        R.check("attempt: task_id, attempt 1, status_code 200, error null, response_body", a0.get("task_id") == t_sig["id"] and a0.get("attempt") == 1 and a0.get("status_code") == 200 and a0.get("error") is None and a0.get("response_body") == '{"received":true}' and isinstance(a0.get("duration_ms"), int), short(a0))
    expect_err("cancel a succeeded task", api.call("POST", f"/v1/tasks/{t_sig['id']}/cancel"), 409, 40901)
    expect_err("retry a succeeded task", api.call("POST", f"/v1/tasks/{t_sig['id']}/retry"), 409, 40901)
    # retry: 500 then 200, fixed 1 s
    recs = rx.wait_task(t_retry["id"], 1)
    if R.check("retry scenario: first attempt received", recs):
        t, good = wait_task(api, t_retry["id"], lambda t: (t.get("attempts") or 0) >= 1)
        R.check("after a failed attempt with attempts left: pending, attempts 1, next_attempt_at set, last_status_code 500", good and t.get("status") in ("pending", "running") and t.get("attempts") == 1 and (t.get("status") == "running" or t.get("next_attempt_at")) and t.get("last_status_code") == 500, short(t))
    recs = rx.wait_task(t_retry["id"], 2)
    if R.check("retry scenario: second attempt received", len(recs) >= 2, f"{len(recs)} requests"):
        gap = recs[1]["at"] - recs[0]["at"]
        R.check("second attempt ≈ initial_delay_sec (10 s) after the first", 9.8 <= gap <= 10 + LATE, f"{gap:.2f} s")
        R.check("X-Service-Attempt 1 then 2, same webhook-id", [r["headers"].get("x-service-attempt") for r in recs[:2]] == ["1", "2"] and recs[0]["headers"].get("webhook-id") == recs[1]["headers"].get("webhook-id") == f"task_{t_retry['id']}", short([r["headers"] for r in recs[:2]]))
    t, good = wait_task(api, t_retry["id"], lambda t: t.get("status") == "success")
    R.check("retried task ends success with attempts 2", good and t.get("attempts") == 2 and t.get("last_status_code") == 200, short(t))
    pg = api.call("GET", f"/v1/tasks/{t_retry['id']}/attempts?page_size=1").data or {}
    R.check("GET /attempts?page_size=1: page object, total 2, first page holds attempt 1", pg.get("page_size") == 1 and pg.get("total") == 2 and [a.get("attempt") for a in pg.get("items") or []] == [1], short(pg))
    att = (api.call("GET", f"/v1/tasks/{t_retry['id']}/attempts").data or {}).get("items") or []
    R.check("attempts in attempt order: 1 (500, body 'try again'), 2 (200)", [(a.get("attempt"), a.get("status_code")) for a in att] == [(1, 500), (2, 200)] and att[0].get("response_body") == "try again", short(att))
    # one attempt, 500 -> failed; then retry
    t, good = wait_task(api, t_fail["id"], lambda t: t.get("status") == "failed")
    R.check("attempts used up -> failed, finished_at set, last_status_code 500", good and t.get("attempts") == 1 and t.get("finished_at") and t.get("last_status_code") == 500, short(t))
    expect_err("cancel a failed task", api.call("POST", f"/v1/tasks/{t_fail['id']}/cancel"), 409, 40901)
    ok("point conf-fail at a receiver path that answers 200", api.call("PATCH", f"/v1/endpoints/{e_fail}", {"url": rx.url + "/ok/fixed"}))
    rd = ok("POST /v1/tasks/{id}/retry (failed)", api.call("POST", f"/v1/tasks/{t_fail['id']}/retry")) or {}
    R.check("retry of a failed task -> pending, attempts start again", rd.get("status") in ("pending", "running") and rd.get("attempts") == 0 and rd.get("finished_at") is None, short(rd))
    t, good = wait_task(api, t_fail["id"], lambda t: t.get("status") == "success")
    R.check("retried failed task succeeds", good, short(t))
    recs = rx.wait_task(t_fail["id"], 2)
    R.check("retried task's new attempt starts again at X-Service-Attempt 1", len(recs) >= 2 and recs[-1]["headers"].get("x-service-attempt") == "1", short([r["headers"].get("x-service-attempt") for r in recs]))
    # 410 Gone
    t, good = wait_task(api, t_gone["id"], lambda t: t.get("status") == "failed")
    R.check("410 Gone fails the task without further attempts", good and t.get("attempts") == 1 and t.get("last_status_code") == 410, short(t))
    e = api.call("GET", f"/v1/endpoints/{e_gone}").data or {}
    R.check("410 Gone disables the endpoint", e.get("status") == "disabled", short(e))
    # redirect not followed
    t, good = wait_task(api, t_redirect["id"], lambda t: t.get("status") == "failed")
    R.check("3xx is a failed attempt (redirect not followed)", good and t.get("last_status_code") == 302 and len(rx.for_task(t_redirect["id"])) == 1, short(t))
    # timeout
    t, good = wait_task(api, t_slow["id"], lambda t: t.get("status") == "failed")
    R.check("reply slower than timeout_ms is a failed attempt with last_error", good and t.get("last_error") and t.get("last_status_code") is None, short(t))
    att = (api.call("GET", f"/v1/tasks/{t_slow['id']}/attempts").data or {}).get("items") or []
    R.check("timed-out attempt: status_code null, error set", len(att) == 1 and att[0].get("status_code") is None and att[0].get("error"), short(att))
    # refused connection
    t, good = wait_task(api, t_refused["id"], lambda t: t.get("status") == "failed")
    R.check("refused connection is a failed attempt (status_code null, error)", good and t.get("last_status_code") is None and t.get("last_error"), short(t))
    # link-local
    t, good = wait_task(api, t_ll["id"], lambda t: t.get("status") == "failed")
    R.check("link-local target refused; error names --allow-targets", good and "allow-targets" in (t.get("last_error") or ""), short(t))
    # big reply: first 4 KiB
    wait_task(api, t_big["id"], lambda t: t.get("status") == "success")
    att = (api.call("GET", f"/v1/tasks/{t_big['id']}/attempts").data or {}).get("items") or []
    R.check("response_body keeps the first 4 KiB", len(att) == 1 and att[0].get("response_body") == "x" * 4096, f"{len((att or [{}])[0].get('response_body') or '')} bytes")
    # disabled endpoint: task waits unattempted, then goes out once enabled
    t = get_task(api, t_dis["id"])
    R.check("task of a disabled endpoint waits: pending, 0 attempts, nothing received", t.get("status") == "pending" and t.get("attempts") == 0 and not rx.for_task(t_dis["id"]), short(t))
    ok("enable conf-disabled", api.call("POST", f"/v1/endpoints/{e_disabled}/enable"))
    t, good = wait_task(api, t_dis["id"], lambda t: t.get("status") == "success")
    R.check("once enabled, the waiting task is delivered", good and len(rx.for_task(t_dis["id"])) == 1, short(t))
    # run_at in the future: not delivered before it
    recs = rx.wait_task(t_soon["id"], timeout=WAIT + 2)
    R.check("task with run_at 2 s ahead is delivered at run_at, not before", len(recs) == 1 and soon - 0.05 <= recs[0]["at"] <= soon + LATE, f"run_at {soon}, received at {recs[0]['at'] if recs else None}")
    # the schedule-triggered task
    tid = getattr(ctx, "trigger_task", None)
    if tid:
        recs = rx.wait_task(tid)
        if R.check("triggered schedule task delivered", recs):
            h = recs[0]["headers"]
            if h.get("x-service-schedule-id") != str(ctx.trigger_schedule):
                R.info(f"triggered (manual, schedule_id set) task delivered without X-Service-Schedule-Id={ctx.trigger_schedule}: {short(h)}")
            else:
                R.info("triggered task carries X-Service-Schedule-Id")
    # task list filters
    for q, pred in (
        (f"endpoint_id={e_sig}", lambda t: t.get("endpoint_id") == e_sig),
        ("status=failed", lambda t: t.get("status") == "failed"),
        ("status=canceled", lambda t: t.get("status") == "canceled"),
        ("task_type=manual", lambda t: t.get("task_type") == "manual"),
        ("task_type=event", lambda t: t.get("task_type") == "event"),
        (f"event_id={ctx.event_id}", lambda t: t.get("event_id") == ctx.event_id),
        (f"task_type=manual&endpoint_id={e_sig}", lambda t: t.get("task_type") == "manual" and t.get("endpoint_id") == e_sig),
    ):
        items = list_all(api, f"/v1/tasks?{q}")
        R.check(f"GET /v1/tasks?{q} filters", items and all(pred(t) for t in items) and ids_of(items) == sorted(ids_of(items), reverse=True), str(ids_of(items))[:200])
    sig_ids = set(ids_of(list_all(api, f"/v1/tasks?endpoint_id={e_sig}")))
    R.check("GET /v1/tasks?endpoint_id= lists exactly that endpoint's tasks", sig_ids == {t_sig["id"], t_later2["id"]}, str(sig_ids))
    ctx.task_id = t_sig["id"]
    ctx.e_sig = e_sig


def start_backoff(api, ctx):
    """Back-off shapes (docs/design.md §5 retry policies): tasks against a receiver that always
    answers 500, started early so that their waits overlap the other checks."""
    ctx.backoff = []
    # Delays several times LATE apart, so that the shapes stay told apart on a busy machine.
    shapes = (
        ("fixed", 5, 50, [5, 5, 5]),
        ("linear", 5, 50, [5, 10, 15]),
        ("exponential", 5, 50, [5, 10, 20]),
        ("exponential", 5, 10, [5, 10, 10]),
    )
    for backoff, initial, maxd, gaps in shapes:
        label = f"{backoff} initial {initial} max {maxd}"
        pid = (ok(f"policy {label}, 4 attempts", api.call("POST", "/v1/retries/policies", {"name": f"conf-{backoff}", "max_attempts": 4, "backoff_type": backoff, "initial_delay_sec": initial, "max_delay_sec": maxd})) or {}).get("id")
        eid = (ok(f"endpoint for {label}", api.call("POST", "/v1/endpoints", {"name": f"conf-bo-{backoff}", "url": ctx.rx.url + "/fail/backoff", "retry_policy_id": pid, "filter_events": "zz.never"})) or {}).get("id")
        tid = (ok(f"task for {label}", api.call("POST", "/v1/tasks", {"endpoint_id": eid})) or {}).get("id")
        ctx.backoff.append((label, tid, gaps))
    # Retry-After on 503: honoured when longer than the policy's delay, capped at max_delay
    ctx.retry_after = []
    for label, secs, maxd, want in (("Retry-After 1 > policy delay 0", 1, 10, 1), ("Retry-After 30 capped at max_delay_sec 1", 30, 1, 1)):
        pid = (ok(f"policy for {label}", api.call("POST", "/v1/retries/policies", {"name": "conf-ra", "max_attempts": 3, "backoff_type": "fixed", "initial_delay_sec": 0, "max_delay_sec": maxd})) or {}).get("id")
        eid = (ok(f"endpoint for {label}", api.call("POST", "/v1/endpoints", {"name": "conf-ra", "url": ctx.rx.url + f"/retry-after-{secs}", "retry_policy_id": pid, "filter_events": "zz.never"})) or {}).get("id")
        tid = (ok(f"task for {label}", api.call("POST", "/v1/tasks", {"endpoint_id": eid})) or {}).get("id")
        ctx.retry_after.append((label, tid, want))
    # the default policy: 5 attempts, exponential, 60 s initial
    eid = (ok("endpoint without a policy, always 500", api.call("POST", "/v1/endpoints", {"name": "conf-default-policy", "url": ctx.rx.url + "/fail/default", "filter_events": "zz.never"})) or {}).get("id")
    ctx.default_task = (ok("task for the default policy", api.call("POST", "/v1/tasks", {"endpoint_id": eid})) or {}).get("id")


def check_backoff(api, ctx):
    rx = ctx.rx
    tid = ctx.default_task
    recs = rx.wait_task(tid)
    t, good = wait_task(api, tid, lambda t: (t.get("attempts") or 0) >= 1 and t.get("status") == "pending")
    delay = parse_ts(t["next_attempt_at"]) - recs[0]["at"] if good and recs and t.get("next_attempt_at") else None
    R.check("default policy: max_attempts 5, next attempt 60 s after the first failure", good and t.get("max_attempts") == 5 and delay is not None and 58.5 <= delay <= 60 + LATE, f"delay {delay}, {short(t)}")
    ok("cancel the default-policy task (pending)", api.call("POST", f"/v1/tasks/{tid}/cancel"))
    for label, tid, want in ctx.retry_after:
        recs = rx.wait_task(tid, 2)
        gap = recs[1]["at"] - recs[0]["at"] if len(recs) >= 2 else None
        R.check(f"{label}: second attempt ≈ {want} s after the 503", gap is not None and want - 0.25 <= gap <= want + LATE, f"gap {gap}")
    for label, tid, gaps in ctx.backoff:
        recs = rx.wait_task(tid, 4, timeout=sum(gaps) + WAIT)
        got = [round(b["at"] - a["at"], 2) for a, b in zip(recs, recs[1:])]
        good = len(got) == 3 and all(w - 0.25 <= g <= w + LATE for g, w in zip(got, gaps))
        R.check(f"back-off {label}: gaps between attempts ≈ {gaps} s", good, f"got {got}")
        t, done = wait_task(api, tid, lambda t: t.get("status") == "failed")
        R.check(f"back-off {label}: failed after 4 attempts", done and t.get("attempts") == 4, short(t))


def phase_isolation(api, api2, ctx):
    if api2 is None:
        R.info("no second key given (KEY_ID2 SECRET2 or WEBHOOKD_KEY_ID2/WEBHOOKD_SECRET2): isolation checks skipped")
        return
    own = ok("app2: POST /v1/endpoints", api2.call("POST", "/v1/endpoints", {"name": "app2-ep", "url": ctx.rx.url + "/ok/app2", "filter_events": "zz.never"})) or {}
    R.check("app2's record carries app2's app_id", own.get("app_id") not in (None, ctx.app1_id), short(own))
    lst = ids_of(list_all(api2, "/v1/endpoints"))
    app1_eps = set(ids_of(list_all(api, "/v1/endpoints")))
    R.check("app2 lists its own endpoints and none of app1's", own.get("id") in lst and not (set(lst) & app1_eps) and own.get("id") not in app1_eps, f"app2 {lst}")
    R.check("app2 sees none of app1's tasks", list_all(api2, "/v1/tasks") == [], "")
    for method, path, body in (
        ("GET", f"/v1/endpoints/{ctx.e_sig}", None),
        ("PATCH", f"/v1/endpoints/{ctx.e_sig}", {"name": "stolen"}),
        ("POST", f"/v1/endpoints/{ctx.e_sig}/disable", None),
        ("DELETE", f"/v1/endpoints/{ctx.e_sig}", None),
        ("GET", f"/v1/retries/policies/{ctx.p1}", None),
        ("PATCH", f"/v1/retries/policies/{ctx.p1}", {"max_attempts": 2}),
        ("DELETE", f"/v1/retries/policies/{ctx.p1}", None),
        ("GET", f"/v1/schedules/{ctx.s2}", None),
        ("PATCH", f"/v1/schedules/{ctx.s2}", {"name": "stolen"}),
        ("POST", f"/v1/schedules/{ctx.s2}/pause", None),
        ("POST", f"/v1/schedules/{ctx.s2}/trigger", None),
        ("DELETE", f"/v1/schedules/{ctx.s2}", None),
        ("GET", f"/v1/events/{ctx.event_id}", None),
        ("GET", f"/v1/tasks/{ctx.task_id}", None),
        ("GET", f"/v1/tasks/{ctx.task_id}/attempts", None),
        ("POST", f"/v1/tasks/{ctx.task_id}/retry", None),
        ("POST", f"/v1/tasks/{ctx.task_id}/cancel", None),
    ):
        expect_err(f"app2: {method} app1's {path}", api2.call(method, path, body), 404, 40401)
    expect_err("app2: endpoint with app1's retry_policy_id", api2.call("POST", "/v1/endpoints", {"name": "x", "url": ctx.rx.url + "/ok/x", "retry_policy_id": ctx.p1}), 400, 40001, "retry_policy_id")
    expect_err("app2: schedule naming app1's endpoint", api2.call("POST", "/v1/schedules", {"name": "x", "cron_expr": "* * * * *", "endpoint_ids": [ctx.e_sig]}), 400, 40001, "endpoint_ids")
    expect_err("app2: POST /v1/tasks for app1's endpoint (by analogy with schedules' endpoint_ids)", api2.call("POST", "/v1/tasks", {"endpoint_id": ctx.e_sig}), 400, 40001, "endpoint_id")
    ev = ok("app2: POST /v1/events", api2.call("POST", "/v1/events", {"event_name": "order.created", "event_key": "iso-" + secrets.token_hex(4)})) or {}
    R.check("app2's event reaches only app2's endpoints (none match)", ev.get("task_count") == 0, short(ev))
    g = api.call("GET", f"/v1/endpoints/{ctx.e_sig}").data or {}
    R.check("app1's endpoint unchanged by app2's attempts", g.get("name") == "conf-signed" and g.get("status") == "enabled", short(g))


def phase_unknown_fields(api, ctx):
    """§3 (changed 2026-11-23): a body field or query parameter the route does not take is 40001
    naming it, with the nearest taken name suggested; read-only fields of the route's own record
    are ignored, so a record read back can be sent back."""
    e = (ctx.e_basic or {}).get("id")
    s = getattr(ctx, "s2", None)
    p = ctx.p1
    bodies = [
        ("POST", "/v1/endpoints", {"name": "conf-typo", "url": ctx.rx.url + "/typo", "filter_event": "order.*"}, "filter_event", "filter_events"),
        ("PATCH", f"/v1/endpoints/{e}", {"filter_event": "order.*"}, "filter_event", "filter_events"),
        ("POST", "/v1/retries/policies", {"name": "conf-typo", "max_attempts": 3, "backoff_type": "fixed", "backof_type": "x"}, "backof_type", "backoff_type"),
        ("PATCH", f"/v1/retries/policies/{p}", {"max_delay": 10}, "max_delay", "max_delay_sec"),
        ("POST", "/v1/schedules", {"name": "conf-typo", "cron_expr": "0 0 1 1 *", "time_zone": "UTC"}, "time_zone", "timezone"),
        ("PATCH", f"/v1/schedules/{s}", {"cron": "0 0 1 1 *"}, "cron", None),
        ("POST", "/v1/cron/preview", {"cron_expr": "* * * * *", "cnt": 3}, "cnt", None),
        ("POST", "/v1/events", {"event_name": "conf.typo", "event_kye": "k"}, "event_kye", "event_key"),
        ("POST", "/v1/tasks", {"endpoint_id": e, "payloads": {}}, "payloads", "payload"),
        ("POST", f"/v1/endpoints/{e}/disable", {"reason": "x"}, "reason", None),
        ("POST", f"/v1/schedules/{s}/trigger", {"payload": {}}, "payload", None),
    ]
    for method, path, body, field, nearest in bodies:
        r = expect_err(f"{method} {path} with unknown field {field}", api.call(method, path, body), 400, 40001, field)
        if nearest:
            R.check(f"{method} {path}: message suggests {nearest}", f'"{nearest}"' in (r.message or ""), r.brief())
    after = ok("endpoint unchanged after the refused disable", api.call("GET", f"/v1/endpoints/{e}")) or {}
    R.check("a refused request changes nothing (endpoint still enabled)", after.get("status") == "enabled", short(after))
    for path, param in [
        ("/v1/endpoints?statuss=enabled", "statuss"),
        ("/v1/retries/policies?q=x", "q"),
        ("/v1/schedules?page=1&sort=name", "sort"),
        ("/v1/events?name=x", "name"),
        ("/v1/tasks?endpoint=1", "endpoint"),
        (f"/v1/tasks/{getattr(ctx, 'task_id', 1)}/attempts?status=failed", "status"),
    ]:
        expect_err(f"GET {path} (unknown query parameter)", api.call("GET", path), 400, 40001, param)
    ok("GET /v1/tasks with every known filter", api.call("GET", "/v1/tasks?page=1&page_size=5&status=failed&schedule_id=1&event_id=1&endpoint_id=1&task_type=manual"))
    # read-only fields: a record read back is accepted unchanged
    for kind, path in [("endpoint", f"/v1/endpoints/{e}"), ("retry policy", f"/v1/retries/policies/{p}"), ("schedule", f"/v1/schedules/{s}")]:
        rec = ok(f"GET {kind}", api.call("GET", path)) or {}
        back = ok(f"PATCH {kind} with the record read back unchanged", api.call("PATCH", path, rec)) or {}
        R.check(f"PATCH {kind} read back: record unchanged", {k: v for k, v in back.items() if k != "updated_at"} == {k: v for k, v in rec.items() if k != "updated_at"}, short(back))


def phase_updated_at(api, ctx):
    """updated_at moves on every change (seconds precision: wait past the second)."""
    before = ctx.e_basic
    wait = parse_ts(before.get("updated_at") or iso(0)) + 1.05 - time.time()
    if wait > 0:
        time.sleep(wait)
    d = ok("PATCH endpoint after a second", api.call("PATCH", f"/v1/endpoints/{before.get('id')}", {"timeout_ms": 999})) or {}
    R.check("PATCH moves updated_at, keeps created_at", d.get("updated_at") and d.get("updated_at") > before.get("updated_at", "") and d.get("created_at") == before.get("created_at"), f"{before.get('updated_at')} -> {d.get('updated_at')}")
    cur = d
    time.sleep(max(0, parse_ts(cur.get("updated_at") or iso(0)) + 1.05 - time.time()))
    d = ok("disable after a second", api.call("POST", f"/v1/endpoints/{cur.get('id')}/disable")) or {}
    R.check("disable moves updated_at", (d.get("updated_at") or "") > (cur.get("updated_at") or ""), f"{cur.get('updated_at')} -> {d.get('updated_at')}")
    s = api.call("GET", f"/v1/schedules/{ctx.s2}").data or {}
    p = ok("pause a schedule later", api.call("POST", f"/v1/schedules/{ctx.s2}/pause")) or {}
    R.check("schedule pause moves updated_at", (p.get("updated_at") or "") > (s.get("updated_at") or ""), f"{s.get('updated_at')} -> {p.get('updated_at')}")


def main(argv):
    if len(argv) not in (4, 6):
        print(__doc__, file=sys.stderr)
        print("usage: client.py BASE_URL KEY_ID SECRET [KEY_ID2 SECRET2]", file=sys.stderr)
        return 2
    base, key_id, secret = argv[1:4]
    key2 = argv[4:6] if len(argv) == 6 else [os.environ.get("WEBHOOKD_KEY_ID2"), os.environ.get("WEBHOOKD_SECRET2")]
    started = time.time()
    api = Api(base, key_id, secret)
    api2 = Api(base, key2[0], key2[1], "app2") if key2[0] and key2[1] else None
    revoked = (os.environ.get("WEBHOOKD_REVOKED_KEY_ID"), os.environ.get("WEBHOOKD_REVOKED_SECRET"))
    api.revoked = revoked if all(revoked) else None
    ctx = Ctx()
    ctx.rx = Receiver()
    ctx.extra_endpoints = []
    ctx.app1_id = None
    phases = [
        ("health", lambda: phase_health(api)),
        ("auth", lambda: phase_auth(api)),
        ("errors", lambda: phase_generic_errors(api)),
        ("policies", lambda: phase_policies(api, ctx)),
        ("endpoints", lambda: phase_endpoints(api, ctx)),
        ("preview", lambda: phase_preview(api)),
        ("schedules", lambda: phase_schedules(api, ctx)),
        ("events", lambda: phase_events(api, ctx)),
        ("backoff (start)", lambda: start_backoff(api, ctx)),
        ("tasks", lambda: phase_tasks(api, ctx)),
        ("isolation", lambda: phase_isolation(api, api2, ctx)),
        ("unknown fields", lambda: phase_unknown_fields(api, ctx)),
        ("updated_at", lambda: phase_updated_at(api, ctx)),
        ("backoff (check)", lambda: check_backoff(api, ctx)),
    ]
    for name, run in phases:
        try:
            run()
        except Exception as e:  # noqa: BLE001 - a crash in one phase is a failure, not the end
            import traceback

            traceback.print_exc()
            R.check(f"phase {name} ran to its end", False, repr(e))
    R.check(f"every reply ({REPLIES_SEEN[0]}) is an envelope with X-Request-Id = request_id and HTTP status matching code", not ENVELOPE_PROBLEMS, "; ".join(ENVELOPE_PROBLEMS[:5]))
    R.check("every timestamp in replies is RFC 3339 UTC with Z, seconds precision", not TIMESTAMP_PROBLEMS, "; ".join(TIMESTAMP_PROBLEMS[:5]))
    ctx.rx.stop()
    print(f"INFO runtime {time.time() - started:.1f} s, {REPLIES_SEEN[0]} API replies, {len(ctx.rx.records)} deliveries received")
    if R.failures:
        print("INFO failed checks:")
        for f in R.failures:
            print(f"INFO   - {f}")
    print(f"{R.passed} passed, {R.failed} failed")
    return 0 if R.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
