#!/bin/bash
# users-bench.sh BUILDDIR: large user lists (issue 13 "Limits that refuse real panels" and "Scale
# benchmarks"), katana alone on loopback, one Shadowsocks node (aes-256-gcm) fed by a local panel
# file of N users. Per N (BENCH_USERS, default "1 1000 50000 1000000"):
#  - first apply: from `katana run` to the first successful apply (katana_applies_total),
#    reading and parsing the file included; peak RSS (VmHWM) on the way;
#  - RSS once applied and settled, and RSS per user above the 1-user node (goal: at most 200 bytes), from
#    the anonymous part of RSS (RssAnon: heap and anonymous maps, where every per-user byte
#    lives); the file-backed rest is the binary's and the libraries' pages, shared with other
#    processes and resident as far as the page cache and fault-around map them, which depends on
#    the host, not on the users;
#  - a reload that changes one user's key (SIGHUP to the second apply) while a real ss-tunnel client of
#    the last user holds a connection; the flow must still be listed after it (kept 1/1).
# BENCH_USERS_PANEL=uniproxy serves the users from the panel emulator (panel_emu.py) over HTTP
# instead, with the SQLite store of the last good state, as a remote panel runs (the uplink's
# held list, the store); its apply times include the emulator's answer, and it has no reload
# section (a SIGHUP reloads what the uplink holds; the panel's change comes with the next pull).
# "cpu" columns: CPU time of the control loop's thread (from the start, resp. during the reload),
# which a loaded machine does not inflate as it does the wall-clock columns.
# Goals printed beside the figures (issue 13): apply of 50 000 users <= 200 ms, RSS <= 64 MiB,
# no live connection dropped. A benchmark, not a test: nothing here fails on a figure.
# BENCH_USERS_PANEL=uniproxy-full: the same with a panel that sends no ETag, so every pull (each
# 2 s) brings the whole list again; RSS is read after three more pulls of the unchanged list,
# with the emulator stopped (the pulls that fail then hold nothing).
# Environment: BENCH_USERS, BENCH_USERS_PANEL (local, uniproxy, uniproxy-full), KATANA_BIN.
set -euo pipefail

BUILDDIR=${1:-.}
HERE=$(cd "$(dirname "$0")" && pwd)
KATEST=(python3 "$HERE/../integration/katest.py")
KATANA=${KATANA_BIN:-$BUILDDIR/katana}
SIZES=${BENCH_USERS:-1 1000 50000 1000000}
PANEL=${BENCH_USERS_PANEL:-local}
CIPHER=aes-256-gcm
. "$HERE/bench-lib.sh"
bench_init users-bench
now_ms() { date +%s%3N; }
kib() { awk -v k="$2" '$1 == k":" { print $2 }' "/proc/$1/status"; }
# cpu_ms PID: CPU time of its main thread (the control loop, where applies run) in ms; unlike
# the wall-clock figures it does not grow with other load on the machine
cpu_ms() { awk '{ printf "%d", $1 / 1000000 }' "/proc/$1/task/$1/schedstat"; }

case $PANEL in
local | uniproxy | uniproxy-full) ;;
*) echo "users-bench: BENCH_USERS_PANEL: local, uniproxy or uniproxy-full" >&2; exit 1 ;;
esac
command -v ss-tunnel >/dev/null || { echo "users-bench: ss-tunnel is not installed" >&2; exit 1; }
[ -x "$KATANA" ] || { echo "users-bench: no katana at $KATANA" >&2; exit 1; }

# users_file N FILE [CHANGED]: N UniProxy users, ids 1..N, uuids from the id (user 1's differs
# when CHANGED is given)
users_file() {
    python3 - "$@" <<'EOF'
import sys, uuid
n, path = int(sys.argv[1]), sys.argv[2]
changed = len(sys.argv) > 3
with open(path, "w") as f:
    f.write('{"users":[')
    for i in range(1, n + 1):
        u = uuid.UUID(int=(i << 1) | (1 if changed and i == 1 else 0))
        f.write('%s{"id":%d,"uuid":"%s","speed_limit":null,"device_limit":null}'
                % ("," if i > 1 else "", i, u))
    f.write("]}")
EOF
}
uuid_of() { python3 -c 'import sys, uuid; print(uuid.UUID(int=int(sys.argv[1]) << 1))' "$1"; }

