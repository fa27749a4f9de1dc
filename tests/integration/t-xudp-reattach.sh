#!/bin/bash
# XUDP GlobalID re-attach (issue 10, PROTOCOLS-2.md §5.3) through the real daemon, clear VLESS
# with Mux.Cool, one worker. katest speaks Xray's documented frames (a New UDP frame with the
# 8-byte GlobalID, then Keep frames with addresses) to a UDP "remote" of its own that answers
# every datagram, and reports the source port the remote saw:
#  - a client that drops its connection (no End frame) and reconnects with the same GlobalID
#    is seen from the same port, and the remote's answers reach the new connection;
#  - the usage of that reconnect is billed to its user, byte for byte of the client's wire;
#  - the same GlobalID from another user, and a GlobalID of zeros, get a port of their own;
#  - a second connection with a GlobalID that a live connection carries takes it over (same
#    port) and the first connection gets End for that session;
#  - 60 s after its connection ended (plus the worker's 10 s sweep) the association is gone:
#    its outbound socket is still open at 59 s and closed by 73 s, and the same GlobalID then
#    gets another port;
#  - no log line per datagram or per re-attach.
# Each reconnect is a new katest process: its TCP source port differs every time.
KT_LIMIT=${KT_LIMIT:-200}
. "$(dirname "$0")/lib.sh"
[ "$KT_SERVER" = katana ] || skip_all "KT_SERVER=$KT_SERVER: XUDP is served by katana only"

U1=$(kt_uuid); U2=$(kt_uuid)
G1=5a11223344556677; G2=0123456789abcdef; GX=00c0ffee00c0ffee; G0=0000000000000000
kt_ports 1; PORT=${PORTS[0]}
mkconfig "$T/config.json" "$PORT" - --protocol vless --user "1:$U1" --user "2:$U2"
srv_start "$T/config.json"

# xudp NAME UUID GID [katest xudp options]: one connection; sets XPORT, XUP, XDOWN.
xudp() {
    local name=$1 id=$2 gid=$3; shift 3
    if ! "${KT_PY[@]}" xudp --port "$PORT" --uuid "$id" --gid "$gid" --seed "$name" "$@" \
        >"$T/xudp-$name.out" 2>&1; then
        cat "$T/xudp-$name.out"
        XPORT=none; XUP=0; XDOWN=0
        return 1
    fi
    XPORT=$(awk '$1 == "XUDP_PORT" { print $2 }' "$T/xudp-$name.out")
    read -r _ XUP XDOWN <<<"$(grep '^XUDP_WIRE' "$T/xudp-$name.out")"
    echo "$name: the remote saw port $XPORT (client wire up $XUP down $XDOWN)"
}
usage_snapshot() {
    sleep 1.5   # the sampler folds counters every second
    srv_usage_mark
    kill -USR1 "$SRV_PID"
    for _ in $(seq 1 40); do [ -n "$(srv_usage)" ] && break; sleep 0.1; done
    sleep 0.3
    srv_usage
}
# billed BEFORE AFTER UID UP DOWN: user UID's usage grew by exactly UP and DOWN between the
# snapshots BEFORE and AFTER (the SIGUSR1 lines are totals).
billed() {
    local up0 down0 up down
    read -r _ up0 down0 <<<"$(awk -v u="$3" '$1 == u' <<<"$1")"
    read -r _ up down <<<"$(awk -v u="$3" '$1 == u' <<<"$2")"
    up=$((${up:-0} - ${up0:-0})); down=$((${down:-0} - ${down0:-0}))
    echo "user $3: up +$up down +$down, expected +$4 and +$5"
    [ "$up" = "$4" ] && [ "$down" = "$5" ]
}
# log_lines: the server's log lines but the usage lines SIGUSR1 asks for.
log_lines() { grep -vc "usage user" "$SRV_LOG"; }
same() { echo "ports $1 and $2"; [ "$1" != none ] && [ "$1" = "$2" ]; }
differ() { echo "ports $1 and $2"; [ "$1" != none ] && [ "$2" != none ] && [ "$1" != "$2" ]; }
# udp_held PORT: katana holds a UDP socket on local port PORT (an association's outbound socket).
udp_held() { [ "$("${KT_PY[@]}" sockets --udp --pid "$SRV_PID" --port "$1")" -gt 0 ]; }
now_ms() { date +%s%3N; }

lines0=$(log_lines)
# the expiry case starts first: its connection ends now, its 60 s run while the rest is checked
check "G2: first connection, 4 datagrams answered" xudp exp1 "$U1" "$G2"
P_EXP=$XPORT; T_EXP=$(now_ms)

check "G1: first connection, 4 datagrams answered" xudp a1 "$U1" "$G1"
P_A=$XPORT
snap0=$(usage_snapshot)
check "G1: reconnect after a dropped connection, 4 datagrams answered" xudp a2 "$U1" "$G1"
P_B=$XPORT; UP_B=$XUP; DOWN_B=$XDOWN
check "G1: the remote sees the same source port after the reconnect (re-attached)" \
    same "$P_A" "$P_B"
snap=$(usage_snapshot)
echo "SIGUSR1 snapshot:"; echo "$snap"
check "the reconnect is billed to user 1: the client's wire bytes exactly" \
    billed "$snap0" "$snap" 1 "$UP_B" "$DOWN_B"
check "... and nothing to user 2" billed "$snap0" "$snap" 2 0 0

check "G1 from user 2: answered" xudp b1 "$U2" "$G1"
check "G1 from user 2 is another session: another port" differ "$P_A" "$XPORT"
check "GlobalID zeros: answered" xudp z1 "$U1" "$G0"
P_Z=$XPORT
check "GlobalID zeros again: answered" xudp z2 "$U1" "$G0"
check "GlobalID zeros is never re-attached: another port" differ "$P_Z" "$XPORT"
check "G1 a third time, still the same port" xudp a3 "$U1" "$G1"
check "... the same port" same "$P_A" "$XPORT"

check "GX on a live connection, then a second connection with GX: the first gets End" \
    xudp steal "$U1" "$GX" --steal

check "no log line per datagram or re-attach" test "$(log_lines)" = "$lines0"
check "daemon still runs" srv_alive

# expiry: kept 60 s after its connection ended, then gone at the worker's next sweep (every
# 10 s): the association's outbound socket (the port the remote saw) closes
wait_ms=$((T_EXP + 59000 - $(now_ms)))
((wait_ms <= 0)) || sleep "$((wait_ms / 1000)).$(printf %03d $((wait_ms % 1000)))"
check "G2's association still holds port $P_EXP 59 s after its connection ended" \
    udp_held "$P_EXP"
gone=
while (($(now_ms) < T_EXP + 73000)); do
    udp_held "$P_EXP" || { gone=$(($(now_ms) - T_EXP)); break; }
    sleep 0.5
done
check "G2's association closed ${gone:-not within 73000} ms after its connection ended" \
    test -n "$gone"
check "G2 after the window: answered" xudp exp2 "$U1" "$G2"
check "G2 after the window is a new association: another port" differ "$P_EXP" "$XPORT"

srv_stop
check "SIGTERM: katana exits 0" test "$SRV_RC" = 0
kt_finish
