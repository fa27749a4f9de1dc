#!/bin/bash
# Issue 13 "junk": 3 000 users on one Shadowsocks port. While a real ss-local client (the last
# user) moves 1.5 MiB, junk comes from another address: 20 TCP connections of 50 random bytes
# and a burst of random datagrams far beyond the scan budget (half a core). Full scans run off
# the worker loop within that budget: the junk connections are refused (drained, as a wrong
# key is), the scans beyond the budget dropped (/metrics katana_ss_scans_*), and the client,
# returning, is served as before: its transfer completes byte-identical and new connections and
# datagrams of it still pass while the junk comes.
. "$(dirname "$0")/lib.sh"
kt_need ss-local curl jq
[ "$KT_SERVER" = katana ] || skip_all "the scan budget and /metrics need katana"

CIPHER=aes-256-gcm
N=3000
JUNK_TCP=20
TOKEN=junk-$$
echo_start
kt_ports 2; API_PORT=${PORTS[1]}; SP=${PORTS[0]}
mkconfig "$T/config.json" "$SP" "$CIPHER" --users-file "$T/users.json"
jq --arg l "127.0.0.1:$API_PORT" --arg t "$TOKEN" '.api = {listen: $l, token: $t}' \
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
cl_start a "$CIPHER" "${PW[$((N - 1))]}" "$(srv_user_port "$N")"; CA=$CL_PORT

metric() {
    curl -sS -m 10 -H "Authorization: Bearer $TOKEN" "http://127.0.0.1:$API_PORT/metrics" |
        awk -v m="$1" '$1 == m { print $2; f = 1 } END { if (!f) print "none" }'
}
DRAIN='katana_refused_clients_total{action="drain"}'

# The client's first login is a full scan (its user is the last of 3 000), off the loop.
check "first connection of the last user echoed" tcp_rt "$CA" ok --bytes 1000 --seed a0 --label a0
Q0=$(metric katana_ss_scans_queued_total); R0=$(metric katana_ss_scans_run_total)
echo "after the first login: $Q0 scans queued, $R0 run"
check "the first login was scanned off the loop" test "$Q0" != none -a "$R0" != none
D0=$(metric "$DRAIN"); X0=$(metric katana_ss_scans_dropped_total)

# A transfer in the background (1.5 MiB at 512 KiB/s), then the junk.
stream_bg flow "$CA" $((1536 * 1024)) $((512 * 1024)) ok
cat >"$T/junk.py" <<'PY'
import os, socket, sys, time
port, conns, dgrams, done = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
held = []
for _ in range(conns):   # 50 random bytes each, kept open (the server drains them)
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(5)
    s.bind(("127.0.0.2", 0))
    s.connect(("127.0.0.1", port))
    s.sendall(os.urandom(50))
    held.append(s)
    time.sleep(0.02)
open(done + ".tcp", "w").close()
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.bind(("127.0.0.2", 0))
for i in range(dgrams):  # over about 3 s: far beyond half a core of scans
    u.sendto(os.urandom(60 + i % 200), ("127.0.0.1", port))
    if i % 100 == 99:
        time.sleep(0.1)
open(done, "w").close()
time.sleep(1)
for s in held:
    s.close()
PY
kt_bg junk python3 "$T/junk.py" "$SP" "$JUNK_TCP" 3000 "$T/junk.done"
JUNK=$BG_PID
kt_wait_file "$T/junk.done.tcp" 30 || fail "the junk connections did not connect"
# While it comes, the returning client opens connections and sends datagrams (one trial each).
check "returning client: a new connection during the junk" tcp_rt "$CA" ok --bytes 20000 --seed a1 --label a1
check "returning client: datagrams during the junk" udp_rt "$CA" ok --count 5 --size 500 --seed u1
check "returning client: another connection during the junk" tcp_rt "$CA" ok --bytes 20000 --seed a2 --label a2
kt_wait_file "$T/junk.done" 60 || fail "the junk sender did not finish"
stream_wait flow "$STREAM_PID" 90 "the client's transfer completed byte-identical during the junk"
kt_wait_exit "$JUNK" 30 || true

drained() {
    local d
    for _ in $(seq 150); do
        d=$(metric "$DRAIN")
        [ "$d" != none ] && [ "$D0" != none ] && [ "$((d - D0))" -ge "$JUNK_TCP" ] && break
        sleep 0.2
    done
    echo "junk connections drained: $D0 -> $d (at least $JUNK_TCP more expected)"
    [ "$d" != none ] && [ "$((d - D0))" -ge "$JUNK_TCP" ]
}
check "the $JUNK_TCP junk connections were refused as a wrong key is (drained)" drained
Q1=$(metric katana_ss_scans_queued_total); R1=$(metric katana_ss_scans_run_total)
X1=$(metric katana_ss_scans_dropped_total)
echo "scans: queued $Q0 -> $Q1, run $R0 -> $R1, dropped $X0 -> $X1"
scanned_some() { [ "$Q1" != none ] && [ "$Q1" -gt "$Q0" ] && [ "$R1" -gt "$R0" ]; }
check "junk was scanned off the loop (queued and run rose)" scanned_some
dropped_some() { [ "$X1" != none ] && [ "$X1" -gt "$X0" ]; }
check "beyond the budget, scans were dropped (katana_ss_scans_dropped_total rose)" dropped_some
bounded() { [ "$R1" != none ] && [ "$((R1 - R0))" -lt $((JUNK_TCP + 3000)) ]; }
check "not every junk datagram was scanned" bounded
check "afterwards the client is served as before" tcp_rt "$CA" ok --bytes 100000 --seed a3 --label a3
check "daemon still running" srv_alive
# Stop while junk scans wait and run: their connections close under them, their datagrams are
# forgotten (ASan builds check that no job touches what is gone).
kt_bg junk2 python3 "$T/junk.py" "$SP" 30 1000 "$T/junk2.done"
kt_wait_file "$T/junk2.done.tcp" 30 || fail "the second junk did not connect"
kt_wait_file "$T/junk2.done" 30 || fail "the second junk sender did not finish"
srv_stop
check "SIGTERM while junk scans wait: daemon exits 0" test "$SRV_RC" = 0
kt_finish
