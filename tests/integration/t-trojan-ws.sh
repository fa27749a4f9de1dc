#!/bin/bash
# Trojan over WebSocket over TLS with real clients (issue 9, scenario trojan-ws-tls of
# ../shared/interop/): the panel node has network ws, networkSettings.path /tj-ws and
# headers.Host node.test. Two v2ray 4.34 trojan-ws-tls clients (users 1 and 2) at the same time,
# each 1 MiB byte-identical each way; each user is billed exactly the client-side wire bytes
# (what katana bills), counted independently by a relay between its client and katana, except
# that the client's last TLS record (its 24-byte close_notify) may come after katana closed and
# is then not billed; an idle user 3 is billed nothing.
# A request to another path, a WebSocket upgrade on another path or with another Host, and a
# plain HTTP request on the path all get an ordinary HTTP 404 (no fallback), or the fallback's
# exact answer when the node has one; the clients keep working and nothing is logged per probe.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/trojan.sh"
kt_need v2ray openssl curl
[ "$KT_SERVER" = katana ] || skip_all "KT_SERVER=$KT_SERVER: the reference modes serve Trojan over TCP only"

MIB=1048576
WS_PATH=/tj-ws
U1=$(kt_uuid); U2=$(kt_uuid); U3=$(kt_uuid)
BODY="katana ws fallback page $(kt_uuid)"
tj_certs "$T/pki" server
echo_start

# ws_client NAME PASSWORD SERVER_PORT: v2ray with a SOCKS5 inbound and a trojan outbound over
# WebSocket (path $WS_PATH, Host node.test) over TLS verified against the test CA, as in
# ../shared/interop/templates/v2ray/client-trojan-ws-tls.json; sets CL_PORT.
ws_client() {
    kt_ports 1; CL_PORT=${PORTS[0]}
    cat >"$T/client-$1.json" <<EOF2
{"log": {"loglevel": "warning", "access": "none"},
 "inbounds": [{"listen": "127.0.0.1", "port": $CL_PORT, "protocol": "socks",
   "settings": {"auth": "noauth", "udp": true, "ip": "127.0.0.1"}}],
 "outbounds": [{"protocol": "trojan",
   "settings": {"servers": [{"address": "127.0.0.1", "port": $3,
                             "password": $(tj_json_str "$2")}]},
   "streamSettings": {"network": "ws", "security": "tls",
     "tlsSettings": {"serverName": "$TJ_SNI", "allowInsecure": false,
       "certificates": [{"usage": "verify", "certificateFile": "$TJ_CA"}]},
     "wsSettings": {"path": "$WS_PATH", "headers": {"Host": "$TJ_SNI"}}}}]}
EOF2
    kt_bg "client-$1" v2ray -config "$T/client-$1.json"
    kt_wait_port "$CL_PORT" 10 || { fail "v2ray client $1 did not listen on $CL_PORT"; exit 1; }
}

# http_code URL [curl options]: the status curl gets over TLS from the node (000 on failure).
http_code() {
    local u=$1; shift
    timeout 15 curl -s -o "$T/body" -w '%{http_code}' --max-time 10 --http1.1 \
        --cacert "$TJ_CA" --resolve "node.test:$PORT:127.0.0.1" "$@" "https://node.test:$PORT$u" ||
        true
}
UPGRADE=(-H "Connection: Upgrade" -H "Upgrade: websocket" -H "Sec-WebSocket-Version: 13"
         -H "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==")
# probes EXPECT: every kind of refused request gets status EXPECT (and, for 200, the body).
probes() {
    local bad=0 code
    for probe in "/" "/other" "$WS_PATH/more"; do
        code=$(http_code "$probe" "${UPGRADE[@]}"); [ "$code" = "$1" ] || { echo "upgrade $probe: $code"; bad=1; }
    done
    code=$(http_code "$WS_PATH"); [ "$code" = "$1" ] || { echo "plain GET on the path: $code"; bad=1; }
    code=$(http_code "$WS_PATH" "${UPGRADE[@]}" -H "Host: other.test")
    [ "$code" = "$1" ] || { echo "upgrade with Host other.test: $code"; bad=1; }
    code=$(http_code "$WS_PATH" -d 'a=b'); [ "$code" = "$1" ] || { echo "POST on the path: $code"; bad=1; }
    if [ "$1" = 200 ] && [ "$(cat "$T/body")" != "$BODY" ]; then echo "body: $(head -c 200 "$T/body")"; bad=1; fi
    return $bad
}

# usage_snapshot: SIGUSR1 and the usage lines it logs.
usage_snapshot() {
    sleep 1.5   # the sampler folds flow counters every second
    srv_usage_mark
    kill -USR1 "$SRV_PID"
    for _ in $(seq 1 40); do [ -n "$(srv_usage)" ] && break; sleep 0.1; done
    sleep 0.3
    srv_usage
}
usage_is() {   # LINES UID UP DOWN
    local l; l=$(awk -v u="$2" '$1 == u' <<<"$1")
    echo "user $2: '${l:-no line}', expected '$2 $3 $4'"
    [ "$l" = "$2 $3 $4" ] || { [ "$3 $4" = "0 0" ] && [ -z "$l" ]; }
}

