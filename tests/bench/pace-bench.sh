#!/bin/bash
# pace-bench.sh BUILDDIR: the cost of speed limits (issue 12 "Benchmark"), katana alone on
# loopback, client ss-tunnel (aes-128-gcm), load tests/bench/bulk.c, 1 worker:
#  - CPU s/GB of a bulk relay for an unlimited user (the pacer's fast path), for a user with a
#    limit it never reaches (100 Gbit/s: every read charged), and, when BENCH_BASE_BIN names a
#    katana built without the pacer (e.g. the commit before it), for that build: runs alternate,
#    BENCH_PACE_RUNS (3) each, the median is reported;
#  - CPU while a user is throttled at 1 Mbit/s with the sender always ready (BENCH_SECONDS):
#    percent of one core (goal: at most 1%, no busy loop).
# Environment: BENCH_SECONDS (10), BENCH_PACE_RUNS (3), BENCH_BASE_BIN, KATANA_BIN, BULK.
set -euo pipefail

BUILDDIR=${1:-.}
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bulk-judge.sh
. "$HERE/bulk-judge.sh"   # bulk_judged: a cut transfer is no figure
KATEST=(python3 "$HERE/../integration/katest.py")
KATANA=${KATANA_BIN:-$BUILDDIR/katana}
SECS=${BENCH_SECONDS:-10}
RUNS=${BENCH_PACE_RUNS:-3}
BASE=${BENCH_BASE_BIN:-}
CIPHER=aes-128-gcm
PASS=$(cat /proc/sys/kernel/random/uuid)
TCK=$(getconf CLK_TCK)
T=$(mktemp -d "${TMPDIR:-/tmp}/katana-pace-bench.XXXXXX")
PIDS=()
cleanup() {
    local p
    for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    sleep 0.3
    for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
    rm -rf "$T"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
bg() { local log=$1; shift; ( exec "$@" ) >>"$log" 2>&1 & BG=$!; PIDS+=("$BG"); }
note() { echo "# $*" >&2; }
cpu_secs() { awk -v t="$TCK" '{ sub(/^.*\) /, ""); printf "%.3f\n", ($12 + $13) / t }' "/proc/$1/stat"; }

command -v ss-tunnel >/dev/null || { echo "pace-bench: ss-tunnel is not installed" >&2; exit 1; }
[ -x "$KATANA" ] || { echo "pace-bench: no katana at $KATANA" >&2; exit 1; }
BULK=${BULK:-$BUILDDIR/tests/bench/bulk}
if [ ! -x "$BULK" ]; then BULK=$T/bulk; "${CC:-cc}" -O2 -o "$BULK" "$HERE/bulk.c"; fi

read -r SINK_PORT <<<"$("${KATEST[@]}" freeport)"
bg "$T/sink.out" "$BULK" sink "$SINK_PORT"
"${KATEST[@]}" wait-port --port "$SINK_PORT" >/dev/null

# start BIN MBPS: katana (node speed_limit MBPS, 0 = none) and ss-tunnel; sets SRV, TUN, TP
start() {
    local sp
    read -r sp TP <<<"$("${KATEST[@]}" freeport --count 2)"
    "${KATEST[@]}" mkconfig --out "$T/k.json" --port "$sp" --cipher "$CIPHER" --user "1:$PASS" \
        --workers 1 --log-level warn
    if [ "$2" != 0 ]; then
        python3 -c 'import json, sys
c = json.load(open(sys.argv[1])); c["nodes"][0]["speed_limit"] = int(sys.argv[2])
json.dump(c, open(sys.argv[1], "w"))' "$T/k.json" "$2"
    fi
    bg "$T/katana.log" "$1" run -c "$T/k.json"; SRV=$BG
    "${KATEST[@]}" wait-port --port "$sp" --timeout 10 >/dev/null
    bg "$T/tunnel.log" ss-tunnel -s 127.0.0.1 -p "$sp" -b 127.0.0.1 -l "$TP" \
        -L "127.0.0.1:$SINK_PORT" -k "$PASS" -m "$CIPHER"; TUN=$BG
    "${KATEST[@]}" wait-port --port "$TP" >/dev/null
}
stop() { kill -TERM "$TUN" "$SRV" 2>/dev/null || true; wait "$TUN" "$SRV" 2>/dev/null || true; }

# bulk BIN MBPS: CPU s/GB of one bulk run, or CUT (noted) for a transfer that was not whole
# (bulk-judge.sh): a failure, never a figure (issue 24)
bulk() {
    local c0 c1 ok=0
    start "$1" "$2"
    c0=$(cpu_secs "$SRV")
    bulk_judged "$T/sink.out" 100 "$BULK" send "$TP" "$SECS" || ok=$?
    c1=$(cpu_secs "$SRV")
    stop
    if [ "$ok" != 0 ]; then
        note "CUT: $BULK_CUT"
        echo CUT
        return
    fi
    awk -v b="$BULK_BYTES" -v c0="$c0" -v c1="$c1" 'BEGIN { printf "%.3f\n", (c1 - c0) / (b / 1e9) }'
}
# figure KIND: the median of KIND's runs, or "CUT (n of N runs)" when any was cut
figure() {
    local n
    n=$(tr ' ' '\n' <<<"${R[$1]}" | grep -c '^CUT$' || true)
    if [ "$n" -gt 0 ]; then echo "CUT ($n of $RUNS runs)"; return; fi
    median <<<"${R[$1]}"
}
median() { tr ' ' '\n' | grep -E '^[0-9.]+$' | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

declare -A R
KINDS="unlimited limited"
[ -n "$BASE" ] && KINDS="base $KINDS"
for ((i = 1; i <= RUNS; i++)); do
    for k in $KINDS; do
        case $k in
        base) v=$(bulk "$BASE" 0) ;;
        unlimited) v=$(bulk "$KATANA" 0) ;;
        limited) v=$(bulk "$KATANA" 100000) ;;
        esac
        note "run $i $k: $v CPU s/GB"
        R[$k]="${R[$k]:-} $v"
    done
