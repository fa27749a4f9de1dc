#!/bin/bash
# gRPC transport ("gun", issue 10, PROTOCOLS-2.md §3) with the Xray-core client
# (tests/interop/xray/client-{vless,vmess,trojan}-grpc.json, service name kt-tun; the Trojan one
# in multiMode, i.e. TunMulti): VLESS, VMess and Trojan over TLS (ALPN h2), each node with
# network grpc and networkSettings.serviceName from the panel. On each: two users at the same
# time move 1 MiB byte-identical each way, each through a counting relay, and each user is
# billed exactly the wire bytes (TLS, HTTP/2, gun and protocol bytes) its relay counted; an idle
# user is billed nothing. Several proxied connections of one client share its HTTP/2 connection
# (one stream each): three at once are echoed identical; three paced ones are three flows of one
# session in GET /v1/connections, and DELETE /v1/connections/<id> cuts that one only, the other
# two complete byte-identical. UDP travels inside a stream: from Xray's VLESS client as XUDP
# (Mux.Cool sessions inside the stream, its default; VMess likewise), from its Trojan client as
# Trojan UDP; an Xray VLESS or VMess client with its "mux" on gets three connections echoed
# identical as sessions inside one stream. A
# client on the wrong service name gets no echo and no log line per attempt, and the others are
# served afterwards. VLESS over gRPC in clear (h2c) is served too, and there a client that ends
# its direction with its request (curl, END_STREAM) still gets the whole echo: half-close. Then
# sing-box's gRPC clients (tests/interop/sing-box/client-vless-grpc.json), the full one
# (grpc-go, the with_grpc build)
# and the "lite" one (PROTOCOLS-2.md §3.5: the build without with_grpc, peer sing-box-lite),
# each for two users, 1 MiB each way at the same time, billed exactly what their relays counted.
KT_LIMIT=${KT_LIMIT:-420}
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/trojan.sh"
. "$(dirname "$0")/../interop/peers.sh"
kt_need openssl jq curl
pr_need xray sing-box sing-box-lite
[ "$KT_SERVER" = katana ] || skip_all "KT_SERVER=$KT_SERVER: katana only"

MIB=1048576
SERVICE=kt-tun
# shutdown_grace of the nodes served: the clients' HTTP/2 connections are still open at SIGTERM,
# so katana waits this long before it closes them (the default 5 s only adds time)
GRACE=1
U1=$(kt_uuid); U2=$(kt_uuid); U3=$(kt_uuid)
tj_certs "$T/pki" server
echo_start

# gclient SCEN NAME SECRET SERVER_PORT [SERVICE] [TLS] [MUX]: the Xray client of template
# client-SCEN.json, with another service name when given, in clear when TLS is 0, with Mux.Cool
# on (its "mux" setting: every connection a session inside one stream) when MUX is 1; sets CL_PORT.
# It starts the client only: kt_listening waits until the clients started listen (they start
# side by side, and none connects before it is used).
gclient() {
    local svc=${5:-$SERVICE}
    kt_ports 1; CL_PORT=${PORTS[0]}
    pr_render "$PR_TEMPLATES/xray/client-$1.json" "$T/client-$2.json" LOCAL_PORT="$CL_PORT" \
        SERVER_PORT="$4" SECRET="$3" SNI="$TJ_SNI" CA_FILE="$TJ_CA"
    python3 - "$T/client-$2.json" "$svc" "${6:-1}" "${7:-0}" <<'PY'
import json, sys
f, svc, tls, mux = sys.argv[1:5]
c = json.load(open(f))
if mux == "1":
    c["outbounds"][0]["mux"] = {"enabled": True, "concurrency": 8}
st = c["outbounds"][0]["streamSettings"]
st["grpcSettings"]["serviceName"] = svc
if tls == "0":
    st["security"] = "none"
    del st["tlsSettings"]
json.dump(c, open(f, "w"))
PY
    pr_cmd xray "$T/client-$2.json"
    kt_bg "client-$2" "${PR_CMD[@]}"
    kt_listen_later "xray client $2" "$CL_PORT"
}

