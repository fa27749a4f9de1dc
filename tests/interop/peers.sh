# shellcheck shell=bash
# peers.sh: the third-party test peers built from source (issue 10, "Real clients and reference
# servers"): Xray-core and sing-box, pinned, built with the Go toolchain from the Go module
# proxy into $PEERS_DIR/bin once per machine. Sourced by tests/setup-deps.sh (pr_build) and,
# after lib.sh, by the interop tests (pr_need, pr_client, pr_server). They are test peers and
# benchmark references only: none of their code enters katana.
#
# Templates beside this file: VENDOR/client-SCEN.json (a SOCKS5 inbound with UDP on
# 127.0.0.1:@LOCAL_PORT@, an outbound to 127.0.0.1:@SERVER_PORT@) and VENDOR/server-SCEN.json
# (the vendor's own server for the same scenario, one user, direct outbound), SCEN one of
# trojan-tls, vless-tcp, vless-tls. Placeholders: @SECRET@ (Trojan password or VLESS uuid),
# @SNI@, @CA_FILE@ (client: the CA it verifies the server with), @CERT_FILE@ / @KEY_FILE@.
# t-peers-selftest.sh proves each client template against its vendor's server before the
# t-*-clients.sh tests point it at katana.

# Pinned releases: the newest each proxy served that build on go1.26.8 (no GOTOOLCHAIN
# switch needed). A bump here changes the stamp, so setup-deps.sh rebuilds.
PR_XRAY_PKG=github.com/xtls/xray-core/main
PR_XRAY_VERSION=v1.260327.0          # Xray 26.3.27
PR_XRAY_TAGS=
PR_XRAY_LDFLAGS="-s -w -buildid="
PR_SINGBOX_PKG=github.com/sagernet/sing-box/cmd/sing-box
PR_SINGBOX_VERSION=v1.14.1
# with_utls also builds REALITY (client and server) since sing-box 1.10; with_grpc is the
# full gRPC transport (the "lite" one needs no tag); badlinkname + -checklinkname=0 as in
# sing-box's release build
PR_SINGBOX_TAGS=with_quic,with_utls,with_grpc,badlinkname,tfogo_checklinkname0
PR_SINGBOX_LDFLAGS="-X github.com/sagernet/sing-box/constant.Version=${PR_SINGBOX_VERSION#v} \
-X runtime.godebugDefault=multipathtcp=0,tlssha1=1 -checklinkname=0 -s -w -buildid="
# sing-box-lite: the same release without with_grpc, so that its gRPC transport is the "lite"
# one (PROTOCOLS-2.md §3.5: a build without the tag always uses it; force_lite is no config
# key, json:"-"), as in sing-box builds that leave the tag out
PR_SINGBOX_LITE_TAGS=with_quic,with_utls,badlinkname,tfogo_checklinkname0

PEERS_DIR=${KATANA_PEERS:-/var/cache/katana-peers}
PR_TEMPLATES=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# pr_go: print the go command ($KATANA_GO if set, else go on PATH, else
# /usr/local/go/bin/go); false when there is none.
pr_go() {
    if [ -n "${KATANA_GO:-}" ]; then command -v "$KATANA_GO" || return 1
    elif command -v go >/dev/null 2>&1; then command -v go
    elif [ -x /usr/local/go/bin/go ]; then echo /usr/local/go/bin/go
    else return 1; fi
}

# pr_spec NAME: set PR_PKG, PR_VERSION, PR_TAGS, PR_LDFLAGS for peer NAME (xray | sing-box |
# sing-box-lite).
pr_spec() {
    case $1 in
        xray) PR_PKG=$PR_XRAY_PKG PR_VERSION=$PR_XRAY_VERSION PR_TAGS=$PR_XRAY_TAGS
              PR_LDFLAGS=$PR_XRAY_LDFLAGS ;;
        sing-box) PR_PKG=$PR_SINGBOX_PKG PR_VERSION=$PR_SINGBOX_VERSION PR_TAGS=$PR_SINGBOX_TAGS
                  PR_LDFLAGS=$PR_SINGBOX_LDFLAGS ;;
        sing-box-lite) PR_PKG=$PR_SINGBOX_PKG PR_VERSION=$PR_SINGBOX_VERSION
                       PR_TAGS=$PR_SINGBOX_LITE_TAGS PR_LDFLAGS=$PR_SINGBOX_LDFLAGS ;;
        *) echo "peers.sh: unknown peer $1" >&2; return 1 ;;
    esac
}

# pr_stamp NAME: the build key of peer NAME (package@version, tags); bin/NAME.version holds
# the key of the binary in place.
pr_stamp() { pr_spec "$1" && echo "$PR_PKG@$PR_VERSION tags=$PR_TAGS"; }

# pr_current NAME: true when $PEERS_DIR/bin/NAME is built for the pinned key.
pr_current() {
    [ -x "$PEERS_DIR/bin/$1" ] && [ "$(cat "$PEERS_DIR/bin/$1.version" 2>/dev/null)" = "$(pr_stamp "$1")" ]
}

