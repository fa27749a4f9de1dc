# shellcheck shell=bash
# panel.sh: helpers for the panel tests (t-panel-*.sh), sourced after lib.sh. A UniProxy panel
# emulator (panel_emu.py) on loopback, a katana config pointing at it, and the accounting
# checks: the panel's recorded totals, the outbox's pending rows, katana's usage lines.
# PANEL_TYPE=sspanel (issue 14) runs the same test against the emulator's SSPanel mod_mu mode
# (the t-sspanel-*.sh wrappers): the emulator translates its state, katana's config names the
# sspanel panel with the intervals the panel_start call gave. PANEL_TYPE=xboard (issue 14): the
# emulator's Xboard API v2 mode with its WebSocket node channel, katana's "xboard" panel.

PANEL_TYPE=${PANEL_TYPE:-uniproxy}
CIPHER=aes-256-gcm
MIB=1048576
PANEL_TOKEN=test-token-$$

# panel_start PUSH_S PULL_S UID:UUID...: start the emulator serving one shadowsocks node.
panel_start() {
    local push=$1 pull=$2; shift 2
    PANEL_PUSH=$push; PANEL_PULL=$pull
    kt_ports 3; PANEL_PORT=${PORTS[0]}; NODE_PORT=${PORTS[1]}; API_PORT=${PORTS[2]}
    python3 - "$T/panel-config.json" "$T/panel-users.json" "$NODE_PORT" "$CIPHER" "$push" \
        "$pull" "$@" <<'EOF'
import json, sys
cfg, users, port, cipher, push, pull = sys.argv[1:7]
json.dump({"protocol": "shadowsocks", "listen_ip": "0.0.0.0", "server_port": int(port),
           "cipher": cipher, "server_key": None,
           "base_config": {"push_interval": int(push), "pull_interval": int(pull)}},
          open(cfg, "w"))
us = []
for spec in sys.argv[7:]:
    uid, uuid = spec.split(":", 1)
    us.append({"id": int(uid), "uuid": uuid, "speed_limit": None, "device_limit": None})
json.dump({"users": us}, open(users, "w"))
EOF
    kt_bg panel python3 "$KT_DIR/panel_emu.py" --port "$PANEL_PORT" --token "$PANEL_TOKEN" \
        --config "$T/panel-config.json" --users "$T/panel-users.json" \
        --ready-file "$T/panel.ready" --hold "${PANEL_HOLD:-4}" --mode "$PANEL_TYPE"
    PANEL_PID=$BG_PID
    kt_wait_file "$T/panel.ready" 10 || { fail "panel emulator did not start"; exit 1; }
}

