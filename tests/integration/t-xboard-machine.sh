#!/bin/bash
# Xboard API v2 machine mode (issue 14, PANEL.md §1.1): one katana config entry with
# `machine_id` and the machine token serves every node the panel assigns to the machine
# (POST machine/nodes), each with its own settings and users over REST (machine_id + token +
# node_id), and reports the machine's load (POST machine/status).
# Checks: a shadowsocks node and a vless node of one machine both serve real clients
# (ss-local, v2ray) with 1 MiB echoed each; machine/status was reported; a refused machine list
# (an HTML 200 page) keeps both nodes with one warning; the vless node removed from the machine
# stops listening and the usage it still held reaches the panel (through the machine's other
# node) so the panel's per-user totals equal katana's own usage lines exactly; a node added to
# the machine starts listening and serves its user; a restart while the panel is down starts the
# machine's nodes from the stored list and state.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/panel.sh"
kt_need ss-local v2ray curl sqlite3
needs_katana "xboard machine mode" || skip_all "needs katana"
PANEL_TYPE=xboard
MACHINE_TOKEN=machine-token-$$

U1=$(kt_uuid); U2=$(kt_uuid); U3=$(kt_uuid)
echo_start
panel_start 60 60 "1:$U1"          # node mode state, unused: the machine's nodes answer
kt_ports 2; VL_PORT=${PORTS[0]}; SS2_PORT=${PORTS[1]}

# machine NODES_JSON: the machine as the panel has it now (push 60 s: usage stays pending in
# katana's outbox until something pushes it; pull 1 s: changes show within about a second)
machine() {
    panel_ctl machine "{\"machine_id\": 7, \"token\": \"$MACHINE_TOKEN\",
        \"base_config\": {\"push_interval\": 60, \"pull_interval\": 1}, \"nodes\": {$1}}"
}
SS_NODE="\"11\": {\"type\": \"shadowsocks\",
    \"config\": {\"protocol\": \"shadowsocks\", \"listen_ip\": \"0.0.0.0\",
                 \"server_port\": $NODE_PORT, \"cipher\": \"$CIPHER\", \"server_key\": null},
    \"users\": {\"users\": [{\"id\": 1, \"uuid\": \"$U1\", \"speed_limit\": null,
                            \"device_limit\": null}]}}"
VL_NODE="\"12\": {\"type\": \"vless\",
    \"config\": {\"protocol\": \"vless\", \"listen_ip\": \"0.0.0.0\", \"server_port\": $VL_PORT,
                 \"network\": \"tcp\", \"networkSettings\": null, \"tls\": 0, \"flow\": null,
                 \"decryption\": null},
    \"users\": {\"users\": [{\"id\": 2, \"uuid\": \"$U2\", \"speed_limit\": null,
                            \"device_limit\": null}]}}"
NEW_NODE="\"13\": {\"type\": \"shadowsocks\",
    \"config\": {\"protocol\": \"shadowsocks\", \"listen_ip\": \"0.0.0.0\",
                 \"server_port\": $SS2_PORT, \"cipher\": \"$CIPHER\", \"server_key\": null},
    \"users\": {\"users\": [{\"id\": 3, \"uuid\": \"$U3\", \"speed_limit\": null,
                            \"device_limit\": null}]}}"
machine "$SS_NODE, $VL_NODE"

cat >"$T/config.json" <<EOF
{"log": {"level": "debug"}, "workers": 1, "api": {"listen": "127.0.0.1:$API_PORT"},
 "db": {"path": "$T/katana.db", "flush_interval": 1},
 "nodes": [{"tag": "m", "listen": "127.0.0.1", "allow_private": true,
            "panel": {"type": "xboard", "url": "http://127.0.0.1:$PANEL_PORT",
                      "token": "$MACHINE_TOKEN", "machine_id": 7, "timeout": 2}}]}
EOF
kat_start "$T/config.json"
check "the machine's vless node listens too" kt_wait_port "$VL_PORT" 10

# vl_client NAME UUID PORT: v2ray with a SOCKS5 inbound and a clear vless outbound; sets CL_PORT
vl_client() {
    kt_ports 1; CL_PORT=${PORTS[0]}
    cat >"$T/client-$1.json" <<EOF
{"log": {"loglevel": "warning", "access": "none"},
 "inbounds": [{"listen": "127.0.0.1", "port": $CL_PORT, "protocol": "socks",
   "settings": {"auth": "noauth", "udp": true, "ip": "127.0.0.1"}}],
 "outbounds": [{"protocol": "vless",
   "settings": {"vnext": [{"address": "127.0.0.1", "port": $3,
                           "users": [{"id": "$2", "encryption": "none"}]}]},
   "streamSettings": {"network": "tcp", "security": "none"}}]}
EOF
    kt_bg "client-$1" v2ray -config "$T/client-$1.json"
    kt_wait_port "$CL_PORT" 10 || { fail "v2ray client $1 did not listen on $CL_PORT"; exit 1; }
}