done

# throttled at 1 Mbit/s: the sender always has data, katana holds it back
start "$KATANA" 1
"$BULK" send "$TP" "$((SECS + 2))" >/dev/null & SENDER=$!; PIDS+=("$SENDER")
sleep 2 # past the one-second burst
c0=$(cpu_secs "$SRV"); t0=$(date +%s.%N)
sleep "$SECS"
c1=$(cpu_secs "$SRV"); t1=$(date +%s.%N)
SENT_RC=0
wait "$SENDER" 2>/dev/null || SENT_RC=$?
stop
THROTTLED=$(awk -v a="$c0" -v b="$c1" -v s="$t0" -v e="$t1" 'BEGIN { printf "%.2f", (b - a) * 100 / (e - s) }')
[ "$SENT_RC" = 0 ] || { note "CUT: the throttled sender's write failed"; THROTTLED=CUT; }

echo
echo "speed limits: loopback, ss-tunnel $CIPHER, ${SECS}s bulk per run, median of $RUNS, 1 worker, $(nproc) CPUs"
printf '%-44s %10s\n' relay "CPU s/GB"
[ -n "$BASE" ] && printf '%-44s %10s\n' "no pacer ($BASE)" "$(figure base)"
printf '%-44s %10s\n' "unlimited user (fast path)" "$(figure unlimited)"
printf '%-44s %10s\n' "user limited to 100 Gbit/s (charged, no wait)" "$(figure limited)"
CUT_ANY=0
for k in $KINDS; do [[ " ${R[$k]} " != *" CUT "* ]] || CUT_ANY=1; done
[ "$THROTTLED" != CUT ] || CUT_ANY=1
if [ -n "$BASE" ] && [[ " ${R[unlimited]} ${R[base]} " != *" CUT "* ]]; then
    awk -v a="$(median <<<"${R[unlimited]}")" -v b="$(median <<<"${R[base]}")" \
        'BEGIN { printf "unlimited / no pacer: %.3f (goal: at most 1.02)\n", a / b }'
fi
echo "throttled at 1 Mbit/s, sender always ready: katana CPU ${THROTTLED}% of a core (goal: at most 1%)"
if [ "$CUT_ANY" = 1 ]; then   # issue 24: a cut transfer fails the benchmark
    echo "FAILED: a transfer was cut (CUT: no figure for it)"
    exit 1
fi
