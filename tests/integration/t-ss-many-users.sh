#!/bin/bash
# Issue 13: 1 000 users on one Shadowsocks port, two of them (users 500 and 1000, each behind its
# own ss-local) on the same client IP, taking turns over TCP and UDP. The IP's hint names the
# other user every time: each connection and datagram must still be served as its own user, the
# usage billed to the right users (and no one else), and a returning client must cost a few key
# trials (/metrics: katana_ss_key_trials_total per katana_ss_lookups_total), not a scan of the
# list. The hints survive a graceful restart (kept in db.path): after SIGTERM and a start on the
# same database, the client the IP's hint names is identified in one trial, with no scan.
# Two workers: connections from new source ports land on either (SO_REUSEPORT), and what one
# worker learns about a client IP is told to the other, so a returning client costs no scan
# on a worker it has not met yet.
. "$(dirname "$0")/lib.sh"
kt_need ss-local curl jq
[ "$KT_SERVER" = katana ] || skip_all "the hint table and /metrics need katana"

CIPHER=aes-256-gcm
N=1000
A=500
B=1000
KIB=1024
TOKEN=many-$$
echo_start
kt_ports 2; API_PORT=${PORTS[1]}
mkconfig "$T/config.json" "${PORTS[0]}" "$CIPHER" --users-file "$T/users.json" --workers 2
jq --arg l "127.0.0.1:$API_PORT" --arg t "$TOKEN" --arg db "$T/katana.db" \
    '.api = {listen: $l, token: $t} | .db = {path: $db}' \
    "$T/config.json" >"$T/c.tmp" && mv "$T/c.tmp" "$T/config.json"
python3 - "$N" "$T/users.json" "$T/passwords" <<'PY'
import json, sys, uuid
n = int(sys.argv[1])
users = [{"id": i + 1, "uuid": str(uuid.uuid4()), "speed_limit": None, "device_limit": None}
         for i in range(n)]
json.dump({"users": users}, open(sys.argv[2], "w"))
open(sys.argv[3], "w").write("\n".join(u["uuid"] for u in users) + "\n")
PY
mapfile -t PW <"$T/passwords"
srv_start "$T/config.json"
kt_wait_port "$API_PORT" 10 || { fail "API did not listen on $API_PORT"; exit 1; }
cl_start a "$CIPHER" "${PW[$((A - 1))]}" "$(srv_user_port "$A")"; CA=$CL_PORT
cl_start b "$CIPHER" "${PW[$((B - 1))]}" "$(srv_user_port "$B")"; CB=$CL_PORT

metric() {
    curl -sS -m 10 -H "Authorization: Bearer $TOKEN" "http://127.0.0.1:$API_PORT/metrics" |
        awk -v m="$1" '$1 == m { print $2; f = 1 } END { if (!f) print "none" }'
}

# First logins: each user's key is found by a scan (about 500 and 1000 keys).
check "user $A: first connection echoed" tcp_rt "$CA" ok --bytes 1000 --seed a0 --label a0
check "user $B: first connection echoed" tcp_rt "$CB" ok --bytes 1000 --seed b0 --label b0
L0=$(metric katana_ss_lookups_total); K0=$(metric katana_ss_key_trials_total)
echo "after the first logins: $L0 lookups, $K0 keys tried"

# Then they take turns from the same IP: 4 rounds of TCP (A 100 KiB, B 300 KiB) and UDP.
for r in 1 2 3 4; do
    check "round $r: user $A's connection echoed" tcp_rt "$CA" ok --bytes $((100 * KIB)) --seed "a$r" --label "a$r"
    check "round $r: user $B's connection echoed" tcp_rt "$CB" ok --bytes $((300 * KIB)) --seed "b$r" --label "b$r"
done
for r in 1 2; do
    check "round $r: user $A's datagrams echoed" udp_rt "$CA" ok --count 5 --size 1000 --seed "ua$r"
    check "round $r: user $B's datagrams echoed" udp_rt "$CB" ok --count 5 --size 1000 --seed "ub$r"