# half_close_h2c PORT UUID: curl over h2c (prior knowledge) POSTs a Tun stream carrying a VLESS
# request for the echo server and 256 KiB in 16 KiB Hunks, and ends its direction with them
# (END_STREAM): the outbound is half-closed, and the whole echo still comes back, then the
# trailers (PROTOCOLS-2.md §3.3).
half_close_h2c() {
    python3 - "$T/hc-req.bin" "$T/hc-want.bin" "$2" "$ECHO_PORT" <<'PY' || return 1
import os, struct, sys, uuid
req, want, uid, port = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
def hunk(d):
    v, n = b"", len(d)
    while True:
        v += bytes([n & 0x7F | (0x80 if n >> 7 else 0)])
        n >>= 7
        if not n:
            break
    return b"\0" + struct.pack(">I", 1 + len(v) + len(d)) + b"\x0a" + v + d
payload = os.urandom(262144)
head = b"\0" + uuid.UUID(uid).bytes + b"\0\x01" + struct.pack(">H", port) + b"\x01\x7f\0\0\x01"
body = hunk(head) + b"".join(hunk(payload[i:i + 16384]) for i in range(0, len(payload), 16384))
open(req, "wb").write(body)
open(want, "wb").write(payload)
PY
    curl -sS -m 20 --http2-prior-knowledge -H 'content-type: application/grpc' \
        --data-binary @"$T/hc-req.bin" -o "$T/hc-resp.bin" "http://127.0.0.1:$1/$SERVICE/Tun" ||
        return 1
    python3 - "$T/hc-resp.bin" "$T/hc-want.bin" <<'PY'
import struct, sys
r, want = open(sys.argv[1], "rb").read(), open(sys.argv[2], "rb").read()
got, i = b"", 0
while i + 5 <= len(r):
    n = struct.unpack(">I", r[i + 1:i + 5])[0]
    m, i, j, ln, sh = r[i + 5:i + 5 + n], i + 5 + n, 1, 0, 0
    while True:  # after the tag 0x0a: the data's length (varint), then the data
        b = m[j]
        j, ln, sh = j + 1, ln | (b & 0x7F) << sh, sh + 7
        if not b & 0x80:
            break
    got += m[j:j + ln]
print("response: %d bytes of data after VLESS's 2-byte header, %d sent" % (len(got) - 2, len(want)))
sys.exit(0 if got[:2] == b"\0\0" and got[2:] == want else 1)
PY
}

# udp_end_h2c PORT UUID: the same with a VLESS UDP request (command 2) and one datagram: a UDP
# session has no direction of its own, so the END_STREAM ends it; the daemon goes on.
udp_end_h2c() {
    python3 - "$T/hu-req.bin" "$2" "$ECHO_PORT" <<'PY' || return 1
import struct, sys, uuid
req, uid, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
head = b"\0" + uuid.UUID(uid).bytes + b"\0\x02" + struct.pack(">H", port) + b"\x01\x7f\0\0\x01"
msg = head + struct.pack(">H", 5) + b"hello"
open(req, "wb").write(b"\0" + struct.pack(">I", 2 + len(msg)) + b"\x0a" + bytes([len(msg)]) + msg)
PY
    curl -sS -m 10 --http2-prior-knowledge -H 'content-type: application/grpc' \
        --data-binary @"$T/hu-req.bin" -o /dev/null "http://127.0.0.1:$1/$SERVICE/Tun"
    sleep 0.5
    srv_alive
}

# api METHOD PATH: print the status code; the body is in $T/body.
api() {
    curl -sS -m 10 -X "$1" -H "Authorization: Bearer $TOKEN" -o "$T/body" -w '%{http_code}' \
        "http://127.0.0.1:$API_PORT$2"
}
# flows_of UID: the ids of user UID's live flows, one a line.
flows_of() {
    api GET /v1/connections >/dev/null
    jq -r --argjson u "$1" '.flows[] | select(.user.uid == $u) | .id' "$T/body"
}
# wait_flows UID N: until user UID has N live flows (10 s).
wait_flows() {
    local i
    for i in $(seq 1 100); do
        [ "$(flows_of "$1" | grep -c .)" = "$2" ] && return 0
        sleep 0.1
    done
    echo "flows of user $1:"; cat "$T/body"
    return 1
}
# one_session UID: user UID's live flows all belong to one session (one client connection).
one_session() {
    api GET /v1/connections >/dev/null
    local n
    n=$(jq --argjson u "$1" '[.flows[] | select(.user.uid == $u) | .session] | unique | length' \
        "$T/body")
    echo "sessions of user $1's flows: $n"
    [ "$n" = 1 ]
}

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

