"""The dashboard in a real headless Chromium (docs/design.md §15), driven by Python playwright.

Started by tests/it/dashboard.rs with a running webhookd and a loopback receiver; reads:
  WEBHOOKD_URL        http://127.0.0.1:PORT of the server
  WEBHOOKD_KEY_ID / WEBHOOKD_SECRET   a key of app `app1`
  RECEIVER_URL        a receiver that answers its first request 500 (body "boom from receiver"),
                      then 200
  SCREENSHOTS         folder for one screenshot per page
  CHROMIUM            the browser binary (default /usr/bin/chromium)

The page is loaded from http://webhookd.lan:PORT/ui/ (mapped to 127.0.0.1 by
--host-resolver-rules): a non-secure origin, where browsers offer no crypto.subtle, like a
Raspberry Pi reached over the LAN. Prints `RESULT {json}` with the measured figures.
"""

import collections
import hashlib
import hmac
import json
import os
import re
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

from playwright.sync_api import expect, sync_playwright

SERVER = os.environ["WEBHOOKD_URL"]
PORT = urllib.parse.urlparse(SERVER).port
ORIGIN = f"http://webhookd.lan:{PORT}"
KEY_ID = os.environ["WEBHOOKD_KEY_ID"]
SECRET = os.environ["WEBHOOKD_SECRET"]
RECEIVER = os.environ["RECEIVER_URL"]
SHOTS = os.environ.get("SCREENSHOTS", "target/ui-screenshots")
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
BROWSER_ZONE = "America/New_York"
XSS_NAME = "<img src=x onerror=alert(document.domain)>"
# The receiver endpoint's Authorization header; tests/it/dashboard.rs checks the receiver got
# it, while the dashboard shows only its length.
RECEIVER_TOKEN = "Bearer dashboard-s3cr3t-0123456789"
HERE = os.path.dirname(os.path.abspath(__file__))
ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage",
    "--host-resolver-rules=MAP webhookd.lan 127.0.0.1",
]
# Budgets for conditions to hold, not timings: generous, since the suite runs on a loaded
# 2-core machine (a load average of 26 was seen with eight builds beside it).
expect.set_options(timeout=60_000)
WAIT_MS = 120_000


def check(cond, what):
    if not cond:
        raise AssertionError(what)


LAST_TS = [0]


def signed(method, path, body=None, key=None):
    """A signed API call from Python (the same scheme as the page), to set up data and read
    expected values; `key` is (key id, secret), the test's admin key by default."""
    key_id, secret = key or (KEY_ID, SECRET)
    LAST_TS[0] = max(int(time.time() * 1000), LAST_TS[0] + 1)
    ts = str(LAST_TS[0])
    text = "" if body is None else json.dumps(body)
    payload = text if text else f"{method} {path}"
    sig = hmac.new(secret.encode(), f"{ts}\n{payload}".encode(), hashlib.sha256).hexdigest()
    headers = {"X-Key-ID": key_id, "X-Timestamp": ts, "X-Signature": sig}
    if text:
        headers["Content-Type"] = "application/json"
    req = urllib.request.Request(SERVER + path, method=method, headers=headers,
                                 data=text.encode() if text else None)
    with urllib.request.urlopen(req) as reply:
        return json.load(reply)["data"]


def signed_get(path):
    return signed("GET", path)


def wait_task(task_id, status):
    """Waits until a task reaches `status` (the delivery pool runs beside the page)."""
    deadline = time.monotonic() + WAIT_MS / 1000
    while True:
        task = signed_get(f"/v1/tasks/{task_id}")
        if task["status"] == status:
            return task
        if time.monotonic() > deadline:
            break
        time.sleep(0.1)
    raise AssertionError(f"task {task_id} never became {status}: {task}")


def wall(iso, zone):
    at = datetime.fromisoformat(iso.replace("Z", "+00:00")).astimezone(ZoneInfo(zone))
    return at.strftime("%Y-%m-%d %H:%M:%S")


def launch(p, **context_args):
    profile = tempfile.mkdtemp(prefix="webhookd-chromium-")
    ctx = p.chromium.launch_persistent_context(
        profile, executable_path=CHROMIUM, headless=True, args=ARGS,
        viewport={"width": 1280, "height": 900}, timezone_id=BROWSER_ZONE, **context_args)
    ctx.set_default_timeout(WAIT_MS)
    return ctx


def shot(page, name):
    page.screenshot(path=os.path.join(SHOTS, f"{name}.png"), full_page=True)


def create_through_form(page, nav, opener, fields, notice):
    """Goes to a page, opens its form, fills it, submits, and waits for the success notice."""
    page.click(f"nav >> text={nav}")
    page.click(f"text={opener}")
    for selector, value in fields.items():
        page.fill(selector, value)
    page.click("form.grid button[type=submit]")
    expect(page.locator(".notice.ok")).to_contain_text(notice)


def route_result(page, present, on_present):
    """Waits for a route's result on the page (`present`) and checks it with `on_present`; an
    error notice instead fails the test with its text."""
    expect(page.locator(f"{present}, .notice.error").first).to_be_visible()
    if not page.locator(present).count():
        raise AssertionError("expected " + present + ", got: " + page.locator(".notice.error").first.inner_text())
    on_present()
    return "present"


