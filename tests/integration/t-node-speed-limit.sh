#!/bin/bash
# The node's speed limits (issue 12 "Speed limits"), with ss-local against katana (2 workers):
# `nodes[].speed_limit` 16 Mbit/s applies to each user the panel leaves unlimited, and the
# aggregate cap `node_speed_limit` 24 Mbit/s (3 000 000 B/s) is shared fairly by the active users.
#  - user 4 alone pulls at its node limit (2 000 000 B/s, within 10% over 5 s);
#  - users 1, 2 and 3 pull at once: each gets a third of the cap within 20% over 5 s (after a
#    2.5 s warm-up: the burst and the first rebalance), and together no more than the cap + 10%.
. "$(dirname "$0")/lib.sh"
kt_need ss-local
needs_katana "speed limits" || skip_all "needs katana"
PT=(python3 "$KT_DIR/pacetest.py")
CIPHER=aes-256-gcm

U1=$(kt_uuid); U2=$(kt_uuid); U3=$(kt_uuid); U4=$(kt_uuid)
kt_ports 2; SINK_PORT=${PORTS[0]}
kt_bg sink "${PT[@]}" serve --port "$SINK_PORT" --ready-file "$T/sink.ready"
kt_wait_file "$T/sink.ready" 10 || { fail "sink did not start"; exit 1; }
mkconfig "$T/config.json" "${PORTS[1]}" "$CIPHER" --workers 2 \
    --user "1:$U1" --user "2:$U2" --user "3:$U3" --user "4:$U4"
python3 - "$T/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["node_speed_limit"] = 24
c["nodes"][0]["speed_limit"] = 16
json.dump(c, open(sys.argv[1], "w"))
PY
srv_start "$T/config.json"
for u in 1 2 3 4; do
    U=U$u
    cl_start "u$u" "$CIPHER" "${!U}" "$(srv_user_port "$u")"; eval "C$u=$CL_PORT"
done

flow() { # flow NAME SOCKS SECS: a measured download in the background (FLOW_PID)
    kt_bg "$1" "${PT[@]}" flow --socks "$2" --dest-port "$SINK_PORT" --mode down --secs "$3" \
        --out "$T/$1.json" --ready-file "$T/$1.ready"
    FLOW_PID=$BG_PID
}
rate() { "${PT[@]}" rate --file "$T/$1.json" --from "$2" --to "$3" || true; }
near() {
    echo "got $1 B/s, expected $2 B/s (±$3%)"
    [ $(( ($1 > $2 ? $1 - $2 : $2 - $1) * 100 )) -le $(( $2 * $3 )) ]
}
plus() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a + b }'; }

flow a4 "$C4" 7; P4=$FLOW_PID
kt_wait_exit "$P4" 15
R=$(cat "$T/a4.ready")
check "user 4 alone: the node's 16 Mbit/s" near "$(rate a4 "$(plus "$R" 1.5)" "$(plus "$R" 6.5)")" 2000000 10
sleep 1.5 # user 4 is no longer active

for u in 1 2 3; do C=C$u; flow "b$u" "${!C}" 9.5; eval "P$u=$FLOW_PID"; done
for u in 1 2 3; do kt_wait_file "$T/b$u.ready" 10 || fail "user $u: flow did not start"; done
kt_wait_exit "$P1" 20; kt_wait_exit "$P2" 20; kt_wait_exit "$P3" 20
R=$(sort -n "$T"/b?.ready | tail -1)
W0=$(plus "$R" 2.5); W1=$(plus "$R" 7.5)
SUM=0
for u in 1 2 3; do
    G=$(rate "b$u" "$W0" "$W1")
    check "user $u: a fair third of the 24 Mbit/s cap" near "${G:-0}" 1000000 20
    SUM=$((SUM + ${G:-0}))
done
echo "all three: $SUM B/s"
check "together no more than the cap (+10%)" test "$SUM" -le 3300000

srv_stop
check "katana exits 0" test "$SRV_RC" = 0
kt_finish
