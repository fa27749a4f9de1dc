#!/bin/bash
# Shadowsocks inside WebSocket with the SIP003 v2ray-plugin (issue 9; XrayR's
# "Shadowsocks-Plugin"): the panel's shadowsocks node has plugin "v2ray-plugin" and plugin_opts
# (path /ss-ws, host node.test, "tls" for ws-tls, the certificate from the agent config; mux=0,
# or mux=1: the client wraps its WebSocket stream in Mux.Cool, one Shadowsocks stream per
# sub-connection). Real ss-local + ss-v2ray-plugin clients (../shared/interop/templates/
# ss-libev/client-ws*.json), scenarios ss-ws and ss-ws-tls with mux 0 and 1: two users at the
# same time, 1 MiB byte-identical each way each, each billed exactly the wire bytes a relay
# between its client and katana counted (less the client's close_notify over TLS); an idle user
# is billed nothing; a WebSocket upgrade on another path gets HTTP 404, with no log line.
# `katana check` refuses a mux that is not a number, naming it. This file runs mux=0;
# t-ss-v2ray-plugin-mux.sh sources it with SS_PLUGIN_MUX=1 for Mux.Cool (the node says mux=1;
# user 1's client mux=1, user 2's mux=8, the plugin's mux being its clients' concurrency): then
# also three paced connections through user 2's client are three flows of one session in
# GET /v1/connections, killing one leaves the other two running; 3 x 256 KiB at once through
# user 1's client echo identical; and with 1 000 users (issue 13, see many_users) a client's
# first session is found by one scan off the worker loop, its later sessions by one key trial
# each, and its second connection from the same IP by the IP's hint.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/trojan.sh"
kt_need ss-local ss-v2ray-plugin openssl curl jq
needs_katana "the v2ray-plugin node" || skip_all "needs katana"

CIPHER=aes-128-gcm
# shutdown_grace of the nodes served: the clients' WebSocket connections are still open at
# SIGTERM, so katana waits this long before it closes them (the default 5 s only adds time)
GRACE=1
MIB=1048576
WS_PATH=/ss-ws
U1=$(kt_uuid); U2=$(kt_uuid); U3=$(kt_uuid)
tj_certs "$T/pki" server
echo_start

# plugin_client NAME PASSWORD SERVER_PORT TLS MUX: ss-local (SOCKS5) with ss-v2ray-plugin,
# mux=MUX, over TLS for node.test verified against $TJ_CA when TLS is 1; sets CL_PORT.
plugin_client() {
    local opts="path=$WS_PATH;host=$TJ_SNI;mux=$5"
    [ "$4" = 1 ] && opts="tls;host=$TJ_SNI;path=$WS_PATH;cert=$TJ_CA;mux=$5"
    kt_ports 1; CL_PORT=${PORTS[0]}
    kt_bg "client-$1" ss-local -s 127.0.0.1 -p "$3" -b 127.0.0.1 -l "$CL_PORT" -k "$2" \
        -m "$CIPHER" --plugin ss-v2ray-plugin --plugin-opts "$opts"
    kt_wait_port "$CL_PORT" 10 || { fail "ss-local $1 did not listen on $CL_PORT"; exit 1; }
}

# usage_snapshot: SIGUSR1 and the usage lines it logs (as in t-trojan-ws.sh).
usage_snapshot() {
    sleep 1.5   # the sampler folds flow counters every second
    srv_usage_mark
    kill -USR1 "$SRV_PID"
    for _ in $(seq 1 40); do [ -n "$(srv_usage)" ] && break; sleep 0.1; done
    sleep 0.3
    srv_usage
}
no_usage() {
    local l; l=$(awk -v u="$2" '$1 == u' <<<"$1")
    echo "user $2: '${l:-no line}'"
    [ -z "$l" ] || [ "$l" = "$2 0 0" ]
}

