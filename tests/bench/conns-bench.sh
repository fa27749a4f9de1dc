#!/bin/bash
# conns-bench.sh BUILDDIR: `GET /v1/connections` with many live flows (issue 13 "Scale
# benchmarks": 10 000 live flows, goal <= 50 ms), a section of `make bench` (also `make
# bench-conns` alone). Not part of `make check`: nothing here fails on a figure.
#
# katana (BENCH_CONNS_WORKERS, 2 workers) serves one clear VLESS node on loopback; tests/bench/
# flows.py opens BENCH_API_FLOWS (10 000) real flows through it to its own loopback sink and holds
# them, BENCH_API_PER_CONN (100) Mux.Cool sessions per client connection (1: one plain VLESS
# request each), so that katana needs N + N / 100 descriptors, not 2 N (a container's hard limit
# of 20 000 fits). Then BENCH_API_GETS (20) sequential `curl` GETs of /v1/connections: the median
# and the slowest (p99 of 20 is the slowest) total time, and the body size. Raises `ulimit -n`;
# with a lower hard limit it opens what fits.
# Environment: BENCH_API_FLOWS, BENCH_API_PER_CONN, BENCH_API_GETS, BENCH_CONNS_WORKERS,
# KATANA_BIN.
set -euo pipefail

BUILDDIR=${1:-.}
HERE=$(cd "$(dirname "$0")" && pwd)
KATEST=(python3 "$HERE/../integration/katest.py")
KATANA=${KATANA_BIN:-$BUILDDIR/katana}
FLOWS=${BENCH_API_FLOWS:-10000}
PER_CONN=${BENCH_API_PER_CONN:-100}
GETS=${BENCH_API_GETS:-20}
WORKERS=${BENCH_CONNS_WORKERS:-2}
UUID=7f0c4a52-1d3e-4c65-9a8b-2e61f0d3c4b7
. "$HERE/bench-lib.sh"
bench_init conns-bench
cpu_ticks() { awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$1/stat"; }

[ -x "$KATANA" ] || { echo "conns-bench: no katana at $KATANA" >&2; exit 1; }

echo "== GET /v1/connections with many live flows (issue 13) =="
want=$((FLOWS + FLOWS / PER_CONN + 512))
ulimit -n "$want" 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
have=$(ulimit -n)
if [ "$have" != unlimited ] && [ "$have" -lt "$want" ]; then
    FLOWS=$(((have - 512) * PER_CONN / (PER_CONN + 1)))
    echo "(descriptor limit $have: $FLOWS flows instead of ${BENCH_API_FLOWS:-10000})"
fi

read -r PORT API <<<"$("${KATEST[@]}" freeport --count 2)"
"${KATEST[@]}" mkconfig --out "$T/katana.json" --protocol vless --port "$PORT" --api-port "$API" \
    --user "1:$UUID" --workers "$WORKERS" --log-level warn >/dev/null
bg "$T/katana.log" "$KATANA" run -c "$T/katana.json"
KP=$BG
"${KATEST[@]}" wait-port --port "$PORT" --timeout 60 >/dev/null
"${KATEST[@]}" wait-port --port "$API" --timeout 60 >/dev/null

bg "$T/flows.log" python3 "$HERE/flows.py" hold --port "$PORT" --uuid "$UUID" --count "$FLOWS" \
    --per-conn "$PER_CONN" --ready-file "$T/flows.ready"
for _ in $(seq 3000); do [ -e "$T/flows.ready" ] && break; sleep 0.1; done
[ -e "$T/flows.ready" ] || { echo "conns-bench: the flows were not opened in 300 s" >&2; exit 1; }
echo "flows opened: $(cat "$T/flows.ready")"

listed=$(curl -s --max-time 30 "http://127.0.0.1:$API/v1/connections" |
    python3 -c 'import json, sys; print(len(json.load(sys.stdin)["flows"]))')
rss=$(awk '$1 == "VmRSS:" { print $2 }' "/proc/$KP/status")
: >"$T/times"
c0=$(cpu_ticks "$KP")
for ((i = 0; i < GETS; i++)); do
    curl -s -o /dev/null --max-time 30 -w '%{time_total} %{size_download}\n' \
        "http://127.0.0.1:$API/v1/connections" >>"$T/times"
done
c1=$(cpu_ticks "$KP")
sort -g "$T/times" | awk -v n="$listed" -v rss="$rss" -v cpu=$((c1 - c0)) -v hz="$(getconf CLK_TCK)" '
    { t[NR] = $1 * 1000; size = $2 }
    END {
        med = (NR % 2) ? t[(NR + 1) / 2] : (t[NR / 2] + t[NR / 2 + 1]) / 2
        p99 = t[int(NR * 0.99 + 0.999)]
        printf "%d flows listed, body %.1f MiB, katana RSS %.0f MiB\n", n, size / 1048576, rss / 1024
        c = cpu * 1000 / hz / NR
        printf "GET /v1/connections over %d requests: median %.1f ms, p99 %.1f ms, katana CPU %.1f ms per request   goal: <= 50 ms at 10 000 flows (median %s, CPU %s)\n",
            NR, med, p99, c, med <= 50 ? "met" : "missed", c <= 50 ? "met" : "missed"
    }'
echo "(load average: $(cut -d' ' -f1-3 /proc/loadavg))"
