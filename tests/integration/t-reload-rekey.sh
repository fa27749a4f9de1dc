#!/bin/bash
# A reload that changes one user's password (edit the users file + SIGHUP; issue 13: the
# rebuilt handler keeps the other users' principals and keys and derives only the changed one):
# the old password stops working, at once for new connections and for its live session; the
# new one works; the other users' live streams carry on and every byte comes back.
. "$(dirname "$0")/lib.sh"
kt_need ss-local
needs_katana "a reload that keeps unchanged users' keys" || exit 77

CIPHER=aes-256-gcm
U1=$(kt_uuid); U2=$(kt_uuid); U3=$(kt_uuid); U1NEW=$(kt_uuid)
echo_start
kt_ports 1; PORT=${PORTS[0]}
mkconfig "$T/config.json" "$PORT" "$CIPHER" --user "1:$U1" --user "2:$U2" --user "3:$U3" \
    --users-file "$T/users.json"
srv_start "$T/config.json"
cl_start u1 "$CIPHER" "$U1" "$PORT"; C1=$CL_PORT
cl_start u2 "$CIPHER" "$U2" "$PORT"; C2=$CL_PORT
cl_start u3 "$CIPHER" "$U3" "$PORT"; C3=$CL_PORT
cl_start u1new "$CIPHER" "$U1NEW" "$PORT"; C1NEW=$CL_PORT
check "user 1 served with its old password" tcp_rt "$C1" ok --bytes 65536 --seed u1old
check "the new password refused before the reload" tcp_rt "$C1NEW" refused --bytes 4096

# ~5 s streams (320 KiB at 64 KiB/s) of users 2 and 3 across the reload; user 1's is cut
stream_bg live2 "$C2" 327680 65536 ok; L2=$STREAM_PID
stream_bg live3 "$C3" 327680 65536 ok; L3=$STREAM_PID
stream_bg live1 "$C1" 4194304 65536 cut; L1=$STREAM_PID
sleep 1
mkconfig "$T/config.json" "$PORT" "$CIPHER" --user "1:$U1NEW" --user "2:$U2" --user "3:$U3" \
    --users-file "$T/users.json"
srv_reload
check "reload applied (no refusal logged)" reload_applied
check "the old password refused after the reload" tcp_rt "$C1" refused --bytes 4096
check "the new password served after the reload (TCP)" tcp_rt "$C1NEW" ok --bytes 262144 \
    --seed u1new
check "the new password served after the reload (UDP)" udp_rt "$C1NEW" ok --count 5
check "user 2 new connection served" tcp_rt "$C2" ok --bytes 65536 --seed u2new
stream_wait live1 "$L1" 20 "user 1's live session with the old password is closed"
stream_wait live2 "$L2" 20 "user 2's live stream across the reload: every byte back"
stream_wait live3 "$L3" 20 "user 3's live stream across the reload: every byte back"
srv_stop
check "daemon exits 0 on SIGTERM" test "$SRV_RC" = 0
kt_finish
