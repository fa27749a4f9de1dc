#!/bin/bash
# A refused config on SIGHUP changes nothing: a live connection survives, new connections
# are served with the old settings (old cipher, old port, the user the bad config dropped
# still works), and `katana check` reports the bad config. A valid reload afterwards applies.
. "$(dirname "$0")/lib.sh"
kt_need ss-local
needs_katana "refused reloads and katana check" || exit 77

CIPHER=aes-256-gcm
U1=$(kt_uuid); U2=$(kt_uuid)
echo_start
kt_ports 1; PORT=${PORTS[0]}
CFG=$T/config.json
mkconfig "$CFG" "$PORT" "$CIPHER" --user "1:$U1" --user "2:$U2" \
    --node-file "$T/node.json" --users-file "$T/users.json"
srv_start "$CFG"
cl_start u1 "$CIPHER" "$U1" "$PORT"; C1=$CL_PORT
cl_start u2 "$CIPHER" "$U2" "$PORT"; C2=$CL_PORT
KATANA=$(katana_bin)

# check_says MSG FILE: `katana check` exits 1 and prints MSG
check_says() {
    local out rc=0
    out=$(timeout 10 "$KATANA" check -c "$2" 2>&1) || rc=$?
    echo "katana check -> rc $rc: $out"
    [ "$rc" = 1 ] && grep -qi -- "$1" <<<"$out"
}

stream_bg live1 "$C1" 524288 65536 ok; LIVE=$STREAM_PID   # ~8 s across both bad reloads

# 1. unsupported cipher, and the same edit drops user 2
mkconfig "$CFG" "$PORT" no-such-cipher --user "1:$U1" \
    --node-file "$T/node.json" --users-file "$T/users.json"
check "katana check reports the unsupported cipher" check_says "configuration invalid" "$CFG"
srv_reload
echo "$SRV_RELOAD_LOG"
check "daemon still runs after the refused SIGHUP" srv_alive
check "user 1 served with the old cipher" tcp_rt "$C1" ok --bytes 131072 --seed a1
check "user 2 (dropped by the refused config) still served" tcp_rt "$C2" ok --bytes 131072 --seed a2
check "UDP still served" udp_rt "$C1" ok --count 3

# 2. a port already in use (the echo server's), again dropping user 2
mkconfig "$CFG" "$ECHO_PORT" "$CIPHER" --user "1:$U1" \
    --node-file "$T/node.json" --users-file "$T/users.json"
srv_reload
echo "$SRV_RELOAD_LOG"
check "daemon still runs after SIGHUP to a busy port" srv_alive
check "old port still serves user 1" tcp_rt "$C1" ok --bytes 131072 --seed b1
check "old port still serves user 2" tcp_rt "$C2" ok --bytes 131072 --seed b2
check "live stream still open" kt_alive "$LIVE"
stream_wait live1 "$LIVE" 20 "live stream across two refused reloads: every byte back"

# 3. control: a valid reload that drops user 2 does apply
mkconfig "$CFG" "$PORT" "$CIPHER" --user "1:$U1" \
    --node-file "$T/node.json" --users-file "$T/users.json"
check "katana check accepts the valid config" bash -c "timeout 10 '$KATANA' check -c '$CFG' 2>&1 | grep -q 'Configuration OK.'"
srv_reload
check "valid reload: no refusal logged" reload_applied
check "valid reload applied: user 2 refused" tcp_rt "$C2" refused --bytes 4096 --seed c2
check "valid reload applied: user 1 served" tcp_rt "$C1" ok --bytes 65536 --seed c1
srv_stop
check "daemon exits 0 on SIGTERM" test "$SRV_RC" = 0
kt_finish