# scenario NAME PROTOCOL TLS SECRET1 SECRET2 [mkconfig options]
scenario() {
    local name=$1 proto=$2 tls=$3 s1=$4 s2=$5; shift 5
    local scen=$proto-grpc
    kt_ports 2; API_PORT=${PORTS[1]}; TOKEN=grpc-$$
    local port=${PORTS[0]}
    mkconfig "$T/config-$name.json" "$port" - --protocol "$proto" --user "1:$U1" \
        --user "2:$U2" --user "3:$U3" --grpc-service "$SERVICE" --grace "$GRACE" "$@"
    jq --arg l "127.0.0.1:$API_PORT" --arg t "$TOKEN" '.api = {listen: $l, token: $t}' \
        "$T/config-$name.json" >"$T/c.tmp" && mv "$T/c.tmp" "$T/config-$name.json"
    srv_start "$T/config-$name.json"
    kt_wait_port "$API_PORT" 10 || { fail "API did not listen on $API_PORT"; exit 1; }
    tj_counting_relay "$name-u1" "$port"; local to1=$RELAY_PORT
    tj_counting_relay "$name-u2" "$port"; local to2=$RELAY_PORT
    local c1 c2 bad cmux=
    gclient "$scen" "$name-u1" "$s1" "$to1" "$SERVICE" "$tls"; c1=$CL_PORT
    gclient "$scen" "$name-u2" "$s2" "$to2" "$SERVICE" "$tls"; c2=$CL_PORT
    gclient "$scen" "$name-bad" "$s1" "$port" other-svc "$tls"; bad=$CL_PORT
    if [ "$proto" != trojan ]; then   # used last (Mux.Cool inside a gRPC stream)
        gclient "$scen" "$name-mux" "$s1" "$port" "$SERVICE" "$tls" 1; cmux=$CL_PORT
    fi
    kt_listening
    pr_tcp_opts xray "$proto-tls"

    local r1=0 r2=0 p1 p2
    tcp_rt "$c1" ok --bytes "$MIB" --seed "$name-u1" --label "$name-u1" "${PR_TCP[@]}" >"$T/$name-u1.out" 2>&1 &
    p1=$!
    tcp_rt "$c2" ok --bytes "$MIB" --seed "$name-u2" --label "$name-u2" "${PR_TCP[@]}" >"$T/$name-u2.out" 2>&1 &
    p2=$!
    wait "$p1" || r1=$?
    wait "$p2" || r2=$?
    cat "$T/$name-u1.out" "$T/$name-u2.out"
    check "$name: user 1, 1 MiB each way over gRPC, echo identical" test "$r1" = 0
    check "$name: user 2 at the same time, 1 MiB each way, echo identical" test "$r2" = 0
    tj_relays_settle "$name-u1" "$name-u2"
    local snap; snap=$(usage_snapshot)
    echo "SIGUSR1 snapshot:"; echo "$snap"
    check "$name: usage of user 1 is the wire bytes its relay counted" tj_wire_is "$snap" 1 "$name-u1"
    check "$name: usage of user 2 is the wire bytes its relay counted" tj_wire_is "$snap" 2 "$name-u2"
    check "$name: idle user 3 billed nothing" no_usage "$snap" 3
    # the source outruns the client's HTTP/2 windows: the stream's queue must hold the
    # outbound back instead of overflowing (issue 11)
    check "$name: a 16 MiB download from a source that never waits arrives whole" \
        tcp_download "$c1" --bytes $((16 << 20)) --seed "$name-down" --label "$name-down"

    check "$name: three connections at once on one HTTP/2 connection, 256 KiB each, identical" \
        tcp_rt "$c1" ok --bytes 262144 --conns 3 --seed "$name-multi" "${PR_TCP[@]}"

    # three paced connections of one client: three HTTP/2 streams of one connection, three flows
    stream_bg "$name-a" "$c1" 3000000 300000 ok; local pa=$STREAM_PID
    stream_bg "$name-b" "$c1" 3000000 300000 ok; local pb=$STREAM_PID
    stream_bg "$name-k" "$c1" 8000000 300000 cut; local pk=$STREAM_PID
    check "$name: three streams of one client are three flows in the API" wait_flows 1 3
    check "$name: ... carried by one session (one connection)" one_session 1
    local victim st
    victim=$(flows_of 1 | sort -n | tail -n 1)
    st=$(api DELETE "/v1/connections/$victim")
    check "$name: DELETE /v1/connections/$victim (the third flow) -> 204" test "$st" = 204
    check "$name: the other two flows stay live" wait_flows 1 2
    stream_unpace "$name-a" "$name-b"   # checked while they ran: the rest needs no pacing
    stream_wait "$name-k" "$pk" 5 "$name: the killed stream is cut at once"
    stream_wait "$name-a" "$pa" 30 "$name: stream a completes byte-identical"
    stream_wait "$name-b" "$pb" 30 "$name: stream b completes byte-identical"

    check "$name: UDP inside a gRPC stream: 20 x 1200-byte datagrams echoed identical" \
        udp_rt "$c2" ok --count 20 --size 1200 --seed "$name-udp"
    if [ "$proto" = vless ] && [ "$tls" = 0 ]; then
        check "$name: a client that ends its direction (END_STREAM) still gets the whole echo" \
            half_close_h2c "$port" "$s1"
        check "$name: a UDP stream ended by END_STREAM just ends (the daemon goes on)" \
            udp_end_h2c "$port" "$s1"
    fi
    if [ -n "$cmux" ]; then
        check "$name: Mux.Cool inside a gRPC stream: three connections, 256 KiB each, identical" \
            tcp_rt "$cmux" ok --bytes 262144 --conns 3 --seed "$name-mux" "${PR_TCP[@]}"
    fi

    local lines0; lines0=$(tj_log_lines)
    check "$name: wrong service name: no echo" tcp_rt "$bad" refused --bytes 4096 --conns 3
    check "$name: wrong service name: no log line per attempt" test "$(tj_log_lines)" = "$lines0"
    check "$name: daemon still runs" srv_alive
    check "$name: user 2 served afterwards" tcp_rt "$c2" ok --bytes 65536 --seed after "${PR_TCP[@]}"
}

