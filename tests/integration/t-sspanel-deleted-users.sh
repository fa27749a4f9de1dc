#!/bin/bash
# Issue 24: SSPanel applies a traffic batch entry by entry with no transaction and answers 500 at
# the first user it no longer has, after billing the entries before it (PANEL.md §2.6). katana
# holds such a batch, settles it against a users list pulled after the 500 (billed prefix gone,
# deleted users' usage dropped and kept in the store), and resends only the rest.
#  1. users 11..15 move traffic, the panel deletes 12 and 14: one push bills 11 and fails at 12;
#     the settlement drops 12 and 14 and resends 13 and 15; five push periods later the totals
#     have not moved (nothing billed twice);
#  2. a 500 with no deleted user: the batch is sent again whole;
#  3. a 500 at a newly deleted user (15), then the panel down and `kill -9` while the batch is
#     held: the restart keeps the hold and settles it once the panel is back.
# At the end, for every user: billed + dropped = what katana counted, and only 12, 14 and 15
# have dropped rows.
PANEL_TYPE=sspanel
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/panel.sh"
kt_need ss-local curl sqlite3 jq
needs_katana "panel client" || skip_all "needs katana"

declare -A UU CP
for u in 11 12 13 14 15; do UU[$u]=$(kt_uuid); done
echo_start
panel_start 1 60 "11:${UU[11]}" "12:${UU[12]}" "13:${UU[13]}" "14:${UU[14]}" "15:${UU[15]}"
kat_config "$T/config.json" 1
kat_start "$T/config.json"
for u in 11 12 13 14 15; do
    cl_start "u$u" "$CIPHER" "${UU[$u]}" "$NODE_PORT"; CP[$u]=$CL_PORT
done

# deleted_failures: the pushes the emulator failed at a deleted user.
deleted_failures() {
    panel_ctl state | jq '[.pushes[] | select(.fault == "deleted")] | length'
}
wait_failures() { # N SECONDS
    local i
    for ((i = 0; i < $2 * 10; i++)); do
        [ "$(deleted_failures)" -ge "$1" ] && return 0
        sleep 0.1
    done
    return 1
}
dropped_rows() { # "UID UP DOWN" kept as dropped
    sqlite3 "$T/katana.db" "SELECT uid, SUM(up), SUM(down) FROM usage_dropped GROUP BY uid
                            ORDER BY uid" | tr '|' ' '
}
held_batches() { sqlite3 "$T/katana.db" "SELECT COUNT(*) FROM usage_hold"; }
metric() { curl -sf "http://127.0.0.1:$API_PORT/metrics" | awk -v k="$1" '$1 == k { print $2 }'; }

# 1. the panel deletes 12 and 14 after katana pulled (its next pull is 60 s away); the panel is
# down while the five move traffic, so that one batch holds them all
panel_ctl deleted '{"ids": [12, 14]}'
panel_ctl down '{"down": true}'
for u in 11 12 13 14 15; do
    check "user $u moves 256 KiB" tcp_rt "${CP[$u]}" ok --bytes 262144 --seed "a$u"
done
outbox_has_five() { [ "$(outbox_pending | wc -l)" = 5 ]; }
check "the outbox holds the five users" kt_until 15 outbox_has_five
panel_ctl down '{"down": false}'
check "a push failed at deleted user 12" wait_failures 1 20
check "the batch was settled" \
    kt_until 15 grep -q "settled: 1 users billed before the failure" "$SRV_LOG"
check "user 12 logged as dropped" grep -q "user 12 is no longer on the panel" "$SRV_LOG"
check "user 14 logged as dropped" grep -q "user 14 is no longer on the panel" "$SRV_LOG"
check "the rest reached the panel" wait_outbox_empty 15
BILLED1=$(panel_totals)
sleep 5 # five push periods: nothing of the batch goes again
check "five push periods later the totals are unchanged" same_totals "after 5 periods" \
    "$BILLED1" "$(panel_totals)"
check "users 12 and 14 were never billed" \
    test -z "$(awk '$1 == 12 || $1 == 14' <<<"$(panel_totals)")"
check "one failure only" test "$(deleted_failures)" = 1
check "/metrics counts two dropped users" \
    test "$(metric 'katana_usage_dropped_users_total{node="n1"}')" = 2
check "/metrics counts their bytes" \
    test "$(metric 'katana_usage_dropped_bytes_total{node="n1"}')" -gt 0

# 2. a 500 that no deleted user explains: the batch goes again whole
panel_ctl fault '{"endpoint": "push", "faults": ["500"]}'
check "user 11 moves 256 KiB" tcp_rt "${CP[11]}" ok --bytes 262144 --seed b11
check "no user explained the 500" kt_until 15 grep -q "none explains its failure" "$SRV_LOG"
check "the batch was resent" wait_outbox_empty 15
BILLED2=$(panel_totals)

# 3. 15 deleted, 13 and 15 move traffic: the push bills 13 and fails at 15; the users list
# cannot be pulled, then the panel is down and katana is killed while the batch is held
panel_ctl fault "{\"endpoint\": \"user\", \"faults\": [$(printf '"502",%.0s' {1..40})\"502\"]}"
panel_ctl deleted '{"ids": [12, 14, 15]}'
check "user 13 moves 256 KiB" tcp_rt "${CP[13]}" ok --bytes 262144 --seed c13
check "user 15 moves 256 KiB" tcp_rt "${CP[15]}" ok --bytes 262144 --seed c15
check "a push failed at deleted user 15" wait_failures 2 15
panel_ctl down '{"down": true}'
# what part 3 moved is all in the outbox, 13's billed rows too (until the settlement)
stored() { sum_lines "$(sum_lines "$BILLED2" "$(outbox_pending)")" "$(dropped_rows)"; }
for _ in $(seq 1 50); do
    SNAP1=$(kat_snapshot)
    [ "$(stored)" = "$(sum_lines "$SNAP1" "")" ] && break
    sleep 0.2
done
check "the batch is held" test "$(held_batches)" = 1
check "billed before part 3 + pending + dropped = counted before the kill" same_totals \
    "before the kill" "$SNAP1" "$(stored)"
kill -KILL "$SRV_PID"
kt_wait_exit "$SRV_PID" 5 || true
srv_usage_mark
kat_start "$T/config.json"
check "the restart keeps the hold" kt_until 10 grep -q "waits for a fresh user list" "$SRV_LOG"
sleep 2
check "still held while the panel is down" test "$(held_batches)" = 1
panel_ctl fault '{"endpoint": "user", "faults": []}'
panel_ctl down '{"down": false}'
check "the held batch was settled after the restart" wait_outbox_empty 30
check "user 15 logged as dropped" grep -q "user 15 is no longer on the panel" "$SRV_LOG"
sleep 3
check "two failures only" test "$(deleted_failures)" = 2
srv_usage_mark
kat_stop
check "katana exits 0" test "$SRV_RC" = 0
FINAL2=$(srv_usage)
COUNTED=$(sum_lines "$SNAP1" "$FINAL2")
check "billed + dropped = counted, per user" same_totals "billed + dropped" "$COUNTED" \
    "$(sum_lines "$(panel_totals)" "$(dropped_rows)")"
check "only 12, 14 and 15 have dropped usage" \
    test "$(dropped_rows | awk '{ printf "%s ", $1 }')" = "12 14 15 "
check "all of 12's usage was dropped" \
    test "$(awk '$1 == 12' <<<"$COUNTED")" = "$(dropped_rows | awk '$1 == 12')"
kt_finish
