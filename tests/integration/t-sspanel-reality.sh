#!/bin/bash
# An SSPanel-UIM node with REALITY (issue 11; PANEL.md §2.5: custom_config enable_reality and
# reality-opts, PROTOCOLS-2.md §1.1) through the real daemon, its node from the panel emulator's
# SSPanel mode: a vless node (sort 11) whose reality-opts give the target as a bare port (the
# local HTTPS target, reality_target.py, on 127.0.0.1), two server names, two short ids, a time
# window, client version bounds 1.8.0 .. 26.3.27 and proxy_protocol_ver 1.
# - Probes: curl to katana's port gets the target's page, and the target reads a PROXY protocol
#   v1 header naming the client's address and katana's port before the TLS bytes.
# - A REALITY hello with the right key and short id but client version 1.0.0 (below
#   min_client_ver) is a probe: relayed to the target, which answers it, with no log line; the
#   same hello with version 26.3.27 is katana's (its ServerHello mirrors the target's flight).
# - An Xray-core VLESS+REALITY client (user 1; the second short id and server name) moves 1 MiB
#   each way byte-identical and is billed the bytes it moved.
KT_LIMIT=${KT_LIMIT:-200}
. "$(dirname "$0")/reality.sh"
rl_need xray

U1=$(kt_uuid); U2=$(kt_uuid)
SID=0123abcd
PAGE="sspanel reality target page $$"

rl_keys
rl_target "$PAGE" --proxy-file "$T/target.proxy"
RL_PANEL=sspanel rl_node "{\"sspanel_custom_config\": {\"enable_reality\": true,
    \"reality-opts\": {\"dest\": $TARGET_PORT, \"proxy_protocol_ver\": 1,
                       \"server_names\": [\"other.test\", \"localhost\"],
                       \"private_key\": \"$PRIV\", \"short_ids\": [\"ab\", \"$SID\"],
                       \"max_time_diff\": 60000, \"min_client_ver\": \"1.8.0\",
                       \"max_client_ver\": \"26.3.27\"}}}" "$U1" "$U2"

# --- probes ------------------------------------------------------------------------------
page=$(timeout 10 curl -sk --resolve "localhost:$NODE_PORT:127.0.0.1" \
    "https://localhost:$NODE_PORT/" || true)
check "curl to the SSPanel REALITY node's port gets the target's page" test "$page" = "$PAGE"
echo "PROXY headers the target read:"; cat "$T/target.proxy"
check "the target read a PROXY v1 header from the client's address to katana's port" \
    grep -Eq "^v1 PROXY TCP4 127\.0\.0\.1 127\.0\.0\.1 [0-9]+ $NODE_PORT\$" "$T/target.proxy"

# hello VERSION: a REALITY hello with the right key and short id sealing client VERSION; prints
# "TARGET_CONNECTIONS first=.. mirror=.." as t-reality-grpc.sh's.
hello() {
    local before; before=$(target_count)
    out=$(timeout 20 python3 "$KT_DIR/reality_hello.py" --port "$NODE_PORT" \
        --public-key="$PUB" --short-id "$SID" --sni localhost --client-version "$1" --wait 2 \
        --flight-file "$T/target.flight")
    sleep 0.3
    echo "$(($(target_count) - before)) $(sed -n 's/^bytes=[0-9]* //p' <<<"$out")" \
        "$(sed -n 's/^\(mirror=[a-z]*\).*/\1/p' <<<"$out")"
}
lines0=$(tj_log_lines)
old=$(hello 1.0.0); ok=$(hello 26.3.27)
echo "client version 1.0.0: $old; 26.3.27: $ok"
check "a REALITY hello of client version 1.0.0 (below min_client_ver) is a probe" \
    test "$old" = "1 first=16 03 03 mirror=differs"
check "a REALITY hello of client version 26.3.27 is katana's (mirrors the target's flight)" \
    test "$ok" = "1 first=16 03 03 mirror=ok"
check "the target read a PROXY header for katana's dial of the valid hello too" \
    test "$(grep -c '^v1 PROXY TCP4' "$T/target.proxy")" -ge 3
check "hellos: no log line" test "$(tj_log_lines)" = "$lines0"

# --- a valid client -----------------------------------------------------------------------
rl_client xray vless-reality u1 "$U1" "$PUB" "$SID"
r1=0
tcp_rt "$CL_PORT" ok --bytes "$MIB" --seed sspanel-reality-u1 --label u1 || r1=$?
check "Xray-core VLESS+REALITY on the SSPanel node (user 1): 1 MiB each way, echo identical" \
    test "$r1" = 0
sleep 1.5   # the sampler folds flow counters every second
snap=$(kat_snapshot)
echo "SIGUSR1 snapshot:"; echo "$snap"
check "usage of user 1 is the bytes moved" rl_billed "$snap" 1 $((MIB + 26)) $((MIB + 2))
check "idle user 2 billed nothing" test -z "$(awk '$1 == 2 && ($2 > 0 || $3 > 0)' <<<"$snap")"
check "daemon still runs" kt_alive "$SRV_PID"
kt_finish
