#!/bin/bash
# Two users at once (two ss-local with different passwords): each user's usage, from the
# SIGUSR1 snapshot and the SIGTERM lines `usage user <id>: up <n> down <n>`, is what its own
# connections moved: wire bytes within [payload, payload + AEAD overhead], so user 2 (3 MiB)
# is billed about 3x user 1 (1 MiB), and user 3 (no traffic) has no usage.
. "$(dirname "$0")/lib.sh"
kt_need ss-local

CIPHER=aes-256-gcm
SALT=32
MIB=1048576
U1=$(kt_uuid); U2=$(kt_uuid); U3=$(kt_uuid)
echo_start
kt_ports 1
mkconfig "$T/config.json" "${PORTS[0]}" "$CIPHER" --user "1:$U1" --user "2:$U2" --user "3:$U3"
srv_start "$T/config.json"
cl_start u1 "$CIPHER" "$U1" "$(srv_user_port 1)"; C1=$CL_PORT
cl_start u2 "$CIPHER" "$U2" "$(srv_user_port 2)"; C2=$CL_PORT

# Both users at the same time: user 1 one connection x 1 MiB, user 2 three x 1 MiB.
tcp_rt "$C1" ok --bytes "$MIB" --seed u1 --label u1 >"$T/u1.out" 2>&1 & P1=$!
tcp_rt "$C2" ok --bytes "$MIB" --conns 3 --seed u2 --label u2 >"$T/u2.out" 2>&1 & P2=$!
R1=0; wait "$P1" || R1=$?
R2=0; wait "$P2" || R2=$?
cat "$T/u1.out" "$T/u2.out"
check "user 1 moved 1 MiB, echo identical" test "$R1" = 0
check "user 2 moved 3 x 1 MiB at the same time, echo identical" test "$R2" = 0

# in_bounds USAGE_LINES UID PAYLOAD CONNS: up and down both in [payload, payload + overhead].
# Overhead per connection and direction: salt, the address header chunk (2+16 length,
# at most 1+1+255+2 address, 16 tag); per data chunk 2+16+16 = 34 bytes, and we allow one
# chunk per 1 KiB of payload on average (ss-libev and the server read far larger blocks).
in_bounds() {
    local lines=$1 uid=$2 payload=$3 conns=$4 up down hi
    read -r _ up down <<<"$(awk -v u="$uid" '$1 == u' <<<"$lines")"
    hi=$((payload + conns * (SALT + 34 + 259) + 34 * (payload / 1024 + conns)))
    if [ -z "${up:-}" ]; then echo "user $uid: no usage line"; return 1; fi
    echo "user $uid: up $up down $down, expected each in [$payload, $hi]"
    [ "$up" -ge "$payload" ] && [ "$up" -le "$hi" ] && [ "$down" -ge "$payload" ] && [ "$down" -le "$hi" ]
}

# no_usage USAGE_LINES UID: the user has no line, or a line with zero bytes.
no_usage() {
    local l; l=$(awk -v u="$2" '$1 == u' <<<"$1")
    echo "user $2: '${l:-no line}'"
    [ -z "$l" ] || [ "$l" = "$2 0 0" ]
}

if needs_katana "usage lines"; then
    sleep 1.5   # the sampler folds flow counters every second
    srv_usage_mark
    kill -USR1 "$SRV_PID"
    for _ in $(seq 1 40); do [ -n "$(srv_usage)" ] && break; sleep 0.1; done
    sleep 0.3
    SNAP=$(srv_usage)
    echo "SIGUSR1 snapshot:"; echo "$SNAP"
    check "SIGUSR1: user 1 billed for 1 MiB each way" in_bounds "$SNAP" 1 "$MIB" 1
    check "SIGUSR1: user 2 billed for 3 MiB each way" in_bounds "$SNAP" 2 $((3 * MIB)) 3
    check "SIGUSR1: idle user 3 has no usage" no_usage "$SNAP" 3
    check "daemon still runs after SIGUSR1" srv_alive
fi

srv_usage_mark
srv_stop
check "SIGTERM: daemon exits 0 within 7 s" test "$SRV_RC" = 0
if needs_katana "usage lines"; then
    FINAL=$(srv_usage)
    echo "SIGTERM usage:"; echo "$FINAL"
    check "SIGTERM: user 1 billed for 1 MiB each way" in_bounds "$FINAL" 1 "$MIB" 1
    check "SIGTERM: user 2 billed for 3 MiB each way" in_bounds "$FINAL" 2 $((3 * MIB)) 3
    check "SIGTERM: idle user 3 has no usage" no_usage "$FINAL" 3
    # totals are cumulative: the final count is never below the snapshot
    s1=$(awk '$1 == 1 { print $2 + $3 }' <<<"$SNAP"); f1=$(awk '$1 == 1 { print $2 + $3 }' <<<"$FINAL")
    check "SIGTERM totals are not below the SIGUSR1 snapshot" test "${f1:-0}" -ge "${s1:-1}"
fi
kt_finish