# --- without a fallback -------------------------------------------------------------------
kt_ports 1
mkconfig "$T/config.json" "${PORTS[0]}" - --protocol trojan --cert-file "$TJ_CERT" \
    --key-file "$TJ_KEY" --ws-path "$WS_PATH" --ws-host "$TJ_SNI" \
    --user "1:$U1" --user "2:$U2" --user "3:$U3"
srv_start "$T/config.json"
PORT=$(tj_port)
# counting_relay NAME: a relay to the node that counts the bytes each way (sets RELAY_PORT).
counting_relay() {
    kt_ports 1; RELAY_PORT=${PORTS[0]}
    kt_bg "relay-$1" "${KT_PY[@]}" relay --port "$RELAY_PORT" --to "$PORT" --source 127.0.0.1 \
        --count-file "$T/$1.count" --ready-file "$T/relay-$1.ready"
    kt_wait_file "$T/relay-$1.ready" 10 || { fail "relay $1 did not start"; exit 1; }
}
counting_relay u1; ws_client u1 "$U1" "$RELAY_PORT"; C1=$CL_PORT
counting_relay u2; ws_client u2 "$U2" "$RELAY_PORT"; C2=$CL_PORT

tcp_rt "$C1" ok --bytes "$MIB" --seed u1 --label ws-u1 >"$T/u1.out" 2>&1 & P1=$!
tcp_rt "$C2" ok --bytes "$MIB" --seed u2 --label ws-u2 >"$T/u2.out" 2>&1 & P2=$!
R1=0; wait "$P1" || R1=$?
R2=0; wait "$P2" || R2=$?
cat "$T/u1.out" "$T/u2.out"
check "v2ray trojan-ws-tls client (user 1): 1 MiB each way, echo identical" test "$R1" = 0
check "v2ray trojan-ws-tls client (user 2), at the same time: 1 MiB each way, echo identical" \
    test "$R2" = 0
# the clients end their connections (close_notify ...) after the echo: wait until the relays'
# totals stay put for a second before the snapshot
for _ in $(seq 1 20); do
    BEFORE=$(cat "$T/u1.count" "$T/u2.count"); sleep 1
    [ "$BEFORE" = "$(cat "$T/u1.count" "$T/u2.count")" ] && break
done
SNAP=$(usage_snapshot)
echo "SIGUSR1 snapshot:"; echo "$SNAP"
read -r W1U W1D <"$T/u1.count"; read -r W2U W2D <"$T/u2.count"
# wire_is LINES UID UP DOWN: billed down = DOWN, billed up = UP or UP - 24 (close_notify unread)
wire_is() {
    local l; l=$(awk -v u="$2" '$1 == u' <<<"$1")
    echo "user $2: '${l:-no line}', relay counted up $3 down $4"
    [ "$l" = "$2 $3 $4" ] || [ "$l" = "$2 $(($3 - 24)) $4" ]
}
check "usage: user 1 billed exactly its wire bytes (1 MiB each way + TLS and WebSocket)" \
    wire_is "$SNAP" 1 "$W1U" "$W1D"
check "usage: user 2 billed exactly its wire bytes" wire_is "$SNAP" 2 "$W2U" "$W2D"
check "usage: both above the 1 MiB moved each way" \
    test "$W1U" -gt "$MIB" -a "$W1D" -gt "$MIB" -a "$W2U" -gt "$MIB" -a "$W2D" -gt "$MIB"
check "usage: idle user 3 billed nothing" usage_is "$SNAP" 3 0 0

LINES0=$(tj_log_lines)
check "another path, another Host, plain GET and POST on the path: HTTP 404" probes 404
check "UDP through the WebSocket stream: 10 x 1000-byte datagrams echoed identical" \
    udp_rt "$C1" ok --count 10 --size 1000 --seed ws-udp
check "the clients still work after the probes (256 KiB each)" \
    eval 'tcp_rt "$C1" ok --bytes 262144 --seed a2 && tcp_rt "$C2" ok --bytes 262144 --seed b2'
sleep 0.5
check "no log line per refused probe" test $(($(tj_log_lines) - LINES0)) -le 1
check "server still runs" srv_alive
srv_stop

# --- with a fallback: the refused requests get the fallback's answer ----------------------
tj_httpd fallback "$BODY"; FB=$HTTPD_PORT
kt_ports 1
mkconfig "$T/fb.json" "${PORTS[0]}" - --protocol trojan --cert-file "$TJ_CERT" \
    --key-file "$TJ_KEY" --ws-path "$WS_PATH" --ws-host "$TJ_SNI" --fallback "127.0.0.1:$FB" \
    --user "1:$U1"
srv_start "$T/fb.json"
PORT=$(tj_port)
check "with a fallback: the same requests get the fallback's exact answer" probes 200
ws_client fb "$U1" "$PORT"
check "with a fallback: the client still works (256 KiB echo)" \
    tcp_rt "$CL_PORT" ok --bytes 262144 --seed fb
srv_stop
check "SIGTERM: katana exits 0" test "$SRV_RC" = 0
kt_finish
