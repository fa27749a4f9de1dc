#!/bin/bash
# Two nodes on two different panels in one katana process (issue 14: the uplink holds no
# process-wide state): node a on a UniProxy panel, node b on an SSPanel mod_mu panel, each with
# its own user, its own pull and push, one outbox.
# Checks: both nodes serve their user and refuse the other node's; each panel bills exactly
# its own user with exactly what katana counted (SIGTERM usage lines), nothing for the other;
# /v1/nodes names each node's panel type; a node's panel going down leaves the other's pushes
# flowing.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/panel.sh"
kt_need ss-local curl sqlite3
needs_katana "panel client" || skip_all "needs katana"

U1=$(kt_uuid); U2=$(kt_uuid)
echo_start
PANEL_TYPE=uniproxy panel_start 1 1 "1:$U1"
PA=$PANEL_PORT; NA=$NODE_PORT; API=$API_PORT
rm -f "$T/panel.ready"
PANEL_TYPE=sspanel panel_start 1 1 "2:$U2"
PB=$PANEL_PORT; NB=$NODE_PORT
cat >"$T/config.json" <<JSON
{"log": {"level": "debug"}, "workers": 1, "api": {"listen": "127.0.0.1:$API"},
 "db": {"path": "$T/katana.db", "flush_interval": 1},
 "nodes": [{"tag": "a", "listen": "127.0.0.1", "allow_private": true,
            "panel": {"type": "uniproxy", "url": "http://127.0.0.1:$PA", "token": "$PANEL_TOKEN",
                      "node_id": 1, "node_type": "shadowsocks", "timeout": 2}},
           {"tag": "b", "listen": "127.0.0.1", "allow_private": true,
            "panel": {"type": "sspanel", "url": "http://127.0.0.1:$PB", "token": "$PANEL_TOKEN",
                      "node_id": 1, "timeout": 2, "pull_interval": 1, "push_interval": 1}}]}
JSON
NODE_PORT=$NB kat_start "$T/config.json"
kt_wait_port "$NA" 10 || fail "node a did not listen"
cl_start a1 "$CIPHER" "$U1" "$NA"; CA1=$CL_PORT
cl_start b2 "$CIPHER" "$U2" "$NB"; CB2=$CL_PORT
cl_start a2 "$CIPHER" "$U2" "$NA"; CA2=$CL_PORT
check "node a serves its user 1" tcp_rt "$CA1" ok --bytes "$MIB" --seed a
check "node b serves its user 2" tcp_rt "$CB2" ok --bytes "$MIB" --conns 2 --seed b
check "node a refuses node b's user" tcp_rt "$CA2" refused
check "/v1/nodes names both panel types" python3 -c '
import json, sys, urllib.request
n = json.load(urllib.request.urlopen("http://127.0.0.1:%s/v1/nodes" % sys.argv[1]))["nodes"]
t = {x["tag"]: x["panel"]["type"] for x in n}
sys.exit(0 if t == {"a": "uniproxy", "b": "sspanel"} else 1)' "$API"

# panel a down: node b's pushes keep flowing
PANEL_PORT=$PA panel_ctl down '{"down": true}'
B_BEFORE=$(PANEL_PORT=$PB panel_hits push)
check "node b moves more while panel a is down" tcp_rt "$CB2" ok --bytes "$MIB" --seed c
sleep 3
check "node b's panel got pushes meanwhile" test "$(PANEL_PORT=$PB panel_hits push)" -gt "$B_BEFORE"
PANEL_PORT=$PA panel_ctl down '{"down": false}'

sleep 2.5
srv_usage_mark
kat_stop
check "katana exits 0" test "$SRV_RC" = 0
FINAL=$(srv_usage)
NODE_PORT=$NB kat_start "$T/config.json"
check "the next start pushed what the stop left" wait_outbox_empty 20
kat_stop
check "panel a billed exactly user 1" \
    same_totals "panel a" "$(grep '^1 ' <<<"$FINAL")" "$(PANEL_PORT=$PA panel_totals)"
check "panel b billed exactly user 2" \
    same_totals "panel b" "$(grep '^2 ' <<<"$FINAL")" "$(PANEL_PORT=$PB panel_totals)"
kt_finish
