#!/bin/sh
# fuzz.sh - builds and runs the libFuzzer targets; `make fuzz` calls it from the build tree
# (tests/fuzz/README.md says what each target feeds and checks).
#
#   fuzz.sh build       the instrumented archives (tests/fuzz/lib{proto,tfx,tfd}.a) and every
#                       target (tests/fuzz/fuzz_NAME), each rebuilt only when a source is newer
#   fuzz.sh run NAME    runs fuzz_NAME (or fuzz-run-NAME) for FUZZ_SECONDS on its seeds,
#                       tests/fuzz/corpus/NAME, and its work corpus, tests/fuzz/work/NAME;
#                       prints the exec count, or the end of the report and exits 1 on a
#                       crash, leak, timeout or out-of-memory (the input is kept in tests/fuzz/)
#   fuzz.sh clean       removes what build and run made
#
# The Makefile passes FUZZ_CC (clang), FUZZ_SECONDS (60), FUZZ_TARGETS, FUZZ_SRCDIR,
# FUZZ_BUILDDIR, FUZZ_SYSCONFDIR, FUZZ_CFLAGS and FUZZ_LIBS (cJSON, inih, UCX), FUZZ_WARN (the
# warning flags, for the harnesses only) and the layers' source lists FUZZ_PROTO, FUZZ_TFX,
# FUZZ_TFD (headers included, for the rebuild check). Runs in the build directory.
set -eu

cc=${FUZZ_CC:-clang}
seconds=${FUZZ_SECONDS:-60}
src=$FUZZ_SRCDIR
out=tests/fuzz
san="-g -O1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all"
cppflags="-I$src -I$FUZZ_BUILDDIR -iquote $src/proto -DTFD_SYSCONFDIR=\"$FUZZ_SYSCONFDIR\" $FUZZ_CFLAGS"

say() { printf 'fuzz: %s\n' "$*" >&2; }

# stale TARGET FILE...: true if TARGET is missing or older than any FILE.
stale() {
    stale_t=$1
    shift
    [ -e "$stale_t" ] || return 0
    for stale_f in "$@"; do
        [ "$stale_f" -nt "$stale_t" ] && return 0
    done
    return 1
}

# in_src LIST: LIST's paths under the source tree.
in_src() {
    for f in $1; do printf '%s ' "$src/$f"; done
}

# c_files LIST: LIST's .c files, under the source tree.
c_files() {
    for f in $1; do
        case $f in *.c) printf '%s ' "$src/$f" ;; esac
    done
}

# archive NAME LIST: tests/fuzz/libNAME.a from LIST's .c files, instrumented for coverage;
# rebuilt when config.h or any file of any layer (headers too) is newer.
archive() {
    a=$out/lib$1.a
    # shellcheck disable=SC2046
    stale "$a" "$FUZZ_BUILDDIR/config.h" $(in_src "$FUZZ_PROTO $FUZZ_TFX $FUZZ_TFD") || return 0
    say "compiling $1 ($cc, ASan, UBSan, coverage)"
    rm -rf "$a.d"
    mkdir -p "$a.d"
    # shellcheck disable=SC2046,SC2086
    (cd "$a.d" && $cc $san -fsanitize=fuzzer-no-link $cppflags -c $(c_files "$2"))
    rm -f "$a"
    ar rcs "$a" "$a.d"/*.o
    rm -rf "$a.d"
}

build() {
    mkdir -p "$out"
    printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n);\n%s\n' \
        'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { return d && n; }' \
        > "$out/probe.c"
    # shellcheck disable=SC2086
    if ! $cc $san -fsanitize=fuzzer "$out/probe.c" -o "$out/probe" 2> "$out/probe.log"; then
        cat "$out/probe.log" >&2
        say "$cc cannot build a libFuzzer target: install clang and libclang-rt-14-dev" \
            "(scripts/tf-dev deps)"
        exit 1
    fi
    rm -f "$out/probe.c" "$out/probe" "$out/probe.log"
    # The three layers at once (each its own directory: daemon/ and proto/ both have upgrade.c).
    archive proto "$FUZZ_PROTO" &
    p1=$!
    archive tfx "$FUZZ_TFX" &
    p2=$!
    archive tfd "$FUZZ_TFD" &
    p3=$!
    rc=0
    wait $p1 || rc=1
    wait $p2 || rc=1
    wait $p3 || rc=1
    [ $rc -eq 0 ] || exit 1
    for t in $FUZZ_TARGETS; do
        case $t in
        request) libs="$out/libtfd.a $out/libtfx.a $out/libproto.a" ;;
        *) libs="$out/libproto.a" ;;
        esac
        # shellcheck disable=SC2086
        stale "$out/fuzz_$t" "$src/tests/fuzz/fuzz_$t.c" $libs || continue
        say "linking fuzz_$t"
        # shellcheck disable=SC2086
        $cc $san ${FUZZ_WARN:-} -fsanitize=fuzzer $cppflags "$src/tests/fuzz/fuzz_$t.c" $libs \
            $FUZZ_LIBS -lm -pthread -o "$out/fuzz_$t"
    done
}

run() {
    t=${1#fuzz-run-}
    t=${t#fuzz_}
    bin=$out/fuzz_$t
    [ -x "$bin" ] || { say "no $bin: run 'make fuzz-build' first"; exit 1; }
    mkdir -p "$out/work/$t"
    dict=
    [ -f "$src/tests/fuzz/$t.dict" ] && dict=-dict=$src/tests/fuzz/$t.dict
    maxlen=4096
    [ "$t" = request ] && maxlen=16384
    log=$out/$t.log
    # shellcheck disable=SC2086
    if ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1} \
        "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=$maxlen \
        -print_final_stats=1 -artifact_prefix="$out/$t-" $dict \
        "$out/work/$t" "$src/tests/fuzz/corpus/$t" > "$log" 2>&1; then
        runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
        cov=$(sed -n 's/^#[0-9]*[[:space:]]*DONE[[:space:]]*cov: *\([0-9]*\).*/\1/p' "$log")
        echo "fuzz $t: $runs runs in $seconds s, coverage $cov edges, no failure"
    else
        tail -n 60 "$log"
        echo "fuzz $t: FAILED (log: $log; input: $out/$t-*)"
        exit 1
    fi
}

case ${1:-} in
build) build ;;
run) run "${2:?usage: fuzz.sh run NAME}" ;;
clean)
    for t in $FUZZ_TARGETS; do rm -f "$out/fuzz_$t" "$out/$t.log"; done
    rm -rf "$out"/lib*.a "$out"/lib*.a.d "$out/work"
    ;;
*)
    sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'
    exit 1
    ;;
esac
