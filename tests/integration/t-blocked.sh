#!/bin/bash
# Route block: destinations matched by a block route (CIDR and domain) are refused over TCP
# (SOCKS5 IPv4 and hostname) and UDP, while unblocked destinations work. A control server
# without those rules reaches the very same destinations, so the refusal is the route's doing.
# (All blocked targets are loopback: 127.0.0.2/32 and the name "localhost".)
# Regex entries (issue 3; katana only): a plain or regexp: entry is a caseless PCRE2 search in
# the destination name, and invalid or empty-matching entries (a||b, regexp:.*, *.x) are skipped,
# never turned into a block-everything rule: with only those, "localhost" stays reachable.
. "$(dirname "$0")/lib.sh"
kt_need ss-local

CIPHER=aes-256-gcm
U1=$(kt_uuid)
echo_start
check "echo reachable directly on 127.0.0.2" timeout 20 "${KT_PY[@]}" tcp --direct "$ECHO_PORT" \
    --dest-host 127.0.0.2 --dest-port "$ECHO_PORT" --bytes 1024 2>/dev/null || true
kt_ports 4
mkconfig "$T/control.json" "${PORTS[0]}" "$CIPHER" --user "1:$U1" --block domain:blocked.test
mkconfig "$T/blocking.json" "${PORTS[1]}" "$CIPHER" --user "1:$U1" \
    --block domain:blocked.test --block 10.9.0.0/16 --block 127.0.0.2/32 --block domain:localhost
mkconfig "$T/regex-bad.json" "${PORTS[2]}" "$CIPHER" --user "1:$U1" \
    --block 'a||b' --block 'regexp:.*' --block '*.x' --block 'protocol:bittorrent' --block 'x?'
mkconfig "$T/regex.json" "${PORTS[3]}" "$CIPHER" --user "1:$U1" \
    --block 'regexp:^LOCALHOS[T]$' --block 'ads[0-9]+\.example'

srv_start "$T/control.json"
cl_start control "$CIPHER" "$U1" "$(srv_user_port 1)"
check "control: 127.0.0.2 reachable (TCP)" tcp_rt "$CL_PORT" ok --dest-host 127.0.0.2 --bytes 65536
check "control: 127.0.0.2 reachable (UDP)" udp_rt "$CL_PORT" ok --dest-host 127.0.0.2 --count 3
check "control: hostname localhost reachable (TCP)" tcp_rt "$CL_PORT" ok --dest-host localhost --bytes 65536
check "control: blocked.test refused" tcp_rt "$CL_PORT" refused --dest-host blocked.test --bytes 1024
srv_detach

srv_start "$T/blocking.json"
cl_start blocking "$CIPHER" "$U1" "$(srv_user_port 1)"
check "blocked CIDR 127.0.0.2/32 refused (TCP)" tcp_rt "$CL_PORT" refused --dest-host 127.0.0.2 --bytes 4096
if needs_katana "UDP block (ss-server's ACL does not cover UDP)"; then
    check "blocked CIDR 127.0.0.2/32 refused (UDP)" udp_rt "$CL_PORT" refused --dest-host 127.0.0.2 --count 2
fi
check "blocked domain:localhost refused (TCP, SOCKS5 hostname)" \
    tcp_rt "$CL_PORT" refused --dest-host localhost --bytes 4096
check "blocked domain:blocked.test refused (TCP, SOCKS5 hostname)" \
    tcp_rt "$CL_PORT" refused --dest-host blocked.test --bytes 4096
check "daemon still runs" srv_alive
check "unblocked 127.0.0.1 served (TCP)" tcp_rt "$CL_PORT" ok --bytes 262144
check "unblocked 127.0.0.1 served (UDP)" udp_rt "$CL_PORT" ok --count 3
if needs_katana "regex block entries (PCRE2)"; then
    srv_detach
    srv_start "$T/regex-bad.json"
    cl_start regex-bad "$CIPHER" "$U1" "$(srv_user_port 1)"
    check "invalid/empty-matching regexes skipped: localhost served" \
        tcp_rt "$CL_PORT" ok --dest-host localhost --bytes 65536
    check "invalid/empty-matching regexes skipped: 127.0.0.1 served" \
        tcp_rt "$CL_PORT" ok --bytes 4096
    check "a warning names each skipped regex" \
        test "$(grep -c 'route 1: match ".*" skipped: ' "$SRV_LOG")" -ge 4
    srv_detach
    srv_start "$T/regex.json"
    cl_start regex "$CIPHER" "$U1" "$(srv_user_port 1)"
    check "regexp:^LOCALHOS[T]\$ refuses localhost (caseless)" \
        tcp_rt "$CL_PORT" refused --dest-host localhost --bytes 4096
    check "regex rule leaves 127.0.0.1 served" tcp_rt "$CL_PORT" ok --bytes 65536
fi
srv_stop
check "both daemons exit 0 on SIGTERM" test "$SRV_RC" = 0
kt_finish
