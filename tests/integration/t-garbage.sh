#!/bin/bash
# Random bytes at the Shadowsocks TCP and UDP port get no answer; the daemon keeps running
# and still serves a real client (TCP and UDP) afterwards.
. "$(dirname "$0")/lib.sh"
kt_need ss-local

CIPHER=aes-128-gcm
U1=$(kt_uuid)
echo_start
kt_ports 1; PORT=${PORTS[0]}
mkconfig "$T/config.json" "$PORT" "$CIPHER" --user "1:$U1"
srv_start "$T/config.json"
SPORT=$(srv_user_port 1)

check "random bytes to the TCP port: no answer" \
    timeout 60 "${KT_PY[@]}" garbage --port "$SPORT" --sizes 1,50,1024,65536 --wait 1
check "random datagrams to the UDP port: no answer" \
    timeout 60 "${KT_PY[@]}" garbage --port "$SPORT" --udp --sizes 1,50,1500,65000 --wait 0.5
# 30 parallel garbage connections, left open while a real client works
GPIDS=()
for i in $(seq 1 30); do
    timeout 30 "${KT_PY[@]}" garbage --port "$SPORT" --sizes 200 --seed "g$i" --wait 2 \
        >"$T/g$i.out" 2>&1 &
    GPIDS+=($!)
done
check "daemon still runs" srv_alive
cl_start good "$CIPHER" "$U1" "$SPORT"
check "real client served after the garbage (TCP)" tcp_rt "$CL_PORT" ok --bytes 524288
check "real client served after the garbage (UDP)" udp_rt "$CL_PORT" ok --count 5
GRC=0
for p in "${GPIDS[@]}"; do wait "$p" || GRC=1; done
check "no parallel garbage connection got an answer" test "$GRC" = 0
check "daemon still runs at the end" srv_alive
srv_stop
check "daemon exits 0 on SIGTERM" test "$SRV_RC" = 0
kt_finish
