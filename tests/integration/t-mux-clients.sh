#!/bin/bash
# Mux.Cool (issue 9, PROTOCOLS.md §7) with the real v2ray 4.34 client, "mux" enabled, over VLESS
# and VMess in clear: three paced transfers through one client's SOCKS port share one
# connection (one session) and are three flows in GET /v1/connections; killing one flow
# (DELETE /v1/connections/<id>) cuts that transfer only, the other two complete byte-identical
# and the session stays; a UDP sub-session (SOCKS5 UDP ASSOCIATE through the client) echoes.
# Then 3 x 256 KiB at once through a second user's mux client are echoed identical and billed
# to that user within [payload, payload + 5% + 4 KiB] each way (usage counts the client's wire
# bytes: the protocol's header and Mux.Cool's frame headers).
. "$(dirname "$0")/lib.sh"
kt_need v2ray curl jq
[ "$KT_SERVER" = katana ] || skip_all "KT_SERVER=$KT_SERVER: Mux.Cool is served by katana only"

U1=$(kt_uuid); U2=$(kt_uuid)
echo_start

# mux_client NAME PROTOCOL UUID SERVER_PORT: v2ray with a SOCKS5 inbound and a vless or vmess
# outbound with Mux.Cool on; sets CL_PORT.
mux_client() {
    local user='{"id": "'$3'", "encryption": "none"}'
    [ "$2" = vmess ] && user='{"id": "'$3'", "alterId": 0, "security": "aes-128-gcm"}'
    kt_ports 1; CL_PORT=${PORTS[0]}
    cat >"$T/client-$1.json" <<JSON
{"log": {"loglevel": "warning", "access": "none"},
 "inbounds": [{"listen": "127.0.0.1", "port": $CL_PORT, "protocol": "socks",
   "settings": {"auth": "noauth", "udp": true, "ip": "127.0.0.1"}}],
 "outbounds": [{"protocol": "$2", "mux": {"enabled": true, "concurrency": 8},
   "settings": {"vnext": [{"address": "127.0.0.1", "port": $4, "users": [$user]}]},
   "streamSettings": {"network": "tcp", "security": "none"}}]}
JSON
    kt_bg "client-$1" v2ray -config "$T/client-$1.json"
    kt_wait_port "$CL_PORT" 10 || { fail "v2ray client $1 did not listen on $CL_PORT"; exit 1; }
}

# api METHOD PATH: print the status code; the body is in $T/body.
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
    local i
    for i in $(seq 1 100); do
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
usage_snapshot() {
    sleep 1.5   # the sampler folds counters every second
    srv_usage_mark
    kill -USR1 "$SRV_PID"
    for _ in $(seq 1 40); do [ -n "$(srv_usage)" ] && break; sleep 0.1; done
    sleep 0.3
    srv_usage
}
# billed LINES UID PAYLOAD: up and down both in [PAYLOAD, PAYLOAD + 5% + 4 KiB].
billed() {
    local up down hi
    read -r _ up down <<<"$(awk -v u="$2" '$1 == u' <<<"$1")"
    hi=$(($3 + $3 / 20 + 4096))
    echo "user $2: up ${up:-none} down ${down:-none}, expected each in [$3, $hi]"
    [ -n "${up:-}" ] && [ "$up" -ge "$3" ] && [ "$up" -le "$hi" ] && [ "$down" -ge "$3" ] &&
        [ "$down" -le "$hi" ]
}

# scenario PROTOCOL
scenario() {
    local p=$1
    kt_ports 2; API_PORT=${PORTS[1]}; TOKEN=mux-$$
    mkconfig "$T/config-$p.json" "${PORTS[0]}" - --protocol "$p" --user "1:$U1" --user "2:$U2"
    jq --arg l "127.0.0.1:$API_PORT" --arg t "$TOKEN" '.api = {listen: $l, token: $t}' \
        "$T/config-$p.json" >"$T/c.tmp" && mv "$T/c.tmp" "$T/config-$p.json"
    srv_start "$T/config-$p.json"
    kt_wait_port "$API_PORT" 10 || { fail "API did not listen on $API_PORT"; exit 1; }
    local port=${PORTS[0]} c1 c2
    mux_client "$p-u1" "$p" "$U1" "$port"; c1=$CL_PORT
    mux_client "$p-u2" "$p" "$U2" "$port"; c2=$CL_PORT

    stream_bg "$p-a" "$c1" 3000000 300000 ok; local pa=$STREAM_PID
    stream_bg "$p-b" "$c1" 3000000 300000 ok; local pb=$STREAM_PID
    stream_bg "$p-k" "$c1" 8000000 300000 cut; local pk=$STREAM_PID
    check "$p: three sub-flows of one mux client are three flows in the API" wait_flows 1 3
    check "$p: ... carried by one session (one connection)" one_session 1
    local victim
    victim=$(flows_of 1 | sort -n | tail -n 1)
    local st; st=$(api DELETE "/v1/connections/$victim")
    check "$p: DELETE /v1/connections/$victim (the third flow) -> 204" test "$st" = 204
    check "$p: the other two flows stay live" wait_flows 1 2
    stream_unpace "$p-a" "$p-b"   # checked while they ran: the rest needs no pacing
    stream_wait "$p-k" "$pk" 5 "$p: the killed sub-flow is cut at once"
    stream_wait "$p-a" "$pa" 30 "$p: sub-flow a completes byte-identical"
    stream_wait "$p-b" "$pb" 30 "$p: sub-flow b completes byte-identical"
    check "$p: the mux connection outlives its sub-flows" srv_alive
    check "$p: a UDP sub-session: 10 x 1200-byte datagrams echoed identical" \
        udp_rt "$c1" ok --count 10 --size 1200 --seed "$p-udp"

    usage_snapshot >/dev/null
    check "$p: user 2, 3 x 256 KiB at once over one mux connection, echo identical" \
        tcp_rt "$c2" ok --bytes 262144 --conns 3 --seed "$p-u2" --label "$p-u2"
    local snap; snap=$(usage_snapshot)
    echo "SIGUSR1 snapshot:"; echo "$snap"
    check "$p: usage of user 2 is the bytes its client moved" billed "$snap" 2 $((3 * 262144))
    check "$p: user 1 still served afterwards" tcp_rt "$c1" ok --bytes 65536 --seed "$p-after"
    srv_stop
    check "$p: SIGTERM: katana exits 0" test "$SRV_RC" = 0
}

scenario vless
scenario vmess
kt_finish
