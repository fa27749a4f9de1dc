#!/bin/bash
# AnyTLS nodes (issue 27) with sing-box's AnyTLS outbound: two users, 1 MiB byte-identical
# each way each at the same time; one session carrying stream after stream, one of them killed
# through the REST API (it is cut; the session and another user's stream go on); a wrong
# password gets the node's fallback (curl -k sees the fallback's page); UDP over TCP; usage per user.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/trojan.sh"
. "$(dirname "$0")/../interop/peers.sh"
kt_need curl openssl jq
needs_katana "anytls nodes" || exit 77
pr_need sing-box

MIB=1048576
U1=$(kt_uuid); U2=$(kt_uuid)
tj_certs "$T/pki" server
echo_start
kt_ports 3
NODE=${PORTS[0]}; WEB=${PORTS[1]}; API=${PORTS[2]}
TOKEN=anytls-test-token-$$

mkdir -p "$T/www"
echo "fallback page $U1" >"$T/www/index.html"
kt_bg web python3 -m http.server --bind 127.0.0.1 --directory "$T/www" "$WEB"
kt_wait_port "$WEB" 10 || { fail "web server did not start"; exit 1; }

cat >"$T/config.json" <<EOF
{"log": {"level": "info"}, "workers": 1,
 "api": {"listen": "127.0.0.1:$API", "token": "$TOKEN"},
 "nodes": [{"tag": "at", "listen": "127.0.0.1", "allow_private": true,
   "cert": {"mode": "file", "cert_file": "$TJ_CERT", "key_file": "$TJ_KEY"},
   "fallback": "127.0.0.1:$WEB",
   "panel": {"type": "local", "node_type": "anytls",
     "node": {"server_port": $NODE, "server_name": "node.test",
              "padding_scheme": ["stop=8", "0=30-30", "1=100-400",
                                 "2=400-500,c,500-1000,c,500-1000,c,500-1000,c,500-1000",
                                 "3=9-9,500-1000", "4=500-1000", "5=500-1000", "6=500-1000",
                                 "7=500-1000"]},
     "users": {"users": [{"id": 1, "uuid": "$U1"}, {"id": 2, "uuid": "$U2"}]}}}]}
EOF
SRV_LOG=$T/server.log
kt_bg server "$(katana_bin)" run -c "$T/config.json"
SRV_PID=$BG_PID
kt_wait_port "$NODE" 10 || { fail "katana did not listen"; cat "$SRV_LOG"; exit 1; }

pr_client sing-box anytls u1 "$U1" "$NODE"; C1=$CL_PORT
pr_client sing-box anytls u2 "$U2" "$NODE"; C2=$CL_PORT

tcp_rt "$C1" ok --bytes "$MIB" --seed u1 --label "sing-box u1" >"$T/u1.out" 2>&1 & P1=$!
tcp_rt "$C2" ok --bytes "$MIB" --seed u2 --label "sing-box u2" >"$T/u2.out" 2>&1 & P2=$!
R1=0; wait "$P1" || R1=$?
R2=0; wait "$P2" || R2=$?
cat "$T/u1.out" "$T/u2.out"
check "sing-box anytls (user 1): 1 MiB each way, identical" test "$R1" = 0
check "sing-box anytls (user 2), at the same time: 1 MiB each way, identical" test "$R2" = 0

# UDP: sing-box carries it as UDP over TCP (UoT v2) in an AnyTLS stream.
check "UDP via sing-box's AnyTLS (UoT v2, user 2): 20 x 1200-byte datagrams echoed identical" \
    udp_rt "$C2" ok --count 20 --size 1200 --seed at-udp

