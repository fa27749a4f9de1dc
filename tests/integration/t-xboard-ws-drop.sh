#!/bin/bash
# Xboard node channel dropped (issue 14, PROTOCOLS-2.md §6.6): the panel's socket dies in the
# middle of a `sync.user.delta` frame. katana falls back to REST polling at once (pull_interval
# is 60 s, so only the fallback can pull) and ends up equal to the panel; the channel comes back
# after its backoff (1 s + jitter); a delta that does not apply cleanly (it removes a user katana
# does not hold) triggers a full pull.
# Checks: a `user` pull within 3 s of the kill; the user the panel removed loses its session and
# the user it added relays bytes; a second channel connects within 6 s; the bad delta logs one
# clear error and is followed by a pull; the kept user's session survives all of it.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/panel.sh"
kt_need ss-local curl sqlite3
needs_katana "panel client" || skip_all "needs katana"
PANEL_TYPE=xboard

U1=$(kt_uuid); U2=$(kt_uuid); U3=$(kt_uuid)
echo_start
panel_start 1 60 "1:$U1" "2:$U2"
kat_config "$T/config.json" 1
kat_start "$T/config.json"
check "the node channel came up" ws_wait_up 10
cl_start u1 "$CIPHER" "$U1" "$NODE_PORT"; C1=$CL_PORT
cl_start u2 "$CIPHER" "$U2" "$NODE_PORT"; C2=$CL_PORT
stream_bg keep "$C1" 655360 65536 ok; S1=$STREAM_PID     # ~10 s, must complete
stream_bg gone "$C2" 4194304 65536 cut; S2=$STREAM_PID   # ~64 s, must be cut
sleep 1.5

# the panel: user 2 removed, user 3 added; the delta saying so dies half-sent
panel_ctl users "{\"users\": [{\"id\": 1, \"uuid\": \"$U1\", \"speed_limit\": null, \"device_limit\": null},
                              {\"id\": 3, \"uuid\": \"$U3\", \"speed_limit\": null, \"device_limit\": null}]}"
PULLS0=$(panel_hits user)
panel_ctl ws_kill '{"partial": {"event": "sync.user.delta", "data": {"action": "remove", "users": [{"id": 2}]}}}'
pulled() { [ "$(panel_hits user)" -gt "$PULLS0" ]; }
check "katana polled over REST at once when the channel dropped" kt_until 3 pulled
stream_wait gone "$S2" 5 "the user the panel removed lost its session"
cl_start u3 "$CIPHER" "$U3" "$NODE_PORT"; C3=$CL_PORT
stream_bg added "$C3" 65536 65536 ok; S3=$STREAM_PID
stream_wait added "$S3" 10 "the user the panel added relays bytes"
reconnected() { [ "$(panel_ws connects)" -ge 2 ] && ws_wait_up 1 2; }
check "the channel reconnected after its backoff" kt_until 6 reconnected

# a delta that does not apply cleanly: a full pull follows
PULLS1=$(panel_hits user)
panel_ctl ws_send '{"event": "sync.user.delta", "data": {"action": "remove", "users": [{"id": 99}]}}'
pulled1() { [ "$(panel_hits user)" -gt "$PULLS1" ]; }
check "a delta that does not apply triggers a full pull" kt_until 3 pulled1
check "one clear error names it" test "$(grep -c 'removes user 99, not held' "$SRV_LOG")" = 1
stream_wait keep "$S1" 20 "user 1's session survived the drop and the bad delta"
kat_stop
check "katana exits 0" test "$SRV_RC" = 0
kt_finish
