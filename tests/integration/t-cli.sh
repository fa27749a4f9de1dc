#!/bin/bash
# The command line (katana(8) COMMANDS, docs/operations.md):
# - help: `katana --help` / `katana help` list every command with its summary (exit 0);
#   `katana help CMD` and `katana CMD --help` print the same help, starting with its usage;
# - usage errors exit 2 with nothing on stdout and, on stderr, what was wrong, then the usage:
#   an unknown command (with the nearest one), a missing -c FILE (naming the packaged
#   /etc/katana/config.json), an unknown option, an extra argument, a bad keygen kind,
#   cipher, length or key;
# - keygen: every kind's length and format, two runs differ, X25519 private keys clamped and
#   their public keys as OpenSSL derives them (and as `xray x25519 -i` prints when Xray-core is
#   built); a REALITY pair from `katana keygen x25519` configured in a local katana node carries
#   bytes for the real Xray-core client, and a client with another pair's public key gets none;
# - check: one line per node with its security (cipher, TLS, REALITY, transport), warnings on
#   stderr naming the pid and program that hold a node's TCP and UDP port or the API's, exit 0;
#   no warning for free ports, nor for the ports of a `katana run` of the same file.
KT_LIMIT=${KT_LIMIT:-180}
. "$(dirname "$0")/reality.sh"
needs_katana "katana's command line" || skip_all "needs katana"
kt_need openssl

BIN=$(katana_bin)
COMMANDS="run check import keygen version help"

# kat NAME ARGS...: run katana ARGS; stdout in $T/NAME.out, stderr in $T/NAME.err, exit code in
# RC.
kat() {
    local n=$1; shift
    RC=0
    timeout 20 "$BIN" "$@" >"$T/$n.out" 2>"$T/$n.err" || RC=$?
}

# --- help ------------------------------------------------------------------------------------
kat help-flag --help
check "katana --help exits 0" test "$RC" = 0
kat help-cmd help
check "katana help prints what katana --help prints" cmp -s "$T/help-flag.out" "$T/help-cmd.out"
for c in $COMMANDS; do
    check "katana --help lists $c with a summary" \
        grep -q -E "^  $c +[a-z].{10,}" "$T/help-flag.out"
    kat "help-$c" help "$c"
    check "katana help $c: exit 0, starts with its usage" \
        bash -c "[ $RC = 0 ] && head -n 1 '$T/help-$c.out' | grep -q '^usage: katana $c'"
    kat "flag-$c" "$c" --help
    check "katana $c --help: exit 0, prints what katana help $c prints" \
        bash -c "[ $RC = 0 ] && cmp -s '$T/help-$c.out' '$T/flag-$c.out'"
done
check "katana help check names --offline and -c FILE" \
    bash -c "grep -q -- '--offline' '$T/help-check.out' && grep -q -- '-c, --config FILE' '$T/help-check.out'"
check "katana help keygen names every kind" bash -c \
    "for k in x25519 reality short-id ss2022 wireguard uuid; do grep -q \"\$k\" '$T/help-keygen.out' || exit 1; done"
check "katana import --help keeps its synopsis" grep -q 'v2bx|xrayr|xboard-node FILE' \
    "$T/flag-import.out"
kat none
check "katana alone: exit 2, 'no command given' and the command list on stderr" \
    bash -c "[ $RC = 2 ] && grep -q '^katana: no command given' '$T/none.err' &&
             grep -q '^  keygen ' '$T/none.err' && [ ! -s '$T/none.out' ]"

