#!/bin/bash
# Sniffing (issue 9, Xray's routeOnly): a client that asks for the IP 127.0.0.1 but names a host
# in its first bytes is routed on that name. With a block rule on domain:blocked.test, real curl
# through ss-local (--socks5: curl sends the IP, not the name) is refused for an HTTPS request
# whose TLS SNI is blocked.test and for an HTTP request with "Host: blocked.test", while the same
# requests naming other hosts reach the very same servers; a live TLS flow is listed by
# GET /v1/connections with its sniffed_host and its requested destination; a client that
# speaks no first word (the server speaks first) is still relayed once the sniff time bound
# passes. All servers are loopback (allow_private).
. "$(dirname "$0")/lib.sh"
kt_need ss-local curl jq openssl
[ "$KT_SERVER" = katana ] || skip_all "sniffing is katana's (ss-server has none)"

CIPHER=aes-256-gcm
TOKEN=tok-$(kt_uuid)
U1=$(kt_uuid)
echo_start
kt_ports 5; PORT=${PORTS[0]}; API_PORT=${PORTS[1]}; HTTP_PORT=${PORTS[2]}
TLS_PORT=${PORTS[3]}; QUIET_PORT=${PORTS[4]}
mkconfig "$T/config.json" "$PORT" "$CIPHER" --user "1:$U1" --block domain:blocked.test
jq --arg l "127.0.0.1:$API_PORT" --arg t "$TOKEN" '.api = {listen: $l, token: $t}' \
    "$T/config.json" >"$T/c.tmp" && mv "$T/c.tmp" "$T/config.json"

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 30 \
    -keyout "$T/tls.key" -out "$T/tls.crt" -subj "/CN=open.test" 2>/dev/null
kt_bg httpd "${KT_PY[@]}" httpd --port "$HTTP_PORT" --body "plain-ok" --ready-file "$T/httpd.ready"
kt_wait_file "$T/httpd.ready" 10 || { fail "httpd did not start"; exit 1; }
kt_bg tls-www openssl s_server -accept "127.0.0.1:$TLS_PORT" -cert "$T/tls.crt" \
    -key "$T/tls.key" -www -quiet
# the quiet server reads its stdin from a FIFO this shell holds open (an EOF there would end
# its connections; a background job's own stdin is /dev/null)
mkfifo "$T/quiet.in"; exec 3<>"$T/quiet.in"
kt_bg tls-quiet bash -c 'exec openssl s_server -accept "$1" -cert "$2" -key "$3" -quiet <"$4"' \
    _ "127.0.0.1:$QUIET_PORT" "$T/tls.crt" "$T/tls.key" "$T/quiet.in"
kt_wait_port "$TLS_PORT" 10 || { fail "openssl s_server did not listen"; exit 1; }
kt_wait_port "$QUIET_PORT" 10 || { fail "openssl s_server (quiet) did not listen"; exit 1; }

srv_start "$T/config.json"
kt_wait_port "$API_PORT" 10 || { fail "API did not listen on $API_PORT"; exit 1; }
cl_start u1 "$CIPHER" "$U1" "$(srv_user_port 1)"; C1=$CL_PORT

# https_as NAME PORT: HTTPS through the tunnel to 127.0.0.1:PORT with SNI NAME (curl resolves
# NAME itself and sends the SOCKS5 server the IP); the body in $T/out.
https_as() {
    curl -sS -k -m 10 --socks5 "127.0.0.1:$C1" --resolve "$1:$2:127.0.0.1" -o "$T/out" \
        "https://$1:$2/" 2>"$T/curl.err"
}
# http_as NAME: HTTP through the tunnel to 127.0.0.1 with "Host: NAME"; the body in $T/out.
http_as() {
    curl -sS -m 10 --socks5 "127.0.0.1:$C1" -H "Host: $1" -o "$T/out" \
        "http://127.0.0.1:$HTTP_PORT/" 2>"$T/curl.err"
}
not() { ! "$@"; }
api() {
    curl -sS -m 10 -H "Authorization: Bearer $TOKEN" -o "$T/body" -w '%{http_code}' \
        "http://127.0.0.1:$API_PORT$1"
}

check "HTTPS with SNI open.test to 127.0.0.1 is served" https_as open.test "$TLS_PORT"
check "HTTPS with SNI blocked.test to 127.0.0.1 is refused" not https_as blocked.test "$TLS_PORT"
check "HTTPS with SNI sub.blocked.test (domain rule covers subdomains) is refused" \
    not https_as sub.blocked.test "$TLS_PORT"
check "HTTP with Host: open.test to 127.0.0.1 is served" http_as open.test
check "... and its answer is the server's" grep -qx plain-ok "$T/out"
check "HTTP with Host: Blocked.Test:80 to 127.0.0.1 is refused" not http_as Blocked.Test:80
# speaks_first: a server on loopback that greets first, and a client through the tunnel that
# reads the greeting without sending a byte, then echoes one line (bounded: 15 s).
speaks_first() {
    timeout 15 python3 - "$C1" "$KT_DIR" <<'PY'
import socket, sys, threading
sys.path.insert(0, sys.argv[2])
import katest
ls = socket.socket(); ls.bind(("127.0.0.1", 0)); ls.listen(1)
def serve():
    c, _ = ls.accept()
    c.sendall(b"220 greeting\r\n")
    c.sendall(c.recv(100))
    c.close()
threading.Thread(target=serve, daemon=True).start()
s, _, _ = katest.socks_open(int(sys.argv[1]), 1, "127.0.0.1", ls.getsockname()[1], 10)
s.settimeout(10)
assert katest.recv_exact(s, 14) == b"220 greeting\r\n"
s.sendall(b"HELO x\r\n")
assert katest.recv_exact(s, 8) == b"HELO x\r\n"
print("greeting and echo ok")
PY
}
check "a client that sends nothing first (the server speaks first) is relayed" speaks_first
check "a client whose first bytes are neither TLS nor HTTP is relayed" tcp_rt "$C1" ok --bytes 4096

# a live TLS flow to the quiet server (it answers the handshake, then never the request)
kt_bg live curl -sS -k -m 30 --socks5 "127.0.0.1:$C1" --resolve "live.test:$QUIET_PORT:127.0.0.1" \
    -o /dev/null "https://live.test:$QUIET_PORT/"
LIVE=$BG_PID
seen=0
for _ in $(seq 1 100); do
    if [ "$(api /v1/connections)" = 200 ] &&
        jq -e --arg d "127.0.0.1:$QUIET_PORT" \
            '.flows[] | select(.sniffed_host == "live.test" and .destination == $d)' \
            "$T/body" >/dev/null; then
        seen=1; break
    fi
    sleep 0.1
done
[ "$seen" = 1 ] || cat "$T/body"
check "GET /v1/connections shows the live flow's sniffed_host and the requested IP" test "$seen" = 1
kill "$LIVE" 2>/dev/null
check "daemon still runs" srv_alive
srv_stop
check "katana exits 0 on SIGTERM" test "$SRV_RC" = 0
kt_finish
