#!/bin/bash
# REST API against live traffic (issue 4; seed 003's REST tests): three users' ss-local clients
# move data through katana while real curl lists the connections, kills one flow (its stream is
# cut, the other keeps echoing to the end, the same id again is 404 "no live flow <id>"), kills
# by selector (non-matching 0, unknown key 400, matching n, no key = all) and closes sessions
# by user.
. "$(dirname "$0")/lib.sh"
kt_need ss-local curl jq
[ "$KT_SERVER" = katana ] || skip_all "the REST API needs katana"

CIPHER=aes-256-gcm
TOKEN=t0ken-$$
U1=$(kt_uuid); U2=$(kt_uuid); U3=$(kt_uuid)
echo_start
kt_ports 2; API_PORT=${PORTS[1]}
mkconfig "$T/config.json" "${PORTS[0]}" "$CIPHER" --user "1:$U1" --user "2:$U2" --user "3:$U3"
jq --arg l "127.0.0.1:$API_PORT" --arg t "$TOKEN" '.api = {listen: $l, token: $t}' \
    "$T/config.json" >"$T/c.tmp" && mv "$T/c.tmp" "$T/config.json"
srv_start "$T/config.json"
kt_wait_port "$API_PORT" 10 || { fail "API did not listen on $API_PORT"; exit 1; }
cl_start u1 "$CIPHER" "$U1" "$(srv_user_port 1)"; C1=$CL_PORT
cl_start u2 "$CIPHER" "$U2" "$(srv_user_port 2)"; C2=$CL_PORT
cl_start u3 "$CIPHER" "$U3" "$(srv_user_port 3)"; C3=$CL_PORT

# api METHOD PATH: print the status code; the body is in $T/body.
api() {
    curl -sS -m 10 -X "$1" -H "Authorization: Bearer $TOKEN" -o "$T/body" -w '%{http_code}' \
        "http://127.0.0.1:$API_PORT$2"
}
# expect_api DESC METHOD PATH STATUS [BODY]: PASS when the status (and the exact body) match.
expect_api() {
    local st body
    st=$(api "$2" "$3"); body=$(cat "$T/body")
    if [ "$st" = "$4" ] && { [ $# -lt 5 ] || [ "$body" = "$5" ]; }; then
        pass "$1 ($2 $3 -> $st $body)"
    else
        fail "$1 ($2 $3 -> $st '$body', expected $4 '${5:-}')"
    fi
}
# flow_of UID: id of the live flow of user UID ("" when none).
flow_of() { api GET /v1/connections >/dev/null; jq -r --argjson u "$1" '.flows[] | select(.user.uid == $u) | .id' "$T/body"; }
# wait_flows N: until N flows are live (10 s).
wait_flows() {
    local i
    for i in $(seq 1 100); do
        api GET /v1/connections >/dev/null
        [ "$(jq '.flows | length' "$T/body")" = "$1" ] && return 0
        sleep 0.1
    done
    return 1
}

# --- list ------------------------------------------------------------------------------
stream_bg a "$C1" 8000000 200000 cut; PA=$STREAM_PID
stream_bg b "$C2" 600000 100000 ok; PB=$STREAM_PID
check "two flows are live" wait_flows 2
api GET /v1/connections >/dev/null; cp "$T/body" "$T/list.json"; jq . "$T/list.json"
check "flows sorted by id, users 1 and 2, tcp to the echo port through direct@v1 on node t1, not killed" \
    jq -e --arg d "127.0.0.1:$ECHO_PORT" '
      (.flows | map(.id)) == (.flows | map(.id) | sort) and
      (.flows | map(.user.uid) | sort) == [1, 2] and
      all(.flows[]; .network == "tcp" and .destination == $d and .outbound == "direct@v1"
                    and .node == "t1" and .inbound == "t1" and .rule == null and .epoch == 1
                    and .killed == false and .user.label == (.user.uid | tostring)
                    and (.up | type) == "number" and (.down | type) == "number"
                    and (.start | test("^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z$")))' "$T/list.json"
check "two sessions, each owning one of the flows" \
    jq -e '(.sessions | length) == 2 and ((.sessions | map(.id) | sort) == (.flows | map(.session) | sort))' \
    "$T/list.json"
expect_api "a filter by user lists only that user's flow" GET "/v1/connections?user=2" 200
check "user=2 lists one flow of user 2" jq -e '(.flows | length) == 1 and .flows[0].user.uid == 2' "$T/body"

# --- kill one --------------------------------------------------------------------------
FA=$(flow_of 1)
expect_api "kill user 1's flow" DELETE "/v1/connections/$FA" 204 ""
stream_wait a "$PA" 10 "the killed flow's connection is cut"
stream_wait b "$PB" 20 "the other connection keeps echoing to the end"
expect_api "the same id again" DELETE "/v1/connections/$FA" 404 "{\"error\":\"no live flow $FA\"}"

# --- kill by selector ------------------------------------------------------------------
stream_bg d "$C1" 8000000 200000 cut; PD=$STREAM_PID
stream_bg e "$C2" 8000000 200000 cut; PE=$STREAM_PID
stream_bg f "$C3" 8000000 200000 cut; PF=$STREAM_PID
check "three flows are live" wait_flows 3
expect_api "a selector matching nothing" DELETE "/v1/connections?outbound=block" 200 '{"closed":0}'
expect_api "another selector matching nothing" DELETE "/v1/connections?inbound=nope&user=1" 200 '{"closed":0}'
expect_api "an unknown query key" DELETE "/v1/connections?bogus=1" 400 '{"error":"unknown query key \"bogus\""}'
for bad in abc "" 1.5; do
    expect_api "user=$bad closes nothing" DELETE "/v1/connections?user=$bad" 400 '{"error":"user: expected a user id"}'
    expect_api "user=$bad on sessions" DELETE "/v1/sessions?user=$bad" 400 '{"error":"user: expected a user id"}'
done
expect_api "user=abc lists nothing" GET "/v1/connections?user=abc" 400 '{"error":"user: expected a user id"}'
check "nothing was closed by them" wait_flows 3
expect_api "user 1 through direct on t1" DELETE "/v1/connections?outbound=direct&inbound=t1&user=1&node=t1" 200 '{"closed":1}'
stream_wait d "$PD" 10 "the selected flow's connection is cut"
check "the two others still run" wait_flows 2
expect_api "no key: every flow" DELETE "/v1/connections" 200 '{"closed":2}'
stream_wait e "$PE" 10 "user 2's connection is cut"
stream_wait f "$PF" 10 "user 3's connection is cut"

# --- close sessions by user ------------------------------------------------------------
stream_bg g "$C2" 8000000 200000 cut; PG=$STREAM_PID
stream_bg h "$C3" 600000 100000 ok; PH=$STREAM_PID
check "two flows are live again" wait_flows 2
expect_api "sessions of a user without any" DELETE "/v1/sessions?user=9" 200 '{"closed":0}'
expect_api "an unknown key on sessions" DELETE "/v1/sessions?outbound=direct" 400 '{"error":"unknown query key \"outbound\""}'
expect_api "close user 2's sessions" DELETE "/v1/sessions?user=2&node=t1" 200 '{"closed":1}'
stream_wait g "$PG" 10 "user 2's session is closed"
stream_wait h "$PH" 20 "user 3's session keeps echoing to the end"
check "daemon still runs" srv_alive
srv_stop
check "SIGTERM: daemon exits 0" test "$SRV_RC" = 0
kt_finish
