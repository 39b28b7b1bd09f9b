#!/bin/sh
# setup.sh - brings the real Shumai client code and a bun binary from the npm registry, and
# lays them out in a scratch directory where Shumai's network code can run without ArrayFire.
#
# Usage: tests/shumai/setup.sh SCRATCH_DIR
# Installs (once, into a cache; nothing here is committed) the npm packages bun (its
# @oven/bun-<platform> optional dependency carries the binary) and @shumai/shumai, then fills
# SCRATCH_DIR with:
#   bun                         -> the bun binary (a symlink)
#   shumai/network/tensor.ts    Shumai's own file, unmodified (tfetch)
#   shumai/network/model.ts     Shumai's own file, unmodified (serve, for the benchmark)
#   shumai/io/encode.ts         Shumai's own file, unmodified (encodeBinary/decodeBinary)
#   shumai/{io,tensor,stats,util,module,optim}/index.ts   our stand-ins (standins/)
#   client.ts                   our test script
# Exit status: 0 ready; 77 when npm or the registry is not available (the caller SKIPs);
# 1 for anything else. Progress goes to stderr.
#
# Environment: TFETCH_SHUMAI_CACHE (default $XDG_CACHE_HOME/tfetch-shumai, else
# ~/.cache/tfetch-shumai), TFETCH_SHUMAI_BUN (default bun@1.4.5),
# TFETCH_SHUMAI_VERSION (default 0.0.13), TFETCH_SHUMAI_NPM_TIMEOUT (seconds, default 300).
set -u

here=$(cd "$(dirname "$0")" && pwd)
scratch=${1:?usage: setup.sh SCRATCH_DIR}
bun_spec=${TFETCH_SHUMAI_BUN:-bun@1.4.5}
shumai_version=${TFETCH_SHUMAI_VERSION:-0.0.13}
npm_timeout=${TFETCH_SHUMAI_NPM_TIMEOUT:-300}
if [ -n "${TFETCH_SHUMAI_CACHE:-}" ]; then
    cache=$TFETCH_SHUMAI_CACHE
elif [ -n "${XDG_CACHE_HOME:-}" ]; then
    cache=$XDG_CACHE_HOME/tfetch-shumai
elif [ -n "${HOME:-}" ]; then
    cache=$HOME/.cache/tfetch-shumai
else
    cache=$(pwd)/shumai-cache
fi
say() { echo "shumai setup: $*" >&2; }
skip() { say "SKIP: $*"; exit 77; }
die() { say "ERROR: $*"; exit 1; }

command -v npm >/dev/null 2>&1 || skip "npm is not installed (Debian: apt-get install npm)"
mkdir -p "$cache" || die "cannot create the cache $cache"
key="$bun_spec+@shumai/shumai@$shumai_version"
shumai_src=$cache/node_modules/@shumai/shumai/shumai

# The binary from the platform package: no install script needed (we run npm with
# --ignore-scripts, so bun's postinstall, which only relinks it, never runs).
find_bun() {
    for b in "$cache"/node_modules/@oven/bun-*/bin/bun; do
        [ -x "$b" ] && "$b" --version >/dev/null 2>&1 && { echo "$b"; return 0; }
    done
    return 1
}

install() {
    say "installing $bun_spec and @shumai/shumai@$shumai_version into $cache (npm registry)"
    rm -rf "$cache/node_modules" "$cache/package-lock.json" "$cache/installed"
    echo '{"private": true, "description": "tfetch test cache: the real Shumai client"}' \
        > "$cache/package.json"
    if ! (cd "$cache" && timeout "$npm_timeout" npm install --ignore-scripts --no-audit \
              --no-fund --fetch-retries=1 --fetch-timeout=30000 \
              "$bun_spec" "@shumai/shumai@$shumai_version") > "$cache/npm.log" 2>&1; then
        tail -n 15 "$cache/npm.log" | sed 's/^/  npm: /' >&2
        return 1
    fi
    echo "$key" > "$cache/installed"
}

# One installer at a time per cache (make -j may start the test and a bench together).
exec 9> "$cache/.lock"
if command -v flock >/dev/null 2>&1; then
    flock -w "$npm_timeout" 9 || die "timed out waiting for the lock on $cache"
fi
if [ "$(cat "$cache/installed" 2>/dev/null)" != "$key" ] || ! find_bun >/dev/null ||
   [ ! -f "$shumai_src/network/tensor.ts" ]; then
    install || skip "npm could not install $bun_spec and @shumai/shumai@$shumai_version (registry unreachable?)"
fi
bun=$(find_bun) || skip "no runnable bun binary among $cache/node_modules/@oven/bun-*"
exec 9>&-

got=$(sed -n 's/^ *"version": *"\([^"]*\)".*/\1/p' "$cache/node_modules/@shumai/shumai/package.json" | head -n 1)
[ "$got" = "$shumai_version" ] || die "cache holds @shumai/shumai $got, not $shumai_version"

rm -rf "$scratch"
mkdir -p "$scratch/shumai/network" || die "cannot create $scratch"
for m in io tensor stats util module optim; do
    if ! mkdir -p "$scratch/shumai/$m" || ! cp "$here/standins/$m/index.ts" "$scratch/shumai/$m/"; then
        die "cannot copy stand-in $m"
    fi
done
for f in network/tensor.ts network/model.ts io/encode.ts; do
    cp "$shumai_src/$f" "$scratch/shumai/$f" || die "Shumai's $f is missing from the package"
done
cp "$here/client.ts" "$scratch/" || die "cannot copy client.ts"
ln -sf "$bun" "$scratch/bun"
say "bun $("$bun" --version), @shumai/shumai $got, in $scratch"
