#!/bin/bash
# max_connections (issue 15): with one worker and a cap of 4, six held pre-auth connections
# leave katana holding exactly 4 client sockets (the others wait in the accept queue, none is
# accepted and closed); a real client beyond the cap waits, and is served once the held
# connections leave. The pause and the resume take one log line each.
. "$(dirname "$0")/lib.sh"
kt_need ss-local
needs_katana "max_connections" || exit 77

CIPHER=aes-128-gcm
U1=$(kt_uuid)
echo_start
kt_ports 1; PORT=${PORTS[0]}
mkconfig "$T/config.json" "$PORT" "$CIPHER" --user "1:$U1" --workers 1 --max-connections 4
srv_start "$T/config.json"
cl_start c "$CIPHER" "$U1" "$PORT"
check "a client is served below the cap" tcp_rt "$CL_PORT" ok --bytes 65536

# client connections katana holds on the node's port
tcp_sockets() { "${KT_PY[@]}" sockets --pid "$SRV_PID" --port "$PORT"; }
for ((i = 0; i < 50; i++)); do [ "$(tcp_sockets)" = 0 ] && break; sleep 0.1; done
check "no client connection left before the test" test "$(tcp_sockets)" = 0
MARK=$(stat -c %s "$SRV_LOG")

kt_bg hold "${KT_PY[@]}" hold --port "$PORT" --conns 6 --bytes 10 --ready-file "$T/hold.ready" \
    --release-file "$T/hold.release" --max-secs 60
HOLD_PID=$BG_PID
kt_wait_file "$T/hold.ready" 10 || { fail "held connections not opened"; exit 1; }
check "all 6 held connections completed their handshake" grep -q "connected 6 failed 0" "$T/hold.ready"
sleep 0.5
HELD=$(tcp_sockets)
check "katana accepted 4 of 6 connections ($HELD)" test "$HELD" = 4

kt_bg late "${KT_PY[@]}" tcp --socks "$CL_PORT" --dest-port "$ECHO_PORT" --bytes 65536 \
    --timeout 15 --seed late --label late
LATE_PID=$BG_PID
sleep 1.5
check "a client beyond the cap waits" kt_alive "$LATE_PID"
HELD=$(tcp_sockets)
check "still 4 client connections at the cap ($HELD)" test "$HELD" = 4
check "daemon still runs" srv_alive

touch "$T/hold.release"
kt_wait_exit "$HOLD_PID" 10 || true
stream_wait late "$LATE_PID" 5 "the waiting client is served once the held connections left"
sleep 1
tail -c +"$((MARK + 1))" "$SRV_LOG" >"$T/episode.txt"
cat "$T/episode.txt"
check "one line when accepting paused at the cap" \
    test "$(grep -c "reached its share of max_connections (4): accepting paused" "$T/episode.txt")" = 1
check "one line when accepting resumed" \
    test "$(grep -c "accepting resumed" "$T/episode.txt")" = 1
check "no other line for the episode" test "$(grep -c . "$T/episode.txt")" = 2
check "a client is served after the episode" tcp_rt "$CL_PORT" ok --bytes 65536
srv_stop
check "daemon exits 0 on SIGTERM" test "$SRV_RC" = 0
kt_finish
