#!/bin/bash
# A route change reaches the next sub-flow of a live multiplexed connection (issue 24; seed 000
# "plane": every new flow reads the current plane, its test
# a_route_change_reaches_the_next_mux_sub_flow_of_a_live_session), and each sub-flow is sniffed
# like a plain TCP flow (seed 000: the demuxer sniffs each sub-flow's first payload). Three real
# clients, each carrying every proxied connection in one TCP connection: v2ray 4.34 with Mux.Cool
# over VLESS, Xray-core over VLESS over gRPC in clear (one HTTP/2 stream each), and ss-local
# with ss-v2ray-plugin, mux=8 (a Shadowsocks stream per Mux.Cool session over WebSocket). On
# each:
#  - a paced transfer to 127.0.0.2 runs as a sub-flow; a SIGHUP adds block routes for
#    127.0.0.2/32 and domain:blocked.test: the next sub-flow to 127.0.0.2 is refused, an HTTP
#    request to 127.0.0.1 with "Host: blocked.test" is refused while one with "Host: open.test"
#    is answered, and the transfer already open keeps running;
#  - a second SIGHUP changes the shared direct outbound's socket policy (a new version; the old
#    one drained with the default Keep): the next sub-flow is opened on the new version, in the
#    same session as the transfer, which still runs on the old one; both complete byte-identical;
#  - then a sub-flow whose server speaks first (no payload to sniff) is relayed once the sniff's
#    time bound passes.
KT_LIMIT=${KT_LIMIT:-180}
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/../interop/peers.sh"
kt_need v2ray curl jq ss-local ss-v2ray-plugin
pr_need xray
[ "$KT_SERVER" = katana ] || skip_all "KT_SERVER=$KT_SERVER: katana only"

SERVICE=kt-tun
U1=$(kt_uuid)
echo_start
kt_ports 1; HTTP_PORT=${PORTS[0]}
kt_bg httpd "${KT_PY[@]}" httpd --port "$HTTP_PORT" --body "plain-ok" --ready-file "$T/httpd.ready"
kt_wait_file "$T/httpd.ready" 10 || { fail "httpd did not start"; exit 1; }

# api METHOD PATH: print the status code; the body is in $T/body.
api() {
    curl -sS -m 10 -X "$1" -H "Authorization: Bearer $TOKEN" -o "$T/body" -w '%{http_code}' \
        "http://127.0.0.1:$API_PORT$2"
}
# flow_field ID FIELD: a live flow's field ("null" when the flow is not live)
flow_field() {
    api GET /v1/connections >/dev/null
    jq -r --argjson id "$1" --arg f "$2" '[.flows[] | select(.id == $id)][0][$f]' "$T/body"
}
# newest_flow: the id of user 1's newest live flow
newest_flow() {
    api GET /v1/connections >/dev/null
    jq -r '[.flows[] | select(.user.uid == 1) | .id] | max' "$T/body"
}
# n_flows N: user 1 has N live flows
n_flows() {
    api GET /v1/connections >/dev/null
    [ "$(jq '[.flows[] | select(.user.uid == 1)] | length' "$T/body")" = "$1" ]
}
# one_session: user 1's live flows all belong to one session (one client connection)
one_session() {
    api GET /v1/connections >/dev/null
    [ "$(jq '[.flows[] | select(.user.uid == 1) | .session] | unique | length' "$T/body")" = 1 ]
}
# http_via SOCKS HOST: the body the HTTP server answers to a request naming HOST, sent to
# 127.0.0.1 through the client (curl sends the IP: only sniffing sees the name)
http_via() {
    curl -sS -m 5 --socks5 "127.0.0.1:$1" -H "Host: $2" "http://127.0.0.1:$HTTP_PORT/" 2>/dev/null ||
        true
}

