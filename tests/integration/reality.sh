#!/bin/bash
# reality.sh: the setup the REALITY tests share (issue 11; t-reality*, t-trojan-reality*,
# t-sspanel-reality, t-vision):
# the node's X25519 pair, a local target site (reality_target.py with a self-signed certificate
# for localhost), and a vless node with tls 2 served to katana by the panel emulator.
# Sourcing it sources lib.sh, panel.sh, trojan.sh and the interop peers (peers.sh) too.
RL_DIR=$(dirname "${BASH_SOURCE[0]}")
. "$RL_DIR/lib.sh"
. "$RL_DIR/panel.sh"
. "$RL_DIR/trojan.sh"
. "$RL_DIR/../interop/peers.sh"

# rl_need PEER...: skips the test unless it runs against katana (REALITY is katana's own) with
# openssl, curl, python3-cryptography and the given interop peers (pr_need).
rl_need() {
    kt_need openssl curl
    [ "$KT_SERVER" = katana ] || skip_all "KT_SERVER=$KT_SERVER: REALITY needs katana"
    python3 -c 'import cryptography' 2>/dev/null || skip_all "python3-cryptography is not installed"
    pr_need "$@"
}

# rl_keys: sets PRIV and PUB, the node's X25519 pair, and OTHER_PUB, another public key (each
# base64url without padding, PROTOCOLS-2.md §1.1).
rl_keys() {
    read -r PRIV PUB OTHER_PUB < <(python3 - <<'PY'
import base64
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
b = lambda raw: base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
k, o = X25519PrivateKey.generate(), X25519PrivateKey.generate()
print(b(k.private_bytes_raw()), b(k.public_key().public_bytes_raw()),
      b(o.public_key().public_bytes_raw()))
PY
)
}

# rl_target BODY [OPTION...]: picks TARGET_PORT, PANEL_PORT, NODE_PORT and API_PORT; makes the
# target's certificate ($T/target.crt, .key; its fingerprint in TARGET_FP) and starts the target
# site (rl_target_up BODY [OPTION...]). target_count prints how many connections the target has
# seen.
rl_target() {
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
        -keyout "$T/target.key" -out "$T/target.crt" -subj "/CN=localhost" \
        -addext "subjectAltName=DNS:localhost" 2>/dev/null
    TARGET_FP=$(openssl x509 -in "$T/target.crt" -noout -fingerprint -sha256)
    kt_ports 4
    TARGET_PORT=${PORTS[0]} PANEL_PORT=${PORTS[1]} NODE_PORT=${PORTS[2]} API_PORT=${PORTS[3]}
    rl_target_up "$@"
}
target_count() { cat "$T/target.count"; }

# rl_target_up BODY [OPTION...]: (re)starts the target site on TARGET_PORT with rl_target's
# certificate, answering BODY and recording each handshake's first flight in $T/target.flight (a
# restart counts connections from 0 again), with more reality_target.py options after BODY (e.g.
# --proxy-file); its pid in TARGET_PID.
rl_target_up() {
    rm -f "$T/target.ready"
    kt_bg target python3 "$KT_DIR/reality_target.py" --port "$TARGET_PORT" \
        --cert "$T/target.crt" --key "$T/target.key" --body "$1" \
        --count-file "$T/target.count" --ready-file "$T/target.ready" \
        --flight-file "$T/target.flight" "${@:2}"
    TARGET_PID=$BG_PID
    kt_wait_file "$T/target.ready" 10 || { fail "target site did not start"; exit 1; }
}

