#!/bin/bash
# Trojan over REALITY (issue 11; PANEL.md §1.4: a trojan node's tls 2 with the same REALITY
# tls_settings as vless) through the real daemon, its node from the panel emulator. The target
# site is a local HTTPS server (reality_target.py) named by tls_settings.server_name /
# server_port.
# - Probes: `curl` to katana's port gets the target's page; an Xray-core Trojan+REALITY client
#   with a wrong short id is relayed to the target as a probe and gets no echo.
# - Valid clients: Xray-core (user 1) and sing-box (user 2) Trojan+REALITY move 1 MiB each way
#   at the same time, byte-identical, and each user is billed the bytes its client moved (the
#   Trojan request header included, within TLS record overhead); an idle user 3 nothing.
KT_LIMIT=${KT_LIMIT:-200}
. "$(dirname "$0")/reality.sh"
rl_need xray sing-box

U1=$(kt_uuid); U2=$(kt_uuid); U3=$(kt_uuid)
SID=0123abcd
PAGE="trojan reality target page $$"

rl_keys
rl_target "$PAGE"
RL_NODE_TYPE=trojan rl_node '{"protocol": "trojan", "server_name": "localhost"}' \
    "$U1" "$U2" "$U3"

# --- probes ------------------------------------------------------------------------------
c0=$(target_count)
page=$(timeout 10 curl -sk --resolve "localhost:$NODE_PORT:127.0.0.1" \
    "https://localhost:$NODE_PORT/" || true)
check "curl to the trojan REALITY port gets the target's page" test "$page" = "$PAGE"
check "the target saw that connection" test "$(target_count)" -gt "$c0"

lines0=$(tj_log_lines)
rl_client xray trojan-reality bad-sid "$U1" "$PUB" deadbeef; bad_sid=$CL_PORT
c0=$(target_count)
check "Xray Trojan client with a wrong short id: no echo" tcp_rt "$bad_sid" refused --bytes 4096
check "Xray Trojan client with a wrong short id: relayed to the target as a probe" \
    test "$(target_count)" -gt "$c0"
check "wrong REALITY client: no log line" test "$(tj_log_lines)" = "$lines0"

# --- valid clients -----------------------------------------------------------------------
rl_client xray trojan-reality u1 "$U1" "$PUB" "$SID"; C1=$CL_PORT
rl_client sing-box trojan-reality u2 "$U2" "$PUB" "$SID"; C2=$CL_PORT
rl_pair trojan-reality Trojan+REALITY; snap=$SNAP
# one connection each: the Trojan request (56 hex digits, CRLF, command, IPv4 address, port,
# CRLF: 68 bytes) up, nothing added down
check "usage of user 1 is the bytes moved" rl_billed "$snap" 1 $((MIB + 68)) "$MIB"
check "usage of user 2 is the bytes moved" rl_billed "$snap" 2 $((MIB + 68)) "$MIB"
check "idle user 3 billed nothing" test -z "$(awk '$1 == 3 && ($2 > 0 || $3 > 0)' <<<"$snap")"
check "daemon still runs" kt_alive "$SRV_PID"
kt_finish