# api METHOD PATH: print the status code; the body is in $T/body (as in t-mux-clients.sh).
api() {
    curl -sS -m 10 -X "$1" -H "Authorization: Bearer $TOKEN" -o "$T/body" -w '%{http_code}' \
        "http://127.0.0.1:$API_PORT$2"
}
# flows_of UID: the ids of user UID's live flows, one a line.
flows_of() {
    api GET /v1/connections >/dev/null
    jq -r --argjson u "$1" '.flows[] | select(.user.uid == $u) | .id' "$T/body"
}
# wait_flows UID N: until user UID has N live flows (10 s).
wait_flows() {
    for _ in $(seq 1 100); do
        [ "$(flows_of "$1" | grep -c .)" = "$2" ] && return 0
        sleep 0.1
    done
    echo "flows of user $1:"; cat "$T/body"
    return 1
}
# one_session UID: user UID's live flows all belong to one session (one client connection).
one_session() {
    api GET /v1/connections >/dev/null
    local n
    n=$(jq --argjson u "$1" '[.flows[] | select(.user.uid == $u) | .session] | unique | length' \
        "$T/body")
    echo "sessions of user $1's flows: $n"
    [ "$n" = 1 ]
}

# A mux that is not a number: refused naming it (the node keeps its last good state when a
# panel sends it); v2ray-plugin's default (no mux) is Mux.Cool and accepted.
kt_ports 1
mkconfig "$T/muxon.json" "${PORTS[0]}" "$CIPHER" --user "1:$U1" --plugin-opts "path=$WS_PATH;mux=on"
mkconfig "$T/muxdefault.json" "${PORTS[0]}" "$CIPHER" --user "1:$U1" --plugin-opts "path=$WS_PATH"
check_rc() {
    local out rc=0
    out=$(timeout 10 "$(katana_bin)" check -c "$T/$1.json" 2>&1) || rc=$?
    echo "$1: exit $rc: $out"
    [ "$rc" = "$2" ] && { [ -z "$3" ] || grep -qF -- "$3" <<<"$out"; }
}
if [ "${SS_PLUGIN_MUX:-0}" = 0 ]; then
    check "v2ray-plugin with mux=on refused naming it" \
        check_rc muxon 1 'plugin_opts: mux "on": not a number'
    check "v2ray-plugin without mux (Mux.Cool, the plugin's default) accepted" \
        check_rc muxdefault 0 ""
fi

