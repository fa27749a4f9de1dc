#!/bin/bash
# Removing a user (edit the users file + SIGHUP) closes that user's sessions: its live
# connection gets EOF/reset within 5 s, new connections are refused; user 1 is unaffected.
. "$(dirname "$0")/lib.sh"
kt_need ss-local

CIPHER=aes-128-gcm
U1=$(kt_uuid); U2=$(kt_uuid)
echo_start
kt_ports 1; PORT=${PORTS[0]}
mkconfig "$T/config.json" "$PORT" "$CIPHER" --user "1:$U1" --user "2:$U2" \
    --users-file "$T/users.json"
srv_start "$T/config.json"
cl_start u1 "$CIPHER" "$U1" "$(srv_user_port 1)"; C1=$CL_PORT
cl_start u2 "$CIPHER" "$U2" "$(srv_user_port 2)"; C2=$CL_PORT
check "user 2 served before removal" tcp_rt "$C2" ok --bytes 65536 --seed u2pre

stream_bg live1 "$C1" 393216 65536 ok; L1=$STREAM_PID      # ~6 s, must complete
stream_bg live2 "$C2" 4194304 65536 cut; L2=$STREAM_PID    # ~64 s, must be cut
mkconfig "$T/config.json" "$PORT" "$CIPHER" --user "1:$U1" --users-file "$T/users.json"
KT_RELOAD_WAIT=0 srv_reload
stream_wait live2 "$L2" 5 "removed user 2's live connection closed within 5 s"
check "reload applied (no refusal logged)" reload_applied
check "removed user 2: new connection refused" tcp_rt "$C2" refused --bytes 4096 --seed u2post
check "removed user 2: UDP refused" udp_rt "$C2" refused --count 2
check "user 1 new connection served" tcp_rt "$C1" ok --bytes 131072 --seed u1new
stream_wait live1 "$L1" 20 "user 1's live stream across the removal: every byte back"
check "daemon still runs" srv_alive
srv_stop
check "daemon exits 0 on SIGTERM" test "$SRV_RC" = 0
kt_finish
