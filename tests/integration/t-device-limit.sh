#!/bin/bash
# Device limit (issue 3): user 1 has device_limit 1. Client A (ss-local straight to katana)
# reaches the server from 127.0.0.1; client B (ss-local behind `katest relay`, whose outgoing
# side is bound to 127.0.0.2) from 127.0.0.2. While A holds a session, B's new sessions are
# refused (TCP), A's held connection is never cut and A may open more sessions from its IP.
# Once A's sessions are gone, B is served: the refusal was the limit's doing, not the relay's.
# Then the same over UDP: while B holds a TCP session, A's new UDP association is refused.
# User 2 (no limit) is served from both addresses at once.
. "$(dirname "$0")/lib.sh"
kt_need ss-local
[ "$KT_SERVER" = katana ] || skip_all "device limit needs katana"

CIPHER=aes-256-gcm
U1=$(kt_uuid); U2=$(kt_uuid)
echo_start
kt_ports 3
SRV=${PORTS[0]}; RELAY1=${PORTS[1]}; RELAY2=${PORTS[2]}
mkconfig "$T/config.json" "$SRV" "$CIPHER" --user "1:$U1:1" --user "2:$U2"
srv_start "$T/config.json"
PORT=$(srv_user_port 1)
kt_bg relay1 "${KT_PY[@]}" relay --port "$RELAY1" --to "$PORT" --source 127.0.0.2 \
    --ready-file "$T/relay1.ready"
kt_wait_file "$T/relay1.ready" 10 || { fail "relay did not start"; exit 1; }
kt_bg relay2 "${KT_PY[@]}" relay --port "$RELAY2" --to "$(srv_user_port 2)" --source 127.0.0.2 \
    --ready-file "$T/relay2.ready"
kt_wait_file "$T/relay2.ready" 10 || { fail "relay did not start"; exit 1; }

cl_start a "$CIPHER" "$U1" "$PORT"; CA=$CL_PORT
cl_start b "$CIPHER" "$U1" "$RELAY1"; CB=$CL_PORT

# A holds one paced connection (2 MiB at 256 KiB/s: about 8 s) for the whole middle part.
stream_bg held "$CA" 2097152 262144 ok
HELD=$STREAM_PID
check "second IP (127.0.0.2) refused while the first holds a session" \
    tcp_rt "$CB" refused --bytes 4096 --seed b1
check "first IP may open another session" tcp_rt "$CA" ok --bytes 65536 --seed a2
check "first IP: two sessions at once" tcp_rt "$CA" ok --bytes 65536 --conns 2 --seed a3
check "second IP refused again" tcp_rt "$CB" refused --bytes 4096 --seed b2
stream_wait held "$HELD" 30 "first IP's held connection never cut (all 2 MiB echoed)"

# A has no live session left: B gets in (sessions end when their connections do).
ok=1
for _ in $(seq 1 50); do
    if tcp_rt "$CB" ok --bytes 65536 --seed b3 >"$T/b3.out" 2>&1; then ok=0; break; fi
    sleep 0.2
done
cat "$T/b3.out"
check "second IP served once the first has no session" test "$ok" = 0

# The UDP side (a new association is a new session): B holds a TCP session, A's UDP is refused.
stream_bg heldb "$CB" 1048576 262144 ok
HELDB=$STREAM_PID
check "UDP from the first IP refused while the second holds a session" \
    udp_rt "$CA" refused --count 2
stream_wait heldb "$HELDB" 30 "second IP's held connection never cut"
ok=1
for _ in $(seq 1 50); do
    if udp_rt "$CA" ok --count 3 >"$T/a-udp.out" 2>&1; then ok=0; break; fi
    sleep 0.2
done
cat "$T/a-udp.out"
check "UDP from the first IP served once the second has no session" test "$ok" = 0

# User 2 has no limit: both addresses at once.
cl_start c "$CIPHER" "$U2" "$(srv_user_port 2)"; CC=$CL_PORT
cl_start d "$CIPHER" "$U2" "$RELAY2"; CD=$CL_PORT
stream_bg held2 "$CC" 1048576 262144 ok
HELD2=$STREAM_PID
check "unlimited user: second IP served while the first holds a session" \
    tcp_rt "$CD" ok --bytes 65536 --seed d1
stream_wait held2 "$HELD2" 30 "unlimited user: held connection complete"

check "daemon still runs" srv_alive
check "no log line per refused connection" test "$(grep -ci 'device' "$SRV_LOG")" = 0
srv_stop
check "daemon exits 0 on SIGTERM" test "$SRV_RC" = 0
kt_finish
