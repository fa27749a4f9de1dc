#!/bin/bash
# Certificate files re-read on every panel sync (issue 8: "re-read on SIGHUP and on every panel
# sync when their content changed"), with no SIGHUP and panel data that does not change: a
# Trojan node of the UniProxy panel emulator (pull every second) with a "file" certificate.
#  - the pair swapped on disk is served to new connections after the next pulls, a stream opened
#    before keeps flowing to its end;
#  - a broken new pair (garbage PEM) is refused with one log line naming the inbound, and not
#    logged again over the next pulls while the files stay the same; the old certificate is still
#    served and clients still served;
#    a user the panel adds meanwhile is served (a user edit does not depend on the files);
#  - a different broken pair (key of another certificate) is reported again, once;
#  - a good pair put back is served again.
# SIGHUP is covered by t-trojan-cert-reload.sh.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/trojan.sh"
. "$(dirname "$0")/panel.sh"
kt_need trojan openssl curl
needs_katana "certificate reload on a panel sync" || exit 77

U1=$(kt_uuid)
tj_certs "$T/pki" a; FP_A=$(tj_fp_file "$TJ_CERT")
tj_certs "$T/pki" b; FP_B=$(tj_fp_file "$TJ_CERT")
mkdir -p "$T/node"
cp "$T/pki/a.crt" "$T/node/cert.pem"; cp "$T/pki/a.key" "$T/node/key.pem"
echo_start

kt_ports 3; PANEL_PORT=${PORTS[0]}; PORT=${PORTS[1]}; API_PORT=${PORTS[2]}
cat >"$T/panel-config.json" <<EOF
{"server_port": $PORT, "server_name": "$TJ_SNI", "network": "tcp",
 "base_config": {"push_interval": 60, "pull_interval": 1}}
EOF
echo "{\"users\": [{\"id\": 1, \"uuid\": \"$U1\", \"speed_limit\": null, \"device_limit\": null}]}" \
    >"$T/panel-users.json"
kt_bg panel python3 "$KT_DIR/panel_emu.py" --port "$PANEL_PORT" --token "$PANEL_TOKEN" \
    --config "$T/panel-config.json" --users "$T/panel-users.json" --ready-file "$T/panel.ready"
kt_wait_file "$T/panel.ready" 10 || { fail "panel emulator did not start"; exit 1; }
cat >"$T/config.json" <<EOF
{"log": {"level": "info"}, "workers": 1, "api": {"listen": "127.0.0.1:$API_PORT"},
 "db": {"path": "$T/katana.db"},
 "nodes": [{"tag": "n1", "listen": "127.0.0.1", "allow_private": true,
            "cert": {"mode": "file", "cert_file": "$T/node/cert.pem",
                     "key_file": "$T/node/key.pem"},
            "panel": {"type": "uniproxy", "url": "http://127.0.0.1:$PANEL_PORT",
                      "token": "$PANEL_TOKEN", "node_id": 1, "node_type": "trojan",
                      "timeout": 2}}]}
EOF
NODE_PORT=$PORT; kat_start "$T/config.json"

served_is() {   # FP: the certificate served now has fingerprint FP
    local got; got=$(tj_fp_served "$PORT")
    echo "served: ${got:-none}"
    [ "$got" = "$1" ]
}
served_within() {   # SECS FP: the certificate FP is served within SECS seconds
    local i
    for ((i = 0; i < $1 * 2; i++)); do served_is "$2" >/dev/null && return 0; sleep 0.5; done
    served_is "$2"
}
# pulls_after N: wait (at most 15 s) until the panel has answered N more config pulls.
pulls_after() {
    local want i; want=$(($(panel_hits config) + $1))
    for ((i = 0; i < 75; i++)); do [ "$(panel_hits config)" -ge "$want" ] && return 0; sleep 0.2; done
    return 1
}
# refusals_since OFFSET: certificate refusals katana logged after byte OFFSET of its log.
refusals_since() { tail -c +"$(($1 + 1))" "$SRV_LOG" | grep -c "certificate refused" || true; }
# refusal_logged_within SECS OFFSET: a refusal appears after OFFSET within SECS seconds.
refusal_logged_within() {
    local i
    for ((i = 0; i < $1 * 5; i++)); do [ "$(refusals_since "$2")" -ge 1 ] && return 0; sleep 0.2; done
    return 1
}
swap() {   # CERT KEY: replace both files by rename (a reader never sees half a file)
    cp "$1" "$T/node/cert.tmp"; mv "$T/node/cert.tmp" "$T/node/cert.pem"
    cp "$2" "$T/node/key.tmp"; mv "$T/node/key.tmp" "$T/node/key.pem"
}

