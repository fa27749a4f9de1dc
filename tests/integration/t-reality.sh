#!/bin/bash
# VLESS over REALITY (issue 11, PROTOCOLS-2.md §1) through the real daemon, its node from the
# panel emulator (a vless node with tls 2 and its REALITY tls_settings, PANEL.md §1.4). The
# target site is a local HTTPS server (reality_target.py, a self-signed certificate for
# localhost) named by tls_settings.server_name / server_port.
# - Probes: `openssl s_client` gets the target's certificate and `curl` its page through
#   katana's port; 1 000 more TLS probes get the page too, katana's memory stays bounded (RSS
#   grows by less than 8 MiB after a warm-up) and it logs nothing for them.
# - Xray-core REALITY clients with a wrong short id or a wrong public key are treated as probes:
#   the target sees their handshakes, their SOCKS connections get no echo, no log line.
# - Valid clients: Xray-core (user 1) and sing-box (user 2) VLESS+REALITY without Vision move
#   1 MiB each way at the same time, byte-identical, and each user is billed the bytes its
#   client moved (request header and response included, within TLS record overhead).
# - A valid client's ServerHello mirrors the one the target sent katana for that client (same
#   version, random, session id, cipher suite, extensions in order; only the key share's data
#   katana's), and katana's handshake records have the target's sizes (PROTOCOLS-2.md §1.5;
#   reality_target.py records its first flights, reality_hello.py compares).
KT_LIMIT=${KT_LIMIT:-300}
. "$(dirname "$0")/reality.sh"
rl_need xray sing-box

U1=$(kt_uuid); U2=$(kt_uuid); U3=$(kt_uuid)
SID=0123abcd
PAGE="reality target page $$"

rl_keys
rl_target "$PAGE"

# under AddressSanitizer (the CI's second run) freed memory sits in a quarantine of 256 MiB by
# default, which the RSS bound below would count: keep it small for this daemon
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=4
rl_node '{}' "$U1" "$U2" "$U3"

# --- probes ------------------------------------------------------------------------------
c0=$(target_count)
fp=$(timeout 10 openssl s_client -connect "127.0.0.1:$NODE_PORT" -servername localhost \
    </dev/null 2>/dev/null | openssl x509 -noout -fingerprint -sha256 || true)
echo "s_client saw: ${fp:-nothing}; the target's: $TARGET_FP"
check "openssl s_client to katana's port gets the target's certificate" test "$fp" = "$TARGET_FP"
page=$(timeout 10 curl -sk --resolve "localhost:$NODE_PORT:127.0.0.1" \
    "https://localhost:$NODE_PORT/" || true)
check "curl to katana's port gets the target's page" test "$page" = "$PAGE"
page=$(timeout 10 curl -sk --resolve "other.test:$NODE_PORT:127.0.0.1" \
    "https://other.test:$NODE_PORT/" || true)
check "curl with another SNI gets the target's page too" test "$page" = "$PAGE"
check "the target saw those three connections" test "$(target_count)" -ge $((c0 + 3))

# probes N: N TLS probes (8 at a time), each must get the page; prints how many did.
probes() {
    timeout 120 python3 - "$NODE_PORT" "$1" "$PAGE" <<'PY'
import socket, ssl, sys
from concurrent.futures import ThreadPoolExecutor
port, n, page = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3].encode()
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE
def one(_):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            with ctx.wrap_socket(s, server_hostname="localhost") as t:
                t.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
                data = b""
                while True:
                    c = t.recv(4096)
                    if not c:
                        break
                    data += c
        return data.endswith(page)
    except (OSError, ssl.SSLError):
        return False
with ThreadPoolExecutor(8) as ex:
    print(sum(ex.map(one, range(n))))
