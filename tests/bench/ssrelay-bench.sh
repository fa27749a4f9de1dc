#!/bin/bash
# ssrelay-bench.sh BUILDDIR: issue 13 "Memory and throughput" for one katana Shadowsocks port
# (aes-256-gcm, 1 worker), with the client bench.sh uses (ss-tunnel from shadowsocks-libev):
#  - relay CPU: one-way bulk (tests/bench/bulk.c sender -> ss-tunnel -> katana -> sink), katana's
#    CPU seconds per GB split into user and kernel time (utime, stime of /proc/PID/stat); then
#    the floor: the same client and sink through `bulk relay` (reads of 256 KiB and writes, no
#    crypto), the CPU that relaying these bytes over loopback costs any relay;
#  - memory: katana's RSS per idle connection with BENCH_CONNS connections open, each
#    authenticated with a flow open to the sink (VmRSS before/after, divided by the count), twice:
#    over all of them on a fresh process, and over the second half alone (what stays bounded
#    whatever the count, the event ring, is then already resident).
# Each figure is printed with the issue's goal beside it; nothing is asserted.
# Environment: BENCH_SECONDS (10), BENCH_CONNS (10000; fewer when the open-file limit is lower),
# BENCH_CIPHER (aes-256-gcm), KATANA_BIN, BULK. Not part of `make check`: `make bench-ssrelay`.
set -euo pipefail

BUILDDIR=${1:-.}
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bulk-judge.sh
. "$HERE/bulk-judge.sh"   # bulk_judged: a cut transfer is no figure
KATEST=(python3 "$HERE/../integration/katest.py")
KATANA=${KATANA_BIN:-$BUILDDIR/katana}
BULK=${BULK:-$BUILDDIR/tests/bench/bulk}
SECS=${BENCH_SECONDS:-10}
CONNS=${BENCH_CONNS:-10000}
CIPHER=${BENCH_CIPHER:-aes-256-gcm}
PASS=$(cat /proc/sys/kernel/random/uuid)
TCK=$(getconf CLK_TCK)

for b in ss-tunnel ss "$KATANA" "$BULK"; do
    command -v "$b" >/dev/null || { echo "bench-ssrelay: $b is not available" >&2; exit 1; }
done

T=$(mktemp -d "${TMPDIR:-/tmp}/katana-ssrelay.XXXXXX")
PIDS=()
cleanup() {
    local p
    exec 7>&- 8>&- 2>/dev/null || true
    for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    sleep 0.5
    for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
    rm -rf "$T"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
bg() { local log=$1; shift; ( exec "$@" ) >>"$log" 2>&1 & BG=$!; PIDS+=("$BG"); }
note() { echo "# $*" >&2; }

# katana and ss-tunnel each hold two descriptors per connection
ulimit -n 1048576 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
NOFILE=$(ulimit -n)
if [ "$NOFILE" != unlimited ] && [ $((2 * CONNS + 256)) -gt "$NOFILE" ]; then
    CONNS=$(((NOFILE - 256) / 2))
    note "open-file limit $NOFILE: $CONNS idle connections"
fi

read -r SINK SP TP <<<"$("${KATEST[@]}" freeport --count 3)"
bg "$T/sink.out" "$BULK" sink "$SINK"
"${KATEST[@]}" mkconfig --out "$T/katana.json" --port "$SP" --cipher "$CIPHER" \
    --user "1:$PASS" --workers 1 --log-level warn
bg "$T/katana.log" "$KATANA" run -c "$T/katana.json"
SRV=$BG
"${KATEST[@]}" wait-port --port "$SP" --timeout 10 >/dev/null
"${KATEST[@]}" wait-port --port "$SINK" >/dev/null
bg "$T/tunnel.log" ss-tunnel -s 127.0.0.1 -p "$SP" -b 127.0.0.1 -l "$TP" \
    -L "127.0.0.1:$SINK" -k "$PASS" -m "$CIPHER" -n "$NOFILE"
"${KATEST[@]}" wait-port --port "$TP" >/dev/null

ticks() { awk '{ sub(/^.*\) /, ""); print $12, $13 }' "/proc/$1/stat"; }
rss_kib() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }

note "bulk ${SECS}s"
read -r u0 s0 <<<"$(ticks "$SRV")"
CUT=0
bytes=0 secs=0
if bulk_judged "$T/sink.out" 100 "$BULK" send "$TP" "$SECS"; then
    bytes=$BULK_BYTES secs=$BULK_SECS
else   # a failure, never a figure (issue 24)
    note "CUT: $BULK_CUT"; CUT=1
fi
sleep 0.2
read -r u1 s1 <<<"$(ticks "$SRV")"

# the floor (see the top): a second ss-tunnel in front of `bulk relay`
read -r RP FP <<<"$("${KATEST[@]}" freeport --count 2)"
bg "$T/relay.log" "$BULK" relay "$RP" "$SINK"
RELAY=$BG
bg "$T/tunnel2.log" ss-tunnel -s 127.0.0.1 -p "$RP" -b 127.0.0.1 -l "$FP" \
    -L "127.0.0.1:$SINK" -k "$PASS" -m "$CIPHER"
