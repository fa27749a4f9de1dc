#!/bin/bash
# Trojan over TLS end to end (issue 8), the smoke test of the runtime seams: trojan-gfw's
# forward client through katana to a loopback echo moves 1 MiB byte-identical and UDP datagrams
# (UDP ASSOCIATE inside the TLS stream, through the shared UDP fan-out), the user is billed; `curl -k https://` gets the fallback web server's page on a node with a
# fallback, and an HTTP 404 on a node without one. The interop matrix is in t-trojan-*.sh.
. "$(dirname "$0")/lib.sh"
kt_need trojan curl
needs_katana "a trojan node" || exit 77

MIB=1048576
U1=$(kt_uuid)
echo_start
kt_ports 5
P1=${PORTS[0]}; P2=${PORTS[1]}; WEB=${PORTS[2]}; FWD=${PORTS[3]}; API=${PORTS[4]}

# The fallback: a real web server with a page to recognise.
mkdir -p "$T/www"
echo "fallback page $U1" >"$T/www/index.html"
kt_bg web python3 -m http.server --bind 127.0.0.1 --directory "$T/www" "$WEB"
kt_wait_port "$WEB" 10 || { fail "web server did not start"; exit 1; }

node() { # node TAG PORT FALLBACK_JSON
    printf '{"tag": "%s", "listen": "127.0.0.1", "allow_private": true, "cert": {"mode": "self"}%s,
      "panel": {"type": "local", "node_type": "trojan",
        "node": {"server_port": %d, "server_name": "node.test", "network": "tcp"},
        "users": {"users": [{"id": 1, "uuid": "%s"}]}}}' "$1" "$3" "$2" "$U1"
}
cat >"$T/config.json" <<EOF
{"log": {"level": "info"}, "workers": 1, "api": {"listen": "127.0.0.1:$API"},
 "nodes": [$(node t1 "$P1" ", \"fallback\": \"127.0.0.1:$WEB\""), $(node t2 "$P2" "")]}
EOF
kt_bg server "$(katana_bin)" run -c "$T/config.json"
SRV_PID=$BG_PID
kt_wait_port "$P1" 10 && kt_wait_port "$P2" 10 || { fail "katana did not listen"; exit 1; }

cat >"$T/forward.json" <<EOF
{"run_type": "forward", "local_addr": "127.0.0.1", "local_port": $FWD,
 "remote_addr": "127.0.0.1", "remote_port": $P1,
 "target_addr": "127.0.0.1", "target_port": $ECHO_PORT,
 "password": ["$U1"], "log_level": 1,
 "ssl": {"verify": false, "verify_hostname": false, "sni": "node.test",
         "alpn": ["http/1.1"], "reuse_session": true, "session_ticket": false},
 "tcp": {"no_delay": true, "keep_alive": true, "fast_open": false}}
EOF
kt_bg trojan trojan -c "$T/forward.json"
kt_wait_port "$FWD" 10 || { fail "trojan client did not listen"; exit 1; }

check "trojan-gfw: 1 MiB through katana, echo identical" \
    timeout 60 "${KT_PY[@]}" tcp --direct "$FWD" --dest-port "$ECHO_PORT" --expect ok \
    --bytes "$MIB" --timeout 10 --label trojan

# UDP: trojan-gfw's forward mode carries the port's datagrams as Trojan UDP ASSOCIATE.
udp_echo() {
    python3 - "$FWD" <<'PY'
import os, socket, sys
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.settimeout(3)
ok = 0
for i in range(20):
    d = os.urandom(1 + i * 400)
    u.sendto(d, ("127.0.0.1", int(sys.argv[1])))
    try:
        ok += u.recvfrom(65536)[0] == d
    except socket.timeout:
        pass
print("udp: %d of 20 datagrams echoed identical" % ok)
sys.exit(0 if ok >= 18 else 1)
PY
}
check "trojan-gfw: UDP datagrams through katana, echo identical" udp_echo

BODY=$(curl -sk --max-time 10 "https://127.0.0.1:$P1/" || true)
echo "curl on the node with a fallback: '$BODY'"
check "curl -k on a node with a fallback gets the fallback's page" \
    test "$BODY" = "fallback page $U1"

CODE=$(curl -sk --max-time 10 -o /dev/null -w '%{http_code}' "https://127.0.0.1:$P2/" || true)
echo "curl on the node without a fallback: HTTP $CODE"
check "curl -k on a node without a fallback gets HTTP 404" test "$CODE" = 404

# Bad input at the TLS layer: a garbage record is closed at once; 300 clients that stop halfway
# through a ClientHello are dropped after the handshake bound (10 s) without a log line each,
# and a client is served meanwhile.
LINES0=$(wc -l <"$SRV_LOG")
bad_tls() {
    python3 - "$P2" <<'PY'
import socket, sys, time
port = int(sys.argv[1])
g = socket.create_connection(("127.0.0.1", port), timeout=5)
g.sendall(b"\x16\x03\x01\x00\x20" + bytes(range(32)))   # a handshake record that is no ClientHello
try:
    closed = g.recv(100) is not None   # an alert or EOF, not a hang
except socket.timeout:
    closed = False
hello = bytes.fromhex("16030100f4010000f00303") + bytes(32)
stalled = []
for _ in range(300):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(hello[:len(hello) // 2])
    stalled.append(s)
t0 = time.monotonic()
dropped = 0
for s in stalled:
    s.settimeout(max(0.1, 16 - (time.monotonic() - t0)))
    try:
        if s.recv(100) == b"":
            dropped += 1
    except (socket.timeout, ConnectionResetError):
        pass
print("garbage record closed: %s; %d of 300 stalled handshakes dropped in %.1fs"
      % (closed, dropped, time.monotonic() - t0))
sys.exit(0 if closed and dropped == 300 else 1)
PY
}
bad_tls_served() { # a client is served while the stalled handshakes wait
    CODE=$(curl -sk --max-time 10 -o /dev/null -w '%{http_code}' "https://127.0.0.1:$P2/" || true)
    test "$CODE" = 404
}
bad_tls >"$T/bad.out" 2>&1 & BAD=$!
sleep 2
check "a client is served while 300 handshakes stall" bad_tls_served
R=0; wait "$BAD" || R=$?
cat "$T/bad.out"
check "garbage record closed, stalled handshakes dropped within the bound" test "$R" = 0
LINES1=$(wc -l <"$SRV_LOG")
echo "server log: $((LINES1 - LINES0)) new lines during the bad input"
check "no log line per bad or stalled connection" test $((LINES1 - LINES0)) -lt 20

# Billing: the user moved 1 MiB each way through the echo (the fallback requests are nobody's).
sleep 1.5   # the sampler folds flow counters every second
srv_usage_mark
kill -USR1 "$SRV_PID"
for _ in $(seq 1 40); do [ -n "$(srv_usage)" ] && break; sleep 0.1; done
read -r _ UP DOWN <<<"$(srv_usage | awk '$1 == 1')"
echo "user 1: up ${UP:-none} down ${DOWN:-none}"
check "user 1 billed for at least 1 MiB each way" \
    test "${UP:-0}" -ge "$MIB" -a "${DOWN:-0}" -ge "$MIB"
check "katana still runs" kt_alive "$SRV_PID"
kt_finish
