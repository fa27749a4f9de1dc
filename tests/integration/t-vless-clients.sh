#!/bin/bash
# VLESS with real clients (issue 9, PROTOCOLS.md §5; issue 10): v2ray 4.34 by default, or
# KT_CLIENT=xray or sing-box (tests/interop/, proven by t-peers-selftest.sh; Xray sends UDP as
# XUDP, Mux.Cool with a GlobalID and an address per datagram, issue 10; sing-box as plain
# VLESS UDP). A vless node in clear (tls 0) and
# one over TLS (tls 1, verified against a test CA), each on TCP and (v2ray only) on WebSocket
# (network ws, networkSettings path /vl-ws and headers.Host node.test; scenarios vless-tcp,
# vless-tls, vless-ws, vless-ws-tls). On each: two users at the same
# time move 1 MiB byte-identical each way, UDP (command 2) goes through the client's SOCKS5 UDP
# ASSOCIATE, and each user is billed the bytes its client moved: on TCP in clear exactly (usage
# counts the client's wire bytes: payload, the 26-byte request and 2-byte response header per
# connection, a 2-byte length per datagram), over TLS within [that, +5% + 4 KiB] (records); on
# WebSocket exactly the wire bytes a relay between client and katana counted (less the
# client's close_notify over TLS); an idle user is billed nothing. On WebSocket an upgrade on
# another path gets HTTP 404. A client with a wrong UUID gets no echo and no log line, and the
# daemon serves the others unaffected; requests naming their destination (localhost) are
# served. Over TLS with a fallback, a browser's request reaches the fallback web server. First,
# `katana check` refuses what is not served (REALITY, flow, VLESS encryption, xhttp, a uuid that
# is not a UUID) naming it.
# KT_NETS selects the transport: tcp (default: the refusals, vless-tcp, vless-tls) or ws
# (vless-ws, vless-ws-tls; t-vless-ws.sh runs this script so).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/trojan.sh"
. "$(dirname "$0")/../interop/peers.sh"
case $KT_CLIENT in
    "" | v2ray) kt_need v2ray openssl curl; CLIENT=v2ray ;;
    xray | sing-box) kt_need openssl curl; pr_need "$KT_CLIENT"; CLIENT=$KT_CLIENT ;;
    *) skip_all "KT_CLIENT=$KT_CLIENT: no VLESS client of that name" ;;
esac
pr_tcp_opts "$CLIENT" vless-tcp
[ "${KT_NETS:-tcp}" = tcp ] || [ "$CLIENT" = v2ray ] ||
    skip_all "KT_NETS=$KT_NETS with KT_CLIENT=$CLIENT: the WebSocket runs use v2ray only"
[ "$KT_SERVER" = katana ] || skip_all "KT_SERVER=$KT_SERVER: no reference VLESS server mode"

MIB=1048576
# shutdown_grace of the nodes served: the clients' connections are still open at SIGTERM, so
# katana waits this long before it closes them (the default 5 s only adds time)
GRACE=1
U1=$(kt_uuid); U2=$(kt_uuid); U3=$(kt_uuid); WRONG=$(kt_uuid)
tj_certs "$T/pki" server
echo_start

WS_PATH=/vl-ws
# vl_client NAME UUID SERVER_PORT TLS NET: v2ray with a SOCKS5 inbound (UDP on) and a vless
# outbound (encryption none) on NET (tcp, or ws: path $WS_PATH, Host node.test), over TLS for
# node.test verified against $TJ_CA when TLS is 1 (the shape of
# ../shared/interop/templates/v2ray/client-vless-{tcp,tls,ws,ws-tls}.json); sets CL_PORT. It
# starts the client only: kt_listening waits until the clients started listen (they start side
# by side, and none connects before it is used).
vl_client() {
    local ws='' sec='"security": "none"'
    [ "$5" = ws ] && ws=', "wsSettings": {"path": "'$WS_PATH'", "headers": {"Host": "'$TJ_SNI'"}}'
    if [ "$4" = 1 ]; then
        sec='"security": "tls", "tlsSettings": {"serverName": "'$TJ_SNI'",
          "allowInsecure": false, "certificates": [{"usage": "verify",
          "certificateFile": "'$TJ_CA'"}]}'
    fi
    local stream='{"network": "'$5'", '$sec$ws'}'
    kt_ports 1; CL_PORT=${PORTS[0]}
    cat >"$T/client-$1.json" <<EOF
{"log": {"loglevel": "warning", "access": "none"},
 "inbounds": [{"listen": "127.0.0.1", "port": $CL_PORT, "protocol": "socks",
   "settings": {"auth": "noauth", "udp": true, "ip": "127.0.0.1"}}],
 "outbounds": [{"protocol": "vless",
   "settings": {"vnext": [{"address": "127.0.0.1", "port": $3,
                           "users": [{"id": "$2", "encryption": "none"}]}]},
   "streamSettings": $stream}]}
