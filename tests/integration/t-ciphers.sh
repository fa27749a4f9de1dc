#!/bin/bash
# 1 MiB through ss-local's SOCKS5 to a loopback echo server comes back byte-identical,
# for each AEAD cipher (aes-128-gcm, aes-256-gcm, chacha20-ietf-poly1305).
. "$(dirname "$0")/lib.sh"
kt_need ss-local

echo_start
for cipher in aes-128-gcm aes-256-gcm chacha20-ietf-poly1305; do
    kt_ports 1
    uuid=$(kt_uuid)
    mkconfig "$T/$cipher.json" "${PORTS[0]}" "$cipher" --user "1:$uuid"
    srv_start "$T/$cipher.json"
    cl_start "$cipher" "$cipher" "$uuid" "$(srv_user_port 1)"
    check "$cipher: 1 MiB echoed identical" \
        "${KT_PY[@]}" tcp --socks "$CL_PORT" --dest-port "$ECHO_PORT" --bytes 1048576 \
        --seed "$cipher" --label "$cipher"
    check "$cipher: 4 parallel connections x 256 KiB" \
        "${KT_PY[@]}" tcp --socks "$CL_PORT" --dest-port "$ECHO_PORT" --bytes 262144 \
        --conns 4 --seed "$cipher-par" --label "$cipher-par"
    srv_detach     # stopped together below
done
srv_stop
check "every server exits 0 on SIGTERM within 7 s" test "$SRV_RC" = 0
kt_finish
