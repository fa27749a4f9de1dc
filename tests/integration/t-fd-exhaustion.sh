#!/bin/bash
# File descriptors run out (issue 15): katana under `ulimit -n 256` with default workers, 1 000
# pre-auth connections that send 10 bytes each and stay. In every one of KT_RUNS runs (10):
#   - while they are held, katana uses < 5% CPU (/proc/PID/stat over 2 s) and keeps running;
#   - once they leave, a real ss-local client moves data within 5 s;
#   - the episode takes at most 2 log lines;
#   - (even runs, issue 33) the REST API answers /healthz while the descriptors are exhausted
#     (it keeps a few in reserve) and adds no log line of its own;
#   - held again, SIGTERM ends katana (exit 0) within shutdown_grace plus the close of the rest.
# Odd runs use the default connection cap (sized from the fd limit: accepting pauses at the
# cap); even runs set max_connections far above what 256 descriptors allow, so accept() itself
# fails with EMFILE and the listener has to pause and retry on its own. Two runs (an odd and an
# even one) go side by side, each with a katana, a client and a log of its own.
KT_LIMIT=${KT_LIMIT:-180}
. "$(dirname "$0")/lib.sh"
kt_need ss-local curl
needs_katana "fd exhaustion" || exit 77

RUNS=${KT_RUNS:-10}
CONNS=1000
GRACE=1
CIPHER=aes-128-gcm
U1=$(kt_uuid)
REAL_BIN=$(katana_bin)
[ -x "$REAL_BIN" ] || { fail "katana binary not found at $REAL_BIN"; exit 1; }
# katana with 256 descriptors (soft and hard); exec keeps the pid the harness tracks. Every
# worker holds a few descriptors of its own (loop, wakeup, listening sockets): on a machine with
# more than 8 CPUs the limit grows with them, still far below what 1 000 connections need.
NCPU=$(nproc); ((NCPU > 64)) && NCPU=64
NOFILE=256; ((NCPU > 8)) && NOFILE=$((128 + 16 * NCPU))
printf '#!/bin/bash\nulimit -n %d || exit 1\nexec "%s" "$@"\n' "$NOFILE" "$REAL_BIN" >"$T/katana-256"
chmod +x "$T/katana-256"
export KATANA_BIN="$T/katana-256"
echo_start

now_ms() { date +%s%3N; }

# hold NAME PORT: CONNS held connections in the background until $T/NAME.release exists.
hold() {
    kt_bg "$1" "${KT_PY[@]}" hold --port "$2" --conns "$CONNS" --bytes 10 --seed "$1" \
        --ready-file "$T/$1.ready" --release-file "$T/$1.release" --max-secs 60
    HOLD_PID=$BG_PID
    kt_wait_file "$T/$1.ready" 30 || { fail "$1: connections not opened"; return 1; }
    kt_log "$1: $(cat "$T/$1.ready")"
}

release() {
    touch "$T/$1.release"
    kt_wait_exit "$2" 10 || kill -KILL "$2" 2>/dev/null || true
}

