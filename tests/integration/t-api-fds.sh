#!/bin/bash
# The REST API and file descriptors (issue 15), real daemon, real ss-local:
# - 2 000 open relays (ulimit -n 8192): katana holds over 4 000 descriptors, so every new API
#   connection gets one above 1024; /healthz answers in < 1 s, /metrics answers.
# - a katana limited to 64 descriptors, exhausted by connections to its data-plane port (and
#   idle API connections, should the data plane keep a reserve): a
#   /healthz request made meanwhile is answered within 5 s of the connections leaving; the
#   API's threads stay below 5% CPU while exhausted and log at most 4 lines (the pause and the
#   recovery), never one per accept() attempt (at most 10 lines in all, data plane included);
#   SIGTERM still exits 0.
. "$(dirname "$0")/lib.sh"
kt_need ss-local curl jq
[ "$KT_SERVER" = katana ] || skip_all "the REST API needs katana"
ulimit -n 8192 2>/dev/null || skip_all "needs ulimit -n 8192 (hard limit $(ulimit -H -n))"
LOAD=(python3 "$KT_DIR/apiload.py")
RELAYS=2000
FD_LIMIT=64

CIPHER=aes-256-gcm
U1=$(kt_uuid)
echo_start
kt_ports 2; API_PORT=${PORTS[1]}
mkconfig "$T/config.json" "${PORTS[0]}" "$CIPHER" --user "1:$U1" --api-port "$API_PORT"
A=http://127.0.0.1:$API_PORT

