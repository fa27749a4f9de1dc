#!/bin/bash
# Proxy users cannot reach the node itself (issue 15). By default a flow to loopback is refused
# like a blocked route (closed without data, no log line): the REST API at 127.0.0.1:<api> through
# curl --socks5-hostname (listing sessions, closing another user's session), 127.0.0.1, the name
# localhost (checked once resolved), 127.0.0.2 and [::1] over TCP, and 127.0.0.1 and localhost
# over UDP. The setting is per node: user 2 of a second node with "allow_private": true keeps
# relaying to loopback meanwhile, and its stream survives user 1's DELETE attempt. A reload of
# node 1 to "allow_private": true lets the very same requests through (so the refusal is the
# rule's doing), and a reload back refuses them again. Other ranges (10/8, 172.16/12,
# fc00::/7, 169.254/16 ...) and rules that name a destination are unit-tested
# (tests/unit/test_netclass.c): no test dials an address outside loopback.
. "$(dirname "$0")/lib.sh"
kt_need ss-local curl jq
[ "$KT_SERVER" = katana ] || skip_all "the private-destination rule is katana's (ss-server has none)"

CIPHER=aes-256-gcm
TOKEN=tok-$(kt_uuid)
U1=$(kt_uuid); U2=$(kt_uuid)
echo_start
HAVE_V6=0; grep -q '::1' "$T/echo.log" && HAVE_V6=1
kt_ports 3; PORT=${PORTS[0]}; PORT2=${PORTS[1]}; API_PORT=${PORTS[2]}
API=http://127.0.0.1:$API_PORT

# write_config [mkconfig options for node t1]: node t1 (user 1) as asked, node t2 (user 2, its
# own port) with allow_private, and an API token
write_config() {
    mkconfig "$T/c.json" "$PORT" "$CIPHER" --user "1:$U1" --api-port "$API_PORT" "$@"
    jq --arg t "$TOKEN" --argjson p2 "$PORT2" --arg u2 "$U2" '.api.token = $t
        | .nodes += [.nodes[0] | .tag = "t2" | .allow_private = true
                     | .panel.node.server_port = $p2
                     | .panel.users.users = [{id: 2, uuid: $u2}]]' "$T/c.json" >"$T/config.json"
}
write_config --no-allow-private
check "node t1 has no allow_private, node t2 has it" \
    jq -e '(.nodes[0] | has("allow_private") | not) and .nodes[1].allow_private == true' \
    "$T/config.json"
srv_start "$T/config.json"
kt_wait_port "$API_PORT" 10 || { fail "API did not listen on $API_PORT"; exit 1; }
kt_wait_port "$PORT2" 10 || { fail "node t2 did not listen on $PORT2"; exit 1; }
cl_start u1 "$CIPHER" "$U1" "$PORT"; C1=$CL_PORT
cl_start u2 "$CIPHER" "$U2" "$PORT2"; C2=$CL_PORT
check "the API answers its token holder directly" \
    curl -sf -m 5 -H "Authorization: Bearer $TOKEN" -o /dev/null "$API/v1/connections"

# via_proxy SOCKS_PORT CURL_ARGS...: an API request through a user's proxy; the body in $T/via
via_proxy() {
    local port=$1; shift
    VIA_RC=0; rm -f "$T/via"
    curl -sS -m 5 --socks5-hostname "127.0.0.1:$port" -H "Authorization: Bearer $TOKEN" \
        -o "$T/via" "$@" 2>"$T/via.err" || VIA_RC=$?
}
refused_via_proxy() {
    via_proxy "$@"
    echo "curl exit $VIA_RC: $(cat "$T/via.err") body: $(head -c 120 "$T/via" 2>/dev/null)"
    [ "$VIA_RC" != 0 ] && [ ! -s "$T/via" ]
}

# --- default: refused --------------------------------------------------------------------
stream_bg victim "$C2" 393216 131072 ok; VICTIM=$STREAM_PID
srv_usage_mark
check "user 1 cannot list sessions via 127.0.0.1:<api> (closed, no answer)" \
    refused_via_proxy "$C1" "$API/v1/connections"