# one_run RUN: run number RUN with a katana, a client and a log of its own, so that two runs go
# side by side; prints its PASS and FAIL lines.
one_run() {
    local run=$1 port api extra=() mode="default cap" mark cpu t0 rec lines took code
    SRV_LOG=$T/server-r$run.log
    kt_ports 2; port=${PORTS[0]} api=${PORTS[1]}
    if ((run % 2 == 0)); then
        extra=(--max-connections 100000 --api-port "$api")
        mode="cap above the fd limit"
    fi
    mkconfig "$T/c$run.json" "$port" "$CIPHER" --user "1:$U1" --workers 0 --grace "$GRACE" \
        "${extra[@]}"
    srv_start "$T/c$run.json"
    if ((run == 1)); then
        # (limit - 128 reserved) / 2 descriptors per relay, one budget for the workers (one
        # per CPU), half of it shared out for connections before authentication (issue 33)
        TOTAL=$(((NOFILE - 128) / 2))
        PRE=$((TOTAL / 2 / NCPU)); ((PRE < 1)) && PRE=1
        check "default budget from the fd limit: $TOTAL, $PRE per worker before authentication" grep -q \
            "up to $TOTAL TCP connections, shared by $NCPU workers (max_connections, from the file descriptor limit $NOFILE); up to $PRE per worker before authentication" \
            "$SRV_LOG"
    fi
    cl_start "r$run" "$CIPHER" "$U1" "$port"
    mark=$(stat -c %s "$SRV_LOG")

    hold "h$run" "$port" || return 0
    sleep 0.5
    if cpu=$("${KT_PY[@]}" cpu --pid "$SRV_PID" --secs 2 --max 5); then
        pass "run $run ($mode): exhausted, $cpu"
    else
        fail "run $run ($mode): exhausted, $cpu"
    fi
    check "run $run: katana still runs while exhausted" srv_alive
    if ((run % 2 == 0)); then
        code=$(curl -sS -m 5 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$api/healthz" 2>&1 || true)
        check "run $run: /healthz answers while the descriptors are exhausted ($code)" test "$code" = 200
    fi

    t0=$(now_ms)
    release "h$run" "$HOLD_PID"
    if tcp_rt "$CL_PORT" ok --bytes 65536 --timeout 5 >"$T/rt$run.out" 2>&1; then
        rec=$(($(now_ms) - t0))
        check "run $run: data moves ${rec} ms after the clients left (< 5000)" test "$rec" -lt 5000
    else
        fail "run $run: no data moved within 5 s of the clients leaving"
        cat "$T/rt$run.out"
    fi
    sleep 0.6 # the episode's closing line comes 200-400 ms after the last pause
    lines=$(tail -c +"$((mark + 1))" "$SRV_LOG" | grep -c . || true)
    check "run $run: $lines log lines for the episode (<= 2)" test "$lines" -le 2
    tail -c +"$((mark + 1))" "$SRV_LOG" | head -n 5

    hold "s$run" "$port" || return 0
    sleep 0.3
    t0=$(now_ms)
    kill -TERM "$SRV_PID"
    kt_wait_exit "$SRV_PID" $((GRACE + 8)) || true
    took=$(($(now_ms) - t0))
    if [ "$WAIT_RC" = 124 ]; then
        fail "run $run: SIGTERM while exhausted: still running after $((GRACE + 8)) s"
        kill -KILL "$SRV_PID" 2>/dev/null || true
    else
        check "run $run: SIGTERM while exhausted: exit $WAIT_RC after $took ms (grace ${GRACE} s + 2 s close)" \
            test "$WAIT_RC" = 0 -a "$took" -lt $((GRACE * 1000 + 2000))
    fi
    release "s$run" "$HOLD_PID"
    kill -TERM "$CL_PID" 2>/dev/null || true
    return 0
}

# Two runs at a time (an even and an odd one), each in a subshell of its own: its PASS and FAIL
# lines are counted here once it ended.
for ((run = 1; run <= RUNS; run += 2)); do
    pair=()
    for r in "$run" $((run + 1)); do
        ((r <= RUNS)) || continue
        one_run "$r" >"$T/run$r.out" 2>&1 &
        echo "$!" >>"$T/pids"
        pair+=("$r:$!")
    done
    for p in "${pair[@]}"; do
        r=${p%%:*} rc=0
        wait "${p#*:}" || rc=$?
        cat "$T/run$r.out"
        KT_PASSES=$((KT_PASSES + $(grep -c '^PASS: ' "$T/run$r.out" || true)))
        KT_FAILS=$((KT_FAILS + $(grep -c '^FAIL: ' "$T/run$r.out" || true)))
        [ "$rc" = 0 ] || fail "run $r: ended with status $rc"
    done
done
kt_finish
