#!/usr/bin/env python3
"""The server's CPU and context switches per signed `GET /v1/endpoints/{id}`, A/B: binaries run
alternated, each on a fresh SQLite database under `bench api --clients 8 --duration 4`; the server's
utime + stime and the context switches of all its threads are read when the harness starts the
GET phase and when it starts the list phase, and divided by the GETs answered.

    scripts/bench-get-cpu.py ROUNDS BIN...   (BENCH=path to the harness, CLIENTS=8, DURATION=4)
"""
import json, os, socket, subprocess, sys, tempfile, time, glob, statistics
bench = os.environ.get("BENCH", "target/release/examples/bench")
tck = os.sysconf("SC_CLK_TCK")
clients = os.environ.get("CLIENTS", "8"); dur = os.environ.get("DURATION", "4")
def cpu(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / tck
def ctx(pid):
    n = 0
    for st in glob.glob(f"/proc/{pid}/task/*/status"):
        try:
            for l in open(st):
                if l.startswith(("voluntary_ctxt", "nonvoluntary_ctxt")): n += int(l.split()[1])
        except FileNotFoundError: pass
    return n
rounds = int(sys.argv[1]); bins = sys.argv[2:]
res = {b: [] for b in bins}
env = dict(os.environ, WEBHOOKD_LOG="warn")
for r in range(rounds):
    for b in bins:
        tmp = tempfile.mkdtemp()
        key = json.loads(subprocess.check_output([b, "keys", "create", "--db", f"{tmp}/db.sqlite", "--app", "bench", "--name", "cpu", "--json"], env=env))
        s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
        srv = subprocess.Popen([b, "serve", "--db", f"{tmp}/db.sqlite", "--listen", f"127.0.0.1:{port}"], env=env, stderr=open(f"{tmp}/log", "w"))
        for _ in range(100):
            if subprocess.call([b, "healthcheck", "--url", f"http://127.0.0.1:{port}"], stderr=subprocess.DEVNULL, stdout=subprocess.DEVNULL) == 0: break
            time.sleep(0.1)
        load = open("/proc/loadavg").read().split()[0]
        p = subprocess.Popen([bench, "api", "--url", f"http://127.0.0.1:{port}", "--key-id", key["key_id"], "--secret", key["secret"], "--clients", clients, "--duration", dur, "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        marks = {}
        for line in p.stderr:
            if "api: GET /v1/endpoints" in line: marks["get"] = (cpu(srv.pid), ctx(srv.pid))
            elif "api: GET /v1/tasks" in line: marks["list"] = (cpu(srv.pid), ctx(srv.pid))
        out = [json.loads(l) for l in p.stdout.read().splitlines() if l.startswith("{")][-1]
        srv.terminate(); srv.wait()
        subprocess.call(["rm", "-rf", tmp])
        gets = out["get_endpoint_per_s"] * out["duration_s"]
        us = (marks["list"][0] - marks["get"][0]) / gets * 1e6
        cs = (marks["list"][1] - marks["get"][1]) / gets
        res[b].append((us, cs, out["get_endpoint_per_s"]))
        print(f"{r+1} {os.path.basename(b)} load={load} get/s={out['get_endpoint_per_s']:.0f} cpu_us_per_get={us:.1f} ctxsw_per_get={cs:.2f}", flush=True)
print("medians:")
for b, v in res.items():
    print(f"  {os.path.basename(b)} cpu_us_per_get={statistics.median(x[0] for x in v):.1f} ctxsw_per_get={statistics.median(x[1] for x in v):.2f} get/s={statistics.median(x[2] for x in v):.0f}")
