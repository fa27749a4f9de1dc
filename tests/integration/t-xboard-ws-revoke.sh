#!/bin/bash
# Xboard node channel (issue 14, PROTOCOLS-2.md §6): katana's "xboard" panel does the v2
# handshake and keeps the WebSocket it offers; a user removed by a `sync.user.delta` over it
# loses its sessions within 1 s, with no REST pull in between (pull_interval is 60 s); the
# other user's session stays; a user added by a delta can connect; `ping` is answered with
# `pong`; online IPs go to the panel as `report.devices` over the channel.
# Checks: the stream of the removed user ends (cut) at most 1 s after the delta was sent; no
# `user` pull happened in that window; user 1's stream completes; the added user relays bytes;
# the emulator received a pong and a report.devices naming user 1's client IP.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/panel.sh"
kt_need ss-local curl sqlite3
needs_katana "panel client" || skip_all "needs katana"
PANEL_TYPE=xboard

U1=$(kt_uuid); U2=$(kt_uuid); U3=$(kt_uuid)
echo_start
panel_start 1 60 "1:$U1" "2:$U2"
kat_config "$T/config.json" 1
kat_start "$T/config.json"
check "the node channel came up after the handshake" ws_wait_up 10
cl_start u1 "$CIPHER" "$U1" "$NODE_PORT"; C1=$CL_PORT
cl_start u2 "$CIPHER" "$U2" "$NODE_PORT"; C2=$CL_PORT
stream_bg keep "$C1" 262144 65536 ok; S1=$STREAM_PID     # ~4 s, must complete
stream_bg gone "$C2" 4194304 65536 cut; S2=$STREAM_PID   # ~64 s, must be cut
sleep 1.5

# the panel's REST view changes too (as Xboard's would); only the channel tells katana now
panel_ctl users "{\"users\": [{\"id\": 1, \"uuid\": \"$U1\", \"speed_limit\": null,
                               \"device_limit\": null}]}"
PULLS0=$(panel_hits user)
T0=$(date +%s.%N)
panel_ctl ws_send '{"event": "sync.user.delta", "data": {"action": "remove", "users": [{"id": 2}]}}'
for ((i = 0; i < 100; i++)); do kt_alive "$S2" || break; sleep 0.02; done
T1=$(date +%s.%N)
PULLS1=$(panel_hits user)
ELAPSED=$(python3 -c "import sys; print('%.3f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$T0" "$T1")
echo "removed user's session ended ${ELAPSED} s after the delta was sent"
check "the removed user's session is closed within 1 s" \
    python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) <= 1.0 else 1)" "$ELAPSED"
check "no REST user pull in between (it came over the channel)" test "$PULLS0" = "$PULLS1"
stream_wait gone "$S2" 5 "user 2's stream was cut"
stream_wait keep "$S1" 20 "user 1's session survives"

# a user added over the channel can connect at once
panel_ctl ws_send "{\"event\": \"sync.user.delta\", \"data\": {\"action\": \"add\",
    \"users\": [{\"id\": 3, \"uuid\": \"$U3\", \"speed_limit\": null, \"device_limit\": null}]}}"
sleep 0.5
cl_start u3 "$CIPHER" "$U3" "$NODE_PORT"; C3=$CL_PORT
stream_bg added "$C3" 65536 65536 ok; S3=$STREAM_PID
stream_wait added "$S3" 10 "a user added by a delta relays bytes"

panel_ctl ws_send '{"event": "ping"}'
stream_bg alive "$C1" 196608 65536 ok; S4=$STREAM_PID    # a live session for the device report
sleep 2.5
check "ping answered with pong over the channel" python3 -c '
import json, sys
sys.exit(0 if any(m.get("event") == "pong" for m in json.loads(sys.argv[1])) else 1)' "$(panel_ws received)"
check "report.devices named user 1's client IP" python3 -c '
import json, sys
r = [m for m in json.loads(sys.argv[1]) if m.get("event") == "report.devices"]
sys.exit(0 if any("127.0.0.1" in m["data"].get("1", []) for m in r) else 1)' "$(panel_ws received)"
stream_wait alive "$S4" 10 "user 1's second stream completes"
kat_stop
check "katana exits 0" test "$SRV_RC" = 0
kt_finish
