#!/bin/bash
# fuzz.sh SRCDIR FUZZDIR: `make fuzz` (issue 8, "Tests"). Runs every harness tests/fuzz/fuzz_*.c
# under clang's libFuzzer (with ASan+UBSan) for FUZZ_SECONDS seconds each, starting from its seed
# corpus tests/fuzz/<harness>.in (read only; new inputs go to FUZZDIR/corpus/<harness>).
#  - FUZZDIR is a separate build tree configured with CC=clang --enable-fuzzers, which builds the
#    <harness>_libfuzzer programs of the *.am fragments; a harness without one is an error.
#  - Without clang (or without its libFuzzer runtime) it says so and exits 0: `make check` still
#    replays every corpus with the plain build.
#  - A crash, leak, UBSan report or timeout fails the run (exit 1) and names the reproducer in
#    FUZZDIR/artifacts/; add it to the harness's .in directory once fixed.
# Knobs: FUZZ_SECONDS (default 60), FUZZ_CC (default clang), FUZZ_HARNESSES (default: all),
# FUZZ_REQUIRED (non-empty: a missing clang or libFuzzer runtime fails instead of skipping),
# FUZZ_SEED (libFuzzer's -seed: the same mutations on every run; default: a new seed each run).
set -euo pipefail
SRC=$(cd "$1" && pwd)
DIR=$2
SECS=${FUZZ_SECONDS:-60}
CLANG=${FUZZ_CC:-clang}
SEED=()
case ${FUZZ_SEED:-} in
'') ;;
*[!0-9]*) echo "make fuzz: FUZZ_SEED must be a number, not '$FUZZ_SEED'" >&2; exit 2 ;;
*) SEED=(-seed="$FUZZ_SEED") ;;
esac

case $SECS in
'' | *[!0-9]* | 0) echo "make fuzz: FUZZ_SECONDS must be a positive number of seconds, not '$SECS'" >&2; exit 2 ;;
esac

skip() {
    if [ -n "${FUZZ_REQUIRED:-}" ]; then # tests/run-all.sh: the fuzz build must not rot
        echo "make fuzz: FAIL: $1 (FUZZ_REQUIRED is set); tests/setup-deps.sh installs clang" \
            "and its libFuzzer runtime (libclang-rt-14-dev)" >&2
        exit 1
    fi
    echo "make fuzz: SKIP: $1; tests/setup-deps.sh installs clang and libclang-rt-14-dev." \
        "The corpora are still replayed by 'make check'."
    exit 0
}
command -v "$CLANG" >/dev/null 2>&1 || skip "$CLANG not found"
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
probe=$DIR/probe.c
echo 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { (void)d; return (int)(n & 0); }' >"$probe"
"$CLANG" -fsanitize=fuzzer,address,undefined -o "$DIR/probe" "$probe" >/dev/null 2>&1 ||
    skip "$CLANG cannot link -fsanitize=fuzzer (no libFuzzer runtime)"
rm -f "$probe" "$DIR/probe"

harnesses=()
if [ -n "${FUZZ_HARNESSES:-}" ]; then
    read -r -a harnesses <<<"$FUZZ_HARNESSES"
else
    for c in "$SRC"/tests/fuzz/fuzz_*.c; do
        harnesses+=("$(basename "$c" .c)")
    done
fi
[ ${#harnesses[@]} -gt 0 ] || { echo "make fuzz: no harness in $SRC/tests/fuzz" >&2; exit 1; }

cd "$DIR"
# Configure once; redo it when the source tree was regenerated (autoreconf), as the
# maintainer-mode rebuild rules are off by default. A different FUZZ_CC needs `make distclean`.
if [ -f config.status ] && [ "$SRC/configure" -nt config.status ]; then
    rm -f Makefile
elif [ -f Makefile ] && [ "$SRC/Makefile.in" -nt Makefile ]; then
    ./config.status >/dev/null
fi
if [ ! -f Makefile ]; then
    [ ! -f "$SRC/config.status" ] ||
        { echo "make fuzz: $SRC is configured in place; fuzz-build needs a clean source tree" \
            "(build in a subdirectory, e.g. build/)" >&2; exit 1; }
    echo "make fuzz: configuring $DIR (CC=$CLANG --enable-fuzzers)"
    "$SRC/configure" -q CC="$CLANG" --enable-fuzzers >configure.out 2>&1 ||
        { cat configure.out; echo "make fuzz: configure failed" >&2; exit 1; }
fi
targets=()
for h in "${harnesses[@]}"; do
    if ! make -n "tests/fuzz/${h}_libfuzzer" >/dev/null 2>&1; then
        echo "make fuzz: FAIL: harness $h has no libFuzzer build: add tests/fuzz/${h}_libfuzzer" \
            "under 'if ENABLE_FUZZERS' in its *.am fragment" >&2
        exit 1
    fi
    targets+=("tests/fuzz/${h}_libfuzzer")
done
echo "make fuzz: building ${#targets[@]} libFuzzer harnesses in $DIR"
make -j2 "${targets[@]}" >build.out 2>&1 || { tail -40 build.out; echo "make fuzz: build failed" >&2; exit 1; }

mkdir -p artifacts logs
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export KATANA_TOP_SRCDIR=$SRC
failed=()
printf '%-20s %10s %8s %8s  %s\n' harness runs cov inputs result
for h in "${harnesses[@]}"; do
    mkdir -p "corpus/$h"
    log=logs/$h.log
    rc=0
    "./tests/fuzz/${h}_libfuzzer" -max_total_time="$SECS" -timeout=25 -print_final_stats=1 \
        "${SEED[@]}" -artifact_prefix="$DIR/artifacts/$h-" "corpus/$h" "$SRC/tests/fuzz/$h.in" >"$log" 2>&1 ||
        rc=$?
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
    units=$(find "corpus/$h" "$SRC/tests/fuzz/$h.in" -type f | wc -l)
    if [ "$rc" -eq 0 ]; then
        result=ok
    else
        result="FAIL (exit $rc, see $DIR/$log)"
        failed+=("$h")
    fi
    printf '%-20s %10s %8s %8s  %s\n' "$h" "${runs:-?}" "${cov:-?}" "$units" "$result"
done
if [ ${#failed[@]} -gt 0 ]; then
    echo "make fuzz: FAIL: ${failed[*]}; reproducers:" >&2
    ls -1 "$DIR"/artifacts/ >&2 || true
    echo "replay one with: $DIR/tests/fuzz/<harness>_libfuzzer <file>" >&2
    exit 1
fi
echo "make fuzz: ${#harnesses[@]} harnesses, ${SECS} s each, no crash"
