#!/usr/bin/env bash
# run.sh - runs tfetch's benchmarks: tfetch-bench with its default sizes (memcpy baseline, PUT
# and GET of 8 B .. 256 MiB over HTTP through libtfetch), then, if wrk is installed, 16-byte
# GETs under `wrk -t2 -c64 -d10s` against a tfetchd of its own. Builds nothing (run `make`
# first). Loopback traffic only; every step has a time limit, and the daemon it starts is
# stopped on any exit. Arguments are passed to tfetch-bench (e.g. --reps 3).
#
# Environment: TFETCHD (default ./daemon/tfetchd), TFETCH_BENCH (default ./bench/tfetch-bench),
# BENCH_JSON (a file to which the JSON lines are also written), BENCH_TIMEOUT (seconds, default
# 600), WRK_DURATION (default 10s). Paths are relative to the top of the tree.
# Exit status: 0 if every measurement ran, 1 otherwise. Targets missed are reported, not failed.
set -euo pipefail

abspath() { case $1 in /*) printf '%s\n' "$1" ;; */*) printf '%s/%s\n' "$PWD" "$1" ;; *) printf '%s\n' "$1" ;; esac; }
[ -n "${TFETCHD:-}" ] && TFETCHD=$(abspath "$TFETCHD")
[ -n "${TFETCH_BENCH:-}" ] && TFETCH_BENCH=$(abspath "$TFETCH_BENCH")
[ -n "${BENCH_JSON:-}" ] && BENCH_JSON=$(abspath "$BENCH_JSON")
cd "$(dirname "$0")/.."

TFETCHD=${TFETCHD:-./daemon/tfetchd}
TFETCH_BENCH=${TFETCH_BENCH:-./bench/tfetch-bench}
BENCH_TIMEOUT=${BENCH_TIMEOUT:-600}
WRK_DURATION=${WRK_DURATION:-10s}
TARGET_RATIO=0.14        # GET and PUT of 64 MiB vs the same run's memcpy
TARGET_RPS=40000         # 16 B GETs, wrk -t2 -c64

