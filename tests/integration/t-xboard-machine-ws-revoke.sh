#!/bin/bash
# Xboard machine channel (issue 14, PROTOCOLS-2.md §6.2-6.5): a machine-mode katana opens one
# WebSocket for the machine (`?token=<machine token>&machine_id=7`); a `sync.user.delta`
# carrying `data.node_id` reaches that node only: the user it removes loses its sessions within
# 1 s with no REST pull in between (pull_interval 60 s); a delta for the machine's other node
# leaves this node's users alone; `ping` is answered with `pong`; online IPs go out as
# machine-mode `report.devices` `{"node_id":11,"devices":{...}}`.
# Checks: the channel authenticated as machine 7; the removed user's stream is cut at most 1 s
# after the delta; no `user` pull in that window; user 1's stream completes; a delta naming node
# 12 does not cut user 1 on node 11; an added user connects at once; pong and report.devices.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/panel.sh"
kt_need ss-local curl sqlite3
needs_katana "xboard machine channel" || skip_all "needs katana"
PANEL_TYPE=xboard
MACHINE_PUSH=1   # online IPs are reported once per push interval

U1=$(kt_uuid); U2=$(kt_uuid); U3=$(kt_uuid); U4=$(kt_uuid)
echo_start
panel_start 60 60 "1:$U1"          # node mode state, unused: the machine's nodes answer
kt_ports 1; P12=${PORTS[0]}
machine_set 60 "$(ss_node 11 "$NODE_PORT" "1:$U1" "2:$U2"), $(ss_node 12 "$P12" "4:$U4")"
machine_kat_config "$T/config.json"
kat_start "$T/config.json"
check "the machine's channel came up" ws_wait_up 10
check "one channel for the machine, not one per node" \
    test "$(grep -c 'machine_id 7: node channel up' "$SRV_LOG")" = 1
kt_wait_port "$P12" 10 || fail "node 12 did not listen"
cl_start u1 "$CIPHER" "$U1" "$NODE_PORT"; C1=$CL_PORT
cl_start u2 "$CIPHER" "$U2" "$NODE_PORT"; C2=$CL_PORT
stream_bg keep "$C1" 327680 65536 ok; S1=$STREAM_PID     # ~5 s, must complete
stream_bg gone "$C2" 4194304 65536 cut; S2=$STREAM_PID   # ~64 s, must be cut
sleep 1.5

# a delta for the other node removing user 1 there: node 11's user 1 is not touched
panel_ctl ws_send '{"event": "sync.user.delta", "data": {"node_id": 12, "action": "remove", "users": [{"id": 4}]}}'
# the panel's REST view changes too (as Xboard's would); only the channel tells katana now
machine_set 60 "$(ss_node 11 "$NODE_PORT" "1:$U1"), $(ss_node 12 "$P12")"
PULLS0=$(panel_hits user)
T0=$(date +%s.%N)
panel_ctl ws_send '{"event": "sync.user.delta", "data": {"node_id": 11, "action": "remove", "users": [{"id": 2}]}}'
for ((i = 0; i < 100; i++)); do kt_alive "$S2" || break; sleep 0.02; done
T1=$(date +%s.%N)
PULLS1=$(panel_hits user)
ELAPSED=$(python3 -c "import sys; print('%.3f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$T0" "$T1")
echo "removed user's session ended ${ELAPSED} s after the delta was sent"
check "the removed user's session is closed within 1 s" \
    python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) <= 1.0 else 1)" "$ELAPSED"
check "no REST user pull in between (it came over the machine channel)" test "$PULLS0" = "$PULLS1"
stream_wait gone "$S2" 5 "user 2's stream was cut"
stream_wait keep "$S1" 20 "user 1's session on node 11 survives (node 12's delta did not reach it)"

# a user added over the channel to node 11 can connect at once
panel_ctl ws_send "{\"event\": \"sync.user.delta\", \"data\": {\"node_id\": 11, \"action\": \"add\",
    \"users\": [{\"id\": 3, \"uuid\": \"$U3\", \"speed_limit\": null, \"device_limit\": null}]}}"
sleep 0.5
cl_start u3 "$CIPHER" "$U3" "$NODE_PORT"; C3=$CL_PORT
stream_bg added "$C3" 65536 65536 ok; S3=$STREAM_PID
stream_wait added "$S3" 10 "a user added by a delta relays bytes"

panel_ctl ws_send '{"event": "ping"}'
stream_bg alive "$C1" 196608 65536 ok; S4=$STREAM_PID    # a live session for the device report
sleep 2.5
check "ping answered with pong over the machine channel" python3 -c '
import json, sys
sys.exit(0 if any(m.get("event") == "pong" for m in json.loads(sys.argv[1])) else 1)' "$(panel_ws received)"
check "report.devices in machine form names node 11 and user 1's client IP" python3 -c '
import json, sys
r = [m["data"] for m in json.loads(sys.argv[1]) if m.get("event") == "report.devices"]
sys.exit(0 if any(d.get("node_id") == 11 and "127.0.0.1" in d.get("devices", {}).get("1", [])
                  for d in r) else 1)' "$(panel_ws received)"
stream_wait alive "$S4" 10 "user 1's second stream completes"
kat_stop
check "katana exits 0" test "$SRV_RC" = 0
kt_finish