done
L1=$(metric katana_ss_lookups_total); K1=$(metric katana_ss_key_trials_total)
echo "after the turns: $L1 lookups, $K1 keys tried"
few_trials() {
    [ "$L0" != none ] && [ "$K1" != none ] || { echo "no katana_ss_* metrics"; return 1; }
    local l=$((L1 - L0)) k=$((K1 - K0))
    echo "the turns: $l lookups tried $k keys (a scan would try about $((l * (A + B) / 2)))"
    [ "$l" -ge 28 ] && [ "$k" -le $((3 * l)) ]   # 8 connections, at least 20 datagrams
}
check "returning clients cost at most 3 key trials each, not a scan of $N users" few_trials

# bounds UID PAYLOAD CONNS: the user's up and down wire bytes in [payload, payload + overhead]
# (per connection: salt, address chunk; per data chunk 34 bytes, one chunk per KiB allowed; per
# datagram: salt, address and tag, 61 bytes; DGRAMS counts resent ones too: 1061 each).
bounds() {
    local lines=$1 uid=$2 payload=$3 conns=$4 dgrams=$5 up down hi
    read -r _ up down <<<"$(awk -v u="$uid" '$1 == u' <<<"$lines")"
    hi=$((payload + conns * (32 + 34 + 259) + 34 * (payload / 1024 + conns) + dgrams * 1061))
    if [ -z "${up:-}" ]; then echo "user $uid: no usage line"; return 1; fi
    echo "user $uid: up $up down $down, expected each in [$payload, $hi]"
    [ "$up" -ge "$payload" ] && [ "$up" -le "$hi" ] && [ "$down" -ge "$payload" ] && [ "$down" -le "$hi" ]
}
# user B logs in last: the IP's hint names B when katana stops
check "user $B: last connection echoed" tcp_rt "$CB" ok --bytes 1000 --seed b5 --label b5
srv_usage_mark
srv_stop
check "SIGTERM: daemon exits 0" test "$SRV_RC" = 0
FINAL=$(srv_usage)
echo "usage:"; echo "$FINAL"
# UDP echo: every datagram of 1000 bytes that came back was billed both ways (a lost one is
# resent by katest: at most 3 tries each, so up to 30 datagrams)
check "user $A billed for its own traffic" bounds "$FINAL" "$A" $((1000 + 400 * KIB + 10 * 1000)) 5 30
check "user $B billed for its own traffic" bounds "$FINAL" "$B" $((2000 + 1200 * KIB + 10 * 1000)) 6 30
others() { awk -v a="$A" -v b="$B" '$1 != a && $1 != b && ($2 > 0 || $3 > 0)' <<<"$FINAL"; }
check "no other user billed" test -z "$(others)"

# Restart on the same database: the hints saved at the stop are restored after the first apply.
srv_start "$T/config.json"
kt_wait_port "$API_PORT" 10 || { fail "API did not listen on $API_PORT after the restart"; exit 1; }
restored() { grep -q "restored [1-9][0-9]* of [0-9]* client IP hints" "$SRV_LOG"; }
kt_until 10 restored || echo "no restored hints logged"
for r in 1 2 3; do
    check "after the restart: user $B's connection $r echoed" tcp_rt "$CB" ok --bytes 1000 --seed "r$r" --label "r$r"
done
one_trial() {
    local l k q
    l=$(metric katana_ss_lookups_total); k=$(metric katana_ss_key_trials_total)
    q=$(metric katana_ss_scans_queued_total)
    echo "after the restart: $l lookups tried $k keys, $q scans queued"
    [ "$l" != none ] && [ "$l" -ge 3 ] && [ "$k" -le $((l + 2)) ] && [ "$q" = 0 ]
}
check "a returning client is identified by its restored hint, without a scan" one_trial
srv_stop
check "SIGTERM: the restarted daemon exits 0" test "$SRV_RC" = 0
kt_finish