cl_start u1 "$CIPHER" "$U1" "$NODE_PORT"; C1=$CL_PORT
vl_client u2 "$U2" "$VL_PORT"; C2=$CL_PORT
stream_bg ss "$C1" "$MIB" 1048576 ok; S1=$STREAM_PID
stream_bg vl "$C2" "$MIB" 1048576 ok; S2=$STREAM_PID
stream_wait ss "$S1" 20 "the machine's shadowsocks node serves its user (1 MiB echoed)"
stream_wait vl "$S2" 20 "the machine's vless node serves its user (1 MiB echoed)"
check "the machine's status was reported (machine/status)" python3 -c '
import json, sys
st = json.loads(sys.argv[1])["machine_status"]
sys.exit(0 if st and all(k in st[-1] for k in ("cpu", "mem", "swap", "disk")) and
         str(st[-1]["machine_id"]) == "7" else 1)' "$(panel_ctl state)"

# a refused machine list (a CDN's HTML page with 200) keeps the last good one
panel_ctl raw '{"endpoint": "machine/nodes", "body": "<html>Checking your browser</html>"}'
H0=$(panel_hits machine/nodes)
for ((i = 0; i < 100; i++)); do [ "$(panel_hits machine/nodes)" -ge $((H0 + 3)) ] && break; sleep 0.1; done
check "three refused machine lists later the shadowsocks node still serves" tcp_rt "$C1" ok
check "and the vless node too" tcp_rt "$C2" ok
N_WARN=$(grep -c 'machine 7: .*keeping its 2 nodes' "$SRV_LOG")
check "one warning for the refused list, not one per pull (got $N_WARN)" test "$N_WARN" = 1
panel_ctl raw '{"endpoint": "machine/nodes", "body": null}'

# the vless node leaves the machine: it stops listening, and what it still held is pushed
sleep 2.5   # the sampler folds the streams' bytes, a flush writes them to the outbox
PEND=$(outbox_pending)
echo "outbox before the removal: [$(tr '\n' ';' <<<"$PEND")]"
check "user 2's usage is pending in the outbox before the removal" \
    bash -c "grep -q '^2 [1-9]' <<<'$PEND'"
machine "$SS_NODE"
for ((i = 0; i < 100; i++)); do kt_wait_port "$VL_PORT" 0.1 2>/dev/null || break; sleep 0.1; done
port_closed() { ! kt_wait_port "$1" 0.2 2>/dev/null; }
check "the removed node stops listening" port_closed "$VL_PORT"
check "the outbox is pushed empty" wait_outbox_empty 10
KAT=$(kat_snapshot)
check "the panel's per-user totals equal katana's usage exactly" \
    same_totals "totals" "$KAT" "$(panel_totals)"
check "the removed node's usage went through the machine's other node" python3 -c '
import json, sys
nt = json.loads(sys.argv[1])["node_totals"]
sys.exit(0 if "2" in nt.get("11", {}) and "12" not in nt else 1)' "$(panel_ctl state)"

# a node added to the machine appears and serves its user
machine "$SS_NODE, $NEW_NODE"
check "the added node listens" kt_wait_port "$SS2_PORT" 10
cl_start u3 "$CIPHER" "$U3" "$SS2_PORT"; C3=$CL_PORT
stream_bg added "$C3" 262144 1048576 ok; S3=$STREAM_PID
stream_wait added "$S3" 20 "the added node serves its user"
check "the first node still serves" tcp_rt "$C1" ok
kat_stop
check "katana exits 0" test "$SRV_RC" = 0

# a restart while the panel is down serves the machine's stored list with its nodes' stored state
panel_ctl down '{"down": true}'
kat_start "$T/config.json"
check "after a restart with the panel down the added node listens again" kt_wait_port "$SS2_PORT" 10
check "and serves its user" tcp_rt "$C3" ok
check "the removed node stays stopped" port_closed "$VL_PORT"
kat_stop
check "katana exits 0 again" test "$SRV_RC" = 0
kt_finish
