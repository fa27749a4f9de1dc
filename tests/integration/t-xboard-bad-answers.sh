#!/bin/bash
# Bad Xboard API v2 answers (issue 14), over REST and over the node channel: an HTML page with
# 200, truncated JSON, a 300 MB body (over the 256 MiB bound), a user list with a duplicate id, an unknown node type. Each
# REST one is served on every pull for a while, then the panel heals; each channel one is sent
# once (katana then pulls everything over REST, which answers well).
# Checks, per bad answer: exactly one warning naming the reason (although several pulls got the
# REST ones); katana keeps running and keeps serving the last good state (real ss-local traffic
# for both users); after the panel heals, a change pushed over the channel applies again.
. "$(dirname "$0")/lib.sh"
PANEL_TYPE=xboard
. "$(dirname "$0")/panel.sh"
kt_need ss-local curl sqlite3
needs_katana "panel client" || skip_all "needs katana"

U1=$(kt_uuid); U2=$(kt_uuid)
echo_start
panel_start 1 1 "1:$U1" "2:$U2"
kat_config "$T/config.json" 1
kat_start "$T/config.json"
check "the node channel came up" ws_wait_up 10
cl_start u1 "$CIPHER" "$U1" "$NODE_PORT"; C1=$CL_PORT
cl_start u2 "$CIPHER" "$U2" "$NODE_PORT"; C2=$CL_PORT
check "user 1 served" tcp_rt "$C1" ok
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
still_served() {
    check "$1: exactly one warning" test "$(since_mark | grep -E "WARN .*$2" | wc -l)" = 1
    check "$1: katana keeps running" kt_alive "$SRV_PID"
    check "$1: user 1 still served" tcp_rt "$C1" ok
    check "$1: user 2 still served" tcp_rt "$C2" ok
}
# bad NAME ENDPOINT CONTROL-JSON ERE: serve a bad REST answer until 3 more pulls saw it.
bad() {
    local name=$1 ep=$2 ctl=$3 ere=$4 before i
    mark
    if [ "$ctl" = html200 ]; then
        panel_ctl fault "{\"endpoint\": \"$ep\", \"faults\": [\"html200\", \"html200\", \"html200\", \"html200\", \"html200\", \"html200\"]}"
    else
        panel_ctl raw "$ctl"
    fi
    before=$(panel_hits "$ep")
    check "REST $name: the reason is logged" wait_log 15 "WARN .*$ere"
    for ((i = 0; i < 100; i++)); do [ "$(panel_hits "$ep")" -ge $((before + 3)) ] && break; sleep 0.2; done
    check "REST $name: several pulls got it" test "$(panel_hits "$ep")" -ge $((before + 3))
    still_served "REST $name" "$ere"
    panel_ctl raw "{\"endpoint\": \"$ep\", \"body\": null}"
    panel_ctl fault "{\"endpoint\": \"$ep\", \"faults\": []}"
    sleep 1.5
}
# ws_bad NAME CONTROL ARGS-JSON ERE: one bad message over the channel.
ws_bad() {
    mark
    panel_ctl "$2" "$3"
    check "channel $1: the reason is logged" wait_log 15 "WARN .*$4"
    sleep 1.5
    still_served "channel $1" "$4"
    ws_wait_up 10 1
}

bad "HTML 200" user html200 "panel user: HTTP 200 body is not JSON \(text/html"
bad "truncated JSON" user '{"endpoint": "user", "body": "{\"users\":[{\"id\":1,"}' \
    "panel user: HTTP 200 body is not JSON"
bad "300 MB body" user '{"endpoint": "user", "huge": 300000000}' "panel user: .*(large|size|bound)"
bad "duplicate user ids" user "{\"endpoint\": \"user\", \"body\": {\"users\": [
    {\"id\": 1, \"uuid\": \"$U1\"}, {\"id\": 1, \"uuid\": \"$U2\"}]}}" \
    "duplicate user 1|user id 1 listed twice"
bad "unknown node type" config "{\"endpoint\": \"config\", \"body\": {\"protocol\": \"mieru\",
    \"listen_ip\": \"0.0.0.0\", \"server_port\": $NODE_PORT, \"transport\": \"TCP\",
    \"base_config\": {\"push_interval\": 1, \"pull_interval\": 1}}}" \
    "mieru"

ws_bad "truncated JSON" ws_raw '{"text": "{\"event\":\"sync.user.delta\",\"data\":{\"action\":\"remove\",\"users\":[{\"id\":1"}' \
    "node channel: message is not a JSON object"
ws_bad "duplicate user ids" ws_send "{\"event\": \"sync.users\", \"data\": {\"users\": [
    {\"id\": 1, \"uuid\": \"$U1\"}, {\"id\": 1, \"uuid\": \"$U2\"}]}}" \
    "node channel: sync.users: users: user id 1 listed twice"
ws_bad "50 MB message" ws_raw '{"size": 52428800}' "node channel: message over the size bound"
ws_bad "unknown node type" ws_send "{\"event\": \"sync.config\", \"data\": {\"config\": {
    \"protocol\": \"mieru\", \"listen_ip\": \"0.0.0.0\", \"server_port\": $NODE_PORT}}}" "mieru"

# healed: a change over the channel applies again
mark
panel_ctl users "{\"users\": [{\"id\": 1, \"uuid\": \"$U1\"}]}"
panel_ctl ws_send '{"event": "sync.user.delta", "data": {"action": "remove", "users": [{"id": 2}]}}'
check "after the bad answers a change applies" wait_log 15 "node n1: users updated, 1 users"
check "user 1 served" tcp_rt "$C1" ok
check "removed user 2 refused" tcp_rt "$C2" refused
kat_stop
check "katana exits 0" test "$SRV_RC" = 0
kt_finish