# applies API_PORT: successful applies so far (katana_applies_total), 0 before the API answers
applies() {
    curl -s --max-time 1 "http://127.0.0.1:$1/metrics" 2>/dev/null |
        awk '$1 ~ /^katana_applies_total/ { n += $2 } END { print n + 0 }'
}
# wait_applies API_PORT N: polls every 5 ms until N applies succeeded (at most 120 s)
wait_applies() {
    local end=$(($(now_ms) + 120000))
    while [ "$(applies "$1")" -lt "$2" ]; do
        [ "$(now_ms)" -lt "$end" ] || return 1
        sleep 0.005
    done
}
# flow_ids API_PORT: the flows that carried bytes (not the wait-port probe's, which sends none)
flow_ids() {
    curl -s --max-time 5 "http://127.0.0.1:$1/v1/connections" |
        python3 -c 'import json, sys
print(" ".join(sorted(str(f["id"]) for f in json.load(sys.stdin)["flows"] if f["up"] > 0)))'
}

read -r ECHO_PORT <<<"$("${KATEST[@]}" freeport)"
bg "$T/echo.log" "${KATEST[@]}" echo --port "$ECHO_PORT"
"${KATEST[@]}" wait-port --port "$ECHO_PORT" >/dev/null

printf '%-9s %10s %10s %10s %10s %10s %10s %12s %12s %6s\n' users "apply ms" "apply cpu" \
    "reload ms" "reload cpu" "RSS MiB" "peak MiB" "B/user" "goal B/user" kept
BASE_KIB=
for n in $SIZES; do
    read -r sp ap tp <<<"$("${KATEST[@]}" freeport --count 3)"
    "${KATEST[@]}" mkconfig --out "$T/k.json" --port "$sp" --cipher "$CIPHER" \
        --users-file "$T/users.json" --workers 1 --log-level warn --api-port "$ap"
    users_file "$n" "$T/users.json" # after mkconfig, which writes an empty list there
    EMU=
    if [ "$PANEL" != local ]; then
        read -r pp <<<"$("${KATEST[@]}" freeport)"
        pull=60 full=()
        [ "$PANEL" = uniproxy ] || { pull=2 full=(--no-etag); }
        printf '{"protocol":"shadowsocks","server_port":%d,"cipher":"%s","server_key":null,%s%d}}' \
            "$sp" "$CIPHER" '"base_config":{"push_interval":60,"pull_interval":' "$pull" >"$T/node.json"
        rm -f "$T/emu.ready" "$T/katana.db"
        bg "$T/emu.log" python3 "$HERE/../integration/panel_emu.py" --port "$pp" --token bench \
            --config "$T/node.json" --users "$T/users.json" --ready-file "$T/emu.ready" \
            "${full[@]}"; EMU=$BG
        for _ in $(seq 1 600); do [ -e "$T/emu.ready" ] && break; sleep 0.1; done
        cat >"$T/k.json" <<EOF
{"log": {"level": "warn"}, "workers": 1, "api": {"listen": "127.0.0.1:$ap"},
 "db": {"path": "$T/katana.db"},
 "nodes": [{"tag": "t1", "listen": "127.0.0.1", "allow_private": true,
            "panel": {"type": "uniproxy", "url": "http://127.0.0.1:$pp", "token": "bench",
                      "node_id": 1, "node_type": "shadowsocks", "timeout": 60}}]}
