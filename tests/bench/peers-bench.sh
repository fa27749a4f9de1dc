#!/bin/bash
# peers-bench.sh BUILDDIR: katana vs Xray-core's and sing-box's own servers (issue 10
# "Benchmark"), in one run on loopback, the same client for every server: Xray-core (built by
# tests/setup-deps.sh into $KATANA_PEERS/bin, tests/interop/peers.sh) with a dokodemo-door
# inbound, a port forward to the sink of tests/bench/bulk.c. Scenarios (configs: the templates
# in tests/bench/peers/VENDOR/{client,server}-SCEN.json; katana's from katest.py mkconfig):
#   ss2022          Shadowsocks 2022, 2022-blake3-aes-128-gcm, server_key plus one user (EIH)
#   vless-grpc-tls  VLESS over gRPC (Tun) over TLS
#   trojan-tls      Trojan over TLS
#   vmess-ws-tls    VMess (aes-128-gcm, alterId 0) over WebSocket over TLS
#   vless-reality   VLESS over REALITY (issue 11), no flow; the REALITY target every server
#                   needs is tests/integration/reality_target.py on loopback
#   vless-reality-grpc  VLESS over gRPC (Tun) over REALITY (HTTP/2 with prior knowledge)
#   socks           SOCKS5 CONNECT with user name and password (issue 27), in clear
#   http            HTTP proxy CONNECT with Basic credentials (Xray's http outbound), in clear
#   anytls          AnyTLS over TLS (issue 27): sing-box's client (Xray-core has no AnyTLS), a
#                   direct inbound as the port forward; katana against sing-box's server
#   vless-reality-vision  VLESS with flow xtls-rprx-vision over REALITY. Vision reaches direct
#                   copy only for TLS 1.3 inside the tunnel, so its traffic is not bulk.c's: the
#                   client has a SOCKS inbound, and tests/integration/tls_peer.py downloads
#                   BENCH_PEER_VISION_BYTES (1 GB) of TLS 1.3 from its own server on loopback
#                   (server to client, the direction Xray splices; the other scenarios send
#                   client to server); Gbit/s is those bytes over the transfer's time (the TLS
#                   handshakes included), CPU s/GB the server's per those GB. Its idle
#                   connections are opened through the same SOCKS inbound (bulk.c's hold with
#                   a SOCKS destination), one byte each. Also measured for it: the
#                   same download through `bulk splice`, a SOCKS5 relay in C that only
#                   splices (1 MiB pipes, blocking, one thread per direction): what the kernel
#                   charges for moving those bytes with no protocol at all ("splice", and
#                   katana's CPU over it, "k/splice").
# Per scenario and server:
#  - server RSS per idle connection: BENCH_PEER_CONNS (1000) idle connections opened through
#    the client (its mux is off, so each is a connection of its own to the server) and held
#    until the server dialled the sink for every one; VmRSS growth divided by the count. gRPC
#    clients put every connection on one shared HTTP/2 connection as a stream, so for
#    vless-grpc-tls tests/bench/grpc_hold.py opens the connections itself (one TLS + HTTP/2
#    connection with one stream each); for vless-reality-grpc, which no such opener speaks
#    (a REALITY handshake needs a sealed ClientHello), the figure is per idle stream of the
#    Xray client's one HTTP/2 connection, 99 streams (katana serves at most 100 sub-flows per
#    connection), for every server alike;
#  - one-way bulk throughput (BENCH_PEER_SECONDS, 5 s) and the server's CPU seconds per GB
#    (utime+stime of all its threads from /proc/PID/stat). A transfer counts only when it was
#    whole (bulk-judge.sh: the sender wrote without an error and the sink got every byte it
#    wrote; the Vision download arrived whole and identical): a cut one is a failure (issue 24),
#    the row says "CUT n/N" (n of N rounds) with no figure, and the script exits 1 at the end.
# Printed with the ratios katana / the better of Xray-core and sing-box beside the issue's
# goals (CPU s/GB at most 0.5x, idle RSS at most 0.2x), and the load average before and after
# (the machine may be shared). With BENCH_PEER_ROUNDS=N above 1, each scenario's bulk (or
# Vision download) runs N times with the servers alternating in every round, so that a change
# of the machine's load falls on all of them alike: the table gives each server's median, and
# the CPU ratio is the median of the rounds' own ratios (each round's ratios are printed too);
# the idle test runs in the first round only. Skips (exit 0, with the reason) without the Xray-core client; a
# missing sing-box is left out with a note. Kills everything it starts.
# Environment: BENCH_PEER_SERVERS ("katana xray sing-box"; empty: skip), BENCH_PEER_SCENARIOS
# (all ten), BENCH_PEER_ROUNDS (1), BENCH_PEER_CONNS (1000), BENCH_PEER_SECONDS (5), BENCH_PEER_VISION_BYTES
# (1000000000), BENCH_WORKERS (katana workers,
# 1), KATANA_BIN, KATANA_BASE_BIN (another katana build, server name katana-base in
# BENCH_PEER_SERVERS: measured side by side, not counted as a peer), BULK, KATANA_PEERS. Not part of `make check`; run by `make bench` or alone
# by `make bench-peers`.
set -euo pipefail

