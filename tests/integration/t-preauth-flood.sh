#!/bin/bash
# Connections that never authenticate (issue 33): two workers, max_connections 100 (up to 25
# per worker before authentication), 70 authenticated relays (real ss-local) open. A flood of
# 1 000 connections that send nothing then comes (the issue's 10 000 are in
# tests/bench/preauth-bench.sh). Checked:
#   - katana never holds more than its budget of client connections once the flood is in
#     (a new connection takes the place of the oldest one not authenticated);
#   - a real client is served during the flood, and the 70 relays all still answer;
#   - under that pressure the silent connections are closed after 5 s, not 60: within 20 s
#     katana holds the 70 relays and fewer than 25 of them (pressure ends below half of each
#     worker's share of 25; the rest keep the usual 60 s).
. "$(dirname "$0")/lib.sh"
kt_need ss-local
needs_katana "pre-auth bound" || exit 77
LOAD=(python3 "$KT_DIR/apiload.py")
RELAYS=70
FLOOD=1000

CIPHER=aes-128-gcm
U1=$(kt_uuid)
echo_start
kt_ports 1; PORT=${PORTS[0]}
mkconfig "$T/config.json" "$PORT" "$CIPHER" --user "1:$U1" --workers 2 --max-connections 100
srv_start "$T/config.json"
cl_start c "$CIPHER" "$U1" "$PORT"
tcp_sockets() { "${KT_PY[@]}" sockets --pid "$SRV_PID" --port "$PORT"; }

kt_bg relays "${LOAD[@]}" relays --socks "$CL_PORT" --dest-port "$ECHO_PORT" --count "$RELAYS" \
    --ready-file "$T/relays.ready" --check-file "$T/relays.check"
RELAYS_PID=$BG_PID
kt_wait_file "$T/relays.ready" 30 || { fail "relays: no summary"; cat "$T/relays.log"; exit 1; }
check "$RELAYS relays open, each with a verified round trip" \
    grep -q "\"failed\": 0, \"open\": $RELAYS" "$T/relays.ready"

kt_bg flood "${KT_PY[@]}" hold --port "$PORT" --conns "$FLOOD" --bytes 0 \
    --ready-file "$T/flood.ready" --release-file "$T/flood.release" --max-secs 60
FLOOD_PID=$BG_PID
kt_wait_file "$T/flood.ready" 30 || { fail "flood: connections not opened"; exit 1; }
kt_log "flood: $(cat "$T/flood.ready")"
sleep 0.5
HELD=$(tcp_sockets)
check "during the flood katana holds at most its budget ($HELD <= 100)" test "$HELD" -le 100
check "a real client is served during the flood" tcp_rt "$CL_PORT" ok --bytes 65536 --timeout 15
: >"$T/relays.check"
kt_wait_file "$T/relays.check.out" 30 || { fail "relays: no check"; exit 1; }
cat "$T/relays.check.out"
check "the $RELAYS relays all still answer" grep -q "\"alive\": $RELAYS, \"dead\": 0" "$T/relays.check.out"

back=no
for ((i = 0; i < 200; i++)); do
    [ "$(tcp_sockets)" -lt $((RELAYS + 25)) ] && { back=yes; break; }
    sleep 0.1
done
check "under pressure the silent connections are closed within 20 s ($(tcp_sockets) client connections left)" test "$back" = yes
check "a real client is served after the flood" tcp_rt "$CL_PORT" ok --bytes 65536
check "no log line per connection (log has $(grep -c . "$SRV_LOG") lines)" test "$(grep -c . "$SRV_LOG")" -lt 20
touch "$T/flood.release"
kt_wait_exit "$FLOOD_PID" 10 || true
kill -TERM "$RELAYS_PID" 2>/dev/null || true
srv_stop
check "daemon exits 0 on SIGTERM" test "$SRV_RC" = 0
kt_finish
