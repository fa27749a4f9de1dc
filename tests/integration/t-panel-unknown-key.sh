#!/bin/bash
# Unknown keys in a panel's node body (docs/configuration.md "Rules worth knowing"): the node
# applies (a client relays through it), and each unknown key is warned about once, naming it
# and the nearest known key, not on every pull: the panel changes the body (a new push
# interval, the same unknown keys) and katana pulls it again several times. The local half
# (refused) is t-config-keys.sh.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/panel.sh"
kt_need ss-local curl
needs_katana "panel client" || skip_all "needs katana"

U1=$(kt_uuid)
echo_start
panel_start 1 1 "1:$U1"
# with_extra PUSH_S: the panel's body with two keys katana does not know
with_extra() {
    python3 -c '
import json, sys
c = json.load(open(sys.argv[1]))
c["new_panel_field"] = {"enabled": True}
c["srever_port"] = 9
c["base_config"]["push_interval"] = int(sys.argv[2])
print(json.dumps(c))' "$T/panel-config.json" "$1"
}
panel_ctl config "$(with_extra 1)"
kat_config "$T/config.json" 1
kat_start "$T/config.json"
cl_start u1 "$CIPHER" "$U1" "$NODE_PORT"
check "the node with unknown keys applied: user 1 relays" tcp_rt "$CL_PORT" ok

sleep 3 # pulls every second, the same body
panel_ctl config "$(with_extra 2)"
kt_until 10 grep -q "push interval 2 s" "$SRV_LOG"
check "katana took the changed body (push interval 2 s)" grep -q "push interval 2 s" "$SRV_LOG"
sleep 3
pulls=$(panel_hits config)
echo "config pulls: $pulls"
check "katana pulled the config several times" test "$pulls" -ge 5
n1=$(grep -c 'node n1: node body: unknown key new_panel_field, ignored' "$SRV_LOG" || true)
n2=$(grep -c 'node n1: node body: unknown key srever_port (did you mean "server_port"?), ignored' \
    "$SRV_LOG" || true)
echo "warnings: new_panel_field $n1, srever_port $n2"
check "new_panel_field: one warning in $pulls pulls" test "$n1" = 1
check "srever_port: one warning naming server_port" test "$n2" = 1
check "the node still relays" tcp_rt "$CL_PORT" ok
kat_stop
kt_finish
