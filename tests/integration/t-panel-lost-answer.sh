#!/bin/bash
# The at-least-once window, measured (issue #3, PANEL.md §4.1): the panel applies a push and the
# answer is lost (the connection closes before the response). katana cannot know the push was
# applied, keeps the batch and sends it again, merged with later usage.
# Checks: katana retried; the panel's totals exceed katana's own count by exactly the one batch
# whose answer was lost (documented double billing, no more); everything else is exact.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/panel.sh"
kt_need ss-local curl sqlite3
needs_katana "panel client" || skip_all "needs katana"

U1=$(kt_uuid); U2=$(kt_uuid)
echo_start
panel_start 1 1 "1:$U1" "2:$U2"
panel_ctl fault '{"endpoint": "push", "faults": ["apply_close"]}'
kat_config "$T/config.json" 1
kat_start "$T/config.json"
cl_start u1 "$CIPHER" "$U1" "$NODE_PORT"; C1=$CL_PORT
cl_start u2 "$CIPHER" "$U2" "$NODE_PORT"; C2=$CL_PORT
check "user 1 moves 1 MiB" tcp_rt "$C1" ok --bytes "$MIB" --seed a
check "user 2 moves 1 MiB" tcp_rt "$C2" ok --bytes "$MIB" --seed b
for _ in $(seq 1 100); do [ "$(panel_hits push)" -ge 2 ] && break; sleep 0.2; done
sleep 2.5
srv_usage_mark
kat_stop
check "katana exits 0" test "$SRV_RC" = 0
FINAL=$(srv_usage)
kat_start "$T/config.json"
check "the next start pushed what the stop left" wait_outbox_empty 20
kat_stop

# the body of the push whose answer was lost
DUP=$(panel_ctl state | python3 -c '
import json, sys
for p in json.load(sys.stdin)["pushes"]:
    if p["fault"] == "apply_close":
        for uid in sorted(p["body"], key=int):
            print(uid, p["body"][uid][0], p["body"][uid][1])')
echo "batch applied twice: [$(tr '\n' ';' <<<"$DUP")]"
check "the lost-answer push was applied by the panel" test -n "$DUP"
check "katana logged the lost answer" grep -q "push failed, kept for the next one" "$SRV_LOG"
check "panel totals = katana's count + exactly the one re-sent batch" \
    same_totals "billed" "$(sum_lines "$FINAL" "$DUP")" "$(panel_totals)"
kt_finish