def measure_first_load(p):
    """Transferred bytes and time to the sign-in form on an empty cache."""
    ctx = launch(p)
    page = ctx.pages[0] if ctx.pages else ctx.new_page()
    cdp = ctx.new_cdp_session(page)
    cdp.send("Network.enable")
    received = {}
    cdp.on("Network.loadingFinished", lambda e: received.__setitem__(e["requestId"], e["encodedDataLength"]))
    started = time.monotonic()
    page.goto(ORIGIN + "/ui/")
    page.wait_for_selector("form.signin input[name=key_id]")
    to_form_ms = (time.monotonic() - started) * 1000
    in_page_ms = page.evaluate("performance.getEntriesByName('webhookd:sign-in-shown')[0].startTime")
    timing = page.evaluate("""() => {
        const n = performance.getEntriesByType('navigation')[0];
        const fcp = performance.getEntriesByName('first-contentful-paint')[0];
        return { html_ms: n.responseEnd, dom_content_loaded_ms: n.domContentLoadedEventEnd,
                 first_contentful_paint_ms: fcp ? fcp.startTime : null };
    }""")
    page.wait_for_load_state("networkidle")
    # Signed in, the overview with its numbers is the first useful page.
    page.fill("input[name=key_id]", KEY_ID)
    page.fill("input[name=secret]", SECRET)
    started = time.monotonic()
    page.click("form.signin button[type=submit]")
    page.wait_for_selector("body[data-ready=overview]")
    overview_ms = (time.monotonic() - started) * 1000
    overview_in_page_ms = page.evaluate("""() =>
        performance.getEntriesByName('webhookd:ready:overview')[0].startTime
        - performance.getEntriesByName('webhookd:sign-in-submitted').at(-1).startTime""")
    total = sum(received.values())
    files = page.evaluate("performance.getEntriesByType('resource').filter(e => e.name.includes('/ui/')).length + 1")
    ctx.close()
    result = {"first_load_transferred_bytes": total, "first_load_files": files,
              "sign_in_form_seen_by_driver_ms": round(to_form_ms, 1),
              "sign_in_form_rendered_ms": round(in_page_ms, 1),
              "sign_in_click_to_overview_seen_ms": round(overview_ms, 1),
              "sign_in_submit_to_overview_rendered_ms": round(overview_in_page_ms, 1)}
    result.update({k: round(v, 1) for k, v in timing.items() if v is not None})
    return result


def sign_in_with_a_wrong_device_clock(p):
    """A phone whose clock is an hour fast still signs in and works: the page learns the
    server's time from the Date header of the 40104 reply and signs with it."""
    ctx = launch(p)
    ctx.add_init_script("Date.now = ((now) => () => now() + 3600 * 1000)(Date.now.bind(Date));")
    page = ctx.pages[0] if ctx.pages else ctx.new_page()
    page.goto(ORIGIN + "/ui/")
    page.fill("input[name=key_id]", KEY_ID)
    page.fill("input[name=secret]", SECRET)
    page.click("form.signin button[type=submit]")
    page.wait_for_selector("body[data-ready=overview]")
    page.click("nav >> text=Endpoints")
    page.wait_for_selector("body[data-ready=endpoints]")
    ctx.close()


def refused_code(method, path, key):
    """The envelope code of a call that must fail (urllib raises on a 4xx)."""
    try:
        signed(method, path, key=key)
    except urllib.error.HTTPError as e:
        return json.load(e)["code"]
    raise AssertionError(f"{method} {path} succeeded with key {key[0]}")


def left_before_its_data(page, endpoint_id, result):
    """A page left while its requests are still out must not mark the next page ready when they
    come back: the endpoint page's attempt reads are held, the Keys page is opened and shown,
    then the held replies are let through. (Before the fix the endpoint page, finishing last,
    set data-ready=endpoints over the Keys page's mark, and a script waiting for the Keys page
    waited for ever: how the suite once failed on PostgreSQL, where replies take longer.)"""
    page.wait_for_selector("body[data-ready=endpoints]")  # the page as it stands, all read
    held = []
    attempts = re.compile(r"/v1/tasks/\d+/attempts")
    released = []
    page.route(attempts, lambda route: route.continue_() if released else held.append(route))
    page.click("main a:has-text('Endpoints')")
    page.wait_for_selector("body[data-ready=endpoints]")
    page.click(f"main a[href='#/endpoints/{endpoint_id}']")
    deadline = time.monotonic() + WAIT_MS / 1000
    while not held:
        check(time.monotonic() < deadline, "the endpoint page never read its attempts")
        page.wait_for_timeout(20)
    page.click("nav >> text=Keys")
    page.wait_for_selector("body[data-ready=keys]")
    released.append(True)
    for route in held:
        route.continue_()
    # Until the endpoint page is done (it marks itself left), or has overwritten the mark.
    page.wait_for_function("""() => document.body.dataset.ready !== 'keys'
        || performance.getEntriesByName('webhookd:left:endpoints').length > 0""")
    ready = page.evaluate("document.body.dataset.ready")
    check(ready == "keys", f"the endpoint page, left before its data came, set data-ready={ready!r}")
    check(page.locator("main h2").inner_text() == "API keys", "the endpoint page drew over the Keys page")
    result["left_page_stays_left"] = len(held)
    page.unroute(attempts)
    page.click("nav >> text=Overview")
    page.wait_for_selector("body[data-ready=overview]")


