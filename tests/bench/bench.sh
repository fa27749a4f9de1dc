#!/bin/bash
# bench.sh BUILDDIR: katana vs ss-server vs v2ray (its Shadowsocks inbound), side by side on
# loopback with the same client (ss-tunnel, a port forward) for every server.
#
# Per cipher and server: one-way bulk throughput (tests/bench/bulk.c sender -> ss-tunnel ->
# server -> sink) and the server's CPU seconds per GB (utime+stime from /proc/PID/stat).
# Per server (BENCH_IDLE_CIPHERS): resident memory per idle connection with BENCH_CONNS
# connections open (VmRSS before/after, divided by the count).
#
# Trojan over TLS (issue 8), a second table: katana vs trojan-gfw's server vs v2ray's
# trojan-tls inbound, the same client (trojan-gfw in forward mode) for all: bulk throughput and
# server CPU s/GB. A server that cannot serve Trojan (exits at start) gets a "-" row and a note.
#
# VMess and VLESS over TLS and over WS+TLS (issue 9), a third table: katana vs v2ray's own server
# vs Xray-core's (when tests/setup-deps.sh built it), the same v2ray 4.34 client for all: bulk
# throughput, server CPU s/GB and server RSS per idle connection (TLS and WebSocket included).
#
# Environment: BENCH_SECONDS (10), BENCH_CONNS (10000), BENCH_CIPHERS (all three),
# BENCH_IDLE_CIPHERS (aes-256-gcm), BENCH_SERVERS ("katana ss-server v2ray"),
# BENCH_TROJAN_SERVERS ("katana trojan v2ray"; empty: no Trojan table),
# BENCH_V2_SERVERS ("katana v2ray xray"; empty: no VMess/VLESS table), BENCH_V2_SCENARIOS
# (vmess-tls vmess-ws-tls vless-tls vless-ws-tls), BENCH_V2_IDLE (the scenarios with an idle
# test: vmess-tls vmess-ws-tls), BENCH_V2_CONNS (2000), BENCH_V2_SECONDS (5),
# BENCH_WORKERS (katana workers, 1: ss-server is single-threaded too), KATANA_BIN,
# KATANA_BASE_BIN (another katana build, server name katana-base in BENCH_SERVERS: a change
# measured side by side with the build before it; k/katana-base is the ratio).
# Not part of `make check`; run with `make bench`.
set -euo pipefail

BUILDDIR=${1:-.}
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bulk-judge.sh
. "$HERE/bulk-judge.sh"   # bulk_judged: a cut transfer is no figure
KATEST=(python3 "$HERE/../integration/katest.py")
KATANA=${KATANA_BIN:-$BUILDDIR/katana}
SECONDS_RUN=${BENCH_SECONDS:-10}
CONNS=${BENCH_CONNS:-10000}
CIPHERS=${BENCH_CIPHERS:-aes-128-gcm aes-256-gcm chacha20-ietf-poly1305}
IDLE_CIPHERS=${BENCH_IDLE_CIPHERS:-aes-256-gcm}
SERVERS=${BENCH_SERVERS:-katana ss-server v2ray}
TROJAN_SERVERS=${BENCH_TROJAN_SERVERS-katana trojan v2ray}
WORKERS=${BENCH_WORKERS:-1}
PASS=$(cat /proc/sys/kernel/random/uuid)
TCK=$(getconf CLK_TCK)

T=$(mktemp -d "${TMPDIR:-/tmp}/katana-bench.XXXXXX")
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
note() { echo "# $*" >&2; }

for b in ss-tunnel ss "${CC:-cc}"; do
    command -v "$b" >/dev/null || { echo "bench: $b is not installed" >&2; exit 1; }
done
BULK=${BULK:-$BUILDDIR/tests/bench/bulk}
if [ ! -x "$BULK" ]; then
    BULK=$T/bulk
    "${CC:-cc}" -O2 -o "$BULK" "$HERE/bulk.c"
fi

