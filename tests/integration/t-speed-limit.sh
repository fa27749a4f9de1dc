#!/bin/bash
# Speed limits (issue 12 "Speed limits", seed 003), with ss-local against katana and the panel
# emulator: user 1 has 8 Mbit/s (1 000 000 B/s), user 2 16 Mbit/s, user 3 none.
#  - download (then, last, upload): users 1 and 2 pull (push) at once; after a 1.5 s warm-up (the
#    one-second burst) each one's rate over 5 s, measured at the receiving end, is within 10%
#    of its own limit (user 2 is not slowed by user 1's debt); meanwhile unlimited user 3
#    moves at more than 4x user 2's limit;
#  - UDP: 3000 datagrams of 1000 bytes over 1 s (3 MB/s) from user 4 (8 Mbit/s), echoed: what
#    is over the limit is dropped (a burst of 1 MB and 1 MB/s shared by both directions: about
#    1000 echoes, at most 1600), while unlimited user 3 gets most (at least 2000; loopback UDP through ss-local loses some);
#  - a panel change of user 1's speed_limit to 24 Mbit/s changes the rate of its live
#    connection (the same socket, never closed) to within 10% of the new limit;
#  - a paced flow killed through the REST API (DELETE /v1/connections/ID) ends at once (its
#    client sees the close within 1 s), not after its debt.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/panel.sh"
kt_need ss-local curl
needs_katana "speed limits" || skip_all "needs katana"
PT=(python3 "$KT_DIR/pacetest.py")

