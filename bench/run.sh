#!/usr/bin/env bash
# run.sh - runs tfetch's benchmarks: tfetch-bench with its default sizes (memcpy baseline, PUT
# and GET of 8 B .. 256 MiB over HTTP through libtfetch, then exchanges of 8 B and 4 MiB with
# the echo route, one at a time and 64 in flight), then, if wrk is installed, 16-byte GETs
# under `wrk -t2 -c64 -d10s` against a tfetchd of its own, then, if bun and Shumai are already
# in tests/shumai/setup.sh's cache, bench/shumai/run.sh: Shumai's client round trips (8 B and
# 4 MiB, one at a time and 64 in flight) against tfetchd and against stock Shumai's serve.
# Between them: bench/ucx-raw (the raw UCX ceiling, with issue 9's targets) and
# bench/tfetch-shm-bench for 4 KiB .. 1 GiB (same-host shm/memfd against memcpy).
# Builds nothing (run `make` first) and installs nothing (the Shumai step is skipped when the
# cache is not ready: run tests/shumai/setup.sh DIR once, with the npm registry, to fill it),
# then bench/https.sh: the same 64 MiB PUT/GET and 16 B GETs against a plain and an HTTPS
# tfetchd, with the cost of TLS and issue 8's target (at most 2x at 64 MiB).
# Loopback traffic only; every step has a time limit, and the daemons it starts are stopped
# on any exit. Arguments are passed to tfetch-bench (e.g. --reps 3).
#
# Environment: TFETCHD (default ./daemon/tfetchd), TFETCH_BENCH (default ./bench/tfetch-bench),
# TFETCH_UCX_RAW (default ./bench/ucx-raw),
# BENCH_JSON (a file to which the JSON lines are also written), BENCH_TIMEOUT (seconds, default
# 600, per step), WRK_DURATION (default 10s), BENCH_SHUMAI (0: skip the Shumai step), and for
# that step BENCH_TINY_BYTES (default here 8), BENCH_BIG_MIB (4), BENCH_TINY_N (1000),
# BENCH_BIG_N (50), BENCH_INFLIGHT (64), BENCH_INFLIGHT_TINY_N (5000), BENCH_INFLIGHT_BIG_N
# (640), SHM_BENCH, BENCH_SHM_SIZES (default "4K 4M 64M 1G"), BENCH_SHM_REPS (5), and TFETCH_SHUMAI_CACHE, TFETCH_SHUMAI_BUN, TFETCH_SHUMAI_VERSION (see
# tests/shumai/setup.sh), BENCH_FEEDS (1: then also bench/tfetch-feed-bench, its table on
# stderr; TFETCH_FEED_BENCH names it), BENCH_HTTPS (0: skip bench/https.sh; its own settings:
# HTTPS_REPS, HTTPS_TINY_N, and WRK_DURATION as here). Paths are relative to the top of the tree.
# Output: JSON lines on stdout (tfetch-bench's, wrk's); tables and messages on stderr.
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
stop_daemon() {
    if [ -n "$daemon_pid" ]; then
        kill -TERM "$daemon_pid" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 "$daemon_pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$daemon_pid" 2>/dev/null || true
        wait "$daemon_pid" 2>/dev/null || true
        daemon_pid=
    fi
}
# shellcheck disable=SC2317  # called through the trap
cleanup() {
    if [ -n "$child_pid" ]; then
        kill -TERM "$child_pid" 2>/dev/null || true      # timeout(1) passes it on
        wait "$child_pid" 2>/dev/null || true
    fi
    stop_daemon
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

# ---- 1b. the raw UCX ceiling, and tfetch over UCX against it and HTTP ------------------
# Reads a field of the first JSON line of bench, transport prefix and bytes:
# tfield FILE BENCH TRANSPORT-PREFIX BYTES NAME.
tfield() {
    { grep -E "^\{\"bench\":\"$2\",\"transport\":\"$3[^\"]*\",.*\"bytes\":$4," "$1" || true; } |
        head -n1 | sed -nE "s/.*\"$5\":\"?([^,\"}]*).*/\1/p"
}
# Not UCX_RAW: UCX reads every UCX_* variable of its environment and warns of unknown ones.
UCX_RAW=${TFETCH_UCX_RAW:-./bench/ucx-raw}
if [ -x "$UCX_RAW" ] && grep -q '"transport":"ucx' "$tmp/bench.jsonl"; then
    say "== ucx-raw: our own UCX active-message request/ack, one host (the ceiling) =="
    if run_bounded timeout --kill-after=10 120 "$UCX_RAW" --sizes 8,4M,64M,256M \
            >"$tmp/raw.jsonl" 2>"$tmp/raw.err"; then
        cat "$tmp/raw.jsonl"
        [ -n "${BENCH_JSON:-}" ] && cat "$tmp/raw.jsonl" >>"$BENCH_JSON"
        raw=$({ grep -E '"bench":"ucx-am","config":"shm".*"variant":"single".*"bytes":67108864,' \
                "$tmp/raw.jsonl" || true; } | head -n1 | sed -nE 's/.*"gbps":([^,}]*).*/\1/p')
        for op in get put; do
            u=$(tfield "$tmp/bench.jsonl" "$op" ucx 67108864 gbps)
            h=$(tfield "$tmp/bench.jsonl" "$op" http 67108864 gbps)
            if [ -n "$u" ] && [ -n "$raw" ] && [ -n "$h" ]; then
                awk -v u="$u" -v r="$raw" -v h="$h" -v op="${op^^}" 'BEGIN {
                    printf "target: %s 64 MiB over UCX >= 0.8x raw UCX: %s (%.2fx: %.2f vs %.2f GB/s)\n",
                        op, (u >= 0.8 * r ? "met" : "NOT met"), u / r, u, r
                    printf "target: %s 64 MiB over UCX >= 3x HTTP: %s (%.2fx: %.2f vs %.2f GB/s)\n",
                        op, (u >= 3 * h ? "met" : "NOT met"), u / h, u, h }' >&2
            else
                say "target: ${op^^} 64 MiB over UCX vs raw UCX and HTTP: not measured"
            fi
        done
        x=$(tfield "$tmp/bench.jsonl" exchange ucx 8 p50_us)
        if [ -n "$x" ]; then
            awk -v x="$x" 'BEGIN { printf "target: 8 B exchange p50 over UCX <= 15 us: %s (%.1f us)\n",
                (x <= 15 ? "met" : "NOT met"), x }' >&2
        fi
        # Issue 9's targets (printed, never asserted; bench/README.md "Issue 9 baseline").
        i9_get=$(tfield "$tmp/bench.jsonl" get ucx 67108864 gbps)
        i9_put=$(tfield "$tmp/bench.jsonl" put ucx 67108864 gbps)
        awk -v x="$x" -v g="$i9_get" -v p="$i9_put" -v r="$raw" 'BEGIN {
            if (x != "") printf "issue 9: 8 B exchange p50 over UCX <= 5 us: %s (%.1f us)\n",
                (x <= 5 ? "PASS" : "MISS"), x
            else print "issue 9: 8 B exchange over UCX: not measured"
            if (g != "" && r != "") printf "issue 9: GET 64 MiB over UCX >= 0.9x raw UCX: %s (%.2fx)\n",
                (g >= 0.9 * r ? "PASS" : "MISS"), g / r
            else print "issue 9: GET 64 MiB over UCX vs raw UCX: not measured"
            if (g != "" && p != "") printf "issue 9: GET 64 MiB over UCX >= 0.9x our PUT: %s (%.2fx)\n",
                (g >= 0.9 * p ? "PASS" : "MISS"), g / p
            else print "issue 9: GET vs PUT 64 MiB over UCX: not measured" }' >&2
    else
        say "run.sh: ucx-raw failed: $(tail -3 "$tmp/raw.err")"
        status=1
    fi
