#!/bin/bash
# Self-test of the Xray-core and sing-box client templates (issue 10, "Real clients and
# reference servers"): each client config in tests/interop/VENDOR/ first runs against the
# same vendor's own server (tests/interop/VENDOR/server-SCEN.json) on loopback, before
# t-trojan-clients.sh and t-vless-clients.sh point it at katana: 1 MiB byte-identical each way
# over TCP and 20 x 1200-byte datagrams through the client's SOCKS5 UDP ASSOCIATE, for
# every scenario with a template: Trojan over TLS, VLESS in clear and VLESS over TLS (verified
# against a test CA), HTTPUpgrade (Xray: VMess, sing-box: VLESS; issue 10), and gRPC (Xray:
# VLESS and Trojan over TLS, service kt-tun, Trojan in multiMode; sing-box: VLESS over TLS; and
# sing-box's "lite" gRPC client, peer sing-box-lite, on the same template against sing-box's
# server), SOCKS5 and HTTP (in clear and over TLS; TCP only) and AnyTLS (issue 27). A wrong
# secret gets no echo (the pair does authenticate). Skips only without a Go toolchain.
KT_LIMIT=${KT_LIMIT:-300}
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/trojan.sh"
. "$(dirname "$0")/../interop/peers.sh"
kt_need openssl
pr_need xray sing-box sing-box-lite

MIB=1048576
# pair_twice CMD...: CMD, and once more if it failed (a vendor's own pair lost data under a
# loaded CI run, twice; this test proves templates, not the vendors).
pair_twice() {
    "$@" && return 0
    echo "first try failed: $*; trying once more"
    sleep 1
    "$@"
}
tj_certs "$T/pki" server
echo_start
for vendor in xray sing-box; do
    for tpl in "$PR_TEMPLATES/$vendor"/client-*.json; do
        scen=${tpl##*/client-}; scen=${scen%.json}
        name=$vendor-$scen
        case $scen in
        *-reality|*-reality-*) # a vendor's REALITY server needs a target site;
                   # t-reality.sh, t-reality-grpc.sh and t-vision.sh run these clients against
                   # katana with a local target instead (issue 11)
            echo "$name: not self-tested against $vendor's server (see t-reality*.sh, t-vision.sh)"
            continue ;;
        *-vision) # a Vision client has a SOCKS inbound (Vision goes direct only for TLS 1.3
                  # inside), not the port forward this echo check speaks through; t-vision.sh
                  # runs it against katana (issue 11)
            echo "$name: not self-tested against $vendor's server (see t-vision.sh)"
            continue ;;
        esac
        secret=$(kt_uuid)
        kt_ports 1; port=${PORTS[0]}
        pr_server "$vendor" "$scen" "$name" "$secret" "$port"; srv=$PR_SRV_PID
        pr_client "$vendor" "$scen" "$name" "$secret" "$port"; ok=$CL_PORT cl=$CL_PID
        pr_client "$vendor" "$scen" "$name-bad" "$(kt_uuid)" "$port"; bad=$CL_PORT
        cl_bad=$CL_PID
        pr_tcp_opts "$vendor" "$scen"
        # Two third-party programs talking to each other: a pair that failed once (seen under
        # the ASan run's load) shows its logs and gets one more try with a fresh client.
        if ! tcp_rt "$ok" ok --bytes "$MIB" --seed "$name" --label "$name" "${PR_TCP[@]}"; then
            echo "$name: first try failed; client and server logs:"
            tail -n 20 "$T/client-$name.log" "$T/server-$name.log" || true
            kill -TERM "$cl" 2>/dev/null || true
            kt_wait_exit "$cl" 5 || true
            pr_client "$vendor" "$scen" "$name-again" "$secret" "$port"; ok=$CL_PORT cl=$CL_PID
        fi
        check "$name: $vendor client to $vendor server, 1 MiB each way, echo identical" \
            pair_twice tcp_rt "$ok" ok --bytes "$MIB" --seed "$name-2" --label "$name" "${PR_TCP[@]}"
        case $scen in
        socks* | http*) ;; # the proxy outbounds' templates carry TCP (their UDP is tested
                           # against katana's own client in t-proxy-inbounds.sh)
        *) check "$name: UDP, 20 x 1200-byte datagrams echoed identical" \
            pair_twice udp_rt "$ok" ok --count 20 --size 1200 --seed "$name-udp" ;;
        esac
        check "$name: a wrong secret gets no echo" pair_twice tcp_rt "$bad" refused --bytes 4096
        kill -TERM "$srv" "$cl" "$cl_bad" 2>/dev/null || true
        kt_wait_exit "$srv" 5 || true
        kt_wait_exit "$cl" 5 || true
        kt_wait_exit "$cl_bad" 5 || true
    done
done

# sing-box's lite gRPC client (the build without with_grpc) against sing-box's own server
name=sing-box-lite-vless-grpc
secret=$(kt_uuid)
kt_ports 1; port=${PORTS[0]}
pr_server sing-box vless-grpc "$name" "$secret" "$port"; srv=$PR_SRV_PID
pr_client sing-box-lite vless-grpc "$name" "$secret" "$port"; ok=$CL_PORT cl=$CL_PID
pr_client sing-box-lite vless-grpc "$name-bad" "$(kt_uuid)" "$port"; bad=$CL_PORT cl_bad=$CL_PID
check "$name: lite client to sing-box server, 1 MiB each way, echo identical" \
    pair_twice tcp_rt "$ok" ok --bytes "$MIB" --seed "$name" --label "$name"
check "$name: a wrong secret gets no echo" pair_twice tcp_rt "$bad" refused --bytes 4096
kill -TERM "$srv" "$cl" "$cl_bad" 2>/dev/null || true
kt_wait_exit "$srv" 5 || true
kt_wait_exit "$cl" 5 || true
kt_wait_exit "$cl_bad" 5 || true
kt_finish