# scenario NAME TLS MUX [mkconfig options]
scenario() {
    local name=$1 tls=$2 mux=$3 opts="path=$WS_PATH;host=$TJ_SNI;mux=$3"; shift 3
    [ "$tls" = 1 ] && opts="tls;$opts"
    kt_ports 2; API_PORT=${PORTS[1]}; TOKEN=ssmux-$$
    mkconfig "$T/config-$name.json" "${PORTS[0]}" "$CIPHER" --plugin-opts "$opts" \
        --grace "$GRACE" --user "1:$U1" --user "2:$U2" --user "3:$U3" "$@"
    jq --arg l "127.0.0.1:$API_PORT" --arg t "$TOKEN" '.api = {listen: $l, token: $t}' \
        "$T/config-$name.json" >"$T/c.tmp" && mv "$T/c.tmp" "$T/config-$name.json"
    srv_start "$T/config-$name.json"
    kt_wait_port "$API_PORT" 10 || { fail "API did not listen on $API_PORT"; exit 1; }
    local port=${PORTS[0]} c1 c2 r1=0 r2=0 p1 p2 snap
    tj_counting_relay "$name-u1" "$port"; plugin_client "$name-u1" "$U1" "$RELAY_PORT" "$tls" "$mux"
    c1=$CL_PORT
    tj_counting_relay "$name-u2" "$port"
    plugin_client "$name-u2" "$U2" "$RELAY_PORT" "$tls" "$((mux * 8))"
    c2=$CL_PORT
    tcp_rt "$c1" ok --bytes "$MIB" --seed "$name-u1" --label "$name-u1" >"$T/$name-u1.out" 2>&1 &
    p1=$!
    tcp_rt "$c2" ok --bytes "$MIB" --seed "$name-u2" --label "$name-u2" >"$T/$name-u2.out" 2>&1 &
    p2=$!
    wait "$p1" || r1=$?
    wait "$p2" || r2=$?
    cat "$T/$name-u1.out" "$T/$name-u2.out"
    check "$name: user 1, 1 MiB each way, echo identical" test "$r1" = 0
    check "$name: user 2 at the same time, 1 MiB each way, echo identical" test "$r2" = 0
    tj_relays_settle "$name-u1" "$name-u2"
    snap=$(usage_snapshot)
    echo "SIGUSR1 snapshot:"; echo "$snap"
    check "$name: usage of user 1 is its wire bytes" tj_wire_is "$snap" 1 "$name-u1" $((tls * 24))
    check "$name: usage of user 2 is its wire bytes" tj_wire_is "$snap" 2 "$name-u2" $((tls * 24))
    check "$name: usage: both above the 1 MiB moved each way" \
        eval 'read -r a b <"$T/$name-u1.count"; read -r c d <"$T/$name-u2.count";
              [ "$a" -gt "$MIB" ] && [ "$b" -gt "$MIB" ] && [ "$c" -gt "$MIB" ] && [ "$d" -gt "$MIB" ]'
    check "$name: idle user 3 billed nothing" no_usage "$snap" 3
    [ "$mux" = 1 ] && mux_flows "$name" "$c2" "$c1"
    local lines0; lines0=$(tj_log_lines)
    check "$name: a WebSocket upgrade on another path gets HTTP 404" \
        test "$(tj_ws_status "$port" /other "$tls")" = 404
    check "$name: a plain GET on the path gets HTTP 404" \
        test "$(tj_http_status "$port" "$WS_PATH" "$tls")" = 404
    check "$name: no log line per probe" test "$(tj_log_lines)" = "$lines0"
    check "$name: user 1 served afterwards" tcp_rt "$c1" ok --bytes 65536 --seed "$name-after"
    srv_stop
    check "$name: SIGTERM: katana exits 0" test "$SRV_RC" = 0
}
# mux_flows NAME SOCKS2 SOCKS1: three paced connections through user 2's client (mux=8) are
# three flows of one session; killing one cuts it alone; 3 x 256 KiB at once through user 1's
# client (mux=1: one sub-connection per WebSocket connection) echo identical.
mux_flows() {
    local n=$1 pa pb pk victim st
    stream_bg "$n-a" "$2" 3000000 300000 ok; pa=$STREAM_PID
    stream_bg "$n-b" "$2" 3000000 300000 ok; pb=$STREAM_PID
    stream_bg "$n-k" "$2" 8000000 300000 cut; pk=$STREAM_PID
    check "$n: three connections through one mux client are three flows in the API" wait_flows 2 3
    check "$n: ... of one session (one WebSocket connection)" one_session 2
    victim=$(flows_of 2 | sort -n | tail -n 1)
    st=$(api DELETE "/v1/connections/$victim")
    check "$n: DELETE /v1/connections/$victim (the third flow) -> 204" test "$st" = 204
    check "$n: the other two flows stay live" wait_flows 2 2
    stream_unpace "$n-a" "$n-b"   # checked while they ran: the rest needs no pacing
    stream_wait "$n-k" "$pk" 5 "$n: the killed sub-flow is cut at once"
    stream_wait "$n-a" "$pa" 30 "$n: sub-flow a completes byte-identical"
    stream_wait "$n-b" "$pb" 30 "$n: sub-flow b completes byte-identical"
    check "$n: user 1, 3 x 256 KiB at once through its mux=1 client, echo identical" \
        tcp_rt "$3" ok --bytes 262144 --conns 3 --seed "$n-u1x3" --label "$n-u1x3"
}

# ss_counts: "lookups keys scans" from /metrics (katana_ss_lookups_total,
# katana_ss_key_trials_total, katana_ss_scans_run_total; "none" for a missing one).
ss_counts() {
    curl -sS -m 10 -H "Authorization: Bearer $TOKEN" "http://127.0.0.1:$API_PORT/metrics" |
        awk 'BEGIN { l = k = s = "none" }
             $1 == "katana_ss_lookups_total" { l = $2 }
             $1 == "katana_ss_key_trials_total" { k = $2 }
             $1 == "katana_ss_scans_run_total" { s = $2 } END { print l, k, s }'
}
# costs BEFORE AFTER MIN_LOOKUPS MAX_KEYS_PER_LOOKUP SCANS: between two ss_counts, at least
# MIN_LOOKUPS lookups, at most MAX_KEYS_PER_LOOKUP keys each (the scans' keys aside), and
# exactly SCANS scans.
costs() {
    local l0 k0 s0 l1 k1 s1
    read -r l0 k0 s0 <<<"$1"; read -r l1 k1 s1 <<<"$2"
    [ "$l0" != none ] && [ "$k1" != none ] && [ "$s1" != none ] ||
        { echo "no katana_ss_* metrics"; return 1; }
    local l=$((l1 - l0)) k=$((k1 - k0)) sc=$((s1 - s0))
    echo "$l lookups, $k keys tried (with the scans'), $sc scans off the loop"
    [ "$l" -ge "$3" ] && [ "$sc" = "$5" ] && { [ "$sc" -gt 0 ] || [ "$k" -le $(($4 * l)) ]; }
}