# Streams of one session: sing-box puts a new stream on its newest idle session (a session
# whose streams all ended), so one session carries stream after stream; killing a stream
# through the API ends that stream, not the session: the next stream rides it again.
api() {
    curl -sS -m 10 -X "$1" -H "Authorization: Bearer $TOKEN" -o "$T/body" -w '%{http_code}' \
        "http://127.0.0.1:$API$2"
}
session_of() { # NAME: the session id of user 1's live flow(s) (wait up to 10 s for one)
    local i
    for i in $(seq 1 100); do
        api GET /v1/connections >/dev/null
        local s; s=$(jq -r '[.flows[] | select(.user.uid == 1)] | max_by(.id) | .session // empty' "$T/body")
        [ -n "$s" ] && { echo "$s"; return 0; }
        sleep 0.1
    done
    return 1
}
flow_of_session() { api GET /v1/connections >/dev/null; jq -r --argjson s "$1" '[.flows[] | select(.session == $s)] | max_by(.id) | .id' "$T/body"; }
stream_bg x "$C1" 300000 100000 ok; PX=$STREAM_PID
SX=$(session_of); stream_unpace x
stream_wait x "$PX" 30 "a first stream of user 1 goes to the end, identical"
sleep 0.3
stream_bg a "$C1" 8000000 200000 cut; PA=$STREAM_PID
SA=$(session_of)
check "the next stream rides the same AnyTLS session (session $SX, then $SA)" test "$SX" = "$SA"
stream_bg b "$C2" 600000 100000 ok; PB=$STREAM_PID
FA=$(flow_of_session "$SA")
ST=$(api DELETE "/v1/connections/$FA")
check "kill user 1's stream through the API (DELETE /v1/connections/$FA -> $ST)" test "$ST" = 204
stream_wait a "$PA" 15 "the killed stream is cut"
sleep 0.3
stream_bg c "$C1" 200000 100000 ok; PC=$STREAM_PID
SC=$(session_of); stream_unpace c b
check "the session outlives the killed stream: the next stream rides it (session $SC)" test "$SC" = "$SA"
stream_wait c "$PC" 30 "that stream goes to the end, identical"
stream_wait b "$PB" 30 "user 2's stream, live during the kill, goes to the end, identical"

# A wrong password: the node's fallback answers, as a web server would.
BODY=$(curl -sk --max-time 10 "https://127.0.0.1:$NODE/" || true)
check "curl -k (not AnyTLS) gets the fallback's page" test "$BODY" = "fallback page $U1"
pr_client sing-box anytls bad "$(kt_uuid)" "$NODE"; CB=$CL_PORT
wrong_password_fails() { ! tcp_rt "$CB" ok --bytes 4096 --seed bad --timeout 3; }
check "a wrong password gets no echo through the node" wrong_password_fails

usage_snapshot() {
    sleep 1.5
    srv_usage_mark
    kill -USR1 "$SRV_PID"
    for _ in $(seq 1 40); do [ -n "$(srv_usage)" ] && break; sleep 0.1; done
    sleep 0.3
    srv_usage
}
in_bounds() { # LINES UID PAYLOAD_MIN
    local up down hi
    read -r _ up down <<<"$(awk -v u="$2" '$1 == u' <<<"$1")"
    hi=$(($3 + $3 / 10 + 65536))
    [ -n "${up:-}" ] || { echo "user $2: no usage line"; return 1; }
    echo "user $2: up $up down $down, expected each in [$3, $hi]"
    [ "$up" -ge "$3" ] && [ "$up" -le "$hi" ] && [ "$down" -ge "$3" ] && [ "$down" -le "$hi" ]
}
SNAP=$(usage_snapshot)
echo "SIGUSR1 snapshot:"; echo "$SNAP"
# user 2: 1 MiB + stream b's 600000 + 20 x 1200 datagram bytes each way; user 1: 1 MiB + streams x and c + what a moved
check "usage: user 2 billed for its bytes (AnyTLS framing and TLS records on top)" \
    in_bounds "$SNAP" 2 $((MIB + 600000 + 24000))
check "usage: user 1 billed at least its whole transfers" \
    bash -c 'read -r _ up down <<<"$(awk "\$1 == 1" <<<"$1")"; [ "${up:-0}" -ge $2 ] && [ "${down:-0}" -ge $2 ]' _ "$SNAP" $((MIB + 500000))

check "server still runs" kt_alive "$SRV_PID"
kill -TERM "$SRV_PID"; kt_wait_exit "$SRV_PID" 10 || true
check "SIGTERM: katana exits 0" test "$WAIT_RC" = 0
kt_finish