check "the first certificate is served" served_is "$FP_A"
tj_trojan_client c1 "$U1" "$PORT"; C1=$CL_PORT
check "a client verifying against the test CA moves data" tcp_rt "$C1" ok --bytes 262144 --seed c1
pulls_after 2 || fail "the panel was not pulled every second"
# a stream opened before the swap: 4 MiB at 512 KiB/s (about 8 s)
stream_bg live "$C1" 4194304 524288 ok

swap "$T/pki/b.crt" "$T/pki/b.key"
check "after the swap on disk, with no SIGHUP and no panel change, new connections see the new certificate within 10 s" \
    served_within 10 "$FP_B"
check "no SIGHUP was involved" bash -c "! grep -q SIGHUP '$SRV_LOG'"
check "the reload was logged" grep -q "inbound n1: certificate reloaded" "$SRV_LOG"
tj_trojan_client c2 "$U1" "$PORT"; C2=$CL_PORT
check "a new client (verifying the new certificate) moves data" tcp_rt "$C2" ok --bytes 262144 --seed c2
stream_wait live "$STREAM_PID" 30 "the stream opened before the swap kept flowing to the end"

# a broken new pair: garbage PEM
mark=$(stat -c %s "$SRV_LOG")
printf -- '-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n' \
    >"$T/node/cert.tmp"
mv "$T/node/cert.tmp" "$T/node/cert.pem"
check "garbage certificate: refused with a log line within 10 s" refusal_logged_within 10 "$mark"
tail -c +"$((mark + 1))" "$SRV_LOG" | grep "certificate refused" | head -3 || true
check "garbage certificate: the log line names the inbound and the file" \
    grep -q "inbound n1: certificate refused: .*cert_file" "$SRV_LOG"
pulls_after 4 || fail "the panel was not pulled 4 more times"
n=$(refusals_since "$mark")
check "garbage certificate: logged once across 4 more pulls (got $n)" test "$n" = 1
check "garbage certificate: the old certificate is still served" served_is "$FP_B"
check "garbage certificate: clients still served" tcp_rt "$C2" ok --bytes 65536 --seed garbage
# the panel adds a user while the broken file is on disk: the user edit still applies
U2=$(kt_uuid)
panel_ctl users "{\"users\": [{\"id\": 1, \"uuid\": \"$U1\"}, {\"id\": 2, \"uuid\": \"$U2\"}]}"
tj_trojan_client c4 "$U2" "$PORT"; C4=$CL_PORT
user2_served() {
    local i
    for ((i = 0; i < 20; i++)); do
        tcp_rt "$C4" ok --bytes 4096 --seed u2 >/dev/null 2>&1 && return 0
        sleep 0.5
    done
    return 1
}
check "garbage certificate: a user the panel adds meanwhile is served within 10 s" user2_served

# a different broken pair: the certificate of a with the key of b -> reported again, once
mark=$(stat -c %s "$SRV_LOG")
swap "$T/pki/a.crt" "$T/pki/b.key"
check "mismatched key: refused with a log line within 10 s" refusal_logged_within 10 "$mark"
pulls_after 4 || fail "the panel was not pulled 4 more times"
n=$(refusals_since "$mark")
check "mismatched key: logged once across 4 more pulls (got $n)" test "$n" = 1
check "mismatched key: the old certificate is still served" served_is "$FP_B"

# a good pair again
swap "$T/pki/a.crt" "$T/pki/a.key"
check "a good pair put back is served within 10 s" served_within 10 "$FP_A"
tj_trojan_client c3 "$U1" "$PORT"; C3=$CL_PORT
check "a client of the restored certificate moves data" tcp_rt "$C3" ok --bytes 65536 --seed c3

kat_stop
check "SIGTERM: katana exits 0" test "$SRV_RC" = 0
kt_finish