tmp=$(mktemp -d /tmp/tfetch-run.XXXXXX)
daemon_pid=
child_pid=
# shellcheck disable=SC2317  # called through the trap
cleanup() {
    if [ -n "$child_pid" ]; then
        kill -TERM "$child_pid" 2>/dev/null || true      # timeout(1) passes it on
        wait "$child_pid" 2>/dev/null || true
    fi
    if [ -n "$daemon_pid" ]; then
        kill -TERM "$daemon_pid" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 "$daemon_pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$daemon_pid" 2>/dev/null || true
        wait "$daemon_pid" 2>/dev/null || true
        daemon_pid=
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM HUP

status=0
say() { printf '%s\n' "$*" >&2; }

# Runs a command in the background and waits, so that a signal reaches the trap at once.
run_bounded() {
    "$@" &
    child_pid=$!
    local rc=0
    wait "$child_pid" || rc=$?
    child_pid=
    return "$rc"
}

# Reads a field of the first JSON line matching bench and bytes: field FILE BENCH BYTES NAME.
field() {
    { grep -E "^\{\"bench\":\"$2\",.*\"bytes\":$3," "$1" || true; } | head -n1 |
        sed -nE "s/.*\"$4\":\"?([^,\"}]*).*/\1/p"
}

# ---- 1. tfetch-bench --------------------------------------------------------------------
if [ ! -x "$TFETCH_BENCH" ]; then
    say "run.sh: no $TFETCH_BENCH; run make first"
    exit 1
fi
say "== tfetch-bench (table on stderr, JSON lines below) =="
if ! run_bounded timeout --kill-after=10 "$BENCH_TIMEOUT" "$TFETCH_BENCH" --tfetchd "$TFETCHD" \
        "$@" >"$tmp/bench.jsonl"; then
    say "run.sh: tfetch-bench failed or ran past ${BENCH_TIMEOUT}s"
    status=1
fi
cat "$tmp/bench.jsonl"
[ -n "${BENCH_JSON:-}" ] && cp "$tmp/bench.jsonl" "$BENCH_JSON"

for op in get put; do
    r=$(field "$tmp/bench.jsonl" "$op" 67108864 vs_memcpy)
    if [ -z "$r" ]; then
        say "target: ${op^^} 64 MiB >= ${TARGET_RATIO}x memcpy: not measured"
    elif awk -v r="$r" -v t="$TARGET_RATIO" 'BEGIN { exit !(r >= t) }'; then
        say "target: ${op^^} 64 MiB >= ${TARGET_RATIO}x memcpy: met (${r}x)"
    else
        say "target: ${op^^} 64 MiB >= ${TARGET_RATIO}x memcpy: NOT met (${r}x)"
    fi
done

# ---- 2. wrk: 16 B GETs ------------------------------------------------------------------
if ! command -v wrk >/dev/null 2>&1; then
    say "== wrk not installed (apt install wrk): skipping the 16 B GET req/s figure =="
    exit "$status"
fi
for tool in curl timeout; do
    command -v "$tool" >/dev/null 2>&1 || { say "run.sh: $tool is needed for the wrk step"; exit 1; }
done
say "== wrk -t2 -c64 -d$WRK_DURATION: GET of a 16-byte tensor =="

"$TFETCHD" --port 0 --listen 127.0.0.1 --max-body 1G --store-memory 4G \
    >"$tmp/tfetchd.out" 2>"$tmp/tfetchd.err" &
daemon_pid=$!
port=
for _ in $(seq 150); do
    port=$(sed -nE 's|.*listening on [a-z]+://[^ ]*:([0-9]+).*|\1|p' "$tmp/tfetchd.out" | head -n1)
    [ -n "$port" ] && break
    kill -0 "$daemon_pid" 2>/dev/null || break
    sleep 0.1
done
if [ -z "$port" ]; then
    say "run.sh: $TFETCHD did not print 'listening on http://ADDR:PORT'; its stderr:"
    tail -n 20 "$tmp/tfetchd.err" >&2 || true
    exit 1
fi
url=http://127.0.0.1:$port/v1/tensors/tiny

printf '0123456789abcdef' >"$tmp/tiny.bin"
if ! code=$(curl -sS --max-time 10 -o "$tmp/put.out" -w '%{http_code}' -X PUT \
        --data-binary @"$tmp/tiny.bin" -H 'Content-Type: application/octet-stream' \
        -H 'Tfetch-Dtype: U8' -H 'Tfetch-Shape: 16' "$url") || [ "${code:0:1}" != 2 ]; then
    say "run.sh: PUT $url failed (HTTP ${code:-none}): $(head -c 300 "$tmp/put.out" 2>/dev/null)"
    exit 1
fi
if ! code=$(curl -sS --max-time 10 -o "$tmp/get.out" -w '%{http_code}' "$url") ||
        [ "$code" != 200 ]; then
    say "run.sh: GET $url failed (HTTP ${code:-none})"
    exit 1
fi

wrk_s=$(( ${WRK_DURATION%s} + 30 ))
if ! run_bounded timeout --kill-after=5 "$wrk_s" wrk -t2 -c64 -d"$WRK_DURATION" "$url" \
        >"$tmp/wrk.out" 2>&1; then
    say "run.sh: wrk failed or ran past ${wrk_s}s"
    cat "$tmp/wrk.out" >&2
    exit 1
fi
cat "$tmp/wrk.out" >&2
rps=$(sed -nE 's/^Requests\/sec:[[:space:]]*([0-9.]+).*/\1/p' "$tmp/wrk.out")
bad=$(sed -nE 's/.*Non-2xx or 3xx responses:[[:space:]]*([0-9]+).*/\1/p' "$tmp/wrk.out")
errs=$(sed -nE 's/.*Socket errors:(.*)/\1/p' "$tmp/wrk.out")
if [ -z "$rps" ]; then
    say "run.sh: no Requests/sec in wrk's output"
    exit 1
fi
printf '{"bench":"wrk-get","transport":"http","bytes":16,"threads":2,"connections":64,"duration":"%s","req_per_s":%s,"non_2xx":%s}\n' \
    "$WRK_DURATION" "$rps" "${bad:-0}" | tee -a "$tmp/wrk.jsonl"
[ -n "${BENCH_JSON:-}" ] && cat "$tmp/wrk.jsonl" >>"$BENCH_JSON"
if [ -n "$errs" ]; then
    say "run.sh: warning: wrk saw socket errors:$errs"
fi
if [ -n "$bad" ]; then
    say "run.sh: $bad responses were not 2xx: the req/s figure is not valid"
    status=1
elif awk -v r="$rps" -v t="$TARGET_RPS" 'BEGIN { exit !(r >= t) }'; then
    say "target: 16 B GET >= $TARGET_RPS req/s (wrk -t2 -c64): met ($rps req/s)"
else
    say "target: 16 B GET >= $TARGET_RPS req/s (wrk -t2 -c64): NOT met ($rps req/s)"
fi
exit "$status"
