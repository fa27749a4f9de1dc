#!/bin/bash
# Two instances (issue 15): a stale second `katana run` must not share the first one's ports
# through SO_REUSEPORT nor its database. The second exits non-zero with a message naming the
# first (pid and name); the first keeps serving, and every connection still reaches it.
#   1. the same config: the API port is taken, refused naming the holder;
#   2. the same config on another API port: the node's port is taken (the SO_REUSEPORT case);
#   3. a uniproxy node: the same database is locked, refused naming the holder's pid;
#   4. after the first stops, the same config starts (nothing stale is left behind).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/panel.sh"
kt_need ss-local jq curl
needs_katana "instance checks" || skip_all "needs katana"

BIN=$(katana_bin)
U1=$(kt_uuid)
echo_start

# second_run NAME CONFIG: run a second katana for CONFIG; it must exit 1 within 10 s.
second_run() {
    local rc=0
    timeout 10 "$BIN" run -c "$2" >"$T/$1.log" 2>&1 || rc=$?
    sed 's/^/    /' "$T/$1.log" | tail -n 3
    check "$1: the second katana exits 1" test "$rc" = 1
}

# --- local panel: ports ------------------------------------------------------------------
kt_ports 2; API1=${PORTS[1]}
mkconfig "$T/config.json" "${PORTS[0]}" aes-256-gcm --user "1:$U1" --api-port "$API1"
srv_start "$T/config.json"
FIRST=$SRV_PID
cl_start u1 aes-256-gcm "$U1" "$(srv_user_port 1)"; C1=$CL_PORT
check "the first katana serves" tcp_rt "$C1" ok --bytes 65536 --seed a

second_run same-config "$T/config.json"
check "same config: the message names the first (pid $FIRST)" \
    grep -q "api: cannot listen on 127.0.0.1:$API1: the port is held by pid $FIRST (katana)" \
    "$T/same-config.log"

kt_ports 1
jq --arg l "127.0.0.1:${PORTS[0]}" '.api.listen = $l' "$T/config.json" >"$T/other-api.json"
second_run other-api "$T/other-api.json"
check "another API port: the node's port is refused naming pid $FIRST" \
    grep -q "binding 127.0.0.1:$(srv_user_port 1) failed: the port is held by pid $FIRST (katana)" \
    "$T/other-api.log"

# Every new connection still reaches the first katana: 20 connections, its own session count.
check "20 new connections all served" tcp_rt "$C1" ok --bytes 4096 --conns 20 --seed b
check "the first katana still runs" kt_alive "$FIRST"
srv_stop
check "the first katana stops cleanly" test "$SRV_RC" = 0

# --- uniproxy: the database --------------------------------------------------------------
panel_start 30 30 "1:$U1"
kat_config "$T/panel.json"
kat_start "$T/panel.json"
FIRST=$SRV_PID
kt_ports 1
jq --arg l "127.0.0.1:${PORTS[0]}" '.api.listen = $l' "$T/panel.json" >"$T/panel-other-api.json"
second_run same-db "$T/panel-other-api.json"
check "same database: refused naming pid $FIRST" \
    grep -q "database $T/katana.db is in use by another katana (pid $FIRST)" "$T/same-db.log"
cl_start u1p aes-256-gcm "$U1" "$NODE_PORT"
check "the first katana keeps serving the panel's users" tcp_rt "$CL_PORT" ok --bytes 65536 --seed c
kill -KILL "$FIRST"
kt_wait_exit "$FIRST" 5 || true

# --- after kill -9 the lock and the ports are free -----------------------------------------
kat_start "$T/panel.json"
check "after kill -9 the same config starts again" kt_alive "$SRV_PID"
check "and serves" tcp_rt "$CL_PORT" ok --bytes 65536 --seed d
kat_stop
check "and stops cleanly" test "$SRV_RC" = 0
kt_finish
