#!/bin/bash
# REST API fields fed by the panel loop (issues 3 and 4), with real curl against a uniproxy node
# served by the UniProxy emulator and two real ss-local clients. While the panel answers every
# push with HTTP 500: /v1/nodes shows the panel type and URL (never the token), a failed last
# push, outbox pending bytes > 0; /v1/usage shows per node, per user unreported bytes; /metrics
# counts push requests with status 500. Once the panel accepts: the last push is ok, the outbox
# pending bytes and every user's unreported bytes go to 0, the per node, per user totals equal
# katana's own counts (SIGUSR1 usage lines, wire bytes) and the panel's billed totals, the
# request counters grew (push 200 appears) and the page still passes `promtool check metrics`.
# While the panel answers 502: each failed pull shows in last_pull (ok false, its error, a new
# time) and the node stays applied. A reload that changes the panel's token and timeout and
# db.flush_interval warns that each needs a restart. A first start with the panel down and no
# stored state lists the node as not applied with its pull error; /healthz counts it.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/panel.sh"
kt_need ss-local curl sqlite3 jq promtool
needs_katana "panel client" || skip_all "needs katana"

U1=$(kt_uuid); U2=$(kt_uuid)
echo_start
panel_start 1 1 "1:$U1" "2:$U2"
FAULTS=$(python3 -c 'import json; print(json.dumps({"endpoint": "push", "faults": ["500"] * 1000}))')
panel_ctl fault "$FAULTS"
kat_config "$T/config.json" 1
kat_start "$T/config.json"
A="http://127.0.0.1:$API_PORT"
api() { curl -sS -m 10 "$A$1"; }
cl_start u1 "$CIPHER" "$U1" "$NODE_PORT"; C1=$CL_PORT
cl_start u2 "$CIPHER" "$U2" "$NODE_PORT"; C2=$CL_PORT
check "user 1 moves 1 MiB" tcp_rt "$C1" ok --bytes "$MIB" --seed a
check "user 2 moves 2 x 100 kB" tcp_rt "$C2" ok --bytes 100000 --conns 2 --seed b

# wait_jq SECONDS ROUTE FILTER: poll ROUTE until the jq FILTER holds (the body in $T/body).
wait_jq() {
    local i
    for ((i = 0; i < $1 * 5; i++)); do
        api "$2" >"$T/body" 2>/dev/null && jq -e "$3" "$T/body" >/dev/null && return 0
        sleep 0.2
    done
    echo "last body of $2: $(cat "$T/body")"
    return 1
}
# metric NAME_WITH_LABELS: its value in $T/metrics.txt, or 0.
metric() { awk -v k="$1" '$1 == k { v = $2 } END { print v + 0 }' "$T/metrics.txt"; }
# config_reqs: config requests of node n1 with any status (200 first, then 304s).
config_reqs() {
    awk 'index($1, "katana_panel_requests_total{node=\"n1\",endpoint=\"config\",") == 1 { v += $2 }
         END { print v + 0 }' "$T/metrics.txt"
}
PUSH500='katana_panel_requests_total{node="n1",endpoint="push",status="500"}'
PUSH200='katana_panel_requests_total{node="n1",endpoint="push",status="200"}'

# --- the panel refuses every push ------------------------------------------------------------
check "/v1/nodes: a failed last push and pending outbox bytes" wait_jq 30 /v1/nodes \
    '.nodes[0].last_push.ok == false and .nodes[0].outbox.pending_bytes > 0'
check "the node's panel: uniproxy at the emulator's URL" jq -e --arg u "http://127.0.0.1:$PANEL_PORT" \
    '.nodes[0].tag == "n1" and .nodes[0].panel.type == "uniproxy" and .nodes[0].panel.url == $u
     and (.nodes[0].last_push.time | test("Z$")) and (.nodes[0].last_push.error | test("500"))
     and (.nodes[0].outbox.oldest | test("Z$"))' "$T/body"
check "no panel token and no user secret in /v1/nodes" \
    bash -c "! grep -q -e '$PANEL_TOKEN' -e '$U1' -e '$U2' '$T/body'"
check "/v1/usage: node n1 has both users with unreported bytes" wait_jq 10 /v1/usage \
    '(.nodes | length) == 1 and .nodes[0].node == "n1"
     and ([.nodes[0].users[] | select(.unreported.up > 0 and .unreported.down > 0)
           | .user] == [1, 2]) and .unreported.up > 0'
api /metrics >"$T/metrics.txt"
M500=$(metric "$PUSH500"); MCFG=$(config_reqs)
echo "while failing: push 500 = $M500, config = $MCFG"
check "/metrics counts the refused pushes (status 500)" test "$M500" -ge 1
check "/metrics shows the node's pending outbox bytes" \
    awk '$1 == "katana_outbox_pending_bytes{node=\"n1\"}" && $2 > 0 { f = 1 } END { exit !f }' \
    "$T/metrics.txt"
