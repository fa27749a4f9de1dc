#!/bin/bash
# REST API streams with real `curl -N` (issue 4; seed 003 traffic_streams_one_event_per_tick,
# connection_events_stream_opens_and_closes): /v1/traffic sends one `traffic` event per sampler
# tick with consecutive tick numbers whose totals reach the 1000 bytes sent each way;
# /v1/connections/events shows `opened` then `closed` for the same flow, closed with the final
# 7 bytes each way.
. "$(dirname "$0")/lib.sh"
kt_need ss-local curl jq
[ "$KT_SERVER" = katana ] || skip_all "the REST API needs katana"

CIPHER=chacha20-ietf-poly1305
U1=$(kt_uuid)
echo_start
kt_ports 2; API_PORT=${PORTS[1]}
mkconfig "$T/config.json" "${PORTS[0]}" "$CIPHER" --user "1:$U1"
jq --arg l "127.0.0.1:$API_PORT" '.api = {listen: $l}' "$T/config.json" >"$T/c.tmp" &&
    mv "$T/c.tmp" "$T/config.json"
srv_start "$T/config.json"
kt_wait_port "$API_PORT" 10 || { fail "API did not listen on $API_PORT"; exit 1; }
cl_start u1 "$CIPHER" "$U1" "$(srv_user_port 1)"; C1=$CL_PORT

# stream_start NAME PATH: `curl -N` into $T/NAME.sse until the stream's first comment arrived.
stream_start() {
    kt_bg "curl-$1" curl -sS -N -m 60 -o "$T/$1.sse" "http://127.0.0.1:$API_PORT$2"
    local i
    for i in $(seq 1 100); do grep -q '^: katana stream' "$T/$1.sse" 2>/dev/null && return 0; sleep 0.1; done
    fail "$2: the stream did not open"; exit 1
}
# events NAME: the stream's complete events as JSON lines.
events() { "${KT_PY[@]}" sse --file "$T/$1.sse"; }
# wait_for NAME JQ: until some event satisfies JQ (15 s).
wait_for() {
    local i
    for i in $(seq 1 150); do
        events "$1" | jq -e -s "any(.[]; $2)" >/dev/null && return 0
        sleep 0.1
    done
    return 1
}

# --- traffic ---------------------------------------------------------------------------
stream_start traffic /v1/traffic; TRAFFIC_CURL=$BG_PID
check "1000 bytes echoed through user 1" tcp_rt "$C1" ok --bytes 1000 --seed tr
check "a tick's totals reach the 1000 bytes each way" \
    wait_for traffic '.event == "traffic" and .data.total.up >= 1000 and .data.total.down >= 1000'
N=$(events traffic | jq -s 'map(select(.event == "traffic")) | length')
T0=$(events traffic | jq -s 'map(select(.event == "traffic")) | .[-1].data.tick')
check "a further tick arrives" wait_for traffic ".event == \"traffic\" and .data.tick > $T0"
events traffic | tail -n 3
check "only traffic events, tick numbers consecutive, at least 2 of them" \
    jq -e -s 'map(select(.event == "traffic") | .data.tick) as $t | length == ($t | length)
              and ($t | length) >= 2 and all(range(1; $t | length); $t[.] == $t[. - 1] + 1)' \
    < <(events traffic)
check "the tick that carried the bytes has an interval, totals, per inbound, outbound and user rows (with its label)" \
    jq -e -s 'map(select(.event == "traffic" and .data.total.up >= 1000))[0].data
              | .interval_ms > 0 and (.inbounds | map(.tag)) == ["t1"]
              and (.outbounds | map(.tag) | index("direct")) != null
              and (.users | map(.user)) == [1] and .users[0].label == "1"
              and .users[0].up >= 1000' < <(events traffic)
echo "traffic: $N events when the totals reached 1000"

# a client closing its stream is no server fault: nothing logged once the next tick is sent
kill "$TRAFFIC_CURL"
sleep 2.5
check "a stream closed by its client is not warned about" \
    bash -c "! grep -q 'Failed to send' '$SRV_LOG'"

# --- connection events -----------------------------------------------------------------
stream_start ev /v1/connections/events
check "7 bytes echoed through user 1" tcp_rt "$C1" ok --bytes 7 --seed ev
check "a closed event arrives" wait_for ev '.event == "closed"'
events ev
check "opened then closed for the same flow, the close with 7 bytes each way, neither killed" \
    jq -e -s 'map(select(.event == "opened" or .event == "closed")) as $e
              | ($e | length) == 2 and $e[0].event == "opened" and $e[1].event == "closed"
              and $e[0].data.id == $e[1].data.id and $e[1].data.up == 7 and $e[1].data.down == 7
              and $e[1].data.user.uid == 1 and $e[0].data.up == 0
              and $e[0].data.killed == false and $e[1].data.killed == false' < <(events ev)
check "no lagged event for a reader that keeps up" \
    jq -e -s 'all(.[]; .event != "lagged")' < <(events ev)
srv_stop
check "SIGTERM with two open streams: daemon exits 0" test "$SRV_RC" = 0
kt_finish
