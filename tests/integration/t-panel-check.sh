#!/bin/bash
# `katana check` on a remote panel node (issue 14): it fetches the panel once and reports what
# a run would apply, without binding, storing or pushing anything; `--offline` skips the panel;
# a panel that is down or refuses fails the check with the reason. PANEL_TYPE=sspanel (the
# t-sspanel-check.sh wrapper) runs the same checks against mod_mu.
# Checks: stdout names the node's protocol, port and user count and ends "Configuration OK.";
# the panel got exactly one node and one users request, no report; the node port stays free and
# no database is created; --offline names the node as not contacted and sends nothing; with the
# panel down the check exits 1 naming the answer; what run refuses at start is refused by check
# too, naming the setting: a node listen, api.listen or the panel's listen_ip that is not an
# address of this host, db.path in a missing directory (run names db.path as well); a bad key
# (token) exits 1 naming it.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/panel.sh"
kt_need curl
needs_katana "katana check" || skip_all "needs katana"

panel_start 60 60 "1:$(kt_uuid)" "2:$(kt_uuid)"
kat_config "$T/config.json" 1
BIN=$(katana_bin)
RC=0; OUT=$(timeout 20 "$BIN" check -c "$T/config.json" 2>&1) || RC=$?
echo "$OUT"
check "check exits 0" test "$RC" = 0
check "check reports what it would apply" \
    grep -q "node n1: shadowsocks on port $NODE_PORT, 2 users" <<<"$OUT"
check "check ends with Configuration OK." grep -q "Configuration OK." <<<"$OUT"
check "one node request" test "$(panel_hits config)" = 1
check "one users request" test "$(panel_hits user)" = 1
check "no usage push" test "$(panel_hits push)" = 0
check "nothing stored (no database)" test ! -e "$T/katana.db"
check "the node port was not bound" python3 -c '
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))' "$NODE_PORT"

RC=0; OUT=$(timeout 20 "$BIN" check --offline -c "$T/config.json" 2>&1) || RC=$?
check "--offline exits 0" test "$RC" = 0
check "--offline names the node it skipped" grep -q "node n1: $PANEL_TYPE panel not contacted" <<<"$OUT"
check "--offline sends nothing" test "$(panel_hits config)" = 1

panel_ctl down '{"down": true}'
RC=0; OUT=$(timeout 20 "$BIN" check -c "$T/config.json" 2>&1) || RC=$?
echo "$OUT"
check "panel down: check exits 1" test "$RC" = 1
check "panel down: the reason is named" grep -q "configuration invalid: .*HTTP 502" <<<"$OUT"
panel_ctl down '{"down": false}'

# what run would refuse at start: an address this host does not have (192.0.2.1, TEST-NET-1;
# only a scratch socket is bound, port 0), a database in a missing directory
variant() { # NAME PYTHON-EDIT-OF-c: $T/NAME.json
    python3 -c 'import json, sys
c = json.load(open(sys.argv[1])); exec(sys.argv[2]); json.dump(c, open(sys.argv[3], "w"))' \
        "$T/config.json" "$2" "$T/$1.json"
}
variant listen 'c["nodes"][0]["listen"] = "192.0.2.1"'
variant api 'c["api"] = {"listen": "192.0.2.1:9", "token": "t"}'
variant db 'c["db"]["path"] = c["db"]["path"].replace("katana.db", "missing-dir/katana.db")'
variant panel-listen 'del c["nodes"][0]["listen"]'
refused() { # NAME EXPECTED-ERE: check exits 1 naming the setting
    local rc=0 out
    out=$(timeout 20 "$BIN" check -c "$T/$1.json" 2>&1) || rc=$?
    echo "$1: check rc $rc: $out"
    test "$rc" = 1 && grep -qE "configuration invalid: $2" <<<"$out"
}
check "a node listen address not on this host: check names nodes[0].listen" \
    refused listen "nodes\[0\]\.listen: 192\.0\.2\.1 is not an address of this host"
check "an api.listen address not on this host: check names api.listen" \
    refused api "api\.listen: 192\.0\.2\.1:9 is not an address of this host"
check "db.path in a missing directory: check names db.path" \
    refused db "db\.path: .*missing-dir/katana\.db: directory .*missing-dir: No such file"
RC=0; OUT=$(timeout 10 "$BIN" run -c "$T/db.json" 2>&1) || RC=$?
echo "run with db.path in a missing directory: rc $RC: $OUT"
check "db.path in a missing directory: run exits 1 naming db.path" \
    bash -c "[ $RC = 1 ] && grep -q 'katana: db\.path: .*missing-dir' <<<'$OUT'"
# issue 33: a read-only database directory (a tmpfs remounted read-only): check refuses what run
# refuses
if kt_mount_tmpfs "$T/ro" 1m && mount -o remount,ro "$T/ro" 2>/dev/null; then
    variant ro 'c["db"]["path"] = c["db"]["path"].replace("katana.db", "ro/katana.db")'
    check "db.path in a read-only directory: check names db.path" \
        refused ro "db\.path: .*ro/katana\.db: directory .*ro is not writable: Read-only file"
    RC=0; OUT=$(timeout 10 "$BIN" run -c "$T/ro.json" 2>&1) || RC=$?
    echo "run with db.path in a read-only directory: rc $RC: $OUT"
    check "db.path in a read-only directory: run refuses it too" test "$RC" = 1
else
    echo "no tmpfs could be mounted read-only here: the read-only directory case is not run"
fi
if [ "$PANEL_TYPE" != sspanel ]; then # mod_mu has no listen_ip
    panel_ctl config "$(python3 -c '
import json, sys
c = json.load(open(sys.argv[1])); c["listen_ip"] = "192.0.2.1"; print(json.dumps(c))' \
        "$T/panel-config.json")"
    check "the panel's listen_ip not on this host: check names it" \
        refused panel-listen "node n1: the panel's listen_ip: 192\.0\.2\.1 is not an address"
    panel_ctl config "$(cat "$T/panel-config.json")"
fi

sed -i "s/\"token\": \"$PANEL_TOKEN\"/\"token\": \"wrong\"/" "$T/config.json"
RC=0; OUT=$(timeout 20 "$BIN" check -c "$T/config.json" 2>&1) || RC=$?
echo "$OUT"
check "bad token: check exits 1" test "$RC" = 1
check "bad token: the panel's answer is named" \
    grep -qE "configuration invalid: .*(token is error|Invalid request)" <<<"$OUT"
kt_finish