BUILDDIR=${1:-.}
HERE=$(cd "$(dirname "$0")" && pwd)
KATEST=(python3 "$HERE/../integration/katest.py")
KATANA=${KATANA_BIN:-$BUILDDIR/katana}
# shellcheck source=../interop/peers.sh
. "$HERE/../interop/peers.sh"   # PEERS_DIR, pr_render
# shellcheck source=bulk-judge.sh
. "$HERE/bulk-judge.sh"          # bulk_judged: a cut transfer is no figure
TEMPLATES=$HERE/peers
SERVERS=${BENCH_PEER_SERVERS-katana xray sing-box}
SCENARIOS=${BENCH_PEER_SCENARIOS:-ss2022 vless-grpc-tls trojan-tls vmess-ws-tls vless-reality \
vless-reality-grpc vless-reality-vision socks http anytls}
ROUNDS=${BENCH_PEER_ROUNDS:-1}
CONNS=${BENCH_PEER_CONNS:-1000}
SECS=${BENCH_PEER_SECONDS:-5}
VISION_BYTES=${BENCH_PEER_VISION_BYTES:-1000000000}
WORKERS=${BENCH_WORKERS:-1}
XRAY=$PEERS_DIR/bin/xray
SINGBOX=$PEERS_DIR/bin/sing-box
TCK=$(getconf CLK_TCK)

note() { echo "# $*" >&2; }
[ -n "$SERVERS" ] || exit 0
if [ ! -x "$XRAY" ]; then
    echo "peers benchmark skipped: no Xray-core client at $XRAY (tests/setup-deps.sh builds it)"
    exit 0
fi
if [ ! -x "$SINGBOX" ] && [[ " $SERVERS " == *" sing-box "* ]]; then
    note "no sing-box at $SINGBOX (tests/setup-deps.sh builds it): its rows are left out"
    SERVERS=$(tr ' ' '\n' <<<"$SERVERS" | grep -vx sing-box | tr '\n' ' ')
fi
command -v openssl >/dev/null || { echo "peers benchmark skipped: openssl is not installed"; exit 0; }

