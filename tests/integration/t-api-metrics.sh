#!/bin/bash
# GET /metrics (issue 4): after real traffic the page passes `promtool check metrics`, carries
# the node's users, epoch and inbound bytes, and a real Prometheus server (temporary config and
# storage, 1 s scrape interval, bearer token) scrapes it on loopback: up{job="katana"} == 1.
# Flow closes by reason (issue 24, katana_flow_closes_total{reason}): the round trip that ended
# in order counts one "end"; a flow killed by DELETE /v1/connections/<id> counts one "kill" and
# no "end", and its close says "closed: kill" at debug level (the node logs at debug).
. "$(dirname "$0")/lib.sh"
kt_need ss-local curl jq promtool prometheus
[ "$KT_SERVER" = katana ] || skip_all "the REST API needs katana"

CIPHER=aes-128-gcm
TOKEN=metrics-$$
U1=$(kt_uuid); U2=$(kt_uuid)
echo_start
kt_ports 3; API_PORT=${PORTS[1]}; PROM_PORT=${PORTS[2]}
mkconfig "$T/config.json" "${PORTS[0]}" "$CIPHER" --user "1:$U1" --user "2:$U2" \
    --log-level debug
jq --arg l "127.0.0.1:$API_PORT" --arg t "$TOKEN" '.api = {listen: $l, token: $t}' \
    "$T/config.json" >"$T/c.tmp" && mv "$T/c.tmp" "$T/config.json"
srv_start "$T/config.json"
kt_wait_port "$API_PORT" 10 || { fail "API did not listen on $API_PORT"; exit 1; }
cl_start u1 "$CIPHER" "$U1" "$(srv_user_port 1)"; C1=$CL_PORT
check "1000 bytes echoed through user 1" tcp_rt "$C1" ok --bytes 1000 --seed m

metrics() { curl -sS -m 10 -H "Authorization: Bearer $TOKEN" "http://127.0.0.1:$API_PORT/metrics"; }
inbound_up() {
    local i
    for i in $(seq 1 50); do
        metrics >"$T/metrics.txt"
        awk '$1 == "katana_inbound_bytes_total{node=\"t1\",inbound=\"t1\",direction=\"up\"}" && $2 >= 1000 { f = 1 } END { exit !f }' \
            "$T/metrics.txt" && return 0
        sleep 0.1
    done
    return 1
}
check "the inbound's up bytes reach the 1000 sent (after a sampler tick)" inbound_up
cat "$T/metrics.txt"
check "promtool check metrics accepts the page" promtool check metrics <"$T/metrics.txt"
check "users, epoch, applies and flows per node are there" \
    grep -q -x -e 'katana_users{node="t1"} 2' "$T/metrics.txt"
check "epoch 1" grep -q -x 'katana_epoch 1' "$T/metrics.txt"
check "one successful apply" grep -q -x 'katana_applies_total{node="t1"} 1' "$T/metrics.txt"
check "no live flow after the round trip" grep -q -x 'katana_flows{node="t1"} 0' "$T/metrics.txt"
# the worker loop turns (issue 13): a histogram whose buckets rise to its count, which the echo
# above made non-zero
turns_counted() {
    awk '/^katana_worker_turn_cpu_seconds_bucket/ { if ($2 < last) bad = 1; last = $2; inf = $2 }
         $1 == "katana_worker_turn_cpu_seconds_count" { n = $2 }
         $1 == "katana_worker_turn_cpu_seconds_sum" { s = $2 }
         END { exit !(n > 0 && inf == n && s > 0 && !bad) }' "$T/metrics.txt"
}
check "worker loop turns counted by CPU time (buckets rise to the count)" turns_counted

# --- flow closes by reason (issue 24) ----------------------------------------------------
# closes REASON: katana_flow_closes_total{reason="REASON"} now ("none" when the page lacks it)
closes() {
    metrics | awk -v k="katana_flow_closes_total{reason=\"$1\"}" \
        'BEGIN { v = "none" } $1 == k { v = $2 } END { print v }'
}
reasons_listed() {
    local r
    for r in end error kill session revoke idle limit shutdown; do
        grep -q "^katana_flow_closes_total{reason=\"$r\"} [0-9]" "$T/metrics.txt" ||
            { echo "no $r"; return 1; }
    done
}
check "katana_flow_closes_total lists every reason" reasons_listed
end1=$(closes end)
echo "closes after the round trip: end $end1, kill $(closes kill)"
check "the round trip that ended in order counts one close for reason end" test "$end1" = 1
kill0=$(closes kill)
api() {
    curl -sS -m 10 -X "$1" -H "Authorization: Bearer $TOKEN" -o "$T/body" -w '%{http_code}' \
        "http://127.0.0.1:$API_PORT$2"
}
stream_bg victim "$C1" 4000000 200000 cut; VICTIM=$STREAM_PID
api GET /v1/connections >/dev/null
FLOW=$(jq -r '.flows[0].id // empty' "$T/body")
check "the paced transfer is a live flow in GET /v1/connections" test -n "$FLOW"
check "DELETE /v1/connections/$FLOW -> 204" test "$(api DELETE "/v1/connections/${FLOW:-0}")" = 204
stream_wait victim "$VICTIM" 10 "the killed transfer is cut"
kill_counted() { [ "$(closes kill)" = $((kill0 + 1)) ]; }
check "the kill counts one close for reason kill" kt_until 5 kill_counted
check "... and none for reason end" test "$(closes end)" = "$end1"
check "its close says why at debug level" \
    grep -q "flow ${FLOW:-none} of session [0-9]* to .* closed: kill" "$SRV_LOG"

# --- a real Prometheus scrape ------------------------------------------------------------
cat >"$T/prometheus.yml" <<YML
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: katana
    authorization:
      credentials: $TOKEN
    static_configs:
      - targets: ["127.0.0.1:$API_PORT"]
YML
mkdir -p "$T/tsdb"
kt_bg prometheus prometheus --config.file="$T/prometheus.yml" --storage.tsdb.path="$T/tsdb" \
    --web.listen-address="127.0.0.1:$PROM_PORT" --storage.tsdb.retention.time=1h
kt_wait_port "$PROM_PORT" 20 || { fail "prometheus did not listen"; tail "$T/prometheus.log"; exit 1; }
prom_query() {
    curl -sS -m 5 -G "http://127.0.0.1:$PROM_PORT/api/v1/query" --data-urlencode "query=$1"
}
scraped() {
    local i
    for i in $(seq 1 60); do
        prom_query 'up{job="katana"}' >"$T/up.json" 2>/dev/null
        jq -e '.data.result[0].value[1] == "1"' "$T/up.json" >/dev/null 2>&1 && return 0
        sleep 0.5
    done
    cat "$T/up.json"; return 1
}
check "Prometheus scraped katana: up{job=\"katana\"} == 1" scraped
prom_query 'katana_epoch{job="katana"}' >"$T/epoch.json"
check "Prometheus stored katana_epoch == 1" jq -e '.data.result[0].value[1] == "1"' "$T/epoch.json"
check "daemon still runs" srv_alive
srv_stop
check "SIGTERM: daemon exits 0" test "$SRV_RC" = 0
kt_finish