# File descriptors: ss-tunnel and the server each hold two per connection.
ulimit -n 1048576 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
NOFILE=$(ulimit -n)
if [ "$NOFILE" != unlimited ] && [ $((2 * CONNS + 256)) -gt "$NOFILE" ]; then
    CONNS=$(((NOFILE - 256) / 2))
    note "open-file limit $NOFILE: idle test reduced to $CONNS connections"
fi

cpu_secs() {   # utime+stime of a process (all threads), seconds
    awk -v t="$TCK" '{ sub(/^.*\) /, ""); printf "%.3f\n", ($12 + $13) / t }' "/proc/$1/stat"
}
rss_kib() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }

read -r SINK_PORT <<<"$("${KATEST[@]}" freeport)"
bg "$T/sink.out" "$BULK" sink "$SINK_PORT"
"${KATEST[@]}" wait-port --port "$SINK_PORT" >/dev/null

# start_server NAME CIPHER PORT: sets SRV (pid) or returns 1 when it cannot run.
start_server() {
    local name=$1 cipher=$2 port=$3
    case $name in
    katana | katana-base)
        local bin=$KATANA
        [ "$name" = katana ] || bin=${KATANA_BASE_BIN:-}
        [ -x "$bin" ] || { note "$name: no binary at '$bin'"; return 1; }
        "${KATEST[@]}" mkconfig --out "$T/katana.json" --port "$port" --cipher "$cipher" \
            --user "1:$PASS" --workers "$WORKERS" --log-level warn
        bg "$T/$name.log" "$bin" run -c "$T/katana.json" ;;
    ss-server)
        command -v ss-server >/dev/null || return 1
        bg "$T/ss-server.log" ss-server -s 127.0.0.1 -p "$port" -k "$PASS" -m "$cipher" \
            --no-delay -n "$NOFILE" ;;
    v2ray)
        command -v v2ray >/dev/null || return 1
        local m=$cipher; [ "$m" = chacha20-ietf-poly1305 ] && m=chacha20-poly1305
        cat >"$T/v2ray.json" <<EOF
{"log": {"loglevel": "warning", "access": "none"},
 "inbounds": [{"listen": "127.0.0.1", "port": $port, "protocol": "shadowsocks",
   "settings": {"method": "$m", "password": "$PASS", "network": "tcp"}}],
 "outbounds": [{"protocol": "freedom", "settings": {}}]}
EOF
        bg "$T/v2ray.log" v2ray -config "$T/v2ray.json" ;;
    esac
    SRV=$BG
    "${KATEST[@]}" wait-port --port "$port" --timeout 10 >/dev/null || {
        note "$name did not listen on $port"; kill -KILL "$SRV" 2>/dev/null; return 1; }
}

stop() { local p; for p in "$@"; do kill -TERM "$p" 2>/dev/null || true; done
         for p in "$@"; do wait "$p" 2>/dev/null || true; done; }

# throughput TUNNEL_PORT: prints "GBITS CPU_S_PER_GB" for the server $SRV, or "CUT -" for a
# transfer that was not whole (bulk-judge.sh), noted and counted in $T/cuts: a failure, never a
# figure (issue 24)
throughput() {
    local c0 c1
    c0=$(cpu_secs "$SRV")
    if ! bulk_judged "$T/sink.out" 100 "$BULK" send "$1" "$SECONDS_RUN"; then
        note "CUT: $BULK_CUT"
        echo cut >>"$T/cuts"
        echo "CUT -"
        return
    fi
    c1=$(cpu_secs "$SRV")
    awk -v b="$BULK_BYTES" -v s="$BULK_SECS" -v c0="$c0" -v c1="$c1" \
        'BEGIN { printf "%.2f %.2f\n", b * 8 / s / 1e9, (c1 - c0) / (b / 1e9) }'
}

# sink_conns: connections established to the sink (the server's side of them)
sink_conns() { ss -Htn state established "( dport = :$SINK_PORT )" 2>/dev/null | wc -l; }

