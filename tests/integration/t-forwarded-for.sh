#!/bin/bash
# A WebSocket node behind an HTTP proxy (nodes[].trusted_forwarders): Debian's HAProxy in
# `mode http` with `option forwardfor` fronts two VLESS-over-WebSocket nodes of one katana, its
# own side bound to 127.0.0.5. Node T trusts 127.0.0.5, node U trusts no one. Real v2ray
# clients: through HAProxy to T the API lists each flow with the client's address (127.0.0.1,
# and 127.0.0.2 through `katest relay --source 127.0.0.2`), not the proxy's; through HAProxy
# to U it lists 127.0.0.5; a client dialing T itself with a forged X-Forwarded-For keeps its
# socket's address (127.0.0.1 is not a trusted forwarder: a debug line says the header was
# ignored), and through HAProxy the element HAProxy appended counts, not the forged one;
# Xray's VMess over HTTPUpgrade straight to node H, which trusts 127.0.0.0/29, is listed with
# the address its own X-Forwarded-For or X-Real-IP names (a value that is no address: the
# socket's); user 1's device limit of 1 tells the two clients behind the proxy apart.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/../interop/peers.sh"
kt_need v2ray haproxy curl jq
pr_need xray
[ "$KT_SERVER" = katana ] || skip_all "trusted_forwarders needs katana"

TOKEN=t0ken-$$
WS_PATH=/xff
U1=$(kt_uuid); U2=$(kt_uuid); U3=$(kt_uuid)
echo_start
kt_ports 7
SRV_T=${PORTS[0]}; SRV_U=${PORTS[1]}; API_PORT=${PORTS[2]}; HT=${PORTS[3]}; HU=${PORTS[4]}
RELAY=${PORTS[5]}; SRV_H=${PORTS[6]}
mkconfig "$T/base.json" "$SRV_T" - --protocol vless --user "1:$U1:1" --user "2:$U2" \
    --ws-path "$WS_PATH" --ws-host node.test --log-level debug
# node H: VMess over HTTPUpgrade (path /hu, Host node.test) trusting 127.0.0.0/29, so its own
# clients on 127.0.0.1 act as the forwarding proxy (HAProxy answers 400 to an upgrade request
# without Sec-WebSocket-Key, as HTTPUpgrade's are)
mkconfig "$T/hu.json" "$SRV_H" - --protocol vmess --user "3:$U3" --network httpupgrade \
    --ws-path /hu --ws-host node.test
jq --arg l "127.0.0.1:$API_PORT" --arg t "$TOKEN" --argjson pu "$SRV_U" \
    --slurpfile hu "$T/hu.json" '
    .api = {listen: $l, token: $t}
    | .nodes[1] = (.nodes[0] | .tag = "u" | .panel.node.server_port = $pu)
    | .nodes[2] = ($hu[0].nodes[0] | .tag = "h" | .trusted_forwarders = ["127.0.0.0/29"])
    | .nodes[0].trusted_forwarders = ["127.0.0.5"]' "$T/base.json" >"$T/config.json"
srv_start "$T/config.json"
kt_wait_port "$SRV_U" 10 || { fail "node U did not listen on $SRV_U"; exit 1; }
kt_wait_port "$SRV_H" 10 || { fail "node H did not listen on $SRV_H"; exit 1; }
kt_wait_port "$API_PORT" 10 || { fail "API did not listen on $API_PORT"; exit 1; }

cat >"$T/haproxy.cfg" <<EOF
global
    maxconn 64
defaults
    mode http
    option forwardfor
    timeout connect 5s
    timeout client 30s
    timeout server 30s
    timeout tunnel 30s
frontend ft
    bind 127.0.0.1:$HT
    default_backend node_t
backend node_t
    server k 127.0.0.1:$SRV_T source 127.0.0.5
frontend fu
    bind 127.0.0.1:$HU
    default_backend node_u
backend node_u
    server k 127.0.0.1:$SRV_U source 127.0.0.5
EOF
kt_bg haproxy haproxy -db -f "$T/haproxy.cfg"
kt_wait_port "$HT" 10 && kt_wait_port "$HU" 10 || { fail "haproxy did not listen"; exit 1; }
kt_bg relay "${KT_PY[@]}" relay --port "$RELAY" --to "$HT" --source 127.0.0.2 \
    --ready-file "$T/relay.ready"
kt_wait_file "$T/relay.ready" 10 || { fail "relay did not start"; exit 1; }

# client NAME UUID PORT [EXTRA_HEADERS_JSON]: v2ray, SOCKS5 in, VLESS over WebSocket out
# (path $WS_PATH, Host node.test and the extra headers); sets CL_PORT once it listens.
client() {
    kt_ports 1; CL_PORT=${PORTS[0]}
    cat >"$T/client-$1.json" <<EOF
{"log": {"loglevel": "warning", "access": "none"},
 "inbounds": [{"listen": "127.0.0.1", "port": $CL_PORT, "protocol": "socks",
   "settings": {"auth": "noauth", "udp": false, "ip": "127.0.0.1"}}],
 "outbounds": [{"protocol": "vless",
   "settings": {"vnext": [{"address": "127.0.0.1", "port": $3,
                           "users": [{"id": "$2", "encryption": "none"}]}]},
   "streamSettings": {"network": "ws", "security": "none",
     "wsSettings": {"path": "$WS_PATH", "headers": {"Host": "node.test"${4:+, $4}}}}}]}
EOF
    kt_bg "client-$1" v2ray -config "$T/client-$1.json"
    kt_wait_port "$CL_PORT" 10 || { fail "v2ray client $1 did not listen"; exit 1; }
}

