#!/bin/bash
# Trojan fallback (issue 8): anything that is not a valid Trojan request is relayed to the
# node's "fallback" web server, so the node looks like that server: a client with a wrong
# password (trojan-gfw and v2ray), `curl -k https://127.0.0.1:PORT/` and `curl --cacert`
# all get the fallback's exact answer, while a client with the right password still works.
# Without a fallback: a plain HTTP/1.1 404, then close. A plain-HTTP (non-TLS) request and a TLS
# record of garbage get the connection closed without an HTTP answer. katana mode: 50 bad
# attempts add at most 2 log lines.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/trojan.sh"
kt_need trojan v2ray openssl curl
tj_need_server

U1=$(kt_uuid); WRONG=$(kt_uuid)
BODY="katana fallback page $(kt_uuid)"
tj_certs "$T/pki" server
echo_start
tj_httpd fallback "$BODY"; FB=$HTTPD_PORT

# curl_body URL [curl options]: the body curl gets (bounded; empty on failure)
curl_body() { local u=$1; shift; timeout 15 curl -s --max-time 10 "$@" "$u" || true; }
same_body() {   # DESCRIPTION GOT: the fallback's exact body
    if [ "$2" = "$BODY" ]; then pass "$1"; else fail "$1 (got '${2:0:200}')"; fi
}

# --- with a fallback --------------------------------------------------------------------
kt_ports 1
mkconfig "$T/fb.json" "${PORTS[0]}" - --protocol trojan --cert-file "$TJ_CERT" \
    --key-file "$TJ_KEY" --fallback "127.0.0.1:$FB" --user "1:$U1"
tj_srv_start "$T/fb.json"
PORT=$(tj_port)

same_body "curl -k https://127.0.0.1:PORT/ gets the fallback's answer" \
    "$(curl_body "https://127.0.0.1:$PORT/" -k)"
same_body "curl --cacert (verified, SNI node.test) gets the fallback's answer" \
    "$(curl_body "https://node.test:$PORT/some/path?q=1" --cacert "$TJ_CA" \
        --resolve "node.test:$PORT:127.0.0.1")"
same_body "curl --http1.1 -k with a POST body gets the fallback's answer" \
    "$(curl_body "https://127.0.0.1:$PORT/login" -k --http1.1 -d 'user=a&pass=b')"

tj_trojan_client good "$U1" "$PORT"; GOOD=$CL_PORT
check "the right password still works (trojan-gfw, 256 KiB echo)" \
    tcp_rt "$CL_PORT" ok --bytes 262144 --seed good
tj_trojan_client wrong-tj "$WRONG" "$PORT"; WTJ=$CL_PORT
same_body "trojan-gfw client with a wrong password: its request gets the fallback's answer" \
    "$(curl_body "http://127.0.0.1:$ECHO_PORT/" --socks5 "127.0.0.1:$WTJ")"
tj_v2ray_client wrong-v2 "$WRONG" "$PORT"; WV2=$CL_PORT
same_body "v2ray trojan-tls client with a wrong password: its request gets the fallback's answer" \
    "$(curl_body "http://127.0.0.1:$ECHO_PORT/" --socks5 "127.0.0.1:$WV2")"

probe() { timeout 30 "${KT_PY[@]}" tlsprobe --port "$PORT" --mode "$1" --wait 10; }
check "plain HTTP (no TLS) to the port: closed, no HTTP answer" probe plain
check "a TLS record of garbage: closed, no HTTP answer" probe garbage
check "server still runs" srv_alive

# 50 bad attempts of every kind; katana must not log a line per attempt
if [ "$KT_SERVER" = katana ]; then sleep 0.5; fi
LINES0=$(tj_log_lines)
BAD_OK=0
for i in $(seq 1 10); do
    [ "$(curl_body "https://127.0.0.1:$PORT/$i" -k)" = "$BODY" ] || BAD_OK=1
    [ "$(curl_body "http://127.0.0.1:$ECHO_PORT/$i" --socks5 "127.0.0.1:$WTJ")" = "$BODY" ] ||
        BAD_OK=1
    [ "$(curl_body "http://127.0.0.1:$ECHO_PORT/$i" --socks5 "127.0.0.1:$WV2")" = "$BODY" ] ||
        BAD_OK=1
    probe plain >/dev/null || BAD_OK=1
    probe garbage >/dev/null || BAD_OK=1
done
check "50 bad attempts (curl, 2 wrong-password clients, plain HTTP, garbage): all answered alike" \
    test "$BAD_OK" = 0
if needs_katana "log lines per bad attempt"; then
    sleep 1
    LINES1=$(tj_log_lines)
    echo "server log: $LINES0 lines before, $LINES1 after 50 bad attempts"
    check "50 bad attempts add at most 2 log lines" test $((LINES1 - LINES0)) -le 2
fi
check "right password still works after the bad attempts" \
    tcp_rt "$GOOD" ok --bytes 65536 --seed good2
srv_stop

# --- without a fallback: 404 and close ----------------------------------------------------
kt_ports 1
mkconfig "$T/nofb.json" "${PORTS[0]}" - --protocol trojan --cert-file "$TJ_CERT" \
    --key-file "$TJ_KEY" --user "1:$U1"
tj_srv_start "$T/nofb.json"
PORT=$(tj_port)
HEAD=$(timeout 15 curl -s -k -i --max-time 10 "https://127.0.0.1:$PORT/" | head -n 1 | tr -d '\r' || true)
echo "no fallback, curl -k: '$HEAD'"
check "no fallback: curl -k gets 'HTTP/1.1 404 ...'" grep -q '^HTTP/1.1 404' <<<"$HEAD"
tj_trojan_client wrong-tj2 "$WRONG" "$PORT"
CODE=$(timeout 15 curl -s -o /dev/null -w '%{http_code}' --max-time 10 \
    --socks5 "127.0.0.1:$CL_PORT" "http://127.0.0.1:$ECHO_PORT/" || true)
check "no fallback, wrong password (trojan-gfw client): HTTP 404 (got $CODE)" test "$CODE" = 404
check "no fallback: plain HTTP (no TLS) closed, no HTTP answer" probe plain
check "no fallback: a TLS record of garbage closed, no HTTP answer" probe garbage
srv_stop
if needs_katana "exit status on SIGTERM"; then
    check "SIGTERM: katana exits 0 within 7 s" test "$SRV_RC" = 0
fi
kt_finish