# idle_rss TUNNEL_PORT: prints KiB of server RSS per idle connection, once the server holds
# every connection the client opened (it dialled the sink for each)
idle_rss() {
    local r0 r1 ready s0
    r0=$(rss_kib "$SRV")
    s0=$(sink_conns)
    rm -f "$T/hold.in"; mkfifo "$T/hold.in"
    "$BULK" hold "$1" "$CONNS" <"$T/hold.in" >"$T/hold.out" 2>"$T/hold.err" &
    local hp=$!; PIDS+=("$hp")
    exec 7>"$T/hold.in"
    for _ in $(seq 1 1200); do grep -q ready "$T/hold.out" && break; sleep 0.1; done
    ready=$(awk '/ready/ { print $2 }' "$T/hold.out")
    # the client may still be handshaking with the server: wait (30 s at most) until the server
    # dialled the sink for every connection, so that each is measured with all its state
    for _ in $(seq 1 300); do
        [ "$(sink_conns)" -ge $((s0 + ${ready:-0})) ] && break; sleep 0.1
    done
    sleep 2
    r1=$(rss_kib "$SRV")
    exec 7>&-
    wait "$hp" 2>/dev/null || true
    [ "${ready:-0}" -gt 0 ] || { echo "-"; return; }
    [ "$ready" = "$CONNS" ] || note "only $ready of $CONNS connections opened ($(head -n1 "$T/hold.err"))"
    awk -v a="$r0" -v b="$r1" -v n="$ready" 'BEGIN { printf "%.2f\n", (b - a) / n }'
}

declare -A GBPS CPU RSS
for cipher in $CIPHERS; do
    for name in $SERVERS; do
        read -r SP TP <<<"$("${KATEST[@]}" freeport --count 2)"
        GBPS[$cipher/$name]=-; CPU[$cipher/$name]=-; RSS[$cipher/$name]=-
        start_server "$name" "$cipher" "$SP" || continue
        bg "$T/tunnel.log" ss-tunnel -s 127.0.0.1 -p "$SP" -b 127.0.0.1 -l "$TP" \
            -L "127.0.0.1:$SINK_PORT" -k "$PASS" -m "$cipher" -n "$NOFILE"
        TUN=$BG
        "${KATEST[@]}" wait-port --port "$TP" >/dev/null
        note "$cipher $name: bulk ${SECONDS_RUN}s"
        read -r g c <<<"$(throughput "$TP")"
        GBPS[$cipher/$name]=$g; CPU[$cipher/$name]=$c
        if [[ " $IDLE_CIPHERS " == *" $cipher "* ]] && [ "$CONNS" -gt 0 ]; then
            note "$cipher $name: $CONNS idle connections"
            RSS[$cipher/$name]=$(idle_rss "$TP")
        fi
        stop "$TUN" "$SRV"
    done
done

# --- Trojan over TLS: katana vs trojan-gfw's server vs v2ray's trojan-tls inbound -------------
# The same client for every server: trojan-gfw in forward mode (bulk sender -> forward ->
# server -> sink), certificate from a test CA, 1 katana worker.
declare -A TGBPS TCPU
TROJAN_ROWS=()
# The TLS sections' certificate (P-256, node.test) from a test CA.
if command -v openssl >/dev/null; then
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
        -keyout "$T/ca.key" -out "$T/ca.crt" -days 30 -subj "/CN=bench CA" \
        -addext "basicConstraints=critical,CA:TRUE" 2>/dev/null
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$T/srv.key" \
        -out "$T/srv.csr" -subj "/CN=node.test" 2>/dev/null
    printf 'subjectAltName=DNS:node.test,IP:127.0.0.1\n' >"$T/srv.ext"
    openssl x509 -req -in "$T/srv.csr" -CA "$T/ca.crt" -CAkey "$T/ca.key" -CAcreateserial \
        -out "$T/srv.crt" -days 30 -extfile "$T/srv.ext" 2>/dev/null
