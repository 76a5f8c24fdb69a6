#!/usr/bin/env python3
"""CPU seconds of a `webhookd serve` process, per thread name, over its whole life.

    scripts/thread-cpu.py PATTERN &   # then start the server (e.g. bench --spawn --binary X)

Waits for a process whose command line holds PATTERN and `serve`, samples /proc/PID/task/*/stat
every 0.1 s until it exits, and prints the last user+system seconds summed per thread name
(delivery-dispat, tokio-rt-worker, ...). On a busy machine this separates builds better than
throughput does: CPU spent per run moves far less with the load than events per second.
"""
import os, sys, time, glob
pat = sys.argv[1]
pid = None
while pid is None:
    for p in glob.glob('/proc/[0-9]*'):
        try:
            cmd = open(p + '/cmdline', 'rb').read().replace(b'\0', b' ').decode()
        except Exception:
            continue
        if pat in cmd and 'serve' in cmd and 'sib-cpu' not in cmd:
            pid = p; break
    time.sleep(0.05)
last = {}
tick = os.sysconf('SC_CLK_TCK')
while os.path.exists(pid):
    cur = {}
    for t in glob.glob(pid + '/task/*'):
        try:
            s = open(t + '/stat').read()
        except Exception:
            continue
        name = s[s.index('(') + 1:s.rindex(')')]
        f = s[s.rindex(')') + 2:].split()
        cur[t] = (name, int(f[11]) + int(f[12]))
    if cur:
        for k, v in cur.items():
            last[k] = v
    time.sleep(0.1)
tot = {}
for name, c in last.values():
    tot[name] = tot.get(name, 0) + c
print({k: round(v / tick, 2) for k, v in sorted(tot.items())}, 'total', round(sum(tot.values()) / tick, 2))