# --- usage errors ------------------------------------------------------------------------------
# usage NAME FIRST-LINE USAGE-LINE ARGS...: katana ARGS exits 2, prints nothing on stdout, and
# its stderr is FIRST-LINE then USAGE-LINE (exact).
usage() {
    local n=$1 first=$2 use=$3; shift 3
    kat "$n" "$@"
    echo "katana $*: rc $RC: $(head -n 2 "$T/$n.err" | tr '\n' '|')"
    check "$n: exit 2, nothing on stdout" bash -c "[ $RC = 2 ] && [ ! -s '$T/$n.out' ]"
    check "$n: says '$first'" test "$(sed -n 1p "$T/$n.err")" = "$first"
    check "$n: then '$use'" test "$(sed -n 2p "$T/$n.err")" = "$use"
}
U_CHECK="usage: katana check [--offline] -c FILE"
U_RUN="usage: katana run -c FILE"
U_KEYGEN="usage: katana keygen x25519|reality [--private KEY]"
U_ANY="usage: katana COMMAND [ARG]..."
usage unknown-cmd "katana: unknown command 'chek' (did you mean 'check'?)" "$U_ANY" chek
usage unknown-far "katana: unknown command 'frobnicate'" "$U_ANY" frobnicate
usage unknown-top "katana: unknown option '--frob'" "$U_ANY" --frob
NO_C="-c FILE is required: katana reads no configuration file by default (the packages install /etc/katana/config.json)"
usage no-config "katana check: $NO_C" "$U_CHECK" check
usage no-config-off "katana check: $NO_C" "$U_CHECK" check --offline
usage run-no-config "katana run: $NO_C" "$U_RUN" run
usage run-option "katana run: unknown option '--foo'" "$U_RUN" run --foo -c x.json
usage run-offline "katana run: unknown option '--offline'" "$U_RUN" run --offline -c x.json
usage check-short "katana check: unknown option '-x'" "$U_CHECK" check -x -c x.json
usage check-value "katana check: option '-c' needs a value" "$U_CHECK" check -c
usage check-novalue "katana check: option '--offline' takes no value" "$U_CHECK" \
    check --offline=yes -c x.json
usage check-extra "katana check: unexpected argument 'more'" "$U_CHECK" check -c x.json more
usage version-extra "katana version: unexpected argument 'x'" "usage: katana version" version x
usage help-unknown "katana help: unknown command 'kegen' (did you mean 'keygen'?)" \
    "usage: katana help [COMMAND]" help kegen
usage keygen-none \
    "katana keygen: a KIND is required: x25519, reality, short-id, ss2022, wireguard or uuid" \
    "$U_KEYGEN" keygen
usage keygen-kind "katana keygen: unknown kind 'x25591' (did you mean 'x25519'?): expected x25519, reality, short-id, ss2022, wireguard or uuid" \
    "$U_KEYGEN" keygen x25591
usage keygen-cipher "katana keygen: unknown ss2022 cipher 'aes-128-gcm': expected 2022-blake3-aes-128-gcm, 2022-blake3-aes-256-gcm or 2022-blake3-chacha20-poly1305" \
    "$U_KEYGEN" keygen ss2022 aes-128-gcm
usage keygen-nocipher "katana keygen: ss2022 needs a CIPHER (2022-blake3-aes-128-gcm, 2022-blake3-aes-256-gcm or 2022-blake3-chacha20-poly1305)" \
    "$U_KEYGEN" keygen ss2022
usage keygen-len "katana keygen: --len '9': a short id is 1 to 8 bytes" "$U_KEYGEN" \
    keygen short-id --len 9
usage keygen-len0 "katana keygen: --len '0': a short id is 1 to 8 bytes" "$U_KEYGEN" \
    keygen short-id --len 0
usage keygen-key "katana keygen: --private: expected an X25519 private key, 43 base64url characters" \
    "$U_KEYGEN" keygen x25519 --private abc
usage keygen-extra "katana keygen: unexpected argument 'x'" "$U_KEYGEN" keygen uuid x
usage import-option "katana import: unknown option '--dbx'" \
    "usage: katana import [--db PATH] v2bx|xrayr|xboard-node FILE" import --dbx x xrayr f.yml

kat version version
check "katana version still prints 'katana VERSION'" \
    bash -c "[ $RC = 0 ] && grep -q -x -E 'katana [0-9][0-9a-z.~+-]*' '$T/version.out'"
kat version2 --version
check "katana --version prints the same" cmp -s "$T/version.out" "$T/version2.out"