PY
}
check "100 warm-up probes get the target's page" test "$(probes 100)" = 100
sleep 1
rss0=$(tj_rss_kib "$SRV_PID"); lines0=$(tj_log_lines)
got=$(probes 1000)
sleep 1
rss1=$(tj_rss_kib "$SRV_PID"); lines1=$(tj_log_lines)
echo "1000 probes: $got got the page; RSS $rss0 -> $rss1 KiB; log lines $lines0 -> $lines1"
check "1 000 probes get the target's page" test "$got" = 1000
check "1 000 probes: RSS grows by less than 8 MiB" test $((rss1 - rss0)) -lt 8192
check "1 000 probes: no log line" test "$lines1" = "$lines0"

# --- a valid client's ServerHello mirrors the target's (§1.5) ---------------------------
c0=$(target_count)
out=$(timeout 20 python3 "$KT_DIR/reality_hello.py" --port "$NODE_PORT" --public-key="$PUB" \
    --short-id "$SID" --sni localhost --flight-file "$T/target.flight" 2>&1 || true)
echo "$out"
check "a valid client's hello reached the target once (katana's dial for its flight)" \
    test "$(target_count)" = $((c0 + 1))
check "a valid client's ServerHello mirrors the target's, records of the target's sizes" \
    test "$(sed -n 's/^mirror=//p' <<<"$out")" = ok

# --- replays and the default time window (issue 33) ------------------------------------
# mirrored HELLO-FILE OFFSET: "ok" when katana answered the hello (mirroring the target's
# flight), "differs" when the target answered it (relayed as a probe)
mirrored() {
    timeout 20 python3 "$KT_DIR/reality_hello.py" --port "$NODE_PORT" --public-key="$PUB" \
        --short-id "$SID" --sni localhost --offset "$2" --wait 2 --hello-file "$1" \
        --flight-file "$T/target.flight" 2>&1 | sed -n 's/^mirror=\([a-z]*\).*/\1/p'
}
first=$(mirrored "$T/hello-1" 0); again=$(mirrored "$T/hello-1" 0)
old=$(mirrored "$T/hello-old" -86400)
echo "a hello: $first; the same hello again: $again; a hello stamped a day ago: $old"
check "a valid hello is katana's" test "$first" = ok
check "the same hello replayed goes to the target" test "$again" = differs
check "with no max_time_diff, a day-old hello goes to the target (the default window)" \
    test "$old" = differs

# --- REALITY clients -------------------------------------------------------------------
# rclient VENDOR NAME UUID PUBLIC_KEY SHORT_ID: a VLESS+REALITY client (template
# tests/interop/VENDOR/client-vless-reality.json); sets CL_PORT.
rclient() { rl_client "$1" vless-reality "$2" "$3" "$4" "$5"; }

lines0=$(tj_log_lines)
rclient xray bad-sid "$U1" "$PUB" deadbeef; bad_sid=$CL_PORT
rclient xray bad-key "$U1" "$OTHER_PUB" "$SID"; bad_key=$CL_PORT
c0=$(target_count)
check "Xray client with a wrong short id: no echo" tcp_rt "$bad_sid" refused --bytes 4096
c1=$(target_count)
check "Xray client with a wrong short id: relayed to the target as a probe" test "$c1" -gt "$c0"
check "Xray client with a wrong public key: no echo" tcp_rt "$bad_key" refused --bytes 4096
check "Xray client with a wrong public key: relayed to the target as a probe" \
    test "$(target_count)" -gt "$c1"
check "wrong REALITY clients: no log line" test "$(tj_log_lines)" = "$lines0"

rclient xray u1 "$U1" "$PUB" "$SID"; C1=$CL_PORT
rclient sing-box u2 "$U2" "$PUB" "$SID"; C2=$CL_PORT
rl_pair vless-reality VLESS+REALITY; snap=$SNAP
# one connection each: the VLESS request header (26 bytes for 127.0.0.1) up, 00 00 down
check "usage of user 1 is the bytes moved" rl_billed "$snap" 1 $((MIB + 26)) $((MIB + 2))
check "usage of user 2 is the bytes moved" rl_billed "$snap" 2 $((MIB + 26)) $((MIB + 2))
check "idle user 3 billed nothing" test -z "$(awk '$1 == 3 && ($2 > 0 || $3 > 0)' <<<"$snap")"
check "daemon still runs" kt_alive "$SRV_PID"
kt_finish
