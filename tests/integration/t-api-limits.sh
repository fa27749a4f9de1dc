#!/bin/bash
# REST API connection limits (issue 15, "The REST API falls over"), real daemon, real sockets:
# - 200 idle unauthenticated connections (100 silent, 100 with half a request) from four
#   loopback addresses: a token holder's request from 127.0.0.2 still answers, and the server
#   closes every idle one (at API_REQUEST_DEADLINE_S, within API_IDLE_TIMEOUT_S + 5 s);
# - one address gets API_PER_IP_CONNECTIONS_MAX connections, the rest are closed at once;
# - 500 SSE subscribers from ten addresses, answered ones kept open: each is served (200 and
#   the stream's first comment) or refused with 503 {"error": ...}, exactly API_SSE_STREAMS_MAX
#   are served, /healthz, /metrics and a stream opened before them keep answering, and the
#   daemon still exits 0 on SIGTERM with every stream open;
# - that first stream, opened at the start, outlives the idle timeout (keepalive comments).
# The limits are read from api/api.h.
. "$(dirname "$0")/lib.sh"
kt_need ss-local curl jq
[ "$KT_SERVER" = katana ] || skip_all "the REST API needs katana"

limit() { sed -n "s/^#define $1 \([0-9]*\).*/\1/p" "$KT_DIR/../../api/api.h"; }
PER_IP=$(limit API_PER_IP_CONNECTIONS_MAX)
STREAMS=$(limit API_SSE_STREAMS_MAX)
IDLE_S=$(limit API_IDLE_TIMEOUT_S)
[ -n "$PER_IP" ] && [ -n "$STREAMS" ] && [ -n "$IDLE_S" ] || { fail "limits not found in api/api.h"; exit 1; }
LOAD=(python3 "$KT_DIR/apiload.py")
TOKEN=limits-token-$RANDOM

CIPHER=aes-256-gcm
U1=$(kt_uuid)
echo_start
kt_ports 2; API_PORT=${PORTS[1]}
mkconfig "$T/config.json" "${PORTS[0]}" "$CIPHER" --user "1:$U1"
jq --arg l "127.0.0.1:$API_PORT" --arg t "$TOKEN" '.api = {listen: $l, token: $t}' \
    "$T/config.json" >"$T/c.tmp" && mv "$T/c.tmp" "$T/config.json"
srv_start "$T/config.json"
kt_wait_port "$API_PORT" 10 || { fail "API did not listen on $API_PORT"; exit 1; }
cl_start u1 "$CIPHER" "$U1" "$(srv_user_port 1)"; C1=$CL_PORT
A=http://127.0.0.1:$API_PORT

# api_code FILE PATH: the HTTP status of a token holder's GET from 127.0.0.2 (5 s bound).
api_code() {
    curl -sS --interface 127.0.0.2 -m 5 -H "Authorization: Bearer $TOKEN" -o "$T/$1" \
        -w '%{http_code}' "$A$2" 2>>"$T/curl.err" || true
}
# wait_ready NAME SECS: until the helper NAME wrote its summary.
wait_ready() {
    kt_wait_file "$T/$1.ready" "$2" || { fail "$1: no summary"; cat "$T/$1.log"; exit 1; }
}
# report NAME SECS: the helper's {"report": ...} line once it exited.
report() {
    local i
    for ((i = 0; i < $2 * 10; i++)); do
        grep -q '"report"' "$T/$1.log" 2>/dev/null && break
        sleep 0.1
    done
    grep '"report"' "$T/$1.log" | tail -n 1
}

# A stream open from the start: it stays idle longer than API_IDLE_TIMEOUT_S (keepalives only).
kt_bg curl-ev curl -sS -N -m 100 -H "Authorization: Bearer $TOKEN" -o "$T/ev.sse" \
    "$A/v1/connections/events"
CURL_EV_PID=$BG_PID
for _ in $(seq 1 100); do grep -q '^: katana stream' "$T/ev.sse" 2>/dev/null && break; sleep 0.1; done
check "a first stream is open" grep -q '^: katana stream' "$T/ev.sse"

# --- idle, unauthenticated connections -------------------------------------------------
kt_bg idle-silent "${LOAD[@]}" hold --port "$API_PORT" --count 100 \
    --sources 127.0.0.3,127.0.0.4 --report-after $((IDLE_S + 5)) --ready-file "$T/idle-silent.ready"
kt_bg idle-half "${LOAD[@]}" hold --port "$API_PORT" --count 100 \
    --sources 127.0.0.5,127.0.0.6 --send 'GET /v1/nodes HTTP/1.1\r\nHost: x\r\n' \
    --report-after $((IDLE_S + 5)) --ready-file "$T/idle-half.ready"
wait_ready idle-silent 20; wait_ready idle-half 20
cat "$T/idle-silent.ready" "$T/idle-half.ready"
check "200 idle connections are all connected" \
    jq -e -s 'map(.connected) | add == 200' "$T/idle-silent.ready" "$T/idle-half.ready"
