#!/bin/bash
# SIGHUP with an unchanged config keeps every connection (both users' live streams carry on,
# twice); SIGTERM with connections open still exits 0 within the grace period.
. "$(dirname "$0")/lib.sh"
kt_need ss-local

CIPHER=aes-256-gcm
U1=$(kt_uuid); U2=$(kt_uuid)
echo_start
kt_ports 1; PORT=${PORTS[0]}
mkconfig "$T/config.json" "$PORT" "$CIPHER" --user "1:$U1" --user "2:$U2" \
    --node-file "$T/node.json" --users-file "$T/users.json"
srv_start "$T/config.json"
cl_start u1 "$CIPHER" "$U1" "$(srv_user_port 1)"; C1=$CL_PORT
cl_start u2 "$CIPHER" "$U2" "$(srv_user_port 2)"; C2=$CL_PORT

stream_bg live1 "$C1" 327680 65536 ok; L1=$STREAM_PID
stream_bg live2 "$C2" 327680 65536 ok; L2=$STREAM_PID
touch "$T/config.json" "$T/node.json" "$T/users.json"
srv_reload
check "first reload applied (no refusal logged)" reload_applied
# rewrite the same content (new inode, same JSON)
mkconfig "$T/config.json" "$PORT" "$CIPHER" --user "1:$U1" --user "2:$U2" \
    --node-file "$T/node.json" --users-file "$T/users.json"
srv_reload
check "second reload applied (no refusal logged)" reload_applied
check "daemon still runs after two SIGHUPs" srv_alive
check "new connection after the reloads" tcp_rt "$C1" ok --bytes 65536 --seed n1
stream_wait live1 "$L1" 20 "user 1's stream across unchanged reloads: every byte back"
stream_wait live2 "$L2" 20 "user 2's stream across unchanged reloads: every byte back"

# graceful stop with a connection open
stream_bg live3 "$C1" 4194304 65536 cut; L3=$STREAM_PID
srv_stop
check "SIGTERM with a live connection: exit 0 within 7 s" test "$SRV_RC" = 0
stream_wait live3 "$L3" 5 "the live connection was closed by the shutdown"
kt_finish
