#!/bin/bash
# Device limit race (issue 12): the check and the insertion of a new IP are one step across
# workers. 50 clear VLESS connections of one user (device_limit 2) from 4 loopback source
# addresses (127.0.0.2..5), all sending their request at one instant to a katana with 4 workers,
# admit exactly 2 addresses: every connection from those two gets its echo, none from the others.
# KATANA_TEST_ADMIT_DELAY_MS widens the window between an admission's check and its insertion
# (20 ms) so that the race, a few microseconds wide otherwise, is hit on every run when the two
# are separate steps. Then, after the burst, a connection from one of the losers is still refused
# while the winners hold nothing: sessions end with their connections.
. "$(dirname "$0")/lib.sh"
[ "$KT_SERVER" = katana ] || skip_all "device limit needs katana"

U1=$(kt_uuid)
echo_start
kt_ports 1
SRV=${PORTS[0]}
mkconfig "$T/config.json" "$SRV" aes-256-gcm --protocol vless --workers 4 --user "1:$U1:2"
export KATANA_TEST_ADMIT_DELAY_MS=20
srv_start "$T/config.json"
unset KATANA_TEST_ADMIT_DELAY_MS

"${KT_PY[@]}" vlessburst --port "$SRV" --uuid "$U1" --dest-port "$ECHO_PORT" \
    --sources 127.0.0.2,127.0.0.3,127.0.0.4,127.0.0.5 --conns 50 --timeout 10 >"$T/burst.out"
cat "$T/burst.out"
winners=$(awk '$2 > 0' "$T/burst.out" | wc -l)
check "exactly 2 of 4 source addresses admitted" test "$winners" = 2
check "every connection from an admitted address served" \
    test "$(awk '$2 > 0 && $2 != $3' "$T/burst.out" | wc -l)" = 0
check "all 50 connections answered or refused" \
    test "$(awk '{ n += $3 } END { print n }' "$T/burst.out")" = 50

# The winners' sessions are gone with their connections: any two addresses may come in again.
ok=1
for _ in $(seq 1 50); do
    "${KT_PY[@]}" vlessburst --port "$SRV" --uuid "$U1" --dest-port "$ECHO_PORT" \
        --sources 127.0.0.4,127.0.0.5 --conns 2 --timeout 5 >"$T/again.out"
    if [ "$(awk '$2 == 1' "$T/again.out" | wc -l)" = 2 ]; then ok=0; break; fi
    sleep 0.2
done
cat "$T/again.out"
check "two new addresses admitted once the burst's sessions ended" test "$ok" = 0

check "daemon still runs" srv_alive
check "no log line per refused connection" test "$(grep -ci 'device' "$SRV_LOG")" = 0
srv_stop
check "daemon exits 0 on SIGTERM" test "$SRV_RC" = 0
kt_finish
