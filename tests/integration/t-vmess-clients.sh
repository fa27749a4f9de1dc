#!/bin/bash
# VMess AEAD (alterId 0) with the real v2ray 4.34 client (issue 9, PROTOCOLS.md §6): a vmess node
# on plain TCP (tls 0), user 1 with security aes-128-gcm and user 2 with chacha20-poly1305 at the
# same time, 1 MiB byte-identical each way each, then UDP through the clients' SOCKS5 UDP
# ASSOCIATE (command 2). Each user is billed for its own bytes (wire bytes: within 5% + 4 KiB
# of the payload); an idle user 3 is billed nothing. Negative (hand-made requests, katest.py vmess): a replayed auth ID, a timestamp
# five minutes old and an unknown UUID get no byte back and no close (drained), while the daemon
# and both clients keep working; /metrics counts them as drained. A Mux.Cool client is served. Then the same node with tls 1 (cert from the agent config) and a
# client with security none. Then WebSocket (network ws, path /vm-ws, Host node.test) in clear
# and over TLS (scenarios vmess-ws, vmess-ws-tls): two users at the same time, 1 MiB each way,
# UDP, each billed exactly the wire bytes a relay between its client and katana counted (less
# the client's close_notify over TLS); an upgrade on another path gets HTTP 404.
# KT_NETS selects the transport: tcp (default: all but WebSocket) or ws (vmess-ws and
# vmess-ws-tls only; t-vmess-ws.sh runs this script so).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/trojan.sh"
kt_need v2ray openssl curl jq
[ "$KT_SERVER" = katana ] || skip_all "VMess is served by katana only here (KT_SERVER=$KT_SERVER)"
python3 -c 'import cryptography' 2>/dev/null || skip_all "python3-cryptography is not installed"

MIB=1048576
U1=$(kt_uuid); U2=$(kt_uuid); U3=$(kt_uuid)
echo_start

WS_PATH=/vm-ws
# vm_client NAME UUID SECURITY SERVER_PORT [tcp|tls|ws|ws-tls [mux]]: v2ray with a SOCKS5 inbound
# (UDP on) and a vmess outbound (alterId 0), on WebSocket (path $WS_PATH, Host node.test) with
# "ws*", over TLS verified against $TJ_CA for node.test with "*tls", with Mux.Cool on with "mux"
# (the shape of ../shared/interop/templates/v2ray/client-vmess-{tcp,tls,ws,ws-tls}.json); sets
# CL_PORT, CL_PID.
vm_client() {
    local net=tcp ws='' sec='"security": "none"'
    case ${5:-tcp} in
        ws*) net=ws
             ws=', "wsSettings": {"path": "'$WS_PATH'", "headers": {"Host": "'$TJ_SNI'"}}' ;;
    esac
    case ${5:-tcp} in
        *tls) sec='"security": "tls", "tlsSettings": {"serverName": "'$TJ_SNI'",
                   "allowInsecure": false,
                   "certificates": [{"usage": "verify", "certificateFile": "'$TJ_CA'"}]}' ;;
    esac
    local stream='{"network": "'$net'", '$sec$ws'}'
    local mux=''
    [ "${6:-}" = mux ] && mux='"mux": {"enabled": true, "concurrency": 8},'
    kt_ports 1; CL_PORT=${PORTS[0]}
    cat >"$T/client-$1.json" <<EOF
{"log": {"loglevel": "warning", "access": "none"},
 "inbounds": [{"listen": "127.0.0.1", "port": $CL_PORT, "protocol": "socks",
   "settings": {"auth": "noauth", "udp": true, "ip": "127.0.0.1"}}],
 "outbounds": [{"protocol": "vmess", $mux
   "settings": {"vnext": [{"address": "127.0.0.1", "port": $4,
     "users": [{"id": "$2", "alterId": 0, "security": "$3"}]}]},
   "streamSettings": $stream}]}
EOF
    kt_bg "client-$1" v2ray -config "$T/client-$1.json"
    CL_PID=$BG_PID
    kt_wait_port "$CL_PORT" 10 || { fail "v2ray client $1 did not listen on $CL_PORT"; exit 1; }
}

