#!/bin/bash
# Shadowsocks inside WebSocket with the SIP003 v2ray-plugin (issue 9; XrayR's
# "Shadowsocks-Plugin"): the panel's shadowsocks node has plugin "v2ray-plugin" and plugin_opts
# with mux=0 (path /ss-ws, host node.test, and "tls" for ws-tls, the certificate from the agent
# config). Real ss-local + ss-v2ray-plugin clients (../shared/interop/templates/ss-libev/
# client-ws*.json), scenarios ss-ws and ss-ws-tls: two users at the same time, 1 MiB
# byte-identical each way each, each billed exactly the wire bytes a relay between its client
# and katana counted (less the client's close_notify over TLS); an idle user is billed nothing;
# a WebSocket upgrade on another path gets HTTP 404, with no log line. `katana check` refuses
# the plugin without mux=0 (clients then multiplex with Mux.Cool, not served yet) naming it.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/trojan.sh"
kt_need ss-local ss-v2ray-plugin openssl curl
needs_katana "the v2ray-plugin node" || skip_all "needs katana"

CIPHER=aes-128-gcm
MIB=1048576
WS_PATH=/ss-ws
U1=$(kt_uuid); U2=$(kt_uuid); U3=$(kt_uuid)
tj_certs "$T/pki" server
echo_start

# plugin_client NAME PASSWORD SERVER_PORT TLS: ss-local (SOCKS5) with ss-v2ray-plugin, mux=0,
# over TLS for node.test verified against $TJ_CA when TLS is 1; sets CL_PORT.
plugin_client() {
    local opts="path=$WS_PATH;host=$TJ_SNI;mux=0"
    [ "$4" = 1 ] && opts="tls;host=$TJ_SNI;path=$WS_PATH;cert=$TJ_CA;mux=0"
    kt_ports 1; CL_PORT=${PORTS[0]}
    kt_bg "client-$1" ss-local -s 127.0.0.1 -p "$3" -b 127.0.0.1 -l "$CL_PORT" -k "$2" \
        -m "$CIPHER" --plugin ss-v2ray-plugin --plugin-opts "$opts"
    kt_wait_port "$CL_PORT" 10 || { fail "ss-local $1 did not listen on $CL_PORT"; exit 1; }
}

# usage_snapshot: SIGUSR1 and the usage lines it logs (as in t-trojan-ws.sh).
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

# The plugin without mux=0, or with mux=1: refused naming it (the node keeps its last good
# state when a panel sends it).
kt_ports 1
mkconfig "$T/mux1.json" "${PORTS[0]}" "$CIPHER" --user "1:$U1" --plugin-opts "path=$WS_PATH;mux=1"
mkconfig "$T/muxdefault.json" "${PORTS[0]}" "$CIPHER" --user "1:$U1" --plugin-opts "path=$WS_PATH"
refused() {
    local out rc=0
    out=$(timeout 10 "$(katana_bin)" check -c "$T/$1.json" 2>&1) || rc=$?
    echo "$1: exit $rc: $out"
    [ "$rc" = 1 ] && grep -qF -- "plugin_opts: mux: not served (Mux.Cool" <<<"$out"
}
check "v2ray-plugin with mux=1 refused naming it" refused mux1
check "v2ray-plugin without mux (clients default to mux=1) refused naming it" refused muxdefault

# scenario NAME TLS [mkconfig options]
scenario() {
    local name=$1 tls=$2 opts="path=$WS_PATH;host=$TJ_SNI;mux=0"; shift 2
    [ "$tls" = 1 ] && opts="tls;$opts"
    kt_ports 1
    mkconfig "$T/config-$name.json" "${PORTS[0]}" "$CIPHER" --plugin-opts "$opts" \
        --user "1:$U1" --user "2:$U2" --user "3:$U3" "$@"
    srv_start "$T/config-$name.json"
    local port=${PORTS[0]} c1 c2 r1=0 r2=0 p1 p2 snap
    tj_counting_relay "$name-u1" "$port"; plugin_client "$name-u1" "$U1" "$RELAY_PORT" "$tls"
    c1=$CL_PORT
    tj_counting_relay "$name-u2" "$port"; plugin_client "$name-u2" "$U2" "$RELAY_PORT" "$tls"
    c2=$CL_PORT
    tcp_rt "$c1" ok --bytes "$MIB" --seed "$name-u1" --label "$name-u1" >"$T/$name-u1.out" 2>&1 &
    p1=$!
    tcp_rt "$c2" ok --bytes "$MIB" --seed "$name-u2" --label "$name-u2" >"$T/$name-u2.out" 2>&1 &
    p2=$!
    wait "$p1" || r1=$?
    wait "$p2" || r2=$?
    cat "$T/$name-u1.out" "$T/$name-u2.out"
    check "$name: user 1, 1 MiB each way, echo identical" test "$r1" = 0
    check "$name: user 2 at the same time, 1 MiB each way, echo identical" test "$r2" = 0
    tj_relays_settle "$name-u1" "$name-u2"
    snap=$(usage_snapshot)
    echo "SIGUSR1 snapshot:"; echo "$snap"
    check "$name: usage of user 1 is its wire bytes" tj_wire_is "$snap" 1 "$name-u1" $((tls * 24))
    check "$name: usage of user 2 is its wire bytes" tj_wire_is "$snap" 2 "$name-u2" $((tls * 24))
    check "$name: usage: both above the 1 MiB moved each way" \
        eval 'read -r a b <"$T/$name-u1.count"; read -r c d <"$T/$name-u2.count";
              [ "$a" -gt "$MIB" ] && [ "$b" -gt "$MIB" ] && [ "$c" -gt "$MIB" ] && [ "$d" -gt "$MIB" ]'
    check "$name: idle user 3 billed nothing" no_usage "$snap" 3
    local lines0; lines0=$(tj_log_lines)
    check "$name: a WebSocket upgrade on another path gets HTTP 404" \
        test "$(tj_ws_status "$port" /other "$tls")" = 404
    check "$name: a plain GET on the path gets HTTP 404" \
        test "$(tj_http_status "$port" "$WS_PATH" "$tls")" = 404
    check "$name: no log line per probe" test "$(tj_log_lines)" = "$lines0"
    check "$name: user 1 served afterwards" tcp_rt "$c1" ok --bytes 65536 --seed "$name-after"
    srv_stop
    check "$name: SIGTERM: katana exits 0" test "$SRV_RC" = 0
}
scenario ss-ws 0
scenario ss-ws-tls 1 --cert-file "$TJ_CERT" --key-file "$TJ_KEY"
kt_finish
