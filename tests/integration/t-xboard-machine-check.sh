#!/bin/bash
# `katana check` on an Xboard machine entry (issue 14, PANEL.md §1.1): it fetches the machine's
# node list once (POST machine/nodes), then each listed node's config and users once, and
# reports what a run would apply, without binding, storing, pushing or opening the channel;
# `--offline` skips the panel; a machine list the panel refuses fails the check with the reason.
# Checks: stdout names the list, each served node's protocol, port and user count, and the
# skipped node of a type katana does not serve, then "Configuration OK."; the panel got one
# machine/nodes request and one config and one user request per served node, no report, no
# handshake; the node ports stay free and no database is created; --offline names the machine
# entry as not contacted and sends nothing; a wrong machine token exits 1 naming the answer.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/panel.sh"
kt_need curl
needs_katana "katana check" || skip_all "needs katana"
PANEL_TYPE=xboard

panel_start 60 60 "1:$(kt_uuid)"   # node mode state, unused: the machine's nodes answer
kt_ports 1; P12=${PORTS[0]}
machine_set 60 "$(ss_node 11 "$NODE_PORT" "1:$(kt_uuid)" "2:$(kt_uuid)"),
    $(ss_node 12 "$P12" "3:$(kt_uuid)"),
    \"13\": {\"type\": \"hysteria\", \"config\": {}, \"users\": {\"users\": []}}"
machine_kat_config "$T/config.json"
BIN=$(katana_bin)
RC=0; OUT=$(timeout 20 "$BIN" check -c "$T/config.json" 2>&1) || RC=$?
echo "$OUT"
check "check exits 0" test "$RC" = 0
check "check names the machine's list" grep -q "node m: machine 7 lists 3 nodes" <<<"$OUT"
check "check reports node 11" grep -q "node m-11: shadowsocks on port $NODE_PORT, 2 users" <<<"$OUT"
check "check reports node 12" grep -q "node m-12: shadowsocks on port $P12, 1 user" <<<"$OUT"
check "check names the node it does not serve" \
    grep -q "node m-13: type hysteria not served, skipped" <<<"$OUT"
check "check ends with Configuration OK." grep -q "Configuration OK." <<<"$OUT"
check "one machine/nodes request" test "$(panel_hits machine/nodes)" = 1
check "one config request per served node" test "$(panel_hits config)" = 2
check "one users request per served node" test "$(panel_hits user)" = 2
check "no usage push, no handshake" \
    test "$(panel_hits push)$(panel_hits handshake)$(panel_hits machine/status)" = 000
check "nothing stored (no database)" test ! -e "$T/katana.db"
check "the node ports were not bound" python3 -c '
import socket, sys
for p in sys.argv[1:]:
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", int(p)))' "$NODE_PORT" "$P12"

RC=0; OUT=$(timeout 20 "$BIN" check --offline -c "$T/config.json" 2>&1) || RC=$?
check "--offline exits 0" test "$RC" = 0
check "--offline names the machine it skipped" grep -q "node m: xboard panel not contacted" <<<"$OUT"
check "--offline sends nothing" test "$(panel_hits machine/nodes)" = 1

sed -i "s/\"token\": \"$MACHINE_TOKEN\"/\"token\": \"wrong\"/" "$T/config.json"
RC=0; OUT=$(timeout 20 "$BIN" check -c "$T/config.json" 2>&1) || RC=$?
echo "$OUT"
check "bad machine token: check exits 1" test "$RC" = 1
check "bad machine token: the panel's answer is named" \
    grep -q "configuration invalid: node m: machine 7: .*403" <<<"$OUT"
kt_finish