# fds PID: the number of descriptors the process holds.
fds() { find "/proc/$1/fd" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l; }
# api_cpu_ticks PID: CPU ticks (user + system) used so far by the API's threads, which are
# libmicrohttpd's ("MHD-...") and the accept thread ("api-accept").
api_cpu_ticks() {
    local t sum=0 comm
    for t in /proc/"$1"/task/*; do
        comm=$(cat "$t/comm" 2>/dev/null) || continue
        case $comm in
            MHD* | api-*) sum=$((sum + $(awk '{ print $14 + $15 }' "$t/stat"))) ;;
        esac
    done
    echo "$sum"
}

# --- 2 000 open relays -----------------------------------------------------------------
srv_start "$T/config.json"
kt_wait_port "$API_PORT" 10 || { fail "API did not listen on $API_PORT"; exit 1; }
cl_start u1 "$CIPHER" "$U1" "$(srv_user_port 1)"
kt_bg relays "${LOAD[@]}" relays --socks "$CL_PORT" --dest-port "$ECHO_PORT" --count "$RELAYS" \
    --ready-file "$T/relays.ready"
RELAYS_PID=$BG_PID
kt_wait_file "$T/relays.ready" 90 || { fail "relays: no summary"; cat "$T/relays.log"; exit 1; }
cat "$T/relays.ready"
check "$RELAYS relays open, each with a verified round trip" \
    jq -e ".open == $RELAYS and .failed == 0" "$T/relays.ready"
N=$(fds "$SRV_PID"); echo "katana holds $N descriptors"
check "katana holds more than $((2 * RELAYS)) descriptors" test "$N" -gt $((2 * RELAYS))
OUT=$(curl -sS -m 5 -o "$T/healthz.json" -w '%{http_code} %{time_total}' "$A/healthz" 2>&1 || true)
echo "healthz: $OUT"
check "/healthz answers 200" test "${OUT%% *}" = 200
check "... in < 1 s" awk -v t="${OUT#* }" 'BEGIN { exit !(t + 0 < 1) }'
check "/metrics answers 200, counting the $RELAYS flows" \
    bash -c "curl -sS -m 5 '$A/metrics' | grep -q -E '^katana_flows(\{[^}]*\})? ($RELAYS|$((RELAYS + 1)))\$'"
kill -TERM "$RELAYS_PID" 2>/dev/null || true
srv_stop
check "SIGTERM with $RELAYS relays: daemon exits 0" test "$SRV_RC" = 0

# --- out of descriptors ----------------------------------------------------------------
printf '#!/bin/sh\nulimit -n %d\nexec "%s" "$@"\n' "$FD_LIMIT" "$(katana_bin)" >"$T/katana-fd-limited"
chmod +x "$T/katana-fd-limited"
KATANA_BIN=$T/katana-fd-limited srv_start "$T/config.json"
kt_wait_port "$API_PORT" 10 || { fail "API did not listen on $API_PORT"; exit 1; }
NODE_PORT=$(srv_user_port 1)
MARK=$(stat -c %s "$SRV_LOG")
kt_bg exhaust "${LOAD[@]}" hold --port "$NODE_PORT" --count 200 --send 0123456789 \
    --ready-file "$T/exhaust.ready"
EXHAUST_PID=$BG_PID
kt_wait_file "$T/exhaust.ready" 30 || { fail "exhaust: no summary"; exit 1; }
# Should the data plane keep descriptors in reserve, idle API connections take the rest (they
# wait in the listen backlog when the data plane took everything).
kt_bg topup "${LOAD[@]}" hold --port "$API_PORT" --count 100 --sources 127.0.0.3,127.0.0.4 \
    --ready-file "$T/topup.ready"
TOPUP_PID=$BG_PID
kt_wait_file "$T/topup.ready" 30 || { fail "topup: no summary"; exit 1; }
for _ in $(seq 1 50); do [ "$(fds "$SRV_PID")" -ge "$FD_LIMIT" ] && break; sleep 0.1; done
N=$(fds "$SRV_PID"); echo "katana holds $N descriptors (limit $FD_LIMIT)"
check "katana is out of descriptors" test "$N" -ge "$FD_LIMIT"
kt_bg healthz-exhausted curl -sS -m 30 -o "$T/healthz2.json" -w '%{http_code}\n' "$A/healthz"
HEALTHZ_PID=$BG_PID
CPU0=$(api_cpu_ticks "$SRV_PID"); sleep 3; CPU1=$(api_cpu_ticks "$SRV_PID")
TCK=$(getconf CLK_TCK)
echo "API threads used $((CPU1 - CPU0)) ticks of $((3 * TCK)) in 3 s while exhausted"
check "API threads below 5% CPU while exhausted" test $(((CPU1 - CPU0) * 100)) -lt $((5 * 3 * TCK))
kill -TERM "$EXHAUST_PID" "$TOPUP_PID" 2>/dev/null || true
T0=$(date +%s%N)
if kt_wait_exit "$HEALTHZ_PID" 10; then :; fi
T1=$(date +%s%N)
echo "the waiting /healthz: rc $WAIT_RC, status $(cat "$T/healthz-exhausted.log"), $(((T1 - T0) / 1000000)) ms after the release"
check "the /healthz made while exhausted is answered 200" \
    test "$WAIT_RC" = 0 -a "$(cat "$T/healthz-exhausted.log")" = 200
check "... within 5 s of the connections leaving" test $(((T1 - T0) / 1000000)) -le 5000
check "a new /healthz answers 200" test "$(curl -sS -m 5 -o /dev/null -w '%{http_code}' "$A/healthz")" = 200
EPISODE=$(tail -c +"$((MARK + 1))" "$SRV_LOG")
LINES=$(grep -c -E '^[A-Z]+ api ' <<<"$EPISODE" || true)
echo "API log lines in the episode: $LINES"; grep -E '^[A-Z]+ api ' <<<"$EPISODE" | head -n 10 || true
check "the episode logged at most 4 API lines" test "$LINES" -le 4
ALL=$(grep -c '' <<<"$EPISODE" || true)
echo "all log lines in the episode: $ALL"
check "the episode logged at most 10 lines in all" test "$ALL" -le 10
check "the log stays small (< 64 KiB)" test "$(stat -c %s "$SRV_LOG")" -lt 65536
srv_stop
check "SIGTERM after the episode: daemon exits 0" test "$SRV_RC" = 0
kt_finish