"${KATEST[@]}" wait-port --port "$RP" >/dev/null
"${KATEST[@]}" wait-port --port "$FP" >/dev/null
note "floor ${SECS}s"
read -r fu0 fs0 <<<"$(ticks "$RELAY")"
# the sink counts the floor's ciphertext: only the sender's own end tells a cut here
FLOOR_CUT=0
"$BULK" send "$FP" "$SECS" >/dev/null || { note "CUT: the floor's sender failed"; FLOOR_CUT=1; }
floor_bytes() { awk 'NF == 2 && ++n > 1 && $1 > b { b = $1 } END { printf "%.0f\n", b }' "$T/sink.out"; }
for _ in $(seq 1 100); do [ "$(floor_bytes)" -gt 1000000 ] && break; sleep 0.1; done
sleep 0.2
read -r fu1 fs1 <<<"$(ticks "$RELAY")"
fbytes=$(floor_bytes) # the largest after katana's: the probes of wait-port carry a header alone
[ "$FLOOR_CUT" = 0 ] || { fbytes=0; CUT=1; }

# hold_conns N FD: opens N connections held until file descriptor FD closes; waits until katana
# dialled the sink for each (authenticated, flow open); adds the count opened to HELD
sink_conns() { ss -Htn state established "( dport = :$SINK )" | wc -l; }
HELD=0
hold_conns() {
    local n=$1 fd=$2 s0 ready
    s0=$(sink_conns)
    rm -f "$T/hold$fd.in"; mkfifo "$T/hold$fd.in"
    "$BULK" hold "$TP" "$n" <"$T/hold$fd.in" >"$T/hold$fd.out" 2>"$T/hold$fd.err" &
    PIDS+=("$!")
    eval "exec $fd>\"\$T/hold$fd.in\""
    for _ in $(seq 1 1200); do grep -q ready "$T/hold$fd.out" && break; sleep 0.1; done
    ready=$(awk '/ready/ { print $2 }' "$T/hold$fd.out")
    for _ in $(seq 1 300); do
        [ "$(sink_conns)" -ge $((s0 + ${ready:-0})) ] && break; sleep 0.1
    done
    sleep 2
    HELD=$((HELD + ${ready:-0}))
}
# Two halves: RSS per connection over all of them (the issue's figure, on a fresh process), and
# over the second half alone, when what is bounded whatever the count (the event ring) is mostly
# resident already: what one more connection costs (with the salt replay filter's growth, which
# follows the salts seen up to its bound).
note "$CONNS idle connections"
r0=$(rss_kib "$SRV")
hold_conns $((CONNS / 2)) 7
h1=$HELD; r1=$(rss_kib "$SRV")
hold_conns $((CONNS - CONNS / 2)) 8
r2=$(rss_kib "$SRV")
exec 7>&- 8>&-

echo
echo "Shadowsocks relay ($CIPHER, 1 worker, client ss-tunnel, $(nproc) CPUs; issue 13 goals beside)"
awk -v b="${bytes:-0}" -v s="${secs:-0}" -v u0="$u0" -v u1="$u1" -v s0="$s0" -v s1="$s1" \
    -v t="$TCK" 'BEGIN {
    if (b == 0) { print "bulk: no result (CUT: see the note above)"; exit }
    gb = b / 1e9; u = (u1 - u0) / t / gb; k = (s1 - s0) / t / gb
    printf "bulk %.2f Gbit/s: CPU %.2f s/GB (user %.2f, kernel %.2f)   goal <= 0.60 s/GB\n",
           b * 8 / s / 1e9, u + k, u, k }'
awk -v b="${fbytes:-0}" -v u0="$fu0" -v u1="$fu1" -v s0="$fs0" -v s1="$fs1" -v t="$TCK" 'BEGIN {
    if (b == 0) { print "floor: no result (CUT when the note above says so)"; exit }
    gb = b / 1e9; u = (u1 - u0) / t / gb; k = (s1 - s0) / t / gb
    printf "floor (bulk relay: read and write only, same client and sink): CPU %.2f s/GB " \
           "(user %.2f, kernel %.2f)\n", u + k, u, k }'
awk -v r0="$r0" -v r1="$r1" -v r2="$r2" -v h1="$h1" -v n="$HELD" 'BEGIN {
    if (n == 0 || n == h1) { print "idle: no connection opened"; exit }
    printf "idle: %d connections, RSS %.2f KiB per connection (the second half alone: %.2f)" \
           "   goal <= 2 KiB\n", n, (r2 - r0) / n, (r2 - r1) / (n - h1) }'
if [ "$CUT" = 1 ]; then   # issue 24: a cut transfer fails the benchmark
    echo "FAILED: a transfer was cut (no figure for it)"
    exit 1
fi
