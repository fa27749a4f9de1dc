#!/bin/bash
# XTLS Vision (`flow: "xtls-rprx-vision"`, issue 11, PROTOCOLS-2.md §2) over REALITY through the
# real daemon, its node from the panel emulator (a vless node with tls 2 and that flow). The
# proxied traffic is TLS 1.3 end to end (tls_peer.py), so both directions switch to direct copy
# (§2.6) after the inner handshake; every byte must still be billed to its user (XrayR#758).
# - Xray-core (user 1) and sing-box (user 2) VLESS+REALITY+Vision clients move 1 MiB each way
#   at the same time through a TLS echo, byte-identical; each user is billed the TLS bytes its
#   client moved (request header, padding and outer records before the switch within the bound).
#   GET /metrics shows both transfers switched: katana_vision_direct_total{direction="in"} and
#   {direction="out"} each rose by 2.
# - UDP through Vision (XUDP over Mux, §2.7) with the Xray client: datagrams echoed.
# - 50 MB downloaded through Vision by the Xray client (user 3) is billed >= 50 MB, and exactly
#   the bytes moved (within 16 KiB each way); when the client switched both directions to
#   direct (its choice), it went through the kernel relay (splice, issue 11):
#   katana_vision_splice_total rose and katana_vision_splice_bytes_total by at least 40 MB.
# - katana's CPU time for that transfer is printed (no assertion).
# - A Vision user with a speed limit (user 4, 8 Mbit/s: 1 MB/s, one second of burst) downloading
#   through the kernel relay (checked as above) is still limited: after about 3 s it was billed
#   at most the burst plus 1 MB/s over the time since the transfer began (+10% and 128 KiB);
#   the flow listing shows its bytes; killed through the API (DELETE /v1/connections/ID), its
#   client sees the close within 3 s.
# - Vision over tls 1 (a second katana serving node n2 of a second panel emulator: a vless
#   node with a certificate and the flow, OpenSSL's TLS 1.3 outside): the Xray-core
#   VLESS+TLS+Vision client (user 5) moves 1 MiB each way through the TLS echo, byte-identical,
#   billed the bytes moved (within 16 KiB each way: the padding before the switch); both
#   directions switched to direct (katana_vision_direct_total in and out each rose by 1) and the
#   connection went through the kernel relay (katana_vision_splice_total rose). A Vision request
#   over outer TLS 1.2 is closed without an answer (PROTOCOLS-2.md §2.1, as Xray's server), the
#   same request over TLS 1.3 answered.
# - Half-close, client first, while spliced (node n1's user 5, the Xray client): the application
#   behind it uploads 64 KiB, then half-closes (FIN, no close_notify); the remote reads the
#   upload, sees the end, then sends a 256 KiB answer and closes. Neither real client passes a
#   half-close on: Xray's VLESS outbound never shuts its write side (it closes both ways once the
#   download was idle for its downlinkOnly, 1 s) and sing-box's Vision connection has no
#   CloseWrite (it closes both ways at once), so the application cannot get the answer and
#   katana sees the client's FIN with the client gone. Checked is katana's part: the remote
#   gets the whole upload, then the end; katana still relays what the remote sends after it
#   (katana_vision_splice_bytes_total rises after the FIN: had katana closed both directions on
#   it, nothing more would be read); every byte katana moved is billed (up: the client's bytes,
#   down: what reached the client plus what katana read of the answer, each within 16 KiB:
#   padding, outer records).
KT_LIMIT=${KT_LIMIT:-400}
. "$(dirname "$0")/reality.sh"
rl_need xray sing-box

U1=$(kt_uuid); U2=$(kt_uuid); U3=$(kt_uuid)
SID=0123abcd
rl_keys
rl_target target
kt_ports 1; TLS_PORT=${PORTS[0]}
kt_bg tlspeer python3 "$KT_DIR/tls_peer.py" server --port "$TLS_PORT" --cert "$T/target.crt" \
    --key "$T/target.key" --ready-file "$T/tlspeer.ready"
kt_wait_file "$T/tlspeer.ready" 10 || { fail "TLS peer did not start"; exit 1; }

