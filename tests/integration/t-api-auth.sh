#!/bin/bash
# REST API access and node status (issue 4): with a token every route but /healthz answers 401
# {"error":"unauthorized"} without it or with a wrong one; node status and sync; /healthz is 200
# once every node applied and 503 while a node of the config is not applied; and katana refuses
# to start (exit 1, nothing bound) when api.listen is not loopback and no token is set.
. "$(dirname "$0")/lib.sh"
kt_need curl jq
[ "$KT_SERVER" = katana ] || skip_all "the REST API needs katana"

TOKEN=s3cret-$$
U1=$(kt_uuid)
kt_ports 3; API_PORT=${PORTS[1]}; PUB_PORT=${PORTS[2]}
mkconfig "$T/config.json" "${PORTS[0]}" aes-256-gcm --user "1:$U1"
cp "$T/config.json" "$T/plain.json"
jq --arg l "127.0.0.1:$API_PORT" --arg t "$TOKEN" '.api = {listen: $l, token: $t}' \
    "$T/plain.json" >"$T/config.json"

# --- refusal to serve a public address without a token ---------------------------------
jq --arg l "0.0.0.0:$PUB_PORT" '.api = {listen: $l}' "$T/plain.json" >"$T/public.json"
BIN=$(katana_bin)
RC=0; timeout 10 "$BIN" run -c "$T/public.json" >"$T/public.log" 2>&1 || RC=$?
cat "$T/public.log"
check "run on 0.0.0.0 without a token exits 1" test "$RC" = 1
check "and says why" grep -q 'api.token: required when api.listen (0.0.0.0:'"$PUB_PORT"') is not a loopback address' "$T/public.log"
not_listening() { ! "${KT_PY[@]}" wait-port --port "$PUB_PORT" --timeout 0.5 >/dev/null 2>&1; }
check "nothing listens on the port" not_listening
RC=0; "$BIN" check -c "$T/public.json" >"$T/check.log" 2>&1 || RC=$?
check "check refuses the same config (exit 1)" test "$RC" = 1
jq --arg l "0.0.0.0:$PUB_PORT" '.api = {listen: $l, tokn: "x"}' "$T/plain.json" >"$T/typo.json"
RC=0; "$BIN" check -c "$T/typo.json" >"$T/typo.log" 2>&1 || RC=$?
check "an unknown api key is refused with its path" grep -q 'api.tokn: unknown key' "$T/typo.log"

# --- auth ------------------------------------------------------------------------------
srv_start "$T/config.json"
kt_wait_port "$API_PORT" 10 || { fail "API did not listen on $API_PORT"; exit 1; }
# req DESC EXPECTED_STATUS EXPECTED_BODY_OR_- CURL_ARGS...
req() {
    local desc=$1 want=$2 body=$3 st; shift 3
    st=$(curl -sS -m 10 -o "$T/body" -w '%{http_code}' "$@")
    if [ "$st" = "$want" ] && { [ "$body" = - ] || [ "$(cat "$T/body")" = "$body" ]; }; then
        pass "$desc ($st $(head -c 200 "$T/body"))"
    else
        fail "$desc (got $st '$(cat "$T/body")', expected $want '$body')"
    fi
}
U=http://127.0.0.1:$API_PORT
UNAUTH='{"error":"unauthorized"}'
for route in /v1/nodes /v1/connections /v1/usage /metrics /v1/nodes/t1; do
    req "GET $route without a token" 401 "$UNAUTH" "$U$route"