scenario vless-grpc-tls vless 1 "$U1" "$U2" --cert-file "$TJ_CERT" --key-file "$TJ_KEY"
srv_stop
check "vless-grpc-tls: SIGTERM: katana exits 0" test "$SRV_RC" = 0

scenario vmess-grpc-tls vmess 1 "$U1" "$U2" --cert-file "$TJ_CERT" --key-file "$TJ_KEY"
srv_stop
check "vmess-grpc-tls: SIGTERM: katana exits 0" test "$SRV_RC" = 0

scenario trojan-grpc-tls trojan 1 "$U1" "$U2" --cert-file "$TJ_CERT" --key-file "$TJ_KEY"
srv_stop
check "trojan-grpc-tls: SIGTERM: katana exits 0" test "$SRV_RC" = 0

scenario vless-grpc-h2c vless 0 "$U1" "$U2"
srv_stop
check "vless-grpc-h2c: SIGTERM: katana exits 0" test "$SRV_RC" = 0

# sing-box's gRPC client VENDOR (sing-box: grpc-go, the with_grpc build; sing-box-lite: its own
# HTTP/2 "lite" client, the build without the tag, which has no config key to pick it) on one
# VLESS+TLS gRPC node, one for each of two users.
sb_scenario() {
    local vendor=$1
    local name=$vendor-vless-grpc-tls
    kt_ports 1
    local port=${PORTS[0]}
    mkconfig "$T/config-$name.json" "$port" - --protocol vless --user "1:$U1" --user "2:$U2" \
        --grpc-service "$SERVICE" --cert-file "$TJ_CERT" --key-file "$TJ_KEY" --grace "$GRACE"
    srv_start "$T/config-$name.json"
    tj_counting_relay "$name-u1" "$port"; local to1=$RELAY_PORT
    tj_counting_relay "$name-u2" "$port"; local to2=$RELAY_PORT
    pr_client "$vendor" vless-grpc "$name-u1" "$U1" "$to1"; local c1=$CL_PORT
    pr_client "$vendor" vless-grpc "$name-u2" "$U2" "$to2"; local c2=$CL_PORT
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
    check "$name: three connections at once, 256 KiB each, identical" \
        tcp_rt "$c2" ok --bytes 262144 --conns 3 --seed "$name-multi"
    tj_relays_settle "$name-u1" "$name-u2"
    local snap; snap=$(usage_snapshot)
    echo "SIGUSR1 snapshot:"; echo "$snap"
    check "$name: usage of user 1 is the wire bytes its relay counted" tj_wire_is "$snap" 1 "$name-u1"
    check "$name: usage of user 2 is the wire bytes its relay counted" tj_wire_is "$snap" 2 "$name-u2"
    srv_stop
    check "$name: SIGTERM: katana exits 0" test "$SRV_RC" = 0
}
sb_scenario sing-box
sb_scenario sing-box-lite
kt_finish
