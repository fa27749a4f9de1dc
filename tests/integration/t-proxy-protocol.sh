#!/bin/bash
# A node behind a load balancer (nodes[].accept_proxy_protocol): Debian's HAProxy fronts
# katana with `send-proxy` (PROXY v1) on one port and `send-proxy-v2` on another, and its own
# side is bound to 127.0.0.5, so every socket katana accepts comes from 127.0.0.5. Client A's
# ss-local dials the v1 front from 127.0.0.1; client B's goes through `katest relay` (bound to
# 127.0.0.2) to the v2 front. The API lists each flow with its client's address, not the
# balancer's; user 1's device limit of 1 tells the two clients apart (both arrive from
# 127.0.0.5); a client that dials katana without a header is closed, and so is one that sends
# nothing, within the header's 5 s (a debug line names why).
. "$(dirname "$0")/lib.sh"
kt_need ss-local haproxy curl jq
[ "$KT_SERVER" = katana ] || skip_all "accept_proxy_protocol needs katana"

CIPHER=aes-256-gcm
TOKEN=t0ken-$$
U1=$(kt_uuid); U2=$(kt_uuid)
echo_start
kt_ports 5
SRV=${PORTS[0]}; API_PORT=${PORTS[1]}; HV1=${PORTS[2]}; HV2=${PORTS[3]}; RELAY=${PORTS[4]}
mkconfig "$T/config.json" "$SRV" "$CIPHER" --user "1:$U1:1" --user "2:$U2" \
    --accept-proxy-protocol --log-level debug
jq --arg l "127.0.0.1:$API_PORT" --arg t "$TOKEN" '.api = {listen: $l, token: $t}' \
    "$T/config.json" >"$T/c.tmp" && mv "$T/c.tmp" "$T/config.json"
srv_start "$T/config.json"
kt_wait_port "$API_PORT" 10 || { fail "API did not listen on $API_PORT"; exit 1; }

cat >"$T/haproxy.cfg" <<EOF
global
    maxconn 64
defaults
    mode tcp
    timeout connect 5s
    timeout client 30s
    timeout server 30s
frontend v1
    bind 127.0.0.1:$HV1
    default_backend katana_v1
backend katana_v1
    server k 127.0.0.1:$SRV send-proxy source 127.0.0.5
frontend v2
    bind 127.0.0.1:$HV2
    default_backend katana_v2
backend katana_v2
    server k 127.0.0.1:$SRV send-proxy-v2 source 127.0.0.5
EOF
kt_bg haproxy haproxy -db -f "$T/haproxy.cfg"
kt_wait_port "$HV1" 10 && kt_wait_port "$HV2" 10 || { fail "haproxy did not listen"; exit 1; }
kt_bg relay "${KT_PY[@]}" relay --port "$RELAY" --to "$HV2" --source 127.0.0.2 \
    --ready-file "$T/relay.ready"
kt_wait_file "$T/relay.ready" 10 || { fail "relay did not start"; exit 1; }

api() {
    curl -sS -m 10 -H "Authorization: Bearer $TOKEN" -o "$T/body" -w '%{http_code}' \
        "http://127.0.0.1:$API_PORT$1"
}
# source_of UID: the source address (without the port) of user UID's live flow, "" when none.
source_of() {
    api /v1/connections >/dev/null
    jq -r --argjson u "$1" '[.flows[] | select(.user.uid == $u) | .source][0] // "" |
                            sub(":[0-9]+$"; "")' "$T/body"
}
# wait_source UID ADDR: until user UID's flow comes from ADDR (10 s).
wait_source() {
    local i s
    for i in $(seq 1 100); do
        s=$(source_of "$1"); [ "$s" = "$2" ] && return 0
        sleep 0.1
    done
    echo "user $1's flow source: '$s', expected $2"; return 1
}

# --- the client's address through both header versions ----------------------------------
cl_start a2 "$CIPHER" "$U2" "$HV1"; A2=$CL_PORT
cl_start b2 "$CIPHER" "$U2" "$RELAY"; B2=$CL_PORT
check "through HAProxy's v1 header: served" tcp_rt "$A2" ok --bytes 65536 --seed v1
check "through HAProxy's v2 header: served" tcp_rt "$B2" ok --bytes 65536 --seed v2
stream_bg held_v1 "$A2" 1048576 262144 ok; P=$STREAM_PID
check "v1: the flow's source is the client's 127.0.0.1, not the balancer's 127.0.0.5" \
    wait_source 2 127.0.0.1
stream_wait held_v1 "$P" 30 "v1: the held flow echoed whole"
stream_bg held_v2 "$B2" 1048576 262144 ok; P=$STREAM_PID
check "v2: the flow's source is the client's 127.0.0.2" wait_source 2 127.0.0.2
stream_wait held_v2 "$P" 30 "v2: the held flow echoed whole"

# --- the device limit sees the header's address -----------------------------------------
cl_start a1 "$CIPHER" "$U1" "$HV1"; A1=$CL_PORT
cl_start b1 "$CIPHER" "$U1" "$RELAY"; B1=$CL_PORT
stream_bg held1 "$A1" 1048576 262144 ok; P=$STREAM_PID
check "user 1 holds a session from 127.0.0.1" wait_source 1 127.0.0.1
check "device limit 1: user 1 from 127.0.0.2 refused (the balancer's address is the same)" \
    tcp_rt "$B1" refused --bytes 4096 --seed d1
stream_wait held1 "$P" 30 "device limit: the first client's flow never cut"

# --- without a valid header -------------------------------------------------------------
cl_start direct "$CIPHER" "$U2" "$SRV"; D=$CL_PORT
check "a client dialing the node without a PROXY header is refused" \
    tcp_rt "$D" refused --bytes 4096 --seed nd
check "a debug line says why" grep -q "connection closed before it opened: .*PROXY" "$SRV_LOG"
check "a connection that sends nothing is closed within the header's time" \
    python3 - "$SRV" <<'EOF'
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10)
t0 = time.monotonic()
try:
    data = s.recv(1)
except ConnectionResetError:
    data = b""
took = time.monotonic() - t0
print(f"closed after {took:.1f} s, read {data!r}")
sys.exit(0 if data == b"" and 3.0 <= took <= 9.0 else 1)
EOF
check "the time-out is said" grep -q "no whole PROXY header in time" "$SRV_LOG"

check "daemon still runs" srv_alive
srv_stop
check "daemon exits 0 on SIGTERM" test "$SRV_RC" = 0
kt_finish
