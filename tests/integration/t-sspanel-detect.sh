#!/bin/bash
# SSPanel detect rules as block routes (issue 14, PANEL.md §2.6): a plaintext rule the panel adds
# blocks the destinations its regex matches on the next pull; a hex rule (packet bytes) is
# skipped with one warning; the rules are part of the stored state (a restart while the panel is
# down still blocks); a rule the panel removes stops blocking.
# Checks: "localhost" is reachable before the rule, refused after it (other destinations still
# served), refused after a restart with the panel down, reachable after the rule is removed;
# the skipped hex rule gets exactly one warning.
. "$(dirname "$0")/lib.sh"
PANEL_TYPE=sspanel
. "$(dirname "$0")/panel.sh"
kt_need ss-local curl sqlite3
needs_katana "panel client" || skip_all "needs katana"

U1=$(kt_uuid)
echo_start
panel_start 1 1 "1:$U1"
kat_config "$T/config.json" 1
kat_start "$T/config.json"
cl_start u1 "$CIPHER" "$U1" "$NODE_PORT"; C1=$CL_PORT
localhost_ok() { tcp_rt "$C1" ok --dest-host localhost --bytes 4096; }
localhost_refused() { tcp_rt "$C1" refused --dest-host localhost --bytes 4096; }
check "no rule: localhost reachable" localhost_ok

panel_ctl detect_rules '[{"id": 3, "name": "local", "text": "no localhost", "regex": "^localhos[t]$", "type": 1},
                         {"id": 4, "name": "hex", "text": "GET", "regex": "474554", "type": 2}]'
check "the panel's rule blocks localhost after a pull" kt_until 15 localhost_refused
check "other destinations still served" tcp_rt "$C1" ok --bytes 65536
sleep 3  # several more pulls
check "the hex rule is skipped with exactly one warning" \
    test "$(grep -c 'detect_rules: 1 rules skipped' "$SRV_LOG")" = 1

kill -KILL "$SRV_PID"; kt_wait_exit "$SRV_PID" 5 || true
panel_ctl down '{"down": true}'
kat_start "$T/config.json"
check "restart with the panel down: the stored rule still blocks" localhost_refused
check "restart with the panel down: the user is served" tcp_rt "$C1" ok --bytes 4096
panel_ctl down '{"down": false}'

panel_ctl detect_rules '[]'
check "the rule removed in the panel stops blocking" kt_until 15 localhost_ok
kat_stop
check "katana exits 0" test "$SRV_RC" = 0
kt_finish
