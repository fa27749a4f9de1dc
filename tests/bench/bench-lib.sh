# shellcheck shell=bash
# bench-lib.sh: what the benchmark scripts share, sourced after `set -euo pipefail`.
# bench_init NAME: T, a temporary directory ($TMPDIR/katana-NAME.XXXXXX, kept with
# BENCH_KEEP=1); every process started with bg is ended at exit (TERM, then KILL).
# bg LOG CMD...: CMD in the background, its output appended to LOG, its pid in BG.
# note TEXT: a comment line on stderr.
bench_init() {
    T=$(mktemp -d "${TMPDIR:-/tmp}/katana-$1.XXXXXX")
    PIDS=()
    trap bench_cleanup EXIT
    trap 'exit 130' INT TERM
}
bench_cleanup() {
    local p
    for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    sleep 0.3
    for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
    [ "${BENCH_KEEP:-0}" = 1 ] && echo "kept $T" >&2 || rm -rf "$T"
}
bg() { local log=$1; shift; ( exec "$@" ) >>"$log" 2>&1 & BG=$!; PIDS+=("$BG"); }
note() { echo "# $*" >&2; }