U1=$(kt_uuid); U2=$(kt_uuid); U3=$(kt_uuid); U4=$(kt_uuid)
panel_start 1 1 "1:$U1" "2:$U2" "3:$U3" "4:$U4"
users() { # users MBPS1: the panel's user list with user 1 at MBPS1
    panel_ctl users "{\"users\": [{\"id\": 1, \"uuid\": \"$U1\", \"speed_limit\": $1},
        {\"id\": 2, \"uuid\": \"$U2\", \"speed_limit\": 16}, {\"id\": 3, \"uuid\": \"$U3\"},
        {\"id\": 4, \"uuid\": \"$U4\", \"speed_limit\": 8}]}"
}
users 8
kt_ports 1; SINK_PORT=${PORTS[0]}
kt_bg sink "${PT[@]}" serve --port "$SINK_PORT" --ready-file "$T/sink.ready"
kt_wait_file "$T/sink.ready" 10 || { fail "sink did not start"; exit 1; }
kat_config "$T/config.json" 1
kat_start "$T/config.json"
cl_start u1 "$CIPHER" "$U1" "$NODE_PORT"; C1=$CL_PORT
cl_start u2 "$CIPHER" "$U2" "$NODE_PORT"; C2=$CL_PORT
cl_start u3 "$CIPHER" "$U3" "$NODE_PORT"; C3=$CL_PORT
cl_start u4 "$CIPHER" "$U4" "$NODE_PORT"; C4=$CL_PORT
echo_start

# flow NAME SOCKS MODE SECS: a measured flow in the background (FLOW_PID; "$T/NAME.json")
flow() {
    rm -f "$T/$1.ready"
    kt_bg "$1" "${PT[@]}" flow --socks "$2" --dest-port "$SINK_PORT" --mode "$3" --secs "$4" \
        --out "$T/$1.json" --ready-file "$T/$1.ready"
    FLOW_PID=$BG_PID
    kt_wait_file "$T/$1.ready" 10 || { fail "$1: flow did not start"; cat "$T/$1.log"; exit 1; }
}
# rate NAME FROM TO: bytes/s of the flow between two absolute times
rate() { "${PT[@]}" rate --file "$T/$1.json" --from "$2" --to "$3" || true; }
# near GOT WANT PCT: |GOT - WANT| <= PCT% of WANT
near() {
    echo "got $1 B/s, limit $2 B/s (±$3%)"
    [ $(( ($1 > $2 ? $1 - $2 : $2 - $1) * 100 )) -le $(( $2 * $3 )) ]
}
now() { date +%s.%N; }
plus() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a + b }'; }

phase() {
    local mode=$1
    # each flow's window starts 1.5 s after its own start (a loaded machine starts them apart)
    flow "a1-$mode" "$C1" "$mode" 8.5; A1=$FLOW_PID; R1=$(cat "$T/a1-$mode.ready")
    flow "a2-$mode" "$C2" "$mode" 8.5; A2=$FLOW_PID; R2=$(cat "$T/a2-$mode.ready")
    sleep "$(awk -v e="$(plus "$R2" 6.5)" -v n="$(now)" 'BEGIN { d = e - n + 0.2; print (d > 0 ? d : 0) }')"
    flow "a3-$mode" "$C3" "$mode" 1.5; A3=$FLOW_PID; R3=$(cat "$T/a3-$mode.ready")
    kt_wait_exit "$A3" 10; kt_wait_exit "$A1" 10; kt_wait_exit "$A2" 10
    check "$mode: user 1 moves at its 8 Mbit/s over 5 s" \
        near "$(rate "a1-$mode" "$(plus "$R1" 1.5)" "$(plus "$R1" 6.5)")" 1000000 10
    check "$mode: user 2 moves at its own 16 Mbit/s at the same time" \
        near "$(rate "a2-$mode" "$(plus "$R2" 1.5)" "$(plus "$R2" 6.5)")" 2000000 10
    G3=$(rate "a3-$mode" "$(plus "$R3" 0.3)" "$(plus "$R3" 1.5)")
    echo "user 3 (unlimited): $G3 B/s"
    check "$mode: unlimited user 3 is not slowed (more than 4x user 2's limit)" \
        test "${G3:-0}" -gt 8000000
}


phase down
N4=$(timeout 30 "${PT[@]}" udp --socks "$C4" --dest-port "$ECHO_PORT" --count 3000 --size 1000 --secs 1)
N3=$(timeout 30 "${PT[@]}" udp --socks "$C3" --dest-port "$ECHO_PORT" --count 3000 --size 1000 --secs 1)
echo "UDP echoes of 3000: user 4 (8 Mbit/s) $N4, user 3 (unlimited) $N3"
check "UDP over user 4's limit is dropped" test "${N4:-0}" -le 1600 -a "${N4:-0}" -ge 300
check "UDP of unlimited user 3 is not dropped" test "${N3:-0}" -ge 2000
# a live connection follows a panel change of its user's limit
flow c1 "$C1" down 13; CP=$FLOW_PID; R=$(cat "$T/c1.ready")
sleep "$(awk -v e="$(plus "$R" 4.6)" -v n="$(now)" 'BEGIN { d = e - n; print (d > 0 ? d : 0) }')"
users 24
sleep "$(awk -v e="$(plus "$R" 13.5)" -v n="$(now)" 'BEGIN { d = e - n; print (d > 0 ? d : 0) }')"
kt_wait_exit "$CP" 10
check "before the change: 8 Mbit/s" near "$(rate c1 "$(plus "$R" 1.5)" "$(plus "$R" 4.5)")" 1000000 10
check "after the change, the same connection: 24 Mbit/s" \
    near "$(rate c1 "$(plus "$R" 8.5)" "$(plus "$R" 12.5)")" 3000000 10
check "the connection was never closed" python3 -c '
import json, sys; sys.exit(1 if json.load(open(sys.argv[1]))["closed"] else 0)' "$T/c1.json"
check "katana updated the users in place" grep -q "node n1: users updated" "$SRV_LOG"


# a paced flow killed through the API ends at once
flow k1 "$C1" down 20; KP=$FLOW_PID
sleep 2
FK=$(curl -sf "http://127.0.0.1:$API_PORT/v1/connections?user=1" | python3 -c '
import json, sys; print(json.load(sys.stdin)["flows"][0]["id"])' || true)
K0=$(now)
check "kill user 1's paced flow" curl -sf -o /dev/null -X DELETE "http://127.0.0.1:$API_PORT/v1/connections/$FK"
kt_wait_exit "$KP" 5
K1=$(now)
echo "the killed flow's client ended $(awk -v a="$K0" -v b="$K1" 'BEGIN { printf "%.2f", b - a }') s after DELETE"
check "the killed paced flow's connection ends within 1 s" \
    awk -v a="$K0" -v b="$K1" 'BEGIN { exit !(b - a < 1.0) }'
check "its client saw the close" python3 -c '
import json, sys; sys.exit(0 if json.load(open(sys.argv[1]))["closed"] else 1)' "$T/k1.json"

# last: an upload leaves bytes queued in the sockets of user 1's clients, drained at its rate
users 8
sleep 2.5 # the next pull (1 s) and its apply
phase up

kat_stop
check "katana exits 0" test "$SRV_RC" = 0
kt_finish