# --- keygen ---------------------------------------------------------------------------------
# b64 ALPHABET TEXT: the decoded length of TEXT (url: base64url without padding; std: standard
# base64 with padding, the only form accepted), or "bad".
b64() {
    python3 - "$1" "$2" <<'PY'
import base64, binascii, re, sys
kind, text = sys.argv[1:]
try:
    if kind == "url":
        assert re.fullmatch(r"[A-Za-z0-9_-]+", text)
        print(len(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))))
    else:
        assert re.fullmatch(r"[A-Za-z0-9+/]+=*", text) and len(text) % 4 == 0
        print(len(base64.b64decode(text, validate=True)))
except (AssertionError, binascii.Error, ValueError):
    print("bad")
PY
}

# x25519_info ALPHABET PRIVATE: "clamped PUBLIC" or "unclamped PUBLIC": whether the key is
# clamped (RFC 7748 §5), and the public key OpenSSL derives from it, in the same alphabet (url:
# base64url without padding, std: standard base64).
x25519_info() {
    local clamp pub
    clamp=$(python3 - "$1" "$2" "$T/key.der" <<'PY'
import base64, sys
kind, text, der = sys.argv[1:]
k = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)) if kind == "url" else base64.b64decode(text)
open(der, "wb").write(bytes.fromhex("302e020100300506032b656e04220420") + k)
print("clamped" if k[0] & 7 == 0 and k[31] & 128 == 0 and k[31] & 64 else "unclamped")
PY
)
    pub=$(openssl pkey -inform DER -in "$T/key.der" -pubout -outform DER | tail -c 32 | base64 -w0)
    [ "$1" = url ] && pub=$(tr '+/' '-_' <<<"$pub" | tr -d '=')
    echo "$clamp $pub"
}

# clamp64 KEY: base64url KEY (32 bytes) clamped, base64url without padding.
clamp64() {
    python3 - "$1" <<'PY'
import base64, sys
k = bytearray(base64.urlsafe_b64decode(sys.argv[1] + "="))
k[0] &= 248; k[31] = (k[31] & 127) | 64
print(base64.urlsafe_b64encode(bytes(k)).rstrip(b"=").decode())
PY
}

# the REALITY pair, twice; field PREFIX FILE: the value after a line's "PREFIX...: "
field() { sed -n "s/^$1 .*: //p" "$2"; }
kat x1 keygen x25519
cat "$T/x1.out"
check "keygen x25519: exit 0, two lines, nothing on stderr" \
    bash -c "[ $RC = 0 ] && [ \$(wc -l <'$T/x1.out') = 2 ] && [ ! -s '$T/x1.err' ]"
kat x2 keygen reality
check "keygen reality: exit 0, two lines" bash -c "[ $RC = 0 ] && [ \$(wc -l <'$T/x2.out') = 2 ]"
check "keygen x25519: labels for the server and the clients" bash -c \
    "grep -q '^private_key (server, katana config): ' '$T/x1.out' &&
     grep -q '^public_key (clients: Xray publicKey/password, sing-box public_key): ' '$T/x1.out'"
PRIV=$(field private_key "$T/x1.out"); PUB=$(field public_key "$T/x1.out")
PRIV2=$(field private_key "$T/x2.out"); PUB2=$(field public_key "$T/x2.out")
check "keygen x25519: both keys are 43 base64url characters of 32 bytes" bash -c \
    "[ \${#1} = 43 ] && [ \${#2} = 43 ] && [ '$(b64 url "$PRIV")' = 32 ] && [ '$(b64 url "$PUB")' = 32 ]" \
    _ "$PRIV" "$PUB"
check "keygen reality (alias): the same format" \
    bash -c "[ '$(b64 url "$PRIV2")' = 32 ] && [ '$(b64 url "$PUB2")' = 32 ]"
check "keygen x25519: two runs give two different pairs" \
    bash -c "[ '$PRIV' != '$PRIV2' ] && [ '$PUB' != '$PUB2' ]"
