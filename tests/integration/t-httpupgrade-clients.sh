#!/bin/bash
# HTTPUpgrade with real clients (issue 10, PROTOCOLS-2.md §4): Xray-core's VMess client (with
# early data, path "/hu?ed=2048") and sing-box's VLESS client (waits for the 101), each against
# a node with network httpupgrade (networkSettings path /hu, headers.Host node.test) in clear,
# templates tests/interop/{xray,sing-box}/client-*-httpupgrade.json (proven against their
# vendor's server by t-peers-selftest.sh). On each: two users at the same time move 1 MiB
# byte-identical each way through counting relays, then UDP through the client's SOCKS5 UDP
# ASSOCIATE (Xray: XUDP over VMess, then also to two remotes in turn and from a third, full
# cone; sing-box: plain VLESS UDP), and each user is billed exactly the wire bytes its relay
# counted (the HTTP request and 101 included); an idle user is billed nothing. An upgrade on
# another path, with another Host, without `Upgrade: websocket`, or a real WebSocket request
# (Sec-WebSocket-Key) gets HTTP 404, without a log line per attempt; a wrong UUID gets no echo.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/trojan.sh"
. "$(dirname "$0")/../interop/peers.sh"
kt_need openssl curl
pr_need xray sing-box
[ "$KT_SERVER" = katana ] || skip_all "KT_SERVER=$KT_SERVER: HTTPUpgrade is served by katana only here"

MIB=1048576
U1=$(kt_uuid); U2=$(kt_uuid); U3=$(kt_uuid); WRONG=$(kt_uuid)
HU_PATH=/hu
tj_certs "$T/pki" server
echo_start

usage_snapshot() {
    sleep 1.5   # the sampler folds flow counters every second
    srv_usage_mark
    kill -USR1 "$SRV_PID"
    for _ in $(seq 1 40); do [ -n "$(srv_usage)" ] && break; sleep 0.1; done
    sleep 0.3
    srv_usage
}
no_usage() {
    local l; l=$(awk -v u="$2" '$1 == u' <<<"$1")
    echo "user $2: '${l:-no line}'"
    [ -z "$l" ] || [ "$l" = "$2 0 0" ]
}
# hu_status PORT PATH [curl options]: the HTTP status of an HTTPUpgrade request on PATH.
hu_status() {
    local port=$1 path=$2; shift 2
    tj_http_status "$port" "$path" 0 -H "Connection: Upgrade" -H "Upgrade: websocket" "$@"
}

# scenario VENDOR PROTO: katana with a PROTO node on network httpupgrade, the VENDOR client
# (Xray with early data: its first bytes follow the request at once, §4.3).
scenario() {
    local vendor=$1 proto=$2 name=$1-$2-httpupgrade
    PR_HU_PATH=$HU_PATH; [ "$vendor" = xray ] && PR_HU_PATH="$HU_PATH?ed=2048"
    kt_ports 1
    local port=${PORTS[0]}
    mkconfig "$T/config-$name.json" "$port" - --protocol "$proto" --user "1:$U1" \
        --user "2:$U2" --user "3:$U3" --ws-path "$HU_PATH" --ws-host "$TJ_SNI" \
        --network httpupgrade
    srv_start "$T/config-$name.json"
    tj_counting_relay "$name-u1" "$port"; local to1=$RELAY_PORT
    tj_counting_relay "$name-u2" "$port"; local to2=$RELAY_PORT
    pr_client "$vendor" "$proto-httpupgrade" "$name-u1" "$U1" "$to1"; local c1=$CL_PORT
    pr_client "$vendor" "$proto-httpupgrade" "$name-u2" "$U2" "$to2"; local c2=$CL_PORT
    pr_client "$vendor" "$proto-httpupgrade" "$name-bad" "$WRONG" "$port"; local bad=$CL_PORT

    local r1=0 r2=0 p1 p2
    tcp_rt "$c1" ok --bytes "$MIB" --seed "$name-u1" --label "$name-u1" >"$T/$name-u1.out" 2>&1 &
    p1=$!
    tcp_rt "$c2" ok --bytes "$MIB" --seed "$name-u2" --label "$name-u2" >"$T/$name-u2.out" 2>&1 &
    p2=$!
    wait "$p1" || r1=$?
    wait "$p2" || r2=$?
    cat "$T/$name-u1.out" "$T/$name-u2.out"
    check "$name: user 1, 1 MiB each way, echo identical" test "$r1" = 0
    check "$name: user 2 at the same time, 1 MiB each way, echo identical" test "$r2" = 0
    check "$name: UDP via $vendor: 20 x 1200-byte datagrams echoed identical" \
        udp_rt "$c1" ok --count 20 --size 1200 --seed "$name-udp"
    check "$name: UDP: 8-byte and 1400-byte datagrams" \
        eval 'udp_rt "$c2" ok --count 2 --size 8 --seed s && udp_rt "$c2" ok --count 2 --size 1400 --seed b'
    tj_relays_settle "$name-u1" "$name-u2"
    local snap; snap=$(usage_snapshot)
    echo "SIGUSR1 snapshot:"; echo "$snap"
    check "$name: usage of user 1 is the wire bytes moved" tj_wire_is "$snap" 1 "$name-u1"
    check "$name: usage of user 2 is the wire bytes moved" tj_wire_is "$snap" 2 "$name-u2"
    check "$name: idle user 3 billed nothing" no_usage "$snap" 3
    if [ "$vendor" = xray ]; then
        # Xray sends VMess UDP as XUDP (issue 10, PROTOCOLS-2.md §5)
        check "$name: XUDP: each datagram reaches the remote it names, answers carry their source, full cone" \
            timeout 60 "${KT_PY[@]}" udp-cone --socks "$c1" --count 6 --seed "$name-cone"
    fi

    local lines0; lines0=$(tj_log_lines)
    check "$name: wrong UUID: TCP gets no echo" tcp_rt "$bad" refused --bytes 4096 --conns 3
    check "$name: an upgrade on another path gets HTTP 404" \
        test "$(hu_status "$port" /other)" = 404
    check "$name: an upgrade with another Host gets HTTP 404" \
        test "$(hu_status "$port" "$HU_PATH" -H "Host: other.test")" = 404
    check "$name: a plain GET on the path gets HTTP 404" \
        test "$(tj_http_status "$port" "$HU_PATH" 0)" = 404
    check "$name: a WebSocket request on the path gets HTTP 404" \
        test "$(tj_ws_status "$port" "$HU_PATH" 0)" = 404
    check "$name: refusals: no log line per attempt" test "$(tj_log_lines)" = "$lines0"
    check "$name: daemon still runs" srv_alive
    check "$name: user 1 served afterwards" tcp_rt "$c1" ok --bytes 65536 --seed after
    srv_stop
    check "$name: SIGTERM: katana exits 0" test "$SRV_RC" = 0
}

scenario xray vmess
scenario sing-box vless
kt_finish