U4=$(kt_uuid); U6=$(kt_uuid)
rl_node '{"flow": "xtls-rprx-vision"}' "$U1" "$U2" "$U3" "$U4@8" "$U6"
check "the vless node with flow xtls-rprx-vision is served (not refused)" \
    kt_wait_port "$NODE_PORT" 10

# vclient VENDOR NAME UUID: a VLESS+REALITY+Vision client
# (tests/interop/VENDOR/client-vless-reality-vision.json); sets CL_PORT.
vclient() { rl_client "$1" vless-reality-vision "$2" "$3" "$PUB" "$SID"; }
# tls_rt SOCKS_PORT MODE BYTES SEED: TLS 1.3 through the client to tls_peer.py
tls_rt() {
    timeout 120 python3 "$KT_DIR/tls_peer.py" client --socks "$1" --dest-port "$TLS_PORT" \
        --mode "$2" --bytes "$3" --seed "$4"
}

# direct_count DIRECTION: katana_vision_direct_total{direction=DIRECTION} from GET /metrics
direct_count() {
    curl -sS -m 10 "http://127.0.0.1:$API_PORT/metrics" |
        awk -v d="katana_vision_direct_total{direction=\"$1\"}" '$1 == d { print $2 }'
}
# splice_count [bytes]: katana_vision_splice_total (or _bytes_total) from GET /metrics
splice_count() {
    curl -sS -m 10 "http://127.0.0.1:$API_PORT/metrics" |
        awk -v d="katana_vision_splice${1:+_$1}_total" '$1 == d { print $2 }'
}
# spliced_once IN0 OUT0 SP0: the one transfer since those counts went to the kernel relay. The
# client decides whether its direction goes direct (its Vision filter, timing-dependent), so
# this asks for the relay when both directions went direct, and says so when they did not.
spliced_once() {
    local in1 out1 sp1
    in1=$(direct_count in) out1=$(direct_count out) sp1=$(splice_count)
    echo "direct in ${1:-none} -> ${in1:-none}, out ${2:-none} -> ${out1:-none}; splice_total ${3:-none} -> ${sp1:-none}"
    [ -n "$3" ] && [ -n "$sp1" ] || return 1
    if [ "${in1:-0}" -gt "${1:-0}" ] && [ "${out1:-0}" -gt "${2:-0}" ]; then
        [ "$sp1" -gt "$3" ]
    else
        echo "the client did not switch both directions to direct: no kernel relay expected"
    fi
}
vclient xray u1 "$U1"; c1=$CL_PORT
vclient sing-box u2 "$U2"; c2=$CL_PORT
in0=$(direct_count in) out0=$(direct_count out)
r1=0 r2=0
tls_rt "$c1" echo "$MIB" vision-u1 >"$T/u1.out" 2>&1 & p1=$!
tls_rt "$c2" echo "$MIB" vision-u2 >"$T/u2.out" 2>&1 & p2=$!
wait "$p1" || r1=$?
wait "$p2" || r2=$?
cat "$T/u1.out" "$T/u2.out"
check "Xray-core VLESS+REALITY+Vision (user 1): 1 MiB of TLS each way, echo identical" \
    test "$r1" = 0
check "sing-box VLESS+REALITY+Vision (user 2) at the same time: 1 MiB each way, identical" \
    test "$r2" = 0
in1=$(direct_count in) out1=$(direct_count out)
echo "katana_vision_direct_total: in ${in0:-none} -> ${in1:-none}, out ${out0:-none} -> ${out1:-none}"
check "both transfers switched the client's bytes to raw (direction in rose by 2)" \
    test -n "$in0" -a -n "$in1" -a "${in1:-0}" -ge $((${in0:-0} + 2))
check "both transfers switched our bytes to raw (direction out rose by 2)" \
    test -n "$out0" -a -n "$out1" -a "${out1:-0}" -ge $((${out0:-0} + 2))
