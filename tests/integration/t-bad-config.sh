#!/bin/bash
# Bad configs: malformed JSON, a truncated file, unknown keys, a wrong type, an empty or
# missing file -> `katana check` exits 1 with "configuration invalid: ..." and `katana run`
# exits non-zero at start without listening. A good config checks OK (control).
. "$(dirname "$0")/lib.sh"
needs_katana "katana check / run on bad configs" || exit 77

KATANA=$(katana_bin)
[ -x "$KATANA" ] || { fail "katana binary not found at $KATANA"; exit 1; }
kt_ports 1; PORT=${PORTS[0]}
mkconfig "$T/good.json" "$PORT" aes-256-gcm --user "1:$(kt_uuid)"

out=$(timeout 10 "$KATANA" check -c "$T/good.json" 2>&1) && rc=0 || rc=$?
echo "good: rc $rc: $out"
check "good config: katana check prints Configuration OK. and exits 0" \
    bash -c "[ $rc = 0 ] && grep -q 'Configuration OK.' <<<'$out'"

# variants of the good config
head -c 40 "$T/good.json" >"$T/truncated.json"
printf '{"log": {"level": "info"}, "nodes": [ {"tag": "t1",, }' >"$T/malformed.json"
: >"$T/empty.json"
printf '\x00\xff\xfe garbage \x01' >"$T/binary.json"
python3 - "$T" <<'PY'
import json, sys
d = sys.argv[1]
good = json.load(open(d + "/good.json"))
def variant(name, edit):
    c = json.loads(json.dumps(good)); edit(c)
    json.dump(c, open("%s/%s.json" % (d, name), "w"))
variant("unknown-top", lambda c: c.update(bogus_key=1))
variant("unknown-node", lambda c: c["nodes"][0].update(listne="127.0.0.1"))
variant("unknown-panel-node", lambda c: c["nodes"][0]["panel"]["node"].update(srever_port=1))
variant("wrong-type", lambda c: c["nodes"][0]["panel"]["node"].update(server_port="many"))
variant("bad-port", lambda c: c["nodes"][0]["panel"]["node"].update(server_port=70000))
variant("bad-cipher", lambda c: c["nodes"][0]["panel"]["node"].update(cipher="rot13"))
variant("no-nodes", lambda c: c.update(nodes=[]))
PY

for name in truncated malformed empty binary unknown-top unknown-node unknown-panel-node \
            wrong-type bad-port bad-cipher no-nodes missing; do
    f=$T/$name.json
    out=$(timeout 10 "$KATANA" check -c "$f" 2>&1) && rc=0 || rc=$?
    echo "$name: check rc $rc: $out"
    check "$name: katana check exits 1" test "$rc" = 1
    check "$name: katana check says 'configuration invalid: ...'" \
        grep -q "configuration invalid: ." <<<"$out"
    rc=0
    timeout 10 "$KATANA" run -c "$f" >"$T/run-$name.log" 2>&1 || rc=$?
    echo "$name: run rc $rc: $(head -c 300 "$T/run-$name.log")"
    check "$name: katana run exits non-zero at start (not by timeout)" \
        bash -c "[ $rc != 0 ] && [ $rc != 124 ] && [ $rc -lt 128 ]"
done
if "${KT_PY[@]}" wait-port --port "$PORT" --timeout 0.2 >/dev/null 2>&1; then
    fail "something listens on the config's port after the failed starts"
else
    pass "nothing was left listening"
fi
kt_finish
