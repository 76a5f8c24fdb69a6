#!/usr/bin/env bash
# The WAL bound's A/B (BENCHMARKS.md): one `publish` run (30,000 events, fan-out 1) against a
# release server started with `--wal-limit-mb $2`, the -wal file sampled every 100 ms.
#   cargo build --release --bin webhookd --example bench
#   for r in "off 100000" "on 64" "off 100000" "on 64"; do scripts/bench-wal-ab.sh $r; done
# Prints the label, the limit, the largest -wal in MiB and the harness's figures.
set -u
B=${WEBHOOKD_BIN:-$(cd "$(dirname "$0")/.." && pwd)/target/release}
d=$(mktemp -d); db=$d/ab.sqlite; port=$((18000 + RANDOM % 1000))
$B/webhookd keys create --db $db --app bench --name b --json > $d/key.json
kid=$(python3 -c "import json;print(json.load(open('$d/key.json'))['key_id'])")
sec=$(python3 -c "import json;print(json.load(open('$d/key.json'))['secret'])")
$B/webhookd serve --db $db --listen 127.0.0.1:$port --wal-limit-mb $2 2>$d/log &
pid=$!
sleep 0.5
( while kill -0 $pid 2>/dev/null; do stat -c %s $db-wal 2>/dev/null; sleep 0.1; done ) > $d/wal.txt &
$B/examples/bench publish --url http://127.0.0.1:$port --key-id $kid --secret $sec --events 30000 --json > $d/out.json 2>$d/bench.err
kill $pid; wait $pid 2>/dev/null
max=$(sort -n $d/wal.txt | tail -1)
echo "$1 wal_limit=$2 max_wal_MiB=$((max/1048576)) $(python3 -c "
import json
d=json.load(open('$d/out.json'))
def find(o,p=''):
    if isinstance(o,dict):
        for k,v in o.items(): yield from find(v,p+'.'+k)
    else: yield p,o
print(' '.join(f'{k}={v}' for k,v in find(d) if not k.startswith('.targets') and isinstance(v,(int,float))))
" 2>/dev/null || head -c 300 $d/out.json)"
rm -rf $d
