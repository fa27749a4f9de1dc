#!/bin/bash
# Keys in a local node body (docs/configuration.md "Rules worth knowing"): `katana check` and
# `katana run` refuse a key katana does not know, naming its path and the nearest known key
# ("shortid" in tls_settings: did you mean "short_id"?); a missing key is named as missing,
# with the key to write (tls_settings.private_key, the panel's node_type, users_file). The
# good REALITY config checks OK (control). The panel half (an unknown key in a panel's
# answer: applied, one warning) is t-panel-unknown-key.sh.
. "$(dirname "$0")/lib.sh"
needs_katana "katana check on local node bodies" || exit 77

KATANA=$(katana_bin)
[ -x "$KATANA" ] || { fail "katana binary not found at $KATANA"; exit 1; }
kt_ports 1; PORT=${PORTS[0]}

python3 - "$T" "$PORT" "$(kt_uuid)" <<'PY'
import copy, json, sys
d, port, uuid = sys.argv[1], int(sys.argv[2]), sys.argv[3]
good = {"nodes": [{"tag": "r", "listen": "127.0.0.1", "panel": {
    "type": "local", "node_type": "vless",
    "node": {"server_port": port, "tls": 2, "network": "tcp", "flow": "xtls-rprx-vision",
             "tls_settings": {"server_name": "www.example.com", "server_port": "443",
                              "short_id": "0123abcd",
                              "private_key": "ePp2S7cdPqHjMRxLK-QWjm6XqZp2SA7yokuDqXwN1Fo"}},
    "users": {"users": [{"id": 1, "uuid": uuid}]}}}]}
def variant(name, edit):
    c = copy.deepcopy(good)
    edit(c["nodes"][0]["panel"])
    json.dump(c, open("%s/%s.json" % (d, name), "w"))
def rename(obj, old, new):
    obj[new] = obj.pop(old)
variant("good", lambda p: None)
variant("shortid", lambda p: rename(p["node"]["tls_settings"], "short_id", "shortid"))
variant("privateKey", lambda p: rename(p["node"]["tls_settings"], "private_key", "privateKey"))
variant("no-private-key", lambda p: p["node"]["tls_settings"].pop("private_key"))
variant("srever-port", lambda p: rename(p["node"], "server_port", "srever_port"))
variant("no-node-type", lambda p: p.pop("node_type"))
def users_file(p):
    p.pop("users"); p["users_file"] = "no-such-users.json"
variant("no-users-file", users_file)
PY

out=$(timeout 10 "$KATANA" check -c "$T/good.json" 2>&1) && rc=0 || rc=$?
echo "good: rc $rc: $out"
check "good REALITY config: katana check says Configuration OK." \
    bash -c "[ $rc = 0 ] && grep -q 'Configuration OK.' <<<'$out'"

# refused NAME ERROR: `katana check` exits 1 printing exactly ERROR (fixed text), and `katana
# run` exits non-zero at start with it in its log.
refused() {
    local name=$1 want=$2 out rc=0
    out=$(timeout 10 "$KATANA" check -c "$T/$name.json" 2>&1) || rc=$?
    echo "$name: check rc $rc: $out"
    check "$name: katana check exits 1" test "$rc" = 1
    check "$name: katana check says: $want" grep -qF -- "$want" <<<"$out"
    rc=0
    timeout 10 "$KATANA" run -c "$T/$name.json" >"$T/run-$name.log" 2>&1 || rc=$?
    echo "$name: run rc $rc: $(head -c 400 "$T/run-$name.log")"
    check "$name: katana run exits non-zero at start (not by timeout)" \
        bash -c "[ $rc != 0 ] && [ $rc != 124 ] && [ $rc -lt 128 ]"
    check "$name: katana run logs the same error" grep -qF -- "$want" "$T/run-$name.log"
}

refused shortid \
    'node r: node body: tls_settings.shortid: unknown key (did you mean "short_id"?)'
refused privateKey \
    'node r: node body: tls_settings.privateKey: unknown key (did you mean "private_key"?)'
refused no-private-key 'node r: tls_settings.private_key: missing'
refused srever-port 'node r: node body: srever_port: unknown key (did you mean "server_port"?)'
refused no-node-type 'node r: node body: node_type: missing'
refused no-users-file "node r: users_file: $T/no-such-users.json: No such file or directory"

if "${KT_PY[@]}" wait-port --port "$PORT" --timeout 0.2 >/dev/null 2>&1; then
    fail "something listens on the config's port after the refused starts"
else
    pass "nothing was left listening"
fi
kt_finish
