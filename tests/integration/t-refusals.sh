#!/bin/bash
# Refusals the operator can see (issue "The operator's first hour"): a node without
# allow_private refuses private destinations, and a block route what it matches, silently for
# the client; /metrics counts each refusal by reason (katana_flows_refused_total{reason}) and,
# at debug level, one log line says what was refused and why, naming the knob that allows a
# private destination (nodes[].allow_private). With a real ss-local client: TCP to 127.0.0.1
# (private, loopback), to the name localhost (private, refused once resolved), UDP datagrams to
# 127.0.0.1 (private), TCP to a blocked domain and to a blocked 127.0.0.2/32 (blocked: the route
# wins over the private rule; the line names the panel's route id, an audit rule). A second
# node logging at info counts its refusal but logs nothing for it (the hot path formats no line
# above debug).
. "$(dirname "$0")/lib.sh"
kt_need ss-local curl
[ "$KT_SERVER" = katana ] || skip_all "refusal counters are katana's"

CIPHER=aes-128-gcm
U1=$(kt_uuid)
echo_start
kt_ports 4; API_PORT=${PORTS[1]}; API2_PORT=${PORTS[3]}
mkconfig "$T/debug.json" "${PORTS[0]}" "$CIPHER" --user "1:$U1" --no-allow-private \
    --block domain:blocked.test --block 127.0.0.2/32 --log-level debug --api-port "$API_PORT"
mkconfig "$T/info.json" "${PORTS[2]}" "$CIPHER" --user "1:$U1" --no-allow-private \
    --api-port "$API2_PORT"

# refused_n PORT REASON: katana_flows_refused_total{reason=REASON} on the API at PORT ("none"
# when the page lacks it)
refused_n() {
    curl -sS -m 10 "http://127.0.0.1:$1/metrics" | awk -v k="katana_flows_refused_total{reason=\"$2\"}" \
        'BEGIN { v = "none" } $1 == k { v = $2 } END { print v }'
}
# grew PORT REASON FROM: the count of REASON is above FROM
grew() { local n; n=$(refused_n "$1" "$2"); [ "$n" != none ] && [ "$n" -gt "$3" ]; }
# logged PATTERN: a refusal line matching PATTERN (grep -E) is in the debug node's log
logged() { grep -E -q "DEBUG sv\.connector session [0-9]+ user 1 \(node t1\): $1" "$SRV_LOG"; }

srv_start "$T/debug.json"
kt_wait_port "$API_PORT" 10 || { fail "API did not listen on $API_PORT"; exit 1; }
cl_start u1 "$CIPHER" "$U1" "$(srv_user_port 1)"; C1=$CL_PORT
curl -sS -m 10 "http://127.0.0.1:$API_PORT/metrics" >"$T/metrics0.txt"
grep '^katana_flows_refused_total' "$T/metrics0.txt"
every_reason() {
    local r
    for r in private blocked no_memory; do
        grep -q -x "katana_flows_refused_total{reason=\"$r\"} 0" "$T/metrics0.txt" ||
            { echo "no $r at 0"; return 1; }
    done
    grep -q -x '# TYPE katana_flows_refused_total counter' "$T/metrics0.txt"
}
check "katana_flows_refused_total lists every reason at 0 before any flow" every_reason

# --- private: 127.0.0.1 over TCP -----------------------------------------------------------
check "TCP to 127.0.0.1 refused (closed without data)" tcp_rt "$C1" closed --bytes 1024
check "... counted: katana_flows_refused_total{reason=\"private\"} 1" \
    test "$(refused_n "$API_PORT" private)" = 1
check "... and said at debug level, naming the destination, its class and the knob" \
    logged "tcp to 127\.0\.0\.1:$ECHO_PORT refused: private destination \(loopback\); set nodes\[\]\.allow_private to true to allow it$"

# --- private: the name localhost, refused once resolved -------------------------------------
check "TCP to localhost refused once resolved" tcp_rt "$C1" closed --dest-host localhost --bytes 1024
check "... counted as private (2)" kt_until 5 test "$(refused_n "$API_PORT" private)" = 2
check "... and said: the name resolves to an internal address" \
    logged "tcp to localhost:$ECHO_PORT refused: private destination \(the name resolves to an internal address\); set nodes\[\]\.allow_private to true to allow it$"

# --- private: a UDP datagram ---------------------------------------------------------------
check "UDP to 127.0.0.1 dropped" udp_rt "$C1" refused --count 2
check "... counted as private (each datagram)" grew "$API_PORT" private 2
check "... and said for udp" logged "udp to 127\.0\.0\.1:$ECHO_PORT refused: private destination \(loopback\)"

# --- blocked: a block route ----------------------------------------------------------------
P0=$(refused_n "$API_PORT" private)
check "TCP to blocked.test refused by its block route" \
    tcp_rt "$C1" refused --dest-host blocked.test --bytes 1024
check "... counted: katana_flows_refused_total{reason=\"blocked\"} 1" \
    test "$(refused_n "$API_PORT" blocked)" = 1
check "... and said: blocked by the panel's route 1, an audit rule" \
    logged "tcp to blocked\.test:$ECHO_PORT refused: blocked by route 1 \(an audit rule: the hit is reported to the panel\)$"
check "TCP to 127.0.0.2 (blocked 127.0.0.2/32, and private) refused" \
    tcp_rt "$C1" closed --dest-host 127.0.0.2 --bytes 1024
check "... counted as blocked (the route's decision), not private" \
    test "$(refused_n "$API_PORT" blocked)/$(refused_n "$API_PORT" private)" = "2/$P0"
check "no no_memory refusal" test "$(refused_n "$API_PORT" no_memory)" = 0
check "daemon still runs" srv_alive
srv_detach

# --- at info level: counted, not logged -----------------------------------------------------
SRV_LOG="$T/info.log"
srv_start "$T/info.json"
kt_wait_port "$API2_PORT" 10 || { fail "API did not listen on $API2_PORT"; exit 1; }
cl_start u2 "$CIPHER" "$U1" "$(srv_user_port 1)"; C2=$CL_PORT
check "info node: TCP to 127.0.0.1 refused" tcp_rt "$C2" closed --bytes 1024
check "info node: counted as private (1)" test "$(refused_n "$API2_PORT" private)" = 1
check "info node: no refusal line at info level" \
    bash -c '! grep -q "refused:" "$1"' _ "$SRV_LOG"
check "info node still runs" srv_alive
kt_finish
