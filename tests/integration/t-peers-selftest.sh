#!/bin/bash
# Self-test of the Xray-core and sing-box client templates (issue 10, "Real clients and
# reference servers"): each client config in tests/interop/VENDOR/ first runs against the
# same vendor's own server (tests/interop/VENDOR/server-SCEN.json) on loopback, before
# t-trojan-clients.sh and t-vless-clients.sh point it at katana: 1 MiB byte-identical each way
# over TCP and 20 x 1200-byte datagrams through the client's SOCKS5 UDP ASSOCIATE, for
# Trojan over TLS, VLESS in clear and VLESS over TLS (verified against a test CA), and with
# Xray VLESS and Trojan over TLS on gRPC (service kt-tun, Trojan in multiMode) and sing-box
# VLESS over TLS on gRPC. A wrong
# secret gets no echo (the pair does authenticate). Skips only without a Go toolchain.
KT_LIMIT=${KT_LIMIT:-300}
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/trojan.sh"
. "$(dirname "$0")/../interop/peers.sh"
kt_need openssl
pr_need xray sing-box

MIB=1048576
tj_certs "$T/pki" server
echo_start
for pair in xray/trojan-tls xray/vless-tcp xray/vless-tls xray/vless-grpc xray/trojan-grpc \
    sing-box/trojan-tls sing-box/vless-tcp sing-box/vless-tls sing-box/vless-grpc; do
    vendor=${pair%%/*} scen=${pair#*/}
    name=$vendor-$scen
    secret=$(kt_uuid)
    kt_ports 1; port=${PORTS[0]}
    pr_server "$vendor" "$scen" "$name" "$secret" "$port"; srv=$PR_SRV_PID
    pr_client "$vendor" "$scen" "$name" "$secret" "$port"; ok=$CL_PORT
    pr_client "$vendor" "$scen" "$name-bad" "$(kt_uuid)" "$port"; bad=$CL_PORT
    pr_tcp_opts "$vendor" "$scen"
    check "$name: $vendor client to $vendor server, 1 MiB each way, echo identical" \
        tcp_rt "$ok" ok --bytes "$MIB" --seed "$name" --label "$name" "${PR_TCP[@]}"
    check "$name: UDP, 20 x 1200-byte datagrams echoed identical" \
        udp_rt "$ok" ok --count 20 --size 1200 --seed "$name-udp"
    check "$name: a wrong secret gets no echo" tcp_rt "$bad" refused --bytes 4096
    kill -TERM "$srv" 2>/dev/null || true
    kt_wait_exit "$srv" 5 || true
done
kt_finish