else
    say "== ucx-raw: skipped (not built, or tfetch-bench measured no UCX) =="
fi

# ---- 1c. same host without copies: shm/memfd against memcpy ----------------------------
# tfetch-shm-bench starts its own tfetchd and prints a table per size with the issue's
# targets (GET < 1 ms and >= 10x memcpy; PUT >= 1x memcpy), measured, never asserted.
SHM_BENCH=${SHM_BENCH:-./bench/tfetch-shm-bench}
if [ -x "$SHM_BENCH" ]; then
    for size in ${BENCH_SHM_SIZES:-4K 4M 64M 1G}; do
        say "== tfetch-shm-bench $size: shm/memfd GET and PUT against memcpy (same run) =="
        if run_bounded env TFETCHD="$TFETCHD" timeout --kill-after=10 "$BENCH_TIMEOUT" \
                "$SHM_BENCH" "$size" "${BENCH_SHM_REPS:-5}" >"$tmp/shm.out" 2>"$tmp/shm.err"; then
            sed 's/^/  /' "$tmp/shm.out" >&2
            sed -n 's/^targets: /issue 9: shm\/memfd '"$size"': /p' "$tmp/shm.out" >&2
        else
            say "run.sh: tfetch-shm-bench $size failed: $(tail -3 "$tmp/shm.err")"
            status=1
        fi
    done