def keys_page(page, result):
    """docs/API.md "Keys": the admin's Keys page (its own key cannot be revoked; a new read key's
    secret is shown once), then the dashboard signed in with that read key, where what the scope
    does not allow is greyed out with the reason, and the revocation of the read key."""
    page.click("nav >> text=Keys")
    page.wait_for_selector("body[data-ready=keys]")
    own = page.locator("main tr", has_text=KEY_ID).locator("button:has-text('Revoke')")
    expect(own).to_be_disabled()
    expect(own).to_have_attribute("data-denied", re.compile("cannot revoke itself"))
    page.click("main button:has-text('New key')")
    page.fill("input[name=name]", "status page")
    page.select_option("select[name=scope]", "read")
    page.fill("input[name=expires_in_days]", "30")
    page.click("form.grid button[type=submit]")
    expect(page.locator("code.key-secret")).to_be_visible()
    read_key = (page.locator("code.key-id").inner_text(), page.locator("code.key-secret").inner_text())
    check(read_key[1].startswith("whs_"), f"secret shown: {read_key[1]}")
    made = signed_get(f"/v1/keys/{read_key[0]}")
    check(made["scope"] == "read" and made["expires_at"] and made["name"] == "status page", f"{made}")
    shot(page, "10-key-created")
    page.click("main button:has-text('Done')")
    page.wait_for_selector("body[data-ready=keys]")
    expect(page.locator("main table")).to_contain_text(read_key[0])
    check(read_key[1] not in page.content(), "the secret was shown again")

    # A read key in another tab (its own session storage).
    reader = page.context.new_page()
    reader.on("console", lambda m: m.type == "error" and "Failed to load resource" not in m.text
              and CONSOLE_ERRORS.append(m.text))
    reader.on("pageerror", lambda e: CONSOLE_ERRORS.append(str(e)))
    reader.goto(ORIGIN + "/ui/")
    reader.fill("input[name=key_id]", read_key[0])
    reader.fill("input[name=secret]", read_key[1])
    reader.click("form.signin button[type=submit]")
    reader.wait_for_selector("body[data-ready=overview]")
    expect(reader.locator("header .badge.scope")).to_have_text("read")
    expect(reader.locator(".scope-note")).to_contain_text("scope is read")
    expect(reader.locator("header nav span.denied", has_text="Keys")).to_have_attribute(
        "data-denied", 'key scope "read" does not allow GET /v1/keys')
    reader.click("nav >> text=Endpoints")
    reader.wait_for_selector("body[data-ready=endpoints]")
    expect(reader.locator("main table")).to_contain_text("receiver")
    new = reader.locator("main button:has-text('New endpoint')")
    expect(new).to_be_disabled()
    expect(new).to_have_attribute("title", 'key scope "read" does not allow POST /v1/endpoints')
    edit = reader.locator("main .row-actions button:has-text('Edit')").first
    expect(edit).to_be_disabled()
    expect(edit).to_have_attribute("data-denied", re.compile(r'^key scope "read" does not allow PATCH /v1/endpoints/\d+$'))
    shot(reader, "11-read-key-endpoints")
    reader.click("nav >> text=Schedules")
    reader.wait_for_selector("body[data-ready=schedules]")
    # The cron preview is a read: allowed. Firing is not.
    expect(reader.locator("main button:has-text('Next runs')").first).to_be_enabled()
    expect(reader.locator("main button:has-text('Trigger now')").first).to_be_disabled()
    reader.goto(ORIGIN + "/ui/#/keys")
    reader.wait_for_selector("body[data-ready=keys]")
    expect(reader.locator(".denied-note")).to_contain_text("Only admin keys")
    expect(reader.locator("main table")).to_contain_text(read_key[0])
    expect(reader.locator("main button:has-text('New key')")).to_be_disabled()
    shot(reader, "11-read-key-keys")
    reader.close()

    # Revoked from the admin's page: refused at once.
    page.locator("main tr", has_text=read_key[0]).locator("button:has-text('Revoke')").click()
    expect(page.locator(".notice.ok")).to_contain_text("revoked")
    check(refused_code("GET", "/v1/endpoints", read_key) == 40102, "the revoked key still works")
    shot(page, "10-keys")

    # An expired key signing in is told that it expired (not "wrong secret").
    brief = signed("POST", "/v1/keys", {"name": "brief", "scope": "read",
                                        "expires_at": int(time.time()) + 2})
    deadline = time.monotonic() + WAIT_MS / 1000
    while True:  # until the server's clock has passed expires_at
        try:
            signed("GET", "/v1/endpoints", key=(brief["id"], brief["secret"]))
        except urllib.error.HTTPError as e:
            code = json.load(e)["code"]
            check(code == 40102, f"an expiring key got {code}")
            break
        check(time.monotonic() < deadline, "the key never expired")
        time.sleep(0.2)
    late = page.context.new_page()
    late.goto(ORIGIN + "/ui/")
    late.fill("input[name=key_id]", brief["id"])
    late.fill("input[name=secret]", brief["secret"])
    late.click("form.signin button[type=submit]")
    expect(late.locator("form.signin .error")).to_contain_text("expired")
    late.close()
    result["keys_page"] = "create, secret once, revoke; read key greyed out; expired key told"


def main():
    os.makedirs(SHOTS, exist_ok=True)
    result = {}
    with sync_playwright() as p:
        result.update(measure_first_load(p))
        sign_in_with_a_wrong_device_clock(p)
        result["sign_in_with_device_clock_an_hour_fast"] = "ok"
        ctx = launch(p)
        page = ctx.pages[0] if ctx.pages else ctx.new_page()
        try:
            run(page, result)
        except Exception:
            page.screenshot(path=os.path.join(SHOTS, "failure.png"), full_page=True)
            print("console errors: " + json.dumps(CONSOLE_ERRORS), file=sys.stderr)
            print_page_state(page)
            raise
        ctx.close()
    print("RESULT " + json.dumps(result))