check "with 200 idle connections open, a token holder's GET /v1/nodes answers 200" \
    test "$(api_code nodes.json /v1/nodes)" = 200
check "... and /healthz answers 200" test "$(api_code healthz.json /healthz)" = 200
check "... and /metrics answers 200" test "$(api_code metrics.txt /metrics)" = 200
R1=$(report idle-silent $((IDLE_S + 15))); R2=$(report idle-half 5)
echo "silent: $R1"; echo "half a request: $R2"
check "the server closed the 100 silent connections within ${IDLE_S} s + 5 s" \
    jq -e '.closed == 100' <<<"${R1:-null}"
check "the server closed the 100 half-request connections within ${IDLE_S} s + 5 s" \
    jq -e '.closed == 100' <<<"${R2:-null}"

# --- per-IP limit ----------------------------------------------------------------------
kt_bg per-ip "${LOAD[@]}" hold --port "$API_PORT" --count $((PER_IP + 16)) --sources 127.0.0.7 \
    --report-after 3 --ready-file "$T/per-ip.ready"
R3=$(report per-ip 20); echo "per IP: $R3"
check "$((PER_IP + 16)) connections from one address: $PER_IP stay open, 16 are closed at once" \
    jq -e ".open == $PER_IP and .closed == 16" <<<"${R3:-null}"

# --- SSE subscribers -------------------------------------------------------------------
# the per-IP connections are gone (their client exited) before the subscribers come
for _ in $(seq 1 50); do
    [ "$(find "/proc/$SRV_PID/fd" -mindepth 1 -maxdepth 1 | wc -l)" -lt 64 ] && break
    sleep 0.1
done
check "the first stream, idle for over $((IDLE_S + 5)) s, got keepalives and is still open" \
    bash -c "grep -q '^: keepalive' '$T/ev.sse' && kill -0 $CURL_EV_PID"
kt_bg sse-events "${LOAD[@]}" sse --port "$API_PORT" --count 250 --token "$TOKEN" \
    --sources 127.0.0.8,127.0.0.9,127.0.0.10,127.0.0.11,127.0.0.12 \
    --path /v1/connections/events --timeout 20 --ready-file "$T/sse-events.ready"
kt_bg sse-traffic "${LOAD[@]}" sse --port "$API_PORT" --count 250 --token "$TOKEN" \
    --sources 127.0.0.13,127.0.0.14,127.0.0.15,127.0.0.16,127.0.0.17 \
    --path /v1/traffic --timeout 20 --ready-file "$T/sse-traffic.ready"
wait_ready sse-events 40; wait_ready sse-traffic 40
cat "$T/sse-events.ready" "$T/sse-traffic.ready"
check "500 subscribers: each served or refused with a JSON 503, none closed, silent or else" \
    jq -e -s 'map(.served + .refused) | add == 500' "$T/sse-events.ready" "$T/sse-traffic.ready"
check "exactly $STREAMS streams live (the first one and $((STREAMS - 1)) of the 500)" \
    jq -e -s "map(.served) | add == $((STREAMS - 1))" "$T/sse-events.ready" "$T/sse-traffic.ready"
check "with them open, /healthz answers 200" test "$(api_code healthz2.json /healthz)" = 200
check "... /metrics answers 200" test "$(api_code metrics2.txt /metrics)" = 200
check "... one more stream is refused: 503 too many streams" \
    test "$(api_code more.json /v1/traffic)" = 503
check "... with {\"error\": \"too many streams\"}" jq -e '.error == "too many streams"' "$T/more.json"
check "7 bytes echoed through user 1" tcp_rt "$C1" ok --bytes 7 --seed limits
ok=0
for _ in $(seq 1 100); do
    "${KT_PY[@]}" sse --file "$T/ev.sse" | jq -e -s 'any(.[]; .event == "closed" and .data.up == 7)' \
        >/dev/null && { ok=1; break; }
    sleep 0.1
done
check "the first stream gets the flow's closed event with 7 bytes up" test "$ok" = 1
THREADS=$(awk '/^Threads:/ { print $2 }' "/proc/$SRV_PID/status")
RSS=$(awk '/^VmRSS:/ { print $2 }' "/proc/$SRV_PID/status")
echo "katana with $STREAMS streams and $((500 - STREAMS + 1)) answered connections open: $THREADS threads, RSS $RSS kB"
check "no thread per connection: at most 8 threads" test "$THREADS" -le 8

srv_stop
check "SIGTERM with $STREAMS streams open: daemon exits 0" test "$SRV_RC" = 0
API_LINES=$(grep -c '^[A-Z]* api ' "$SRV_LOG" || true)
echo "API log lines: $API_LINES"; grep '^[A-Z]* api ' "$SRV_LOG" | head -n 10 || true
check "the refusals were logged within the budget (at most 6 API lines)" test "$API_LINES" -le 6
kt_finish
