#!/bin/bash
# Device limit with the panel's alivelist (issue 3, PANEL.md §1.8): user 1 has device_limit 2.
# Client A reaches katana from 127.0.0.1, client B (behind `katest relay`) from 127.0.0.2.
# The panel's per-user count includes the IPs this node reported itself, so katana takes its own
# live IPs off before adding the local ones back: with A live and the panel counting 1 (A's IP),
# B is still served; with the panel counting 3, B is refused while A may open more sessions and
# A's held connection is never cut; once the panel counts nobody, B is served again.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/panel.sh"
kt_need ss-local curl
needs_katana "panel client" || skip_all "needs katana"

# wait_alivelist: two more alivelist fetches than now (the new answer is in the supervisor).
wait_alivelist() {
    local want i
    want=$(($(panel_hits alivelist) + 2))
    for ((i = 0; i < 100; i++)); do
        [ "$(panel_hits alivelist)" -ge "$want" ] && return 0
        sleep 0.1
    done
    return 1
}

U1=$(kt_uuid)
echo_start
panel_start 1 1 "1:$U1"
panel_ctl users "{\"users\": [{\"id\": 1, \"uuid\": \"$U1\", \"speed_limit\": null,
                               \"device_limit\": 2}]}"
kat_config "$T/config.json" 1
kat_start "$T/config.json"
kt_ports 1; RELAY=${PORTS[0]}
kt_bg relay "${KT_PY[@]}" relay --port "$RELAY" --to "$NODE_PORT" --source 127.0.0.2 \
    --ready-file "$T/relay.ready"
kt_wait_file "$T/relay.ready" 10 || { fail "relay did not start"; exit 1; }
cl_start a "$CIPHER" "$U1" "$NODE_PORT"; CA=$CL_PORT
cl_start b "$CIPHER" "$U1" "$RELAY"; CB=$CL_PORT
check "katana fetches alivelist each push interval" wait_alivelist

stream_bg held "$CA" 4194304 262144 ok   # ~16 s
HELD=$STREAM_PID
panel_ctl alivelist '{"1": 1}'
check "new alivelist answer fetched" wait_alivelist
check "panel counts only this node's IP: second IP served (limit 2)" \
    tcp_rt "$CB" ok --bytes 65536 --seed b1
panel_ctl alivelist '{"1": 3}'
check "new alivelist answer fetched" wait_alivelist
check "panel counts 3: second IP refused" tcp_rt "$CB" refused --bytes 4096 --seed b2
check "panel counts 3: the first IP may open another session" \
    tcp_rt "$CA" ok --bytes 65536 --seed a2
stream_wait held "$HELD" 40 "first IP's held connection never cut"

panel_ctl alivelist '{}'
check "new alivelist answer fetched" wait_alivelist
ok=1
for _ in $(seq 1 50); do
    if tcp_rt "$CB" ok --bytes 65536 --seed b3 >"$T/b3.out" 2>&1; then ok=0; break; fi
    sleep 0.2
done
cat "$T/b3.out"
check "panel counts nobody: second IP served" test "$ok" = 0
kat_stop
check "katana exits 0 on SIGTERM" test "$SRV_RC" = 0
kt_finish