done
req "DELETE without a token closes nothing" 401 "$UNAUTH" -X DELETE "$U/v1/connections"
req "a wrong token" 401 "$UNAUTH" -H "Authorization: Bearer ${TOKEN}x" "$U/v1/nodes"
req "a token prefix" 401 "$UNAUTH" -H "Authorization: Bearer ${TOKEN%?}" "$U/v1/nodes"
req "another scheme" 401 "$UNAUTH" -H "Authorization: Basic $TOKEN" "$U/v1/nodes"
req "an unknown route is also 401 without a token" 401 "$UNAUTH" "$U/v1/nope"
AUTH=(-H "Authorization: Bearer $TOKEN")
req "/healthz needs no token, 200 once the node applied" 200 '{"status":"ok"}' "$U/healthz"
req "the right token" 200 - "${AUTH[@]}" "$U/v1/nodes"
check "node t1: local panel, pulled and applied at epoch 1 with 1 user, no secret" \
    jq -e '.nodes | length == 1 and .[0].tag == "t1" and .[0].panel.type == "local"
           and .[0].last_pull.ok and (.[0].last_pull.time | test("Z$")) and .[0].applied
           and .[0].epoch == 1 and .[0].users == 1 and .[0].sessions == 0 and .[0].flows == 0
           and .[0].outbox.pending_bytes == 0' "$T/body"
check "no user secret anywhere in the answer" bash -c "! grep -q '$U1' '$T/body'"
req "one node by tag" 200 - "${AUTH[@]}" "$U/v1/nodes/t1"
check "it is t1" jq -e '.tag == "t1"' "$T/body"
req "an unknown node" 404 '{"error":"no node zz"}' "${AUTH[@]}" "$U/v1/nodes/zz"
req "an unknown route" 404 '{"error":"not found"}' "${AUTH[@]}" "$U/v1/nope"
req "a wrong method" 405 '{"error":"method not allowed"}' "${AUTH[@]}" -X POST "$U/v1/connections"
req "a query key on a route without any" 400 '{"error":"unknown query key \"x\""}' "${AUTH[@]}" "$U/v1/nodes?x=1"
req "a flow id that is not a number" 400 '{"error":"not a flow id: abc"}' "${AUTH[@]}" -X DELETE "$U/v1/connections/abc"
req "usage answers per user" 200 - "${AUTH[@]}" "$U/v1/usage"
check "usage has a users array" jq -e '.users | type == "array"' "$T/body"

# --- HEAD and request bodies ------------------------------------------------------------
req "HEAD /healthz is answered like GET" 200 - -I "$U/healthz"
req "HEAD /metrics is answered like GET" 200 - -I "${AUTH[@]}" "$U/metrics"
check "... with the metrics' content type" grep -qi '^content-type: text/plain' "$T/body"
req "HEAD /metrics without a token" 401 - -I "$U/metrics"
head -c 1048576 /dev/zero >"$T/big"
# big DESC STATUS BODY CURL_ARGS...: a 1 MiB POST to sync t1 answers STATUS and BODY with no
# "100 Continue" before it (curl sends "Expect: 100-continue")
big() {
    local desc=$1 want=$2 body=$3 st; shift 3
    st=$(curl -sS -m 10 -v -o "$T/body" -w '%{http_code}' -X POST --data-binary @"$T/big" \
        -H 'Expect: 100-continue' "$@" "$U/v1/nodes/t1/sync" 2>"$T/big.err") || true
    if [ "$st" = "$want" ] && [ "$(cat "$T/body")" = "$body" ] &&
        ! grep -q '< HTTP/1.1 100' "$T/big.err"; then
        pass "$desc ($st $(cat "$T/body"))"
    else
        fail "$desc (got $st '$(cat "$T/body")', expected $want '$body')"
        grep '^< HTTP' "$T/big.err" || true
    fi
}
TOO_BIG='{"error":"request body larger than 65536 bytes"}'
big "1 MiB without a token: 401 at once" 401 "$UNAUTH"
big "1 MiB with the token: 413 at once" 413 "$TOO_BIG" "${AUTH[@]}"
ST=$(curl -sS -m 10 -o "$T/body" -w '%{http_code}' -X POST --data-binary @"$T/big" \
    -H 'Transfer-Encoding: chunked' "${AUTH[@]}" "$U/v1/nodes/t1/sync") || true