T=$(mktemp -d "${TMPDIR:-/tmp}/katana-peers-bench.XXXXXX")
PIDS=()
cleanup() {
    local p
    exec 7>&- 2>/dev/null || true
    for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    sleep 0.5
    for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
    [ "${BENCH_KEEP:-0}" = 1 ] && echo "kept $T" || rm -rf "$T"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
bg() { local log=$1; shift; ( exec "$@" ) >>"$log" 2>&1 & BG=$!; PIDS+=("$BG"); }
stop() { local p; for p in "$@"; do kill -TERM "$p" 2>/dev/null || true; done
         for p in "$@"; do wait "$p" 2>/dev/null || true; done; }

BULK=${BULK:-$BUILDDIR/tests/bench/bulk}
if [ ! -x "$BULK" ]; then
    BULK=$T/bulk
    "${CC:-cc}" -O2 -o "$BULK" "$HERE/bulk.c"
fi
# the client and the server each hold two descriptors per idle connection
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
NOFILE=$(ulimit -n)
if [ "$NOFILE" != unlimited ] && [ $((2 * CONNS + 256)) -gt "$NOFILE" ]; then
    CONNS=$(((NOFILE - 256) / 2))
    note "open-file limit $NOFILE: idle test reduced to $CONNS connections"
fi

cpu_secs() { awk -v t="$TCK" '{ sub(/^.*\) /, ""); printf "%.3f\n", ($12 + $13) / t }' "/proc/$1/stat"; }
rss_kib() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)

# The bench CA and the server's certificate (P-256, node.test)
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$T/ca.key" \
    -out "$T/ca.crt" -days 30 -subj "/CN=bench CA" -addext "basicConstraints=critical,CA:TRUE" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$T/srv.key" \
    -out "$T/srv.csr" -subj "/CN=node.test" 2>/dev/null
printf 'subjectAltName=DNS:node.test,IP:127.0.0.1\n' >"$T/srv.ext"
openssl x509 -req -in "$T/srv.csr" -CA "$T/ca.crt" -CAkey "$T/ca.key" -CAcreateserial \
    -out "$T/srv.crt" -days 30 -extfile "$T/srv.ext" 2>/dev/null