fi
if [ -n "$TROJAN_SERVERS" ] && command -v trojan >/dev/null && [ -f "$T/srv.crt" ]; then
    for name in $TROJAN_SERVERS; do
        TROJAN_ROWS+=("$name")
        TGBPS[$name]=-; TCPU[$name]=-
        read -r SP TP <<<"$("${KATEST[@]}" freeport --count 2)"
        case $name in
        katana)
            [ -x "$KATANA" ] || { note "trojan katana: no binary at $KATANA"; continue; }
            "${KATEST[@]}" mkconfig --out "$T/katana-trojan.json" --port "$SP" --protocol trojan \
                --cert-file "$T/srv.crt" --key-file "$T/srv.key" --user "1:$PASS" \
                --workers "$WORKERS" --log-level warn
            bg "$T/trojan-katana.log" "$KATANA" run -c "$T/katana-trojan.json" ;;
        trojan)
            cat >"$T/trojan-server.json" <<EOF
{"run_type": "server", "local_addr": "127.0.0.1", "local_port": $SP,
 "remote_addr": "127.0.0.1", "remote_port": 9, "password": ["$PASS"], "log_level": 3,
 "ssl": {"cert": "$T/srv.crt", "key": "$T/srv.key", "key_password": "", "alpn": ["http/1.1"],
         "reuse_session": true, "session_ticket": false, "session_timeout": 600},
 "tcp": {"no_delay": true, "keep_alive": true, "fast_open": false}}
EOF
            bg "$T/trojan-trojan.log" trojan -c "$T/trojan-server.json" ;;
        v2ray)
            command -v v2ray >/dev/null || { note "trojan v2ray: not installed"; continue; }
            cat >"$T/v2ray-trojan.json" <<EOF
{"log": {"loglevel": "warning", "access": "none"},
 "inbounds": [{"listen": "127.0.0.1", "port": $SP, "protocol": "trojan",
   "settings": {"clients": [{"password": "$PASS"}]},
   "streamSettings": {"network": "tcp", "security": "tls",
     "tlsSettings": {"alpn": ["http/1.1"],
       "certificates": [{"certificateFile": "$T/srv.crt", "keyFile": "$T/srv.key"}]}}}],
 "outbounds": [{"protocol": "freedom", "settings": {}}]}
EOF
            bg "$T/trojan-v2ray.log" v2ray -config "$T/v2ray-trojan.json" ;;
        *) note "trojan $name: unknown server"; continue ;;
        esac
        SRV=$BG
        if ! "${KATEST[@]}" wait-port --port "$SP" --timeout 10 >/dev/null 2>&1; then
            if kill -0 "$SRV" 2>/dev/null; then
                note "trojan $name: did not listen on $SP"; kill -KILL "$SRV" 2>/dev/null || true
            else
                note "trojan $name: skipped, it exited at start (cannot serve Trojan):" \
                     "$(tail -n 1 "$T/trojan-$name.log" 2>/dev/null)"
            fi
            continue
        fi
        cat >"$T/trojan-forward.json" <<EOF
{"run_type": "forward", "local_addr": "127.0.0.1", "local_port": $TP,
 "remote_addr": "127.0.0.1", "remote_port": $SP, "target_addr": "127.0.0.1",
 "target_port": $SINK_PORT, "password": ["$PASS"], "udp_timeout": 60, "log_level": 3,
 "ssl": {"verify": true, "verify_hostname": true, "cert": "$T/ca.crt", "sni": "node.test",
         "alpn": ["h2", "http/1.1"], "reuse_session": true, "session_ticket": false},
 "tcp": {"no_delay": true, "keep_alive": true, "fast_open": false}}
EOF
        bg "$T/trojan-forward.log" trojan -c "$T/trojan-forward.json"
        TUN=$BG
        "${KATEST[@]}" wait-port --port "$TP" >/dev/null
        note "trojan $name: bulk ${SECONDS_RUN}s"
        read -r g c <<<"$(throughput "$TP")"
        TGBPS[$name]=$g; TCPU[$name]=$c
        stop "$TUN" "$SRV"
    done
