#!/bin/bash
# bench.sh BUILDDIR: katana vs ss-server vs v2ray (its Shadowsocks inbound), side by side on
# loopback with the same client (ss-tunnel, a port forward) for every server.
#
# Per cipher and server: one-way bulk throughput (tests/bench/bulk.c sender -> ss-tunnel ->
# server -> sink) and the server's CPU seconds per GB (utime+stime from /proc/PID/stat).
# Per server (BENCH_IDLE_CIPHERS): resident memory per idle connection with BENCH_CONNS
# connections open (VmRSS before/after, divided by the count).
#
# Environment: BENCH_SECONDS (10), BENCH_CONNS (10000), BENCH_CIPHERS (all three),
# BENCH_IDLE_CIPHERS (aes-256-gcm), BENCH_SERVERS ("katana ss-server v2ray"),
# BENCH_WORKERS (katana workers, 1: ss-server is single-threaded too), KATANA_BIN.
# Not part of `make check`; run with `make bench`.
set -euo pipefail

BUILDDIR=${1:-.}
HERE=$(cd "$(dirname "$0")" && pwd)
KATEST=(python3 "$HERE/../integration/katest.py")
KATANA=${KATANA_BIN:-$BUILDDIR/katana}
SECONDS_RUN=${BENCH_SECONDS:-10}
CONNS=${BENCH_CONNS:-10000}
CIPHERS=${BENCH_CIPHERS:-aes-128-gcm aes-256-gcm chacha20-ietf-poly1305}
IDLE_CIPHERS=${BENCH_IDLE_CIPHERS:-aes-256-gcm}
SERVERS=${BENCH_SERVERS:-katana ss-server v2ray}
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

for b in ss-tunnel "${CC:-cc}"; do
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
    katana)
        [ -x "$KATANA" ] || { note "katana: no binary at $KATANA"; return 1; }
        "${KATEST[@]}" mkconfig --out "$T/katana.json" --port "$port" --cipher "$cipher" \
            --user "1:$PASS" --workers "$WORKERS" --log-level warn
        bg "$T/katana.log" "$KATANA" run -c "$T/katana.json" ;;
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

# throughput TUNNEL_PORT: prints "GBITS CPU_S_PER_GB" for the server $SRV
throughput() {
    local lines c0 c1 line bytes secs
    lines=$(wc -l <"$T/sink.out")
    c0=$(cpu_secs "$SRV")
    "$BULK" send "$1" "$SECONDS_RUN" >/dev/null
    for _ in $(seq 1 100); do
        [ "$(wc -l <"$T/sink.out")" -gt "$lines" ] && break; sleep 0.1
    done
    c1=$(cpu_secs "$SRV")
    line=$(tail -n +"$((lines + 1))" "$T/sink.out" | awk 'NF == 2' | head -n 1)
    [ -n "$line" ] || { echo "- -"; return; }
    read -r bytes secs <<<"$line"
    awk -v b="$bytes" -v s="$secs" -v c0="$c0" -v c1="$c1" \
        'BEGIN { printf "%.2f %.2f\n", b * 8 / s / 1e9, (c1 - c0) / (b / 1e9) }'
}

# idle_rss TUNNEL_PORT: prints KiB of server RSS per idle connection
idle_rss() {
    local r0 r1 ready
    r0=$(rss_kib "$SRV")
    rm -f "$T/hold.in"; mkfifo "$T/hold.in"
    "$BULK" hold "$1" "$CONNS" <"$T/hold.in" >"$T/hold.out" 2>"$T/hold.err" &
    local hp=$!; PIDS+=("$hp")
    exec 7>"$T/hold.in"
    for _ in $(seq 1 1200); do grep -q ready "$T/hold.out" && break; sleep 0.1; done
    ready=$(awk '/ready/ { print $2 }' "$T/hold.out")
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

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-" || b + 0 == 0) print "-"; else printf "%.2f\n", a / b }'; }

echo
echo "katana benchmark: loopback, client ss-tunnel, ${SECONDS_RUN}s one-way bulk per run," \
     "idle test $CONNS connections, katana workers=$WORKERS, $(nproc) CPUs"
printf '%-24s %-10s %10s %12s %14s\n' cipher server "Gbit/s" "CPU s/GB" "RSS KiB/conn"
for cipher in $CIPHERS; do
    for name in $SERVERS; do
        printf '%-24s %-10s %10s %12s %14s\n' "$cipher" "$name" "${GBPS[$cipher/$name]}" \
            "${CPU[$cipher/$name]}" "${RSS[$cipher/$name]}"
    done
    for other in ss-server v2ray; do
        [[ " $SERVERS " == *" katana "* && " $SERVERS " == *" $other "* ]] || continue
        printf '%-24s %-10s %10s %12s %14s\n' "$cipher" "k/$other" \
            "$(ratio "${GBPS[$cipher/katana]}" "${GBPS[$cipher/$other]}")" \
            "$(ratio "${CPU[$cipher/katana]}" "${CPU[$cipher/$other]}")" \
            "$(ratio "${RSS[$cipher/katana]}" "${RSS[$cipher/$other]}")"
    done
done
echo "(k/X = katana / X: above 1 is better for Gbit/s, below 1 is better for CPU and RSS)"
