#!/bin/bash
# max_connections (issues 15, 33): with one worker and a cap of 4, four authenticated relays
# (real ss-local) fill the budget: katana holds exactly 4 client sockets, a fifth real client
# waits in the accept queue (none is accepted and closed), and is served once a relay leaves.
# The pause and the resume take one log line each; the pause names the budget as full of
# authenticated connections (with connections before authentication, room would be made by
# closing the oldest of them: t-preauth-flood.sh).
. "$(dirname "$0")/lib.sh"
kt_need ss-local
needs_katana "max_connections" || exit 77
LOAD=(python3 "$KT_DIR/apiload.py")

CIPHER=aes-128-gcm
U1=$(kt_uuid)
echo_start
kt_ports 1; PORT=${PORTS[0]}
mkconfig "$T/config.json" "$PORT" "$CIPHER" --user "1:$U1" --workers 1 --max-connections 4
srv_start "$T/config.json"
check "the budget is logged at start" grep -q \
    "up to 4 TCP connections, shared by 1 workers (max_connections); up to 2 per worker before authentication" \
    "$SRV_LOG"
cl_start c "$CIPHER" "$U1" "$PORT"
check "a client is served below the cap" tcp_rt "$CL_PORT" ok --bytes 65536

# client connections katana holds on the node's port
tcp_sockets() { "${KT_PY[@]}" sockets --pid "$SRV_PID" --port "$PORT"; }
for ((i = 0; i < 50; i++)); do [ "$(tcp_sockets)" = 0 ] && break; sleep 0.1; done
check "no client connection left before the test" test "$(tcp_sockets)" = 0
MARK=$(stat -c %s "$SRV_LOG")

kt_bg relays "${LOAD[@]}" relays --socks "$CL_PORT" --dest-port "$ECHO_PORT" --count 4 \
    --ready-file "$T/relays.ready"
RELAYS_PID=$BG_PID
kt_wait_file "$T/relays.ready" 20 || { fail "relays: no summary"; cat "$T/relays.log"; exit 1; }
check "4 relays open, each with a verified round trip" grep -q '"failed": 0, "open": 4' "$T/relays.ready"
sleep 0.3
HELD=$(tcp_sockets)
check "katana holds the 4 relays' client connections ($HELD)" test "$HELD" = 4

kt_bg late "${KT_PY[@]}" tcp --socks "$CL_PORT" --dest-port "$ECHO_PORT" --bytes 65536 \
    --timeout 15 --seed late --label late
LATE_PID=$BG_PID
sleep 1.5
check "a client beyond the cap waits" kt_alive "$LATE_PID"
HELD=$(tcp_sockets)
check "still 4 client connections at the cap ($HELD)" test "$HELD" = 4
check "daemon still runs" srv_alive

kill -TERM "$RELAYS_PID" 2>/dev/null || true
kt_wait_exit "$RELAYS_PID" 10 || true
stream_wait late "$LATE_PID" 5 "the waiting client is served once the relays left"
sleep 1
tail -c +"$((MARK + 1))" "$SRV_LOG" >"$T/episode.txt"
cat "$T/episode.txt"
check "one line when accepting paused at the cap" \
    test "$(grep -c "max_connections reached (4 connections, every one authenticated): accepting paused" "$T/episode.txt")" = 1
check "one line when accepting resumed" \
    test "$(grep -c "accepting resumed" "$T/episode.txt")" = 1
check "no other line for the episode" test "$(grep -c . "$T/episode.txt")" = 2
check "a client is served after the episode" tcp_rt "$CL_PORT" ok --bytes 65536
srv_stop
check "daemon exits 0 on SIGTERM" test "$SRV_RC" = 0
kt_finish