elif [ -n "$TROJAN_SERVERS" ]; then
    note "trojan or openssl is not installed: no Trojan table"
fi

# --- VMess and VLESS over TLS and over WS+TLS (issue 9) -----------------------------------------
# The same client for every server: v2ray 4.34 with a dokodemo-door inbound (a port forward to
# the sink) and a vmess (aes-128-gcm, alterId 0) or vless outbound, TLS verified against the
# bench CA, WebSocket on path /bench. Servers: katana, v2ray's own inbound and, when it is built
# (tests/setup-deps.sh), Xray-core's. Bulk throughput and server CPU s/GB per scenario; server
# RSS per idle connection ($V2_CONNS connections, TLS and WebSocket state included) for the
# scenarios in BENCH_V2_IDLE.
declare -A VGBPS VCPU VRSS
V2_ROWS=()
XRAY_BIN=${KATANA_PEERS:-/var/cache/katana-peers}/bin/xray
V2_DEFAULT="katana v2ray"; [ -x "$XRAY_BIN" ] && V2_DEFAULT="katana v2ray xray"
V2_SERVERS=${BENCH_V2_SERVERS-$V2_DEFAULT}
V2_SCENARIOS=${BENCH_V2_SCENARIOS:-vmess-tls vmess-ws-tls vless-tls vless-ws-tls}
V2_IDLE=${BENCH_V2_IDLE-vmess-tls vmess-ws-tls}
V2_CONNS=${BENCH_V2_CONNS:-2000}
V2_SECONDS=${BENCH_V2_SECONDS:-5}
UUID=$(cat /proc/sys/kernel/random/uuid)

# v2_stream NET ROLE: the streamSettings of v2ray/Xray (ROLE server or client)
v2_stream() {
    local tls ws=''
    if [ "$2" = server ]; then
        tls="\"tlsSettings\": {\"alpn\": [\"http/1.1\"], \"certificates\": [{\"certificateFile\": \"$T/srv.crt\", \"keyFile\": \"$T/srv.key\"}]}"
    else
        tls="\"tlsSettings\": {\"serverName\": \"node.test\", \"allowInsecure\": false, \"certificates\": [{\"usage\": \"verify\", \"certificateFile\": \"$T/ca.crt\"}]}"
    fi
    [ "$1" = ws ] && ws=', "wsSettings": {"path": "/bench"}'
    echo "{\"network\": \"$1\", \"security\": \"tls\", $tls$ws}"
}
# v2_server_json PROTO NET PORT: a v2ray/Xray server config with one user, freedom outbound
v2_server_json() {
    local settings="{\"clients\": [{\"id\": \"$UUID\", \"alterId\": 0}]}"
    [ "$1" = vless ] && settings="{\"clients\": [{\"id\": \"$UUID\"}], \"decryption\": \"none\"}"
    cat <<EOF
{"log": {"loglevel": "warning", "access": "none"},
 "inbounds": [{"listen": "127.0.0.1", "port": $3, "protocol": "$1", "settings": $settings,
   "streamSettings": $(v2_stream "$2" server)}],
 "outbounds": [{"protocol": "freedom", "settings": {}}]}
EOF
}
# v2_client_json PROTO NET SERVER_PORT LOCAL_PORT: the v2ray client (dokodemo-door to the sink)
v2_client_json() {
    local user="{\"id\": \"$UUID\", \"alterId\": 0, \"security\": \"aes-128-gcm\"}"
    [ "$1" = vless ] && user="{\"id\": \"$UUID\", \"encryption\": \"none\"}"
    cat <<EOF
{"log": {"loglevel": "warning", "access": "none"},
 "inbounds": [{"listen": "127.0.0.1", "port": $4, "protocol": "dokodemo-door",
   "settings": {"address": "127.0.0.1", "port": $SINK_PORT, "network": "tcp"}}],
 "outbounds": [{"protocol": "$1",
   "settings": {"vnext": [{"address": "127.0.0.1", "port": $3, "users": [$user]}]},
   "streamSettings": $(v2_stream "$2" client)}]}
EOF
}