check "1 MiB chunked with the token: 413 once read" test "$ST $(cat "$T/body")" = "413 $TOO_BIG"
# issue 33: two Content-Length headers that disagree leave the body's length unknown: 400
raw_status() { # CL1 CL2 BODY: the status line of a raw request with both headers
    python3 - "$API_PORT" "$TOKEN" "$@" <<'PY'
import socket, sys
port, token, a, b, body = sys.argv[1:6]
s = socket.create_connection(("127.0.0.1", int(port)), timeout=5)
s.sendall(("POST /v1/nodes/t1/sync HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
           "Content-Length: %s\r\nContent-Length: %s\r\n\r\n%s" % (token, a, b, body)).encode())
print(s.recv(4096).split(b"\r\n", 1)[0].decode())
PY
}
check "two Content-Length headers that disagree: 400" \
    test "$(raw_status 3 5 abcde)" = "HTTP/1.1 400 Bad Request"
check "two equal Content-Length headers: served" \
    test "$(raw_status 3 3 abc)" = "HTTP/1.1 202 Accepted"
check "no internal error logged" bash -c "! grep -q 'internal error' '$T/server.log'"

# --- sync and health -----------------------------------------------------------------------
SRV_LOG=$T/server.log
req "sync an unknown node" 404 '{"error":"no node zz"}' "${AUTH[@]}" -X POST "$U/v1/nodes/zz/sync"
req "sync t1" 202 '{"node":"t1","queued":true}' "${AUTH[@]}" -X POST "$U/v1/nodes/t1/sync"
synced() { grep -q 'node t1: sync requested' "$SRV_LOG" && grep -q 'config reloaded' "$SRV_LOG"; }
check "the control loop pulled again" bash -c "for i in \$(seq 50); do grep -q 'config reloaded' '$SRV_LOG' && exit 0; sleep 0.1; done; exit 1"
check "and logged the API's request" synced
# a storm of syncs folds into a few reloads (as SIGHUPs do), not one per request
reloads() { grep -c 'config reloaded' "$SRV_LOG"; }
infos() { grep -c 'INFO.*sync requested' "$SRV_LOG"; }
N0=$(reloads); S0=$(infos)
STORM=(); for _ in $(seq 100); do STORM+=("$U/v1/nodes/t1/sync"); done
curl -s -m 60 "${AUTH[@]}" -X POST "${STORM[@]}" >/dev/null   # one after another
sleep 1
NR=$(($(reloads) - N0)); NS=$(($(infos) - S0))
echo "100 sync requests: $NR reloads, $NS 'sync requested' INFO lines"
check "100 sync requests: at least one reload, and at most 20" test "$NR" -ge 1 -a "$NR" -le 20
check "100 sync requests: at most 20 'sync requested' INFO lines" test "$NS" -le 20
# a reload that adds node t2 whose users file is missing is refused: t2 never applied → 503
# and rotates api.token, which a reload does not apply: it says so (the old token still works)
jq '.nodes += [.nodes[0] | .tag = "t2" | .panel.users_file = "missing-users.json" | del(.panel.users)]
    | .api.token = "rotated"' \
    "$T/config.json" >"$T/c2.tmp" && mv "$T/c2.tmp" "$T/config.json"
kill -HUP "$SRV_PID"
check "the reload warns that api.token needs a restart" kt_until 5 \
    grep -q 'WARN.*api.token changed: restart to apply it' "$SRV_LOG"
unhealthy() { for i in $(seq 50); do [ "$(curl -s -o /dev/null -w '%{http_code}' "$U/healthz")" = 503 ] && return 0; sleep 0.1; done; return 1; }
check "/healthz is 503 while node t2 has not applied" unhealthy
req "t2 shows its failed pull" 200 - "${AUTH[@]}" "$U/v1/nodes/t2"
check "t2: not applied, last pull failed with a reason" \
    jq -e '.applied == false and .last_pull.ok == false and (.last_pull.error | length) > 0' "$T/body"
check "daemon still runs" srv_alive
srv_stop
check "SIGTERM: daemon exits 0" test "$SRV_RC" = 0
kt_finish