# One user for every server: the uuid is the VLESS/VMess id and the Trojan password; SS2022
# keys as Xboard derives them (PANEL.md §1.4): server_key = base64 of 16 characters, the
# user's key = base64 of the first 16 characters of the uuid.
UUID=$(cat /proc/sys/kernel/random/uuid)
SKEY=$(head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \n' | base64 -w0)
UKEY=$(printf '%s' "${UUID:0:16}" | base64 -w0)

# REALITY (issue 11): the node's X25519 pair (base64url), a short id, and the target site every
# REALITY server dials (Xray's and sing-box's for each connection, katana's for probes only)
RPRIV= RPUB= RSID=0123abcd TARGET_PORT=0 TLS_PORT=0
if [[ " $SCENARIOS " == *" vless-reality"* ]]; then
    if read -r RPRIV RPUB < <(python3 - 2>/dev/null <<'PY'
import base64
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
b = lambda raw: base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
k = X25519PrivateKey.generate()
print(b(k.private_bytes_raw()), b(k.public_key().public_bytes_raw()))
PY
    ); then
        read -r TARGET_PORT TLS_PORT <<<"$("${KATEST[@]}" freeport --count 2)"
        bg "$T/target.log" python3 "$HERE/../integration/reality_target.py" --port "$TARGET_PORT" \
            --cert "$T/srv.crt" --key "$T/srv.key" --body bench --count-file "$T/target.count" \
            --ready-file "$T/target.ready"
        "${KATEST[@]}" wait-port --port "$TARGET_PORT" >/dev/null
        # vless-reality-vision's far end: TLS 1.3 on loopback (tls_peer.py server)
        if [[ " $SCENARIOS " == *" vless-reality-vision "* ]]; then
            bg "$T/tlspeer.log" python3 "$HERE/../integration/tls_peer.py" server \
                --port "$TLS_PORT" --cert "$T/srv.crt" --key "$T/srv.key" \
                --ready-file "$T/tlspeer.ready"
            "${KATEST[@]}" wait-port --port "$TLS_PORT" >/dev/null
        fi
    else
        note "no python3-cryptography: the REALITY scenarios are left out"
        SCENARIOS=$(tr ' ' '\n' <<<"$SCENARIOS" | grep -v '^vless-reality' | tr '\n' ' ')
    fi
fi

read -r SINK_PORT <<<"$("${KATEST[@]}" freeport)"
bg "$T/sink.out" "$BULK" sink "$SINK_PORT"
"${KATEST[@]}" wait-port --port "$SINK_PORT" >/dev/null
sink_conns() { ss -Htn state established "( dport = :$SINK_PORT )" 2>/dev/null | wc -l; }

render() {   # render TEMPLATE OUT SERVER_PORT [LOCAL_PORT]
    pr_render "$1" "$2" SERVER_PORT="$3" LOCAL_PORT="${4:-0}" SINK_PORT="$SINK_PORT" \
        UUID="$UUID" SS_SERVER_KEY="$SKEY" SS_USER_KEY="$UKEY" SNI=node.test \
        CA_FILE="$T/ca.crt" CERT_FILE="$T/srv.crt" KEY_FILE="$T/srv.key" \
        PRIVATE_KEY="$RPRIV" PUBLIC_KEY="$RPUB" SHORT_ID="$RSID" TARGET_PORT="$TARGET_PORT"
}

# start_server NAME SCEN PORT: sets SRV (its pid); false when it does not listen
start_server() {
    local name=$1 scen=$2 port=$3 opts=()
    case $name in
    katana | katana-base)
        local bin=$KATANA
        [ "$name" = katana ] || bin=${KATANA_BASE_BIN:-}
        [ -x "$bin" ] || { note "$scen $name: no binary at '$bin'"; return 1; }
        case $scen in
        ss2022) opts=(--cipher 2022-blake3-aes-128-gcm --server-key "$SKEY") ;;
        vless-grpc-tls) opts=(--protocol vless --grpc-service kt-bench) ;;
        trojan-tls) opts=(--protocol trojan) ;;
        vmess-ws-tls) opts=(--protocol vmess --ws-path /bench) ;;
        vless-reality | vless-reality-vision) opts=(--protocol vless) ;;
        vless-reality-grpc) opts=(--protocol vless --grpc-service kt-bench) ;;
        socks | http | anytls) opts=(--protocol "$scen") ;;
        esac
        [[ $scen == ss2022 || $scen == vless-reality* || $scen == socks || $scen == http ]] ||
            opts+=(--cert-file "$T/srv.crt" --key-file "$T/srv.key")
        "${KATEST[@]}" mkconfig --out "$T/katana-$scen.json" --port "$port" --user "1:$UUID" \
            "${opts[@]}" --workers "$WORKERS" --log-level warn
        # REALITY: the panel node's tls 2 and tls_settings (PANEL.md §1.4) on the local panel
        [[ $scen != vless-reality* ]] || python3 - "$T/katana-$scen.json" "$RPRIV" "$RSID" \
            "$TARGET_PORT" <<'PY'
import json, sys
f, priv, sid, target = sys.argv[1:5]
c = json.load(open(f))
node = c["nodes"][0]["panel"]["node"]
node["tls"] = 2
if f.endswith("-vless-reality-vision.json"):
    node["flow"] = "xtls-rprx-vision"
node["tls_settings"] = {"server_name": "node.test", "server_port": int(target),
                        "private_key": priv, "short_id": sid}
json.dump(c, open(f, "w"))
PY
        bg "$T/$name.log" "$bin" run -c "$T/katana-$scen.json" ;;
    xray | sing-box)
        [ -f "$TEMPLATES/$name/server-$scen.json" ] ||
            { note "$scen $name: $name has no such server"; return 1; } ;;&
    xray)
        render "$TEMPLATES/xray/server-$scen.json" "$T/xray-$scen.json" "$port"
        bg "$T/xray.log" "$XRAY" run -c "$T/xray-$scen.json" ;;
    sing-box)
        render "$TEMPLATES/sing-box/server-$scen.json" "$T/sing-box-$scen.json" "$port"
        bg "$T/sing-box.log" "$SINGBOX" run -c "$T/sing-box-$scen.json" --disable-color ;;
    *) note "$scen $name: unknown server"; return 1 ;;
    esac
    SRV=$BG
    "${KATEST[@]}" wait-port --port "$port" --timeout 10 >/dev/null 2>&1 && return 0
    note "$scen $name: did not listen on $port: $(tail -n 1 "$T/$name.log" 2>/dev/null)"
    kill -KILL "$SRV" 2>/dev/null || true
    return 1
}

