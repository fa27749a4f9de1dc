#!/bin/bash
# Issue 8 / seed 002: direct UDP binds one socket per address family and fails only when none
# binds. On a host without IPv6 (here: katana under an LD_PRELOAD shim that makes every
# socket(AF_INET6) fail, as ipv6.disable=1 does) datagrams to IPv4 destinations and to a name
# that resolves to IPv4 are still relayed.
. "$(dirname "$0")/lib.sh"
kt_need ss-local
needs_katana "the shim is preloaded into katana" || skip_all "needs katana"
CC_BIN=${CC:-cc}
command -v "$CC_BIN" >/dev/null || skip_all "no C compiler to build the shim"
"$CC_BIN" -shared -fPIC -o "$T/no_ipv6.so" "$KT_DIR/no_ipv6.c" -ldl ||
    { fail "building the shim failed"; exit 1; }

echo_start
kt_ports 1
uuid=$(kt_uuid)
mkconfig "$T/config.json" "${PORTS[0]}" aes-128-gcm --user "1:$uuid"
# ASan wants to be first in the library list; the shim is harmless to it
LD_PRELOAD="$T/no_ipv6.so" ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" \
    srv_start "$T/config.json"
cl_start c aes-128-gcm "$uuid" "$(srv_user_port 1)"
check "IPv4 destination: datagrams echoed identical without IPv6" \
    udp_rt "$CL_PORT" ok --count 5 --size 600 --seed v4
check "a name (localhost): sent to its IPv4 address" \
    udp_rt "$CL_PORT" ok --count 3 --size 100 --seed name --dest-host localhost
check "TCP still works" tcp_rt "$CL_PORT" ok --bytes 65536
srv_stop
check "katana exits 0 on SIGTERM" test "$SRV_RC" = 0
kt_finish
