#!/bin/bash
# admit-bench.sh BUILDDIR: admission under load (issue 33), a section of `make bench` (also
# `make bench-admit` alone). Not part of `make check`: nothing here fails on a figure.
#   1. Accept latency at the budget: two workers, max_connections BENCH_ADMIT_CAP (200),
#      BENCH_ADMIT_CAP - 1 authenticated relays (ss-local) held, so that one worker holds more
#      than half; then BENCH_ADMIT_CLIENTS (20) clients one after the other, each a SOCKS5
#      connect and one round trip: median and slowest ms (goal: each under a second).
#   2. Pre-auth flood: the same katana with BENCH_ADMIT_CAP / 2 relays held and
#      BENCH_ADMIT_FLOOD (10 000) connections that send nothing: the same clients' latency
#      (goal: served within a second), and how many client connections katana holds.
#   3. Memory after TLS connections close: Trojan over TLS, BENCH_ADMIT_TLS (5 000) connections
#      (handshake, request, one round trip) held then closed, BENCH_ADMIT_CYCLES (4) times: the
#      RSS with them open and 3 s after the close, per cycle (goal: back near the idle RSS, no
#      growth from cycle to cycle).
# Raises `ulimit -n`; with a lower hard limit it opens what fits.
# Environment: BENCH_ADMIT_CAP, BENCH_ADMIT_CLIENTS, BENCH_ADMIT_FLOOD, BENCH_ADMIT_TLS,
# BENCH_ADMIT_CYCLES, BENCH_ADMIT_SECTIONS ("latency memory": which to run), KATANA_BIN.
set -euo pipefail

BUILDDIR=${1:-.}
HERE=$(cd "$(dirname "$0")" && pwd)
KATEST=(python3 "$HERE/../integration/katest.py")
LOAD=(python3 "$HERE/admit_load.py")
APILOAD=(python3 "$HERE/../integration/apiload.py")
KATANA=${KATANA_BIN:-$BUILDDIR/katana}
CAP=${BENCH_ADMIT_CAP:-200}
CLIENTS=${BENCH_ADMIT_CLIENTS:-20}
FLOOD=${BENCH_ADMIT_FLOOD:-10000}
TLS_N=${BENCH_ADMIT_TLS:-5000}
CYCLES=${BENCH_ADMIT_CYCLES:-4}
SECTIONS=${BENCH_ADMIT_SECTIONS:-latency memory}
UUID=5d1c8e0a-3b7f-4e21-9c6d-7a0b2f4e8c13
CIPHER=aes-128-gcm
. "$HERE/bench-lib.sh"
bench_init admit-bench
wait_file() { for _ in $(seq $(($2 * 10))); do [ -e "$1" ] && return 0; sleep 0.1; done; return 1; }

[ -x "$KATANA" ] || { echo "admit-bench: no katana at $KATANA" >&2; exit 1; }
command -v ss-local >/dev/null || { echo "admit-bench: no ss-local, skipped"; exit 0; }

want=$((FLOOD + TLS_N + 2 * CAP + 1024))
ulimit -n "$want" 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
have=$(ulimit -n)
if [ "$have" != unlimited ] && [ "$have" -lt "$want" ]; then
    FLOOD=$(((have - 2 * CAP - 1024) / 2))
    TLS_N=$FLOOD
    echo "(descriptor limit $have: $FLOOD silent and $TLS_N TLS connections)"
fi

read -r ECHO PORT SOCKS TJ <<<"$("${KATEST[@]}" freeport --count 4)"
bg "$T/echo.log" "${KATEST[@]}" echo --port "$ECHO"
"${KATEST[@]}" wait-port --port "$ECHO" --timeout 10 >/dev/null

latency() {
echo "== admission at the budget and under a pre-auth flood (issue 33) =="
"${KATEST[@]}" mkconfig --out "$T/ss.json" --port "$PORT" --cipher "$CIPHER" --user "1:$UUID" \
    --workers 2 --max-connections "$CAP" --log-level warn >/dev/null
bg "$T/katana.log" "$KATANA" run -c "$T/ss.json"
KP=$BG
"${KATEST[@]}" wait-port --port "$PORT" --timeout 30 >/dev/null
bg "$T/ss-local.log" ss-local -s 127.0.0.1 -p "$PORT" -l "$SOCKS" -k "$UUID" -m "$CIPHER" -b 127.0.0.1
"${KATEST[@]}" wait-port --port "$SOCKS" --timeout 10 >/dev/null

bg "$T/relays.log" "${APILOAD[@]}" relays --socks "$SOCKS" --dest-port "$ECHO" --count $((CAP - 1)) \
    --ready-file "$T/relays.ready"
RP=$BG
wait_file "$T/relays.ready" 120 || { echo "admit-bench: relays not opened" >&2; exit 1; }
echo "at the budget ($(cat "$T/relays.ready") of max_connections $CAP, 2 workers):"
echo "  $("${LOAD[@]}" rtt --socks "$SOCKS" --dest-port "$ECHO" --count "$CLIENTS")"
kill -TERM "$RP" 2>/dev/null || true
sleep 1

bg "$T/relays2.log" "${APILOAD[@]}" relays --socks "$SOCKS" --dest-port "$ECHO" --count $((CAP / 2)) \
    --ready-file "$T/relays2.ready"
RP=$BG
wait_file "$T/relays2.ready" 120 || { echo "admit-bench: relays not opened" >&2; exit 1; }
bg "$T/flood.log" "${KATEST[@]}" hold --port "$PORT" --conns "$FLOOD" --bytes 0 \
    --ready-file "$T/flood.ready" --max-secs 600
FP=$BG
wait_file "$T/flood.ready" 300 || { echo "admit-bench: flood not opened" >&2; exit 1; }
held=$("${KATEST[@]}" sockets --pid "$KP" --port "$PORT")
echo "pre-auth flood ($(cat "$T/flood.ready") silent, $((CAP / 2)) relays, max_connections $CAP):"
echo "  $("${LOAD[@]}" rtt --socks "$SOCKS" --dest-port "$ECHO" --count "$CLIENTS"); katana holds $held client connections"
kill -TERM "$FP" "$RP" "$KP" 2>/dev/null || true
wait "$KP" 2>/dev/null || true
}

memory() {
echo "== memory after TLS connections close (issue 33) =="
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$T/node.key" \
    -out "$T/node.crt" -days 2 -subj "/CN=node.test" 2>/dev/null
"${KATEST[@]}" mkconfig --out "$T/tj.json" --port "$TJ" --protocol trojan --user "1:$UUID" \
    --cert-file "$T/node.crt" --key-file "$T/node.key" --workers 2 --log-level warn >/dev/null
bg "$T/katana-tj.log" "$KATANA" run -c "$T/tj.json"
KP=$BG
"${KATEST[@]}" wait-port --port "$TJ" --timeout 30 >/dev/null
sleep 1
"${LOAD[@]}" tls --port "$TJ" --password "$UUID" --dest-port "$ECHO" --count "$TLS_N" \
    --cycles "$CYCLES" --pid "$KP" ${BENCH_ADMIT_TRACE:+--trace} | sed 's/^/  /'
}

for s in $SECTIONS; do
    case $s in
        latency | memory) "$s" ;;
        *) echo "admit-bench: unknown section $s" >&2; exit 2 ;;
    esac
done