# usage_snapshot: SIGUSR1 and the usage lines it logs (billed since the last snapshot).
usage_snapshot() {
    sleep 1.5   # the sampler folds flow counters every second
    srv_usage_mark
    kill -USR1 "$SRV_PID"
    for _ in $(seq 1 40); do [ -n "$(srv_usage)" ] && break; sleep 0.1; done
    sleep 0.3
    srv_usage
}
# billed USAGE_LINES UID PAYLOAD: up and down both in [payload, payload + 5% + 4 KiB] (usage
# counts the client's wire bytes: VMess adds its header once per connection and a size field,
# tag and padding per chunk; TLS adds its records).
billed() {
    local up down hi
    read -r _ up down <<<"$(awk -v u="$2" '$1 == u' <<<"$1")"
    hi=$(($3 + $3 / 20 + 4096))
    echo "user $2: up ${up:-none} down ${down:-none}, expected each in [$3, $hi]"
    [ -n "${up:-}" ] && [ "$up" -ge "$3" ] && [ "$up" -le "$hi" ] && [ "$down" -ge "$3" ] &&
        [ "$down" -le "$hi" ]
}
no_usage() {
    local l; l=$(awk -v u="$2" '$1 == u' <<<"$1")
    echo "user $2: '${l:-no line}'"
    [ -z "$l" ] || [ "$l" = "$2 0 0" ]
}

NETS=${KT_NETS:-tcp}
if [ "$NETS" = tcp ]; then
kt_ports 2; API_PORT=${PORTS[1]}; TOKEN=vmess-$$
mkconfig "$T/config.json" "${PORTS[0]}" - --protocol vmess \
    --user "1:$U1" --user "2:$U2" --user "3:$U3"
jq --arg l "127.0.0.1:$API_PORT" --arg t "$TOKEN" '.api = {listen: $l, token: $t}' \
    "$T/config.json" >"$T/c.tmp" && mv "$T/c.tmp" "$T/config.json"
srv_start "$T/config.json"
PORT=${PORTS[0]}
# drained N: GET /metrics counts N clients drained before authentication.
drained() {
    curl -sS -m 10 -H "Authorization: Bearer $TOKEN" "http://127.0.0.1:$API_PORT/metrics" \
        >"$T/metrics.txt"
    grep '^katana_refused_clients_total' "$T/metrics.txt"
    grep -q -x "katana_refused_clients_total{action=\"drain\"} $1" "$T/metrics.txt"
}
vm_client u1 "$U1" aes-128-gcm "$PORT"; C1=$CL_PORT
vm_client u2 "$U2" chacha20-poly1305 "$PORT"; C2=$CL_PORT

tcp_rt "$C1" ok --bytes "$MIB" --seed u1 --label aes-128-gcm >"$T/u1.out" 2>&1 & P1=$!
tcp_rt "$C2" ok --bytes "$MIB" --seed u2 --label chacha20 >"$T/u2.out" 2>&1 & P2=$!
R1=0; wait "$P1" || R1=$?
R2=0; wait "$P2" || R2=$?
cat "$T/u1.out" "$T/u2.out"
check "v2ray vmess aes-128-gcm (user 1): 1 MiB each way, echo identical" test "$R1" = 0
check "v2ray vmess chacha20-poly1305 (user 2), at the same time: 1 MiB each way" test "$R2" = 0

SNAP=$(usage_snapshot)
echo "SIGUSR1 snapshot:"; echo "$SNAP"
check "usage: user 1 billed for 1 MiB each way" billed "$SNAP" 1 "$MIB"
check "usage: user 2 billed for 1 MiB each way" billed "$SNAP" 2 "$MIB"
check "usage: idle user 3 billed nothing" no_usage "$SNAP" 3

check "UDP (command 2) via user 1: 20 x 1200-byte datagrams echoed identical" \
    udp_rt "$C1" ok --count 20 --size 1200 --seed vm-udp1
check "UDP via user 2: 8-byte and 1400-byte datagrams" \
    eval 'udp_rt "$C2" ok --count 2 --size 8 --seed vm-s && udp_rt "$C2" ok --count 2 --size 1400 --seed vm-b'
SNAP=$(usage_snapshot)
echo "SIGUSR1 snapshot:"; echo "$SNAP"
check "usage: user 1 billed for TCP + UDP each way (totals)" billed "$SNAP" 1 $((MIB + 24000))
check "usage: user 2 billed for TCP + UDP each way (totals)" billed "$SNAP" 2 $((MIB + 2816))

# Negative: hand-made requests (aes-128-gcm, to the echo server).
vm() { timeout 30 "${KT_PY[@]}" vmess --port "$PORT" --dest-port "$ECHO_PORT" "$@"; }
check "/metrics: no client refused yet" drained 0
LOG0=$(tj_log_lines)
check "a hand-made request of user 3 is served (the probe itself works)" vm --uuid "$U3" --expect ok
check "a replayed auth ID gets no byte and no close (drained)" \
    vm --uuid "$U1" --replay --expect refused