api() {
    curl -sS -m 10 -H "Authorization: Bearer $TOKEN" -o "$T/body" -w '%{http_code}' \
        "http://127.0.0.1:$API_PORT$1"
}
# source_of UID: the source address (without the port) of user UID's live flow, "" when none.
source_of() {
    api /v1/connections >/dev/null
    jq -r --argjson u "$1" '[.flows[] | select(.user.uid == $u) | .source][0] // "" |
                            sub(":[0-9]+$"; "")' "$T/body"
}
# wait_source UID ADDR: until user UID's flow comes from ADDR (10 s).
wait_source() {
    local i s
    for i in $(seq 1 100); do
        s=$(source_of "$1"); [ "$s" = "$2" ] && return 0
        sleep 0.1
    done
    echo "user $1's flow source: '$s', expected $2"; return 1
}
# held NAME SOCKS UID ADDR WHAT: a held flow of user UID whose source must be ADDR (once the
# user's earlier flows are gone, so that none of them can answer for it).
held() {
    local i
    for i in $(seq 1 100); do [ -z "$(source_of "$3")" ] && break; sleep 0.1; done
    stream_bg "$1" "$2" 262144 131072 ok; local p=$STREAM_PID
    check "$5" wait_source "$3" "$4"
    stream_unpace "$1"
    stream_wait "$1" "$p" 30 "$1: the held flow echoed whole"
}

client a2 "$U2" "$HT"; A2=$CL_PORT
client b2 "$U2" "$RELAY"; B2=$CL_PORT
client u2 "$U2" "$HU"; UU=$CL_PORT
FORGED='"X-Forwarded-For": "10.9.9.9", "X-Real-IP": "10.9.9.8"'
client f2 "$U2" "$SRV_T" "$FORGED"; F2=$CL_PORT
client p2 "$U2" "$HT" "$FORGED"; P2=$CL_PORT
held a2 "$A2" 2 127.0.0.1 "trusted proxy: the flow's source is the client's 127.0.0.1"
held b2 "$B2" 2 127.0.0.2 "trusted proxy: the relayed client's source is 127.0.0.2"
held u2 "$UU" 2 127.0.0.5 "a node without trusted_forwarders: the source is the proxy's"
held f2 "$F2" 2 127.0.0.1 "a forged X-Forwarded-For from an untrusted peer is ignored"
held p2 "$P2" 2 127.0.0.1 \
    "a forged header through the proxy: the address the proxy itself added counts"
# hu_client NAME HEADERS_JSON: Xray's VMess over HTTPUpgrade to node H with these headers.
hu_client() {
    kt_ports 1; CL_PORT=${PORTS[0]}
    cat >"$T/client-$1.json" <<EOF
{"log": {"loglevel": "warning", "access": "none"},
 "inbounds": [{"listen": "127.0.0.1", "port": $CL_PORT, "protocol": "socks",
   "settings": {"auth": "noauth", "udp": false, "ip": "127.0.0.1"}}],
 "outbounds": [{"protocol": "vmess",
   "settings": {"vnext": [{"address": "127.0.0.1", "port": $SRV_H,
                           "users": [{"id": "$U3", "security": "aes-128-gcm"}]}]},
   "streamSettings": {"network": "httpupgrade", "security": "none",
     "httpupgradeSettings": {"path": "/hu", "host": "node.test", "headers": {$2}}}}]}
EOF
    pr_cmd xray "$T/client-$1.json"
    kt_bg "client-$1" "${PR_CMD[@]}"
    kt_wait_port "$CL_PORT" 10 || { fail "xray client $1 did not listen"; exit 1; }
}
hu_client h3 '"X-Forwarded-For": "198.51.100.7, 203.0.113.9"'; H3=$CL_PORT
hu_client r3 '"X-Real-IP": "2001:db8::5"'; R3=$CL_PORT
hu_client m3 '"X-Forwarded-For": "not-an-address"'; M3=$CL_PORT
held h3 "$H3" 3 203.0.113.9 "HTTPUpgrade from a trusted peer: X-Forwarded-For's right-most element"
held r3 "$R3" 3 '[2001:db8::5]' "HTTPUpgrade from a trusted peer: X-Real-IP, an IPv6 address"
held m3 "$M3" 3 127.0.0.1 "a header that is not an IP address is ignored"
check "a debug line says so" \
    grep -q 'forwarded address "not-an-address" from 127.0.0.1:[0-9]* ignored: not an IP' "$SRV_LOG"
check "a debug line says the forged header was ignored" \
    grep -q 'forwarded address "10.9.9.9" from 127.0.0.1:[0-9]* ignored: not a trusted forwarder' \
    "$SRV_LOG"

# --- the device limit sees the forwarded address ----------------------------------------
client a1 "$U1" "$HT"; A1=$CL_PORT
client b1 "$U1" "$RELAY"; B1=$CL_PORT
stream_bg held1 "$A1" 1048576 262144 ok; P=$STREAM_PID
check "user 1 holds a session from 127.0.0.1" wait_source 1 127.0.0.1
check "device limit 1: user 1 from 127.0.0.2 refused (the proxy's address is the same)" \
    tcp_rt "$B1" refused --bytes 4096 --seed d1
stream_unpace held1
stream_wait held1 "$P" 30 "device limit: the first client's flow never cut"

check "daemon still runs" srv_alive
srv_stop
check "daemon exits 0 on SIGTERM" test "$SRV_RC" = 0
kt_finish