check "user 1 cannot close user 2's sessions via the API" \
    refused_via_proxy "$C1" -X DELETE "$API/v1/sessions?user=2"
check "TCP to 127.0.0.1 refused (closed without data)" tcp_rt "$C1" closed --bytes 4096
check "TCP to localhost refused once resolved" tcp_rt "$C1" closed --dest-host localhost --bytes 4096
check "TCP to 127.0.0.2 refused" tcp_rt "$C1" closed --dest-host 127.0.0.2 --bytes 4096
if [ "$HAVE_V6" = 1 ]; then
    check "TCP to [::1] refused" tcp_rt "$C1" closed --dest-host ::1 --bytes 4096
else
    echo "SKIP: $KT_NAME: no IPv6 loopback, [::1] not checked"
fi
check "UDP to 127.0.0.1 dropped" udp_rt "$C1" refused --count 3
check "UDP to localhost dropped once resolved" udp_rt "$C1" refused --dest-host localhost --count 3
LOGGED=$(tail -c +"$((SRV_MARK + 1))" "$SRV_LOG" | wc -l)
check "no log line for the refused flows ($LOGGED lines)" test "$LOGGED" = 0
stream_wait victim "$VICTIM" 20 "node t2 (allow_private): user 2's stream to 127.0.0.1 survived user 1's DELETE attempt"
check "daemon still runs" srv_alive

# --- allow_private: true: the same requests are served ----------------------------------
write_config
check "the reloaded config says allow_private: true" jq -e '.nodes[0].allow_private == true' \
    "$T/config.json"
srv_reload
check "reload to allow_private applied" reload_applied
via_proxy "$C1" "$API/v1/connections"
check "allow_private: the API answers through the proxy (sessions listed)" \
    jq -e '.sessions | length >= 1' "$T/via"
check "allow_private: TCP to 127.0.0.1" tcp_rt "$C1" ok --bytes 65536
check "allow_private: TCP to localhost" tcp_rt "$C1" ok --dest-host localhost --bytes 65536
check "allow_private: TCP to 127.0.0.2" tcp_rt "$C1" ok --dest-host 127.0.0.2 --bytes 65536
if [ "$HAVE_V6" = 1 ]; then
    check "allow_private: TCP to [::1]" tcp_rt "$C1" ok --dest-host ::1 --bytes 65536
fi
check "allow_private: UDP to 127.0.0.1" udp_rt "$C1" ok --count 3
check "allow_private: UDP to localhost" udp_rt "$C1" ok --dest-host localhost --count 3

# --- and back ---------------------------------------------------------------------------
# A UDP association opened while allow_private holds stays open across the reload back; its
# next datagrams to loopback must be dropped too (QA: the setting is read per datagram).
rm -f "$T/udp.ready" "$T/udp.go"
timeout 60 "${KT_PY[@]}" udp --socks "$C1" --dest-port "$ECHO_PORT" --expect ok --count 3 \
    --wait 1 --then-expect refused --ready-file "$T/udp.ready" --go-file "$T/udp.go" \
    >"$T/udp-live.out" 2>&1 & UDP_LIVE=$!
kt_wait_file "$T/udp.ready" 20 || fail "the live UDP association did not start"
write_config --no-allow-private
srv_reload
check "reload back to the default applied" reload_applied
touch "$T/udp.go"
R=0; wait "$UDP_LIVE" || R=$?
cat "$T/udp-live.out"
check "a UDP association open across the reload: echoed before, dropped after" test "$R" = 0
check "default again: TCP to 127.0.0.1 refused" tcp_rt "$C1" closed --bytes 4096
check "default again: the API is out of reach" refused_via_proxy "$C1" "$API/v1/connections"

srv_stop
check "SIGTERM: daemon exits 0" test "$SRV_RC" = 0
kt_finish