check "promtool check metrics accepts the page while pushes fail" \
    promtool check metrics <"$T/metrics.txt"

# --- the panel accepts -----------------------------------------------------------------------
panel_ctl fault '{"endpoint": "push", "faults": []}'
check "/v1/nodes: the last push ok, nothing pending" wait_jq 30 /v1/nodes \
    '.nodes[0].last_push.ok == true and .nodes[0].last_push.error == null
     and .nodes[0].outbox.pending_bytes == 0 and .nodes[0].outbox.oldest == null'
check "/v1/usage: nothing unreported for any user" wait_jq 30 /v1/usage \
    '.unreported == {"up": 0, "down": 0}
     and ([.nodes[].users[] | .unreported.up + .unreported.down] | add) == 0'
API_TOTALS=$(jq -r '.nodes[] | select(.node == "n1") | .users[] | "\(.user) \(.up) \(.down)"' \
    "$T/body")
KAT=$(kat_snapshot)
check "per node, per user totals equal katana's own counts" same_totals "api" "$KAT" "$API_TOTALS"
check "and the panel billed exactly that" same_totals "billed" "$KAT" "$(panel_totals)"
api /metrics >"$T/metrics.txt"
echo "after: push 500 = $(metric "$PUSH500"), push 200 = $(metric "$PUSH200"), config = $(config_reqs)"
check "/metrics counts accepted pushes (status 200)" test "$(metric "$PUSH200")" -ge 1
check "the push 500 counter did not go back" test "$(metric "$PUSH500")" -ge "$M500"
check "the config request counter grew (pulls every second)" test "$(config_reqs)" -gt "$MCFG"
check "/metrics outbox pending is 0" grep -q -x 'katana_outbox_pending_bytes{node="n1"} 0' \
    "$T/metrics.txt"
check "promtool check metrics accepts the page after the pushes" \
    promtool check metrics <"$T/metrics.txt"

# --- pulls that fail: each one's outcome shows, the served state stays ------------------------
panel_ctl down '{"down": true}'
check "/v1/nodes: a failed pull shows with its error, the node stays applied" wait_jq 10 \
    /v1/nodes '.nodes[0].last_pull.ok == false and (.nodes[0].last_pull.error | test("502"))
               and .nodes[0].applied and .nodes[0].users == 2'
T1=$(jq -r '.nodes[0].last_pull.time' "$T/body")
check "the next failed pull moves last_pull.time" wait_jq 10 /v1/nodes \
    ".nodes[0].last_pull.ok == false and .nodes[0].last_pull.time != \"$T1\""
panel_ctl down '{"down": false}'
check "/v1/nodes: a good pull again" wait_jq 10 /v1/nodes \
    '.nodes[0].last_pull.ok == true and .nodes[0].last_pull.error == null'

# --- a reload does not apply the panel's token or timeout, nor db.*: it says so --------------
cp "$T/config.json" "$T/config.orig"
python3 -c 'import json, sys
c = json.load(open(sys.argv[1])); p = c["nodes"][0]["panel"]
p["token"] = "other"; p["timeout"] = 7; c["db"]["flush_interval"] = 9
json.dump(c, open(sys.argv[1], "w"))' "$T/config.json"
kill -HUP "$SRV_PID"
for key in 'nodes\[0\]\.panel\.token' 'nodes\[0\]\.panel\.timeout' 'db\.flush_interval'; do
    check "reload: WARN $key changed: restart to apply it" \
        kt_until 5 grep -q "WARN ag.main $key changed: restart to apply it" "$SRV_LOG"
done
check "reload: no secret in the warnings" bash -c "! grep -q -e other -e '$PANEL_TOKEN' '$SRV_LOG'"
cp "$T/config.orig" "$T/config.json"
kat_stop
check "SIGTERM: katana exits 0" test "$SRV_RC" = 0

# --- a first start (no stored state) with the panel down ------------------------------------
rm -f "$T"/katana.db*
panel_ctl down '{"down": true}'
kt_bg server "$(katana_bin)" run -c "$T/config.json"
SRV_PID=$BG_PID
check "first start, panel down: /v1/nodes lists n1, not applied, with its pull error" \
    wait_jq 15 /v1/nodes '(.nodes | length) == 1 and .nodes[0].tag == "n1"
                          and .nodes[0].applied == false and .nodes[0].last_pull.ok == false
                          and (.nodes[0].last_pull.error | test("502"))'
check "first start, panel down: /v1/nodes/n1 answers" wait_jq 5 /v1/nodes/n1 '.tag == "n1"'
check "first start, panel down: /healthz 503 counts n1 as not applied" bash -c \
    "curl -s -m 5 '$A/healthz' | jq -e '.status == \"starting\" and .nodes_not_applied == 1'"
kat_stop
check "SIGTERM: katana exits 0" test "$SRV_RC" = 0
kt_finish
