#!/bin/bash
# Issue 13 "DNS": katana resolves names on its workers' loops with the servers of its "dns"
# config, here a real dnsmasq on 127.0.0.1 (a port of its own, an addn-hosts file, --local-ttl 2,
# every query logged):
#  - a name with several A records of which the first ones refuse connections still connects
#    (every address is tried, Happy Eyeballs);
#  - a name whose first address never answers a SYN (a listener with a full accept queue)
#    connects to the second, started 250 ms later, long before any connect timeout;
#  - a name whose server never answers (dnsmasq forwards *.slow.test to a UDP socket that reads
#    and never replies) costs one timeout for every flow waiting for it, one query in all, and
#    other names are served meanwhile;
#  - a cached answer is used until its TTL, then the name is asked again;
#  - UDP datagrams to a name being resolved (0.5 s) wait and are relayed, not dropped;
#  - strategy ipv4_only / ipv6_only: a name with only an address of the other family fails.
. "$(dirname "$0")/lib.sh"
kt_need ss-local jq
command -v dnsmasq >/dev/null 2>&1 || skip_all "dnsmasq (dnsmasq-base) is not installed"
needs_katana "the dns config is katana's" || skip_all "needs katana"

CIPHER=aes-256-gcm
U1=$(kt_uuid)
echo_start
HAVE_V6=0; grep -q '::1' "$T/echo.log" && HAVE_V6=1
kt_ports 3; PORT=${PORTS[0]}; DNS_PORT=${PORTS[1]}; SILENT_PORT=${PORTS[2]}

# The upstream dnsmasq forwards *.slow.test and *.delay.test to: never answers a slow.test
# name; answers a delay.test A question with 127.0.0.1 (TTL 60) after 0.5 s, others empty.
kt_bg silent python3 -c '
import socket, struct, sys, threading, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("127.0.0.1", int(sys.argv[1])))
def answer(q, peer):
    time.sleep(0.5)
    end = q.index(b"\0", 12) + 5
    qtype = struct.unpack("!H", q[end - 4:end - 2])[0]
    rr = b"\xc0\x0c\0\x01\0\x01" + struct.pack("!IH", 60, 4) + bytes([127, 0, 0, 1])
    n = 1 if qtype == 1 else 0
    s.sendto(q[:2] + b"\x81\x80" + struct.pack("!HHHH", 1, n, 0, 0) + q[12:end] +
             (rr if n else b""), peer)
while True:
    q, peer = s.recvfrom(2048)
    if b"\x05delay" in q:
        threading.Thread(target=answer, args=(q, peer), daemon=True).start()
' "$SILENT_PORT"

# 127.0.0.3-5 refuse (nothing listens there); 127.0.0.1 and ::1 run the echo server.
cat >"$T/hosts" <<HOSTS
127.0.0.3 two.test
127.0.0.4 two.test
127.0.0.5 two.test
127.0.0.1 two.test
127.0.0.6 hang.test
127.0.0.1 hang.test
127.0.0.1 ttl.test
127.0.0.1 udp.test
127.0.0.1 only4.test
::1 only6.test
HOSTS
AS_ROOT=; [ "$(id -u)" = 0 ] && AS_ROOT=--user=root # else dnsmasq keeps our user
kt_bg dnsmasq dnsmasq --keep-in-foreground --conf-file=/dev/null --no-resolv --no-hosts \
    --addn-hosts="$T/hosts" --listen-address=127.0.0.1 --bind-interfaces --port="$DNS_PORT" \
    --local-ttl=2 --log-queries --log-facility="$T/queries.txt" --pid-file= $AS_ROOT \
    --server="/slow.test/127.0.0.1#$SILENT_PORT" --server="/delay.test/127.0.0.1#$SILENT_PORT"
for ((i = 0; i < 100; i++)); do grep -q 'started' "$T/queries.txt" 2>/dev/null && break; sleep 0.05; done
kt_alive "$BG_PID" || { fail "dnsmasq did not start: $(cat "$T/dnsmasq.log")"; exit 1; }

# queries NAME: A queries dnsmasq received for NAME so far
queries() { grep -c "query\[A\] $1 from" "$T/queries.txt" || true; }

# write_config STRATEGY: one worker (one cache), the dns config pointing at dnsmasq
write_config() {
    mkconfig "$T/c.json" "$PORT" "$CIPHER" --user "1:$U1" --workers 1
    jq --arg s "127.0.0.1:$DNS_PORT" --arg st "$1" \
        '.dns = {servers: [$s], timeout: 2, strategy: $st}' "$T/c.json" >"$T/config.json"
}

write_config prefer_ipv4
srv_start "$T/config.json"
cl_start u1 "$CIPHER" "$U1" "$PORT"; C1=$CL_PORT

check "a name whose first three addresses refuse connects to the fourth" \
    tcp_rt "$C1" ok --dest-host two.test --bytes 65536
check "... and again (from the cache)" tcp_rt "$C1" ok --dest-host two.test --bytes 4096

# A listener on 127.0.0.6 whose accept queue is full: a SYN to it gets no answer.
kt_bg hang python3 -c '
import socket, sys, time
l = socket.socket(); l.bind(("127.0.0.6", int(sys.argv[1]))); l.listen(0)
held = []
for i in range(2):
    c = socket.socket(); c.setblocking(False); c.connect_ex(("127.0.0.6", int(sys.argv[1])))
    held.append(c)
