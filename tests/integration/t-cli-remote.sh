#!/bin/bash
# katana status, top and kill (agent/cli_remote.c, agent/cli_top.c) against a running katana:
# two users' ss-local clients move data while `status` lists the node and the users, `top
# --once` shows the busy user, `top` under tmux redraws and quits on q, `kill FLOW_ID` and
# `kill --user` cut the chosen connections; a wrong token and a closed port are named.
. "$(dirname "$0")/lib.sh"
kt_need ss-local curl jq
[ "$KT_SERVER" = katana ] || skip_all "the REST API needs katana"
KATANA=$(katana_bin)

CIPHER=aes-256-gcm
TOKEN=t0ken-$$
U1=$(kt_uuid); U2=$(kt_uuid)
echo_start
kt_ports 3; API_PORT=${PORTS[1]}; DEAD_PORT=${PORTS[2]}
mkconfig "$T/config.json" "${PORTS[0]}" "$CIPHER" --user "1:$U1" --user "2:$U2"
jq --arg l "127.0.0.1:$API_PORT" --arg t "$TOKEN" '.api = {listen: $l, token: $t}' \
    "$T/config.json" >"$T/c.tmp" && mv "$T/c.tmp" "$T/config.json"
jq '.api.token = "wrong-token"' "$T/config.json" >"$T/wrong.json"
jq --arg l "127.0.0.1:$DEAD_PORT" '.api.listen = $l' "$T/config.json" >"$T/dead.json"
srv_start "$T/config.json"
kt_wait_port "$API_PORT" 10 || { fail "API did not listen on $API_PORT"; exit 1; }
cl_start u1 "$CIPHER" "$U1" "$(srv_user_port 1)"; C1=$CL_PORT
cl_start u2 "$CIPHER" "$U2" "$(srv_user_port 2)"; C2=$CL_PORT

api() { curl -sS -m 10 -H "Authorization: Bearer $TOKEN" "http://127.0.0.1:$API_PORT$1"; }
flow_of() { api /v1/connections | jq -r --argjson u "$1" '.flows[] | select(.user.uid == $u) | .id'; }
nflows() { api /v1/connections | jq '.flows | length'; }
wait_flows() { local i; for i in $(seq 1 100); do [ "$(nflows)" = "$1" ] && return 0; sleep 0.1; done; return 1; }
# expect DESC RC PATTERN CMD...: PASS when CMD exits RC and its output (both streams) has PATTERN.
expect() {
    local what=$1 want=$2 pat=$3 rc=0; shift 3
    "$@" >"$T/out" 2>&1 || rc=$?
    if [ "$rc" = "$want" ] && grep -q -E -- "$pat" "$T/out"; then pass "$what"
    else fail "$what (rc $rc, wanted $want and /$pat/):"; cat "$T/out"; fi
}

# --- status and top --once -------------------------------------------------------------
stream_bg a "$C1" 8000000 200000 cut; PA=$STREAM_PID
stream_bg b "$C2" 8000000 200000 cut; PB=$STREAM_PID
check "two flows are live" wait_flows 2
expect "status lists node t1 (local, applied, 2 users)" 0 '^t1 +local +applied +2 ' \
    "$KATANA" status -c "$T/config.json"
cat "$T/out"
check "status lists users 1 and 2 with one session each" \
    bash -c "grep -E '^ *1 +1 +1 ' '$T/out' && grep -E '^ *2 +1 +1 ' '$T/out'"
expect "top --once shows user 1 moving bytes" 0 '^ *1 +[0-9.]+ [KM]?B/s +[1-9][0-9.]* [KM]?B/s' \
    "$KATANA" top --once -c "$T/config.json"
cat "$T/out"
check "top --once lists both flows" grep -q -E "^ *$(flow_of 2) +2 " "$T/out"

# --- top under tmux ---------------------------------------------------------------------
if command -v tmux >/dev/null 2>&1; then
    SOCK="$T/tmux.sock"
    tmux -S "$SOCK" new-session -d -x 120 -y 40 \
        "stty -a >'$T/stty.before'; '$KATANA' top -c '$T/config.json'; echo \"rc=\$?\" >'$T/top.rc'; stty -a >'$T/stty.after'; sleep 30"
    tmux -S "$SOCK" list-panes -F '#{pane_pid}' >>"$T/pids"
    kt_until 10 bash -c "tmux -S '$SOCK' capture-pane -p | grep -q 'katana top:'"
    tmux -S "$SOCK" capture-pane -p >"$T/screen1"
    sleep 2.5
    tmux -S "$SOCK" capture-pane -p >"$T/screen2"
    check "top draws a screen under tmux" grep -q 'katana top: http' "$T/screen1"
    check "the screen refreshes (tick changes)" bash -c "! cmp -s '$T/screen1' '$T/screen2'"
    cat "$T/screen2"
    tmux -S "$SOCK" send-keys q
    check "q quits top (exit 0)" kt_until 5 grep -q '^rc=0$' "$T/top.rc"
    check "the terminal is restored (stty as before)" kt_until 5 cmp -s "$T/stty.before" "$T/stty.after"
    tmux -S "$SOCK" kill-server 2>/dev/null || true
    rm -f "$T/top.rc" "$T/stty.before" "$T/stty.after"
    # a server of its own: the first one may still be going away on its socket
    SOCK="$T/tmux2.sock"
    tmux -S "$SOCK" new-session -d -x 120 -y 40 \
        "stty -a >'$T/stty.before'; bash -c 'echo \$\$ >\"$T/top.pid\"; exec \"$KATANA\" top -c \"$T/config.json\"'; echo \"rc=\$?\" >'$T/top.rc'; stty -a >'$T/stty.after'; sleep 30"
    tmux -S "$SOCK" list-panes -F '#{pane_pid}' >>"$T/pids"
    kt_until 10 bash -c "tmux -S '$SOCK' capture-pane -p | grep -q 'katana top:'"
    kill -TERM "$(cat "$T/top.pid")"
    check "SIGTERM ends top (exit 143)" kt_until 5 grep -q '^rc=143$' "$T/top.rc"
    check "the terminal is restored after SIGTERM" kt_until 5 cmp -s "$T/stty.before" "$T/stty.after"
    tmux -S "$SOCK" kill-server 2>/dev/null || true