# panel_ctl WHAT [JSON]: a control request (GET state, or POST JSON).
panel_ctl() {
    if [ $# -eq 1 ]; then
        curl -sf "http://127.0.0.1:$PANEL_PORT/_emu/$1"
    else
        curl -sf -X POST -H 'Content-Type: application/json' --data "$2" \
            "http://127.0.0.1:$PANEL_PORT/_emu/$1" >/dev/null
    fi
}

# panel_totals: "UID UP DOWN" per user the panel billed, sorted.
panel_totals() {
    panel_ctl state | python3 -c '
import json, sys
t = json.load(sys.stdin)["totals"]
for uid in sorted(t, key=int):
    print(uid, t[uid][0], t[uid][1])'
}

# panel_hits ENDPOINT: how many requests the endpoint got.
panel_hits() {
    panel_ctl state | python3 -c 'import json, sys; print(json.load(sys.stdin)["hits"].get(sys.argv[1], 0))' "$1"
}

# kat_config FILE [FLUSH_S]: a katana config for the emulator's node (allow_private: the echo
# server the tests relay to is on loopback, issue 15).
kat_config() {
    if [ "$PANEL_TYPE" = sspanel ]; then
        cat >"$1" <<EOF
{"log": {"level": "debug"}, "workers": 1, "api": {"listen": "127.0.0.1:$API_PORT"},
 "db": {"path": "$T/katana.db", "flush_interval": ${2:-1}},
 "nodes": [{"tag": "n1", "listen": "127.0.0.1", "allow_private": true,
            "panel": {"type": "sspanel", "url": "http://127.0.0.1:$PANEL_PORT",
                      "token": "$PANEL_TOKEN", "node_id": 1, "timeout": ${KAT_TIMEOUT:-2},
                      "pull_interval": $PANEL_PULL, "push_interval": $PANEL_PUSH}}]}
EOF
        return
    fi
    cat >"$1" <<EOF
{"log": {"level": "debug"}, "workers": 1, "api": {"listen": "127.0.0.1:$API_PORT"},
 "db": {"path": "$T/katana.db", "flush_interval": ${2:-1}},
 "nodes": [{"tag": "n1", "listen": "127.0.0.1", "allow_private": true,
            "panel": {"type": "$PANEL_TYPE", "url": "http://127.0.0.1:$PANEL_PORT",
                      "token": "$PANEL_TOKEN", "node_id": 1, "node_type": "shadowsocks",
                      "timeout": ${KAT_TIMEOUT:-2}}}]}
EOF
}

# kat_start CONFIG: start katana and wait until the node's port accepts connections.
kat_start() {
    local bin i; bin=$(katana_bin)
    [ -x "$bin" ] || { fail "katana binary not found at $bin"; exit 1; }
    kt_bg server "$bin" run -c "$1"
    SRV_PID=$BG_PID
    for ((i = 0; i < 300; i++)); do
        kt_alive "$SRV_PID" || { fail "katana exited at start"; exit 1; }
        kt_wait_port "$NODE_PORT" 0.1 2>/dev/null && return 0
    done
    fail "katana did not listen on $NODE_PORT"; exit 1
}

# kat_stop: SIGTERM, wait (status in SRV_RC).
kat_stop() {
    kill -TERM "$SRV_PID" 2>/dev/null || true
    kt_wait_exit "$SRV_PID" 10 || true
    SRV_RC=$WAIT_RC
}

# kat_snapshot: SIGUSR1, then the usage lines it logged ("UID UP DOWN").
kat_snapshot() {
    srv_usage_mark
    kill -USR1 "$SRV_PID"
    local i
    for ((i = 0; i < 40; i++)); do [ -n "$(srv_usage)" ] && break; sleep 0.1; done
    sleep 0.3
    srv_usage
}

# outbox_pending: "UID UP DOWN" still in the outbox.
outbox_pending() {
    sqlite3 "$T/katana.db" "SELECT uid, SUM(up), SUM(down) FROM usage_outbox GROUP BY uid
                            ORDER BY uid" | tr '|' ' '
}

# wait_outbox_empty SECONDS
wait_outbox_empty() {
    local i
    for ((i = 0; i < $1 * 5; i++)); do
        [ -z "$(outbox_pending 2>/dev/null)" ] && [ -e "$T/katana.db" ] && return 0
        sleep 0.2
    done
    return 1
}

# sum_lines A B: per-uid sums of two "UID UP DOWN" listings.
sum_lines() {
    { echo "$1"; echo "$2"; } | awk 'NF == 3 { u[$1] += $2; d[$1] += $3 }
        END { for (k in u) print k, u[k], d[k] }' | sort -n
}

# same_totals WHAT EXPECTED GOT: equal listings (users with 0 0 ignored).
same_totals() {
    local e g
    e=$(awk 'NF == 3 && ($2 != 0 || $3 != 0)' <<<"$2" | sort -n)
    g=$(awk 'NF == 3 && ($2 != 0 || $3 != 0)' <<<"$3" | sort -n)
    echo "$1: expected [$(tr '\n' ';' <<<"$e")] got [$(tr '\n' ';' <<<"$g")]"
    [ -n "$e" ] && [ "$e" = "$g" ]
}

# ws_wait_up SECONDS: wait until katana logged its node channel up N times (default 1).
ws_wait_up() {
    local i n=${2:-1}
    for ((i = 0; i < $1 * 10; i++)); do
        [ "$(grep -c 'node channel up' "$SRV_LOG")" -ge "$n" ] && return 0
        sleep 0.1
    done
    return 1
}

# panel_ws KEY: a field of the emulator's "ws" state (connects, open, received).
panel_ws() {
    panel_ctl state | python3 -c 'import json, sys; print(json.dumps(json.load(sys.stdin)["ws"][sys.argv[1]]))' "$1"
}

# panel_node_status [ws|report]: the node metrics the emulator recorded (a JSON list of
# {"t","via","node_id","data"}, oldest first): `node.status` over the channel, the `metrics` of
# REST `report`, or both.
panel_node_status() {
    panel_ctl "node_status${1:+?via=$1}"
}

# Xboard machine mode (issue 14, PANEL.md §1.1): machine 7 with token MACHINE_TOKEN.
MACHINE_TOKEN=machine-token-$$

# ss_node ID PORT UID:UUID...: one shadowsocks node of the machine, as a "nodes" member.
ss_node() {
    python3 - "$CIPHER" "$@" <<'PY'
import json, sys
cipher, nid, port = sys.argv[1:4]
users = [{"id": int(s.split(":", 1)[0]), "uuid": s.split(":", 1)[1], "speed_limit": None,
          "device_limit": None} for s in sys.argv[4:]]
print('"%s": %s' % (nid, json.dumps({"type": "shadowsocks", "config": {
    "protocol": "shadowsocks", "listen_ip": "0.0.0.0", "server_port": int(port),
    "cipher": cipher, "server_key": None}, "users": {"users": users}})))
PY
}

# machine_set PULL_S NODES [NOTIFY]: the machine as the panel has it now (push MACHINE_PUSH s,
# default 60), NODES a comma-separated list of ss_node outputs; NOTIFY false: no sync.nodes on
# the channel.
machine_set() {
    panel_ctl machine "{\"machine_id\": 7, \"token\": \"$MACHINE_TOKEN\", \"notify\": ${3:-true},
        \"base_config\": {\"push_interval\": ${MACHINE_PUSH:-60}, \"pull_interval\": $1}, \"nodes\": {$2}}"
}

# machine_kat_config FILE: a katana config serving machine 7 of the emulator (tag "m").
machine_kat_config() {
    cat >"$1" <<EOF2
{"log": {"level": "debug"}, "workers": 1, "api": {"listen": "127.0.0.1:$API_PORT"},
 "db": {"path": "$T/katana.db", "flush_interval": 1},
 "nodes": [{"tag": "m", "listen": "127.0.0.1", "allow_private": true,
            "panel": {"type": "xboard", "url": "http://127.0.0.1:$PANEL_PORT",
                      "token": "$MACHINE_TOKEN", "machine_id": 7, "timeout": 2}}]}
EOF2
}