if [ -n "$V2_SERVERS" ] && command -v v2ray >/dev/null && [ -f "$T/srv.crt" ]; then
    for scen in $V2_SCENARIOS; do
        proto=${scen%%-*}; net=tcp; [[ $scen == *-ws-* ]] && net=ws
        for name in $V2_SERVERS; do
            V2_ROWS+=("$scen/$name")
            VGBPS[$scen/$name]=-; VCPU[$scen/$name]=-; VRSS[$scen/$name]=-
            read -r SP TP <<<"$("${KATEST[@]}" freeport --count 2)"
            case $name in
            katana)
                ws=(); [ "$net" = ws ] && ws=(--ws-path /bench)
                "${KATEST[@]}" mkconfig --out "$T/katana-$scen.json" --port "$SP" --protocol "$proto" \
                    --cert-file "$T/srv.crt" --key-file "$T/srv.key" --user "1:$UUID" "${ws[@]}" \
                    --workers "$WORKERS" --log-level warn
                bg "$T/v2-katana.log" "$KATANA" run -c "$T/katana-$scen.json" ;;
            v2ray)
                v2_server_json "$proto" "$net" "$SP" >"$T/v2-server-$scen.json"
                bg "$T/v2-v2ray.log" v2ray -config "$T/v2-server-$scen.json" ;;
            xray)
                [ -x "$XRAY_BIN" ] || { note "$scen xray: not built"; continue; }
                v2_server_json "$proto" "$net" "$SP" >"$T/xray-server-$scen.json"
                bg "$T/v2-xray.log" "$XRAY_BIN" run -c "$T/xray-server-$scen.json" ;;
            *) note "$scen $name: unknown server"; continue ;;
            esac
            SRV=$BG
            "${KATEST[@]}" wait-port --port "$SP" --timeout 10 >/dev/null 2>&1 || {
                note "$scen $name: did not listen on $SP"; kill -KILL "$SRV" 2>/dev/null || true
                continue; }
            v2_client_json "$proto" "$net" "$SP" "$TP" >"$T/v2-client-$scen.json"
            bg "$T/v2-client.log" v2ray -config "$T/v2-client-$scen.json"
            TUN=$BG
            "${KATEST[@]}" wait-port --port "$TP" >/dev/null
            # idle first: after a bulk run the server's heap may still shrink (its RSS before
            # the idle connections would be too high)
            if [[ " $V2_IDLE " == *" $scen "* ]] && [ "$V2_CONNS" -gt 0 ]; then
                note "$scen $name: $V2_CONNS idle connections"
                VRSS[$scen/$name]=$(CONNS=$V2_CONNS idle_rss "$TP")
            fi
            note "$scen $name: bulk ${V2_SECONDS}s"
            read -r g c <<<"$(SECONDS_RUN=$V2_SECONDS throughput "$TP")"
            VGBPS[$scen/$name]=$g; VCPU[$scen/$name]=$c
            stop "$TUN" "$SRV"
        done
    done
elif [ -n "$V2_SERVERS" ]; then
    note "v2ray or openssl is not installed: no VMess/VLESS table"
fi

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a !~ /^[0-9.]+$/ || b !~ /^[0-9.]+$/ || b + 0 == 0) print "-"; else printf "%.2f\n", a / b }'; }

echo
echo "katana benchmark: loopback, client ss-tunnel, ${SECONDS_RUN}s one-way bulk per run," \
     "idle test $CONNS connections, katana workers=$WORKERS, $(nproc) CPUs"
