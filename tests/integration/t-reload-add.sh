#!/bin/bash
# Adding a user (edit the users file + SIGHUP) does not disturb another user's live
# connection: a paced stream of user 1 stays open across the reload and every byte comes
# back; the new user is refused before and served after.
. "$(dirname "$0")/lib.sh"
kt_need ss-local

CIPHER=chacha20-ietf-poly1305
U1=$(kt_uuid); U2=$(kt_uuid)
echo_start
kt_ports 1; PORT=${PORTS[0]}
mkconfig "$T/config.json" "$PORT" "$CIPHER" --user "1:$U1" --users-file "$T/users.json"
srv_start "$T/config.json"
cl_start u1 "$CIPHER" "$U1" "$(srv_user_port 1)"; C1=$CL_PORT
if [ "$KT_SERVER" = katana ]; then
    cl_start u2 "$CIPHER" "$U2" "$(srv_user_port 1)"; C2=$CL_PORT
    check "user 2 refused before it is added" tcp_rt "$C2" refused --bytes 4096
fi

# ~5 s stream (320 KiB at 64 KiB/s) across the reload
stream_bg live1 "$C1" 327680 65536 ok; LIVE=$STREAM_PID
mkconfig "$T/config.json" "$PORT" "$CIPHER" --user "1:$U1" --user "2:$U2" \
    --users-file "$T/users.json"
srv_reload
check "user 1's stream still open right after the reload" kt_alive "$LIVE"
check "daemon still runs after SIGHUP" srv_alive
check "reload applied (no refusal logged)" reload_applied
[ "$KT_SERVER" = katana ] || { cl_start u2 "$CIPHER" "$U2" "$(srv_user_port 2)"; C2=$CL_PORT; }
check "user 2 served after the reload (TCP)" tcp_rt "$C2" ok --bytes 262144 --seed u2
check "user 2 served after the reload (UDP)" udp_rt "$C2" ok --count 5
check "user 1 new connection served" tcp_rt "$C1" ok --bytes 65536 --seed u1new
stream_wait live1 "$LIVE" 20 "user 1's live stream across the reload: every byte back"
srv_stop
check "daemon exits 0 on SIGTERM" test "$SRV_RC" = 0
kt_finish