else
    say "== tfetch-shm-bench: not built (configure found no UCX?) =="
fi

# ---- 2. wrk: 16 B GETs ------------------------------------------------------------------
# Returns 0 if it ran (or was skipped), 1 if it failed.
wrk_step() {
    if ! command -v wrk >/dev/null 2>&1; then
        say "== wrk not installed (apt install wrk): skipping the 16 B GET req/s figure =="
        return 0
    fi
    for tool in curl timeout; do
        command -v "$tool" >/dev/null 2>&1 || { say "run.sh: $tool is needed for the wrk step"; return 1; }
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
        return 1
    fi
    url=http://127.0.0.1:$port/v1/tensors/tiny

    printf '0123456789abcdef' >"$tmp/tiny.bin"
    if ! code=$(curl -sS --max-time 10 -o "$tmp/put.out" -w '%{http_code}' -X PUT \
            --data-binary @"$tmp/tiny.bin" -H 'Content-Type: application/octet-stream' \
            -H 'Tfetch-Dtype: U8' -H 'Tfetch-Shape: 16' "$url") || [ "${code:0:1}" != 2 ]; then
        say "run.sh: PUT $url failed (HTTP ${code:-none}): $(head -c 300 "$tmp/put.out" 2>/dev/null)"
        return 1
    fi
    if ! code=$(curl -sS --max-time 10 -o "$tmp/get.out" -w '%{http_code}' "$url") ||
            [ "$code" != 200 ]; then
        say "run.sh: GET $url failed (HTTP ${code:-none})"
        return 1
    fi

    wrk_s=$(( ${WRK_DURATION%s} + 30 ))
    if ! run_bounded timeout --kill-after=5 "$wrk_s" wrk -t2 -c64 -d"$WRK_DURATION" "$url" \
            >"$tmp/wrk.out" 2>&1; then
        say "run.sh: wrk failed or ran past ${wrk_s}s"
        cat "$tmp/wrk.out" >&2
        return 1
    fi
    cat "$tmp/wrk.out" >&2
    rps=$(sed -nE 's/^Requests\/sec:[[:space:]]*([0-9.]+).*/\1/p' "$tmp/wrk.out")
    bad=$(sed -nE 's/.*Non-2xx or 3xx responses:[[:space:]]*([0-9]+).*/\1/p' "$tmp/wrk.out")
    errs=$(sed -nE 's/.*Socket errors:(.*)/\1/p' "$tmp/wrk.out")
    if [ -z "$rps" ]; then
        say "run.sh: no Requests/sec in wrk's output"
        return 1
    fi
    printf '{"bench":"wrk-get","transport":"http","bytes":16,"threads":2,"connections":64,"duration":"%s","req_per_s":%s,"non_2xx":%s}\n' \
        "$WRK_DURATION" "$rps" "${bad:-0}" | tee -a "$tmp/wrk.jsonl"
    [ -n "${BENCH_JSON:-}" ] && cat "$tmp/wrk.jsonl" >>"$BENCH_JSON"
    if [ -n "$errs" ]; then
        say "run.sh: warning: wrk saw socket errors:$errs"
    fi
    if [ -n "$bad" ]; then
        say "run.sh: $bad responses were not 2xx: the req/s figure is not valid"
        return 1
    elif awk -v r="$rps" -v t="$TARGET_RPS" 'BEGIN { exit !(r >= t) }'; then
        say "target: 16 B GET >= $TARGET_RPS req/s (wrk -t2 -c64): met ($rps req/s)"
    else
        say "target: 16 B GET >= $TARGET_RPS req/s (wrk -t2 -c64): NOT met ($rps req/s)"
    fi
    return 0
}
wrk_step || status=1
stop_daemon

