#!/bin/bash
# Fleet-wide device limit on Redis (issue 12): a real redis-server on loopback (its own instance
# on a free port, --save '', killed at the end) shared by two katana processes A and B, each a
# clear VLESS node with user 1 (device_limit 1) and `"redis": {"url": ..., "expiry": 6}`.
#  1. A client from 127.0.0.2 holds a connection on A; on B a new IP (127.0.0.3) is refused,
#     the held IP (127.0.0.2) is served: the user's IPs are counted across the fleet.
#  2. Redis frozen (SIGSTOP): B's new IP waits about redis.timeout, then B decides alone and
#     serves it; thawed: B uses Redis again by itself.
#  3. Redis stopped: nobody is cut (A's held connection still echoes at the end), B serves a
#     new IP at once (its own count and the panel's alivelist decide), one warning per outage.
#  4. Redis restarted (empty) on the same port: each node reconnects by itself and logs it, A
#     re-adds its live IP (127.0.0.2 is in katana:devices:1 again) and a new IP on B is refused
#     again.
. "$(dirname "$0")/lib.sh"
[ "$KT_SERVER" = katana ] || skip_all "device limit needs katana"
kt_need redis-server redis-cli

U1=$(kt_uuid)
echo_start
kt_ports 3
RPORT=${PORTS[0]}; PA=${PORTS[1]}; PB=${PORTS[2]}

redis_start() {
    kt_bg redis redis-server --port "$RPORT" --bind 127.0.0.1 --save '' --appendonly no \
        --daemonize no
    REDIS_PID=$BG_PID
    kt_wait_port "$RPORT" 10 || { fail "redis-server did not listen"; exit 1; }
}
# burst LABEL NODE_PORT SOURCES [vlessburst args]: per source "ip admitted total" in $T/LABEL.out
burst() {
    local label=$1 port=$2 sources=$3; shift 3
    "${KT_PY[@]}" vlessburst --port "$port" --uuid "$U1" --dest-port "$ECHO_PORT" \
        --sources "$sources" --conns 1 --timeout 5 "$@" >"$T/$label.out"
    cat "$T/$label.out"
}
admitted() { awk -v s="$2" '$1 == s { print $2 }' "$T/$1.out"; }
# wait_lines FILE PATTERN N: FILE has at least N lines matching PATTERN within 10 s
wait_lines() {
    local i
    for ((i = 0; i < 100; i++)); do
        [ "$(grep -c "$2" "$1")" -ge "$3" ] && return 0
        sleep 0.1
    done
    return 1
}

redis_start
URL="redis://127.0.0.1:$RPORT/0"
mkconfig "$T/a.json" "$PA" aes-256-gcm --protocol vless --workers 2 --user "1:$U1:1" \
    --redis "$URL" --redis-expiry 6 --log-level debug
mkconfig "$T/b.json" "$PB" aes-256-gcm --protocol vless --workers 2 --user "1:$U1:1" \
    --redis "$URL" --redis-expiry 6 --log-level debug
BIN=$(katana_bin)
kt_bg katana-a "$BIN" run -c "$T/a.json"; PID_A=$BG_PID
kt_bg katana-b "$BIN" run -c "$T/b.json"; PID_B=$BG_PID
kt_wait_port "$PA" 10 && kt_wait_port "$PB" 10 || { fail "katana did not listen"; exit 1; }

# 1. at the limit on A, refused on B
"${KT_PY[@]}" vlessburst --port "$PA" --uuid "$U1" --dest-port "$ECHO_PORT" \
    --sources 127.0.0.2 --conns 1 --timeout 5 --hold 60 --ready-file "$T/held.ready" \
    --release-file "$T/held.release" \
    >"$T/held.out" &
HOLD_PID=$!
kt_wait_file "$T/held.ready" 10 || { fail "held connection did not start"; exit 1; }
check "A admits the first IP" test "$(awk '$1 == "127.0.0.2" { print $2 }' "$T/held.out")" = 1
burst b-new "$PB" 127.0.0.3
check "B refuses a new IP of the user at its limit on A" test "$(admitted b-new 127.0.0.3)" = 0
burst b-same "$PB" 127.0.0.2
check "B serves the IP the user already has live on A" test "$(admitted b-same 127.0.0.2)" = 1
burst a-new "$PA" 127.0.0.4
check "A refuses a new IP too" test "$(admitted a-new 127.0.0.4)" = 0