read -r _ _ m1up m1down <<<"$(grep '^TLSPEER ok' "$T/u1.out" || echo "- - 0 0")"
read -r _ _ m2up m2down <<<"$(grep '^TLSPEER ok' "$T/u2.out" || echo "- - 0 0")"
sleep 1.5   # the sampler folds flow counters every second
snap=$(kat_snapshot)
echo "SIGUSR1 snapshot:"; echo "$snap"
# the VLESS request header (26 bytes for 127.0.0.1 with the 18-byte flow addons: 44) up, 00 00 down
check "usage of user 1 is the bytes moved" rl_billed "$snap" 1 $((m1up + 44)) $((m1down + 2))
check "usage of user 2 is the bytes moved" rl_billed "$snap" 2 $((m2up + 44)) $((m2down + 2))
check "idle user 3 billed nothing yet" test -z "$(awk '$1 == 3 && ($2 > 0 || $3 > 0)' <<<"$snap")"

# UDP through Vision: the Xray client sends it as XUDP over Mux (§2.7)
check "UDP through Vision (Xray client, XUDP): datagrams echoed" \
    udp_rt "$c1" ok --count 5 --size 512
check "UDP through Vision (sing-box client, XUDP): datagrams echoed" \
    udp_rt "$c2" ok --count 5 --size 512

# 50 MB through Vision, billed at least that
vclient xray u3 "$U3"; c3=$CL_PORT
# cpu_s PID: user + system CPU seconds so far (/proc/PID/stat fields 14 and 15)
cpu_s() { awk -v hz="$(getconf CLK_TCK)" '{ printf "%.2f", ($14 + $15) / hz }' "/proc/$1/stat"; }
cpu0=$(cpu_s "$SRV_PID")
in0=$(direct_count in) out0=$(direct_count out) sp0=$(splice_count) sb0=$(splice_count bytes)
r3=0
tls_rt "$c3" down 50000000 vision-u3 >"$T/u3.out" 2>&1 || r3=$?
cpu1=$(cpu_s "$SRV_PID")
sp1=$(splice_count) sb1=$(splice_count bytes)
cat "$T/u3.out"
echo "katana CPU for 50 MB through Vision: $cpu0 -> $cpu1 s (printed, not asserted)"
check "50 MB downloaded through Vision, identical" test "$r3" = 0
sleep 1.5
snap=$(kat_snapshot)
echo "SIGUSR1 snapshot:"; echo "$snap"
read -r _ _ d3 <<<"$(awk '$1 == 3' <<<"$snap")"
check "the 50 MB download is billed >= 50 MB (user 3 down ${d3:-none})" \
    test "${d3:-0}" -ge 50000000
read -r _ _ m3up m3down <<<"$(grep '^TLSPEER ok' "$T/u3.out" || echo "- - 0 0")"
read -r _ u3 _ <<<"$(awk '$1 == 3' <<<"$snap")"
echo "user 3: up ${u3:-none} down ${d3:-none}, moved $((m3up + 44)) and $((m3down + 2))"
# the client's padding before the switch is up to a few KiB over its 398 bytes
check "usage of user 3 is the bytes moved (within 16 KiB each way: padding, outer records)" \
    awk -v u="${u3:-0}" -v d="${d3:-0}" -v mu=$((m3up + 44)) -v md=$((m3down + 2)) \
        'BEGIN { exit !(u >= mu && u <= mu + 16384 && d >= md && d <= md + 16384) }'
check "the 50 MB download, direct both ways, went through the kernel relay" \
    spliced_once "$in0" "$out0" "$sp0"
if [ -n "$sp0" ] && [ "${sp1:-0}" -gt "$sp0" ]; then
    check "at least 40 MB of it were spliced (splice_bytes_total ${sb0:-none} -> ${sb1:-none})" \
        test -n "$sb0" -a "${sb1:-0}" -ge $((${sb0:-0} + 40000000))
fi

