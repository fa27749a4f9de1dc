#!/bin/bash
# VLESS over gRPC over REALITY (issue 11, PROTOCOLS-2.md §1.6: HTTP/2 with prior knowledge
# inside REALITY, no ALPN) through the real daemon, its node from the panel emulator: a vless
# node with tls 2, network grpc and networkSettings.serviceName, tls_settings with a time window
# (max_time_diff 60 s). The target site is a local HTTPS server (reality_target.py).
# - Probes: `openssl s_client` gets the target's certificate and `curl` its page through the
#   gRPC node's port.
# - REALITY hellos sealed with the right key and short id (reality_hello.py): one stamped now is
#   answered by katana, mirroring the target's first flight (the target sees katana's one
#   connection for it, PROTOCOLS-2.md §1.5, and the key share is katana's); ones stamped 10
#   minutes before or after are probes, relayed to the target (it sees each and its own key
#   share reaches the client), with no log line.
# - An Xray-core REALITY+gRPC client with a wrong short id is relayed to the target too.
# - Valid clients: Xray-core (user 1), sing-box with its full gRPC client (user 2) and the
#   "lite" one (sing-box-lite, user 3) move 1 MiB each way at the same time, byte-identical,
#   each through a counting relay, and each user is billed within t-reality.sh's bounds of the
#   bytes moved and exactly the wire bytes its relay counted.
KT_LIMIT=${KT_LIMIT:-300}
. "$(dirname "$0")/reality.sh"
rl_need xray sing-box sing-box-lite

U1=$(kt_uuid); U2=$(kt_uuid); U3=$(kt_uuid); U4=$(kt_uuid)
SID=0123abcd
SERVICE=kt-tun
PAGE="reality grpc target page $$"

rl_keys
rl_target "$PAGE"

rl_node "{\"network\": \"grpc\", \"networkSettings\": {\"serviceName\": \"$SERVICE\"},
         \"tls_settings\": {\"max_time_diff\": 60000}}" "$U1" "$U2" "$U3" "$U4"

# --- probes ------------------------------------------------------------------------------
c0=$(target_count)
fp=$(timeout 10 openssl s_client -connect "127.0.0.1:$NODE_PORT" -servername localhost \
    </dev/null 2>/dev/null | openssl x509 -noout -fingerprint -sha256 || true)
echo "s_client saw: ${fp:-nothing}; the target's: $TARGET_FP"
check "openssl s_client to the gRPC node's port gets the target's certificate" \
    test "$fp" = "$TARGET_FP"
page=$(timeout 10 curl -sk --resolve "localhost:$NODE_PORT:127.0.0.1" \
    "https://localhost:$NODE_PORT/" || true)
check "curl to the gRPC node's port gets the target's page" test "$page" = "$PAGE"
check "the target saw those connections" test "$(target_count)" -ge $((c0 + 2))

# hello OFFSET_S: a sealed REALITY hello stamped OFFSET_S seconds from now; prints
# "TARGET_CONNECTIONS_SEEN first=HEX mirror=ok|differs" (ok: katana's answer mirroring the
# target's flight; differs: not a mirror, e.g. the target's own flight relayed).
hello() {
    local before out
    before=$(target_count)
    out=$(timeout 20 python3 "$KT_DIR/reality_hello.py" --port "$NODE_PORT" \
        --public-key="$PUB" --short-id "$SID" --sni localhost --offset "$1" --wait 2 \
        --flight-file "$T/target.flight")
    sleep 0.3
    echo "$(($(target_count) - before)) $(sed -n 's/^bytes=[0-9]* //p' <<<"$out")" \
        "$(sed -n 's/^\(mirror=[a-z]*\).*/\1/p' <<<"$out")"
}
lines0=$(tj_log_lines)
now=$(hello 0); early=$(hello -600); late=$(hello 600)
echo "stamped now: $now; 10 min early: $early; 10 min late: $late"
check "a REALITY hello stamped now is katana's (its ServerHello mirrors the target's flight)" \
    test "$now" = "1 first=16 03 03 mirror=ok"
