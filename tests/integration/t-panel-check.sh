#!/bin/bash
# `katana check` on a remote panel node (issue 14): it fetches the panel once and reports what
# a run would apply, without binding, storing or pushing anything; `--offline` skips the panel;
# a panel that is down or refuses fails the check with the reason. PANEL_TYPE=sspanel (the
# t-sspanel-check.sh wrapper) runs the same checks against mod_mu.
# Checks: stdout names the node's protocol, port and user count and ends "Configuration OK.";
# the panel got exactly one node and one users request, no report; the node port stays free and
# no database is created; --offline names the node as not contacted and sends nothing; with the
# panel down the check exits 1 naming the answer; a bad key (token) exits 1 naming it.
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

sed -i "s/\"token\": \"$PANEL_TOKEN\"/\"token\": \"wrong\"/" "$T/config.json"
RC=0; OUT=$(timeout 20 "$BIN" check -c "$T/config.json" 2>&1) || RC=$?
echo "$OUT"
check "bad token: check exits 1" test "$RC" = 1
check "bad token: the panel's answer is named" \
    grep -qE "configuration invalid: .*(token is error|Invalid request)" <<<"$OUT"
kt_finish
