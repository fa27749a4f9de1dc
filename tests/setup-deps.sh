#!/bin/bash
# tests/setup-deps.sh [--update]: install what katana needs to build and test on Debian 12
# (idempotent: apt runs only when a package is missing, or always with --update), then make
# sure no packaged shadowsocks-libev / v2ray service is left running (they would hold ports
# such as the demo's 8388); then build the pinned Xray-core and sing-box test peers (issue 10)
# once per machine.
set -euo pipefail

BUILD_DEPS=(build-essential autoconf automake libtool pkg-config libuv1-dev libssl-dev
            libcurl4-openssl-dev libmicrohttpd-dev libjansson-dev libsqlite3-dev libcmocka-dev
            libpcre2-dev libc-ares-dev libhiredis-dev libnghttp2-dev
            libyaml-dev # libyaml: katana import xrayr / xboard-node (issue 32)
            libwebsockets-dev) # libwebsockets: the Xboard node channel (issue 14)
CLIENTS=(shadowsocks-libev v2ray trojan iperf3 netcat-openbsd curl openssl python3 clang
         libclang-rt-14-dev  # clang's libFuzzer and sanitizer runtimes: make fuzz (issue 24)
         jq prometheus # jq, prometheus (promtool too): the REST API tests (issue 4)
         tmux          # tmux: t-cli-remote drives katana top in a terminal
         sqlite3       # sqlite3: the panel tests read the usage outbox (issue #3)
         python3-cryptography  # katest.py vmess: hand-made VMess requests (issue 9)
         shadowsocks-v2ray-plugin  # ss-v2ray-plugin: ss-local inside WebSocket (issue 9)
         dnsmasq-base          # dnsmasq: the resolver tests' DNS server (issue 13)
         redis-server          # the fleet-wide device limit tests (issue 12)
         haproxy)              # a PROXY protocol front for t-proxy-protocol
# tests/packaging/check.sh: make deb / make rpm, lintian, rpmlint, debuginfo split (eu-strip),
# groff and man for the man pages
PACKAGING=(dpkg-dev debhelper fakeroot rpm rpmlint debugedit elfutils cpio lintian groff-base
           man-db)

SUDO=
[ "$(id -u)" = 0 ] || SUDO=sudo

if [ "${1:-}" = --update ] || ! dpkg -s "${BUILD_DEPS[@]}" "${CLIENTS[@]}" "${PACKAGING[@]}" >/dev/null 2>&1; then
    echo "== apt-get install ${BUILD_DEPS[*]} ${CLIENTS[*]} ${PACKAGING[*]}"
    $SUDO apt-get update
    # policy-rc.d-less hosts start the packaged services on install; stopped below
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends \
        "${BUILD_DEPS[@]}" "${CLIENTS[@]}" "${PACKAGING[@]}"
fi

# Packaged services: disable and stop them (no-op where systemd is absent).
if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
    for unit in shadowsocks-libev.service shadowsocks-libev-server@ shadowsocks-libev-local@ \
                shadowsocks-libev-redir@ shadowsocks-libev-tunnel@ v2ray.service v2ray@ \
                trojan.service redis-server.service haproxy.service \
                prometheus.service; do  # prometheus would hold 9090, the API's default port
        case $unit in
            *@) for u in $(systemctl list-units --plain --no-legend "${unit}*" 2>/dev/null |
                           awk '{ print $1 }'); do
                    $SUDO systemctl disable --now "$u" >/dev/null 2>&1 || true
                done ;;
            *) $SUDO systemctl disable --now "$unit" >/dev/null 2>&1 || true ;;
        esac
    done
fi

# Stray daemons the packages started without systemd: only processes of the packaged
# binaries that run from the packaged config directories, killed by pid.
for pid in $(pgrep -x 'ss-server|ss-local|ss-manager|v2ray|trojan' 2>/dev/null || true); do
    args=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null || true)
    case $args in
        *"/etc/shadowsocks-libev/"* | *"/etc/v2ray/"* | *"/etc/trojan/"*)
            echo "== stopping packaged daemon $pid: $args"
            $SUDO kill -TERM "$pid" 2>/dev/null || true ;;
    esac
done

# Test peers built from source (issue 10): pinned Xray-core and sing-box, built once per
# machine with the Go toolchain into ${KATANA_PEERS:-/var/cache/katana-peers}/bin, rebuilt
# when a pin in tests/interop/peers.sh changes. Without Go the tests that need them skip.
. "$(dirname "$0")/interop/peers.sh"
pr_build xray
pr_build sing-box
pr_build sing-box-lite
