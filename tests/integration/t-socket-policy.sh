#!/bin/bash
# Socket policy of the direct outbounds (issue 13 "Socket policy", seed 001): flows leave from
# the configured bind address (a server on 127.0.0.1 reports the peer it saw, TCP and UDP); a
# node's own `outbound` takes its flows to its own address after a reload; as root the options
# (SO_MARK, SO_BINDTODEVICE, keepalive, TCP_NODELAY) are read back from katana's own outbound
# socket (pidfd_getfd + getsockopt). What the host refuses refuses the config at check and at
# reload, and the running policy stays: an address not on this host, an unknown interface,
# SO_MARK without CAP_NET_ADMIN (katana check run with the capability dropped).
. "$(dirname "$0")/lib.sh"
kt_need ss-local
needs_katana "socket policy" || kt_finish
PEER=(python3 "$KT_DIR/peerinfo.py")
BIN=$(katana_bin)

CIPHER=aes-256-gcm
U1=$(kt_uuid)
kt_ports 2
PEER_PORT=${PORTS[0]}
kt_bg peer "${PEER[@]}" serve --port "$PEER_PORT" --ready-file "$T/peer.ready"
kt_wait_file "$T/peer.ready" 10 || { fail "peer server did not start"; exit 1; }

mkconfig "$T/base.json" "${PORTS[1]}" "$CIPHER" --user "1:$U1"
# with_outbound OUT TOP_JSON NODE_JSON: base.json with `outbound` at the top and/or on the node
with_outbound() {
    python3 - "$T/base.json" "$1" "$2" "$3" <<'EOF'
import json, sys
cfg = json.load(open(sys.argv[1]))
if sys.argv[3] != "-":
    cfg["outbound"] = json.loads(sys.argv[3])
if sys.argv[4] != "-":
    cfg["nodes"][0]["outbound"] = json.loads(sys.argv[4])
json.dump(cfg, open(sys.argv[2], "w"))
EOF
}
ask() { "${PEER[@]}" ask --socks "$CL_PORT" --dest-port "$PEER_PORT" "$@" 2>&1 || true; }

# 1. the shared direct outbound bound to 127.0.0.2, Nagle on, keepalive, SO_MARK, lo
with_outbound "$T/cfg.json" '{"bind": ["127.0.0.2"], "tcp_nodelay": false,
    "tcp_keepalive": {"idle": 45, "interval": 7, "count": 3}, "mark": 7,
    "interface": "lo"}' -
check "katana check accepts the policy" "$BIN" check --offline -c "$T/cfg.json"
srv_start "$T/cfg.json"
cl_start a "$CIPHER" "$U1" "$(srv_user_port 1)"
check "TCP flows leave from 127.0.0.2" test "$(ask)" = "PEER 127.0.0.2"
check "UDP flows leave from 127.0.0.2" test "$(ask --udp)" = "PEER 127.0.0.2"
"${PEER[@]}" ask --socks "$CL_PORT" --dest-port "$PEER_PORT" --hold 5 \
    --ready-file "$T/held" >"$T/held.log" 2>&1 &
HELD=$!
echo "$HELD" >>"$T/pids"
kt_wait_file "$T/held" 10 || fail "held flow did not start"
OPTS=$("${PEER[@]}" sockopt --pid "$SRV_PID" --dport "$PEER_PORT" 2>&1 || true)
kt_log "outbound socket: $OPTS"
check "SO_MARK 7 on the outbound socket" grep -q "mark=7 " <<<"$OPTS"
check "TCP_NODELAY off (tcp_nodelay false)" grep -q "nodelay=0 " <<<"$OPTS"
check "keepalive 45/7/3" grep -q "keepalive=1 idle=45 intvl=7 cnt=3 " <<<"$OPTS"
check "bound to device lo" grep -q "device=lo src=127.0.0.2" <<<"$OPTS"
wait "$HELD" || true

# 2. refused at check and at reload, naming the reason; the running policy stays
with_outbound "$T/bad-addr.json" '{"bind": ["192.0.2.1"]}' -
with_outbound "$T/bad-if.json" '{"interface": "nosuchif0"}' -
# refused CONFIG TEXT: katana check fails on CONFIG, saying TEXT
refused() {
    if "$BIN" check --offline -c "$1" >"$T/check.log" 2>&1; then return 1; fi
    grep -q "$2" "$T/check.log"
}
check "check refuses an address not on this host" \
    refused "$T/bad-addr.json" "bind address 192.0.2.1 is not an address of this host"
check "check refuses an unknown interface" \
    refused "$T/bad-if.json" "interface nosuchif0: no such interface on this host"
if command -v setpriv >/dev/null && [ "$(id -u)" = 0 ]; then
    check "check without CAP_NET_ADMIN refuses SO_MARK, saying so" \
        bash -c "! setpriv --bounding-set=-net_admin,-net_raw '$BIN' check --offline \
                     -c '$T/cfg.json' >'$T/c3.log' 2>&1 &&
                 grep -q 'SO_MARK needs CAP_NET_ADMIN' '$T/c3.log'"
else
    kt_log "not root or no setpriv: the missing-capability check is not exercised"
fi
cp "$T/bad-addr.json" "$T/cfg.json"
srv_reload
check "reload with a foreign address is refused" grep -q "is not an address of this host" \
    <<<"$SRV_RELOAD_LOG"
check "refused reload: flows still leave from 127.0.0.2" test "$(ask)" = "PEER 127.0.0.2"

# 3. a node's own outbound (127.0.0.3) over the shared one (127.0.0.2), applied by a reload
with_outbound "$T/cfg.json" '{"bind": ["127.0.0.2"]}' '{"bind": ["127.0.0.3", "::1"]}'
srv_reload
check "reload with a node outbound applied" reload_applied
check "node outbound: TCP flows leave from 127.0.0.3" test "$(ask)" = "PEER 127.0.0.3"
check "node outbound: UDP flows leave from 127.0.0.3" test "$(ask --udp)" = "PEER 127.0.0.3"

srv_stop
check "daemon exits 0 on SIGTERM" test "$SRV_RC" = 0
kt_finish