# ---- 3. Shumai's client: tfetchd vs stock Shumai serve ----------------------------------
# Runs bench/shumai/run.sh only when tests/shumai/setup.sh would find everything in its cache
# (the same test as setup.sh's, with its defaults), so that nothing is downloaded from here.
shumai_ready() {
    local cache key b
    if [ -n "${TFETCH_SHUMAI_CACHE:-}" ]; then cache=$TFETCH_SHUMAI_CACHE
    elif [ -n "${XDG_CACHE_HOME:-}" ]; then cache=$XDG_CACHE_HOME/tfetch-shumai
    elif [ -n "${HOME:-}" ]; then cache=$HOME/.cache/tfetch-shumai
    else cache=$(pwd)/shumai-cache
    fi
    key="${TFETCH_SHUMAI_BUN:-bun@1.4.5}+@shumai/shumai@${TFETCH_SHUMAI_VERSION:-0.0.13}"
    command -v npm >/dev/null 2>&1 || { why="npm is not installed (setup.sh needs it)"; return 1; }
    [ "$(cat "$cache/installed" 2>/dev/null)" = "$key" ] ||
        { why="$cache does not hold $key"; return 1; }
    [ -f "$cache/node_modules/@shumai/shumai/shumai/network/tensor.ts" ] ||
        { why="no @shumai/shumai in $cache"; return 1; }
    for b in "$cache"/node_modules/@oven/bun-*/bin/bun; do
        [ -x "$b" ] && "$b" --version >/dev/null 2>&1 && return 0
    done
    why="no runnable bun in $cache"
    return 1
}
why=
if [ "${BENCH_SHUMAI:-1}" = 0 ]; then
    say "== BENCH_SHUMAI=0: skipping Shumai's client (bench/shumai/run.sh) =="
elif ! shumai_ready; then
    say "== skipping Shumai's client (bench/shumai/run.sh): $why; fill the cache once with"
    say "   tests/shumai/setup.sh \$(mktemp -d) (needs the npm registry) =="
else
    say "== Shumai's client (sm.network.tfetch): tfetchd vs stock Shumai serve, echo round trips =="
    export BENCH_TINY_BYTES=${BENCH_TINY_BYTES:-8} BENCH_BIG_MIB=${BENCH_BIG_MIB:-4}
    export BENCH_TINY_N=${BENCH_TINY_N:-1000} BENCH_BIG_N=${BENCH_BIG_N:-50}
    export BENCH_INFLIGHT=${BENCH_INFLIGHT:-64} BENCH_INFLIGHT_TINY_N=${BENCH_INFLIGHT_TINY_N:-5000}
    export BENCH_INFLIGHT_BIG_N=${BENCH_INFLIGHT_BIG_N:-640} BENCH_TIMEOUT TFETCHD
    # its table goes to stderr with the others: stdout carries JSON lines only
    if ! run_bounded timeout --kill-after=10 $((BENCH_TIMEOUT + 120)) bench/shumai/run.sh >&2; then
        say "run.sh: bench/shumai/run.sh failed or ran past $((BENCH_TIMEOUT + 120))s"
        status=1
    fi
fi

# ---- 4. HTTPS next to plain HTTP (bench/https.sh; BENCH_HTTPS=0 skips it) ----------------
if [ "${BENCH_HTTPS:-1}" = 0 ]; then
    say "== BENCH_HTTPS=0: skipping HTTPS vs plain HTTP (bench/https.sh) =="
elif ! command -v certtool >/dev/null 2>&1; then
    say "== skipping HTTPS vs plain HTTP (bench/https.sh): no certtool (apt install gnutls-bin) =="
else
    say "== HTTPS vs plain HTTP: 64 MiB PUT/GET and 16 B GETs, two daemons (bench/https.sh) =="
    if ! run_bounded timeout --kill-after=10 $((BENCH_TIMEOUT + 120)) \
            env TFETCHD="$TFETCHD" TFETCH_BENCH="$TFETCH_BENCH" BENCH_TIMEOUT="$BENCH_TIMEOUT" \
            WRK_DURATION="$WRK_DURATION" \
            bench/https.sh >"$tmp/https.jsonl"; then
        say "run.sh: bench/https.sh failed or ran past $((BENCH_TIMEOUT + 120))s"
        status=1
    fi
    cat "$tmp/https.jsonl"
    [ -n "${BENCH_JSON:-}" ] && cat "$tmp/https.jsonl" >>"$BENCH_JSON"
fi

# ---- feeds (BENCH_FEEDS=1, or bench/tfetch-feed-bench alone) ------------------------------
if [ "${BENCH_FEEDS:-0}" = 1 ]; then
    say "== tfetch-feed-bench: feeds vs the store, Redis, TCP and a raw memfd ring (stderr) =="
    if ! run_bounded timeout --kill-after=10 "$BENCH_TIMEOUT" env TFETCHD="$TFETCHD" \
            "${TFETCH_FEED_BENCH:-./bench/tfetch-feed-bench}" >&2; then
        say "run.sh: tfetch-feed-bench failed or ran past ${BENCH_TIMEOUT}s"
        status=1
    fi
fi
exit "$status"
