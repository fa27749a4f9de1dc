#!/bin/bash
# Xboard node metrics (PROTOCOLS-2.md §6.5 `node.status`, §6.6; PANEL.md §1.1 `report`): with
# `status_interval` 1 katana sends the node's runtime metrics over the node channel every
# second while it is up, and as the `metrics` of REST `report` once per push interval (2 s)
# while it is down, in the keys Xboard's ServerService::updateMetrics reads. Real ss-local
# clients move paced echo streams (RATE bytes/s each way) through the node meanwhile.
# Checks, channel up (user 1's stream open): `node.status` arrives about every second for node
# 1 and carries every key updateMetrics reads but goroutines and gc; live connections, flows and
# online users >= 1, total users 2; upload and download rates within a factor 4 of RATE (bytes/s,
# not bits, not totals); CPU per core (0-100 %) and load averages present; one speed-limited user
# (user 2); the channel enabled and connected; kernel up; successful panel requests counted;
# nothing goes over REST `report`; POST status carries the memory (Xboard keeps memory there,
# not in the metrics). Once the stream ended: no live connection and zero rates. Channel down
# (the panel refuses the WebSocket, user 2's stream open): `report` carries the metrics for
# node 1 with the channel enabled but not connected, user 2 online and speed-limited, the rates
# within a factor 4 of RATE; no `node.status` arrives meanwhile. Machine mode (machine 7, nodes
# 11 and 12, one channel): each node's `node.status` names it in data.node_id, node 11 (stream
# open) shows its connection, user and rates, node 12 (idle) none; nothing over REST while the
# channel is up; once the panel refuses the channel node 11's metrics go over REST `report`.
# "Nothing over REST while up" looks at a push interval or more after the channel came up: the
# snapshot a node takes at start, before the channel is up, may arrive a little later.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/panel.sh"
kt_need ss-local curl
needs_katana "xboard node metrics" || skip_all "needs katana"
PANEL_TYPE=xboard
RATE=65536

# rec VIA SINCE [NODE]: the last metrics record over VIA (ws | report) recorded after SINCE
# (epoch s), of node NODE (default 1)
rec() {
    panel_node_status "$1" | python3 -c '
import json, sys
rs = [r for r in json.load(sys.stdin) if r["t"] >= float(sys.argv[1]) and
      r["node_id"] == int(sys.argv[2])]
print(json.dumps(rs[-1]) if rs else "")' "$2" "${3:-1}"
}

# count VIA SINCE [UNTIL]: metrics records over VIA recorded after SINCE (and before UNTIL)
count() {
    panel_node_status "$1" | python3 -c '
import json, sys
until = float(sys.argv[2]) if len(sys.argv) > 2 else float("inf")
print(sum(1 for r in json.load(sys.stdin) if float(sys.argv[1]) <= r["t"] < until))' "${@:2}"
}

# after SECS: the epoch time SECS (a decimal) from now
after() { python3 -c 'import sys, time; print(time.time() + float(sys.argv[1]))' "$1"; }

# is REC PYEXPR: PYEXPR holds of record REC (r; its data d; RATE); prints what it tested.
is() {
    python3 -c '
import json, sys
r = json.loads(sys.argv[1] or "null")
d = (r or {}).get("data", {})
RATE = float(sys.argv[3])
ok = r is not None and bool(eval(sys.argv[2]))
print("%s: %s" % ("yes" if ok else "no", sys.argv[2]))
sys.exit(0 if ok else 1)' "$1" "$2" "$RATE"
}

# the keys ServerService::updateMetrics reads (goroutines and gc have no katana counterpart)
KEYS='{"uptime","active_connections","total_connections","total_users","active_users",
       "inbound_speed","outbound_speed","cpu_per_core","load","speed_limiter","api","ws",
       "limits","kernel_status"}'
RATES="RATE / 4 <= d['inbound_speed'] <= RATE * 4 and RATE / 4 <= d['outbound_speed'] <= RATE * 4"

