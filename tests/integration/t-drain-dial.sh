#!/bin/bash
# A drain reaches a flow whose dial is still in flight (issue 24; seed 000 "Guarded": each
# outbound version has a closed token, cancelled by a Close drain, that a dial checks when it
# completes: such a flow fails with "the outbound this flow was opened on was drained"). The
# dial is held in katana's resolver: names late*.test are answered by a DNS server of the
# test's own (127.0.0.1, TTL 60) only after DELAY seconds. Through the real v2ray client over
# VLESS, without Mux.Cool (the connection's one flow) and with it (a sub-flow), a flow to a
# name of its own starts dialling on the shared direct outbound; while both wait for their
# answer, a SIGHUP changes that outbound's socket policy, so the version they were routed to is
# drained: under "close", and in a second round under {"close_after": 1} (its grace ends
# before the answers come). When the answers come, both dials complete on the drained version:
# each flow is closed without an echoed byte, and katana says why at debug level, once per
# flow. Afterwards the same names (now cached) are echoed on the new version, through the same
# clients.
. "$(dirname "$0")/lib.sh"
kt_need v2ray jq
[ "$KT_SERVER" = katana ] || skip_all "KT_SERVER=$KT_SERVER: outbound drains are katana's"

DELAY=4
U1=$(kt_uuid)
echo_start
kt_ports 2; PORT=${PORTS[0]}; DNS_PORT=${PORTS[1]}

# The DNS server: every question about a late*.test name is noted in $T/asked at once and
# answered after DELAY seconds (A: 127.0.0.1, AAAA: no record); other names get no record.
kt_bg dns python3 -c '
import socket, struct, sys, threading, time
port, delay, asked, ready = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3], sys.argv[4]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("127.0.0.1", port))
open(ready, "w").close()
def answer(q, peer, wait):
    time.sleep(wait)
    end = q.index(b"\0", 12) + 5
    qtype = struct.unpack("!H", q[end - 4:end - 2])[0]
    n = 1 if qtype == 1 and wait else 0
    rr = b"\xc0\x0c\0\x01\0\x01" + struct.pack("!IH", 60, 4) + bytes([127, 0, 0, 1])
    s.sendto(q[:2] + b"\x81\x80" + struct.pack("!HHHH", 1, n, 0, 0) + q[12:end] +
             (rr if n else b""), peer)
while True:
    q, peer = s.recvfrom(2048)
    late = b"\x05late" in q
    if late:
        with open(asked, "a") as f:
            f.write(q[13:q.index(b"\0", 12)].split(b"\x04")[0].decode() + "\n")
    threading.Thread(target=answer, args=(q, peer, delay if late else 0), daemon=True).start()
' "$DNS_PORT" "$DELAY" "$T/asked" "$T/dns.ready"
kt_wait_file "$T/dns.ready" 10 || { fail "the DNS server did not start"; exit 1; }

mkconfig "$T/base.json" "$PORT" - --protocol vless --user "1:$U1" --log-level debug
# write_config IDLE [POLICY]: the base config, its resolver asking our DNS server, drain policy
# POLICY (JSON, default "close"), and the shared direct outbound's keepalive idle time IDLE (a
# change builds a new version of it)
write_config() {
    jq --arg s "127.0.0.1:$DNS_PORT" --argjson idle "$1" --argjson p "${2:-\"close\"}" '
        .dns = {servers: [$s], timeout: 8} | .policies = {drain: $p}
        | .outbound = {tcp_keepalive: {idle: $idle, interval: 10, count: 5}}' \
        "$T/base.json" >"$T/config.json"
}
write_config 60
srv_start "$T/config.json"

# client NAME MUX: the v2ray client with a SOCKS5 inbound and a VLESS outbound, Mux.Cool on when
# MUX is true; sets CL_PORT
client() {
    kt_ports 1; CL_PORT=${PORTS[0]}
    cat >"$T/client-$1.json" <<JSON
{"log": {"loglevel": "warning", "access": "none"},
 "inbounds": [{"listen": "127.0.0.1", "port": $CL_PORT, "protocol": "socks",
   "settings": {"auth": "noauth", "udp": false}}],
 "outbounds": [{"protocol": "vless", "mux": {"enabled": $2, "concurrency": 8},
   "settings": {"vnext": [{"address": "127.0.0.1", "port": $PORT,
     "users": [{"id": "$U1", "encryption": "none"}]}]},
   "streamSettings": {"network": "tcp", "security": "none"}}]}
JSON
    kt_bg "client-$1" v2ray -config "$T/client-$1.json"
    kt_listen_later "v2ray client $1" "$CL_PORT"
}
client plain false; PLAIN=$CL_PORT
client mux true; MUX=$CL_PORT
kt_listening

# late_flow NAME SOCKS HOST: a round trip to HOST in the background, expecting the connection to
# close without an echoed byte; sets LATE_PID
late_flow() {
    kt_bg "$1" timeout 60 "${KT_PY[@]}" tcp --socks "$2" --dest-host "$3" \
        --dest-port "$ECHO_PORT" --bytes 4096 --expect closed --timeout 15 --label "$1"
    LATE_PID=$BG_PID
}
# wait_late NAME PID WHAT: the flow ended as expected (closed, no echo) within DELAY + 15 s
wait_late() {
    if kt_wait_exit "$2" $((DELAY + 15)) && [ "$WAIT_RC" = 0 ]; then pass "$3"; else fail "$3"; fi
    cat "$T/$1.log"
}
# round NAME POLICY IDLE N: a flow through each client to lateN.test and late(N+1).test, both
# waiting for their names while a reload replaces the direct outbound (keepalive idle IDLE)
# under drain POLICY; both are closed when their dials complete, each said once; then the
# same names are echoed on the new version
round() {
    local n=$1 host1=late$4 host2=late$(($4 + 1)) p1 p2
    late_flow "$n-plain" "$PLAIN" "$host1.test"; p1=$LATE_PID
    late_flow "$n-mux" "$MUX" "$host2.test"; p2=$LATE_PID
    check "$n: both dials wait for their names in katana's resolver" \
        kt_until 10 grep -qx "$host2" "$T/asked"
    check "$n: ... both" kt_until 10 grep -qx "$host1" "$T/asked" # the clients start unordered
    local before; before=$(grep -c "$DRAINED" "$SRV_LOG" || true)
    write_config "$3" "$2"
    srv_reload
    check "$n: the reload is applied" reload_applied
    check "$n: it builds a new direct version and drains the old one" \
        grep -q "1 built, .*1 drained" <<<"$SRV_RELOAD_LOG"
    wait_late "$n-plain" "$p1" "$n: a flow whose dial completed after the drain is closed, nothing echoed"
    wait_late "$n-mux" "$p2" "$n: ... and so is a Mux.Cool sub-flow's"
    local said; said=$(($(grep -c "$DRAINED" "$SRV_LOG" || true) - before))
    check "$n: katana says why, once per flow ($said lines)" test "$said" = 2
    check "$n: afterwards $host1.test is echoed (the new version)" \
        tcp_rt "$PLAIN" ok --dest-host "$host1.test" --bytes 65536 --seed "$n-after-plain"
    check "$n: ... and $host2.test through the live mux client" \
        tcp_rt "$MUX" ok --dest-host "$host2.test" --bytes 65536 --seed "$n-after-mux"
}
DRAINED="the outbound this flow was opened on was drained"
round close '"close"' 61 1
# the grace (1 s) ends before the answers come (DELAY): the version's token is cancelled then
round close-after '{"close_after": 1}' 62 3
srv_stop
check "SIGTERM: katana exits 0" test "$SRV_RC" = 0
kt_finish
