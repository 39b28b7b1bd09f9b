#!/bin/sh
# auth_cost.sh - what bearer-token authentication costs a request: 16 B GETs against a tfetchd
# without auth-tokens and one with, alternating ROUNDS times in one run (so both see the same
# machine load), over HTTP and UCX; prints each mode's median of the rounds' p50 and mean, and
# the difference (the target: under 5 us a request). Needs bench/tfetch-bench and
# daemon/tfetchd built, and python3 to read the JSON lines. Run from the build directory:
#     ../bench/auth_cost.sh [ROUNDS [REPS]]
set -eu
ROUNDS=${1:-7}
REPS=${2:-2000}
BENCH=${TFETCH_BENCH:-./bench/tfetch-bench}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT INT TERM
printf 'tk-bench-auth-cost bench read:* write:* delete:* call:*\n' >"$dir/tokens"
chmod 600 "$dir/tokens"
i=0
while [ "$i" -lt "$ROUNDS" ]; do
    env -u TFETCH_TOKEN "$BENCH" --sizes 16 --exchange-sizes none --reps "$REPS" --json \
        --memcpy-reps 1 | sed 's/^/off /' >>"$dir/out"
    TFETCH_TOKEN=tk-bench-auth-cost "$BENCH" --sizes 16 --exchange-sizes none --reps "$REPS" \
        --json --memcpy-reps 1 --tfetchd-arg --auth-tokens --tfetchd-arg "$dir/tokens" |
        sed 's/^/on /' >>"$dir/out"
    i=$((i + 1))
done
python3 - "$dir/out" <<'EOF'
import json, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    mode, js = line.split(" ", 1)
    r = json.loads(js)
    if r["bench"] != "get":
        continue
    t = "ucx" if r["transport"].startswith("ucx") else r["transport"]
    runs.setdefault((t, mode), []).append((r["p50_us"], r["mean_us"]))
for t in ("http", "ucx"):
    if (t, "off") not in runs or (t, "on") not in runs:
        continue
    off, on = runs[(t, "off")], runs[(t, "on")]
    m = lambda xs, k: statistics.median(x[k] for x in xs)
    print("16 B GET over %-4s  p50 off %7.2f us  on %7.2f us  (+%.2f)   mean off %7.2f us  "
          "on %7.2f us  (+%.2f)   %d rounds" % (t, m(off, 0), m(on, 0), m(on, 0) - m(off, 0),
                                               m(off, 1), m(on, 1), m(on, 1) - m(off, 1),
                                               len(off)))
EOF