check "a REALITY hello 10 minutes early is a probe: relayed, the target answers" \
    test "$early" = "1 first=16 03 03 mirror=differs"
check "a REALITY hello 10 minutes late is a probe: relayed, the target answers" \
    test "$late" = "1 first=16 03 03 mirror=differs"
check "hellos outside the window: no log line" test "$(tj_log_lines)" = "$lines0"

# rclient VENDOR NAME UUID SHORT_ID SERVER_PORT: a VLESS+REALITY+gRPC client (template
# tests/interop/VENDOR/client-vless-reality-grpc.json, sing-box-lite: sing-box's); sets CL_PORT.
rclient() { rl_client "$1" vless-reality-grpc "$2" "$3" "$PUB" "$4" "$5"; }

lines0=$(tj_log_lines)
rclient xray bad-sid "$U1" deadbeef "$NODE_PORT"
c0=$(target_count)
check "Xray REALITY+gRPC client with a wrong short id: no echo" \
    tcp_rt "$CL_PORT" refused --bytes 4096
check "... relayed to the target as a probe" test "$(target_count)" -gt "$c0"
check "... no log line" test "$(tj_log_lines)" = "$lines0"

tj_counting_relay u1 "$NODE_PORT"; rclient xray u1 "$U1" "$SID" "$RELAY_PORT"; c1=$CL_PORT
tj_counting_relay u2 "$NODE_PORT"; rclient sing-box u2 "$U2" "$SID" "$RELAY_PORT"; c2=$CL_PORT
tj_counting_relay u3 "$NODE_PORT"; rclient sing-box-lite u3 "$U3" "$SID" "$RELAY_PORT"
c3=$CL_PORT
r1=0 r2=0 r3=0
tcp_rt "$c1" ok --bytes "$MIB" --seed rg-u1 --label u1 >"$T/u1.out" 2>&1 & p1=$!
tcp_rt "$c2" ok --bytes "$MIB" --seed rg-u2 --label u2 >"$T/u2.out" 2>&1 & p2=$!
tcp_rt "$c3" ok --bytes "$MIB" --seed rg-u3 --label u3 >"$T/u3.out" 2>&1 & p3=$!
wait "$p1" || r1=$?
wait "$p2" || r2=$?
wait "$p3" || r3=$?
cat "$T/u1.out" "$T/u2.out" "$T/u3.out"
check "Xray-core VLESS+REALITY over gRPC (user 1): 1 MiB each way, echo identical" \
    test "$r1" = 0
check "sing-box (full gRPC) VLESS+REALITY over gRPC (user 2) at the same time: identical" \
    test "$r2" = 0
check "sing-box-lite VLESS+REALITY over gRPC (user 3) at the same time: identical" \
    test "$r3" = 0
tj_relays_settle u1 u2 u3
snap=$(kat_snapshot)
echo "SIGUSR1 snapshot:"; echo "$snap"
for u in 1 2 3; do
    # one stream: the VLESS request header (26 bytes for 127.0.0.1) up, 00 00 down
    check "usage of user $u is the bytes moved" rl_billed "$snap" "$u" $((MIB + 26)) $((MIB + 2))
    check "usage of user $u is the wire bytes its relay counted" tj_wire_is "$snap" "$u" "u$u"
done
check "idle user 4 billed nothing" test -z "$(awk '$1 == 4 && ($2 > 0 || $3 > 0)' <<<"$snap")"
check "three connections at once on one REALITY+gRPC connection, 256 KiB each, identical" \
    tcp_rt "$c1" ok --bytes 262144 --conns 3 --seed rg-multi
# sources that outrun the clients' HTTP/2 windows: each stream's queue holds its outbound back
# instead of overflowing (issue 11)
for u in 1 2 3; do
    c=c$u
    check "user $u: a 16 MiB download from a source that never waits arrives whole" \
        tcp_download "${!c}" --bytes $((16 << 20)) --seed "rg-down-$u" --label "down-$u"
done
check "daemon still runs" kt_alive "$SRV_PID"
kat_stop
check "SIGTERM: katana exits 0" test "$SRV_RC" = 0
kt_finish
