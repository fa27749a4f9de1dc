#!/bin/bash
# Bad mod_mu answers (issue 14): an HTML page with 200, truncated JSON, a 300 MB body, a user list
# with a duplicate id, absurd limits, an unknown node type (sort 2, TUIC) and a business error
# (HTTP 200 {"ret":0}). Each is served on every pull for a while, then the panel heals.
# Checks, per bad answer: exactly one warning naming the reason although several pulls got it;
# katana keeps running and keeps serving the last good state (real ss-local traffic for both
# users); after the panel heals, a change applies again (a user removed).
. "$(dirname "$0")/lib.sh"
PANEL_TYPE=sspanel
. "$(dirname "$0")/panel.sh"
kt_need ss-local curl sqlite3
needs_katana "panel client" || skip_all "needs katana"

U1=$(kt_uuid); U2=$(kt_uuid)
echo_start
panel_start 1 1 "1:$U1" "2:$U2"
kat_config "$T/config.json" 1
kat_start "$T/config.json"
cl_start u1 "$CIPHER" "$U1" "$NODE_PORT"; C1=$CL_PORT
cl_start u2 "$CIPHER" "$U2" "$NODE_PORT"; C2=$CL_PORT
check "both users served" tcp_rt "$C1" ok
check "user 2 served" tcp_rt "$C2" ok

mark() { MARK=$(stat -c %s "$SRV_LOG"); }
since_mark() { tail -c +"$((MARK + 1))" "$SRV_LOG"; }
wait_log() {
    local i
    for ((i = 0; i < $1 * 10; i++)); do
        since_mark | grep -qE "$2" && return 0
        sleep 0.1
    done
    return 1
}
# bad NAME ENDPOINT CONTROL-JSON ERE: serve a bad answer until 3 more pulls of ENDPOINT saw it.
bad() {
    local name=$1 ep=$2 ctl=$3 ere=$4 before i
    mark
    if [ "$ctl" = html200 ]; then
        panel_ctl fault "{\"endpoint\": \"$ep\", \"faults\": [\"html200\", \"html200\", \"html200\", \"html200\", \"html200\", \"html200\"]}"
    else
        panel_ctl raw "$ctl"
    fi
    before=$(panel_hits "$ep")
    check "$name: the reason is logged" wait_log 15 "WARN .*$ere"
    for ((i = 0; i < 100; i++)); do [ "$(panel_hits "$ep")" -ge $((before + 3)) ] && break; sleep 0.2; done
    check "$name: several pulls got it" test "$(panel_hits "$ep")" -ge $((before + 3))
    check "$name: exactly one warning" test "$(since_mark | grep -E "WARN .*$ere" | wc -l)" = 1
    check "$name: katana keeps running" kt_alive "$SRV_PID"
    check "$name: user 1 still served" tcp_rt "$C1" ok
    check "$name: user 2 still served" tcp_rt "$C2" ok
    panel_ctl raw "{\"endpoint\": \"$ep\", \"body\": null}"
    panel_ctl fault "{\"endpoint\": \"$ep\", \"faults\": []}"
}

bad "HTML 200" user html200 "panel users: HTTP 200 body is not JSON \(text/html"
bad "truncated JSON" user '{"endpoint": "user", "body": "{\"ret\":1,\"data\":[{\"id\":1,"}' \
    "panel users: HTTP 200 body is not JSON"
bad "300 MB body" user '{"endpoint": "user", "huge": 300000000}' "panel users: .*(large|size|bound)"
bad "duplicate user ids" user "{\"endpoint\": \"user\", \"body\": {\"ret\": 1, \"data\": [
    {\"id\": 1, \"passwd\": \"$U1\", \"method\": \"$CIPHER\"},
    {\"id\": 1, \"passwd\": \"$U2\", \"method\": \"$CIPHER\"}]}}" \
    "panel users: data\[1\]\.id: duplicate user id 1"
bad "absurd limits" user "{\"endpoint\": \"user\", \"body\": {\"ret\": 1, \"data\": [
    {\"id\": 1, \"passwd\": \"$U1\", \"node_speedlimit\": 1e15}]}}" \
    "panel users: data\[0\]\.node_speedlimit: larger than 10000000"
bad "unknown node type" config '{"endpoint": "config", "body": {"ret": 1, "data": {"sort": 2,
    "server": "127.0.0.1", "custom_config": {"offset_port_node": "443"}}}}' \
    "panel info: data\.sort: node type 2 \(TUIC\) is not served"
bad "business error" user '{"endpoint": "user", "body": {"ret": 0, "msg": "Node out of bandwidth."}}' \
    "panel users: ret 0: Node out of bandwidth\."

# healed: a change applies again
mark
panel_ctl users "{\"users\": [{\"id\": 1, \"uuid\": \"$U1\"}]}"
check "after the bad answers a change applies" wait_log 15 "node n1: users updated, 1 users"
check "user 1 served" tcp_rt "$C1" ok
check "removed user 2 refused" tcp_rt "$C2" refused
kat_stop
check "katana exits 0" test "$SRV_RC" = 0
kt_finish