# pr_build NAME: build peer NAME into $PEERS_DIR/bin/NAME unless the pinned one is there
# (go install into a scratch GOBIN, then an atomic rename). Prints the build time. Returns
# non-zero when the build fails.
pr_build() {
    local name=$1 go tmp start
    if pr_current "$name"; then echo "== $name: $(pr_stamp "$name") already built"; return 0; fi
    go=$(pr_go) || { echo "== $name: no Go toolchain, not built"; return 0; }
    pr_spec "$name"
    mkdir -p "$PEERS_DIR/bin"
    tmp=$(mktemp -d "$PEERS_DIR/build.XXXXXX")
    echo "== building $name $PR_VERSION ($PR_PKG, tags '${PR_TAGS}') with $("$go" version)"
    start=$(date +%s)
    if ! env GOBIN="$tmp" CGO_ENABLED=0 "$go" install -trimpath ${PR_TAGS:+-tags "$PR_TAGS"} \
            -ldflags "$PR_LDFLAGS" "$PR_PKG@$PR_VERSION"; then
        rm -rf "$tmp"
        echo "== $name: build failed" >&2
        return 1
    fi
    mv -f "$tmp/$(basename "$PR_PKG")" "$PEERS_DIR/bin/$name"
    pr_stamp "$name" >"$PEERS_DIR/bin/$name.version"
    rm -rf "$tmp"
    echo "== $name built in $(($(date +%s) - start)) s: $PEERS_DIR/bin/$name"
}

# --- test side (after lib.sh) ----------------------------------------------------------

# pr_need NAME...: skip the test (77) when there is no Go toolchain to build a peer; fail it
# when the toolchain is there but the pinned peer is not built (run tests/setup-deps.sh).
pr_need() {
    local n
    for n in "$@"; do
        pr_current "$n" && continue
        pr_go >/dev/null || skip_all "no Go toolchain: $n is not built (tests/setup-deps.sh builds it)"
        fail "$n $(pr_spec "$n"; echo "$PR_VERSION") is not built in $PEERS_DIR/bin: run tests/setup-deps.sh"
        exit 1
    done
}

# pr_render TEMPLATE OUT KEY=VALUE...: OUT is TEMPLATE with every @KEY@ replaced by VALUE.
pr_render() {
    python3 - "$@" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
for kv in sys.argv[3:]:
    k, v = kv.split("=", 1)
    text = text.replace("@%s@" % k, v)
left = re.findall(r"@[A-Z_]+@", text)
if left:
    sys.exit("unrendered placeholders: %s" % " ".join(left))
open(sys.argv[2], "w").write(text)
PY
}

# pr_cmd NAME CONFIG: set PR_CMD to the command line that runs peer NAME on CONFIG.
# Xray's VLESS/VMess clients send UDP as XUDP (Mux.Cool with a GlobalID, PROTOCOLS-2.md §5) by
# default, as they do in the field (XRAY_CONE_DISABLED unset).
pr_cmd() {
    case $1 in
        xray) PR_CMD=("$PEERS_DIR/bin/xray" run -c "$2") ;;
        sing-box|sing-box-lite) PR_CMD=("$PEERS_DIR/bin/$1" run -c "$2" --disable-color) ;;
    esac
}

# pr_client VENDOR SCEN NAME SECRET SERVER_PORT: the VENDOR client for scenario SCEN
# (SOCKS5 + UDP on a free port) to 127.0.0.1:SERVER_PORT with SECRET, verifying TLS for $TJ_SNI
# against $TJ_CA; sets CL_PORT, CL_PID. @HU_PATH@ (an HTTPUpgrade path) is $PR_HU_PATH, default
# /hu: the self-test runs Xray without early data ("?ed="), which Xray's own server may drop
# over plain TCP when it arrives with the request (PROTOCOLS-2.md §4.3).
pr_client() {
    kt_ports 1; CL_PORT=${PORTS[0]}
    pr_render "$PR_TEMPLATES/${1%-lite}/client-$2.json" "$T/client-$3.json" LOCAL_PORT="$CL_PORT" \
        SERVER_PORT="$5" SECRET="$4" SNI="${TJ_SNI:-node.test}" CA_FILE="${TJ_CA:-}" \
        HU_PATH="${PR_HU_PATH:-/hu}"
    pr_cmd "$1" "$T/client-$3.json"
    kt_bg "client-$3" "${PR_CMD[@]}"
    CL_PID=$BG_PID
    kt_wait_port "$CL_PORT" 10 || { fail "$1 client $3 did not listen on $CL_PORT"; cat "$T/client-$3.log"; exit 1; }
}

# pr_server VENDOR SCEN NAME SECRET PORT: the VENDOR's own server for scenario SCEN on
# 127.0.0.1:PORT with one user SECRET (certificate $TJ_CERT / $TJ_KEY); sets PR_SRV_PID.
pr_server() {
    pr_render "$PR_TEMPLATES/$1/server-$2.json" "$T/server-$3.json" SERVER_PORT="$5" \
        SECRET="$4" CERT_FILE="${TJ_CERT:-}" KEY_FILE="${TJ_KEY:-}"
    pr_cmd "$1" "$T/server-$3.json"
    kt_bg "server-$3" "${PR_CMD[@]}"
    PR_SRV_PID=$BG_PID
    kt_wait_port "$5" 10 || { fail "$1 server $3 did not listen on $5"; cat "$T/server-$3.log"; exit 1; }
}

# pr_tcp_opts VENDOR SCEN: set PR_TCP to the katest.py tcp options the VENDOR client needs in
# scenario SCEN. Xray 26.3.27's Trojan client fails a first write that does not fit its 8 KiB
# buffer with the request header ("failed to write A request payload > buffer is full"; fixed
# upstream after the newest release the module proxy serves), so its applications first send
# 4 KiB alone, as a browser's ClientHello would, then the bulk.
pr_tcp_opts() {
    PR_TCP=()
    case $1/$2 in
        xray/trojan-*) PR_TCP=(--first-echo 4096) ;;
    esac
}
