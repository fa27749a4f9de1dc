#!/bin/bash
# t-docs-example-pair.sh: the REALITY example of packaging/examples end to end, as an operator
# uses it: katana runs packaging/examples/nodes/vless-reality-vision.json, and its two clients,
# clients/xray/ and clients/sing-box/vless-reality-vision.json, each move 256 KiB each way
# through it to an echo server, byte-identical. The files are taken as they are (the example's
# REALITY private key, the clients' public key and short id, the user's uuid and Vision flow);
# only what names the operator's host is pointed at loopback (jq, below): the node's port and
# listen address, the REALITY target (a local TLS 1.3 site, reality_target.py, as
# "localhost"), allow_private for the loopback echo, the clients' server and SOCKS port.
# A probe without a key gets the target's page through the node (the example's REALITY is live).
KT_LIMIT=${KT_LIMIT:-60}
. "$(dirname "$0")/../integration/lib.sh"
# the helpers of tests/integration (katest.py, reality_target.py) and of the interop peers
KT_DIR=$(cd "$KT_DIR/../integration" && pwd)
KT_PY=(python3 "$KT_DIR/katest.py")
. "$KT_DIR/panel.sh"
. "$KT_DIR/../interop/peers.sh"
kt_need openssl curl jq
[ "$KT_SERVER" = katana ] || skip_all "KT_SERVER=$KT_SERVER: REALITY needs katana"
pr_need xray sing-box
TOP=${KATANA_TOP_SRCDIR:-$(cd "$KT_DIR/../.." && pwd)}
EX=$TOP/packaging/examples
NAME=vless-reality-vision
PAGE="the example's target page $$"

# The REALITY target: a local HTTPS site for "localhost" (self-signed) on TARGET_PORT.
kt_ports 2; TARGET_PORT=${PORTS[0]} NODE_PORT=${PORTS[1]}
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
    -keyout "$T/target.key" -out "$T/target.crt" -subj "/CN=localhost" \
    -addext "subjectAltName=DNS:localhost" 2>/dev/null
kt_bg target python3 "$KT_DIR/reality_target.py" --port "$TARGET_PORT" --cert "$T/target.crt" \
    --key "$T/target.key" --body "$PAGE" --count-file "$T/target.count" \
    --ready-file "$T/target.ready"
kt_wait_file "$T/target.ready" 10 || { fail "target site did not start"; exit 1; }
echo_start

# The server example: its port and target become the test's; everything else stays.
jq --argjson port "$NODE_PORT" --argjson target "$TARGET_PORT" '
    .nodes[0].listen = "127.0.0.1" | .nodes[0].allow_private = true |
    .nodes[0].panel.node.server_port = $port |
    .nodes[0].panel.node.tls_settings.server_name = "localhost" |
    .nodes[0].panel.node.tls_settings.server_port = $target' \
    "$EX/nodes/$NAME.json" >"$T/server.json"
kt_log "the server example, pointed at loopback:"; sed 's/^/    /' "$T/server.json"
check "katana check --offline accepts the example" "$(katana_bin)" check --offline -c "$T/server.json"
check "and warns that its private key is the published example key" \
    bash -c "'$(katana_bin)' check --offline -c '$T/server.json' 2>&1 |
             grep -q \"tls_settings.private_key is the documentation's example key\""
kat_start "$T/server.json"

page=$(timeout 10 curl -sk --resolve "localhost:$NODE_PORT:127.0.0.1" \
    "https://localhost:$NODE_PORT/" || true)
check "a probe without the key gets the target's page through the node" test "$page" = "$PAGE"

# client VENDOR: the example client of VENDOR to the test's node, SOCKS on a free port
# (CL_PORT); started in the background.
client() {
    local filter
    kt_ports 1; CL_PORT=${PORTS[0]}
    if [ "$1" = xray ]; then
        filter='.inbounds[0].port = $local |
            .outbounds[0].settings.vnext[0].address = "127.0.0.1" |
            .outbounds[0].settings.vnext[0].port = $node |
            .outbounds[0].streamSettings.realitySettings.serverName = "localhost"'
    else
        filter='.inbounds[0].listen_port = $local | .outbounds[0].server = "127.0.0.1" |
            .outbounds[0].server_port = $node | .outbounds[0].tls.server_name = "localhost"'
    fi
    jq --argjson local "$CL_PORT" --argjson node "$NODE_PORT" "$filter" \
        "$EX/clients/$1/$NAME.json" >"$T/client-$1.json"
    pr_cmd "$1" "$T/client-$1.json"
    kt_bg "client-$1" "${PR_CMD[@]}"
    kt_wait_port "$CL_PORT" 10 || { fail "$1 client did not listen on $CL_PORT"; exit 1; }
}

for vendor in xray sing-box; do
    client "$vendor"
    check "the $vendor example client: 256 KiB each way through the example node, echo identical" \
        tcp_rt "$CL_PORT" ok --bytes 262144 --seed "example-$vendor" --label "$vendor"
done
check "katana still runs" kt_alive "$SRV_PID"
kt_finish