# 2. Redis frozen (SIGSTOP): a new IP's connection waits at most about redis.timeout (0.5 s),
#    then B decides alone and serves it; Redis thawed: B finds it again by itself
kill -STOP "$REDIS_PID"
t0=$(date +%s%N)
burst b-frozen "$PB" 127.0.0.3
t1=$(date +%s%N)
check "Redis frozen: B serves a new IP (its own count)" test "$(admitted b-frozen 127.0.0.3)" = 1
check "Redis frozen: the wait is bounded (< 3 s, timeout 0.5 s)" \
    test $(((t1 - t0) / 1000000)) -lt 3000
kill -CONT "$REDIS_PID"
# a new address each try: one admitted before B is back must not make the next ones pass
ok=1
for i in $(seq 1 50); do
    burst b-thawed "$PB" "127.0.1.$i"
    if [ "$(admitted b-thawed "127.0.1.$i")" = 0 ]; then ok=0; break; fi
    sleep 0.2
done
check "Redis thawed: B refuses a new IP again (Redis decides, not B alone)" test "$ok" = 0
# every worker of B back (one line once the last one is), so that the next outage is a new one
check "Redis thawed: B logs that it is back" wait_lines "$T/katana-b.log" 'reachable: fleet-wide' 1

# 3. Redis stopped: nobody cut, B keeps serving (decides alone)
kill -TERM "$REDIS_PID"; kt_wait_exit "$REDIS_PID" 5 || true
ok=1
for _ in $(seq 1 20); do
    burst b-down "$PB" 127.0.0.3
    if [ "$(admitted b-down 127.0.0.3)" = 1 ]; then ok=0; break; fi
    sleep 0.3
done
check "Redis down: B serves a new IP (its own count)" test "$ok" = 0
burst b-down2 "$PB" 127.0.0.5
check "Redis down: B still serves" test "$(admitted b-down2 127.0.0.5)" = 1
check "Redis down: A still runs" kt_alive "$PID_A"
check "Redis down: B still runs" kt_alive "$PID_B"
sleep 3 # several reconnect attempts
grep -H 'sv.fleet' "$T/katana-a.log" "$T/katana-b.log" | grep -v DEBUG
WA=$(grep -c 'unreachable' "$T/katana-a.log")
check "one warning per outage on A (1 or 2: A may not have asked while frozen)" \
    test "$WA" -ge 1 -a "$WA" -le 2
check "one warning per outage on B (frozen, stopped)" \
    test "$(grep -c 'unreachable' "$T/katana-b.log")" = 2

# 4. Redis back (empty): both recover by themselves; A re-adds its live IP
redis_start
check "Redis back: B logs it (again)" wait_lines "$T/katana-b.log" 'reachable: fleet-wide' 2
ok=1
for _ in $(seq 1 100); do
    [ -n "$(redis-cli -p "$RPORT" zscore katana:devices:1 127.0.0.2)" ] && { ok=0; break; }
    sleep 0.1
done
check "Redis back: A re-added its live IP (katana:devices:1 holds 127.0.0.2)" test "$ok" = 0
burst b-back "$PB" 127.0.2.1
check "Redis back: B refuses a new IP again" test "$(admitted b-back 127.0.2.1)" = 0
check "Redis back: A logs it (once per outage)" \
    wait_lines "$T/katana-a.log" 'reachable: fleet-wide' "$WA"
touch "$T/held.release"
wait "$HOLD_PID" 2>/dev/null
cat "$T/held.out"
check "the held connection on A was never cut" grep -q '^held 1 still served, 0 cut' "$T/held.out"
kill -TERM "$PID_A" "$PID_B" 2>/dev/null
kt_wait_exit "$PID_A" 7 || true; RC_A=$WAIT_RC
kt_wait_exit "$PID_B" 7 || true; RC_B=$WAIT_RC
check "A exits 0 on SIGTERM" test "$RC_A" = 0
check "B exits 0 on SIGTERM" test "$RC_B" = 0
check "no log line per refused connection" \
    test "$(cat "$T/katana-a.log" "$T/katana-b.log" | grep -i 'device' | grep -vc 'redis')" = 0
[ "$KT_FAILS" = 0 ] || grep -H 'sv.fleet' "$T/katana-a.log" "$T/katana-b.log"
kt_finish
