#!/bin/bash
# Panel data katana refuses instead of serving it wrongly (issue 15), through a local panel:
# two users sharing one uuid (one key, two users: usage would go to whichever comes first), and
# node settings katana does not serve (network grpc / ws, tls, obfs, a plugin other than
# v2ray-plugin, v2ray-plugin with Mux.Cool, multiplex).
# Checks: `katana check` exits 1 naming both user ids, or naming the field; a running katana
# given a shared uuid by SIGHUP refuses the reload naming both users and keeps serving.
. "$(dirname "$0")/lib.sh"
kt_need ss-local
needs_katana "katana check / reload refusals" || skip_all "needs katana"

KATANA=$(katana_bin)
[ -x "$KATANA" ] || { fail "katana binary not found at $KATANA"; exit 1; }
U1=$(kt_uuid); U2=$(kt_uuid)
kt_ports 1; PORT=${PORTS[0]}
mkconfig "$T/good.json" "$PORT" aes-256-gcm --user "1:$U1" --user "2:$U2" \
    --users-file "$T/users.json"
python3 - "$T" "$U1" <<'PY'
import json, sys
d, u1 = sys.argv[1:3]
good = json.load(open(d + "/good.json"))
def variant(name, edit):
    c = json.loads(json.dumps(good)); edit(c)
    json.dump(c, open("%s/%s.json" % (d, name), "w"))
node = lambda c: c["nodes"][0]["panel"]["node"]
variant("grpc", lambda c: node(c).update(network="grpc", networkSettings={"serviceName": "x"}))
variant("ws", lambda c: node(c).update(network="ws"))
variant("tls", lambda c: node(c).update(tls=1))
variant("obfs", lambda c: node(c).update(obfs="http", obfs_settings={"host": "a.test"}))
variant("plugin", lambda c: node(c).update(plugin="obfs-local", plugin_opts="obfs=http"))
# the v2ray-plugin's mux is a number (0: no Mux.Cool, N: Mux.Cool)
variant("plugin-mux", lambda c: node(c).update(plugin="v2ray-plugin", plugin_opts="server;mux=on"))
variant("multiplex", lambda c: node(c).update(multiplex={"enabled": True}))
# the Xboard shape of a plain shadowsocks node: every such key null
variant("xboard-nulls", lambda c: node(c).update(network=None, networkSettings=None, plugin=None,
                                                  plugin_opts=None, server_key=None))
users = json.load(open(d + "/users.json"))
users["users"].append({"id": 3, "uuid": u1})
json.dump(users, open(d + "/users-shared.json", "w"))
PY

kcheck() { timeout 10 "$KATANA" check -c "$1" 2>&1; }

out=$(kcheck "$T/good.json") && rc=0 || rc=$?
check "the good config checks OK" test "$rc" = 0
out=$(kcheck "$T/xboard-nulls.json") && rc=0 || rc=$?
echo "xboard-nulls: rc $rc: $out"
check "a node body with Xboard's null transport keys checks OK" test "$rc" = 0

expect_refused() { # NAME TEXT
    local out rc
    out=$(kcheck "$T/$1.json") && rc=0 || rc=$?
    echo "$1: rc $rc: $out"
    check "$1: katana check exits 1" test "$rc" = 1
    check "$1: the error says '$2'" grep -qF "$2" <<<"$out"
}
expect_refused grpc 'node t1: network "grpc": not served'
expect_refused ws 'node t1: network "ws": not served'
expect_refused tls 'node t1: tls: not served'
expect_refused obfs 'node t1: obfs "http": not served'
expect_refused plugin 'node t1: plugin "obfs-local": not served'
expect_refused plugin-mux 'node t1: plugin_opts: mux "on": not a number'
expect_refused multiplex 'node t1: multiplex: not served'

cp "$T/users.json" "$T/users.good"
cp "$T/users-shared.json" "$T/users.json"
expect_refused good 'user set t1: users 1 and 3 have the same secret'
rc=0
timeout 10 "$KATANA" run -c "$T/good.json" >"$T/run-shared.log" 2>&1 || rc=$?
echo "run with a shared uuid: rc $rc: $(head -c 300 "$T/run-shared.log")"
check "katana run with a shared uuid exits 1 at start" test "$rc" = 1
check "katana run names both users" grep -q "users 1 and 3 have the same secret" "$T/run-shared.log"

# a running katana: the shared uuid comes by SIGHUP
cp "$T/users.good" "$T/users.json"
echo_start
srv_start "$T/good.json"
cl_start u1 aes-256-gcm "$U1" "$PORT"
check "user 1 is served" tcp_rt "$CL_PORT" ok
cp "$T/users-shared.json" "$T/users.json"
srv_reload
echo "reload: $SRV_RELOAD_LOG"
check "the reload is refused naming both users" \
    grep -q "reload refused.*users 1 and 3 have the same secret" <<<"$SRV_RELOAD_LOG"
check "user 1 is still served" tcp_rt "$CL_PORT" ok
srv_stop
check "katana exits 0" test "$SRV_RC" = 0
kt_finish
