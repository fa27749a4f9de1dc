#!/bin/bash
# The SOCKS5, HTTP proxy and mixed node types (issue 27) with real clients: curl
# (--socks5-hostname, --proxy http:// plain and --proxytunnel, --proxy https:// to a node with
# tls 1), Xray-core's socks and http outbounds (also over TLS) and sing-box's socks, http and
# http-over-TLS outbounds, each moving 1 MiB byte-identical each way; wrong or missing
# credentials (407 with Proxy-Authenticate, SOCKS5's refusal); SOCKS5 UDP ASSOCIATE with the
# test's own client (the relay drops other IPs and fragments); a mixed port serving both; a
# no_auth node; the rewrite of a plain forward request (hop-by-hop headers gone); exact usage per
# user.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/trojan.sh"
. "$(dirname "$0")/../interop/peers.sh"
kt_need curl openssl
needs_katana "the proxy node types" || exit 77

MIB=1048576
U1=$(kt_uuid); U2=$(kt_uuid); U3=$(kt_uuid)
tj_certs "$T/pki" server
echo_start
kt_ports 8
S0=${PORTS[0]}; S1=${PORTS[1]}; H0=${PORTS[2]}; H1=${PORTS[3]}; MX=${PORTS[4]}; NA=${PORTS[5]}
WEB=${PORTS[6]}; API=${PORTS[7]}

kt_bg web python3 "$KT_DIR/blobweb.py" serve "$WEB" "$T/web.ready"
kt_wait_file "$T/web.ready" 10 || { fail "web server did not start"; exit 1; }

# node TAG TYPE PORT TLS EXTRA USERS_JSON
node() {
    local cert=""
    [ "$4" = 1 ] && cert=", \"cert\": {\"mode\": \"file\", \"cert_file\": \"$TJ_CERT\", \"key_file\": \"$TJ_KEY\"}"
    printf '{"tag": "%s", "listen": "127.0.0.1", "allow_private": true%s%s,
      "panel": {"type": "local", "node_type": "%s",
        "node": {"server_port": %d, "tls": %d},
        "users": {"users": %s}}}' "$1" "$cert" "$5" "$2" "$3" "$4" "$6"
}
TWO="[{\"id\": 1, \"uuid\": \"$U1\"}, {\"id\": 2, \"uuid\": \"$U2\"}]"
ONE="[{\"id\": 3, \"uuid\": \"$U3\"}]"
cat >"$T/config.json" <<EOF
{"log": {"level": "info"}, "workers": 1, "api": {"listen": "127.0.0.1:$API"},
 "nodes": [$(node s0 socks "$S0" 0 "" "$TWO"), $(node s1 socks "$S1" 1 "" "$TWO"),
           $(node h0 http "$H0" 0 "" "$TWO"), $(node h1 http "$H1" 1 "" "$TWO"),
           $(node mx mixed "$MX" 0 "" "$TWO"), $(node na socks "$NA" 0 ', "no_auth": true' "$ONE")]}
EOF
SRV_LOG=$T/server.log
kt_bg server "$(katana_bin)" run -c "$T/config.json"
SRV_PID=$BG_PID
for p in "$S0" "$S1" "$H0" "$H1" "$MX" "$NA"; do
    kt_wait_port "$p" 10 || { fail "katana did not listen on $p"; cat "$SRV_LOG"; exit 1; }
done

python3 "$KT_DIR/blobweb.py" write "$MIB" up "$T/up.bin"
python3 "$KT_DIR/blobweb.py" write "$MIB" down "$T/down.bin"
UP_SHA=$(sha256sum <"$T/up.bin" | cut -d' ' -f1)
DOWN_SHA=$(sha256sum <"$T/down.bin" | cut -d' ' -f1)
URL=http://127.0.0.1:$WEB

# transfer LABEL CURL_PROXY_ARGS...: 1 MiB down (GET, compared) and 1 MiB up (PUT, the server's
# SHA-256 of what it got) through the proxy.
transfer() {
    local label=$1 got up; shift
    got=$(curl -s --max-time 30 "$@" "$URL/blob/$MIB/down" | sha256sum | cut -d' ' -f1)
    up=$(curl -s --max-time 30 "$@" -T "$T/up.bin" "$URL/put" || true)
    echo "$label: down sha256 ${got:0:16}.. (want ${DOWN_SHA:0:16}..), up ${up:0:16}.. (want ${UP_SHA:0:16}..)"
    [ "$got" = "$DOWN_SHA" ] && [ "$up" = "$UP_SHA" ]
}

check "curl --socks5-hostname (user 1): 1 MiB each way, identical" \
    transfer socks5 --socks5-hostname "$U1:$U1@127.0.0.1:$S0"
