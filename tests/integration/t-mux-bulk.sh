#!/bin/bash
# No transfer through a multiplexed path is cut while both ends are alive (issue 24): through
# every path whose flows are sub-flows of one client connection, KT_BULK_BYTES move at full
# speed up (client to the far end), then down, each on a connection of its own through the
# real client's SOCKS5 inbound, to and from tests/integration/bulkcheck's server, which counts
# and compares every byte: a transfer passes only when the far end got exactly KT_BULK_BYTES
# identical bytes (up), or exactly that many identical bytes arrived (down).
# Paths and clients (one katana node each, VLESS unless said):
#   gRPC in clear (h2c)         Xray-core, sing-box (its full gRPC client)
#   gRPC over TLS               Xray-core, sing-box
#   gRPC over REALITY           Xray-core, sing-box
#   Mux.Cool over TCP           Xray-core ("mux" on; sing-box speaks no Mux.Cool)
#   v2ray-plugin mux            ss-local + ss-v2ray-plugin, mux=1 (Shadowsocks, Mux.Cool over
#                               WebSocket; neither Xray-core nor sing-box has this client)
# KT_BULK_BYTES: 1 GiB each way per client in a plain build, 256 MiB in a sanitizer build
# (KATANA_ASAN=yes, set by `make check` from configure), whose katana is 3-5x slower.
KT_LIMIT=${KT_LIMIT:-600}
. "$(dirname "$0")/reality.sh"
rl_need xray sing-box
kt_need jq

if [ "${KATANA_ASAN:-no}" = yes ]; then
    BYTES=${KT_BULK_BYTES:-$((256 << 20))}
else
    BYTES=${KT_BULK_BYTES:-$((1 << 30))}
fi
# a transfer that has not ended after this many seconds stalled (the byte rate is not checked)
STALL=${KT_BULK_STALL:-240}
SERVICE=kt-tun
GRACE=1
SID=0123abcd
U1=$(kt_uuid)
BULKCHECK=${KATANA_TOP_BUILDDIR:-$KT_DIR/../..}/tests/integration/bulkcheck
[ -x "$BULKCHECK" ] || { fail "no $BULKCHECK (make check builds it)"; exit 1; }
echo "moving $BYTES bytes each way per client"

tj_certs "$T/pki" server
kt_bg bulk "$BULKCHECK" serve "$T/bulk.port"
kt_wait_file "$T/bulk.port" 10 || { fail "bulkcheck serve did not start"; exit 1; }
BULK_PORT=$(cat "$T/bulk.port")

# transfer up|down SOCKS_PORT SEED: one bulkcheck transfer; when it fails, katana's debug
# lines on why its flows and streams closed follow.
transfer() {
    "$BULKCHECK" "$1" "$2" "$BULK_PORT" "$BYTES" "$3" "$STALL" && return 0
    echo "katana's closes meanwhile:"; grep -E "closed|reset" "$SRV_LOG" | tail -n 5
    return 1
}

# move WHAT SOCKS_PORT: BYTES up, then BYTES down, through the client on SOCKS_PORT.
move() {
    local seed; seed=$(tr -cs 'A-Za-z0-9\n' '-' <<<"$1")
    check "$1: $BYTES bytes up at full speed, all of them at the far end, identical" \
        transfer up "$2" "$seed-up"
    check "$1: $BYTES bytes down at full speed, all of them, identical" \
        transfer down "$2" "$seed-down"
}

# node NAME PORT [mkconfig options]: katana with one node of user U1 on PORT, logging at
# debug (a flow's close says why: issue 24).
node() {
    local name=$1 port=$2; shift 2
    mkconfig "$T/config-$name.json" "$port" "$@" --user "1:$U1" --grace "$GRACE" \
        --log-level debug
}

# serve NAME PORT: katana on $T/config-NAME.json (its node on PORT).
serve() {
    SRV_LOG=$T/server-$1.log
    srv_start "$T/config-$1.json"
}

# stop NAME: katana stops; it must have exited 0 and still served until then.
stop() {
    check "$1: daemon still runs" srv_alive
    srv_stop
    check "$1: SIGTERM: katana exits 0" test "$SRV_RC" = 0
}

