#!/bin/bash
# Trojan over gRPC over REALITY (issue 11; PANEL.md §1.4 trojan tls 2, network grpc;
# PROTOCOLS-2.md §1.6: HTTP/2 with prior knowledge inside REALITY) through the real daemon, its
# node from the panel emulator; the target site is reality_target.py.
# - A probe (curl) gets the target's page through the node's port.
# - Xray-core (user 1) and sing-box (user 2) Trojan+gRPC+REALITY clients move 1 MiB each way at
#   the same time, byte-identical, each user billed the bytes its client moved (within
#   rl_billed's bounds for TLS records and gRPC framing); an idle user 3 nothing.
KT_LIMIT=${KT_LIMIT:-200}
. "$(dirname "$0")/reality.sh"
rl_need xray sing-box

U1=$(kt_uuid); U2=$(kt_uuid); U3=$(kt_uuid)
SID=0123abcd
PAGE="trojan reality grpc target page $$"

rl_keys
rl_target "$PAGE"
RL_NODE_TYPE=trojan rl_node '{"protocol": "trojan", "network": "grpc",
                              "networkSettings": {"serviceName": "kt-tun"}}' "$U1" "$U2" "$U3"

page=$(timeout 10 curl -sk --resolve "localhost:$NODE_PORT:127.0.0.1" \
    "https://localhost:$NODE_PORT/" || true)
check "curl to the trojan gRPC REALITY port gets the target's page" test "$page" = "$PAGE"

rl_client xray trojan-reality-grpc u1 "$U1" "$PUB" "$SID"; C1=$CL_PORT
rl_client sing-box trojan-reality-grpc u2 "$U2" "$PUB" "$SID"; C2=$CL_PORT
rl_pair trojan-reality-grpc Trojan+gRPC+REALITY; snap=$SNAP
check "usage of user 1 is the bytes moved" rl_billed "$snap" 1 $((MIB + 68)) "$MIB"
check "usage of user 2 is the bytes moved" rl_billed "$snap" 2 $((MIB + 68)) "$MIB"
check "idle user 3 billed nothing" test -z "$(awk '$1 == 3 && ($2 > 0 || $3 > 0)' <<<"$snap")"
check "daemon still runs" kt_alive "$SRV_PID"
kt_finish