# a speed-limited Vision user is still limited in the kernel relay; a kill ends it at once
vclient xray u4 "$U4"; c4=$CL_PORT
now() { date +%s.%N; }
in0=$(direct_count in) out0=$(direct_count out) sp0=$(splice_count)
t0=$(now)
tls_rt "$c4" down 30000000 vision-u4 >"$T/u4.out" 2>&1 & p4=$!
sleep 3
flows=$(curl -sf -m 10 "http://127.0.0.1:$API_PORT/v1/connections?user=4" || true)
snap=$(kat_snapshot)
t1=$(now)
read -r _ _ d4 <<<"$(awk '$1 == 4' <<<"$snap")"
echo "user 4 after $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }') s: billed down ${d4:-none}"
check "the paced Vision download, direct both ways, went through the kernel relay" \
    spliced_once "$in0" "$out0" "$sp0"
check "it moved bytes (billed down ${d4:-none})" test "${d4:-0}" -gt 0
check "paced at 8 Mbit/s: billed at most 1 MB + 1 MB/s since it began (+10%, 128 KiB)" \
    awk -v d="${d4:-0}" -v a="$t0" -v b="$t1" \
        'BEGIN { exit !(d <= (1000000 + 1000000 * (b - a)) * 1.1 + 131072) }'
read -r f4 f4down <<<"$(python3 -c '
import json, sys
f = json.loads(sys.argv[1])["flows"]
print(f[0]["id"], f[0]["down"]) if f else print("- 0")' "${flows:-{"flows": []\}}")"
check "the flow listing shows user 4's spliced flow with its bytes (down ${f4down:-none})" \
    test "${f4down:-0}" -gt 0
k0=$(now)
check "kill user 4's spliced flow" \
    curl -sf -o /dev/null -X DELETE "http://127.0.0.1:$API_PORT/v1/connections/$f4"
kt_wait_exit "$p4" 10
k1=$(now)
cat "$T/u4.out"
echo "the killed flow's client ended $(awk -v a="$k0" -v b="$k1" 'BEGIN { printf "%.2f", b - a }') s after DELETE"
check "the killed spliced flow's client sees the close within 3 s" \
    awk -v a="$k0" -v b="$k1" 'BEGIN { exit !(b - a < 3.0) }'
kill "$p4" 2>/dev/null || true

# half-close, client first, while spliced (the client's FIN, then the remote's answer)
vclient xray u6 "$U6"; c6=$CL_PORT
in0=$(direct_count in) out0=$(direct_count out) sp0=$(splice_count)
r6=0
timeout 60 python3 "$KT_DIR/tls_peer.py" client --socks "$c6" --dest-port "$TLS_PORT" \
    --mode half --bytes 65536 --seed vision-u6 --metrics "http://127.0.0.1:$API_PORT/metrics" \
    >"$T/u6.out" 2>&1 || r6=$?
cat "$T/u6.out"
read -r _ _ m6up m6down a6 s6 <<<"$(grep '^TLSPEER half' "$T/u6.out" || echo "- - 0 0 0 0")"
check "half-close: TLS, the request and the 64 KiB upload went through" \
    test "$r6" = 0 -a "${m6up:-0}" -gt 65536
echo "the application got $a6 of the 262144 answer bytes (its client closed both ways)"
check "the remote got the whole upload, then the end of the stream" \
    grep -q '^TLSPEER half 65536 bytes then EOF' "$T/tlspeer.log"
grep '^TLSPEER half' "$T/tlspeer.log"
# the raw bytes the remote read after the upload (the client's outer TLS close_notify, 24, sent
# into the raw stream as it closes) moved after the counter's first reading too: the rest of
# its rise is the answer katana read after the FIN
k6=$(sed -n 's/^TLSPEER half 65536 bytes then EOF (\([0-9]*\) more)$/\1/p' "$T/tlspeer.log")
ans6=$((${s6:-0} - ${k6:-0}))
if spliced_once "$in0" "$out0" "$sp0"; then
    if [ "$(splice_count)" -gt "${sp0:-0}" ]; then
        check "after the client's FIN katana relayed the remote's answer ($ans6 bytes of it)" \
            test -n "$k6" -a "$ans6" -gt 0
    fi
else
    fail "the half-closing flow, direct both ways, did not go through the kernel relay"