CONSOLE_ERRORS = []
# The page's last API exchanges (method, path, status), and those still unanswered: printed on
# failure, so that a page that never became ready shows what it was waiting for.
API_LOG = collections.deque(maxlen=30)
API_PENDING = {}


def watch_api(ctx):
    def api(request):
        return urllib.parse.urlparse(request.url).path.startswith("/v1/")

    def started(request):
        if api(request):
            API_PENDING[request] = (time.monotonic(), f"{request.method} {request.url.split(ORIGIN, 1)[-1]}")

    def ended(request, outcome):
        if request in API_PENDING:
            at, what = API_PENDING.pop(request)
            API_LOG.append(f"{what} -> {outcome} after {(time.monotonic() - at) * 1000:.0f} ms")

    ctx.on("request", started)
    ctx.on("response", lambda r: ended(r.request, r.status))
    ctx.on("requestfailed", lambda r: ended(r, f"failed: {r.failure}"))


def print_page_state(page):
    """What the page showed when the test failed: its route, its `data-ready` mark, the marks
    of renders left before they finished, its text, and its last API exchanges."""
    try:
        state = page.evaluate("""() => ({
            url: location.href, ready: document.body.dataset.ready || null,
            marks: performance.getEntriesByType('mark').slice(-12).map((m) => m.name),
            text: document.body.innerText.slice(0, 2000)})""")
    except Exception as e:  # the page itself may be gone
        state = {"unreadable": str(e)}
    print("page state: " + json.dumps(state, indent=1), file=sys.stderr)
    print("last API exchanges (oldest first):\n  " + "\n  ".join(API_LOG), file=sys.stderr)
    now = time.monotonic()
    waiting = [f"{what} for {(now - at) * 1000:.0f} ms" for at, what in API_PENDING.values()]
    print("API requests unanswered: " + (", ".join(waiting) or "none"), file=sys.stderr)


