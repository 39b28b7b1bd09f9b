#!/usr/bin/env bash
# bench/ab.sh - two builds of tfetch side by side: which is faster, by how much, how sure.
#
#   bench/ab.sh BUILD_A BUILD_B [PAIRS]      (BUILD_*: a configured build directory)
#
# Starts each build's tfetchd once (port 0, 127.0.0.1) and keeps both up, then alternates
# short runs of each build's tfetch-bench (--url: its own client library against its own
# daemon) PAIRS times (default 60). On our 2-core machines one run's p50 moves by a
# microsecond or more with where its threads land, and a fresh daemon per run (tfetch-bench's
# default) lands anew each time; alternating against daemons that stay up, and comparing the
# runs pairwise, sees differences of a tenth of that. Prints each build's median and
# quartiles of the runs' p50s, and the median of the pairwise differences (B - A) with how
# many pairs B won. BENCH_AB_ARGS overrides what one run measures (default: an 8-byte
# exchange over UCX, 3000 times, one at a time).
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: bench/ab.sh BUILD_A BUILD_B [PAIRS]" >&2; exit 2; }
A=$(cd "$1" && pwd) B=$(cd "$2" && pwd) PAIRS=${3:-60}
ARGS=${BENCH_AB_ARGS:---sizes 8 --exchange-sizes 8 --inflight 0 --reps 3000 --warmup 200 --memcpy-reps 1 --transports ucx}
WORK=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$WORK"; }
trap cleanup EXIT INT TERM

start() {   # start BUILD NAME: its daemon's URL in $WORK/NAME.url
    "$1/daemon/tfetchd" --port 0 --listen 127.0.0.1 --max-body 1G --store-memory 4G \
        >"$WORK/$2.out" 2>"$WORK/$2.err" &
    pids+=($!)
    for _ in $(seq 100); do
        url=$(sed -n 's/^listening on \(http:[^ ]*\).*/\1/p' "$WORK/$2.out")
        [ -n "$url" ] && { echo "$url" >"$WORK/$2.url"; return; }
        sleep 0.1
    done
    echo "bench/ab.sh: $1's tfetchd did not start:" >&2; cat "$WORK/$2.err" >&2; exit 1
}
one() {     # one BUILD NAME: one run's p50 of the exchange (or the first measurement)
    # shellcheck disable=SC2086
    LD_LIBRARY_PATH="$1/client/.libs" "$1/bench/tfetch-bench" --url "$(cat "$WORK/$2.url")" \
        $ARGS --json 2>/dev/null | python3 -c '
import json, sys
rows = [json.loads(l) for l in sys.stdin if l.startswith("{")]
rows = [r for r in rows if r.get("bench") == "exchange"] or [r for r in rows if "p50_us" in r]
print(rows[-1]["p50_us"] if rows else "nan")'
}
start "$A" a
start "$B" b
for _ in $(seq "$PAIRS"); do
    echo "$(one "$A" a) $(one "$B" b)"
done >"$WORK/pairs"
python3 - "$WORK/pairs" "$A" "$B" <<'PY'
import math, statistics as s, sys
pairs = [tuple(map(float, l.split())) for l in open(sys.argv[1])]
pairs = [p for p in pairs if not any(math.isnan(x) for x in p)]
if len(pairs) < 4:
    sys.exit("bench/ab.sh: too few runs succeeded")
for name, i in (("A " + sys.argv[2], 0), ("B " + sys.argv[3], 1)):
    v = [p[i] for p in pairs]
    q = s.quantiles(v, n=4)
    print(f"{name}: p50 median {s.median(v):.2f} us (quartiles {q[0]:.2f} {q[2]:.2f}, min {min(v):.2f})")
d = [b - a for a, b in pairs]
print(f"B - A: median {s.median(d):+.2f} us over {len(d)} pairs; B faster in {sum(x < 0 for x in d)}")
PY
