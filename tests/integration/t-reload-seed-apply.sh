#!/bin/bash
# The seeds' apply (issue 24 "The seeds' apply, where katana drifted"; seed 001 "ApplyReport",
# "log lines", "entity ids"; seed 003 FlowEntry::killed, UserStats::label), through the real
# daemon at debug level, its REST API (curl, jq) and ss-local clients:
#  - every commit ends with "applied: N built, N reused, N swapped, N drained" (first start: the
#    outbounds direct and block, the route and the node's inbound are built);
#  - outbound versions count per tag from 1: a reload that rebuilds direct alone makes it
#    direct@v2 (one counter shared by all tags made it v3: block had taken v2), the flow opened
#    before keeps direct@v1 (default drain Keep) and a new one opens on direct@v2;
#  - a build that fails says "building outbound direct@v3 failed: ...", and a refused spec
#    changes nothing: no commit is logged and the next rebuild still takes v3;
#  - a flow killed through the API is closed with "killed": true in the connection events, one
#    that ends by itself with false; the live listing says "killed": false;
#  - the traffic stream's user rows carry the user's label (the panel id in decimal);
#  - moving the node to another port is reported as rebound, not built.
. "$(dirname "$0")/lib.sh"
kt_need ss-local curl jq
needs_katana "the REST API and the apply report" || kt_finish

CIPHER=aes-256-gcm
U1=$(kt_uuid); U2=$(kt_uuid)
echo_start
kt_ports 3; PORT=${PORTS[0]}; API_PORT=${PORTS[1]}; PORT2=${PORTS[2]}
A="http://127.0.0.1:$API_PORT"
# config PORT [OUTBOUND_JSON]: the config for node port PORT, with a top-level outbound
config() {
    mkconfig "$T/base.json" "$1" "$CIPHER" --user "1:$U1" --user "2:$U2" --log-level debug \
        --api-port "$API_PORT"
    jq --argjson o "${2:-null}" 'if $o == null then . else .outbound = $o end' "$T/base.json" \
        >"$T/config.json"
}
# since MARK: what the server logged after byte MARK
since() { tail -c +"$(($1 + 1))" "$SRV_LOG"; }
mark() { stat -c %s "$SRV_LOG"; }
# wait_log MARK ERE: until a line logged after MARK matches ERE (10 s)
wait_log() {
    local i
    for i in $(seq 1 100); do since "$1" | grep -qE "$2" && return 0; sleep 0.1; done
    return 1
}
flows() { curl -sS -m 5 "$A/v1/connections"; }
# wait_flows N: until N flows are live (10 s)
wait_flows() {
    local i
    for i in $(seq 1 100); do
        [ "$(flows | jq '.flows | length')" = "$1" ] && return 0
        sleep 0.1
    done
    return 1
}

config "$PORT"
srv_start "$T/config.json"
kt_wait_port "$API_PORT" 10 || { fail "API did not listen on $API_PORT"; exit 1; }
check "first start: applied: 4 built, 0 reused, 0 swapped, 0 drained" \
    wait_log 0 'applied: 4 built, 0 reused, 0 swapped, 0 drained$'
grep -E 'applied: |apply: ' "$SRV_LOG" || true

kt_bg events curl -sS -N -m 60 -o "$T/ev.sse" "$A/v1/connections/events"
kt_bg traffic curl -sS -N -m 60 -o "$T/tr.sse" "$A/v1/traffic"
for f in ev tr; do
    for i in $(seq 1 100); do grep -q '^: katana stream' "$T/$f.sse" 2>/dev/null && break; sleep 0.1; done
done
events() { "${KT_PY[@]}" sse --file "$T/$1.sse"; }

cl_start u1 "$CIPHER" "$U1" "$PORT"; C1=$CL_PORT
cl_start u2 "$CIPHER" "$U2" "$PORT"; C2=$CL_PORT

# --- versions per tag ----------------------------------------------------------------------
stream_bg old "$C1" 8000000 200000 ok; P_OLD=$STREAM_PID
check "user 1's flow is live" wait_flows 1
check "it opened on direct@v1, not killed" \
    bash -c "curl -sS -m 5 '$A/v1/connections' | jq -e '.flows[0].outbound == \"direct@v1\" and .flows[0].killed == false'"
M=$(mark)
config "$PORT" '{"tcp_nodelay": false}' # the shared direct outbound changes: rebuilt alone
srv_reload
check "reload: applied: 1 built, 3 reused, 0 swapped, 1 drained" \
    wait_log "$M" 'applied: 1 built, 3 reused, 0 swapped, 1 drained$'