EOF
    kt_bg "client-$1" v2ray -config "$T/client-$1.json"
    kt_listen_later "v2ray client $1" "$CL_PORT"
}

# client NAME UUID SERVER_PORT TLS NET: the client under test ($CLIENT; NET ws with v2ray
# only); sets CL_PORT. Then kt_listening.
client() {
    if [ "$CLIENT" = v2ray ]; then vl_client "$@"; return; fi
    local scen=vless-tcp; [ "$4" = 1 ] && scen=vless-tls
    pr_client "$CLIENT" "$scen" "$1" "$2" "$3"
}

# usage_snapshot: SIGUSR1 and the usage lines it logs (as in t-trojan-clients.sh).
usage_snapshot() {
    sleep 1.5   # the sampler folds flow counters every second
    srv_usage_mark
    kill -USR1 "$SRV_PID"
    for _ in $(seq 1 40); do [ -n "$(srv_usage)" ] && break; sleep 0.1; done
    sleep 0.3
    srv_usage
}
# billed LINES UID UP DOWN TLS: the user's usage is UP and DOWN bytes, exactly in clear (TLS
# 0), each within [it, it + 5% + 4 KiB] over TLS.
billed() {
    local up down
    read -r _ up down <<<"$(awk -v u="$2" '$1 == u' <<<"$1")"
    echo "user $2: up ${up:-none} down ${down:-none}, expected $3 and $4 (TLS $5)"
    [ -n "${up:-}" ] || return 1
    if [ "$5" = 0 ]; then
        [ "$up" = "$3" ] && [ "$down" = "$4" ]
    else
        [ "$up" -ge "$3" ] && [ "$up" -le $(($3 + $3 / 20 + 4096)) ] &&
            [ "$down" -ge "$4" ] && [ "$down" -le $(($4 + $4 / 20 + 4096)) ]
    fi
}
no_usage() {
    local l; l=$(awk -v u="$2" '$1 == u' <<<"$1")
    echo "user $2: '${l:-no line}'"
    [ -z "$l" ] || [ "$l" = "$2 0 0" ]
}

# usage_is LINES UID UP DOWN TLS NET: on tcp, billed as above; on ws, the wire bytes the
# relay of that user ($name-uUID) counted (the relays settled before the snapshot).
usage_is() {
    if [ "$6" = ws ]; then
        tj_wire_is "$1" "$2" "$name-u$2" $(($5 * 24))
    else
        billed "$1" "$2" "$3" "$4" "$5"
    fi
}

# udp_up K SIZE, udp_down K SIZE: the wire bytes of one SOCKS5 association (udp_rt call) moving
# K datagrams of SIZE bytes to 127.0.0.1, each way. Plain VLESS UDP (v2ray, sing-box): one
# connection, its 26-byte request header and 2-byte response once, a 2-byte length per
# datagram. Xray's XUDP (issue 10, PROTOCOLS-2.md §5): a 19-byte request (command 3), the first
# datagram in a New frame (24 bytes: IPv4 destination and GlobalID), each later one in a Keep
# frame of 16 bytes with its destination; down the 2-byte response and a 16-byte Keep frame
# with the source address per datagram.
udp_up() {
    if [ "$CLIENT" = xray ]; then echo $((19 + 24 + 16 * ($1 - 1) + $1 * $2))
    else echo $((26 + $1 * (2 + $2))); fi
}
udp_down() {
    if [ "$CLIENT" = xray ]; then echo $((2 + $1 * (16 + $2)))
    else echo $((2 + $1 * (2 + $2))); fi
}

