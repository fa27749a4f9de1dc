#!/bin/bash
# Audit hits on a UniProxy node (issue 12 "Audit"): a `block` route of the panel is an audit
# rule. A flow it matches is refused; the (user, rule) is recorded once per report period however
# often the client retries, listed by GET /v1/audit and counted in /metrics; UniProxy has no audit
# endpoint (PANEL.md §1), so the period ends at the next push without a report, and a later hit
# starts a new one.
# Checks: refusals; one row for 5 retries in /v1/audit and katana_audit_hits_total 1; no report
# (katana_audit_reported_total 0); after the push the row is gone; a new hit is recorded again.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/panel.sh"
kt_need ss-local curl jq
needs_katana "panel client" || skip_all "needs katana"

U1=$(kt_uuid)
echo_start
panel_start 30 1 "1:$U1"
panel_ctl config "$(jq -c '.routes = [{"id": 5, "match": ["domain:audit.test"], "action": "block"}]' \
    "$T/panel-config.json")"
kat_config "$T/config.json" 1
kat_start "$T/config.json"
START=$SECONDS
cl_start u1 "$CIPHER" "$U1" "$NODE_PORT"; C1=$CL_PORT
kt_wait_port "$API_PORT" 10 || { fail "API did not listen"; exit 1; }

metric() { curl -sf "http://127.0.0.1:$API_PORT/metrics" | awk -v m="$1{node=\"n1\"}" '$1 == m { print $2 }'; }
metric_is() { test "$(metric "$1")" = "$2"; }
# listed N: GET /v1/audit lists N hits of n1, all (user 1, rule 5).
listed() {
    curl -sf "http://127.0.0.1:$API_PORT/v1/audit" |
        jq -e --argjson n "$1" '[.hits[] | select(.node == "n1")] | length == $n and
                                all(.user == 1 and .rule == 5 and .reporting == false)' >/dev/null
}

check "the panel's block route refuses the domain" kt_until 15 \
    tcp_rt "$C1" refused --dest-host www.audit.test --bytes 1024
R=0
for i in 1 2 3 4 5; do tcp_rt "$C1" refused --dest-host audit.test --bytes 1024 && R=$((R + 1)); done
check "5 retries refused" test "$R" = 5
check "other destinations are served" tcp_rt "$C1" ok --bytes 65536
[ $((SECONDS - START)) -lt 25 ] || kt_log "slow run: the first push may have ended the period"
check "GET /v1/audit lists one hit for the retries" kt_until 5 listed 1
check "/metrics: recorded once" kt_until 5 metric_is katana_audit_hits_total 1
check "/metrics: pending 1, nothing reported (UniProxy takes no detect log)" \
    sh -c "test \"\$(curl -sf http://127.0.0.1:$API_PORT/metrics | grep -c '^katana_audit_pending{node=\"n1\"} 1\$')\" = 1"
check "the push ends the period: the hit leaves the outbox" kt_until 40 listed 0
check "... not reported" metric_is katana_audit_reported_total 0
check "a hit in the next period" tcp_rt "$C1" refused --dest-host audit.test --bytes 1024
check "is recorded again" kt_until 5 metric_is katana_audit_hits_total 2
check "the panel got no unknown request" test "$(panel_ctl state | jq '.hits | keys - ["config", "user", "push", "alive", "alivelist", "status"] | length')" = 0
kat_stop
check "katana exits 0" test "$SRV_RC" = 0
kt_finish
