# shellcheck shell=bash
# lib.sh: shared by every tests/integration/t-*.sh (sourced, bash).
#
# Each test: runs under `timeout` (KT_LIMIT seconds), owns a private temp dir, starts
# only loopback processes and kills every one of them in an EXIT trap, prints PASS/FAIL
# lines, and exits with the automake test protocol (0 pass, 1 fail, 77 skip).
#
# Server under test: KT_SERVER=katana (default) runs $KATANA_TOP_BUILDDIR/katana (or
# $KATANA_BIN). KT_SERVER=ss-server is the harness self-check: the same katana config is
# served by one shadowsocks-libev ss-server per user (port per user, ACL for block routes);
# assertions that need katana itself (usage lines, check, refused reloads) are skipped.

set -euo pipefail

KT_LIMIT=${KT_LIMIT:-120}
if [ -z "${KT_UNDER_TIMEOUT:-}" ]; then
    export KT_UNDER_TIMEOUT=1
    exec timeout -k 5 "$KT_LIMIT" bash "$0" "$@"
fi

# KT_CLIENT (v2ray | xray | sing-box) picks the client of the tests that run with several
# (t-trojan-clients.sh, t-vless-clients.sh); it names the test too. A wrapper running another
# script names itself with KT_NAME.
KT_CLIENT=${KT_CLIENT:-}
KT_NAME=${KT_NAME:-$(basename "$0" .sh)${KT_CLIENT:+-$KT_CLIENT}}
KT_DIR=$(cd "$(dirname "$0")" && pwd)
KT_PY=(python3 "$KT_DIR/katest.py")
KT_SERVER=${KT_SERVER:-katana}
KT_FAILS=0
KT_PASSES=0
T=$(mktemp -d "${TMPDIR:-/tmp}/katest.$KT_NAME.XXXXXX")
: >"$T/pids"
# python3 as found once: a version manager's shim (pyenv's is a bash script that runs
# `pyenv exec`) adds ~0.2 s to each start, and a test starts python3 a hundred times or more.
# $T/bin/python3 execs the interpreter the shim chose, by its full path (so that a venv stays one).
if KT_PYBIN=$(python3 -c 'import sys; print(sys.executable)' 2>/dev/null) &&
    [ -x "$KT_PYBIN" ]; then
    mkdir -p "$T/bin"
    printf '#!/bin/sh\nexec "%s" "$@"\n' "$KT_PYBIN" >"$T/bin/python3"
    chmod +x "$T/bin/python3"
    PATH=$T/bin:$PATH
fi
SRV_LOG="$T/server.log"

kt_log() { printf '[%s] %s\n' "$KT_NAME" "$*"; }
pass() { KT_PASSES=$((KT_PASSES + 1)); printf 'PASS: %s: %s\n' "$KT_NAME" "$*"; }
fail() { KT_FAILS=$((KT_FAILS + 1)); printf 'FAIL: %s: %s\n' "$KT_NAME" "$*"; }
skip_all() { printf 'SKIP: %s: %s\n' "$KT_NAME" "$*"; exit 77; }

# check DESCRIPTION CMD...: run CMD, PASS if it exits 0, FAIL otherwise (never aborts).
check() {
    local what=$1; shift
    if "$@"; then pass "$what"; else fail "$what"; fi
}