time.sleep(0.3)
open(sys.argv[2], "w").close()
time.sleep(600)
' "$ECHO_PORT" "$T/hang.ready"
kt_wait_file "$T/hang.ready" 10 || fail "the hanging listener did not start"
check "a name whose first address never answers connects to the next one" \
    tcp_rt "$C1" ok --dest-host hang.test --bytes 65536

# --- a server that never answers ---------------------------------------------------------------
SLOW=()
for i in 1 2 3 4 5 6; do
    timeout 30 "${KT_PY[@]}" tcp --socks "$C1" --dest-host x.slow.test --dest-port "$ECHO_PORT" \
        --expect closed --timeout 10 --bytes 1024 >"$T/slow$i.out" 2>&1 &
    SLOW+=($!)
done
START=$(date +%s%N)
sleep 0.3
check "another name is served while x.slow.test waits" \
    tcp_rt "$C1" ok --dest-host ttl.test --bytes 65536
running=0
for p in "${SLOW[@]}"; do kill -0 "$p" 2>/dev/null && running=$((running + 1)); done
check "the 6 flows to x.slow.test were still waiting meanwhile ($running)" test "$running" = 6
ok=0
for p in "${SLOW[@]}"; do wait "$p" && ok=$((ok + 1)); done
ELAPSED=$((($(date +%s%N) - START) / 1000000))
check "all 6 flows to the silent name end closed ($ok)" test "$ok" = 6
# one timeout (2 s) for all of them, not one per flow (generous bound)
check "they cost one timeout together: ${ELAPSED} ms < 6000" test "$ELAPSED" -lt 6000
check "one query for x.slow.test however many flows waited ($(queries x.slow.test))" \
    test "$(queries x.slow.test)" = 1

# --- TTL ---------------------------------------------------------------------------------------
# ttl.test was answered above (TTL 2 s) at least 1 s ago: wait it out, then ask twice quickly
sleep 2.2
before=$(queries ttl.test)
check "ttl.test after its TTL" tcp_rt "$C1" ok --dest-host ttl.test --bytes 4096
check "ttl.test once more, at once" tcp_rt "$C1" ok --dest-host ttl.test --bytes 4096
after=$(queries ttl.test)
check "expired answer re-queried once, then cached ($before -> $after)" \
    test "$after" = $((before + 1))

# --- UDP ---------------------------------------------------------------------------------------
check "UDP datagrams to a name being resolved are relayed, not dropped" \
    udp_rt "$C1" ok --dest-host udp.test --count 5 --size 300 --wait 3
check "one query for udp.test ($(queries udp.test))" test "$(queries udp.test)" = 1

# burst NAME N: one UDP association through ss-local, N datagrams to NAME sent at once (the
# name takes 0.5 s to resolve), then count the echoes within 5 s
burst() {
    timeout 20 python3 -c '
import socket, struct, sys, time
socks, name, port, n = int(sys.argv[1]), sys.argv[2].encode(), int(sys.argv[3]), int(sys.argv[4])
c = socket.create_connection(("127.0.0.1", socks), timeout=5)
c.sendall(b"\x05\x01\x00"); c.recv(2)
c.sendall(b"\x05\x03\x00\x01" + bytes(4) + bytes(2))
r = c.recv(10)
relay = ("127.0.0.1", struct.unpack("!H", r[8:10])[0])
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.bind(("127.0.0.1", 0))
hdr = b"\0\0\0\x03" + bytes([len(name)]) + name + struct.pack("!H", port)
for i in range(n):
    u.sendto(hdr + b"burst-%d" % i, relay)
    time.sleep(0.01)
got = set()
u.settimeout(0.5)
end = time.monotonic() + 5
while len(got) < n and time.monotonic() < end:
    try:
        got.add(u.recv(2048))
    except socket.timeout:
        pass
print(len(got))
' "$1" "$2" "$ECHO_PORT" "$3"
}
echoed=$(burst "$C1" x.delay.test 8)
check "8 datagrams sent while x.delay.test resolves all wait and are echoed ($echoed)" \
    test "$echoed" = 8
srv_stop
check "katana exits 0 on SIGTERM" test "$SRV_RC" = 0

# --- strategies ---------------------------------------------------------------------------------
write_config ipv4_only
srv_start "$T/config.json"
check "ipv4_only: an A-only name connects" tcp_rt "$C1" ok --dest-host only4.test --bytes 4096
check "ipv4_only: an AAAA-only name fails" tcp_rt "$C1" closed --dest-host only6.test --bytes 1024
srv_stop
if [ "$HAVE_V6" = 1 ]; then
    write_config ipv6_only
    srv_start "$T/config.json"
    check "ipv6_only: an AAAA-only name connects" tcp_rt "$C1" ok --dest-host only6.test --bytes 4096
    check "ipv6_only: an A-only name fails" tcp_rt "$C1" closed --dest-host only4.test --bytes 1024
    check "ipv6_only: two.test (A records only) fails" \
        tcp_rt "$C1" closed --dest-host two.test --bytes 1024
    srv_stop
else
    echo "SKIP: $KT_NAME: no IPv6 loopback, ipv6_only not checked"
fi
check "katana exits 0 on SIGTERM" test "$SRV_RC" = 0
kt_finish