def run(page, result):
        ctx = page.context
        requests, dialogs, console_errors = [], [], CONSOLE_ERRORS
        ctx.on("request", lambda r: requests.append(r.url))
        def on_dialog(dialog):
            # The page's own confirm() before a bulk retry is expected; any other dialog (an
            # alert from an injected handler) is recorded and fails the test.
            if dialog.type == "confirm" and dialog.message.startswith(("Retry every", "Revoke key")):
                dialog.accept()
            else:
                dialogs.append(dialog.message)
                dialog.dismiss()
        page.on("dialog", on_dialog)
        # Chromium logs every non-2xx fetch (the wrong secret's 401) as "Failed to load resource";
        # anything else logged as an error, and every uncaught exception, fails the test.
        page.on("console", lambda m: m.type == "error" and "Failed to load resource" not in m.text
                and console_errors.append(m.text))
        page.on("pageerror", lambda e: console_errors.append(str(e)))
        watch_api(ctx)

        # Headers of the page itself.
        reply = page.goto(ORIGIN + "/ui/")
        headers = reply.headers
        csp = headers.get("content-security-policy", "")
        check("script-src 'self'" in csp and "unsafe-inline" not in csp, f"CSP: {csp}")
        check("frame-ancestors 'none'" in csp and "connect-src 'self'" in csp, f"CSP: {csp}")
        check(headers.get("x-frame-options") == "DENY", f"X-Frame-Options: {headers}")
        check(headers.get("x-content-type-options") == "nosniff", "nosniff")

        # A non-secure origin: no WebCrypto, and the vendored SHA-256/HMAC passes the vectors.
        check(page.evaluate("window.isSecureContext") is False, "expected a non-secure origin")
        check(page.evaluate("typeof crypto.subtle") == "undefined", "crypto.subtle should be absent")
        with open(os.path.join(HERE, "vectors.json")) as f:
            vectors = json.load(f)
        failures = page.evaluate("""async (v) => {
            const m = await import('/ui/sha256.js');
            const bytes = (hex) => new Uint8Array((hex.match(/../g) || []).map((b) => parseInt(b, 16)));
            const out = [];
            for (const s of v.sha256) {
                const got = m.hex(m.sha256(m.utf8(s.text.repeat(s.repeat))));
                if (got !== s.want) out.push('sha256 ' + s.text.slice(0, 10) + ': ' + got);
            }
            for (const c of v.hmac) {
                const got = m.hex(m.hmacSha256(bytes(c.key_hex), bytes(c.data_hex)));
                if (got !== c.want) out.push(c.name + ': ' + got);
            }
            return out;
        }""", vectors)
        check(failures == [], f"hash vectors failed in the browser: {failures}")
        result["hash_vectors_in_browser"] = len(vectors["sha256"]) + len(vectors["hmac"])
        # The readings of ui/words.js (cron in plain words, plurals, health, buckets), the same
        # checker and vectors as `node tests/browser/words.mjs`.
        with open(os.path.join(HERE, "words.json")) as f:
            words = json.load(f)
        with open(os.path.join(HERE, "words.mjs")) as f:
            checker = re.search(r"export (function checkWords.*?\n})\n", f.read(), re.S).group(1)
        # The checker's source goes into the evaluated text (the page's CSP forbids eval).
        failures = page.evaluate("""async (v) => {
            const m = await import('/ui/words.js');
            return (%s)(m, v);
        }""" % checker, words)
        check(failures == [], f"ui/words.js vectors failed in the browser: {failures}")
        result["words_vectors_in_browser"] = sum(len(words[k]) for k in ("cron", "plural", "health", "bucket_sizes")) + 1

        # Sign in: a wrong secret is refused, the right one works.
        page.fill("input[name=key_id]", KEY_ID)
        page.fill("input[name=secret]", SECRET + "x")
        page.click("form.signin button[type=submit]")
        expect(page.locator("form.signin .error")).to_have_text("Unknown key id or wrong secret.")
        shot(page, "0-sign-in")
        page.fill("input[name=secret]", SECRET)
        page.click("form.signin button[type=submit]")
        page.wait_for_selector("body[data-ready=overview]")
        check(page.evaluate("document.cookie") == "", "no cookie")
        check(page.evaluate("localStorage.length") == 0, "nothing in localStorage")
        check(SECRET in page.evaluate("sessionStorage.getItem('webhookd.credentials')"), "secret in sessionStorage")

        # A retry policy with one attempt, so the first failure is final.
        create_through_form(page, "Retry policies", "New policy",
                            {"input[name=name]": "once", "input[name=max_attempts]": "1"}, "saved")
        expect(page.locator("main table")).to_contain_text("once")
        # The retry limits: max age and jitter, edited and shown in the list.
        prow = page.locator("main tbody tr", has_text="once")
        prow.locator("button:has-text('Edit')").click()
        page.fill("form.grid input[name=max_age_sec]", "7200")
        page.select_option("form.grid select[name=jitter]", "full")
        page.click("form.grid button[type=submit]")
        expect(page.locator("form.grid input[name=max_age_sec]")).to_have_count(0)
        prow = page.locator("main tbody tr", has_text="once")
        expect(prow).to_contain_text("jittered")
        expect(prow).to_contain_text("7200 s")
        once = next(p for p in signed_get("/v1/retries/policies")["items"] if p["name"] == "once")
        check((once["max_age_sec"], once["jitter"]) == (7200, "full"), "policy limits not saved")
        shot(page, "6-policies")

        # Endpoints: one to the receiver (using the policy), one whose name is HTML.
        page.click("nav >> text=Endpoints")
        page.click("text=New endpoint")
        page.fill("input[name=name]", "receiver")
        page.fill("input[name=url]", RECEIVER)
        # Its own headers, one a credential: attempts record the first, and only the length
        # of the second.
        page.fill("form.grid textarea[name=headers]", json.dumps(
            {"X-Tenant": "acme", "Authorization": RECEIVER_TOKEN}))
        page.select_option("select[name=retry_policy_id]", label=page.locator(
            "select[name=retry_policy_id] option", has_text="once").inner_text())
        page.click("form.grid button[type=submit]")
        expect(page.locator(".notice.ok")).to_contain_text("saved")
        page.click("text=New endpoint")
        page.fill("input[name=name]", XSS_NAME)
        page.fill("input[name=url]", RECEIVER + "/other")
        page.click("form.grid button[type=submit]")
        expect(page.locator(".notice.ok")).to_contain_text("saved")
        expect(page.locator("main td a.name", has_text=XSS_NAME)).to_have_count(1)
        check(page.locator("main img").count() == 0, "the name became an <img>")
        row = page.locator("main tbody tr", has_text="receiver")
        row.locator("button:has-text('Edit')").click()
        page.fill("form.grid input[name=filter_events]", "order.*")
        page.click("form.grid button[type=submit]")
        # The create's "saved" notice is still up: wait for the edit form to close instead.
        expect(page.locator("form.grid input[name=filter_events]")).to_have_count(0)
        expect(page.locator(".notice.ok")).to_contain_text("saved")
        endpoints = signed_get("/v1/endpoints?page_size=10")["items"]
        check(next(e for e in endpoints if e["name"] == "receiver")["filter_events"] == "order.*", "endpoint edit")
        receiver_id = next(e["id"] for e in endpoints if e["name"] == "receiver")

        # The payload filter: a bad one shows the server's 40001 beside the box and saves
        # nothing; a good one saves; the filter test beside it answers matches/reason.
        row = page.locator("main tbody tr", has_text="receiver")
        row.locator("button:has-text('Edit')").click()
        page.fill("form.grid textarea[name=filter_payload]", '{"tier": {"$in": "pro"}}')
        page.click("form.grid button[type=submit]")
        expect(page.locator("form.grid .filter-error")).to_have_text(
            'filter_payload["tier"]: $in takes an array of values')
        check(signed_get(f"/v1/endpoints/{receiver_id}")["filter_payload"] is None, "a bad filter was saved")
        page.fill("form.grid textarea[name=filter_payload]", '{"tier": {"$in": ["pro", "team"]}}')
        page.click("form.grid button[type=submit]")
        expect(page.locator("form.grid textarea[name=filter_payload]")).to_have_count(0)
        check(signed_get(f"/v1/endpoints/{receiver_id}")["filter_payload"] == {"tier": {"$in": ["pro", "team"]}},
              "the filter was not saved")
        row = page.locator("main tbody tr", has_text="receiver")
        row.locator("button:has-text('Edit')").click()
        expect(page.locator("form.grid textarea[name=filter_payload]")).to_have_value(
            re.compile(r'"\$in"'))
        page.fill("form.grid input[name=test_event_name]", "order.created")
        page.fill("form.grid textarea[name=test_payload]", '{"tier": "free"}')
        page.click("form.grid .filter-test-run")
        expect(page.locator("form.grid .filter-answer")).to_contain_text("no match")
        expect(page.locator("form.grid .filter-answer")).to_contain_text(
            'filter_payload fails: tier is "free", not one of ["pro","team"]')
        page.fill("form.grid textarea[name=test_payload]", '{"tier": "pro"}')
        page.click("form.grid .filter-test-run")
        expect(page.locator("form.grid .filter-answer")).to_contain_text(
            "matches filter_events and the 1 condition of filter_payload")
        page.fill("form.grid input[name=test_event_name]", "invoice.paid")
        page.click("form.grid .filter-test-run")
        expect(page.locator("form.grid .filter-answer")).to_contain_text(
            'filter_events "order.*" does not take the event name "invoice.paid"')
        check(signed_get("/v1/events?page_size=1")["total"] == 0, "the filter test published")
        shot(page, "2b-filter-editor")
        # Cleared again (an empty box sends null), so the rest of the run is unfiltered.
        page.fill("form.grid textarea[name=filter_payload]", "")
        page.click("form.grid button[type=submit]")
        expect(page.locator("form.grid textarea[name=filter_payload]")).to_have_count(0)
        check(signed_get(f"/v1/endpoints/{receiver_id}")["filter_payload"] is None, "the filter was not cleared")
        shot(page, "2-endpoints")

        # A failing delivery (the receiver answers 500), found on the tasks page and retried.
        page.click("nav >> text=Tasks")
        page.click("text=New manual task")
        # The endpoint is picked by name, not typed as an id.
        check(page.locator("form.grid input[name=endpoint_id]").count() == 0, "endpoint id typed")
        page.select_option("form.grid select[name=endpoint_id]", label="receiver")
        page.fill("textarea[name=payload]", '{"order": 42}')
        page.click("form.grid button[type=submit]")
        page.wait_for_url(re.compile(r"#/tasks/\d+$"))
        task_id = int(page.url.rsplit("/", 1)[1])
        wait_task(task_id, "failed")
        page.goto(ORIGIN + "/ui/#/tasks?status=failed")
        row = page.locator("main tbody tr", has_text="manual")
        expect(row).to_have_count(1)
        expect(row).to_contain_text("HTTP 500")
        # The task names its endpoint, linked to the endpoint's page.
        expect(row.locator(f"a[href='#/endpoints/{receiver_id}']")).to_have_text("receiver")
        shot(page, "3-tasks-failed")
        row.locator("text=Attempts").click()
        expect(page.locator(".attempt details:has-text('Reply body') pre")).to_have_text("boom from receiver")
        expect(page.locator(".attempt")).to_contain_text("HTTP 500")
        # The headers the attempt was sent with, exactly as recorded, the credential as its
        # length only.
        page.click(".attempt details.request summary")
        request = page.locator(".attempt details.request")
        expect(request.locator("summary")).to_contain_text("Request headers (")
        expect(request).to_contain_text(f"x-service-task-id: {task_id}")
        expect(request).to_contain_text("x-service-attempt: 1")
        expect(request).to_contain_text(f"webhook-id: task_{task_id}")
        expect(request).to_contain_text("x-tenant: acme")
        expect(request).to_contain_text("content-type: application/json")
        expect(request).to_contain_text("user-agent: webhookd/")
        expect(request).to_contain_text(f"authorization: Bearer … ({len(RECEIVER_TOKEN)} bytes)")
        expect(request).to_contain_text("recorded as their length only")
        expect(request).not_to_contain_text("s3cr3t")
        expect(request).not_to_contain_text("no recorded headers")
        first = signed_get(f"/v1/tasks/{task_id}/attempts")["items"][0]["request_headers"]
        shown = request.locator("pre").inner_text()
        check(shown == "\n".join(f"{k}: {v}" for k, v in first), f"shown {shown!r}, recorded {first!r}")
        result["first_attempt_request_headers"] = first
        shot(page, "4-task-attempts")
        page.click("button:has-text('Retry')")
        expect(page.locator(".notice.ok")).to_contain_text("pending again")
        wait_task(task_id, "success")
        page.reload()
        expect(page.locator("dl.facts")).to_contain_text("success")
        expect(page.locator(".attempt")).to_have_count(2)

        # Resend a delivered task: a new task, the original unchanged.
        original = signed_get(f"/v1/tasks/{task_id}")
        page.click("main .row-actions button:has-text('Resend')")
        page.wait_for_url(re.compile(r"#/tasks/(?!%d$)\d+$" % task_id))
        expect(page.locator(".notice.ok")).to_contain_text(f"Task {task_id} resent as task")
        copy_id = int(page.url.rsplit("/", 1)[1])
        copy = wait_task(copy_id, "success")
        check(copy["task_type"] == "manual" and copy["payload"] == {"order": 42}, f"resent copy: {copy}")
        check(signed_get(f"/v1/tasks/{task_id}") == original, "the original task changed on resend")
        result["resend_route"] = "present"

        # The filter `retrying` is offered.
        page.goto(ORIGIN + "/ui/#/tasks")
        check("retrying" in page.locator("select[name=filter-status]").inner_text(), "status filter retrying")
        # Filters pick endpoints and schedules by name.
        check("receiver" in page.locator("select[name=filter-endpoint_id]").inner_text(), "endpoint picker")

        # Schedules: the cron preview as one types, DST changes marked, local next runs.
        page.click("nav >> text=Schedules")
        page.click("text=New schedule")
        page.fill("input[name=name]", "nightly report")
        page.fill("input[name=timezone]", "Europe/Berlin")
        page.fill("input[name=cron_expr]", "30 2 25-31 3 *")
        expect(page.locator(".preview tbody tr")).to_have_count(8)
        check(page.locator(".preview tr.dst").count() >= 1, "no DST change marked in March")
        expect(page.locator(".preview .badge.dst").first).to_contain_text("GMT+01:00")
        page.fill("input[name=cron_expr]", "30 2 * *")
        expect(page.locator(".preview .error")).to_contain_text("cron_expr")
        page.fill("input[name=cron_expr]", "0 9 * * 1-5")
        expect(page.locator(".preview .cron-words")).to_have_text("Runs at 09:00 on weekdays (Europe/Berlin time).")
        page.fill("input[name=cron_expr]", "30 2 * * *")
        expect(page.locator(".preview tbody tr")).to_have_count(8)
        expect(page.locator(".preview .cron-words")).to_contain_text("at 02:30 every day")
        shot(page, "5-schedule-form")
        page.locator("fieldset label", has_text="receiver").locator("input").check()
        page.click("form.grid button[type=submit]")
        expect(page.locator(".notice.ok")).to_contain_text("saved")
        schedule = signed_get("/v1/schedules?page_size=1")["items"][0]
        row = page.locator("main tbody tr", has_text="nightly report")
        expect(row).to_contain_text(wall(schedule["next_run_at"], "Europe/Berlin"))
        expect(row).to_contain_text(wall(schedule["next_run_at"], BROWSER_ZONE))
        check(wall(schedule["next_run_at"], "Europe/Berlin").endswith("02:30:00"), "Berlin 02:30")
        # Edit: only the changed field is sent (a PATCH of the name keeps the rest).
        row.locator("button:has-text('Edit')").click()
        page.fill("form.grid input[name=name]", "nightly report v2")
        page.click("form.grid button[type=submit]")
        expect(page.locator(".notice.ok")).to_contain_text("saved")
        row = page.locator("main tbody tr", has_text="nightly report v2")
        expect(row).to_contain_text("30 2 * * *")
        expect(row.locator(".cron-words")).to_have_text("at 02:30 every day")
        expect(row).to_contain_text("never")
        row.locator("text=Next runs").click()
        expect(row.locator("table.runs tbody tr")).to_have_count(10)
        # Trigger it: the row shows the run and how its task ended.
        row.locator("button:has-text('Trigger now')").click()
        expect(page.locator(".notice.ok")).to_contain_text("fired: 1 task.")
        triggered = signed_get(f"/v1/tasks?schedule_id={schedule['id']}")["items"][0]
        wait_task(triggered["id"], "success")
        page.reload()
        row = page.locator("main tbody tr", has_text="nightly report v2")
        expect(row).to_contain_text("(by hand)")
        expect(row.locator(".outcome .badge.success")).to_have_text("1 success")
        # Backfill: nine days hold nine 02:30 runs; a repeat fires none of them again. The
        # days lie inside the retention (a backfill reaches back --retention-days, 30, at most)
        # and clear of a daylight-saving change in Berlin.
        berlin = ZoneInfo("Europe/Berlin")
        today = datetime.now(timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
        start = next(d for d in (today - timedelta(days=12), today - timedelta(days=24))
                     if d.astimezone(berlin).utcoffset()
                     == (d + timedelta(days=10)).astimezone(berlin).utcoffset())
        row.locator("button:has-text('Backfill')").click()
        page.fill("form.grid input[name=from]", start.strftime("%Y-%m-%dT00:00:00"))
        page.fill("form.grid input[name=to]", (start + timedelta(days=9)).strftime("%Y-%m-%dT00:00:00"))
        page.click("form.grid button[type=submit]")
        expect(page.locator(".backfill-result")).to_contain_text("9 runs fired, 0 already fired")
        page.click("form.grid button[type=submit]")
        expect(page.locator(".backfill-result")).to_contain_text("0 runs fired, 9 already fired")
        check(len(signed_get(f"/v1/tasks?schedule_id={schedule['id']}&page_size=100")["items"]) == 10,
              "backfill made one task per run")
        page.click("form.grid button:has-text('Cancel')")
        # A window that ended: the form's preview lists nothing, the row says "ended".
        row.locator("button:has-text('Edit')").click()
        page.fill("form.grid input[name=ends_at]", "2026-01-05T00:00:00")
        expect(page.locator(".preview tbody tr")).to_have_count(0)
        page.click("form.grid button[type=submit]")
        expect(page.locator(".notice.ok")).to_contain_text("ended")
        row = page.locator("main tbody tr", has_text="nightly report v2")
        expect(row.locator(".badge.ended")).to_have_text("ended")
        expect(row.locator(".window")).to_contain_text("until")
        check(signed_get(f"/v1/schedules/{schedule['id']}")["next_run_at"] is None, "ended: next_run_at null")
        shot(page, "5-schedules")

        # Events: publish, see it listed, follow it to its tasks.
        create_through_form(page, "Events", "Publish event", {
            "input[name=event_name]": "order.created", "textarea[name=payload]": '{"id": 7}'}, "2 tasks")
        # One row for it; webhookd's own operator events (a task failed for good above) may be
        # listed beside it.
        expect(page.locator("main tbody tr", has_text="order.created")).to_have_count(1)
        shot(page, "7-events")
        page.click("main a:has-text('2 tasks')")
        page.wait_for_selector("body[data-ready=tasks]")
        expect(page.locator("main tbody tr")).to_have_count(2)
        # The event filter is a picker that names the event.
        expect(page.locator("select[name=filter-event_id] option:checked")).to_contain_text("order.created")
        # Bulk retry of the event's failed tasks (none failed): a count of 0.
        page.click("button:has-text('Retry all failed')")
        result["bulk_retry_route"] = route_result(
            page, ".notice.ok",
            lambda: expect(page.locator(".notice.ok")).to_contain_text("0 tasks are pending again"))

        # Test delivery and secret rotation (docs/design.md §11/§12).
        page.click("nav >> text=Endpoints")
        row = page.locator("main tbody tr", has_text="receiver")
        row.locator("button:has-text('Send test')").click()
        result["test_delivery_route"] = route_result(
            page, "section.panel:has-text('Test delivery to')",
            lambda: expect(page.locator("section.panel .attempt")).to_contain_text("HTTP 200"))
        row.locator("button:has-text('Rotate secret')").click()
        page.click("form.grid button[type=submit]")
        secret_box = page.locator("form.grid input.secret")
        result["rotate_secret_route"] = route_result(
            page, "form.grid input.secret",
            lambda: check(secret_box.input_value().startswith("whsec_"), "rotated secret"))
        shot(page, "2-endpoints-actions")

        # The overview counts what happened.
        page.click("nav >> text=Overview")
        page.wait_for_selector("body[data-ready=overview]")
        expect(page.locator(".legend")).to_contain_text("succeeded")
        pending_card = page.locator(".card.pending")
        expect(pending_card).to_contain_text("of which")
        expect(page.locator(".cards .card.retrying")).to_have_count(0)
        shot(page, "1-overview")

        # Health beside enabled: an endpoint that cannot be reached fails in a row.
        dead = signed("POST", "/v1/endpoints", {
            "name": "unreachable", "url": "http://127.0.0.1:9/hook",
            "retry_policy_id": signed_get("/v1/retries/policies")["items"][0]["id"]})
        first = signed("POST", "/v1/tasks", {"endpoint_id": dead["id"]})
        wait_task(first["id"], "failed")
        page.goto(ORIGIN + "/ui/#/endpoints")
        page.wait_for_selector("body[data-ready=endpoints]")
        row = page.locator("main tbody tr", has_text="unreachable")
        expect(row).to_contain_text("1 failure in a row")
        expect(row.locator(".badge.degraded")).to_have_count(1)
        for _ in range(21):
            wait_task(signed("POST", "/v1/tasks", {"endpoint_id": dead["id"]})["id"], "failed")
        page.reload()
        row = page.locator("main tbody tr", has_text="unreachable")
        expect(row).to_contain_text("22 failures in a row")
        expect(row.locator(".badge.failing")).to_have_text("failing")
        enabled = row.locator(".badge.enabled")
        expect(enabled).to_have_text("enabled")
        colour = enabled.evaluate("e => getComputedStyle(e).color + ' ' + getComputedStyle(e).backgroundColor")
        check("27, 127, 59" not in colour and "220, 243, 227" not in colour, f"a failing endpoint's enabled badge is green: {colour}")
        result["health_badge"] = "failing beside enabled"
        shot(page, "2-endpoints-health")
        page.goto(ORIGIN + f"/ui/#/endpoints/{dead['id']}")
        page.wait_for_selector("body[data-ready=endpoints]")
        expect(page.locator("main .health-line .badge.failing")).to_have_text("failing")
        expect(page.locator("section.figures .card", has_text="success rate")).to_contain_text("0%")
        expect(page.locator("main table").first).to_contain_text("no reply")
        shot(page, "9-endpoint-page-failing")
        page.click("main a:has-text('Endpoints')")
        page.wait_for_selector("main tbody tr")

        # The endpoint page: figures over time, recent attempts, actions.
        page.click(f"main a[href='#/endpoints/{receiver_id}']")
        page.wait_for_selector("body[data-ready=endpoints]")
        expect(page.locator("main h2")).to_have_text("receiver")
        figures = page.locator("section.figures")
        expect(figures.locator(".card", has_text="success rate")).to_be_visible()
        expect(figures.locator(".bars")).to_have_count(2)
        expect(figures.locator(".card", has_text="median latency")).to_contain_text("ms")
        attempts_table = page.locator("main table").first
        expect(attempts_table).to_contain_text("HTTP 500")
        expect(attempts_table).to_contain_text("HTTP 200")
        for action in ["Edit", "Disable", "Send test", "Rotate secret"]:
            expect(page.locator(f"main .row-actions button:has-text('{action}')").first).to_be_visible()
        shot(page, "9-endpoint-page")
        page.click("main .row-actions button:has-text('Disable')")
        expect(page.locator(".notice.ok")).to_contain_text("disabled")
        expect(page.locator("main .health-line .badge.disabled")).to_have_count(1)
        page.click("main .row-actions button:has-text('Enable')")
        expect(page.locator(".notice.ok")).to_contain_text("enabled")
        result["endpoint_page"] = "ok"

        left_before_its_data(page, receiver_id, result)
        keys_page(page, result)

        # A phone-sized view of the tasks.
        page.set_viewport_size({"width": 390, "height": 800})
        page.goto(ORIGIN + "/ui/#/tasks")
        page.wait_for_selector("body[data-ready=tasks]")
        shot(page, "8-tasks-phone")

        # Nothing ran from the HTML name; no request left the origin; no script errors.
        check(dialogs == [], f"a dialog opened: {dialogs}")
        check(page.title() == "webhookd", "title changed")
        foreign = [u for u in requests if not (u.startswith(ORIGIN + "/") or u.startswith("data:"))]
        check(foreign == [], f"requests to another origin: {foreign}")
        check(not any(u.split("?")[0].endswith("/x") for u in requests), "the <img src=x> loaded")
        check(not any(SECRET in u for u in requests), "the secret appeared in a URL")
        check(console_errors == [], f"console errors: {console_errors}")
        result["requests_checked"] = len(requests)


if __name__ == "__main__":
    try:
        main()
    except AssertionError as e:
        print(f"FAILED: {e}", file=sys.stderr)
        sys.exit(1)
