#!/bin/bash
# t-installed.sh: the installed package's binary (/usr/bin/katana, or KATANA_BIN) run the way
# katana.service runs it: as the `katana` system user, no capabilities, against a demo config
# on a free loopback port. Called by tests/packaging/check.sh after `dpkg -i`.
#  - `katana check` accepts the config, as the katana user;
#  - a real ss-local moves data (TCP and UDP) through it;
#  - SIGHUP: a valid reload (a new user, shutdown_grace 60 -> 2) is applied and a stream open
#    across it gets every byte back; a broken config (a syntax error right after a password)
#    is refused, the daemon keeps serving, and the password is not in the log;
#  - SIGTERM with a live connection: exit status 0 within the reloaded shutdown_grace (2 s)
#    plus a margin, so the reload applied the new grace;
#  - the log holds no user password and no API token.
# Needs root (to switch to the katana user with setpriv). Exit 0 pass, 1 fail, 77 skip.
KT_LIMIT=${KT_LIMIT:-120}
. "$(dirname "$0")/../integration/lib.sh"
KT_PY=(python3 "$(cd "$(dirname "$0")/../integration" && pwd)/katest.py")
kt_need ss-local setpriv python3

INSTALLED=${KATANA_INSTALLED_BIN:-/usr/bin/katana}
[ -x "$INSTALLED" ] || skip_all "$INSTALLED is not installed"
[ "$(id -u)" = 0 ] || skip_all "needs root to run katana as the katana user"
id katana >/dev/null 2>&1 || { fail "the package did not create the katana user"; kt_finish; }

# The service's user, groups and (no) capabilities; setpriv execs, so the pid is katana's.
chmod 755 "$T"
cat >"$T/katana-as-user" <<SH
#!/bin/sh
exec setpriv --reuid=katana --regid=katana --init-groups --inh-caps=-all \
    --bounding-set=-all -- "$INSTALLED" "\$@"
SH
chmod 755 "$T/katana-as-user"
export KATANA_BIN=$T/katana-as-user
GRACE=60   # the start's shutdown_grace; the first reload lowers it to 2 s

# mkconfig + shutdown_grace, readable by the katana user
mkcfg() {
    mkconfig "$T/config.json" "$PORT" "$CIPHER" "$@"
    python3 - "$T/config.json" "$GRACE" "$API_PORT" "$API_TOKEN" <<'PY'
import json, sys
p = sys.argv[1]; c = json.load(open(p)); c["shutdown_grace"] = int(sys.argv[2])
c["api"] = {"listen": "127.0.0.1:" + sys.argv[3], "token": sys.argv[4]}
json.dump(c, open(p, "w"), indent=2)
PY
    chmod 644 "$T/config.json"
}

CIPHER=aes-256-gcm
U1=$(kt_uuid); U2=$(kt_uuid)
echo_start
kt_ports 2; PORT=${PORTS[0]}; API_PORT=${PORTS[1]}
API_TOKEN=token-$(kt_uuid)
mkcfg --user "1:$U1"
check "katana check accepts the demo config (as the katana user)" \
    "$KATANA_BIN" check -c "$T/config.json"

srv_start "$T/config.json"
check "the daemon runs as the katana user" test "$(stat -c %U "/proc/$SRV_PID")" = katana
cl_start u1 "$CIPHER" "$U1" "$PORT"; C1=$CL_PORT
check "TCP through the installed binary: 1 MiB echoed identical" \
    tcp_rt "$C1" ok --bytes 1048576 --seed inst1
check "UDP through the installed binary" udp_rt "$C1" ok --count 5

# SIGHUP with a valid change (a second user) while a stream is open
stream_bg live "$C1" 196608 65536 ok; LIVE=$STREAM_PID
GRACE=2
mkcfg --user "1:$U1" --user "2:$U2"
srv_reload
check "SIGHUP: reload applied (no refusal logged)" reload_applied
check "SIGHUP: \"config reloaded\" logged" grep -q "config reloaded" <<<"$SRV_RELOAD_LOG"
cl_start u2 "$CIPHER" "$U2" "$PORT"; C2=$CL_PORT
check "after SIGHUP: the added user is served" tcp_rt "$C2" ok --bytes 65536 --seed inst2
stream_wait live "$LIVE" 20 "a stream open across SIGHUP gets every byte back"

# SIGHUP with a broken file: jansson would quote the password next to the error
cp "$T/config.json" "$T/config.good"
sed -i "s/\"uuid\": \"$U2\"/\"uuid\" \"$U2\"/" "$T/config.json"
check "the broken file really is broken" bash -c "! grep -q '\"uuid\": \"$U2\"' '$T/config.json'"
srv_reload
check "SIGHUP with a broken file: refused and logged" grep -q "reload refused" <<<"$SRV_RELOAD_LOG"
check "SIGHUP with a broken file: the daemon still runs" srv_alive
check "after a refused reload: still serving" tcp_rt "$C1" ok --bytes 65536 --seed inst3
cp "$T/config.good" "$T/config.json"

# SIGTERM with a live connection: exit 0 within the grace (plus a margin for the close)
stream_bg doomed "$C1" 1048576 32768 cut; DOOMED=$STREAM_PID
kill -TERM "$SRV_PID"
if kt_wait_exit "$SRV_PID" $((GRACE + 5)); then
    check "SIGTERM: exit status 0 (got $WAIT_RC)" test "$WAIT_RC" = 0
else
    fail "SIGTERM: still running $((GRACE + 5)) s after the signal (shutdown_grace $GRACE)"
fi
stream_wait doomed "$DOOMED" 10 "the live connection was closed by the shutdown"
check "SIGTERM: the final usage was logged" grep -q "usage user 1: " "$SRV_LOG"

for u in "$U1" "$U2" "$API_TOKEN"; do
    check "no password or token in the log" bash -c "! grep -q -F '$u' '$SRV_LOG'"
done
kt_finish