U1=$(kt_uuid); U2=$(kt_uuid)
echo_start
panel_start 2 60 "1:$U1" "2:$U2"
# user 2 with a speed limit (Mbit/s, far above the streams' rate)
panel_ctl users "{\"users\": [{\"id\": 1, \"uuid\": \"$U1\", \"speed_limit\": null, \"device_limit\": null},
                              {\"id\": 2, \"uuid\": \"$U2\", \"speed_limit\": 100, \"device_limit\": null}]}"
kat_config "$T/config.json"
sed -i 's/"timeout": 2}/"timeout": 2, "status_interval": 1}/' "$T/config.json"
kat_start "$T/config.json"
check "the node channel came up" ws_wait_up 10
cl_start u1 "$CIPHER" "$U1" "$NODE_PORT"; C1=$CL_PORT
cl_start u2 "$CIPHER" "$U2" "$NODE_PORT"; C2=$CL_PORT

# --- the channel up: node.status every second -------------------------------------------------
stream_bg s1 "$C1" $((RATE * 5)) "$RATE" ok; S1=$STREAM_PID    # ~5 s
T1=$EPOCHREALTIME
sleep 2.5
R=$(rec ws "$T1")
echo "node.status while user 1's stream is open: $R"
check "for node 1" is "$R" "r['node_id'] == 1"
check "with every key Xboard reads" is "$R" "set($KEYS) <= set(d)"
check "a live connection and flow, one user online of 2" is "$R" \
    "d['active_connections'] >= 1 and d['total_connections'] >= 1 and d['active_users'] == 1 and d['total_users'] == 2"
check "upload and download rates match the stream's ($RATE bytes/s)" is "$R" "$RATES"
check "CPU per core and the load averages" is "$R" \
    "d['cpu_per_core'] and all(0 <= c <= 100 for c in d['cpu_per_core']) and all(d['load'][k] >= 0 for k in ('load1', 'load5', 'load15'))"
check "one user with a speed limit, not online" is "$R" \
    "d['speed_limiter'] == {'has_limits': True, 'limited_users': 1} and d['limits']['speed_limited_users'] == 0"
check "the channel enabled and connected, the kernel up, uptime counted" is "$R" \
    "d['ws'] == {'enabled': True, 'connected': True} and d['kernel_status'] is True and d['uptime'] >= 1"
check "successful panel requests counted" is "$R" "d['api']['success'] >= 2"
MEM=$(panel_ctl state | python3 -c '
import json, sys
st = json.load(sys.stdin)["status"]
m = st[-1]["mem"] if st else {}
print("yes" if st and 0 < m["used"] <= m["total"] and "cpu" in st[-1] else "no", st[-1:] )')
echo "POST status: $MEM"
check "POST status carries the memory and the CPU" test "${MEM%% *}" = yes
stream_wait s1 "$S1" 10 "user 1's stream completed"
check "nothing went over REST report while the channel was up" \
    test "$(count report "$(after -3.5)")" = 0
N1=$(count ws "$T1")
panel_node_status ws | python3 -c '
import json, sys
t = [r["t"] for r in json.load(sys.stdin)]
print("node.status intervals (s):", " ".join("%.2f" % (b - a) for a, b in zip(t, t[1:])))'
check "node.status came about every second ($N1 in the stream's ~5 s)" test "$N1" -ge 3
idle() { R0=$(rec ws "$T1"); is "$R0" "d['active_connections'] == 0 and d['total_connections'] == 0 and d['inbound_speed'] == 0 and d['outbound_speed'] == 0"; }
check "once it ended: no live connection, zero rates" kt_until 4 idle
echo "node.status after the stream: $R0"

# --- the channel down: the metrics go with the push cycle over REST -----------------------------
panel_ctl ws '{"enabled": true, "refuse": true}'
panel_ctl ws_kill '{}'
down() { grep -q 'node channel down' "$SRV_LOG"; }
check "katana saw the channel drop" kt_until 3 down
stream_bg s2 "$C2" $((RATE * 7)) "$RATE" ok; S2=$STREAM_PID    # ~7 s
T2=$EPOCHREALTIME
online2() { R2=$(rec report "$T2"); is "$R2" "d['active_users'] == 1 and $RATES"; }
kt_until 6 online2 || true
echo "report while the channel is down: $R2"
check "report carried the metrics for node 1" is "$R2" "r['node_id'] == 1 and set($KEYS) <= set(d)"
check "the channel enabled, not connected" is "$R2" "d['ws'] == {'enabled': True, 'connected': False}"
check "user 2 online and speed-limited, a live connection" is "$R2" \
    "d['active_users'] == 1 and d['active_connections'] >= 1 and d['limits']['speed_limited_users'] == 1"
check "upload and download rates match user 2's stream" is "$R2" "$RATES"
check "no node.status meanwhile" test "$(count ws "$T2")" = 0
stream_wait s2 "$S2" 10 "user 2's stream completed"
kat_stop
check "katana exits 0" test "$SRV_RC" = 0

# --- machine mode: node.status over the machine's channel, with data.node_id -------------------
panel_ctl ws '{"enabled": true, "refuse": false}'
kt_ports 1; P12=${PORTS[0]}
MACHINE_PUSH=2 machine_set 60 "$(ss_node 11 "$NODE_PORT" "1:$U1"), $(ss_node 12 "$P12" "2:$U2")"
machine_kat_config "$T/config.json"
sed -i 's/"timeout": 2}/"timeout": 2, "status_interval": 1}/' "$T/config.json"
kat_start "$T/config.json"
check "the machine's channel came up" ws_wait_up 10 2
cl_start m1 "$CIPHER" "$U1" "$NODE_PORT"; C1=$CL_PORT
stream_bg s3 "$C1" $((RATE * 6)) "$RATE" ok; S3=$STREAM_PID    # ~6 s
T3=$EPOCHREALTIME
sleep 4
R11=$(rec ws "$T3" 11); R12=$(rec ws "$T3" 12)
echo "machine node.status of node 11: $R11"
echo "machine node.status of node 12: $R12"
check "node 11 (user 1's stream open): a live connection, one user online of 1" is "$R11" \
    "set($KEYS) <= set(d) and d['node_id'] == 11 and d['active_connections'] >= 1 and d['active_users'] == 1 and d['total_users'] == 1"
check "node 11's rates match the stream" is "$R11" "$RATES"
check "the machine's channel enabled and connected" is "$R11" \
    "d['ws'] == {'enabled': True, 'connected': True}"
check "node 12 (idle) sends its own: nothing live, zero rates" is "$R12" \
    "d['node_id'] == 12 and d['active_connections'] == 0 and d['inbound_speed'] == 0 and d['total_users'] == 1"
check "nothing went over REST report while the machine's channel was up" \
    test "$(count report "$(after -2.5)")" = 0
panel_ctl ws '{"enabled": true, "refuse": true}'
panel_ctl ws_kill '{}'
T4=$EPOCHREALTIME
online11() { R11=$(rec report "$T4" 11); is "$R11" "d['active_users'] == 1"; }
kt_until 4 online11 || true
echo "report of node 11 while the machine's channel is down: $R11"
check "node 11's report carried its metrics, the channel not connected" is "$R11" \
    "set($KEYS) <= set(d) and d['active_connections'] >= 1 and d['ws'] == {'enabled': True, 'connected': False}"
stream_wait s3 "$S3" 10 "the machine's stream completed"
kat_stop
check "katana exits 0 (machine mode)" test "$SRV_RC" = 0
kt_finish
