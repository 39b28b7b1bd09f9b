#!/bin/sh
# run.sh - Shumai's client (sm.network.tfetch, @shumai/shumai 0.0.13, real code) round trips,
# 16 B and 64 MiB by default, against tfetchd's echo route and against Shumai's own
# sm.network.serve (real code with our stand-in tensor module: see tests/shumai/standins/), and
# this tree's Bun package (js/, over the built libtfetch) against the same tfetchd, in one
# run, p50/p99, with its speedup over Shumai's client; with BENCH_INFLIGHT=N also N round
# trips in flight (bench/run.sh runs it with 8 B, 4 MiB and 64 in flight). The issue's
# comparison: BENCH_TINY_BYTES=8 BENCH_BIG_MIB=16 BENCH_INFLIGHT=64 bench/shumai/run.sh
#
# Not a test: run it by hand from the top of a built tree:  bench/shumai/run.sh
# Needs the npm registry the first time (tests/shumai/setup.sh caches what it installs).
# Loopback only; every step is time-bounded; both servers are stopped on any exit.
# Environment: TFETCHD (default ./daemon/tfetchd), BENCH_BIG_N (default 10), BENCH_TINY_N
# (default 1000), BENCH_BIG_MIB (default 64), BENCH_TINY_BYTES (default 16), BENCH_INFLIGHT
# (default 0: one at a time only), BENCH_INFLIGHT_TINY_N (default 5000), BENCH_INFLIGHT_BIG_N
# (default 4 x BENCH_INFLIGHT), BENCH_TIMEOUT (seconds, default 600), BENCH_JS (0: leave the
# Bun package out), TFETCH_LIBRARY (default: the libtfetch beside TFETCHD's build), and what
# setup.sh reads (TFETCH_SHUMAI_CACHE, ...). Exit status: 0 if every measurement ran.
set -u

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
tfetchd=${TFETCHD:-./daemon/tfetchd}
timeout_s=${BENCH_TIMEOUT:-600}

say() { echo "shumai bench: $*" >&2; }
[ -x "$tfetchd" ] || { say "no tfetchd at $tfetchd (build first, or set TFETCHD)"; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/tfetch-shumai-bench.XXXXXX") || exit 1
pids=
# shellcheck disable=SC2317  # called through the trap
cleanup() {
    for p in $pids; do kill -TERM "$p" 2>/dev/null; done
    for p in $pids; do wait "$p" 2>/dev/null; done
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' HUP INT TERM

"$top/tests/shumai/setup.sh" "$work/client" || { say "setup failed ($?)"; exit 1; }
cp "$here/bench.ts" "$here/serve_stock.ts" "$work/client/"
bun=$work/client/bun
BUN_RUNTIME_TRANSPILER_CACHE_PATH=0   # bun writes no cache outside the scratch dir
export BUN_RUNTIME_TRANSPILER_CACHE_PATH

# Waits for "listening on http://127.0.0.1:PORT" in file $1 (written by pid $2).
wait_url() {
    i=0
    while [ $i -lt 100 ]; do
        u=$(sed -n 's|^listening on \(http://127\.0\.0\.1:[0-9][0-9]*\).*|\1|p' "$1" | head -n 1)
        [ -n "$u" ] && { echo "$u"; return 0; }
        kill -0 "$2" 2>/dev/null || break
        sleep 0.1
        i=$((i + 1))
    done
    return 1
}

: > "$work/tfetchd.out"
: > "$work/stock.out"
"$tfetchd" --port 0 --listen 127.0.0.1 --config /dev/null > "$work/tfetchd.out" \
    2> "$work/tfetchd.err" &
pids="$pids $!"
tf_url=$(wait_url "$work/tfetchd.out" $!) || { say "tfetchd did not start"; cat "$work/tfetchd.err" >&2; exit 1; }

(cd "$work/client" && exec "$bun" run serve_stock.ts) > "$work/stock.out" 2> "$work/stock.err" &
pids="$pids $!"
st_url=$(wait_url "$work/stock.out" $!) || { say "Shumai's serve did not start"; cat "$work/stock.err" >&2; exit 1; }

say "tfetchd $tf_url, Shumai serve $st_url; $(nproc) CPUs"
js_target=
if [ "${BENCH_JS:-1}" != 0 ]; then
    lib=${TFETCH_LIBRARY:-$(cd "$(dirname "$tfetchd")/.." && pwd)/client/.libs/libtfetch.so.1}
    if [ -f "$lib" ]; then
        TFETCH_LIBRARY=$lib TFETCH_JS_DIR=$top/js
        export TFETCH_LIBRARY TFETCH_JS_DIR
        js_target="js:tfetch-js=$tf_url/echo"
        say "the Bun package: $top/js over $lib"
    else
        say "no libtfetch at $lib: leaving the Bun package out (set TFETCH_LIBRARY)"
    fi
fi
# shellcheck disable=SC2086  # js_target: one word or none
(cd "$work/client" && exec timeout "$timeout_s" "$bun" run bench.ts \
    "tfetchd=$tf_url/echo" $js_target "shumai-serve=$st_url/echo")
rc=$?
if [ $rc -ne 0 ]; then
    say "some measurements failed ($rc); server logs:"
    sed 's/^/  tfetchd: /' "$work/tfetchd.err" | tail -n 20 >&2
    sed 's/^/  shumai serve: /' "$work/stock.err" | tail -n 20 >&2
fi
exit $rc
