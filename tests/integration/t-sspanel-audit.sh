#!/bin/bash
# Audit hits (issue 12 "Audit", issue 14 detect log, PANEL.md §2): SSPanel detect rules are audit
# rules. A flow to a matching domain, to an IP literal a rule matches, or to 127.0.0.1 with the
# matching name sniffed from its HTTP Host, is refused like a blocked route; each (user, rule) is
# recorded once per report period however often the client retries (a UDP datagram too: dropped),
# listed by GET /v1/audit and /metrics, and reaches the panel's detectlog once per (user, rule)
# per period; hits survive a kill -9 while the panel is down and are reported after the restart.
# Checks: refusals; no detectlog request holds a pair twice, and a pair retried 6 times is
# reported at most once per period that ended; exactly the expected pairs; /v1/audit and
# /metrics; persistence across kill -9.
. "$(dirname "$0")/lib.sh"
PANEL_TYPE=sspanel
. "$(dirname "$0")/panel.sh"
kt_need ss-local curl sqlite3 jq
needs_katana "panel client" || skip_all "needs katana"

U1=$(kt_uuid); U2=$(kt_uuid)
echo_start
panel_start 3 1 "1:$U1" "2:$U2"
kt_ports 1; HTTP_PORT=${PORTS[0]}
kt_bg httpd "${KT_PY[@]}" httpd --port "$HTTP_PORT" --body "plain-ok" --ready-file "$T/httpd.ready"
kt_wait_file "$T/httpd.ready" 10 || { fail "httpd did not start"; exit 1; }
panel_ctl detect_rules '[{"id": 7, "name": "a", "text": "audit", "regex": "(^|\\.)audit\\.test$", "type": 1},
                         {"id": 8, "name": "ip", "text": "ip", "regex": "^127\\.0\\.0\\.9$", "type": 1}]'
kat_config "$T/config.json" 1
kat_start "$T/config.json"
cl_start u1 "$CIPHER" "$U1" "$NODE_PORT"; C1=$CL_PORT
cl_start u2 "$CIPHER" "$U2" "$NODE_PORT"; C2=$CL_PORT
kt_wait_port "$API_PORT" 10 || { fail "API did not listen"; exit 1; }

not() { ! "$@"; }
# http_as PORT NAME: HTTP through client PORT to 127.0.0.1 with "Host: NAME" (sniffed).
http_as() {
    curl -sS -m 5 --socks5 "127.0.0.1:$1" -H "Host: $2" -o "$T/out" \
        "http://127.0.0.1:$HTTP_PORT/" 2>"$T/curl.err"
}
# pairs: "USER RULE" per detectlog entry the panel got, sorted (duplicates kept).
pairs() {
    panel_ctl state | jq -r '.detectlog[] | "\(.user_id) \(.list_id)"' | sort
}
# dup_in_a_request: a request of the detectlog holding one pair twice.
dup_in_a_request() {
    panel_ctl state | jq -e '[.detectlog | group_by(.req)[] | map("\(.user_id) \(.list_id)")
                              | (length != (unique | length))] | any' >/dev/null
}
# outbox_is N [WHERE]: the audit outbox holds N rows (matching WHERE).
outbox_is() {
    test "$(sqlite3 "$T/katana.db" "SELECT COUNT(*) FROM audit_outbox ${2:+WHERE $2}")" = "$1"
}
# reported_is N USER RULE: the panel's detect log holds the pair N times.
reported_is() { test "$(pairs | grep -c "^$2 $3\$")" = "$1"; }
# reported_set TEXT: the distinct pairs the panel got, "U R;" each.
reported_set() { test "$(pairs | sort -u | tr '\n' ';')" = "$1"; }
requests() { panel_hits detectlog; }

# the rule arrives with a pull: wait until the domain is refused
check "a domain the detect rule matches is refused" kt_until 15 \
    tcp_rt "$C1" refused --dest-host www.audit.test --bytes 1024
check "other destinations are served" tcp_rt "$C1" ok --bytes 65536
RETRIES=0
REQ0=$(requests)
for i in 1 2 3 4 5 6; do
    tcp_rt "$C1" refused --dest-host audit.test --bytes 1024 && RETRIES=$((RETRIES + 1))
    tcp_rt "$C1" refused --dest-host 127.0.0.9 --bytes 1024 && RETRIES=$((RETRIES + 1))
    not http_as "$C2" audit.test && RETRIES=$((RETRIES + 1))
done
check "UDP datagrams to an IP literal a rule matches are dropped" \
    udp_rt "$C2" refused --dest-host 127.0.0.9 --count 3
REQ1=$(requests) # detect log requests (= periods that ended) during the retries
check "every retry was refused (domain, IP literal, sniffed Host)" test "$RETRIES" = 18
check "the same request naming another host is served" http_as "$C2" open.test
check "the detect log reaches the panel" kt_until 20 reported_set "1 7;1 8;2 7;2 8;"
sleep 4 # one more period: nothing new is hit, nothing more is reported
check "no request of the detect log holds a pair twice" not dup_in_a_request
N17=$(panel_ctl state | jq --argjson r "$REQ0" '[.detectlog[] | select(.req > $r and
                                                   .user_id == 1 and .list_id == 7)] | length')
check "6 refused flows of user 1 to audit.test: reported $N17 times, at most once per period ($((REQ1 - REQ0)) periods ended meanwhile)" \
    test "$N17" -ge 1 -a "$N17" -le $((REQ1 - REQ0 + 1))
check "nothing is pending after the panel took it" kt_until 5 outbox_is 0
check "/metrics: hits recorded and reported" sh -c \
    "curl -sf 'http://127.0.0.1:$API_PORT/metrics' | grep -Eq '^katana_audit_reported_total\\{node=\"n1\"\\} ([3-9]|[1-9][0-9]+)\$' &&
     curl -sf 'http://127.0.0.1:$API_PORT/metrics' | grep -Eq '^katana_audit_hits_total\{node=\"n1\"\} ([4-9]|[1-9][0-9]+)\$'"

# persistence: a hit while the panel is down is kept through a kill -9 and reported after
panel_ctl down '{"down": true}'
check "the panel down: the user is still refused" tcp_rt "$C2" refused --dest-host x.audit.test --bytes 1024
check "the hit is in the outbox" kt_until 10 outbox_is 1 "uid = 2 AND rule = 7"
sleep 4 # a report fails (panel down): the hit stays
BEFORE=$(pairs | grep -c '^2 7$')
check "the panel down: not reported, still in the outbox" outbox_is 1 "uid = 2 AND rule = 7"
check "GET /v1/audit lists it, its failed report pending" kt_until 5 sh -c \
    "curl -sf 'http://127.0.0.1:$API_PORT/v1/audit' | jq -e '.hits == [.hits[] | select(.node == \"n1\" and
     .user == 2 and .rule == 7 and .reporting)] and (.hits | length) == 1 and .dropped == 0'"
kill -KILL "$SRV_PID"; kt_wait_exit "$SRV_PID" 5 || true
panel_ctl down '{"down": false}'
kat_start "$T/config.json"
check "after kill -9 and a restart the hit reaches the panel" kt_until 20 \
    reported_is $((BEFORE + 1)) 2 7
check "and leaves the outbox" kt_until 10 outbox_is 0
kat_stop
check "katana exits 0" test "$SRV_RC" = 0
kt_finish
