#!/bin/bash
# One connection budget for every worker (issue 33): two workers, max_connections 8. Seven
# authenticated relays (real ss-local) stay open, so however SO_REUSEPORT spread them one worker
# holds at least four, what a per-worker share of 8 / 2 allowed. While the process is under its
# budget every new client must be served, whichever worker the kernel hands it: twenty clients one
# after the other, each with a round trip (with per-worker shares, each had about one chance in
# two to wait in a full worker's accept queue until the relays left). Then an eighth relay fills
# the budget and a client waits until one leaves.
. "$(dirname "$0")/lib.sh"
kt_need ss-local
needs_katana "max_connections" || exit 77
LOAD=(python3 "$KT_DIR/apiload.py")

CIPHER=aes-128-gcm
U1=$(kt_uuid)
echo_start
kt_ports 1; PORT=${PORTS[0]}
mkconfig "$T/config.json" "$PORT" "$CIPHER" --user "1:$U1" --workers 2 --max-connections 8
srv_start "$T/config.json"
cl_start c "$CIPHER" "$U1" "$PORT"
tcp_sockets() { "${KT_PY[@]}" sockets --pid "$SRV_PID" --port "$PORT"; }

kt_bg relays "${LOAD[@]}" relays --socks "$CL_PORT" --dest-port "$ECHO_PORT" --count 7 \
    --ready-file "$T/relays.ready"
RELAYS_PID=$BG_PID
kt_wait_file "$T/relays.ready" 20 || { fail "relays: no summary"; cat "$T/relays.log"; exit 1; }
check "7 relays open, each with a verified round trip" grep -q '"failed": 0, "open": 7' "$T/relays.ready"
sleep 0.3
check "katana holds the 7 relays ($(tcp_sockets))" test "$(tcp_sockets)" = 7

served=0
for i in $(seq 1 20); do
    if tcp_rt "$CL_PORT" ok --bytes 4096 --seed "c$i" --timeout 8 >"$T/c$i.out" 2>&1; then
        served=$((served + 1))
    else
        cat "$T/c$i.out"
    fi
done
check "under the budget, 20 of 20 new clients served ($served)" test "$served" = 20
check "the 7 relays still held ($(tcp_sockets))" test "$(tcp_sockets)" = 7

kt_bg eighth "${LOAD[@]}" relays --socks "$CL_PORT" --dest-port "$ECHO_PORT" --count 1 \
    --ready-file "$T/eighth.ready"
EIGHTH_PID=$BG_PID
kt_wait_file "$T/eighth.ready" 20 || { fail "eighth: no summary"; exit 1; }
sleep 0.3
check "at the budget: 8 client connections ($(tcp_sockets))" test "$(tcp_sockets)" = 8
kt_bg late "${KT_PY[@]}" tcp --socks "$CL_PORT" --dest-port "$ECHO_PORT" --bytes 4096 \
    --timeout 15 --seed late --label late
LATE_PID=$BG_PID
sleep 1.5
check "a client beyond the budget waits" kt_alive "$LATE_PID"
check "still 8 client connections ($(tcp_sockets))" test "$(tcp_sockets)" = 8
kill -TERM "$EIGHTH_PID" 2>/dev/null || true
kt_wait_exit "$EIGHTH_PID" 10 || true
stream_wait late "$LATE_PID" 5 "the waiting client is served once a relay left"
check "a log line names the full budget" grep -q "max_connections reached (8 connections, every one authenticated)" "$SRV_LOG"
kill -TERM "$RELAYS_PID" 2>/dev/null || true
srv_stop
check "daemon exits 0 on SIGTERM" test "$SRV_RC" = 0
kt_finish