fi
sleep 1.5
snap=$(kat_snapshot)
read -r _ u6 d6 <<<"$(awk '$1 == 5' <<<"$snap")"
echo "n1's user 5: up ${u6:-none} down ${d6:-none}; moved $((m6up + 44)) up, $((m6down + 2)) down" \
    "and $ans6 of the answer"
check "usage of n1's user 5 is the bytes moved, the answer katana read included (within 16 KiB)" \
    awk -v u="${u6:-0}" -v d="${d6:-0}" -v mu=$((m6up + 44)) -v md=$((m6down + 2 + ans6)) \
        'BEGIN { exit !(u >= mu && u <= mu + 16384 && d >= md && d <= md + 16384) }'
check "daemon still runs" kt_alive "$SRV_PID"

# Vision over tls 1: node n2, a vless node with tls 1 (the test CA's certificate for node.test)
# and the Vision flow from a second panel emulator, user 5 on it; OpenSSL's TLS 1.3 outside, the
# Xray-core VLESS+TLS+Vision client. A second katana of its own (a node refused at lowering keeps
# the whole config from applying, and a reload cannot add a panel node), its own API, database and
# log; the first one keeps running.
tj_certs "$T/certs" node
kt_ports 3; PANEL2_PORT=${PORTS[0]} NODE2_PORT=${PORTS[1]} API_PORT=${PORTS[2]}
U5=$(kt_uuid)
python3 - "$T" "$NODE2_PORT" "$U5" "$PANEL2_PORT" "$PANEL_TOKEN" "$TJ_CERT" "$TJ_KEY" \
    "$API_PORT" <<'PY'
import json, sys
t, port, user, panel, token, cert, key, api = sys.argv[1:9]
json.dump({"protocol": "vless", "listen_ip": "0.0.0.0", "server_port": int(port),
           "network": "tcp", "networkSettings": None, "tls": 1, "server_name": "node.test",
           "flow": "xtls-rprx-vision", "decryption": None,
           "base_config": {"push_interval": 60, "pull_interval": 60}},
          open(t + "/panel2-config.json", "w"))
json.dump({"users": [{"id": 5, "uuid": user, "speed_limit": None, "device_limit": None}]},
          open(t + "/panel2-users.json", "w"))
json.dump({"log": {"level": "info"}, "workers": 1, "api": {"listen": "127.0.0.1:" + api},
           "db": {"path": t + "/katana2.db", "flush_interval": 1},
           "nodes": [{"tag": "n2", "listen": "127.0.0.1", "allow_private": True,
                      "cert": {"mode": "file", "cert_file": cert, "key_file": key},
                      "panel": {"type": "uniproxy", "url": "http://127.0.0.1:" + panel,
                                "token": token, "node_id": 1, "node_type": "vless"}}]},
          open(t + "/katana2.json", "w"))
PY
kt_bg panel2 python3 "$KT_DIR/panel_emu.py" --port "$PANEL2_PORT" --token "$PANEL_TOKEN" \
    --config "$T/panel2-config.json" --users "$T/panel2-users.json" \
    --ready-file "$T/panel2.ready"
kt_wait_file "$T/panel2.ready" 10 || { fail "panel emulator 2 did not start"; exit 1; }
kt_bg server2 "$(katana_bin)" run -c "$T/katana2.json"
SRV_PID=$BG_PID SRV_LOG=$T/server2.log
check "the vless node with tls 1 and flow xtls-rprx-vision is served (not refused)" \
    kt_wait_port "$NODE2_PORT" 10
pr_client xray vless-tls-vision u5 "$U5" "$NODE2_PORT"; c5=$CL_PORT
in0=$(direct_count in) out0=$(direct_count out) sp0=$(splice_count)
r5=0
tls_rt "$c5" echo "$MIB" vision-u5 >"$T/u5.out" 2>&1 || r5=$?
cat "$T/u5.out"
check "Xray-core VLESS+TLS+Vision over tls 1 (user 5): 1 MiB of TLS each way, echo identical" \
    test "$r5" = 0