printf '%-24s %-10s %10s %12s %14s\n' cipher server "Gbit/s" "CPU s/GB" "RSS KiB/conn"
for cipher in $CIPHERS; do
    for name in $SERVERS; do
        printf '%-24s %-10s %10s %12s %14s\n' "$cipher" "$name" "${GBPS[$cipher/$name]}" \
            "${CPU[$cipher/$name]}" "${RSS[$cipher/$name]}"
    done
    for other in katana-base ss-server v2ray; do
        [[ " $SERVERS " == *" katana "* && " $SERVERS " == *" $other "* ]] || continue
        printf '%-24s %-10s %10s %12s %14s\n' "$cipher" "k/$other" \
            "$(ratio "${GBPS[$cipher/katana]}" "${GBPS[$cipher/$other]}")" \
            "$(ratio "${CPU[$cipher/katana]}" "${CPU[$cipher/$other]}")" \
            "$(ratio "${RSS[$cipher/katana]}" "${RSS[$cipher/$other]}")"
    done
done
echo "(k/X = katana / X: above 1 is better for Gbit/s, below 1 is better for CPU and RSS)"

if [ "${#TROJAN_ROWS[@]}" -gt 0 ]; then
    echo
    echo "Trojan over TLS: loopback, client trojan-gfw forward (verifying the certificate)," \
         "${SECONDS_RUN}s one-way bulk per run, katana workers=$WORKERS, $(nproc) CPUs"
    printf '%-10s %10s %12s\n' server "Gbit/s" "CPU s/GB"
    for name in "${TROJAN_ROWS[@]}"; do
        printf '%-10s %10s %12s\n' "$name" "${TGBPS[$name]}" "${TCPU[$name]}"
    done
    for other in trojan v2ray; do
        [[ " ${TROJAN_ROWS[*]} " == *" katana "* && " ${TROJAN_ROWS[*]} " == *" $other "* ]] || continue
        printf '%-10s %10s %12s\n' "k/$other" "$(ratio "${TGBPS[katana]}" "${TGBPS[$other]}")" \
            "$(ratio "${TCPU[katana]}" "${TCPU[$other]}")"
    done
    echo "(issue 8 goal: katana's CPU s/GB at most 0.5x the best of trojan and v2ray)"
fi

if [ "${#V2_ROWS[@]}" -gt 0 ]; then
    echo
    echo "VMess and VLESS over TLS and WS+TLS: loopback, client v2ray" \
         "$(v2ray -version 2>/dev/null | awk 'NR == 1 { print $2 }') dokodemo-door (vmess" \
         "aes-128-gcm), ${V2_SECONDS}s one-way bulk per run, idle test $V2_CONNS connections," \
         "katana workers=$WORKERS, $(nproc) CPUs"
    printf '%-14s %-10s %10s %12s %14s\n' scenario server "Gbit/s" "CPU s/GB" "RSS KiB/conn"
    for scen in $V2_SCENARIOS; do
        for name in $V2_SERVERS; do
            printf '%-14s %-10s %10s %12s %14s\n' "$scen" "$name" "${VGBPS[$scen/$name]}" \
                "${VCPU[$scen/$name]}" "${VRSS[$scen/$name]}"
        done
        for other in v2ray xray; do
            [[ " $V2_SERVERS " == *" katana "* && " $V2_SERVERS " == *" $other "* ]] || continue
            printf '%-14s %-10s %10s %12s %14s\n' "$scen" "k/$other" \
                "$(ratio "${VGBPS[$scen/katana]}" "${VGBPS[$scen/$other]}")" \
                "$(ratio "${VCPU[$scen/katana]}" "${VCPU[$scen/$other]}")" \
                "$(ratio "${VRSS[$scen/katana]}" "${VRSS[$scen/$other]}")"
        done
    done
    echo "(issue 9 goal: katana's CPU s/GB at most 0.4x v2ray's; RSS per idle connection at most 8 KiB)"
fi
if [ -s "$T/cuts" ]; then   # issue 24: a cut transfer fails the benchmark
    echo "FAILED: $(wc -l <"$T/cuts") transfer(s) cut (CUT: that row has no figure)"
    exit 1
fi