# throughput FORWARD_PORT: prints "GBITS CPU_S_PER_GB" for the server $SRV, or "cut cut" (and
# a note) for a transfer that was not whole (bulk-judge.sh: a failed write, or the sink got
# fewer bytes than were sent). The sender first writes 4 KiB alone (Xray's Trojan client fails
# a first write larger than its 8 KiB buffer, tests/interop/peers.sh pr_tcp_opts), then 256 KiB
# blocks.
throughput() {
    local c0 c1
    c0=$(cpu_secs "$SRV")
    # the sink reports at EOF, which some servers pass on only after their own timeout
    if ! bulk_judged "$T/sink.out" 300 "$BULK" send "$1" "$SECS" 4096; then
        note "$scen $name: CUT: $BULK_CUT"
        echo "cut cut"
        return
    fi
    c1=$(cpu_secs "$SRV")
    awk -v b="$BULK_BYTES" -v s="$BULK_SECS" -v c0="$c0" -v c1="$c1" \
        'BEGIN { printf "%.2f %.2f\n", b * 8 / s / 1e9, (c1 - c0) / (b / 1e9) }'
}

# throughput_tls SOCKS_PORT: as throughput, for VISION_BYTES of TLS 1.3 downloaded through the
# client's SOCKS inbound from tls_peer.py (checked byte for byte)
throughput_tls() {
    local c0 c1 t0 t1
    c0=$(cpu_secs "$SRV"); t0=$(date +%s.%N)
    if ! timeout 600 python3 "$HERE/../integration/tls_peer.py" client --socks "$1" \
            --dest-port "$TLS_PORT" --mode down --bytes "$VISION_BYTES" >"$T/tls.out" 2>&1; then
        note "$scen $name: CUT: vision transfer failed: $(tail -n 1 "$T/tls.out")"
        echo "cut cut"; return
    fi
    t1=$(date +%s.%N); c1=$(cpu_secs "$SRV")
    awk -v b="$VISION_BYTES" -v s="$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" \
        -v c0="$c0" -v c1="$c1" 'BEGIN { printf "%.2f %.2f\n", b * 8 / s / 1e9, (c1 - c0) / (b / 1e9) }'
}

# idle_rss SCEN FORWARD_PORT SERVER_PORT: prints KiB of server RSS per idle connection once the
# server holds every connection opened (it dialled the sink for each); "-" when none opened
idle_rss() {
    local r0 r1 ready s0 hp n=$CONNS
    # streams of one HTTP/2 connection: katana serves at most 100 at once per connection
    [ "$1" != vless-reality-grpc ] || [ "$n" -le 99 ] || n=99
    r0=$(rss_kib "$SRV")
    s0=$(sink_conns)
    rm -f "$T/hold.in"; mkfifo "$T/hold.in"
    if [ "$1" = vless-grpc-tls ]; then
        python3 "$HERE/grpc_hold.py" --port "$3" --conns "$CONNS" --uuid "$UUID" \
            --dest-port "$SINK_PORT" --service kt-bench --sni node.test --ca "$T/ca.crt" \
            <"$T/hold.in" >"$T/hold.out" 2>"$T/hold.err" &
    elif [ "$1" = vless-reality-vision ]; then   # through the client's SOCKS inbound
        "$BULK" hold "$2" "$n" "$SINK_PORT" <"$T/hold.in" >"$T/hold.out" 2>"$T/hold.err" &
    else
        "$BULK" hold "$2" "$n" <"$T/hold.in" >"$T/hold.out" 2>"$T/hold.err" &
    fi
    hp=$!; PIDS+=("$hp")
    exec 7>"$T/hold.in"
    for _ in $(seq 1 600); do grep -q ready "$T/hold.out" && break; sleep 0.1; done
    ready=$(awk '/ready/ { print $2 }' "$T/hold.out")
    for _ in $(seq 1 200); do
        [ "$(sink_conns)" -ge $((s0 + ${ready:-0})) ] && break; sleep 0.1
    done
    [ "$(sink_conns)" -ge $((s0 + ${ready:-0})) ] ||
        note "$1 $name: the server dialled the sink for $(($(sink_conns) - s0)) of ${ready:-0} connections"
    sleep 2
    r1=$(rss_kib "$SRV")
    note "$1 $name: the server holds $(ss -Htn state established "( sport = :$3 )" 2>/dev/null | wc -l)" \
         "client connections and $(($(sink_conns) - s0)) to the sink"
    exec 7>&-
    wait "$hp" 2>/dev/null || true
    [ "${ready:-0}" -gt 0 ] || { note "$1 $name: no idle connection opened: $(head -n 1 "$T/hold.err")"; echo "-"; return; }
    [ "$ready" = "$n" ] || note "$1 $name: only $ready of $n connections opened ($(head -n 1 "$T/hold.err"))"
    awk -v a="$r0" -v b="$r1" -v n="$ready" 'BEGIN { printf "%.2f\n", (b - a) / n }'
}