EOF
    fi
    t0=$(now_ms)
    bg "$T/katana-$n.log" "$KATANA" run -c "$T/k.json"; SRV=$BG
    if ! wait_applies "$ap" 1; then
        note "$n users: no plane within 120 s"; tail -3 "$T/katana-$n.log" >&2
        kill -TERM "$SRV"; wait "$SRV" 2>/dev/null || true
        [ -z "$EMU" ] || { kill -TERM "$EMU"; wait "$EMU" 2>/dev/null || true; }
        continue
    fi
    apply_ms=$(($(now_ms) - t0))
    apply_cpu=$(cpu_ms "$SRV")
    if [ "$PANEL" = uniproxy-full ]; then # three more full pulls of the same list, then none
        sleep 7                               # (a pull in flight holds its answer for a while)
        kill -TERM "$EMU"; wait "$EMU" 2>/dev/null || true; EMU=
    fi
    # settled: what follows an apply (the uplink's store of the last good state, its trim) is
    # done once RssAnon stops falling, read each second (at most 30 s)
    sleep 1
    anon=$(kib "$SRV" RssAnon)
    for _ in $(seq 1 30); do
        sleep 1
        next=$(kib "$SRV" RssAnon)
        [ "$next" -lt "$anon" ] || break
        anon=$next
    done
    rss=$(kib "$SRV" VmRSS); peak=$(kib "$SRV" VmHWM); anon=$(kib "$SRV" RssAnon)
    [ -n "$BASE_KIB" ] || BASE_KIB=$anon
    per_user=-
    [ "$n" -gt 1 ] && per_user=$(((anon - BASE_KIB) * 1024 / n))
    reload_ms=- reload_cpu=- kept=-
    if [ "$n" -gt 1 ] && [ "$PANEL" = local ]; then
        bg "$T/tunnel.log" ss-tunnel -s 127.0.0.1 -p "$sp" -b 127.0.0.1 -l "$tp" \
            -L "127.0.0.1:$ECHO_PORT" -k "$(uuid_of "$n")" -m "$CIPHER"; TUN=$BG
        "${KATEST[@]}" wait-port --port "$tp" >/dev/null
        rm -f "$T/ready" "$T/release"
        bg "$T/hold.log" "${KATEST[@]}" hold --port "$tp" --ready-file "$T/ready" \
            --release-file "$T/release" --max-secs 120; HOLD=$BG
        before=
        for _ in $(seq 1 1200); do  # listed once katana found its user (a scan of all keys)
            [ -e "$T/ready" ] && before=$(flow_ids "$ap") && [ -n "$before" ] && break
            sleep 0.05
        done
        users_file "$n" "$T/users.json" changed
        t0=$(now_ms) c0=$(cpu_ms "$SRV")
        kill -HUP "$SRV"
        wait_applies "$ap" 2 && reload_ms=$(($(now_ms) - t0)) &&
            reload_cpu=$(($(cpu_ms "$SRV") - c0))
        after=$(flow_ids "$ap")
        kept=0/1
        [ "$before" = "$after" ] && kept=1/1
        [ -n "$before" ] || kept="no flow" # the client was not served within 60 s
        touch "$T/release"; wait "$HOLD" 2>/dev/null || true
        kill -TERM "$TUN"; wait "$TUN" 2>/dev/null || true
    fi
    kill -TERM "$SRV"; wait "$SRV" 2>/dev/null || true
    [ -z "$EMU" ] || { kill -TERM "$EMU"; wait "$EMU" 2>/dev/null || true; }
    printf '%-9s %10s %10s %10s %10s %10s %10s %12s %12s %6s\n' "$n" "$apply_ms" "$apply_cpu" \
        "$reload_ms" "$reload_cpu" $((rss / 1024)) $((peak / 1024)) "$per_user" 200 "$kept"
done
echo "panel: $PANEL. goals (issue 13): apply of 50 000 users <= 200 ms with RSS <= 64 MiB; <= 200 B per idle" \
    "user; no live connection dropped by a reload. Load average: $(cut -d' ' -f1-3 /proc/loadavg)"
