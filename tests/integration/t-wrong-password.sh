#!/bin/bash
# A client with a wrong password is refused (no echo over TCP or UDP); the daemon keeps
# running and serves a correct client afterwards.
. "$(dirname "$0")/lib.sh"
kt_need ss-local

CIPHER=aes-256-gcm
U1=$(kt_uuid); WRONG=$(kt_uuid)
echo_start
kt_ports 1
mkconfig "$T/config.json" "${PORTS[0]}" "$CIPHER" --user "1:$U1"
srv_start "$T/config.json"
cl_start bad "$CIPHER" "$WRONG" "$(srv_user_port 1)"; BAD=$CL_PORT
cl_start bad-cipher chacha20-ietf-poly1305 "$U1" "$(srv_user_port 1)"; BADC=$CL_PORT
cl_start good "$CIPHER" "$U1" "$(srv_user_port 1)"; GOOD=$CL_PORT

check "wrong password: TCP gets no echo" tcp_rt "$BAD" refused --bytes 4096 --conns 2
check "wrong password: UDP gets no echo" udp_rt "$BAD" refused --count 2
check "right password, wrong cipher: TCP gets no echo" tcp_rt "$BADC" refused --bytes 4096
check "daemon still runs" srv_alive
check "correct client served afterwards (TCP)" tcp_rt "$GOOD" ok --bytes 262144
check "correct client served afterwards (UDP)" udp_rt "$GOOD" ok --count 5
srv_stop
check "daemon exits 0 on SIGTERM" test "$SRV_RC" = 0
kt_finish