# median V...: the middle of the figures (not "-" or "cut"; the mean of the two middle ones)
median() {
    printf '%s\n' "$@" | { grep -Ex -- '[0-9.]+' || true; } | sort -g | awk '{ v[NR] = $1 }
        END { if (NR == 0) print "-"; else if (NR % 2) print v[(NR + 1) / 2];
              else printf "%.2f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

declare -A GBPS CPU RSS
CUTS=0   # transfers that were not whole, in every scenario and round
START=$(date +%s)
for scen in $SCENARIOS; do
    # the client: Xray-core's, or sing-box's where Xray-core has no such outbound (anytls)
    CLIENT=xray
    [ -f "$TEMPLATES/xray/client-$scen.json" ] || CLIENT=sing-box
    [ -f "$TEMPLATES/$CLIENT/client-$scen.json" ] || { note "$scen: unknown scenario"; continue; }
    for name in $SERVERS; do RSS[$scen/$name]=-; done
    for round in $(seq 1 "$ROUNDS"); do
        for name in $SERVERS; do
            GBPS[$scen@$round/$name]=-; CPU[$scen@$round/$name]=-
            [ "$ROUNDS" = 1 ] ||
                note "$scen round $round of $ROUNDS, $name (load $(cut -d' ' -f1 /proc/loadavg))"
            read -r SP FP <<<"$("${KATEST[@]}" freeport --count 2)"
            start_server "$name" "$scen" "$SP" || continue
            render "$TEMPLATES/$CLIENT/client-$scen.json" "$T/client-$scen.json" "$SP" "$FP"
            if [ "$CLIENT" = xray ]; then
                bg "$T/client.log" "$XRAY" run -c "$T/client-$scen.json"
            else
                bg "$T/client.log" "$SINGBOX" run -c "$T/client-$scen.json" --disable-color
            fi
            CL=$BG
            "${KATEST[@]}" wait-port --port "$FP" --timeout 10 >/dev/null ||
                { note "$scen: the client did not listen"; stop "$CL" "$SRV"; continue; }
            # idle first: after a bulk run the server's heap may still shrink
            if [ "$CONNS" -gt 0 ] && [ "$round" = 1 ]; then
                note "$scen $name: idle connections"
                RSS[$scen/$name]=$(idle_rss "$scen" "$FP" "$SP")
            fi
            if [ "$scen" = vless-reality-vision ]; then
                note "$scen $name: TLS 1.3 download of $VISION_BYTES bytes"
                read -r g c <<<"$(throughput_tls "$FP")"
                # katana: did the transfer reach direct copy (katana_vision_direct_total) and the
                # kernel relay (katana_vision_splice_total, _bytes_total)?
                [ "$name" != katana ] || note "$scen katana: $(curl -sS -m 5 "http://$(python3 -c \
                    'import json, sys; print(json.load(open(sys.argv[1]))["api"]["listen"])' \
                    "$T/katana-$scen.json")/metrics" | grep -E '^katana_vision_(direct|splice)' | tr '\n' ' ')"
            else
                note "$scen $name: bulk ${SECS}s"
                read -r g c <<<"$(throughput "$FP")"
            fi
            GBPS[$scen@$round/$name]=$g; CPU[$scen@$round/$name]=$c
            [ "$g" != cut ] || note "$scen $name: the client's last words: $(tail -n 2 "$T/client.log" | tr '\n' ' ')"
            stop "$CL" "$SRV"
        done
    done
    for name in $SERVERS; do
        g=() c=() cuts=0
        for round in $(seq 1 "$ROUNDS"); do
            g+=("${GBPS[$scen@$round/$name]}"); c+=("${CPU[$scen@$round/$name]}")
            [ "${GBPS[$scen@$round/$name]}" != cut ] || cuts=$((cuts + 1))
        done
        GBPS[$scen/$name]=$(median "${g[@]}"); CPU[$scen/$name]=$(median "${c[@]}")
        if [ "$cuts" -gt 0 ]; then   # a failure, never a figure (issue 24)
            GBPS[$scen/$name]="CUT $cuts/$ROUNDS"; CPU[$scen/$name]=-
            CUTS=$((CUTS + cuts))
        fi
    done
    if [ "$scen" = vless-reality-vision ]; then
        # the same download through a relay that only splices (bulk splice): the kernel's
        # share of a server that splices, its CPU s/GB in the server's place
        read -r FP <<<"$("${KATEST[@]}" freeport)"
        bg "$T/splice.log" "$BULK" splice "$FP"
        SRV=$BG
        if "${KATEST[@]}" wait-port --port "$FP" --timeout 10 >/dev/null; then
            note "$scen splice: TLS 1.3 download of $VISION_BYTES bytes"
            read -r g c <<<"$(throughput_tls "$FP")"
            GBPS[$scen/splice]=$g; CPU[$scen/splice]=$c; RSS[$scen/splice]=-
        else
            note "$scen splice: the relay did not listen: $(tail -n 1 "$T/splice.log")"
        fi
        stop "$SRV"
    fi
done
LOAD1=$(cut -d' ' -f1-3 /proc/loadavg)

# best COLUMN SCEN min|max: the better of the peers' figures ("-" when none)
best() {
    local -n col=$1
    local v out=- n
    for n in $SERVERS; do
        [[ $n == katana* ]] && continue   # katana-base is katana too, not a peer
        v=${col[$2/$n]:--}
        [[ $v =~ ^[0-9.]+$ ]] || continue   # "-", a cut run ("cut", "CUT n/N")
        if [ "$out" = - ] || awk -v a="$v" -v b="$out" -v m="$3" \
               'BEGIN { exit !((m == "min") ? a < b : a > b) }'; then out=$v; fi
    done
    echo "$out"
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a !~ /^[0-9.]+$/ || b !~ /^[0-9.]+$/ || b + 0 == 0) print "-"; else printf "%.2f\n", a / b }'; }
goal() {   # goal RATIO BOUND: "met" / "not met" / "-"
    awk -v r="$1" -v g="$2" 'BEGIN { if (r == "-") print "-"; else print (r <= g) ? "met" : "not met" }'
}

