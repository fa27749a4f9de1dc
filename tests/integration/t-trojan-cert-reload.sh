#!/bin/bash
# Certificate reload (issue 8): the node's cert/key files swapped on disk + SIGHUP -> new
# connections see the new certificate (SHA-256 fingerprint from `openssl s_client`), a stream
# opened before keeps flowing; a broken new pair (garbage PEM, or a certificate whose key does
# not match) + SIGHUP -> refused with a log error naming the certificate, the old one still
# served and clients still served. Self-check: trojan-gfw (KT_SERVER=trojan) restarts on
# SIGHUP, so the swap is checked against it too (not the live stream, not the broken pairs);
# v2ray (no reload) only checks the fingerprint probe against the first certificate.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/trojan.sh"
kt_need trojan openssl
tj_need_server

U1=$(kt_uuid)
tj_certs "$T/pki" a; FP_A=$(tj_fp_file "$TJ_CERT")
tj_certs "$T/pki" b; FP_B=$(tj_fp_file "$TJ_CERT")
mkdir -p "$T/node"
cp "$T/pki/a.crt" "$T/node/cert.pem"; cp "$T/pki/a.key" "$T/node/key.pem"
echo_start
kt_ports 1
mkconfig "$T/config.json" "${PORTS[0]}" - --protocol trojan --cert-file "$T/node/cert.pem" \
    --key-file "$T/node/key.pem" --user "1:$U1"
tj_srv_start "$T/config.json"
PORT=$(tj_port)

served_is() {   # DESCRIPTION FP: the certificate served now has fingerprint FP
    local got; got=$(tj_fp_served "$PORT")
    echo "served: ${got:-none}"
    [ "$got" = "$2" ]
}
check "the first certificate is served (fingerprint from openssl s_client)" served_is a "$FP_A"
tj_trojan_client c1 "$U1" "$PORT"; C1=$CL_PORT
check "a client verifying against the test CA moves data" tcp_rt "$C1" ok --bytes 262144 --seed c1

# trojan-gfw restarts its service on SIGHUP and re-reads its certificate, so the swap itself
# (not the live stream, which a restart may cut) is checked against it too
if [ "$KT_SERVER" = v2ray ]; then
    needs_katana "certificate swap + SIGHUP (v2ray does not reload)" || true
else
    if [ "$KT_SERVER" = katana ]; then
        # a stream opened before the swap: 4 MiB at 512 KiB/s (about 8 s)
        stream_bg live "$C1" 4194304 524288 ok
    fi
    # swap both files on disk (rename: a reader never sees half a file)
    cp "$T/pki/b.crt" "$T/node/cert.tmp"; mv "$T/node/cert.tmp" "$T/node/cert.pem"
    cp "$T/pki/b.key" "$T/node/key.tmp"; mv "$T/node/key.tmp" "$T/node/key.pem"
    tj_reload
    ok=1
    for _ in $(seq 1 10); do served_is b "$FP_B" >/dev/null && { ok=0; break; }; sleep 0.5; done
    check "after the swap + SIGHUP new connections see the new certificate" test "$ok" = 0
    check "the swap was not refused" reload_applied
    tj_trojan_client c2 "$U1" "$PORT"; C2=$CL_PORT
    check "a new client (verifying the new certificate) moves data" \
        tcp_rt "$C2" ok --bytes 262144 --seed c2
    if needs_katana "a live stream survives the swap"; then
        stream_wait live "$STREAM_PID" 30 "the stream opened before the swap kept flowing to the end"
    fi
fi

if needs_katana "a broken new pair is refused"; then
    # broken pairs: garbage PEM, then a certificate with the wrong key
    for bad in garbage mismatch; do
        if [ "$bad" = garbage ]; then
            printf -- '-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n' \
                >"$T/node/cert.tmp"
            mv "$T/node/cert.tmp" "$T/node/cert.pem"
        else
            cp "$T/pki/b.crt" "$T/node/cert.tmp"; mv "$T/node/cert.tmp" "$T/node/cert.pem"
            cp "$T/pki/a.key" "$T/node/key.tmp"; mv "$T/node/key.tmp" "$T/node/key.pem"
        fi
        tj_reload
        echo "reload log ($bad):"; echo "$SRV_RELOAD_LOG"
        check "$bad pair + SIGHUP: a log error names the certificate" \
            grep -qiE "cert|key" <<<"$SRV_RELOAD_LOG"
        check "$bad pair + SIGHUP: katana still runs" srv_alive
        check "$bad pair + SIGHUP: the old certificate is still served" served_is b "$FP_B"
        check "$bad pair + SIGHUP: clients still served" tcp_rt "$C2" ok --bytes 65536 --seed "$bad"
    done
fi

srv_stop
if needs_katana "exit status on SIGTERM"; then
    check "SIGTERM: katana exits 0 within 7 s" test "$SRV_RC" = 0
fi
kt_finish
