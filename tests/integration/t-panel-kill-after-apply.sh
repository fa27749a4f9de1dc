#!/bin/bash
# kill -9 right after the panel applied a push (issue #3): the panel has the batch, katana died
# before it heard the answer, so the outbox still holds the batch and the next start sends it
# again. This measures the at-least-once window in the crash case: exactly one batch billed
# twice, nothing lost, nothing else duplicated.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/panel.sh"
kt_need ss-local curl sqlite3
needs_katana "panel client" || skip_all "needs katana"

U1=$(kt_uuid)
echo_start
# pushes 10 s apart: the outbox is read while no push can empty it, and the fault set next
# meets the next push (a 2 s interval raced the read under load)
panel_start 10 1 "1:$U1"
kat_config "$T/config.json" 1
kat_start "$T/config.json"
cl_start u1 "$CIPHER" "$U1" "$NODE_PORT"; C1=$CL_PORT
check "user 1 moves 1 MiB" tcp_rt "$C1" ok --bytes "$MIB" --seed a

# idle from here on: wait until the outbox holds all that katana counted, then let the next
# push be applied and left unanswered
SNAP1=
for _ in $(seq 1 50); do
    sleep 0.4
    SNAP1=$(kat_snapshot)
    [ -n "$SNAP1" ] && [ "$(outbox_pending)" = "$SNAP1" ] && break
done
check "the outbox holds what katana counted" test "$(outbox_pending)" = "$SNAP1"
panel_ctl fault '{"endpoint": "push", "faults": ["apply_hang:30"]}'
for _ in $(seq 1 250); do [ -n "$(panel_totals)" ] && break; sleep 0.1; done
check "the panel applied the push" test "$(panel_totals)" = "$SNAP1"
kill -KILL "$SRV_PID"
kt_wait_exit "$SRV_PID" 5 || true
check "the batch is still in the outbox after the kill" test "$(outbox_pending)" = "$SNAP1"

kat_start "$T/config.json"
check "the restart re-sent the batch" wait_outbox_empty 30
srv_usage_mark
kat_stop
check "second run exits 0" test "$SRV_RC" = 0
FINAL2=$(srv_usage)
check "panel totals = the batch twice (+ what the second run counted)" \
    same_totals "billed" "$(sum_lines "$(sum_lines "$SNAP1" "$SNAP1")" "$FINAL2")" "$(panel_totals)"
kt_finish
