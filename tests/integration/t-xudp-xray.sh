#!/bin/bash
# XUDP GlobalID re-attach (issue 10, PROTOCOLS-2.md §5.3) with the real Xray-core client: VLESS
# in clear, UDP from the client's SOCKS5 inbound (Xray sends it as XUDP with a GlobalID from the
# UDP source address). The client reaches katana through a relay of katest's that drops the
# client's connection after a few datagrams; the client dials again on the next datagram from
# the same source, and the remote must see the same source port before and after, its answers
# reaching the client; the user is billed exactly the bytes of both connections.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/../interop/peers.sh"
[ "$KT_SERVER" = katana ] || skip_all "KT_SERVER=$KT_SERVER: XUDP is served by katana only"
pr_need xray

U1=$(kt_uuid); U2=$(kt_uuid)
kt_ports 2; PORT=${PORTS[0]}; RELAY=${PORTS[1]}
mkconfig "$T/config.json" "$PORT" - --protocol vless --user "1:$U1" --user "2:$U2"
srv_start "$T/config.json"
pr_client xray vless-tcp u1 "$U1" "$RELAY"

if "${KT_PY[@]}" xudp-client --socks "$CL_PORT" --relay-port "$RELAY" --server-port "$PORT" \
    >"$T/xudp.out" 2>&1; then
    pass "3 datagrams answered through the Xray client, its connection dropped, 3 more answered"
else
    fail "the Xray client's UDP through a dropped connection"
fi
cat "$T/xudp.out"
read -r _ before after <<<"$(grep '^XUDP_PORTS' "$T/xudp.out" || echo "- none none")"
check "the remote sees the same source port after the client reconnected (re-attached)" \
    test "$before" != none -a "$before" = "$after"
read -r _ wup wdown <<<"$(grep '^XUDP_WIRE' "$T/xudp.out" || echo "- none none")"
sleep 1.5   # the sampler folds counters every second
srv_usage_mark
kill -USR1 "$SRV_PID"
for _ in $(seq 1 40); do [ -n "$(srv_usage)" ] && break; sleep 0.1; done
snap=$(srv_usage)
echo "SIGUSR1 snapshot:"; echo "$snap"
read -r _ up down <<<"$(awk '$1 == 1' <<<"$snap")"
# down may hold one more End frame (6 bytes): when the new connection's New frame is read
# before the old connection's reset, the old one is told its session ended (into a dead socket)
billed() {
    echo "user 1: up ${up:-none} down ${down:-none}; relay up $wup down $wdown"
    [ "${up:-none}" = "$wup" ] && [ "${down:-0}" -ge "$wdown" ] && [ "$down" -le $((wdown + 6)) ]
}
check "user 1 is billed the bytes of both its connections" billed
check "... and user 2 nothing" test -z "$(awk '$1 == 2 && ($2 > 0 || $3 > 0)' <<<"$snap")"
check "daemon still runs" srv_alive
srv_stop
check "SIGTERM: katana exits 0" test "$SRV_RC" = 0
kt_finish
