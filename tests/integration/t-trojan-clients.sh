#!/bin/bash
# Trojan over TLS with real clients (issue 8, issue 10): by default trojan-gfw's client (user 1)
# and v2ray's trojan-tls client (user 2) at the same time; with KT_CLIENT=v2ray, xray or
# sing-box that client for both users (Xray-core and sing-box: tests/interop/, proven by
# t-peers-selftest.sh). Every client verifies the node's certificate against a test CA; each
# user moves 1 MiB byte-identical each way; then UDP through both clients' SOCKS5 UDP
# ASSOCIATE. katana mode: each user is billed for its own bytes, within
# [payload, payload + 5% + 4 KiB] per direction (Trojan adds its 56+2+1+addr+2+2 byte request
# once per connection and an address+length+CRLF header per UDP datagram; TLS records add more
# if usage counts wire bytes), and an idle user 3 is billed nothing.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/trojan.sh"
. "$(dirname "$0")/../interop/peers.sh"
case $KT_CLIENT in
    "") kt_need trojan v2ray openssl; L1=trojan-gfw L2=v2ray ;;
    v2ray) kt_need v2ray openssl; L1=v2ray L2=v2ray ;;
    xray | sing-box) kt_need openssl; pr_need "$KT_CLIENT"; L1=$KT_CLIENT L2=$KT_CLIENT ;;
    *) skip_all "KT_CLIENT=$KT_CLIENT: no Trojan client of that name" ;;
esac
tj_need_server
pr_tcp_opts "$KT_CLIENT" trojan-tls

# tj_client USER NAME PASSWORD SERVER_PORT: user 1's or user 2's client; sets CL_PORT.
tj_client() {
    case $KT_CLIENT/$1 in
        /1) tj_trojan_client "$2" "$3" "$4" ;;
        /2 | v2ray/*) tj_v2ray_client "$2" "$3" "$4" ;;
        *) pr_client "$KT_CLIENT" trojan-tls "$2" "$3" "$4" ;;
    esac
}

MIB=1048576
U1=$(kt_uuid); U2=$(kt_uuid); U3=$(kt_uuid)
tj_certs "$T/pki" server
echo_start
kt_ports 1
mkconfig "$T/config.json" "${PORTS[0]}" - --protocol trojan --cert-file "$TJ_CERT" \
    --key-file "$TJ_KEY" --user "1:$U1" --user "2:$U2" --user "3:$U3"
tj_srv_start "$T/config.json"
PORT=$(tj_port)
tj_client 1 u1 "$U1" "$PORT"; C1=$CL_PORT
tj_client 2 u2 "$U2" "$PORT"; C2=$CL_PORT

# Both users at the same time, 1 MiB each way each.
tcp_rt "$C1" ok --bytes "$MIB" --seed u1 --label "$L1" "${PR_TCP[@]}" >"$T/u1.out" 2>&1 & P1=$!
tcp_rt "$C2" ok --bytes "$MIB" --seed u2 --label "$L2" "${PR_TCP[@]}" >"$T/u2.out" 2>&1 & P2=$!
R1=0; wait "$P1" || R1=$?
R2=0; wait "$P2" || R2=$?
cat "$T/u1.out" "$T/u2.out"
check "$L1 client (user 1): 1 MiB each way, echo identical" test "$R1" = 0
check "$L2 client (user 2), at the same time: 1 MiB each way, echo identical" \
    test "$R2" = 0

# in_bounds USAGE_LINES UID PAYLOAD: up and down both in [payload, payload + 5% + 4 KiB].
in_bounds() {
    local up down hi
    read -r _ up down <<<"$(awk -v u="$2" '$1 == u' <<<"$1")"
    hi=$(($3 + $3 / 20 + 4096))
    if [ -z "${up:-}" ]; then echo "user $2: no usage line"; return 1; fi
    echo "user $2: up $up down $down, expected each in [$3, $hi]"
    [ "$up" -ge "$3" ] && [ "$up" -le "$hi" ] && [ "$down" -ge "$3" ] && [ "$down" -le "$hi" ]
}
no_usage() {
    local l; l=$(awk -v u="$2" '$1 == u' <<<"$1")
    echo "user $2: '${l:-no line}'"
    [ -z "$l" ] || [ "$l" = "$2 0 0" ]
}
# usage_snapshot: SIGUSR1 and the usage lines it logs.
usage_snapshot() {
    sleep 1.5   # the sampler folds flow counters every second
    srv_usage_mark
    kill -USR1 "$SRV_PID"
    for _ in $(seq 1 40); do [ -n "$(srv_usage)" ] && break; sleep 0.1; done
    sleep 0.3
    srv_usage
}

if needs_katana "per-user usage after TCP"; then
    SNAP=$(usage_snapshot)
    echo "SIGUSR1 snapshot:"; echo "$SNAP"
    check "usage: user 1 ($L1) billed for 1 MiB each way" in_bounds "$SNAP" 1 "$MIB"
    check "usage: user 2 ($L2) billed for 1 MiB each way" in_bounds "$SNAP" 2 "$MIB"
    check "usage: idle user 3 billed nothing" no_usage "$SNAP" 3
fi

# UDP inside the Trojan stream (CMD 3), both clients.
check "UDP via $L2's Trojan: 20 x 1200-byte datagrams echoed identical" \
    udp_rt "$C2" ok --count 20 --size 1200 --seed v2-udp
check "UDP via $L1's client: 20 x 1200-byte datagrams echoed identical" \
    udp_rt "$C1" ok --count 20 --size 1200 --seed tj-udp
check "UDP via $L2's Trojan: 8-byte and 1400-byte datagrams" \
    eval 'udp_rt "$C2" ok --count 2 --size 8 --seed v2-small && udp_rt "$C2" ok --count 2 --size 1400 --seed v2-big'
check "TCP still works after UDP ($L1)" tcp_rt "$C1" ok --bytes 65536 --seed after "${PR_TCP[@]}"
check "server still runs" srv_alive

if needs_katana "per-user usage after UDP"; then
    # user 1: 1 MiB + 20 x 1200 + 64 KiB; user 2: 1 MiB + 20 x 1200 + 2 x 8 + 2 x 1400
    SNAP=$(usage_snapshot)
    echo "SIGUSR1 snapshot:"; echo "$SNAP"
    check "usage: user 1 billed for TCP + UDP each way" in_bounds "$SNAP" 1 $((MIB + 24000 + 65536))
    check "usage: user 2 billed for TCP + UDP each way" in_bounds "$SNAP" 2 $((MIB + 24000 + 2816))
    check "usage: idle user 3 still billed nothing" no_usage "$SNAP" 3
fi

srv_stop
if needs_katana "exit status on SIGTERM"; then
    check "SIGTERM: katana exits 0 within 7 s" test "$SRV_RC" = 0
fi
kt_finish
