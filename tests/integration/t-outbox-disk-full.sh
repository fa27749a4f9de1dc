#!/bin/bash
# Issue 33: a full disk under the store. The SQLite file lives on a small tmpfs that the test
# fills while users move traffic: every flush and push fails for several seconds.
# Checks: one ERROR per failure streak for each store operation (not one per flush), katana keeps
# serving, and once space is back the usage kept in memory is stored and billed exactly.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/panel.sh"
kt_need ss-local curl sqlite3 dd
needs_katana "panel client" || skip_all "needs katana"
kt_mount_tmpfs "$T/disk" 8m || skip_all "cannot mount a tmpfs here (needs root)"

U1=$(kt_uuid)
echo_start
panel_start 1 1 "1:$U1"
kat_config "$T/config.json" 1
sed -i "s|\"path\": \"$T/katana.db\"|\"path\": \"$T/disk/katana.db\"|" "$T/config.json"
grep -q "$T/disk/katana.db" "$T/config.json" || { fail "config not pointed at the tmpfs"; exit 1; }
kat_start "$T/config.json"
cl_start u1 "$CIPHER" "$U1" "$NODE_PORT"; C1=$CL_PORT
check "user 1 moves 256 KiB" tcp_rt "$C1" ok --bytes 262144 --seed a

# fill the disk: every write to the store fails from now on
dd if=/dev/zero of="$T/disk/fill" bs=64k >/dev/null 2>&1 || true
MARK=$(wc -l <"$SRV_LOG")
for s in b c d e f; do
    check "user 1 moves 256 KiB with the disk full ($s)" tcp_rt "$C1" ok --bytes 262144 --seed "$s"
    sleep 1
done
errors() { tail -n "+$((MARK + 1))" "$SRV_LOG" | grep -c "ERROR .*$1.* failed" || true; }
echo "errors while full: write $(errors 'outbox write') read $(errors 'outbox read')"
check "some flush failed (the disk is really full)" \
    test "$(tail -n "+$((MARK + 1))" "$SRV_LOG" | grep -c 'outbox write .* failed')" -ge 2
check "one error for the failed outbox writes" test "$(errors 'outbox write')" = 1
check "at most one error for the failed outbox reads" test "$(errors 'outbox read')" -le 1
check "katana keeps serving" kt_alive "$SRV_PID"

rm -f "$T/disk/fill"
check "the store works again" kt_until 10 grep -q "outbox write .* works again" "$SRV_LOG"
check "the usage kept in memory reached the panel" wait_outbox_empty 15
sleep 2.5 # the sampler folds the last counters; one more flush and push
srv_usage_mark
kat_stop
check "katana exits 0" test "$SRV_RC" = 0
FINAL=$(srv_usage)
kat_start "$T/config.json"
check "the next start pushed what the stop left" wait_outbox_empty 20
kat_stop
check "billed = counted, nothing lost to the full disk" same_totals billed "$FINAL" "$(panel_totals)"
kt_finish
