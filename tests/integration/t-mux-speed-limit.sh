#!/bin/bash
# Speed limits on Mux.Cool sub-flows (issue 12): the real v2ray 4.34 client with "mux" over
# VLESS in clear; the node's `speed_limit` 8 Mbit/s (1 000 000 B/s) for the user. Two downloads
# at once through the one mux connection share the user's bucket: together, after a 1.5 s
# warm-up, they move within 10% of the limit over 5 s, and each gets a part of it.
. "$(dirname "$0")/lib.sh"
kt_need v2ray
[ "$KT_SERVER" = katana ] || skip_all "KT_SERVER=$KT_SERVER: Mux.Cool is served by katana only"
PT=(python3 "$KT_DIR/pacetest.py")

U1=$(kt_uuid)
kt_ports 2; SINK_PORT=${PORTS[0]}; NODE=${PORTS[1]}
kt_bg sink "${PT[@]}" serve --port "$SINK_PORT" --ready-file "$T/sink.ready"
kt_wait_file "$T/sink.ready" 10 || { fail "sink did not start"; exit 1; }
mkconfig "$T/config.json" "$NODE" - --protocol vless --user "1:$U1"
python3 -c 'import json, sys
c = json.load(open(sys.argv[1])); c["nodes"][0]["speed_limit"] = 8
json.dump(c, open(sys.argv[1], "w"))' "$T/config.json"
srv_start "$T/config.json"
kt_ports 1; CL_PORT=${PORTS[0]}
cat >"$T/client.json" <<JSON
{"log": {"loglevel": "warning", "access": "none"},
 "inbounds": [{"listen": "127.0.0.1", "port": $CL_PORT, "protocol": "socks",
   "settings": {"auth": "noauth", "udp": false, "ip": "127.0.0.1"}}],
 "outbounds": [{"protocol": "vless", "mux": {"enabled": true, "concurrency": 8},
   "settings": {"vnext": [{"address": "127.0.0.1", "port": $NODE,
                           "users": [{"id": "$U1", "encryption": "none"}]}]},
   "streamSettings": {"network": "tcp", "security": "none"}}]}
JSON
kt_bg client v2ray -config "$T/client.json"
kt_wait_port "$CL_PORT" 10 || { fail "v2ray client did not listen on $CL_PORT"; exit 1; }

for f in m1 m2; do
    kt_bg "$f" "${PT[@]}" flow --socks "$CL_PORT" --dest-port "$SINK_PORT" --mode down --secs 9 \
        --out "$T/$f.json" --ready-file "$T/$f.ready"
    eval "P_$f=$BG_PID"
done
for f in m1 m2; do kt_wait_file "$T/$f.ready" 10 || fail "$f: flow did not start"; done
kt_wait_exit "$P_m1" 15; kt_wait_exit "$P_m2" 15
R=$(sort -n "$T"/m?.ready | tail -1)
W0=$(awk -v r="$R" 'BEGIN { printf "%.3f", r + 1.5 }'); W1=$(awk -v r="$R" 'BEGIN { printf "%.3f", r + 6.5 }')
G1=$("${PT[@]}" rate --file "$T/m1.json" --from "$W0" --to "$W1" || true)
G2=$("${PT[@]}" rate --file "$T/m2.json" --from "$W0" --to "$W1" || true)
SUM=$(( ${G1:-0} + ${G2:-0} ))
echo "sub-flows: $G1 + $G2 = $SUM B/s, limit 1000000 B/s"
check "two mux sub-flows together move within 10% of the user's limit" \
    test $(( (SUM > 1000000 ? SUM - 1000000 : 1000000 - SUM) * 10 )) -le 1000000
check "each sub-flow moves (at least a fifth of the limit)" \
    test "${G1:-0}" -ge 200000 -a "${G2:-0}" -ge 200000

srv_stop
check "katana exits 0" test "$SRV_RC" = 0
kt_finish
