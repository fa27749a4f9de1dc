#!/bin/bash
# A refused panel answer never becomes the "last good" state (issue 15; the V2bX#55 crash-loop
# class). The emulator serves a user list with a duplicate id, later a node with cipher
# rc4-md5, each with restarts in between, then healthy answers; finally katana starts on a stored
# state it refuses (as an older version could have stored it) while the panel serves it too.
# Checks: a refused answer is logged once (its ETag kept: not re-applied at every pull) and not
# stored, /v1/nodes shows it as a failed pull (the node stays applied); after a restart katana keeps running and serves the previous good state; the healthy
# answer applies (real ss-local traffic for a new user, /v1/nodes shows its users) and is
# stored; a refused stored state is skipped with one warning naming the node and the reason,
# the panel's answer is fetched in full (not 304), /healthz says 503 and nothing listens until
# the panel is healthy, then the node serves; a stored state whose port another program holds is
# dropped the same way (one warning) and the node serves on the port the panel has moved it to;
# every stop exits 0.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/panel.sh"
kt_need ss-local curl sqlite3
needs_katana "panel client" || skip_all "needs katana"

U1=$(kt_uuid); U2=$(kt_uuid); U3=$(kt_uuid)
GOOD1="{\"users\": [{\"id\": 1, \"uuid\": \"$U1\"}]}"
DUP="{\"users\": [{\"id\": 1, \"uuid\": \"$U1\"}, {\"id\": 2, \"uuid\": \"$U2\"},
                  {\"id\": 2, \"uuid\": \"$U3\"}]}"
GOOD2="{\"users\": [{\"id\": 1, \"uuid\": \"$U1\"}, {\"id\": 2, \"uuid\": \"$U2\"}]}"
echo_start
panel_start 1 1 "1:$U1"
kat_config "$T/config.json" 1
kat_start "$T/config.json"
cl_start u1 "$CIPHER" "$U1" "$NODE_PORT"; C1=$CL_PORT
cl_start u2 "$CIPHER" "$U2" "$NODE_PORT"; C2=$CL_PORT
check "user 1 is served" tcp_rt "$C1" ok

mark() { MARK=$(stat -c %s "$SRV_LOG"); }
since_mark() { tail -c +"$((MARK + 1))" "$SRV_LOG"; }
# wait_log SECONDS ERE: the log since the mark matches ERE within SECONDS.
wait_log() {
    local i
    for ((i = 0; i < $1 * 10; i++)); do
        since_mark | grep -qE "$2" && return 0
        sleep 0.1
    done
    return 1
}
stored() { sqlite3 "$T/katana.db" "SELECT body FROM panel_state WHERE node = 'n1' AND kind = $1"; }
users_stored() { stored 1 | grep -q "$1"; }    # UUID
users_not_stored() { ! users_stored "$1"; }
config_not_stored() { ! stored 0 | grep -q "$1"; }
both_served() { tcp_rt "$C1" ok && tcp_rt "$C2" ok; }
not_listening() { ! kt_wait_port "$NODE_PORT" 0.5 2>/dev/null; }
# node_users: the user count /v1/nodes shows for n1 once it applied, else "none".
node_users() {
    curl -s -m 2 "http://127.0.0.1:$API_PORT/v1/nodes" | python3 -c '
import json, sys
n = [x for x in json.load(sys.stdin)["nodes"] if x["tag"] == "n1"]
print(n[0]["users"] if n and n[0]["applied"] else "none")' 2>/dev/null || echo none
}
healthz() { curl -s -m 2 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$API_PORT/healthz"; }
restart() {
    kat_stop
    check "$1: katana exits 0 on SIGTERM" test "$SRV_RC" = 0
    mark
    kat_start "$T/config.json"
}

# --- 1. a user list with a duplicate id, katana running ---------------------------------------
check "the first panel state was stored after it applied" kt_until 5 users_stored "$U1"
mark
panel_ctl users "$DUP"
check "the duplicate id is refused" wait_log 10 "reload refused.*user set n1: duplicate user 2"
sleep 3   # three more pulls: 304 each (the ETag of the refused answer is kept)
check "the refused answer is not offered again at every pull (refused once)" \
    test "$(since_mark | grep -c 'reload refused')" = 1
check "katana keeps running" kt_alive "$SRV_PID"
check "user 1 is still served" tcp_rt "$C1" ok
check "the refused user list was not stored" users_not_stored "$U3"
check "/v1/nodes: the refused pull is not ok, names the reason, n1 stays applied" python3 -c '
import json, sys, urllib.request
n = json.load(urllib.request.urlopen(sys.argv[1], timeout=5))["nodes"][0]
p = n["last_pull"]
sys.exit(0 if n["applied"] and not p["ok"] and "duplicate user 2" in p["error"] else 1)' \
    "http://127.0.0.1:$API_PORT/v1/nodes"

# --- 2. restart while the panel still serves it ------------------------------------------------
restart "duplicate id"
check "after the restart: user 1 served from the previous good state" tcp_rt "$C1" ok
check "after the restart: the panel's answer is refused again" \
    wait_log 10 "reload refused.*user set n1: duplicate user 2"
check "after the restart: katana keeps running" kt_alive "$SRV_PID"

# --- 3. the panel is healthy again -----------------------------------------------------------
mark
panel_ctl users "$GOOD2"
check "healthy panel: applied" wait_log 10 "config reloaded"
check "healthy panel: users 1 and 2 are served" both_served
check "healthy panel: /v1/nodes shows 2 users" test "$(node_users)" = 2
check "healthy panel: the healthy list was stored" users_stored "$U2"

# --- 4. a node with cipher rc4-md5, with a restart in between --------------------------------
mark
panel_ctl config "$(python3 -c '
import json, sys
c = json.load(open(sys.argv[1])); c["cipher"] = "rc4-md5"; print(json.dumps(c))' \
    "$T/panel-config.json")"
check "rc4-md5 is refused" \
    wait_log 10 "reload refused.*node n1: unsupported shadowsocks cipher \"rc4-md5\""
check "the rc4-md5 node was not stored" config_not_stored rc4-md5
restart "rc4-md5"
check "after the restart: user 2 served ($CIPHER, the previous good node)" tcp_rt "$C2" ok
check "after the restart: rc4-md5 is refused again" \
    wait_log 10 "reload refused.*unsupported shadowsocks cipher \"rc4-md5\""
check "after the restart: katana keeps running" kt_alive "$SRV_PID"
mark
panel_ctl config "$(cat "$T/panel-config.json")"
check "healthy node again: applied" wait_log 10 "config reloaded"
check "healthy node again: users 1 and 2 are served" both_served

# --- 5. start on a stored state this version refuses, the panel serving it too ----------------
kat_stop
check "katana exits 0 on SIGTERM" test "$SRV_RC" = 0
panel_ctl users "$DUP"
python3 - "$T/katana.db" "$DUP" <<'PY'
import hashlib, json, sqlite3, sys
db, text = sys.argv[1:3]
body = json.dumps(json.loads(text), separators=(",", ":")).encode()   # as the emulator sends it
etag = '"%s"' % hashlib.sha1(body).hexdigest()
c = sqlite3.connect(db)
c.execute("UPDATE panel_state SET body = ?, etag = ? WHERE node = 'n1' AND kind = 1", (body, etag))
c.commit()
PY
mark
kt_bg server "$(katana_bin)" run -c "$T/config.json"
SRV_PID=$BG_PID
check "a refused stored state: skipped with one warning naming the node and the reason" \
    wait_log 10 "WARN ag.uplink node n1: stored panel state skipped, waiting for the panel: user set n1: duplicate user 2"
check "the panel's answer was fetched in full and refused (no 304 for a dropped state)" \
    wait_log 10 "reload refused.*user set n1: duplicate user 2"
check "katana keeps running" kt_alive "$SRV_PID"
check "one warning for the stored state" test "$(since_mark | grep -c 'stored panel state')" = 1
check "/healthz says 503 while nothing applied" test "$(healthz)" = 503
check "nothing listens on the node's port" not_listening
panel_ctl users "$GOOD2"
check "healthy panel: the node listens" kt_wait_port "$NODE_PORT" 10
check "healthy panel: users 1 and 2 are served" both_served
check "healthy panel: /healthz says 200" kt_until 5 test "$(healthz)" = 200
check "healthy panel: the healthy list replaced the refused one in the store" \
    kt_until 5 users_not_stored "$U3"

# --- 6. the stored node's port is taken, and the panel has moved the node since ----------------
kat_stop
check "katana exits 0 on SIGTERM" test "$SRV_RC" = 0
kt_bg squatter python3 -c '
import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(8); time.sleep(300)' \
    "$NODE_PORT"
SQUATTER=$BG_PID
kt_wait_port "$NODE_PORT" 10 || fail "the squatter did not listen"
kt_ports 1; NEW_PORT=${PORTS[0]}
panel_ctl config "$(python3 -c '
import json, sys
c = json.load(open(sys.argv[1])); c["server_port"] = int(sys.argv[2]); print(json.dumps(c))' \
    "$T/panel-config.json" "$NEW_PORT")"
mark
kt_bg server "$(katana_bin)" run -c "$T/config.json"
SRV_PID=$BG_PID
check "a stored state that cannot bind: one warning naming the node and the reason" \
    wait_log 10 "WARN ag.uplink node n1: stored panel state did not apply, waiting for the panel: .*binding 127.0.0.1:$NODE_PORT"
check "the node serves on the panel's new port" kt_wait_port "$NEW_PORT" 10
check "katana keeps running" kt_alive "$SRV_PID"
cl_start u1-new "$CIPHER" "$U1" "$NEW_PORT"
check "user 1 is served on the new port" tcp_rt "$CL_PORT" ok
kill -TERM "$SQUATTER"
kat_stop
check "katana exits 0 on SIGTERM" test "$SRV_RC" = 0
kt_finish