echo
echo "Peers (issue 10): katana vs Xray-core and sing-box servers, loopback, one client for all:" \
     "Xray-core $("$XRAY" version 2>/dev/null | awk 'NR == 1 { print $2 }') (dokodemo-door," \
     "mux off); ${SECS}s one-way bulk per run; idle test $CONNS connections (vless-grpc-tls:" \
     "grpc_hold.py, one HTTP/2 connection per stream; vless-reality-grpc: 99 streams of the" \
     "client's one connection; vless-reality-vision: $VISION_BYTES bytes of TLS 1.3 downloaded" \
     "by tls_peer.py through a SOCKS inbound, idle connections through it too; anytls: sing-box" \
     "$("$SINGBOX" version 2>/dev/null | awk 'NR == 1 { print $3 }')'s client, a direct inbound, Xray-core having no AnyTLS); katana workers=$WORKERS; $(nproc) CPUs;" \
     "load average $LOAD0 before, $LOAD1 after ($(($(date +%s) - START)) s)"
[ "$ROUNDS" = 1 ] || echo "Medians of $ROUNDS rounds, the servers alternating in each; k/best CPU:" \
     "the median of the rounds' ratios"
printf '%-20s %-10s %10s %12s %14s\n' scenario server "Gbit/s" "CPU s/GB" "RSS KiB/conn"
for scen in $SCENARIOS; do
    [ -f "$TEMPLATES/xray/client-$scen.json" ] || [ -f "$TEMPLATES/sing-box/client-$scen.json" ] ||
        continue
    for name in $SERVERS; do
        printf '%-20s %-10s %10s %12s %14s\n' "$scen" "$name" "${GBPS[$scen/$name]}" \
            "${CPU[$scen/$name]}" "${RSS[$scen/$name]}"
    done
    if [ -n "${CPU[$scen/splice]:-}" ]; then
        printf '%-20s %-10s %10s %12s %14s\n' "$scen" splice "${GBPS[$scen/splice]}" \
            "${CPU[$scen/splice]}" -
    fi
    [[ " $SERVERS " == *" katana "* ]] || continue
    [[ " $SERVERS " != *" katana-base "* ]] ||
        printf '%-20s %-10s %10s %12s %14s\n' "$scen" k/base \
            "$(ratio "${GBPS[$scen/katana]}" "${GBPS[$scen/katana-base]}")" \
            "$(ratio "${CPU[$scen/katana]}" "${CPU[$scen/katana-base]}")" \
            "$(ratio "${RSS[$scen/katana]}" "${RSS[$scen/katana-base]}")"
    [ -z "${CPU[$scen/splice]:-}" ] ||
        printf '%-20s %-10s %10s %12s\n' "$scen" k/splice "" \
            "$(ratio "${CPU[$scen/katana]}" "${CPU[$scen/splice]}")"
    rc=$(ratio "${CPU[$scen/katana]}" "$(best CPU "$scen" min)")
    if [ "$ROUNDS" -gt 1 ]; then   # the median of the rounds' own ratios
        rs=()
        for round in $(seq 1 "$ROUNDS"); do
            rs+=("$(ratio "${CPU[$scen@$round/katana]}" "$(best CPU "$scen@$round" min)")")
        done
        rc=$(median "${rs[@]}")
        [[ ${GBPS[$scen/katana]} != CUT* ]] || rc=-
        printf '%-20s %-10s %10s %12s   CPU per round: %s\n' "$scen" k/best "" "" "${rs[*]}"
    fi
    rr=$(ratio "${RSS[$scen/katana]}" "$(best RSS "$scen" min)")
    printf '%-20s %-10s %10s %12s %14s   goals: CPU <= 0.50 %s, RSS <= 0.20 %s\n' "$scen" k/best \
        "$(ratio "${GBPS[$scen/katana]}" "$(best GBPS "$scen" max)")" "$rc" "$rr" \
        "$(goal "$rc" 0.5)" "$(goal "$rr" 0.2)"
done
echo "(k/best = katana / the better of Xray-core and sing-box for that column: above 1 is better" \
     "for Gbit/s, below 1 for CPU and RSS)"
if [ "$CUTS" -gt 0 ]; then   # issue 24: a cut transfer fails the benchmark
    echo "FAILED: $CUTS transfer(s) cut (CUT n/N: n of N rounds; their rows have no figure)"
    exit 1
fi
