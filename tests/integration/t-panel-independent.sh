#!/bin/bash
# Issue 33: nodes are independent. Two nodes in one process, each on its own UniProxy panel.
# Node n1's panel starts serving duplicate user ids (refused: n1 keeps its running users); node
# n2's panel meanwhile removes user 5, adds user 7 and changes user 6's speed limit, then moves
# n2 to another port. Checks: every n2 change applies within a pull or two (5 refused, 7 served,
# 6's new limit in the last good state stored for n2, the new port serving) while n1 keeps
# serving user 1; /v1/nodes gives n1's error to n1 alone; once n1's panel is fixed, n1 applies.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/panel.sh"
kt_need ss-local curl sqlite3 jq
needs_katana "panel client" || skip_all "needs katana"

U1=$(kt_uuid); U5=$(kt_uuid); U6=$(kt_uuid); U7=$(kt_uuid); UX=$(kt_uuid)
echo_start
panel_start 1 1 "1:$U1"
PA=$PANEL_PORT; NA=$NODE_PORT; API=$API_PORT
rm -f "$T/panel.ready"
panel_start 1 1 "5:$U5" "6:$U6"
PB=$PANEL_PORT; NB=$NODE_PORT
cat >"$T/config.json" <<JSON
{"log": {"level": "debug"}, "workers": 1, "api": {"listen": "127.0.0.1:$API"},
 "db": {"path": "$T/katana.db", "flush_interval": 1},
 "nodes": [{"tag": "n1", "listen": "127.0.0.1", "allow_private": true,
            "panel": {"type": "uniproxy", "url": "http://127.0.0.1:$PA", "token": "$PANEL_TOKEN",
                      "node_id": 1, "node_type": "shadowsocks", "timeout": 2}},
           {"tag": "n2", "listen": "127.0.0.1", "allow_private": true,
            "panel": {"type": "uniproxy", "url": "http://127.0.0.1:$PB", "token": "$PANEL_TOKEN",
                      "node_id": 1, "node_type": "shadowsocks", "timeout": 2}}]}
JSON
NODE_PORT=$NB kat_start "$T/config.json"
kt_wait_port "$NA" 10 || fail "node n1 did not listen"
cl_start a1 "$CIPHER" "$U1" "$NA"; CA1=$CL_PORT
cl_start b5 "$CIPHER" "$U5" "$NB"; CB5=$CL_PORT
cl_start b7 "$CIPHER" "$U7" "$NB"; CB7=$CL_PORT
check "n1 serves user 1" tcp_rt "$CA1" ok --bytes 65536 --seed a
check "n2 serves user 5" tcp_rt "$CB5" ok --bytes 65536 --seed b
check "n2 does not know user 7 yet" tcp_rt "$CB7" refused

users_json() { # UID:UUID[:SPEED]...
    python3 -c '
import json, sys
us = []
for a in sys.argv[1:]:
    p = a.split(":")
    us.append({"id": int(p[0]), "uuid": p[1], "speed_limit": int(p[2]) if len(p) > 2 else None,
               "device_limit": None})
print(json.dumps({"users": us}))' "$@"
}
node_field() { # TAG JQ
    curl -sf "http://127.0.0.1:$API/v1/nodes" | jq -r --arg t "$1" ".nodes[] | select(.tag == \$t) | $2"
}
stored_speed() { # the speed limit of user 6 in the users body stored as n2's last good state
    sqlite3 "$T/katana.db" "SELECT body FROM panel_state WHERE node = 'n2' AND kind = 1" |
        jq -r '.users[] | select(.id == 6) | .speed_limit'
}
n1_refused() { node_field n1 .last_pull.error | grep -q "duplicate user 1"; }
speed_is() { [ "$(stored_speed)" = "$1" ]; }

# a refused answer on n1 (users only), removals, additions and a limit change on n2
PANEL_PORT=$PA panel_ctl users "$(users_json "1:$U1" "1:$UX")"
check "n1's duplicate ids are refused" kt_until 10 n1_refused
PANEL_PORT=$PB panel_ctl users "$(users_json "6:$U6:10" "7:$U7")"
check "n2 removes user 5 while n1 is refused" kt_until 10 tcp_rt "$CB5" refused
check "n2 serves added user 7" tcp_rt "$CB7" ok --bytes 65536 --seed c
check "n2's new speed limit for user 6 runs (stored as its last good state)" kt_until 10 speed_is 10
check "n1 keeps serving user 1" tcp_rt "$CA1" ok --bytes 65536 --seed d
check "/v1/nodes: n2's last pull is fine" test "$(node_field n2 .last_pull.ok)" = true
check "/v1/nodes: n2 carries no error of n1's" test "$(node_field n2 .last_pull.error)" = null
check "katana logged n1's refusal as n1's alone" \
    grep -q "node n1: change refused, the node keeps its running state" "$SRV_LOG"

# a settings change on n2 (another port) while n1 is still refused: the apply path
kt_ports 1; NB2=${PORTS[0]}
PANEL_PORT=$PB panel_ctl config "{\"protocol\": \"shadowsocks\", \"listen_ip\": \"0.0.0.0\",
    \"server_port\": $NB2, \"cipher\": \"$CIPHER\", \"server_key\": null,
    \"base_config\": {\"push_interval\": 1, \"pull_interval\": 1}}"
check "n2 moves to its new port while n1 is refused" kt_wait_port "$NB2" 10
cl_start b7n "$CIPHER" "$U7" "$NB2"; CB7N=$CL_PORT
check "n2 serves user 7 on the new port" tcp_rt "$CB7N" ok --bytes 65536 --seed e
check "n1 still serves user 1" tcp_rt "$CA1" ok --bytes 65536 --seed f
check "n1 still shows its own error" n1_refused

# n1's panel fixed: n1 applies
mark=$(grep -c "node n1: users updated" "$SRV_LOG" || true)
PANEL_PORT=$PA panel_ctl users "$(users_json "1:$UX")"
cl_start ax "$CIPHER" "$UX" "$NA"; CAX=$CL_PORT
n1_updated() { [ "$(grep -c "node n1: users updated" "$SRV_LOG" || true)" -gt "$mark" ]; }
check "n1 applies once its panel is fixed" kt_until 15 n1_updated
check "n1 serves its fixed user" tcp_rt "$CAX" ok --bytes 65536 --seed g
check "n1's error is gone" test "$(node_field n1 .last_pull.ok)" = true
kat_stop
check "katana exits 0" test "$SRV_RC" = 0
kt_finish
