#!/bin/bash
# UDP through `ss-local -u` (SOCKS5 UDP ASSOCIATE): datagrams come back identical, per cipher.
. "$(dirname "$0")/lib.sh"
kt_need ss-local

echo_start
for cipher in aes-128-gcm aes-256-gcm chacha20-ietf-poly1305; do
    kt_ports 1
    uuid=$(kt_uuid)
    mkconfig "$T/$cipher.json" "${PORTS[0]}" "$cipher" --user "1:$uuid"
    srv_start "$T/$cipher.json"
    cl_start "$cipher" "$cipher" "$uuid" "$(srv_user_port 1)"
    check "$cipher: 20 x 1200-byte datagrams echoed identical" \
        udp_rt "$CL_PORT" ok --count 20 --size 1200 --seed "$cipher"
    check "$cipher: 1400-byte datagrams" \
        udp_rt "$CL_PORT" ok --count 2 --size 1400 --seed "$cipher-big"
    check "$cipher: 8-byte datagrams" udp_rt "$CL_PORT" ok --count 2 --size 8 --seed "$cipher-small"
    check "$cipher: TCP still works next to UDP" tcp_rt "$CL_PORT" ok --bytes 65536
    srv_detach     # stopped together below
done
srv_stop
check "every server exits 0 on SIGTERM within 7 s" test "$SRV_RC" = 0
kt_finish
