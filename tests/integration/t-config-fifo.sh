#!/bin/bash
# A FIFO or a directory as the config file, or a FIFO as a local panel's users_file (issue 15):
# refused at once with a clear error; never blocks the control loop (opening a FIFO for reading
# waits for a writer).
# Checks: `katana check` and `katana run` on a FIFO or a directory exit 1 within 5 s, naming
# what the path is; a running katana whose config path, then whose users_file, is replaced by a
# FIFO refuses the SIGHUP reload naming the FIFO, keeps serving its user and answering
# /healthz, and exits 0 on SIGTERM within the grace.
. "$(dirname "$0")/lib.sh"
kt_need ss-local curl
needs_katana "katana check / run / reload on a FIFO" || skip_all "needs katana"

KATANA=$(katana_bin)
[ -x "$KATANA" ] || { fail "katana binary not found at $KATANA"; exit 1; }
mkfifo "$T/fifo.json"
mkdir "$T/dir.json"
for f in fifo dir; do
    case $f in fifo) what="a FIFO" ;; dir) what="a directory" ;; esac
    for cmd in check run; do
        out=$(timeout 5 "$KATANA" "$cmd" -c "$T/$f.json" 2>&1) && rc=0 || rc=$?
        echo "$cmd on $what: rc $rc: $out"
        check "katana $cmd on $what exits 1 at once (not by timeout)" test "$rc" = 1
        check "katana $cmd on $what says '$f.json: $what, not a regular file'" \
            grep -q "$f.json: $what, not a regular file" <<<"$out"
    done
done

U1=$(kt_uuid)
kt_ports 2; PORT=${PORTS[0]}; API=${PORTS[1]}
echo_start
mkconfig "$T/katana.json" "$PORT" aes-256-gcm --user "1:$U1" --users-file "$T/users.json" \
    --api-port "$API"
srv_start "$T/katana.json"
cl_start u1 aes-256-gcm "$U1" "$PORT"
check "user 1 is served" tcp_rt "$CL_PORT" ok

# serving and answering: a round trip, and /healthz 200 within 2 s
responsive() {
    tcp_rt "$CL_PORT" ok >/dev/null &&
        [ "$(curl -s -m 2 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$API/healthz")" = 200 ]
}

mv "$T/katana.json" "$T/katana.good"
mkfifo "$T/katana.json"
srv_reload
echo "reload with the config path a FIFO: ${SRV_RELOAD_LOG}"
check "the reload is refused, naming the FIFO" \
    grep -q "reload refused.*katana.json: a FIFO, not a regular file" <<<"$SRV_RELOAD_LOG"
check "still serving and answering after the refused reload" responsive

rm "$T/katana.json"
mv "$T/katana.good" "$T/katana.json"
mv "$T/users.json" "$T/users.good"
mkfifo "$T/users.json"
srv_reload
echo "reload with users_file a FIFO: ${SRV_RELOAD_LOG}"
check "the reload is refused, naming the users_file FIFO" \
    grep -q "reload refused.*users.json: a FIFO, not a regular file" <<<"$SRV_RELOAD_LOG"
check "still serving and answering after the second refused reload" responsive

srv_stop
check "SIGTERM: katana exits 0 within the grace" test "$SRV_RC" = 0
kt_finish