# many_users: issue 13 over Mux.Cool. 1 000 users on a ws node with mux (one worker, so that
# one hint table sees every connection), a client of user 1000 (mux=8), never seen: its first
# session is found by one scan off the worker loop; five later sessions of its WebSocket
# connection, opened while the first one is held open, cost one key trial each and no scan;
# a second client of the user from the same IP (a new WebSocket connection) is found by the
# IP's hint in a trial or two, no scan.
many_users() {
    local n=1000 port pw c1 c2 ps m0 m1 m2 m3
    kt_ports 2; port=${PORTS[0]}; API_PORT=${PORTS[1]}; TOKEN=ssmux-$$
    mkconfig "$T/config-many.json" "$port" "$CIPHER" --users-file "$T/users-many.json" \
        --grace "$GRACE" --plugin-opts "path=$WS_PATH;host=$TJ_SNI;mux=1"
    jq --arg l "127.0.0.1:$API_PORT" --arg t "$TOKEN" \
        '.api = {listen: $l, token: $t} | .workers = 1' "$T/config-many.json" >"$T/c.tmp" &&
        mv "$T/c.tmp" "$T/config-many.json"
    pw=$(python3 - "$n" "$T/users-many.json" <<'PY'
import json, sys, uuid
users = [{"id": i + 1, "uuid": str(uuid.uuid4()), "speed_limit": None, "device_limit": None}
         for i in range(int(sys.argv[1]))]
json.dump({"users": users}, open(sys.argv[2], "w"))
print(users[-1]["uuid"])
PY
)
    srv_start "$T/config-many.json"
    kt_wait_port "$API_PORT" 10 || { fail "API did not listen on $API_PORT"; exit 1; }
    plugin_client many "$pw" "$port" 0 8; c1=$CL_PORT
    m0=$(ss_counts)
    stream_bg many-a "$c1" 600000 300000 ok; ps=$STREAM_PID
    m1=$(ss_counts)
    check "many users: a never-seen client's first session: one scan off the loop" \
        costs "$m0" "$m1" 1 0 1
    check "many users: five later sessions of the connection echoed" \
        tcp_rt "$c1" ok --bytes 1000 --conns 5 --seed many-b --label many-b
    m2=$(ss_counts)
    check "many users: ... one key trial each, no scan of $n users" costs "$m1" "$m2" 5 1 0
    stream_unpace many-a   # held open while the five later sessions came
    stream_wait many-a "$ps" 15 "many users: the first session completes byte-identical"
    plugin_client many2 "$pw" "$port" 0 8; c2=$CL_PORT
    check "many users: a second client of the user from the same IP echoed" \
        tcp_rt "$c2" ok --bytes 1000 --seed many-c --label many-c
    m3=$(ss_counts)
    check "many users: ... found by the IP's hint, no scan" costs "$m2" "$m3" 1 2 0
    srv_stop
    check "many users: SIGTERM: katana exits 0" test "$SRV_RC" = 0
}

if [ "${SS_PLUGIN_MUX:-0}" = 0 ]; then
    scenario ss-ws 0 0
    scenario ss-ws-tls 1 0 --cert-file "$TJ_CERT" --key-file "$TJ_KEY"
else
    scenario ss-ws-mux 0 1
    scenario ss-ws-tls-mux 1 1 --cert-file "$TJ_CERT" --key-file "$TJ_KEY"
    many_users
fi
kt_finish