# scenario NAME TLS NET [mkconfig options]: NET tcp, or ws (the clients of users 1 and 2 then
# reach katana through counting relays).
scenario() {
    local name=$1 tls=$2 net=$3; shift 3
    kt_ports 1
    [ "$net" = ws ] && set -- "$@" --ws-path "$WS_PATH" --ws-host "$TJ_SNI"
    mkconfig "$T/config-$name.json" "${PORTS[0]}" - --protocol vless --user "1:$U1" \
        --user "2:$U2" --user "3:$U3" --grace "$GRACE" "$@"
    srv_start "$T/config-$name.json"
    local port=${PORTS[0]} c1 c2 bad to1=${PORTS[0]} to2=${PORTS[0]}
    VL_PORT=$port
    if [ "$net" = ws ]; then
        tj_counting_relay "$name-u1" "$port"; to1=$RELAY_PORT
        tj_counting_relay "$name-u2" "$port"; to2=$RELAY_PORT
    fi
    client "$name-u1" "$U1" "$to1" "$tls" "$net"; c1=$CL_PORT
    client "$name-u2" "$U2" "$to2" "$tls" "$net"; c2=$CL_PORT
    client "$name-bad" "$WRONG" "$port" "$tls" "$net"; bad=$CL_PORT
    kt_listening

    local r1=0 r2=0 p1 p2
    tcp_rt "$c1" ok --bytes "$MIB" --seed "$name-u1" --label "$name-u1" "${PR_TCP[@]}" >"$T/$name-u1.out" 2>&1 &
    p1=$!
    tcp_rt "$c2" ok --bytes "$MIB" --seed "$name-u2" --label "$name-u2" "${PR_TCP[@]}" >"$T/$name-u2.out" 2>&1 &
    p2=$!
    wait "$p1" || r1=$?
    wait "$p2" || r2=$?
    cat "$T/$name-u1.out" "$T/$name-u2.out"
    check "$name: user 1, 1 MiB each way, echo identical" test "$r1" = 0
    check "$name: user 2 at the same time, 1 MiB each way, echo identical" test "$r2" = 0
    local snap
    if [ "$net" = ws ]; then tj_relays_settle "$name-u1" "$name-u2" || true; fi
    snap=$(usage_snapshot)
    echo "SIGUSR1 snapshot:"; echo "$snap"
    # one connection each: the request header (26 bytes for 127.0.0.1) up, 00 00 down
    local up=$((MIB + 26)) down=$((MIB + 2))
    check "$name: usage of user 1 is the bytes moved" usage_is "$snap" 1 "$up" "$down" "$tls" "$net"
    check "$name: usage of user 2 is the bytes moved" usage_is "$snap" 2 "$up" "$down" "$tls" "$net"
    check "$name: idle user 3 billed nothing" no_usage "$snap" 3

    check "$name: UDP (command 2) via $CLIENT: 20 x 1200-byte datagrams echoed identical" \
        udp_rt "$c1" ok --count 20 --size 1200 --seed "$name-udp"
    check "$name: UDP: 8-byte and 1400-byte datagrams" \
        eval 'udp_rt "$c2" ok --count 2 --size 8 --seed s && udp_rt "$c2" ok --count 2 --size 1400 --seed b'
    if [ "$net" = ws ]; then tj_relays_settle "$name-u1" "$name-u2" || true; fi
    snap=$(usage_snapshot)
    echo "SIGUSR1 snapshot:"; echo "$snap"
    check "$name: usage of user 1 after UDP is the bytes moved" \
        usage_is "$snap" 1 $((up + $(udp_up 20 1200))) $((down + $(udp_down 20 1200))) "$tls" "$net"
    check "$name: usage of user 2 after UDP is the bytes moved" \
        usage_is "$snap" 2 $((up + $(udp_up 2 8) + $(udp_up 2 1400))) \
        $((down + $(udp_down 2 8) + $(udp_down 2 1400))) "$tls" "$net"
    if [ "$CLIENT" = xray ]; then
        check "$name: XUDP: each datagram reaches the remote it names, answers carry their source, full cone" \
            timeout 60 "${KT_PY[@]}" udp-cone --socks "$c1" --count 6 --seed "$name-cone"
    fi

    local lines0 rt=0 ru=0 pt pu; lines0=$(tj_log_lines)
    # both wait for an echo that must not come: side by side
    tcp_rt "$bad" refused --bytes 4096 --conns 3 >"$T/$name-bad-tcp.out" 2>&1 &
    pt=$!
    udp_rt "$bad" refused --count 2 >"$T/$name-bad-udp.out" 2>&1 &
    pu=$!
    wait "$pt" || rt=$?
    wait "$pu" || ru=$?
    cat "$T/$name-bad-tcp.out" "$T/$name-bad-udp.out"
    check "$name: wrong UUID: TCP gets no echo" test "$rt" = 0
    check "$name: wrong UUID: UDP gets no echo" test "$ru" = 0
    if [ "$net" = ws ]; then
        check "$name: a WebSocket upgrade on another path gets HTTP 404" \
            test "$(tj_ws_status "$port" /other "$tls")" = 404
        check "$name: an upgrade on the path with another Host gets HTTP 404" \
            test "$(tj_ws_status "$port" "$WS_PATH" "$tls" -H "Host: other.test")" = 404
    fi
    check "$name: wrong UUID (and 404s): no log line per attempt" test "$(tj_log_lines)" = "$lines0"
    check "$name: daemon still runs" srv_alive
    check "$name: user 1 served afterwards (TCP)" tcp_rt "$c1" ok --bytes 262144 --seed after "${PR_TCP[@]}"
    check "$name: user 2 served afterwards (UDP)" udp_rt "$c2" ok --count 3 --seed after2
    # a name in the request (address type 2), resolved by katana
    check "$name: TCP to a name (localhost): 64 KiB echoed identical" \
        tcp_rt "$c1" ok --bytes 65536 --dest-host localhost --seed name "${PR_TCP[@]}"
    if [ "$CLIENT" = sing-box ]; then
        # its SOCKS5 side drops a plain-VLESS UDP reply from a name ("packet download closed:
        # unsupported address"), against sing-box's own server too
        printf 'SKIP: %s: %s\n' "$KT_NAME" "$name: UDP to a name: sing-box 1.14.1 drops the replies"
    else
        check "$name: UDP to a name (localhost): 3 datagrams echoed identical" \
            udp_rt "$c2" ok --count 3 --dest-host localhost --seed name2
    fi
}