# speaks_first SOCKS: through the client, a server on 127.0.0.1 that greets first; the client
# reads the greeting without sending a byte, then echoes one line (bounded: 15 s). Its sub-flow
# has no first payload to sniff: it is routed once SV_SNIFF_MS passed.
speaks_first() {
    timeout 15 python3 - "$1" "$KT_DIR" <<'PY'
import socket, sys, threading
sys.path.insert(0, sys.argv[2])
import katest
ls = socket.socket()
ls.bind(("127.0.0.1", 0))
ls.listen(1)
def serve():
    c, _ = ls.accept()
    c.sendall(b"220 hello\r\n")
    c.sendall(c.recv(100))
    c.close()
threading.Thread(target=serve, daemon=True).start()
s, _, _ = katest.socks_open(int(sys.argv[1]), 1, "127.0.0.1", ls.getsockname()[1], 10)
s.settimeout(10)
assert katest.recv_exact(s, 11) == b"220 hello\r\n"
s.sendall(b"HELO x\r\n")
assert katest.recv_exact(s, 8) == b"HELO x\r\n"
PY
}

# write_config NAME IDLE ROUTES CIPHER [mkconfig options]: the node's config with the shared
# direct outbound's keepalive idle time IDLE (a change is a new version) and block routes ROUTES
# (JSON)
write_config() {
    local name=$1 idle=$2 routes=$3 cipher=$4; shift 4
    mkconfig "$T/base-$name.json" "$PORT" "$cipher" --user "1:$U1" "$@"
    jq --arg l "127.0.0.1:$API_PORT" --arg t "$TOKEN" --argjson idle "$idle" \
        --argjson r "$routes" '.api = {listen: $l, token: $t}
        | .outbound = {tcp_keepalive: {idle: $idle, interval: 10, count: 5}}
        | .nodes[0].panel.node.routes = [{id: 1, match: $r, action: "block"}]' \
        "$T/base-$name.json" >"$T/config-$name.json"
}

# v2ray_client NAME: v2ray, SOCKS5 inbound, VLESS outbound with Mux.Cool; sets CL_PORT
v2ray_client() {
    kt_ports 1; CL_PORT=${PORTS[0]}
    cat >"$T/client-$1.json" <<JSON
{"log": {"loglevel": "warning", "access": "none"},
 "inbounds": [{"listen": "127.0.0.1", "port": $CL_PORT, "protocol": "socks",
   "settings": {"auth": "noauth", "udp": false}}],
 "outbounds": [{"protocol": "vless", "mux": {"enabled": true, "concurrency": 8},
   "settings": {"vnext": [{"address": "127.0.0.1", "port": $PORT,
     "users": [{"id": "$U1", "encryption": "none"}]}]},
   "streamSettings": {"network": "tcp", "security": "none"}}]}
JSON
    kt_bg "client-$1" v2ray -config "$T/client-$1.json"
}
# xray_client NAME: Xray, SOCKS5 inbound, VLESS over gRPC in clear; sets CL_PORT
xray_client() {
    kt_ports 1; CL_PORT=${PORTS[0]}
    pr_render "$PR_TEMPLATES/xray/client-vless-grpc.json" "$T/client-$1.json" \
        LOCAL_PORT="$CL_PORT" SERVER_PORT="$PORT" SECRET="$U1" SNI=unused CA_FILE=unused
    jq '.outbounds[0].streamSettings.security = "none"
        | del(.outbounds[0].streamSettings.tlsSettings)' "$T/client-$1.json" >"$T/c.tmp" &&
        mv "$T/c.tmp" "$T/client-$1.json"
    pr_cmd xray "$T/client-$1.json"
    kt_bg "client-$1" "${PR_CMD[@]}"
}
# plugin_client NAME: ss-local with ss-v2ray-plugin, Mux.Cool over WebSocket (mux=8); sets
# CL_PORT
plugin_client() {
    kt_ports 1; CL_PORT=${PORTS[0]}
    kt_bg "client-$1" ss-local -s 127.0.0.1 -p "$PORT" -b 127.0.0.1 -l "$CL_PORT" -k "$U1" \
        -m "$CIPHER" --plugin ss-v2ray-plugin --plugin-opts "path=/ss-ws;host=node.test;mux=8"
}

