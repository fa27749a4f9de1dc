#!/bin/bash
# Xboard machine channel dropped (issue 14, PROTOCOLS-2.md §6.6): the panel's socket dies in the
# middle of a `sync.user.delta` frame for node 11. Every node of the machine falls back to REST
# polling at once (pull_interval is 600 s, so only the fallback can pull) and ends up equal to
# the panel; the machine's channel comes back after its backoff (1 s + jitter); a delta for
# node 12 that does not apply cleanly (it removes a user katana does not hold there) triggers a
# full pull of that node.
# Checks: both nodes pull `user` within 3 s of the kill; the user the panel removed from node 11
# loses its session and the user it added relays bytes; node 12's user (whose node the panel
# changed while the channel was down) is replaced; a second channel connects within 6 s; the bad
# delta logs one clear error and is followed by a pull; user 1's session survives it all.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/panel.sh"
kt_need ss-local curl sqlite3
needs_katana "xboard machine channel" || skip_all "needs katana"
PANEL_TYPE=xboard

U1=$(kt_uuid); U2=$(kt_uuid); U3=$(kt_uuid); U4=$(kt_uuid); U5=$(kt_uuid)
echo_start
panel_start 60 60 "1:$U1"          # node mode state, unused: the machine's nodes answer
kt_ports 1; P12=${PORTS[0]}
machine_set 600 "$(ss_node 11 "$NODE_PORT" "1:$U1" "2:$U2"), $(ss_node 12 "$P12" "4:$U4")"
machine_kat_config "$T/config.json"
kat_start "$T/config.json"
check "the machine's channel came up" ws_wait_up 10
kt_wait_port "$P12" 10 || fail "node 12 did not listen"
cl_start u1 "$CIPHER" "$U1" "$NODE_PORT"; C1=$CL_PORT
cl_start u2 "$CIPHER" "$U2" "$NODE_PORT"; C2=$CL_PORT
stream_bg keep "$C1" 655360 65536 ok; S1=$STREAM_PID     # ~10 s, must complete
stream_bg gone "$C2" 4194304 65536 cut; S2=$STREAM_PID   # ~64 s, must be cut
sleep 1.5

# the panel: on node 11 user 2 removed and user 3 added, on node 12 user 4 replaced by user 5;
# the delta saying the first dies half-sent
machine_set 600 "$(ss_node 11 "$NODE_PORT" "1:$U1" "3:$U3"), $(ss_node 12 "$P12" "5:$U5")"
PULLS0=$(panel_hits user)
panel_ctl ws_kill '{"partial": {"event": "sync.user.delta", "data": {"node_id": 11, "action": "remove", "users": [{"id": 2}]}}}'
pulled() { [ "$(panel_hits user)" -ge $((PULLS0 + 2)) ]; }
check "both nodes polled over REST at once when the channel dropped" kt_until 3 pulled
stream_wait gone "$S2" 5 "the user the panel removed from node 11 lost its session"
cl_start u3 "$CIPHER" "$U3" "$NODE_PORT"; C3=$CL_PORT
stream_bg added "$C3" 65536 65536 ok; S3=$STREAM_PID
stream_wait added "$S3" 10 "the user the panel added to node 11 relays bytes"
cl_start u5 "$CIPHER" "$U5" "$P12"; C5=$CL_PORT
check "node 12 serves the user the panel gave it meanwhile" tcp_rt "$C5" ok
cl_start u4 "$CIPHER" "$U4" "$P12"; C4=$CL_PORT
check "and refuses the one it took away" tcp_rt "$C4" refused
reconnected() { [ "$(panel_ws connects)" -ge 2 ] && ws_wait_up 1 2; }
check "the machine's channel reconnected after its backoff" kt_until 6 reconnected

# a delta for node 12 that does not apply cleanly: a full pull follows
PULLS1=$(panel_hits user)
panel_ctl ws_send '{"event": "sync.user.delta", "data": {"node_id": 12, "action": "remove", "users": [{"id": 99}]}}'
pulled1() { [ "$(panel_hits user)" -gt "$PULLS1" ]; }
check "a delta that does not apply triggers a full pull" kt_until 3 pulled1
check "one clear error names it" test "$(grep -c 'm-12: node channel: user delta removes user 99, not held' "$SRV_LOG")" = 1
stream_wait keep "$S1" 20 "user 1's session survived the drop and the bad delta"
kat_stop
check "katana exits 0" test "$SRV_RC" = 0
kt_finish
