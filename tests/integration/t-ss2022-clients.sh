#!/bin/bash
# Shadowsocks 2022 with the real Xray-core client (issue 10, PROTOCOLS.md §3): a
# 2022-blake3-aes-128-gcm node with Xboard's server_key and three users (identity headers, the
# client password "server_key:user_key" with user_key = base64 of the first 16 characters of
# the UUID, PANEL.md §1.4; the client config is first checked against Xray-core's own server),
# a single-user 2022-blake3-aes-256-gcm node (password = the user key) and a single-user
# 2022-blake3-chacha20-poly1305 node (its UDP in XChaCha20-Poly1305). Two users at the same
# time move 1 MiB byte-identical each way and each is billed the bytes its client moved
# (payload plus at most the per-connection headers and per-chunk tags); UDP datagrams of both
# users come back identical and are billed; an idle user is billed nothing; a client whose
# user the node does not know gets no echo. Crafted requests (tests/integration/ss22probe.py): a fresh one is answered; one 60 s
# old, a replay of the same bytes, an identity header of an unknown user get no byte back and
# no log line; the same for UDP datagrams (a replayed packet ID). With sing-box in the same
# folder, its client (user 3) moves 1 MiB and UDP through the multi-user node too. Skips (77) without Xray-core: it is built by tests/setup-deps.sh with the Go
# toolchain (KT_XRAY overrides the path).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/trojan.sh"
[ "$KT_SERVER" = katana ] || skip_all "KT_SERVER=$KT_SERVER: no reference SS2022 server mode"
XRAY=${KT_XRAY:-/var/cache/katana-peers/bin/xray}
if [ ! -x "$XRAY" ]; then
    command -v go >/dev/null || [ -x /usr/local/go/bin/go ] || skip_all "no Go toolchain"
    skip_all "no Xray-core at $XRAY (tests/setup-deps.sh builds it)"
fi
python3 -c 'import cryptography' 2>/dev/null || skip_all "python3-cryptography missing"
B3=${KATANA_TOP_BUILDDIR:-$KT_DIR/../..}/tests/integration/b3derive
[ -x "$B3" ] || { fail "helper $B3 not built"; exit 1; }