kt_cleanup() {
    local rc=$? pid
    trap - EXIT INT TERM HUP PIPE
    while read -r pid; do
        [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null || true
    done <"$T/pids"
    for _ in 1 2 3 4 5 6 7 8 9 10; do
        local alive=0
        while read -r pid; do
            [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && alive=1
        done <"$T/pids"
        [ "$alive" = 0 ] && break
        sleep 0.2
    done
    while read -r pid; do
        [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null || true
    done <"$T/pids"
    if [ -s "$T/mounts" ]; then # kt_mount_tmpfs, after every process that used it is gone
        while read -r mnt; do
            umount "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null || true
        done <"$T/mounts"
    fi
    if [ "$rc" != 0 ] && [ "$rc" != 77 ] && [ -s "$SRV_LOG" ]; then
        echo "--- last lines of the server log ($SRV_LOG) ---"
        tail -n 40 "$SRV_LOG" || true
    fi
    if [ "${KT_KEEP:-0}" = 1 ]; then echo "kept $T"; else rm -rf "$T"; fi
    exit "$rc"
}
trap kt_cleanup EXIT
trap 'exit 124' INT TERM
trap 'exit 129' HUP
trap 'exec >/dev/null 2>&1; exit 141' PIPE    # reader gone: still clean up, silently

# kt_mount_tmpfs DIR SIZE: a tmpfs of SIZE (e.g. 4m) at DIR, unmounted at exit; 1 when this
# host does not let us mount (not root, no privilege in a container).
kt_mount_tmpfs() {
    mkdir -p "$1"
    mount -t tmpfs -o "size=$2" tmpfs "$1" 2>/dev/null || return 1
    echo "$1" >>"$T/mounts"
}

# kt_finish: the test's verdict (a sanitizer report in any log we kept also fails it).
kt_finish() {
    local f
    for f in "$T"/*.log; do
        if grep -q -E "ERROR: (Address|Leak|Thread|Memory)Sanitizer|runtime error:" "$f"; then
            fail "sanitizer report in $(basename "$f"):"
            grep -E -A 20 "Sanitizer|runtime error:" "$f" | head -n 40
        fi
    done
    kt_log "$KT_PASSES passed, $KT_FAILS failed in ${SECONDS}s"
    [ "$KT_FAILS" = 0 ] && exit 0
    exit 1
}

kt_need() {
    local b
    for b in "$@"; do
        command -v "$b" >/dev/null 2>&1 || skip_all "$b is not installed"
    done
}

# kt_bg NAME CMD...: start CMD in the background (stdout+stderr to $T/NAME.log);
# sets BG_PID to the program's own pid (exec), which the EXIT trap kills.
kt_bg() {
    local name=$1; shift
    ( exec "$@" ) >>"$T/$name.log" 2>&1 &
    BG_PID=$!
    echo "$BG_PID" >>"$T/pids"
}

# kt_ports N: set PORTS to N distinct ports free for TCP and UDP on 127.0.0.1.
kt_ports() { read -r -a PORTS <<<"$("${KT_PY[@]}" freeport --count "$1")"; }

kt_wait_port() { "${KT_PY[@]}" wait-port --port "$1" --timeout "${2:-10}" >/dev/null; }

# kt_listen_later WHAT PORT: a client started in the background whose PORT kt_listening waits
# for, so that several clients start side by side (WHAT names it in the failure).
KT_LISTEN_LATER=()
kt_listen_later() { KT_LISTEN_LATER+=("$2 $1"); }
# kt_listening: every port given to kt_listen_later since the last call listens within 10 s,
# else the test fails and stops.
kt_listening() {
    local c
    for c in "${KT_LISTEN_LATER[@]}"; do
        kt_wait_port "${c%% *}" 10 || { fail "${c#* } did not listen on ${c%% *}"; exit 1; }
    done
    KT_LISTEN_LATER=()
}

kt_uuid() { cat /proc/sys/kernel/random/uuid; }

kt_alive() { kill -0 "$1" 2>/dev/null; }

# kt_until SECS CMD...: run CMD (its output discarded) every 0.2 s until it succeeds; 1 if it
# has not succeeded when SECS (whole seconds) have passed.
kt_until() {
    local end=$((${EPOCHREALTIME/./} + $1 * 1000000))
    shift
    while :; do
        "$@" >/dev/null 2>&1 && return 0
        ((${EPOCHREALTIME/./} < end)) || return 1
        sleep 0.2
    done
}

# kt_wait_file FILE SECS: wait until FILE exists.
kt_wait_file() {
    local i
    for ((i = 0; i < $2 * 20; i++)); do [ -e "$1" ] && return 0; sleep 0.05; done
    return 1
}

# kt_wait_exit PID SECS: wait for a background child; set WAIT_RC (124 if still running).
kt_wait_exit() {
    local i
    for ((i = 0; i < $2 * 20; i++)); do
        if ! kt_alive "$1"; then
            WAIT_RC=0; wait "$1" || WAIT_RC=$?
            return 0
        fi
        sleep 0.05
    done
    WAIT_RC=124
    return 1
}

# echo_start: TCP+UDP echo on 127.0.0.1, 127.0.0.2 and ::1 if present (port ECHO_PORT, set here).
# A port found free can be taken (by another test's outgoing connection) before the echo server
# binds it: then the server exits at once and another port is tried, at most 5 times.
echo_start() {
    local try i
    for ((try = 0; try < 5; try++)); do
        kt_ports 1; ECHO_PORT=${PORTS[0]}
        kt_bg echo "${KT_PY[@]}" echo --port "$ECHO_PORT" --hosts 127.0.0.1,127.0.0.2,::1 \
            --ready-file "$T/echo.ready"
        for ((i = 0; i < 200; i++)); do
            [ -e "$T/echo.ready" ] && break 2
            kt_alive "$BG_PID" || break
            sleep 0.05
        done
    done
    [ -e "$T/echo.ready" ] || { fail "echo server did not start"; exit 1; }
}

# cl_start NAME CIPHER PASSWORD SERVER_PORT: ss-local (SOCKS5 + UDP) on a free port;
# sets CL_PORT and CL_PID.
cl_start() {
    kt_ports 1; CL_PORT=${PORTS[0]}
    kt_bg "client-$1" ss-local -s 127.0.0.1 -p "$4" -b 127.0.0.1 -l "$CL_PORT" \
        -k "$3" -m "$2" -u
    CL_PID=$BG_PID
    kt_wait_port "$CL_PORT" 10 || { fail "ss-local $1 did not listen on $CL_PORT"; exit 1; }
}

# --- the server under test -------------------------------------------------------------

katana_bin() {
    echo "${KATANA_BIN:-${KATANA_TOP_BUILDDIR:-$KT_DIR/../..}/katana}"
}

# needs_katana WHAT: true in katana mode; in self-check mode prints a SKIP line, false.
needs_katana() {
    [ "$KT_SERVER" = katana ] && return 0
    printf 'SKIP: %s: %s (needs katana; KT_SERVER=%s)\n' "$KT_NAME" "$1" "$KT_SERVER"
    return 1
}

# mkconfig FILE PORT CIPHER [mkconfig options]: write a katana config.
mkconfig() {
    local out=$1 port=$2 cipher=$3; shift 3
    "${KT_PY[@]}" mkconfig --out "$out" --port "$port" --cipher "$cipher" "$@"
}

# srv_start CONFIG: start the server for CONFIG and wait for its port(s); sets SRV_PID. katana
# logs to $SRV_LOG ($T/server.log unless the test set another $T/NAME.log).
srv_start() {
    SRV_CONFIG=$1
    if [ "$KT_SERVER" = katana ]; then
        local bin; bin=$(katana_bin)
        [ -x "$bin" ] || { fail "katana binary not found at $bin"; exit 1; }
        kt_bg "$(basename "$SRV_LOG" .log)" "$bin" run -c "$SRV_CONFIG"
        SRV_PID=$BG_PID
        local port; port=$(awk '$1 == "node" { print $2 }' <<<"$("${KT_PY[@]}" ssplan --config "$1")")
        local i
        for ((i = 0; i < 200; i++)); do
            kt_alive "$SRV_PID" || { fail "katana exited at start"; exit 1; }
            "${KT_PY[@]}" wait-port --port "$port" --timeout 0.1 >/dev/null 2>&1 && return 0
        done
        fail "katana did not listen on $port"; exit 1
    fi
    rm -rf "$T/ss"; mkdir -p "$T/ss"
    ss_apply "$1"
    local pidfiles=("$T/ss/"*.pid)
    SRV_PID=$(cat "${pidfiles[0]}")
}

# srv_user_port UID: the port a client of user UID dials.
srv_user_port() {
    if [ "$KT_SERVER" = katana ]; then
        awk '$1 == "node" { print $2 }' <<<"$("${KT_PY[@]}" ssplan --config "$SRV_CONFIG")"
    else
        cat "$T/ss/$1.port"
    fi
}

# srv_alive: the server still runs.
srv_alive() {
    if [ "$KT_SERVER" = katana ]; then kt_alive "$SRV_PID"; return; fi
    local f
    for f in "$T/ss/"*.pid; do [ -e "$f" ] && { kt_alive "$(cat "$f")" || return 1; }; done
    return 0
}

# srv_reload: SIGHUP (katana); in self-check mode start/stop per-user ss-servers.
# Afterwards SRV_RELOAD_LOG holds what the server logged since the signal (so far).
srv_reload() {
    SRV_RELOAD_LOG=
    if [ "$KT_SERVER" = katana ]; then
        local mark; mark=$(stat -c %s "$SRV_LOG")
        kill -HUP "$SRV_PID"
        sleep "${KT_RELOAD_WAIT:-1}"
        SRV_RELOAD_LOG=$(tail -c +"$((mark + 1))" "$SRV_LOG")
        return
    fi
    ss_apply "$SRV_CONFIG"
}

# reload_applied: the last reload logged no refusal (katana; always true in self-check mode).
reload_applied() {
    if grep -i "refused" <<<"${SRV_RELOAD_LOG//$T/}"; then return 1; fi   # not in our paths
    return 0
}

# srv_pids: set SRV_PIDS to the running server's process ids.
srv_pids() {
    local f
    SRV_PIDS=()
    if [ "$KT_SERVER" = katana ]; then
        [ -n "${SRV_PID:-}" ] && SRV_PIDS=("$SRV_PID")
        return 0
    fi
    for f in "$T/ss/"*.pid; do [ -e "$f" ] && SRV_PIDS+=("$(cat "$f")"); done
    return 0
}

# srv_detach: send SIGTERM to the current server and go on (its exit is checked by the
# next srv_stop), so that several servers' grace periods overlap.
SRV_DETACHED=()
srv_detach() {
    local p
    srv_pids
    for p in "${SRV_PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; SRV_DETACHED+=("$p"); done
    SRV_PID=
    rm -f "$T/ss/"*.pid
}

# srv_stop: SIGTERM to the current server; it and every detached server must exit 0 within
# 7 s. Sets SRV_RC (0, the first non-zero exit status, or 124 for a timeout).
srv_stop() {
    local p
    srv_pids
    for p in "${SRV_PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    SRV_RC=0
    for p in "${SRV_PIDS[@]}" "${SRV_DETACHED[@]}"; do
        kt_wait_exit "$p" 7 || true
        [ "$WAIT_RC" = 0 ] || [ "$SRV_RC" != 0 ] || SRV_RC=$WAIT_RC
    done
    SRV_DETACHED=()
    SRV_PID=
    rm -f "$T/ss/"*.pid
}

# srv_usage_mark: remember the log size (usage lines after it count).
srv_usage_mark() { SRV_MARK=$(stat -c %s "$SRV_LOG" 2>/dev/null || echo 0); }

# srv_usage: print "ID UP DOWN" lines logged since srv_usage_mark.
srv_usage() { "${KT_PY[@]}" usage --log "$SRV_LOG" --offset "${SRV_MARK:-0}"; }

# ss_apply CONFIG (self-check mode): one ss-server per user of CONFIG; users that left are
# stopped, new users started, unchanged users untouched.
ss_apply() {
    local plan port cipher blocks=() want=() f uid uuid acl=()
    plan=$("${KT_PY[@]}" ssplan --config "$1")
    read -r _ port cipher <<<"$(grep '^node ' <<<"$plan")"
    mapfile -t blocks < <(awk '$1 == "block" { print $2 }' <<<"$plan")
    : >"$T/ss/acl"
    if [ "${#blocks[@]}" -gt 0 ]; then
        echo "[outbound_block_list]" >>"$T/ss/acl"
        for f in "${blocks[@]}"; do
            case $f in
                domain:*) f=${f#domain:}; echo "(^|\\.)${f//./\\.}\$" >>"$T/ss/acl" ;;
                *) echo "$f" >>"$T/ss/acl" ;;
            esac
        done
        acl=(--acl "$T/ss/acl")
    fi
    while read -r _ uid uuid; do
        want+=("$uid")
        [ -e "$T/ss/$uid.pid" ] && continue
        if [ ! -e "$T/ss/$uid.port" ]; then
            if [ ! -e "$T/ss/first" ]; then echo "$port" >"$T/ss/$uid.port"; : >"$T/ss/first"
            else kt_ports 1; echo "${PORTS[0]}" >"$T/ss/$uid.port"; fi
        fi
        kt_bg server ss-server -s 127.0.0.1 -p "$(cat "$T/ss/$uid.port")" -k "$uuid" \
            -m "$cipher" -u --no-delay "${acl[@]}"
        echo "$BG_PID" >"$T/ss/$uid.pid"
        kt_wait_port "$(cat "$T/ss/$uid.port")" 10 || { fail "ss-server did not start"; exit 1; }
    done < <(grep '^user ' <<<"$plan")
    for f in "$T/ss/"*.pid; do
        [ -e "$f" ] || continue
        uid=$(basename "$f" .pid)
        if [[ " ${want[*]} " != *" $uid "* ]]; then
            kill -TERM "$(cat "$f")" 2>/dev/null || true
            rm -f "$f"
        fi
    done
}

# --- traffic helpers --------------------------------------------------------------------

# tcp_rt SOCKS_PORT EXPECT [katest tcp options]: one SOCKS5 CONNECT round trip to the echo
# server (EXPECT: ok | refused | cut | closed); 0 when the outcome is as expected.
tcp_rt() {
    local port=$1 expect=$2; shift 2
    local t=10; [ "$expect" = refused ] && t=2
    timeout 60 "${KT_PY[@]}" tcp --socks "$port" --dest-port "$ECHO_PORT" --expect "$expect" \
        --timeout "$t" "$@"
}

# tcp_download SOCKS_PORT [katest download options]: the echo server sends --bytes seeded bytes
# as fast as they go; they must arrive whole and identical.
tcp_download() {
    local port=$1; shift
    timeout 60 "${KT_PY[@]}" download --socks "$port" --dest-port "$ECHO_PORT" "$@"
}

# udp_rt SOCKS_PORT EXPECT [katest udp options]: SOCKS5 UDP ASSOCIATE round trips.
udp_rt() {
    local port=$1 expect=$2; shift 2
    local w=1; [ "$expect" = refused ] && w=1
    timeout 60 "${KT_PY[@]}" udp --socks "$port" --dest-port "$ECHO_PORT" --expect "$expect" \
        --wait "$w" "$@"
}

# stream_bg NAME SOCKS_PORT BYTES RATE EXPECT: a paced connection in the background that is
# open once "$T/NAME.ready" exists (first echo verified); sets STREAM_PID. Its verdict is its
# exit status (see stream_wait). stream_unpace NAME lets it send the rest unpaced.
stream_bg() {
    kt_bg "$1" "${KT_PY[@]}" tcp --socks "$2" --dest-port "$ECHO_PORT" --bytes "$3" \
        --rate "$4" --chunk 4096 --expect "$5" --timeout 10 --seed "$1" --label "$1" \
        --ready-file "$T/$1.ready" --unpace-file "$T/$1.unpace"
    STREAM_PID=$BG_PID
    kt_wait_file "$T/$1.ready" 10 || { fail "$1: stream did not start"; cat "$T/$1.log"; exit 1; }
}

# stream_unpace NAME...: the named streams send what they have left as fast as it goes (once
# what they had to stay open for is checked; their echo is still compared byte for byte).
stream_unpace() {
    local n
    for n in "$@"; do : >"$T/$n.unpace"; done
}

# stream_wait NAME PID SECS DESCRIPTION: PASS if the stream ended as it expected within SECS.
stream_wait() {
    if kt_wait_exit "$2" "$3" && [ "$WAIT_RC" = 0 ]; then
        pass "$4"
    else
        fail "$4 (rc $WAIT_RC)"
    fi
    cat "$T/$1.log"
}