in1=$(direct_count in) out1=$(direct_count out) sp1=$(splice_count)
echo "tls 1: direct in ${in0:-none} -> ${in1:-none}, out ${out0:-none} -> ${out1:-none}; splice_total ${sp0:-none} -> ${sp1:-none}"
check "over tls 1 both directions switched to raw (direct in and out each rose by 1)" \
    test -n "$in0" -a "${in1:-0}" -ge $((${in0:-0} + 1)) -a \
    -n "$out0" -a "${out1:-0}" -ge $((${out0:-0} + 1))
check "over tls 1 the connection went through the kernel relay (splice_total rose)" \
    test -n "$sp0" -a "${sp1:-0}" -gt "${sp0:-0}"
read -r _ _ m5up m5down <<<"$(grep '^TLSPEER ok' "$T/u5.out" || echo "- - 0 0")"
sleep 1.5   # the sampler folds flow counters every second
snap=$(kat_snapshot)
echo "SIGUSR1 snapshot:"; echo "$snap"
read -r _ u5 d5 <<<"$(awk '$1 == 5' <<<"$snap")"
echo "user 5: up ${u5:-none} down ${d5:-none}, moved $((m5up + 44)) and $((m5down + 2))"
check "usage of user 5 (tls 1) is the bytes moved (within 16 KiB each way: padding before the switch)" \
    awk -v u="${u5:-0}" -v d="${d5:-0}" -v mu=$((m5up + 44)) -v md=$((m5down + 2)) \
        'BEGIN { exit !(u >= mu && u <= mu + 16384 && d >= md && d <= md + 16384) }'

# vision_hello 1.2|1.3: a VLESS request with the Vision flow to the echo server and one Vision
# frame "hello" (PROTOCOLS-2.md §2.8), over TLS of at most that version, to node n2 as user 5;
# prints the version, then "answer N HEAD HELLO": the bytes answered before the end (N), their
# first two in hex (0000: the response header) and whether "hello" came back in the first frame.
vision_hello() {
    timeout 20 python3 - "$NODE2_PORT" "$ECHO_PORT" "$U5" "$TJ_CA" "$1" <<'PY'
import socket, ssl, struct, sys, uuid
port, echo, user, ca, ver = sys.argv[1:6]
ctx = ssl.create_default_context(cafile=ca)
ctx.maximum_version = ssl.TLSVersion.TLSv1_2 if ver == "1.2" else ssl.TLSVersion.TLSv1_3
uid = uuid.UUID(user).bytes
req = (b"\x00" + uid + b"\x12\x0a\x10xtls-rprx-vision\x01" + struct.pack(">H", int(echo)) +
       b"\x01" + socket.inet_aton("127.0.0.1"))
frame = uid + b"\x00" + struct.pack(">HH", 5, 3) + b"hello" + bytes(3)
with socket.create_connection(("127.0.0.1", int(port)), timeout=5) as raw:
    with ctx.wrap_socket(raw, server_hostname="node.test") as t:
        print("negotiated", t.version())
        t.sendall(req + frame)
        got = b""
        try:
            while len(got) < 2 + 16 + 5 + 5:
                c = t.recv(4096)
                if not c:
                    break
                got += c
        except (ssl.SSLError, ConnectionResetError):
            pass  # closed without close_notify, or reset: the end
        print("answer", len(got), got[:2].hex() or "-", got[23:28] == b"hello")
PY
}
out12=$(vision_hello 1.2 2>&1) || true
out13=$(vision_hello 1.3 2>&1) || true
echo "over TLS 1.2: $out12"; echo "over TLS 1.3: $out13"
check "a Vision request over outer TLS 1.2 is closed without an answer (PROTOCOLS-2.md §2.1)" \
    eval 'grep -qx "negotiated TLSv1.2" <<<"$out12" && grep -qx "answer 0 - False" <<<"$out12"'
check "the same request over TLS 1.3 is answered (00 00, then hello in the first frame)" \
    eval 'grep -qx "negotiated TLSv1.3" <<<"$out13" && grep -q "^answer [0-9]* 0000 True$" <<<"$out13"'
check "daemon still runs (the tls 1 node's katana)" kt_alive "$SRV_PID"
kt_finish