check "keygen x25519: the private key is clamped, the public key is OpenSSL's X25519 of it" \
    test "$(x25519_info url "$PRIV")" = "clamped $PUB"
kat derive keygen x25519 --private "$PRIV"
check "keygen x25519 --private gives the same pair" \
    bash -c "[ $RC = 0 ] && [ -s '$T/derive.out' ] && cmp -s '$T/x1.out' '$T/derive.out'"
kat derive-i keygen x25519 -i "$PRIV2="
check "keygen x25519 -i KEY= (padded) gives the same pair" \
    bash -c "[ $RC = 0 ] && [ -s '$T/derive-i.out' ] && cmp -s '$T/x2.out' '$T/derive-i.out'"
RAW=$(head -c 32 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=')
kat derive-raw keygen x25519 --private "$RAW"
RAW_PRIV=$(field private_key "$T/derive-raw.out"); RAW_PUB=$(field public_key "$T/derive-raw.out")
check "keygen x25519 --private of an unclamped key prints it clamped" \
    test "$RAW_PRIV" = "$(clamp64 "$RAW")"
check "keygen x25519 --private of an unclamped key: its public key is OpenSSL's" \
    test "$(x25519_info url "$RAW" | cut -d' ' -f2)" = "$RAW_PUB"
if pr_current xray; then
    xray_pub=$("$PEERS_DIR/bin/xray" x25519 -i "$RAW" | sed -n 's/^\(Password[^:]*\|PublicKey\): //p')
    xray_priv=$("$PEERS_DIR/bin/xray" x25519 -i "$RAW" | sed -n 's/^PrivateKey: //p')
    echo "xray x25519 -i: PrivateKey $xray_priv, public $xray_pub"
    check "xray x25519 -i KEY prints katana's private and public key" test \
        "$xray_priv $xray_pub" = "$RAW_PRIV $RAW_PUB"
else
    echo "SKIP: $KT_NAME: xray x25519 -i comparison: Xray-core is not built in $PEERS_DIR/bin"
fi

kat s1 keygen short-id; kat s2 keygen short-id
check "keygen short-id: 16 lowercase hex digits (8 bytes)" grep -q -x -E '[0-9a-f]{16}' "$T/s1.out"
check "keygen short-id: two runs differ" bash -c "! cmp -s '$T/s1.out' '$T/s2.out'"
for n in 1 4 8; do
    kat "sl$n" keygen short-id --len "$n"
    check "keygen short-id --len $n: $((2 * n)) hex digits" \
        grep -q -x -E "[0-9a-f]{$((2 * n))}" "$T/sl$n.out"
done

for c in 2022-blake3-aes-128-gcm:16 2022-blake3-aes-256-gcm:32 2022-blake3-chacha20-poly1305:32; do
    kat k1 keygen ss2022 "${c%:*}"; kat k2 keygen ss2022 "${c%:*}"
    check "keygen ss2022 ${c%:*}: standard base64 of ${c#*:} bytes" \
        test "$(b64 std "$(cat "$T/k1.out")")" = "${c#*:}"
    check "keygen ss2022 ${c%:*}: two runs differ" bash -c "! cmp -s '$T/k1.out' '$T/k2.out'"
done

kat w1 keygen wireguard; kat w2 keygen wireguard
WPRIV=$(sed -n 's/^private_key: //p' "$T/w1.out"); WPUB=$(sed -n 's/^public_key: //p' "$T/w1.out")
check "keygen wireguard: private_key and public_key lines, 44 characters of standard base64" \
    bash -c "[ \$(wc -l <'$T/w1.out') = 2 ] && [ \${#1} = 44 ] && [ \${#2} = 44 ] &&
             [ '$(b64 std "$WPRIV")' = 32 ] && [ '$(b64 std "$WPUB")' = 32 ]" _ "$WPRIV" "$WPUB"
check "keygen wireguard: private key clamped, public key OpenSSL's X25519 of it" \
    test "$(x25519_info std "$WPRIV")" = "clamped $WPUB"
check "keygen wireguard: two runs differ" bash -c "! cmp -s '$T/w1.out' '$T/w2.out'"

kat u1 keygen uuid; kat u2 keygen uuid
check "keygen uuid: a version 4 UUID (variant 10)" grep -q -x -E \
    '[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}' "$T/u1.out"
check "keygen uuid: two runs differ" bash -c "! cmp -s '$T/u1.out' '$T/u2.out'"

# --- check: node lines and ports held ---------------------------------------------------------
U1=$(kt_uuid)
echo_start            # TCP and UDP on ECHO_PORT (127.0.0.1, 127.0.0.2, ::1): the holder
ECHO_PID=$BG_PID
kt_ports 3; P_FREE=${PORTS[0]} API_FREE=${PORTS[1]} P_TLS=${PORTS[2]}

mkconfig "$T/free.json" "$P_FREE" aes-128-gcm --user "1:$U1" --api-port "$API_FREE"
kat free check -c "$T/free.json"
cat "$T/free.out" "$T/free.err"
check "check, free ports: exit 0, the node line names the cipher, Configuration OK." bash -c \
    "[ $RC = 0 ] && grep -q -x 'node t1: shadowsocks on port $P_FREE, 1 user, aes-128-gcm' '$T/free.out' &&
     [ \"\$(tail -n 1 '$T/free.out')\" = 'Configuration OK.' ]"
check "check, free ports: no warning" test ! -s "$T/free.err"

mkconfig "$T/held.json" "$ECHO_PORT" aes-256-gcm --user "1:$U1" --api-port "$API_FREE"
kat held check -c "$T/held.json"
cat "$T/held.out" "$T/held.err"
check "check, node port held: still exit 0 and Configuration OK." \
    bash -c "[ $RC = 0 ] && grep -q -x 'Configuration OK.' '$T/held.out'"
check "check, node port held: a TCP warning naming pid $ECHO_PID and its program" grep -q -x -E \
    "warning: node t1: listen 127\.0\.0\.1:$ECHO_PORT \(TCP\): the port is held by pid $ECHO_PID \(python3[^)]*\)" \
    "$T/held.err"
check "check, node port held: a UDP warning too (a Shadowsocks node serves UDP)" grep -q -E \
    "^warning: node t1: listen 127\.0\.0\.1:$ECHO_PORT \(UDP\): the port is held by pid $ECHO_PID " \
    "$T/held.err"

mkconfig "$T/api-held.json" "$P_FREE" aes-256-gcm --user "1:$U1" --api-port "$ECHO_PORT"
kat api-held check --offline -c "$T/api-held.json"
cat "$T/api-held.err"
check "check --offline, API port held: exit 0, a warning naming pid $ECHO_PID" bash -c \
    "[ $RC = 0 ] && grep -q -E '^warning: api\.listen 127\.0\.0\.1:$ECHO_PORT \(TCP\): the port is held by pid $ECHO_PID ' '$T/api-held.err' &&
     [ \$(wc -l <'$T/api-held.err') = 1 ]"

# security of other node kinds
mkconfig "$T/trojan.json" "$P_TLS" aes-256-gcm --user "1:$U1" --api-port "$API_FREE" \
    --protocol trojan --cert-self
mkconfig "$T/vless-ws.json" "$P_TLS" aes-256-gcm --user "1:$U1" --api-port "$API_FREE" \
    --protocol vless --ws-path /ws
mkconfig "$T/vmess-grpc.json" "$P_TLS" aes-256-gcm --user "1:$U1" --api-port "$API_FREE" \
    --protocol vmess --grpc-service svc
mkconfig "$T/ss22.json" "$P_TLS" 2022-blake3-aes-256-gcm --user "1:$U1" --api-port "$API_FREE" \
    --server-key "$(cat "$T/k1.out")"
for c in "trojan:trojan on port $P_TLS, 1 user, TLS" \
         "vless-ws:vless on port $P_TLS, 1 user, no TLS, WebSocket" \
         "vmess-grpc:vmess on port $P_TLS, 1 user, no TLS, gRPC" \
         "ss22:shadowsocks on port $P_TLS, 1 user, 2022-blake3-aes-256-gcm"; do
    kat "${c%%:*}" check -c "$T/${c%%:*}.json"
    cat "$T/${c%%:*}.out" "$T/${c%%:*}.err"
    check "check ${c%%:*}: 'node t1: ${c#*:}'" \
        bash -c "[ $RC = 0 ] && grep -q -x 'node t1: ${c#*:}' '$T/${c%%:*}.out'"
done

# the ports of a running katana: not for a check of its own file (a reload's), named otherwise
srv_start "$T/free.json"
kat own check -c "$T/free.json"
cat "$T/own.err"
check "check of the running katana's own file: exit 0, no warning" \
    bash -c "[ $RC = 0 ] && [ ! -s '$T/own.err' ]"
cp "$T/free.json" "$T/copy.json"
kat copy check -c "$T/copy.json"
cat "$T/copy.err"
check "check of a copy: the API and node ports are held by pid $SRV_PID (katana)" bash -c \
    "[ $RC = 0 ] && grep -q -x 'warning: api.listen 127.0.0.1:$API_FREE (TCP): the port is held by pid $SRV_PID (katana)' '$T/copy.err' &&
     grep -q -x 'warning: node t1: listen 127.0.0.1:$P_FREE (TCP): the port is held by pid $SRV_PID (katana)' '$T/copy.err'"
srv_stop
check "the katana run stops cleanly" test "$SRV_RC" = 0

# --- a REALITY pair from keygen, with the real Xray-core client -------------------------------
if ! pr_current xray; then
    echo "SKIP: $KT_NAME: REALITY with Xray-core: xray is not built in $PEERS_DIR/bin (tests/setup-deps.sh)"
    kt_finish
fi
SID=$(cat "$T/sl4.out")
rl_target "keygen reality target $$"
cat >"$T/reality.json" <<JSON
{"log": {"level": "info"}, "workers": 1, "api": {"listen": "127.0.0.1:$API_PORT"},
 "nodes": [{"tag": "rl", "listen": "127.0.0.1", "allow_private": true,
            "panel": {"type": "local", "node_type": "vless",
                      "node": {"server_port": $NODE_PORT, "tls": 2, "network": "tcp",
                               "tls_settings": {"server_name": "localhost",
                                                "server_port": $TARGET_PORT,
                                                "private_key": "$PRIV", "short_id": "$SID"}},
                      "users": {"users": [{"id": 1, "uuid": "$U1"}]}}}]}
JSON
kat reality check -c "$T/reality.json"
cat "$T/reality.out" "$T/reality.err"
check "check of the REALITY node: 'node rl: vless on port $NODE_PORT, 1 user, REALITY'" \
    bash -c "[ $RC = 0 ] && grep -q -x 'node rl: vless on port $NODE_PORT, 1 user, REALITY' '$T/reality.out'"
SRV_LOG=$T/reality-server.log
kt_bg reality-server "$BIN" run -c "$T/reality.json"
SRV_PID=$BG_PID
kt_wait_port "$NODE_PORT" 10 || { fail "katana did not listen on $NODE_PORT"; exit 1; }
rl_client xray vless-reality good "$U1" "$PUB" "$SID"; GOOD=$CL_PORT
rl_client xray vless-reality other "$U1" "$PUB2" "$SID"; OTHER=$CL_PORT
check "Xray-core with keygen's public key: 256 KiB each way through katana, echo identical" \
    tcp_rt "$GOOD" ok --bytes 262144 --seed keygen
c0=$(target_count)
check "Xray-core with another pair's public key: no echo" tcp_rt "$OTHER" refused --bytes 4096
check "... its handshake went to the target as a probe's" test "$(target_count)" -gt "$c0"
check "katana still runs" kt_alive "$SRV_PID"
kt_finish
