#!/bin/bash
# GET /livez and /readyz (issue "The operator's first hour"), with real curl against a uniproxy
# node whose panel (the UniProxy emulator) fails its first config answers: /readyz is 503 and
# names the node and why ("panel: ..." with the HTTP 500) while no spec applied, /livez is 200
# throughout; once the panel answers, /readyz is 200 {"status":"ok"}. With an API token both
# probes need none (as /healthz), while /v1/nodes does.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/panel.sh"
kt_need ss-local curl jq
needs_katana "panel client" || skip_all "needs katana"

U1=$(kt_uuid)
TOKEN=probe-$$
panel_start 1 1 "1:$U1"
FAULTS=$(python3 -c 'import json; print(json.dumps({"endpoint": "config", "faults": ["500"] * 1000}))')
panel_ctl fault "$FAULTS"
kat_config "$T/c.json" 1
jq --arg t "$TOKEN" '.api.token = $t' "$T/c.json" >"$T/config.json"
kt_bg server "$(katana_bin)" run -c "$T/config.json"
SRV_PID=$BG_PID
kt_wait_port "$API_PORT" 20 || { fail "API did not listen on $API_PORT"; exit 1; }
A="http://127.0.0.1:$API_PORT"
# probe ROUTE: "CODE BODY" of an unauthenticated GET
probe() { curl -sS -m 5 -o "$T/body" -w '%{http_code}' "$A$1" 2>/dev/null; echo " $(cat "$T/body" 2>/dev/null)"; }
pull_failed() {
    probe /readyz >"$T/ready"
    grep -q '^503 ' "$T/ready" && sed 's/^503 //' "$T/ready" |
        jq -e '.status == "not ready" and .nodes[0].node == "n1" and
               (.nodes[0].reason | test("^panel: .*500"))' >/dev/null
}
check "/readyz 503 names node n1 and the panel's 500 while no spec applied" kt_until 20 pull_failed
cat "$T/ready"
check "/livez 200 meanwhile" test "$(probe /livez)" = '200 {"status":"ok"}'
check "/healthz 503 meanwhile" grep -q '^503 ' <(probe /healthz)
check "/v1/nodes needs the token (401)" grep -q '^401 ' <(probe /v1/nodes)

panel_ctl fault '{"endpoint": "config", "faults": []}'
ready() { [ "$(probe /readyz)" = '200 {"status":"ok"}' ]; }
check "/readyz 200 once the panel answered and the node applied" kt_until 30 ready
check "the start said it waited, then that it runs (not that a config was reloaded)" \
    bash -c "grep -q \"waiting for the panel's first answer\" '$SRV_LOG' &&
             grep -qE 'INFO ag.main katana .* running$' '$SRV_LOG' && ! grep -q 'config reloaded' '$SRV_LOG'"
check "/livez still 200" test "$(probe /livez)" = '200 {"status":"ok"}'
check "HEAD /readyz is answered" curl -sf -m 5 -I -o /dev/null "$A/readyz"
kat_stop
check "SIGTERM: daemon exits 0" test "$SRV_RC" = 0
kt_finish