since "$M" | grep -E 'applied: |apply: ' || true
stream_bg new "$C2" 8000000 200000 cut; P_NEW=$STREAM_PID
check "two flows are live" wait_flows 2
check "the new flow opened on direct@v2 (per tag), the old one kept direct@v1" \
    bash -c "curl -sS -m 5 '$A/v1/connections' | jq -e '
        ([.flows[] | select(.user.uid == 2)][0].outbound == \"direct@v2\") and
        ([.flows[] | select(.user.uid == 1)][0].outbound == \"direct@v1\")'"

# --- a build that fails --------------------------------------------------------------------
M=$(mark)
config "$PORT" '{"interface": "nosuchif0"}'
srv_reload
check "refused: building outbound direct@v3 failed: interface nosuchif0: ..." \
    wait_log "$M" 'building outbound direct@v3 failed: interface nosuchif0: no such interface on this host'
check "the refused reload committed nothing" bash -c "! grep -q 'applied: ' <<<\"\$(tail -c +$((M + 1)) '$SRV_LOG')\""

# --- killed --------------------------------------------------------------------------------
FN=$(flows | jq -r '[.flows[] | select(.user.uid == 2)][0].id')
check "kill user 2's flow" test "$(curl -sS -m 5 -o /dev/null -w '%{http_code}' -X DELETE "$A/v1/connections/$FN")" = 204
stream_wait new "$P_NEW" 10 "the killed flow's connection is cut"
check "1000 bytes echoed through user 2 (a flow that ends by itself)" tcp_rt "$C2" ok --bytes 1000 --seed fin
touch "$T/old.unpace"
stream_wait old "$P_OLD" 30 "the flow on direct@v1 (drain Keep) echoes every byte to the end"
wait_closed() {
    local i
    for i in $(seq 1 100); do
        [ "$(events ev | jq -s 'map(select(.event == "closed")) | length')" -ge 3 ] && return 0
        sleep 0.1
    done
    return 1
}
check "three closed events" wait_closed
events ev | jq -c 'select(.event == "closed") | .data | {id, outbound, killed, up, down}'
check "closed: the killed flow says killed, the others not" \
    jq -e -s --argjson id "$FN" 'map(select(.event == "closed") | .data) as $c
        | ($c | map(select(.id == $id)) | length) == 1
        and all($c[]; .killed == (.id == $id))
        and ($c | map(select(.killed | not)) | map(.outbound) | sort) == ["direct@v1", "direct@v2"]' \
    < <(events ev)

# --- the stats snapshot's user label -------------------------------------------------------
check "traffic: every user row carries its label, the id in decimal" \
    jq -e -s 'map(select(.event == "traffic") | .data.users[]) as $u
        | ($u | map(.user) | unique) == [1, 2] and all($u[]; .label == (.user | tostring))' \
    < <(events tr)

# --- rebound -------------------------------------------------------------------------------
M=$(mark)
config "$PORT2" '{"tcp_nodelay": false}'
srv_reload
check "moving the node to another port: the agent reports 1 rebound, 0 restarted" \
    wait_log "$M" 'apply: 3 reused, 0 built, 0 swapped, 0 drained, 1 rebound, 0 restarted, 0 removed$'
check "the rebound is inbound t1" wait_log "$M" 'apply: rebound inbound t1$'
check "no new outbound version for a rebind: applied: 0 built" wait_log "$M" 'applied: 0 built, 3 reused, 0 swapped, 0 drained$'
since "$M" | grep -E 'applied: |apply: ' || true
cl_start u1b "$CIPHER" "$U1" "$PORT2"; C3=$CL_PORT
check "the new port serves user 1" tcp_rt "$C3" ok --bytes 4096 --seed moved

# --- the refused build took no version -----------------------------------------------------
M=$(mark)
config "$PORT2" # back to the default socket policy: direct is rebuilt once more
srv_reload
check "reload: applied: 1 built, 3 reused, 0 swapped, 1 drained" \
    wait_log "$M" 'applied: 1 built, 3 reused, 0 swapped, 1 drained$'
stream_bg v3 "$C3" 8000000 200000 cut; P_V3=$STREAM_PID
check "a flow is live" wait_flows 1
check "it opened on direct@v3: the refused build of v3 used no version" \
    bash -c "curl -sS -m 5 '$A/v1/connections' | jq -e '.flows[0].outbound == \"direct@v3\"'"
check "close every flow" test "$(curl -sS -m 5 -X DELETE "$A/v1/connections")" = '{"closed":1}'
stream_wait v3 "$P_V3" 10 "the flow on direct@v3 is cut"

check "daemon still runs" srv_alive
srv_stop
check "SIGTERM: daemon exits 0" test "$SRV_RC" = 0
kt_finish