NETS=${KT_NETS:-tcp}
if [ "$NETS" = tcp ]; then
# Refused through `katana check`, naming the field (the node keeps its last good state when a
# panel sends these): REALITY, a flow, VLESS encryption, xhttp, a uuid that is no UUID.
kt_ports 1
mkconfig "$T/base.json" "${PORTS[0]}" - --protocol vless --user "1:$U1"
python3 - "$T" <<'PY'
import json, sys
d = sys.argv[1]
base = json.load(open(d + "/base.json"))
def variant(name, edit):
    c = json.loads(json.dumps(base)); edit(c)
    json.dump(c, open("%s/%s.json" % (d, name), "w"))
node = lambda c: c["nodes"][0]["panel"]["node"]
variant("reality", lambda c: node(c).update(tls=2))
variant("flow", lambda c: node(c).update(flow="xtls-rprx-vision"))
variant("decryption", lambda c: node(c).update(decryption="mlkem768x25519plus.native.600s.x"))
variant("xhttp", lambda c: node(c).update(network="xhttp"))
variant("notuuid", lambda c: c["nodes"][0]["panel"]["users"]["users"].append(
    {"id": 7, "uuid": "not-a-uuid"}))
PY
refused() {
    local out rc=0
    out=$(timeout 10 "$(katana_bin)" check -c "$T/$1.json" 2>&1) || rc=$?
    echo "$1: exit $rc: $out"
    [ "$rc" = 1 ] && grep -qF -- "$2" <<<"$out"
}
check "katana check: the base vless config is accepted" \
    timeout 10 "$(katana_bin)" check -c "$T/base.json"
check "tls 2 (REALITY) without its settings refused naming them" refused reality \
    "tls_settings.server_name: required for tls 2 (REALITY)"
check "a flow without REALITY refused naming it" refused flow \
    'flow "xtls-rprx-vision": XTLS Vision is served over tls 1 (TLS) or 2 (REALITY) only'
check "VLESS encryption refused naming it" refused decryption "decryption: not served"
check "network xhttp refused naming it" refused xhttp 'network "xhttp": not served'
check "a uuid that is not a UUID refused naming the user" refused notuuid \
    "user 7 has a uuid that is not a UUID"

scenario vless-tcp 0 tcp
srv_stop
check "vless-tcp: SIGTERM: katana exits 0" test "$SRV_RC" = 0

tj_httpd fallback "fallback web page"
scenario vless-tls 1 tcp --cert-file "$TJ_CERT" --key-file "$TJ_KEY" --fallback "127.0.0.1:$HTTPD_PORT"
check "vless-tls: a browser's request reaches the fallback" \
    eval 'curl -s --max-time 10 --cacert "$TJ_CA" --resolve "$TJ_SNI:$VL_PORT:127.0.0.1" \
        "https://$TJ_SNI:$VL_PORT/" | grep -q "fallback web page"'
srv_stop
check "vless-tls: SIGTERM: katana exits 0" test "$SRV_RC" = 0
else
scenario vless-ws 0 ws
srv_stop
check "vless-ws: SIGTERM: katana exits 0" test "$SRV_RC" = 0
scenario vless-ws-tls 1 ws --cert-file "$TJ_CERT" --key-file "$TJ_KEY"
srv_stop
check "vless-ws-tls: SIGTERM: katana exits 0" test "$SRV_RC" = 0
fi
kt_finish
