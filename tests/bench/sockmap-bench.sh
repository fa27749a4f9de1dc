#!/bin/bash
# sockmap-bench.sh: does a relay that moves bytes with a BPF sockmap redirect cost less CPU per
# GB than one that splices (issue 11, the Vision floor)? One-way bulk on loopback, the same
# sender and sink (tests/bench/bulk.c) for three paths:
#   direct   bulk send -> bulk sink, no relay
#   splice   bulk send -> bulk splice (SOCKS5, splice(2) through 1 MiB pipes) -> bulk sink
#   sockmap  bulk send -> bulk sockmap (SOCKS5, then bpf_sk_redirect_map) -> bulk sink
# For each run: the bytes the sender wrote and the sink counted (they must agree), Gbit/s at
# the sink, and CPU seconds per GB (1e9 bytes) charged to the relay, the sender (/usr/bin/time),
# the sink (/proc/PID/stat) and the kernel's worker and softirq threads (kworker*, ksoftirqd*:
# a sockmap's redirected data is sent by a kworker); "ours" adds these up. "machine" is the
# busy CPU-seconds of all CPUs per GB (/proc/stat user+nice+system+irq+softirq over the run):
# what answers the question on a quiet host, since a relay's own figure can move work rather
# than remove it; on a shared host it carries whatever else ran, and "bg" (the busy
# CPU-seconds of an idle second before each round) says how much. Softirq work done in a
# process's context is charged to that process, so on a quiet host ours and machine agree.
# Usage: sockmap-bench.sh [BUILDDIR]. Knobs: BENCH_SOCKMAP_SECONDS (4) of sending per run,
# BENCH_SOCKMAP_ROUNDS (3), the order of the paths rotating from round to round;
# BENCH_SOCKMAP_MBIT (0: as fast as it goes) paces the sender (SO_MAX_PACING_RATE) so that every
# path moves the same rate. A sockmap relay has no backpressure: when its sending kworker falls
# behind, what the sender writes piles up in the kernel, charged to no socket buffer, and the
# unpaced figures become those of a growing queue of cold memory (a proxy's rate is set by its
# network anyway).
# BENCH_SOCKMAP_PIN="SEND_CPU SINK_CPU" pins the sender and the sink (taskset; the relays stay
# free): the sockmap's sending kworker runs on the CPU that received the data, the sender's, so
# placement decides whether it keeps up ("0 1": it does; "0 0": it does not, and the queue grows).
# The sockmap relay needs root (CAP_BPF and CAP_NET_ADMIN): without it, its rows say why and
# are skipped.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
BUILDDIR=${1:-$HERE/../../build}
SECS=${BENCH_SOCKMAP_SECONDS:-4}
ROUNDS=${BENCH_SOCKMAP_ROUNDS:-3}
MBIT=${BENCH_SOCKMAP_MBIT:-0}
SEND_PIN=() SINK_PIN=()
if [ -n "${BENCH_SOCKMAP_PIN:-}" ]; then
    read -r c1 c2 <<<"$BENCH_SOCKMAP_PIN"
    SEND_PIN=(taskset -c "$c1") SINK_PIN=(taskset -c "$c2")
fi
note() { echo "# $*" >&2; }

T=$(mktemp -d "${TMPDIR:-/tmp}/katana-sockmap-bench.XXXXXX")
PIDS=()
cleanup() {
    local p
    for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    rm -rf "$T"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
bg() { local log=$1; shift; ( exec "$@" ) >>"$log" 2>&1 & BG=$!; PIDS+=("$BG"); }

BULK=${BULK:-$BUILDDIR/tests/bench/bulk}
if [ ! -x "$BULK" ]; then
    BULK=$T/bulk
    "${CC:-cc}" -O2 -pthread -o "$BULK" "$HERE/bulk.c" || exit 1
fi
TCK=$(getconf CLK_TCK)
freeport() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
cpu_secs() { awk -v t="$TCK" '{ sub(/^.*\) /, ""); printf "%.3f\n", ($12 + $13) / t }' "/proc/$1/stat"; }
# busy CPU seconds of the machine so far (all CPUs): user nice system irq softirq
machine_secs() { awk -v t="$TCK" '/^cpu / { printf "%.2f\n", ($2 + $3 + $4 + $7 + $8) / t }' /proc/stat; }
# "PID TICKS" for every kernel worker and softirq thread (the sockmap's sends run in kworkers)
kthreads() {
    local f line
    for f in /proc/[0-9]*/stat; do
        { read -r line <"$f"; } 2>/dev/null || continue
        case $line in *"(kworker"* | *"(ksoftirqd"*) echo "$line" ;; esac
    done | awk '{ pid = $1; sub(/^.*\) /, ""); print pid, $12 + $13 }'
}
# kernel-thread CPU seconds between two kthreads listings (threads present in both)
kthread_secs() {
    awk -v t="$TCK" 'NR == FNR { a[$1] = $2; next } ($1 in a) { s += $2 - a[$1] }
        END { printf "%.3f\n", s / t }' "$1" "$2"
}
wait_port() {
    local i
    for i in $(seq 1 50); do
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        sleep 0.1
    done
    return 1
}