check "curl --proxy http:// plain forward (user 2): 1 MiB each way, identical" \
    transfer http-forward --proxy "http://$U2:$U2@127.0.0.1:$H0"
check "curl --proxy http:// --proxytunnel CONNECT (user 1): 1 MiB each way, identical" \
    transfer http-connect --proxytunnel --proxy "http://$U1:$U1@127.0.0.1:$H0"
check "curl --proxy https:// (tls 1, CA-verified, user 2): 1 MiB each way, identical" \
    transfer https-proxy --proxy "https://$U2:$U2@127.0.0.1:$H1" --proxy-cacert "$TJ_CA"
check "mixed port, SOCKS5 (user 1): 1 MiB each way, identical" \
    transfer mixed-socks --socks5-hostname "$U1:$U1@127.0.0.1:$MX"
check "mixed port, HTTP proxy (user 2): 1 MiB each way, identical" \
    transfer mixed-http --proxy "http://$U2:$U2@127.0.0.1:$MX"
check "no_auth socks node: a client without credentials passes (user 3)" \
    transfer no-auth --socks5-hostname "127.0.0.1:$NA"

# The forwarded request as the origin got it: origin form, hop-by-hop and credentials gone.
HEAD=$(curl -s --max-time 10 --proxy "http://$U1:$U1@127.0.0.1:$H0" -H 'Keep-Alive: 5' \
    -H 'Connection: keep-alive, X-Hop' -H 'X-Hop: 1' -H 'X-Kept: 2' "$URL/head" | tr -d '\r')
echo "origin saw:"; echo "$HEAD"
check "forward request: origin-form request line" grep -qx 'GET /head HTTP/1.1' <<<"$HEAD"
check "forward request: Proxy-Authorization, Keep-Alive and Connection-named headers removed" \
    bash -c '! grep -qiE "^(proxy-authorization|proxy-connection|keep-alive|x-hop):" <<<"$1"' _ "$HEAD"
check "forward request: end-to-end headers kept, Connection: close" \
    bash -c 'grep -qx "X-Kept: 2" <<<"$1" && grep -qix "connection: close" <<<"$1"' _ "$HEAD"

# Tunnels in clear are relayed in the kernel once open (splice): counted in /metrics.
SPLICED=$(curl -s --max-time 5 "http://127.0.0.1:$API/metrics" | awk '$1 == "katana_vision_splice_total" { print $2 }')
check "plain SOCKS5 and HTTP CONNECT tunnels were spliced (katana_vision_splice_total ${SPLICED:-none})" \
    test "${SPLICED:-0}" -ge 3

# Refusals.
HDRS=$(curl -s --max-time 10 -o /dev/null -D - --proxy "http://127.0.0.1:$H0" "$URL/head" | tr -d '\r')
check "http: no credentials get 407 with Proxy-Authenticate: Basic" \
    bash -c 'grep -q "^HTTP/1.1 407" <<<"$1" && grep -qi "^proxy-authenticate: basic" <<<"$1"' _ "$HDRS"
CODE=$(curl -s --max-time 10 -o /dev/null -w '%{http_code}' --proxy "http://$U1:wrong@127.0.0.1:$H0" "$URL/head" || true)
check "http: a wrong password gets 407 (got $CODE)" test "$CODE" = 407
CODE=$(curl -s --max-time 10 -o /dev/null -w '%{http_code}' --proxy "http://$U3:$U3@127.0.0.1:$H0" "$URL/head" || true)
check "http: another node's user gets 407 (got $CODE)" test "$CODE" = 407
RC=0; curl -s --max-time 10 -o /dev/null --socks5-hostname "$U1:wrong@127.0.0.1:$S0" "$URL/head" || RC=$?
check "socks5: a wrong password is refused (curl exit $RC)" test "$RC" != 0
RC=0; curl -s --max-time 10 -o /dev/null --socks5-hostname "127.0.0.1:$S0" "$URL/head" || RC=$?
check "socks5: no credentials on an auth node are refused (curl exit $RC)" test "$RC" != 0

# The test's own SOCKS5 client (katest.py with RFC 1929 credentials): TCP, then UDP ASSOCIATE
# through the node's relay socket.
export KATEST_SOCKS_AUTH=$U2:$U2
check "katest SOCKS5 client (user 2): 1 MiB each way to the echo, identical" \
    tcp_rt "$S0" ok --bytes "$MIB" --seed katest-socks --label katest-socks
check "SOCKS5 UDP ASSOCIATE (user 2): 20 x 1200-byte datagrams echoed identical" \
    udp_rt "$S0" ok --count 20 --size 1200 --seed socks-udp
check "mixed port, SOCKS5 UDP ASSOCIATE (user 2): 5 x 512-byte datagrams echoed identical" \
    udp_rt "$MX" ok --count 5 --size 512 --seed mixed-udp