# rl_node NODE_JSON UUID...: the panel emulator serves a vless node with tls 2 on NODE_PORT
# (PANEL.md §1.4: REALITY towards localhost:TARGET_PORT with PRIV, PUB and short id SID) with
# NODE_JSON's members over it (a tls_settings object adds to the REALITY one), and users 1, 2...
# with the given uuids (UUID@MBPS: with that speed_limit); then katana (one worker, API on
# API_PORT) is started on that panel, asking for node type RL_NODE_TYPE (default vless;
# "trojan" with NODE_JSON's protocol trojan). RL_PANEL=sspanel: the emulator speaks SSPanel
# mod_mu (NODE_JSON's sspanel_custom_config members join the node's custom_config) and katana's
# panel is "sspanel".
rl_node() {
    python3 - "$T" "$NODE_PORT" "$TARGET_PORT" "$PRIV" "$PUB" "$SID" "$@" <<'PY'
import json, sys
t, node, target, priv, pub, sid, extra = sys.argv[1:8]
config = {"protocol": "vless", "listen_ip": "0.0.0.0", "server_port": int(node),
          "network": "tcp", "networkSettings": None, "tls": 2, "flow": None,
          "decryption": None,
          "tls_settings": {"server_name": "localhost", "server_port": target,
                           "public_key": pub, "private_key": priv, "short_id": sid,
                           "allow_insecure": False},
          "base_config": {"push_interval": 60, "pull_interval": 60}}
for key, value in json.loads(extra).items():
    if key == "tls_settings":
        config[key].update(value)
    else:
        config[key] = value
json.dump(config, open(t + "/panel-config.json", "w"))
users = [u.partition("@") for u in sys.argv[8:]]
json.dump({"users": [{"id": i + 1, "uuid": u, "speed_limit": int(mbps) if mbps else None,
                      "device_limit": None} for i, (u, _, mbps) in enumerate(users)]},
          open(t + "/panel-users.json", "w"))
PY
    kt_bg panel python3 "$KT_DIR/panel_emu.py" --port "$PANEL_PORT" --token "$PANEL_TOKEN" \
        --config "$T/panel-config.json" --users "$T/panel-users.json" \
        --ready-file "$T/panel.ready" --mode "${RL_PANEL:-uniproxy}"
    kt_wait_file "$T/panel.ready" 10 || { fail "panel emulator did not start"; exit 1; }
    local panel="\"node_type\": \"${RL_NODE_TYPE:-vless}\""
    [ "${RL_PANEL:-uniproxy}" = sspanel ] && panel='"pull_interval": 60, "push_interval": 60'
    cat >"$T/katana.json" <<JSON
{"log": {"level": "info"}, "workers": 1, "api": {"listen": "127.0.0.1:$API_PORT"},
 "db": {"path": "$T/katana.db", "flush_interval": 1},
 "nodes": [{"tag": "n1", "listen": "127.0.0.1", "allow_private": true,
            "panel": {"type": "${RL_PANEL:-uniproxy}", "url": "http://127.0.0.1:$PANEL_PORT",
                      "token": "$PANEL_TOKEN", "node_id": 1, $panel}}]}
JSON
    echo_start
    kat_start "$T/katana.json"
}

# rl_client VENDOR SCENARIO NAME UUID PUBLIC_KEY SHORT_ID [SERVER_PORT]: starts the vendor's
# client from tests/interop/VENDOR/client-SCENARIO.json (sing-box-lite: sing-box's template)
# towards SERVER_PORT (default NODE_PORT) with SNI localhost; its local port in CL_PORT.
rl_client() {
    kt_ports 1; CL_PORT=${PORTS[0]}
    pr_render "$PR_TEMPLATES/${1%-lite}/client-$2.json" "$T/client-$3.json" \
        LOCAL_PORT="$CL_PORT" SERVER_PORT="${7:-$NODE_PORT}" SECRET="$4" SNI=localhost \
        PUBLIC_KEY="$5" SHORT_ID="$6"
    pr_cmd "$1" "$T/client-$3.json"
    kt_bg "client-$3" "${PR_CMD[@]}"
    kt_wait_port "$CL_PORT" 10 || { fail "$1 client $3 did not listen"; exit 1; }
}

# rl_billed SNAPSHOT UID UP DOWN: the user's usage line in a SIGUSR1 snapshot is within
# [UP, UP + 5% + 4 KiB] up and the same for DOWN (TLS record overhead and padding).
rl_billed() {
    local up down
    read -r _ up down <<<"$(awk -v u="$2" '$1 == u' <<<"$1")"
    echo "user $2: up ${up:-none} down ${down:-none}, expected $3 and $4"
    [ -n "${up:-}" ] && [ "$up" -ge "$3" ] && [ "$up" -le $(($3 + $3 / 20 + 4096)) ] &&
        [ "$down" -ge "$4" ] && [ "$down" -le $(($4 + $4 / 20 + 4096)) ]
}

# rl_pair SCEN WHAT: the Xray-core client on port C1 (user 1) and the sing-box client on C2 (user
# 2), both of scenario SCEN, each move 1 MiB each way at the same time through the echo, checked
# byte-identical; then, once the sampler has folded the flows, the SIGUSR1 snapshot is in SNAP.
rl_pair() {
    local scen=$1 what=$2 r1=0 r2=0 p1 p2
    pr_tcp_opts xray "$scen"   # Xray 26.3.27's Trojan client: a small first write (peers.sh)
    tcp_rt "$C1" ok --bytes "$MIB" --seed "$scen-u1" --label u1 "${PR_TCP[@]}" \
        >"$T/u1.out" 2>&1 & p1=$!
    tcp_rt "$C2" ok --bytes "$MIB" --seed "$scen-u2" --label u2 >"$T/u2.out" 2>&1 & p2=$!
    wait "$p1" || r1=$?
    wait "$p2" || r2=$?
    cat "$T/u1.out" "$T/u2.out"
    check "Xray-core $what (user 1): 1 MiB each way, echo identical" test "$r1" = 0
    check "sing-box $what (user 2) at the same time: 1 MiB each way, echo identical" \
        test "$r2" = 0
    sleep 1.5   # the sampler folds flow counters every second
    SNAP=$(kat_snapshot)
    echo "SIGUSR1 snapshot:"; echo "$SNAP"
}
