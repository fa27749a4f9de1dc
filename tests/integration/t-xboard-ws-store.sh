#!/bin/bash
# Xboard node channel and the last good store (issue 14, issue 15): a change pushed over the
# channel (a `sync.config` moving the node to another port, a `sync.user.delta` adding a user)
# is stored as the last good state once it applied, not only at the next successful pull, so a
# restart while the panel is down serves it. pull_interval is 60 s and the panel's REST view
# keeps the old state: only the channel can explain what runs.
# Checks: the pushed port listens and the pushed user relays bytes; after a restart with the
# panel down (every REST request and the handshake refused) katana serves the stored pushed
# state: the new port listens, the pushed user and the first user relay bytes, and the log says
# the stored state (2 users) is served.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/panel.sh"
kt_need ss-local curl sqlite3
needs_katana "panel client" || skip_all "needs katana"
PANEL_TYPE=xboard

U1=$(kt_uuid); U2=$(kt_uuid)
echo_start
panel_start 60 60 "1:$U1"
kt_ports 1; P2=${PORTS[0]}
kat_config "$T/config.json" 1
kat_start "$T/config.json"
check "the node channel came up" ws_wait_up 10
panel_ctl ws_send "{\"event\": \"sync.config\", \"data\": {\"config\": {\"protocol\": \"shadowsocks\",
    \"listen_ip\": \"0.0.0.0\", \"server_port\": $P2, \"cipher\": \"$CIPHER\", \"server_key\": null}}}"
panel_ctl ws_send "{\"event\": \"sync.user.delta\", \"data\": {\"action\": \"add\",
    \"users\": [{\"id\": 2, \"uuid\": \"$U2\", \"speed_limit\": null, \"device_limit\": null}]}}"
check "the node moved to the pushed port" kt_wait_port "$P2" 10
cl_start u2 "$CIPHER" "$U2" "$P2"; C2=$CL_PORT
check "the pushed user relays bytes" tcp_rt "$C2" ok
sleep 1
kat_stop
check "katana exits 0" test "$SRV_RC" = 0

# the panel is down: only the store can give the pushed state
panel_ctl down '{"down": true}'
panel_ctl ws '{"enabled": false}'
kt_bg server "$(katana_bin)" run -c "$T/config.json"; SRV_PID=$BG_PID
check "after a restart with the panel down the pushed port listens" kt_wait_port "$P2" 10
check "the pushed user relays bytes again" tcp_rt "$C2" ok
cl_start u1 "$CIPHER" "$U1" "$P2"; C1=$CL_PORT
check "and so does the first user" tcp_rt "$C1" ok
check "the stored pushed state is served" grep -q "serving the stored state (2 users)" "$SRV_LOG"
kat_stop
check "katana exits 0 again" test "$SRV_RC" = 0
kt_finish