SINK_PORT=$(freeport)
bg "$T/sink.out" "${SINK_PIN[@]}" "$BULK" sink "$SINK_PORT"
SINK=$BG
wait_port "$SINK_PORT" || { note "the sink did not listen"; exit 1; }
declare -A PORT RELAY
PATHS="direct"
for mode in splice sockmap; do
    PORT[$mode]=$(freeport)
    bg "$T/$mode.log" "$BULK" "$mode" "${PORT[$mode]}"
    RELAY[$mode]=$BG
    if wait_port "${PORT[$mode]}"; then
        PATHS+=" $mode"
    else
        note "$mode relay skipped: $(tail -n 3 "$T/$mode.log" | tr '\n' ' ')"
    fi
done
# the wait_port probes above count as connections at the sink's relays: let them close
sleep 0.5
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)

# run MODE: one transfer; prints "SENT SUNK GBITS RELAY SENDER SINK KTHR MACHINE" (CPU in s/GB)
run() {
    local mode=$1 lines r0=0 r1=0 s0 s1 m0 m1 line bytes secs sent dest=0 port=$SINK_PORT
    [ "$mode" = direct ] || { dest=$SINK_PORT; port=${PORT[$mode]}; }
    lines=$(wc -l <"$T/sink.out")
    [ "$mode" = direct ] || r0=$(cpu_secs "${RELAY[$mode]}")
    s0=$(cpu_secs "$SINK"); kthreads >"$T/k0"; m0=$(machine_secs)
    sent=$(/usr/bin/time -f "%U %S" -o "$T/time" "${SEND_PIN[@]}" "$BULK" send "$port" "$SECS" 0 \
        "$dest" "$MBIT") || sent=0   # a failed write: a cut, never equal to what the sink got
    for _ in $(seq 1 600); do
        [ "$(wc -l <"$T/sink.out")" -gt "$lines" ] && break; sleep 0.05
    done
    m1=$(machine_secs); kthreads >"$T/k1"; s1=$(cpu_secs "$SINK")
    [ "$mode" = direct ] || r1=$(cpu_secs "${RELAY[$mode]}")
    line=$(tail -n +"$((lines + 1))" "$T/sink.out" | awk 'NF == 2' | head -n 1)
    [ -n "$line" ] || { echo "${sent:--} - - - - - - -"; return; }
    read -r bytes secs <<<"$line"
    echo "${sent:-0} $bytes $secs $r0 $r1 $(cat "$T/time") $s0 $s1 $(kthread_secs "$T/k0" \
        "$T/k1") $m0 $m1" | awk '{ g = $2 / 1e9; printf "%.0f %.0f %.2f %.3f %.3f %.3f %.3f %.3f\n",
        $1, $2, $2 * 8 / $3 / 1e9, ($5 - $4) / g, ($6 + $7) / g, ($9 - $8) / g, $10 / g,
        ($12 - $11) / g }'
}

printf '%-5s %-7s %6s %12s %7s %7s %7s %7s %7s %7s %7s %5s\n' round path check bytes Gbit/s \
    relay sender sink kthr ours machine bg
BAD=0
for round in $(seq 1 "$ROUNDS"); do
    m0=$(machine_secs); sleep 1
    bgr=$(awk -v a="$m0" -v b="$(machine_secs)" 'BEGIN { printf "%.2f", b - a }')
    read -ra order <<<"$PATHS"
    n=${#order[@]}
    for i in $(seq 0 $((n - 1))); do
        mode=${order[$(((i + round - 1) % n))]}
        read -r sent sunk gb relay snd snk kthr mach <<<"$(run "$mode")"
        ok=ok
        [ "$sent" = "$sunk" ] || { ok=LOST; BAD=1; }
        # a cut or lossy transfer is a failure, never a figure (issue 24)
        [ "$ok" = ok ] || gb=- relay=- snd=- snk=- kthr=- mach=-
        ours=$(awk -v a="$relay" -v b="$snd" -v c="$snk" -v d="$kthr" \
            'BEGIN { if (d == "-") print "-"; else printf "%.3f", a + b + c + d }')
        printf '%-5s %-7s %6s %12s %7s %7s %7s %7s %7s %7s %7s %5s\n' "$round" "$mode" "$ok" \
            "$sunk" "$gb" "$relay" "$snd" "$snk" "$kthr" "$ours" "$mach" "$bgr"
        sleep 0.5
    done
done
echo "CPU in s/GB (1e9 bytes); kthr = kworker and ksoftirqd threads; ours = relay + sender + sink +" \
     "kthr; machine = busy CPU-seconds of all $(nproc) CPUs per GB; bg = busy CPU-seconds in the" \
     "idle second before the round; load $LOAD0 -> $(cut -d' ' -f1-3 /proc/loadavg); kernel" \
     "$(uname -r); ${SECS}s of sending per run, paced at $MBIT Mbit/s (0: unpaced); sender and" \
     "sink pinned to CPUs: ${BENCH_SOCKMAP_PIN:-none}"
exit "$BAD"