unset KATEST_SOCKS_AUTH
# The relay takes datagrams from the client's IP only, and drops fragments (RFC 1928 §7).
relay_rules() {
    python3 - "$KT_DIR" "$S0" "$U1" "$ECHO_PORT" <<'PY'
import socket, sys
sys.path.insert(0, sys.argv[1])
import katest
import os
os.environ["KATEST_SOCKS_AUTH"] = "%s:%s" % (sys.argv[3], sys.argv[3])
ctl, host, port = katest.socks_open(int(sys.argv[2]), 3, "0.0.0.0", 0, 5)
relay = ("127.0.0.1" if host in ("0.0.0.0", "::") else host, port)
head = katest.socks_addr("127.0.0.1", int(sys.argv[4]))
def tries(src, frag, tag):
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.bind((src, 0))
    u.settimeout(0.7)
    for _ in range(3):
        u.sendto(b"\0\0" + bytes([frag]) + head + tag, relay)
        try:
            if u.recvfrom(65536)[0].endswith(tag):
                return True
        except socket.timeout:
            pass
    return False
other = tries("127.0.0.2", 0, b"from-another-ip")
frag = tries("127.0.0.1", 1, b"a-fragment")
good = tries("127.0.0.1", 0, b"whole-from-client")
print("relay %s:%d: other IP echoed=%s fragment echoed=%s client echoed=%s"
      % (relay[0], relay[1], other, frag, good))
sys.exit(0 if good and not other and not frag else 1)
PY
}
check "SOCKS5 relay: drops another IP's datagrams and fragments, echoes the client's" relay_rules

# Real clients' outbounds, 1 MiB each way to the echo through their local SOCKS5 port.
peer_rt() { # VENDOR SCEN PORT SECRET
    pr_client "$1" "$2" "$1-$2" "$4" "$3"
    tcp_rt "$CL_PORT" ok --bytes "$MIB" --seed "$1-$2" --label "$1 $2"
    local rc=$?
    kill "$CL_PID" 2>/dev/null; wait "$CL_PID" 2>/dev/null
    return $rc
}
PEER_BYTES=0
for v in xray sing-box; do
    pr_current "$v" || { echo "SKIP: $v is not built here"; continue; }
    scens=(socks http http-tls); [ "$v" = xray ] && scens+=(socks-tls)
    for s in "${scens[@]}"; do
        case $s in socks) p=$S0 ;; socks-tls) p=$S1 ;; http) p=$H0 ;; http-tls) p=$H1 ;; esac
        check "$v $s outbound (user 1): 1 MiB each way through katana, identical" \
            peer_rt "$v" "$s" "$p" "$U1"
        PEER_BYTES=$((PEER_BYTES + MIB))
    done
done

# Usage: user 1 moved 3 curl transfers + the head request + the peers' bytes each way (and the
# relay test's few datagrams), user 2 three transfers + katest's 1 MiB + 20 x 1200 and
# 5 x 512 datagram bytes, user 3 one; payload bytes only, within [payload, payload + 5% + 16 KiB]
# (HTTP heads and the web server's answers' heads).
usage_snapshot() {
    sleep 1.5
    srv_usage_mark
    kill -USR1 "$SRV_PID"
    for _ in $(seq 1 40); do [ -n "$(srv_usage)" ] && break; sleep 0.1; done
    sleep 0.3
    srv_usage
}
in_bounds() { # LINES UID PAYLOAD
    local up down hi
    read -r _ up down <<<"$(awk -v u="$2" '$1 == u' <<<"$1")"
    hi=$(($3 + $3 / 20 + 16384))
    [ -n "${up:-}" ] || { echo "user $2: no usage line"; return 1; }
    echo "user $2: up $up down $down, expected each in [$3, $hi]"
    [ "$up" -ge "$3" ] && [ "$up" -le "$hi" ] && [ "$down" -ge "$3" ] && [ "$down" -le "$hi" ]
}
SNAP=$(usage_snapshot)
echo "SIGUSR1 snapshot:"; echo "$SNAP"
check "usage: user 1 billed for its bytes" in_bounds "$SNAP" 1 $((3 * MIB + PEER_BYTES))
check "usage: user 2 billed for its bytes" in_bounds "$SNAP" 2 $((4 * MIB + 24000 + 2560))
check "usage: user 3 (no_auth) billed for its bytes" in_bounds "$SNAP" 3 "$MIB"

check "server still runs" kt_alive "$SRV_PID"
kill -TERM "$SRV_PID"; kt_wait_exit "$SRV_PID" 10 || true
check "SIGTERM: katana exits 0" test "$WAIT_RC" = 0
kt_finish