# scenario NAME CLIENT CIPHER [mkconfig options]
scenario() {
    local n=$1 client=$2; shift 2
    kt_ports 2; PORT=${PORTS[0]}; API_PORT=${PORTS[1]}; TOKEN=route-$$
    write_config "$n" 60 '["domain:never.test"]' "$@"
    srv_start "$T/config-$n.json"
    kt_wait_port "$API_PORT" 10 || { fail "API did not listen on $API_PORT"; exit 1; }
    "$client" "$n"
    local cl=$CL_PORT
    kt_wait_port "$cl" 10 || { fail "$n: client did not listen on $cl"; exit 1; }

    kt_bg "$n-a" "${KT_PY[@]}" tcp --socks "$cl" --dest-host 127.0.0.2 --dest-port "$ECHO_PORT" \
        --bytes 4000000 --rate 400000 --chunk 4096 --expect ok --timeout 10 --seed "$n-a" \
        --label "$n-a" --ready-file "$T/$n-a.ready" --unpace-file "$T/$n-a.unpace"
    local pa=$BG_PID
    kt_wait_file "$T/$n-a.ready" 10 || { fail "$n: transfer a did not start"; exit 1; }
    check "$n: transfer a (to 127.0.0.2) is a live flow" kt_until 5 n_flows 1
    local fa; fa=$(newest_flow)
    local va; va=$(flow_field "$fa" outbound)
    kt_log "$n: transfer a is flow $fa on $va"

    write_config "$n" 60 '["127.0.0.2/32", "domain:blocked.test"]' "$@"
    srv_reload
    check "$n: the reload with the block routes is applied" reload_applied
    check "$n: the next sub-flow to 127.0.0.2 is refused" \
        tcp_rt "$cl" refused --dest-host 127.0.0.2 --bytes 4096 --seed "$n-r"
    check "$n: a sub-flow to 127.0.0.1 naming Host: blocked.test is refused (sniffed)" \
        test "$(http_via "$cl" blocked.test)" != plain-ok
    check "$n: ... one naming Host: open.test is answered" \
        test "$(http_via "$cl" open.test)" = plain-ok
    check "$n: transfer a, opened before, still runs" test "$(flow_field "$fa" id)" = "$fa"

    write_config "$n" 61 '["127.0.0.2/32", "domain:blocked.test"]' "$@"
    srv_reload
    check "$n: the reload with a new direct version is applied" reload_applied
    kt_bg "$n-b" "${KT_PY[@]}" tcp --socks "$cl" --dest-port "$ECHO_PORT" --bytes 400000 \
        --rate 200000 --chunk 4096 --expect ok --timeout 10 --seed "$n-b" --label "$n-b" \
        --ready-file "$T/$n-b.ready" --unpace-file "$T/$n-b.unpace"
    local pb=$BG_PID
    kt_wait_file "$T/$n-b.ready" 10 || { fail "$n: transfer b did not start"; exit 1; }
    local fb; fb=$(newest_flow)
    local vb; vb=$(flow_field "$fb" outbound)
    kt_log "$n: transfer b is flow $fb on $vb"
    check "$n: the next sub-flow opens on the new direct version ($vb, not $va)" \
        bash -c '[[ $1 == direct@* && $1 != "$2" ]]' _ "$vb" "$va"
    check "$n: ... in the same session as transfer a" one_session
    check "$n: transfer a is still on $va" test "$(flow_field "$fa" outbound)" = "$va"
    stream_unpace "$n-a" "$n-b"
    stream_wait "$n-a" "$pa" 30 "$n: transfer a completes byte-identical"
    stream_wait "$n-b" "$pb" 30 "$n: transfer b completes byte-identical"
    # nothing else moves on the connection now: the sniff's time bound alone opens it
    check "$n: a sub-flow whose server speaks first is relayed (nothing to sniff)" \
        speaks_first "$cl"
    srv_stop
    check "$n: SIGTERM: katana exits 0" test "$SRV_RC" = 0
}

CIPHER=aes-128-gcm
scenario v2ray-mux v2ray_client - --protocol vless
scenario xray-grpc xray_client - --protocol vless --grpc-service "$SERVICE" --grace 1
scenario v2ray-plugin-mux plugin_client "$CIPHER" --plugin-opts "path=/ss-ws;host=node.test;mux=1" \
    --grace 1
kt_finish
