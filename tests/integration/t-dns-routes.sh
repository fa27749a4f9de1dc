#!/bin/bash
# Issue 13: panel routes with action `dns` (PANEL.md §1.4: the match entries are domains,
# action_value a DNS server) are served. Two real dnsmasq servers on 127.0.0.1 answer
# differently: the default one (the `dns` config) says split.test is 127.0.0.3, where nothing
# listens, and other.test is 127.0.0.1; the route's server says split.test is 127.0.0.1 and
# other.test 127.0.0.3. So a flow to split.test (TCP and UDP) reaches the echo server only when
# the route's server resolved it, and other.test only when the default one did; the query logs
# say which server was asked. A block route still wins over a dns route, and a dns route katana
# does not serve (DoH) is skipped with a warning, the node served.
. "$(dirname "$0")/lib.sh"
kt_need ss-local jq
command -v dnsmasq >/dev/null 2>&1 || skip_all "dnsmasq (dnsmasq-base) is not installed"
needs_katana "dns routes are katana's" || skip_all "needs katana"

CIPHER=aes-256-gcm
U1=$(kt_uuid)
echo_start
kt_ports 3; PORT=${PORTS[0]}; DNS_A=${PORTS[1]}; DNS_B=${PORTS[2]}

printf '127.0.0.3 split.test\n127.0.0.1 other.test\n127.0.0.1 blocked.split.test\n' >"$T/hosts.a"
printf '127.0.0.1 split.test\n127.0.0.3 other.test\n127.0.0.1 blocked.split.test\n' >"$T/hosts.b"
AS_ROOT=; [ "$(id -u)" = 0 ] && AS_ROOT=--user=root # else dnsmasq keeps our user
# dns_start NAME PORT: dnsmasq answering from $T/hosts.NAME, queries logged to $T/NAME.txt
dns_start() {
    kt_bg "dnsmasq-$1" dnsmasq --keep-in-foreground --conf-file=/dev/null --no-resolv --no-hosts \
        --addn-hosts="$T/hosts.$1" --listen-address=127.0.0.1 --bind-interfaces --port="$2" \
        --local-ttl=60 --log-queries --log-facility="$T/$1.txt" --pid-file= $AS_ROOT
    local i
    for ((i = 0; i < 100; i++)); do grep -q 'started' "$T/$1.txt" 2>/dev/null && break; sleep 0.05; done
    kt_alive "$BG_PID" || { fail "dnsmasq $1 did not start: $(cat "$T/dnsmasq-$1.log")"; exit 1; }
}
dns_start a "$DNS_A"
dns_start b "$DNS_B"
# asked SERVER NAME: A queries dnsmasq SERVER received for NAME
asked() { grep -c "query\[A\] $2 from" "$T/$1.txt" || true; }

mkconfig "$T/c.json" "$PORT" "$CIPHER" --user "1:$U1" --block domain:blocked.split.test
jq --arg a "127.0.0.1:$DNS_A" --arg b "127.0.0.1:$DNS_B" '
    .dns = {servers: [$a], timeout: 2}
    | .nodes[0].panel.node.routes += [
        {id: 2, match: ["domain:split.test"], action: "dns", action_value: $b},
        {id: 3, match: ["domain:doh.test"], action: "dns",
         action_value: "https://dns.example/dns-query"}]' "$T/c.json" >"$T/config.json"
srv_start "$T/config.json"
cl_start u1 "$CIPHER" "$U1" "$PORT"

check "TCP to split.test reaches the address the route's server gave" \
    tcp_rt "$CL_PORT" ok --dest-host split.test --bytes 65536
check "UDP to split.test reaches it too" \
    udp_rt "$CL_PORT" ok --dest-host split.test --count 3
check "the route's server was asked for split.test" test "$(asked b split.test)" -ge 1
check "the default server was not asked for split.test" test "$(asked a split.test)" = 0
check "a name outside the route (other.test) is resolved by the default server" \
    tcp_rt "$CL_PORT" ok --dest-host other.test --bytes 4096
check "... and the route's server was not asked for it" test "$(asked b other.test)" = 0
check "a block route wins over the dns route" \
    tcp_rt "$CL_PORT" refused --dest-host blocked.split.test --bytes 1024
check "an unserved dns route (DoH) is skipped with a warning" \
    grep -q 'route 3: dns route skipped: server "https://dns.example/dns-query"' "$SRV_LOG"
srv_stop
check "daemon exits 0 on SIGTERM" test "$SRV_RC" = 0
kt_finish