MIB=1048576
U1=$(kt_uuid); U2=$(kt_uuid); U3=$(kt_uuid); STRANGER=$(kt_uuid)
# Xboard: server_key = base64 of 16 hex characters (of md5(created_at)); user key = base64 of
# the first 16 (or 32) characters of the UUID
SKEY=$(head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \n' | head -c 16 | base64 -w0)
ukey() { printf '%s' "${1:0:$2}" | base64 -w0; }
echo_start

# xr_client NAME METHOD PASSWORD SERVER_PORT: Xray-core with a SOCKS5 inbound and a
# shadowsocks outbound; sets CL_PORT.
xr_client() {
    kt_ports 1; CL_PORT=${PORTS[0]}
    cat >"$T/client-$1.json" <<EOF2
{"log": {"loglevel": "warning", "access": "none"},
 "inbounds": [{"listen": "127.0.0.1", "port": $CL_PORT, "protocol": "socks",
   "settings": {"auth": "noauth", "udp": true, "ip": "127.0.0.1"}}],
 "outbounds": [{"protocol": "shadowsocks",
   "settings": {"servers": [{"address": "127.0.0.1", "port": $4, "method": "$2",
                             "password": "$3"}]}}]}
EOF2
    kt_bg "client-$1" "$XRAY" run -c "$T/client-$1.json"
    kt_wait_port "$CL_PORT" 10 || { fail "xray client $1 did not listen on $CL_PORT"; exit 1; }
}

# sb_client NAME METHOD PASSWORD SERVER_PORT: sing-box with a SOCKS5 inbound and a
# shadowsocks outbound; sets CL_PORT.
sb_client() {
    kt_ports 1; CL_PORT=${PORTS[0]}
    cat >"$T/sb-$1.json" <<EOF2
{"log": {"level": "warn"},
 "inbounds": [{"type": "socks", "listen": "127.0.0.1", "listen_port": $CL_PORT}],
 "outbounds": [{"type": "shadowsocks", "server": "127.0.0.1", "server_port": $4,
                "method": "$2", "password": "$3"}]}
EOF2
    kt_bg "sb-$1" "$SINGBOX" run -c "$T/sb-$1.json"
    kt_wait_port "$CL_PORT" 10 || { fail "sing-box client $1 did not listen on $CL_PORT"; exit 1; }
}

usage_snapshot() {
    sleep 1.5   # the sampler folds flow counters every second
    srv_usage_mark
    kill -USR1 "$SRV_PID"
    for _ in $(seq 1 40); do [ -n "$(srv_usage)" ] && break; sleep 0.1; done
    sleep 0.3
    srv_usage
}
# billed LINES UID PAYLOAD CONNS: up and down each in [payload, payload + overhead]: per
# connection salt, EIH, fixed and variable header with padding (at most 16+16+27+259+2+900+16
# up; salt and header down), per chunk 2+16+16; one chunk per KiB allowed.
billed() {
    local up down hi
    read -r _ up down <<<"$(awk -v u="$2" '$1 == u' <<<"$1")"
    hi=$(($3 + $4 * 1300 + 34 * ($3 / 1024 + $4)))
    echo "user $2: up ${up:-none} down ${down:-none}, expected each in [$3, $hi]"
    [ -n "${up:-}" ] && [ "$up" -ge "$3" ] && [ "$up" -le "$hi" ] &&
        [ "$down" -ge "$3" ] && [ "$down" -le "$hi" ]
}
no_usage() {
    local l; l=$(awk -v u="$2" '$1 == u' <<<"$1")
    echo "user $2: '${l:-no line}'"
    [ -z "$l" ] || [ "$l" = "$2 0 0" ]
}
# answered ARGS...: the probe's answer sizes, one per line
probe() { timeout 30 python3 "$KT_DIR/ss22probe.py" --helper "$B3" --port "$SS_PORT" \
    --dest-port "$ECHO_PORT" "$@"; }
answered_all() { ! grep -q '^answered 0$' <<<"$1" && [ -n "$1" ]; }

# --- self-test: the client configs against Xray-core's own SS2022 server ---------------------
M=2022-blake3-aes-128-gcm
kt_ports 1; XS_PORT=${PORTS[0]}
cat >"$T/xray-server.json" <<EOF2
{"log": {"loglevel": "warning", "access": "none"},
 "inbounds": [{"listen": "127.0.0.1", "port": $XS_PORT, "protocol": "shadowsocks",
   "settings": {"method": "$M", "password": "$SKEY", "network": "tcp",
                "clients": [{"password": "$(ukey "$U1" 16)", "email": "u1@test"}]}}],
 "outbounds": [{"protocol": "freedom"}]}
EOF2
kt_bg xray-server "$XRAY" run -c "$T/xray-server.json"
XS_PID=$BG_PID
kt_wait_port "$XS_PORT" 10 || { fail "xray server did not listen on $XS_PORT"; exit 1; }
xr_client self "$M" "$SKEY:$(ukey "$U1" 16)" "$XS_PORT"
check "self-test: the multi-user client config works with Xray-core's own server" \
    tcp_rt "$CL_PORT" ok --bytes 65536 --seed self
kill "$XS_PID" 2>/dev/null

# --- multi-user node (EIH), aes-128 ---------------------------------------------------------
kt_ports 1; SS_PORT=${PORTS[0]}
mkconfig "$T/multi.json" "$SS_PORT" "$M" --server-key "$SKEY" \
    --user "1:$U1" --user "2:$U2" --user "3:$U3"
check "katana check accepts the SS2022 multi-user node" \
    timeout 10 "$(katana_bin)" check -c "$T/multi.json"
srv_start "$T/multi.json"
xr_client u1 "$M" "$SKEY:$(ukey "$U1" 16)" "$SS_PORT"; C1=$CL_PORT
xr_client u2 "$M" "$SKEY:$(ukey "$U2" 16)" "$SS_PORT"; C2=$CL_PORT
xr_client stranger "$M" "$SKEY:$(ukey "$STRANGER" 16)" "$SS_PORT"; CS=$CL_PORT

R1=0; R2=0
tcp_rt "$C1" ok --bytes "$MIB" --seed u1 --label u1 >"$T/u1.out" 2>&1 & P1=$!
tcp_rt "$C2" ok --bytes "$MIB" --seed u2 --label u2 >"$T/u2.out" 2>&1 & P2=$!
wait "$P1" || R1=$?
wait "$P2" || R2=$?
cat "$T/u1.out" "$T/u2.out"
check "multi: user 1, 1 MiB each way through Xray-core, echo identical" test "$R1" = 0
check "multi: user 2 at the same time, 1 MiB each way, echo identical" test "$R2" = 0
SNAP=$(usage_snapshot)
echo "SIGUSR1 snapshot:"; echo "$SNAP"
check "multi: usage of user 1 is the bytes moved" billed "$SNAP" 1 "$MIB" 1
check "multi: usage of user 2 is the bytes moved" billed "$SNAP" 2 "$MIB" 1
check "multi: idle user 3 billed nothing" no_usage "$SNAP" 3

# UDP (§3.5): a session per client session ID, replies with the server's own session ID
check "multi: UDP via Xray-core, user 1: 20 x 1200-byte datagrams echoed identical" \
    udp_rt "$C1" ok --count 20 --size 1200 --seed mu1
check "multi: UDP, user 2: 8-byte and 1400-byte datagrams" \
    eval 'udp_rt "$C2" ok --count 2 --size 8 --seed s && udp_rt "$C2" ok --count 2 --size 1400 --seed b'
SNAP2=$(usage_snapshot)
echo "SIGUSR1 snapshot after UDP:"; echo "$SNAP2"
# udp_billed LINES UID BEFORE_LINES PAYLOAD DATAGRAMS: the growth of up and down each lies in
# [payload, payload + datagrams * (header 16, EIH 16, body fields 11..27, padding <= 900,
# address <= 259, tag 16)]
udp_billed() {
    local up0 down0 up down hi
    read -r _ up0 down0 <<<"$(awk -v u="$2" '$1 == u' <<<"$3")"
    read -r _ up down <<<"$(awk -v u="$2" '$1 == u' <<<"$1")"
    hi=$(($4 + $5 * 1300))
    echo "user $2: UDP up $((up - up0)) down $((down - down0)), expected each in [$4, $hi]"
    [ $((up - up0)) -ge "$4" ] && [ $((up - up0)) -le "$hi" ] &&
        [ $((down - down0)) -ge "$4" ] && [ $((down - down0)) -le "$hi" ]
}
check "multi: UDP usage of user 1 is the bytes moved" udp_billed "$SNAP2" 1 "$SNAP" $((20 * 1200)) 20
check "multi: UDP usage of user 2 is the bytes moved" udp_billed "$SNAP2" 2 "$SNAP" \
    $((2 * 8 + 2 * 1400)) 4

LINES0=$(tj_log_lines)
check "multi: a user the node does not know gets no echo" \
    tcp_rt "$CS" refused --bytes 4096 --conns 3
OUT=$(probe --ipsk "$SKEY" --upsk "$(ukey "$U1" 16)")
echo "fresh request: $OUT"
check "multi: a fresh crafted request of user 1 is answered" answered_all "$OUT"
OUT=$(probe --ipsk "$SKEY" --upsk "$(ukey "$U1" 16)" --age 60)
echo "60 s old: $OUT"
check "multi: a request 60 s old gets no byte" test "$OUT" = "answered 0"
OUT=$(probe --ipsk "$SKEY" --upsk "$(ukey "$U2" 16)" --times 2)
echo "replay: $OUT"
check "multi: the same bytes twice: the first answered, the replay gets no byte" \
    test "$(tail -n1 <<<"$OUT")" = "answered 0" -a "$(head -n1 <<<"$OUT")" != "answered 0"
OUT=$(probe --ipsk "$SKEY" --upsk "$(ukey "$STRANGER" 16)")
echo "unknown identity header: $OUT"
check "multi: an unknown identity header gets no byte" test "$OUT" = "answered 0"
OUT=$(probe --udp --ipsk "$SKEY" --upsk "$(ukey "$U1" 16)" --times 2)
echo "UDP datagram twice: $OUT"
check "multi: UDP: a datagram is answered once, its replay (same packet ID) not" \
    test "$OUT" = "$(printf 'answered 1\nanswered 0')"
OUT=$(probe --udp --ipsk "$SKEY" --upsk "$(ukey "$U1" 16)" --age 60)
check "multi: UDP: a datagram 60 s old gets no answer" test "$OUT" = "answered 0"
OUT=$(probe --udp --ipsk "$SKEY" --upsk "$(ukey "$STRANGER" 16)")
check "multi: UDP: an unknown identity header gets no answer" test "$OUT" = "answered 0"
check "multi: no log line per refused attempt" test "$(tj_log_lines)" = "$LINES0"
check "multi: daemon still runs" srv_alive
check "multi: user 2 served afterwards" tcp_rt "$C2" ok --bytes 262144 --seed after
# sing-box, when its binary is there (a bonus client; the same node, user 3)
SINGBOX=${KT_SINGBOX:-$(dirname "$XRAY")/sing-box}
if [ -x "$SINGBOX" ]; then
    sb_client u3 "$M" "$SKEY:$(ukey "$U3" 16)" "$SS_PORT"
    check "multi: sing-box client, user 3: 1 MiB each way, echo identical" \
        tcp_rt "$CL_PORT" ok --bytes "$MIB" --seed sb3
    check "multi: sing-box client, user 3: UDP datagrams echoed identical" \
        udp_rt "$CL_PORT" ok --count 10 --size 1200 --seed sb3u
    SNAP3=$(usage_snapshot)
    echo "SIGUSR1 snapshot after sing-box:"; echo "$SNAP3"
    check "multi: sing-box: usage of user 3 is the bytes moved" \
        billed "$SNAP3" 3 $((MIB + 12000)) 11
else
    echo "no sing-box at $SINGBOX: its scenario is left out"
fi
srv_stop
check "multi: SIGTERM: katana exits 0" test "$SRV_RC" = 0

# --- single-user node, aes-256 (no server_key: the user key is the PSK) ----------------------
M=2022-blake3-aes-256-gcm
kt_ports 1; SS_PORT=${PORTS[0]}
mkconfig "$T/single.json" "$SS_PORT" "$M" --user "1:$U1"
srv_start "$T/single.json"
xr_client s1 "$M" "$(ukey "$U1" 32)" "$SS_PORT"; C1=$CL_PORT
check "single: 1 MiB each way through Xray-core, echo identical" \
    tcp_rt "$C1" ok --bytes "$MIB" --seed s1
check "single: three connections at once" tcp_rt "$C1" ok --bytes 65536 --conns 3 --seed s3
check "single: UDP via Xray-core: 10 datagrams echoed identical" \
    udp_rt "$C1" ok --count 10 --size 1000 --seed su1
SNAP=$(usage_snapshot)
echo "SIGUSR1 snapshot:"; echo "$SNAP"
check "single: usage of user 1 is the bytes moved" billed "$SNAP" 1 $((MIB + 3 * 65536 + 10000)) 14
OUT=$(probe --upsk "$(ukey "$U1" 32)" --age 60)
check "single: a request 60 s old gets no byte" test "$OUT" = "answered 0"
OUT=$(probe --upsk "$(ukey "$U1" 32)")
check "single: a fresh crafted request is answered" answered_all "$OUT"
srv_stop
check "single: SIGTERM: katana exits 0" test "$SRV_RC" = 0

# --- single-user node, chacha20 (UDP in XChaCha20-Poly1305, §3.6) ------------------------------
M=2022-blake3-chacha20-poly1305
kt_ports 1; SS_PORT=${PORTS[0]}
mkconfig "$T/chacha.json" "$SS_PORT" "$M" --user "1:$U2"
srv_start "$T/chacha.json"
xr_client c1 "$M" "$(ukey "$U2" 32)" "$SS_PORT"; C1=$CL_PORT
check "chacha20: 1 MiB each way through Xray-core, echo identical" \
    tcp_rt "$C1" ok --bytes "$MIB" --seed c1
check "chacha20: UDP via Xray-core: 10 datagrams echoed identical" \
    udp_rt "$C1" ok --count 10 --size 1000 --seed cu1
srv_stop
check "chacha20: SIGTERM: katana exits 0" test "$SRV_RC" = 0
kt_finish