else
    fail "tmux is not installed (tests/setup-deps.sh installs it)"
fi

# --- kill -------------------------------------------------------------------------------
F1=$(flow_of 1)
expect "kill FLOW_ID kills one flow" 0 '^killed 1 flow$' "$KATANA" kill -c "$T/config.json" "$F1"
stream_wait a "$PA" 10 "the killed flow's connection is cut"
check "the API no longer lists flow $F1" test -z "$(flow_of 1)"
expect "the same id again: no live flow" 1 "^katana: no live flow $F1\$" \
    "$KATANA" kill -c "$T/config.json" "$F1"
expect "kill --user 9: nothing" 0 '^killed 0 flows$' "$KATANA" kill -c "$T/config.json" --user 9
expect "kill --user 2 kills user 2's flow" 0 '^killed 1 flow$' \
    "$KATANA" kill -c "$T/config.json" --user 2
stream_wait b "$PB" 10 "user 2's connection is cut"
check "no flow is left" wait_flows 0

# --- errors -----------------------------------------------------------------------------
expect "wrong token" 1 "^katana: the REST API refused the token \(401\): check api.token in $T/wrong.json\$" \
    "$KATANA" status -c "$T/wrong.json"
expect "nothing listening" 1 "^katana: cannot reach the REST API at http://127.0.0.1:$DEAD_PORT: connection refused\$" \
    "$KATANA" status -c "$T/dead.json"
expect "top: nothing listening" 1 "cannot reach the REST API at http://127.0.0.1:$DEAD_PORT: connection refused" \
    "$KATANA" top --once -c "$T/dead.json"
expect "kill: wrong token" 1 "refused the token \(401\)" "$KATANA" kill -c "$T/wrong.json" --all
expect "kill: --user abc is a usage error" 2 'expected a user id' "$KATANA" kill -c "$T/config.json" --user abc
expect "kill: no selector is a usage error" 2 'nothing to kill' "$KATANA" kill -c "$T/config.json"
expect "status --help" 0 '^usage: katana status' "$KATANA" status --help
expect "status: a missing config" 1 'cannot read the configuration' "$KATANA" status -c "$T/none.json"
check "daemon still runs" srv_alive
check "a node without a certificate lists none" \
    bash -c "curl -sS -m 10 -H 'Authorization: Bearer $TOKEN' http://127.0.0.1:$API_PORT/v1/nodes |
             jq -e '.nodes[0].certificate == null' >/dev/null"
srv_stop
check "SIGTERM: daemon exits 0" test "$SRV_RC" = 0

# --- certificate expiry: a Trojan node with a self-signed certificate (365 days) -----------
kt_ports 2; TAPI=${PORTS[1]}
mkconfig "$T/trojan.json" "${PORTS[0]}" "$CIPHER" --protocol trojan --cert-self --user "1:$U1"
jq --arg l "127.0.0.1:$TAPI" --arg t "$TOKEN" '.api = {listen: $l, token: $t}' \
    "$T/trojan.json" >"$T/c.tmp" && mv "$T/c.tmp" "$T/trojan.json"
SRV_LOG=$T/trojan-server.log
srv_start "$T/trojan.json"
kt_wait_port "$TAPI" 10 || { fail "API did not listen on $TAPI"; exit 1; }
expect "status names the certificate's end and the days left (364 or 365)" 0 \
    '^node t1: certificate valid until 20[0-9-]+T[0-9:.]+Z \(36[45] days left\)$' \
    "$KATANA" status -c "$T/trojan.json"
cat "$T/out"
check "/v1/nodes: certificate.not_after about 365 days ahead" \
    bash -c "curl -sS -m 10 -H 'Authorization: Bearer $TOKEN' http://127.0.0.1:$TAPI/v1/nodes |
             jq -e '(.nodes[0].certificate.not_after | sub(\"\\\\.[0-9]+Z$\"; \"Z\") | fromdate) - now
                    | . > 364 * 86400 and . < 366 * 86400' >/dev/null"
srv_stop
check "SIGTERM: the Trojan daemon exits 0" test "$SRV_RC" = 0
kt_finish