check "a timestamp five minutes old: drained" vm --uuid "$U2" --age 300 --expect refused
check "a timestamp 100 s old is inside the window" vm --uuid "$U2" --age 100 --expect ok
check "an unknown UUID: drained" vm --uuid "$(kt_uuid)" --expect refused
check "/metrics: the three refused requests counted as drained" drained 3
check "no log line per refused attempt" test "$(tj_log_lines)" -le $((LOG0 + 0))
# Mux.Cool (command 3): served, see t-mux-clients.sh; one round trip here.
vm_client mx "$U3" aes-128-gcm "$PORT" tcp mux; CM=$CL_PORT
check "a Mux.Cool client (user 3): 64 KiB echoed identical" tcp_rt "$CM" ok --bytes 65536 --seed mx
check "server still runs" srv_alive
check "user 1 still served after the refusals" tcp_rt "$C1" ok --bytes 65536 --seed after1
check "user 2 still served after the refusals" tcp_rt "$C2" ok --bytes 65536 --seed after2
srv_stop
check "SIGTERM: katana exits 0" test "$SRV_RC" = 0

# The same node over TLS (tls 1, the agent config's certificate), security none.
tj_certs "$T/pki" server
kt_ports 1
mkconfig "$T/config-tls.json" "${PORTS[0]}" - --protocol vmess --cert-file "$TJ_CERT" \
    --key-file "$TJ_KEY" --user "1:$U1" --user "2:$U2"
srv_start "$T/config-tls.json"
TPORT=${PORTS[0]}
vm_client t1 "$U1" none "$TPORT" tls; C3=$CL_PORT
vm_client t2 "$U2" aes-128-gcm "$TPORT" tls; C4=$CL_PORT
check "vmess over TLS, security none (user 1): 1 MiB each way" \
    tcp_rt "$C3" ok --bytes "$MIB" --seed t1 --label tls-none
check "vmess over TLS, aes-128-gcm (user 2): 1 MiB each way" \
    tcp_rt "$C4" ok --bytes "$MIB" --seed t2 --label tls-gcm
check "UDP over TLS (user 2): 10 x 1000-byte datagrams" \
    udp_rt "$C4" ok --count 10 --size 1000 --seed t-udp
SNAP=$(usage_snapshot)
echo "SIGUSR1 snapshot:"; echo "$SNAP"
check "usage over TLS: user 1 billed for 1 MiB each way" billed "$SNAP" 1 "$MIB"
check "usage over TLS: user 2 billed for 1 MiB + the UDP payload each way" \
    billed "$SNAP" 2 $((MIB + 10000))
srv_stop
check "SIGTERM: katana exits 0" test "$SRV_RC" = 0

fi

# ws_scenario NAME TLS [mkconfig options]: the node on WebSocket; users 1 (aes-128-gcm) and 2
# (chacha20-poly1305, or none over TLS) through counting relays.
ws_scenario() {
    local name=$1 tls=$2 kind=ws sec2=chacha20-poly1305; shift 2
    [ "$tls" = 1 ] && kind=ws-tls && sec2=none
    kt_ports 1
    mkconfig "$T/config-$name.json" "${PORTS[0]}" - --protocol vmess --ws-path "$WS_PATH" \
        --ws-host "$TJ_SNI" --user "1:$U1" --user "2:$U2" --user "3:$U3" "$@"
    srv_start "$T/config-$name.json"
    local port=${PORTS[0]} c1 c2 r1=0 r2=0 p1 p2 snap
    tj_counting_relay "$name-u1" "$port"; vm_client "$name-u1" "$U1" aes-128-gcm "$RELAY_PORT" "$kind"
    c1=$CL_PORT
    tj_counting_relay "$name-u2" "$port"; vm_client "$name-u2" "$U2" "$sec2" "$RELAY_PORT" "$kind"
    c2=$CL_PORT
    tcp_rt "$c1" ok --bytes "$MIB" --seed "$name-u1" --label "$name-u1" >"$T/$name-u1.out" 2>&1 &
    p1=$!
    tcp_rt "$c2" ok --bytes "$MIB" --seed "$name-u2" --label "$name-u2" >"$T/$name-u2.out" 2>&1 &
    p2=$!
    wait "$p1" || r1=$?
    wait "$p2" || r2=$?
    cat "$T/$name-u1.out" "$T/$name-u2.out"
    check "$name: user 1 (aes-128-gcm), 1 MiB each way, echo identical" test "$r1" = 0
    check "$name: user 2 ($sec2) at the same time, 1 MiB each way, echo identical" test "$r2" = 0
    check "$name: UDP via user 1: 20 x 1200-byte datagrams echoed identical" \
        udp_rt "$c1" ok --count 20 --size 1200 --seed "$name-udp"
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
if [ "$NETS" = ws ]; then
    tj_certs "$T/pki" server
    ws_scenario vmess-ws 0
    ws_scenario vmess-ws-tls 1 --cert-file "$TJ_CERT" --key-file "$TJ_KEY"
fi
kt_finish
