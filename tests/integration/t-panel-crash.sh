#!/bin/bash
# Crash and panel outage (issue #3): usage written to the outbox survives `kill -9` before the
# push; a restart while the panel is down serves the stored node and users (clients keep
# working, katana does not exit); when the panel is back the pending usage is pushed.
# Checks: the panel's totals equal exactly what katana counted before the kill (SIGUSR1
# snapshot, which the outbox held at kill time) plus what the second run counted.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/panel.sh"
kt_need ss-local curl sqlite3
needs_katana "panel client" || skip_all "needs katana"

U1=$(kt_uuid)
echo_start
panel_start 30 1 "1:$U1"   # pushes far apart: the kill falls between the outbox write and the push
kat_config "$T/config.json" 1
kat_start "$T/config.json"
cl_start u1 "$CIPHER" "$U1" "$NODE_PORT"; C1=$CL_PORT
check "user 1 moves 1 MiB" tcp_rt "$C1" ok --bytes "$MIB" --seed a

# wait until the outbox holds exactly what katana counted (sampler fold + one flush)
SNAP1=
for _ in $(seq 1 50); do
    sleep 0.4
    SNAP1=$(kat_snapshot)
    [ -n "$SNAP1" ] && [ "$(outbox_pending)" = "$SNAP1" ] && break
done
echo "before the kill: katana counted [$SNAP1], outbox [$(outbox_pending)]"
check "the outbox holds what katana counted" test "$(outbox_pending)" = "$SNAP1"
check "nothing was pushed yet" test -z "$(panel_totals)"
kill -KILL "$SRV_PID"
kt_wait_exit "$SRV_PID" 5 || true

panel_ctl down '{"down": true}'
kat_start "$T/config.json"
check "restart with the panel down: users served from the stored state" \
    tcp_rt "$C1" ok --bytes "$MIB" --seed b
check "katana keeps running while the panel is down" kt_alive "$SRV_PID"
check "katana logged that it serves the stored state" grep -q "serving the stored state" "$SRV_LOG"
panel_ctl down '{"down": false}'
check "pending usage pushed once the panel is back" wait_outbox_empty 60
srv_usage_mark
kat_stop
check "second run exits 0" test "$SRV_RC" = 0
FINAL2=$(srv_usage)
kat_start "$T/config.json"
check "the third start pushed what the stop left" wait_outbox_empty 60
kat_stop
check "panel totals = counted before the kill + counted by the second run" \
    same_totals "billed" "$(sum_lines "$SNAP1" "$FINAL2")" "$(panel_totals)"
kt_finish