# client VENDOR TEMPLATE NAME SERVER_PORT [EDIT]: the vendor's client of
# tests/interop/VENDOR/client-TEMPLATE.json for user U1 towards SERVER_PORT, with the Python
# statement EDIT applied to its config `c` first; sets CL_PORT.
client() {
    kt_ports 1; CL_PORT=${PORTS[0]}
    pr_render "$PR_TEMPLATES/$1/client-$2.json" "$T/client-$3.json" LOCAL_PORT="$CL_PORT" \
        SERVER_PORT="$4" SECRET="$U1" SNI="$TJ_SNI" CA_FILE="$TJ_CA" PUBLIC_KEY="${PUB:-}" \
        SHORT_ID="$SID"
    python3 - "$T/client-$3.json" "${5:-pass}" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
exec(sys.argv[2])
json.dump(c, open(sys.argv[1], "w"))
PY
    pr_cmd "$1" "$T/client-$3.json"
    kt_bg "client-$3" "${PR_CMD[@]}"
    kt_wait_port "$CL_PORT" 10 || { fail "$1 client $3 did not listen"; exit 1; }
}

XRAY_CLEAR='s = c["outbounds"][0]["streamSettings"]; s["security"] = "none"; del s["tlsSettings"]'
SB_CLEAR='del c["outbounds"][0]["tls"]'
XRAY_MUX='c["outbounds"][0]["mux"] = {"enabled": True, "concurrency": 8}'

# --- gRPC in clear and over TLS --------------------------------------------------------------
kt_ports 1; P=${PORTS[0]}
node h2c "$P" - --protocol vless --grpc-service "$SERVICE"
serve h2c
client xray vless-grpc h2c-xray "$P" "$XRAY_CLEAR"; move "gRPC h2c, Xray-core" "$CL_PORT"
client sing-box vless-grpc h2c-sb "$P" "$SB_CLEAR"; move "gRPC h2c, sing-box" "$CL_PORT"
stop "gRPC h2c"

kt_ports 1; P=${PORTS[0]}
node tls "$P" - --protocol vless --grpc-service "$SERVICE" --cert-file "$TJ_CERT" \
    --key-file "$TJ_KEY"
serve tls
client xray vless-grpc tls-xray "$P"; move "gRPC over TLS, Xray-core" "$CL_PORT"
client sing-box vless-grpc tls-sb "$P"; move "gRPC over TLS, sing-box" "$CL_PORT"
stop "gRPC over TLS"

# --- gRPC over REALITY (the node's tls 2 and tls_settings, PANEL.md §1.4) ---------------------
rl_keys
rl_target "bulk target $$"   # sets NODE_PORT, TARGET_PORT
node reality "$NODE_PORT" - --protocol vless --grpc-service "$SERVICE"
jq --argjson t "$TARGET_PORT" --arg k "$PRIV" --arg s "$SID" '.nodes[0].panel.node.tls = 2 |
    .nodes[0].panel.node.tls_settings = {server_name: "localhost", server_port: $t,
                                         private_key: $k, short_id: $s}' \
    "$T/config-reality.json" >"$T/c.tmp" && mv "$T/c.tmp" "$T/config-reality.json"
serve reality
TJ_SNI=localhost client xray vless-reality-grpc reality-xray "$NODE_PORT"
move "gRPC over REALITY, Xray-core" "$CL_PORT"
TJ_SNI=localhost client sing-box vless-reality-grpc reality-sb "$NODE_PORT"
move "gRPC over REALITY, sing-box" "$CL_PORT"
stop "gRPC over REALITY"

# --- Mux.Cool over TCP -----------------------------------------------------------------------
kt_ports 1; P=${PORTS[0]}
node mux "$P" - --protocol vless
serve mux
client xray vless-tcp mux-xray "$P" "$XRAY_MUX"; move "Mux.Cool, Xray-core" "$CL_PORT"
stop "Mux.Cool"

# --- the v2ray-plugin's mux (Shadowsocks over Mux.Cool over WebSocket) ------------------------
if command -v ss-local >/dev/null && command -v ss-v2ray-plugin >/dev/null; then
    kt_ports 2; P=${PORTS[0]}; CL_PORT=${PORTS[1]}
    node plugin "$P" aes-128-gcm --plugin-opts "path=/ss-ws;host=$TJ_SNI;mux=1"
    serve plugin
    kt_bg client-plugin ss-local -s 127.0.0.1 -p "$P" -b 127.0.0.1 -l "$CL_PORT" -k "$U1" \
        -m aes-128-gcm --plugin ss-v2ray-plugin --plugin-opts "path=/ss-ws;host=$TJ_SNI;mux=1"
    kt_wait_port "$CL_PORT" 10 || { fail "ss-local did not listen on $CL_PORT"; exit 1; }
    move "v2ray-plugin mux, ss-local" "$CL_PORT"
    stop "v2ray-plugin mux"
else
    echo "SKIP: $KT_NAME: v2ray-plugin mux: ss-local or ss-v2ray-plugin is not installed"
fi
kt_finish
