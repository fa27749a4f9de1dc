#!/bin/bash
# t-docs-examples.sh: every fenced block of README.md, docs/**/*.md and packaging/examples/*.md
# carries a decision (an <!-- example: KIND --> line before it, tests/docs/docex.py,
# docs/testing.md "Examples in the documentation"), and the runnable ones run:
#  - config blocks (a whole file, top-level members, nodes, node members, node bodies; wrapped
#    into a whole config as docex.py says) pass `katana check --offline`, with the host paths
#    and addresses they name substituted as declared below (certificate files they name are
#    made, self-signed);
#  - shell blocks run under bash -euo pipefail, each in a directory of its own, against a real
#    katana started here (a local node "demo", the REST API with a token on a free port), with
#    the substitutions declared below; `curl` is a function that fails on an HTTP status that
#    is not 2xx unless the command's comment names that status (an SSE stream, -N, is read
#    for 2 s), and the daemon must still run after each block;
#  - output blocks that are JSON parse;
#  - every relative link of those files names a file of the source tree (none points outside
#    it, e.g. into ../shared/) and a #fragment into a Markdown file one of its headings.
# A block without a decision fails the test, so a new block in the docs needs one.
KT_LIMIT=${KT_LIMIT:-120}
. "$(dirname "$0")/../integration/lib.sh"
KT_PY=(python3 "$(cd "$(dirname "$0")/../integration" && pwd)/katest.py")
kt_need curl openssl jq
[ "$KT_SERVER" = katana ] || skip_all "the docs' examples need katana"
TOP=${KATANA_TOP_SRCDIR:-$(cd "$KT_DIR/../.." && pwd)}
BUILD=${KATANA_TOP_BUILDDIR:-$TOP/build}
KATANA=$(katana_bin)
[ -x "$KATANA" ] || { fail "katana binary not found at $KATANA"; exit 1; }
DOCEX=(python3 "$TOP/tests/docs/docex.py")

cd "$TOP"
mapfile -t DOCS < <({ echo README.md; find docs packaging/examples -name '*.md'; } | sort -u)
cd - >/dev/null
kt_log "documents: ${DOCS[*]}"

# --- the host the docs assume, made in $T/host --------------------------------------------
HOST=$T/host
mkdir -p "$HOST/etc/katana" "$HOST/var/lib/katana" "$T/bin" "$T/man/man5" "$T/man/man8"
printf '#!/bin/sh\nexec "%s" "$@"\n' "$KATANA" >"$T/bin/katana"
chmod +x "$T/bin/katana"
cp "$BUILD/katana.json.5" "$T/man/man5/" 2>/dev/null || true
cp "$BUILD/katana.8" "$T/man/man8/" 2>/dev/null || true

# Substitutions, applied to a block's text before it is checked or run (FROM<TAB>TO).
# Config blocks and example files: the packaged host's directories become the test's; "{...}"
# (a panel left out) is a local Shadowsocks panel; the outbound policy's documentation
# addresses and interface become loopback's; the packaged config's token placeholder a token.
LOCAL_PANEL='{"type": "local", "node": {"server_port": 18388, "cipher": "aes-256-gcm"}, "users": {"users": [{"id": 1, "uuid": "3b5e2c1a-7d4f-4e8b-9a61-2f0c8d9e7b11"}]}}'
{
    printf '%s\t%s\n' /var/lib/katana/ "$HOST/var/lib/katana/" /etc/katana/ "$HOST/etc/katana/" \
        '{...}' "$LOCAL_PANEL" '"192.0.2.7"' '"127.0.0.1"' '"2001:db8::7"' '"::1"' \
        '"eth1"' '"lo"' '"@KATANA_API_TOKEN@"' '"doc-example-token"'
    # SO_MARK needs CAP_NET_ADMIN: without it the mark is left out (katana check refuses it)
    if ! grep -q -E '^CapEff:.*[1-9a-f]' /proc/self/status || [ "$(id -u)" != 0 ]; then
        printf '%s\t%s\n' '"mark": 7, ' ''
    fi
} >"$T/subst-config"
# Shell blocks: the REST API of the daemon started here, its token, the V2bX file of
# tests/integration/import, `katana import` writing the database path of the test's host,
# `systemctl reload katana` as the SIGHUP it sends, a build tree's man page in this build.
TOKEN=doc-token-$$-$RANDOM
kt_ports 2; NODE_PORT=${PORTS[0]} API_PORT=${PORTS[1]}
printf '%s\t%s\n' 127.0.0.1:9090 "127.0.0.1:$API_PORT" \
    'Bearer a-long-random-string' "Bearer $TOKEN" 'Bearer change-me' "Bearer $TOKEN" \
    /etc/V2bX/config.json "$TOP/tests/integration/import/v2bx.json" \
    'katana import v2bx' "katana import --db $HOST/var/lib/katana/katana.db v2bx" \
    /etc/katana/ "$HOST/etc/katana/" /var/lib/katana/ "$HOST/var/lib/katana/" \
    'systemctl reload katana' 'kill -HUP "$DOC_PID"' \
    'man -l build/' "man -l $BUILD/" >"$T/subst-shell"
kt_log "substitutions in config blocks:"; sed 's/^/    /' "$T/subst-config"
kt_log "substitutions in shell blocks:"; sed 's/^/    /' "$T/subst-shell"

# --- the daemon the shell blocks talk to ------------------------------------------------
cat >"$T/daemon.json" <<JSON
{"log": {"level": "info"}, "workers": 1, "shutdown_grace": 1,
 "api": {"listen": "127.0.0.1:$API_PORT", "token": "$TOKEN"},
 "nodes": [{"tag": "demo", "listen": "127.0.0.1",
            "panel": {"type": "local", "node_type": "shadowsocks",
                      "node": {"server_port": $NODE_PORT, "cipher": "aes-256-gcm"},
                      "users": {"users": [{"id": 1, "uuid": "$(kt_uuid)"},
                                          {"id": 3, "uuid": "$(kt_uuid)"}]}}}]}
JSON
srv_start "$T/daemon.json"
DOC_PID=$SRV_PID
kt_wait_port "$API_PORT" 10 || { fail "API did not listen on $API_PORT"; exit 1; }
check "the daemon's /healthz answers 200" kt_until 10 curl -sf "http://127.0.0.1:$API_PORT/healthz"

# --- the blocks ---------------------------------------------------------------------------
export T DOC_PID TOKEN
mkdir -p "$T/blocks"
if (cd "$TOP" && "${DOCEX[@]}" prepare --root . --out "$T/blocks" \
        --subst-config "$T/subst-config" --subst-shell "$T/subst-shell" "${DOCS[@]}") \
        2>"$T/prepare.err"; then
    pass "every block of the docs carries a decision; configs are JSON, JSON output parses"
else
    fail "docex.py prepare:"; cat "$T/prepare.err"
fi

if out=$(cd "$TOP" && "${DOCEX[@]}" links --root . "${DOCS[@]}" 2>&1); then
    pass "every relative link of the docs names a file of the tree and an existing heading"
else
    fail "bad links in the docs:"; sed 's/^/    /' <<<"$out"
fi

# The prelude of every shell block: katana of this build on PATH, man pages of this build,
# doc_line (where we are, and the HTTP statuses the command's comment names) and curl.
cat >"$T/prelude.sh" <<'SH'
set -euo pipefail
PATH=$T/bin:$PATH
export MANPATH=$T/man MANPAGER=cat PAGER=cat MANWIDTH=100
DOC_WHERE= DOC_STATUS=
doc_line() { DOC_WHERE=$1 DOC_STATUS=$2; echo "+ $DOC_WHERE"; }
curl() {
    local a sse=0 max=10 code rc=0 body
    for a in "$@"; do [ "$a" = -N ] && sse=1; done
    [ "$sse" = 1 ] && max=2
    body=$(mktemp "$T/curl.XXXXXX")
    code=$(command curl -sS -m "$max" -o "$body" -w '%{http_code}' "$@") || rc=$?
    head -c 2000 "$body"; echo
    if [ "$sse" = 1 ] && [ "$rc" = 28 ] && [ "$code" = 200 ] && [ -s "$body" ]; then rc=0; fi
    rm -f "$body"
    [ "$rc" = 0 ] || { echo "doc: $DOC_WHERE: curl exited $rc"; return 1; }
    [[ $code == 2?? || " $DOC_STATUS " == *" $code "* ]] && return 0
    echo "doc: $DOC_WHERE: HTTP $code, expected 2xx${DOC_STATUS:+ or one of $DOC_STATUS}"
    return 1
}
SH

declare -A KINDS=()
while IFS=$'\t' read -r n kind where arg; do
    KINDS[$kind]=$((${KINDS[$kind]:-0} + 1))
    case $kind in
        config | config-member | node | node-member | node-body)
            if out=$("$KATANA" check --offline -c "$T/blocks/$n.json" 2>&1); then
                pass "$where: $kind${arg:+ $arg}: katana check --offline: $(tail -n 1 <<<"$out")"
            else
                fail "$where: $kind${arg:+ $arg}: katana check --offline: $out"
                sed 's/^/    /' "$T/blocks/$n.json"
            fi ;;
        shell)
            mkdir -p "$T/run-$n"
            if (cd "$T/run-$n" && timeout 60 bash -c ". '$T/prelude.sh'; . '$T/blocks/$n.sh'") \
                    >"$T/run-$n.out" 2>&1; then
                pass "$where: shell block ran"
            else
                fail "$where: shell block failed:"; sed 's/^/    /' "$T/run-$n.out"
            fi
            check "$where: the daemon still runs after the block" kt_alive "$DOC_PID" ;;
        output | not-runnable) ;;
    esac
done <"$T/blocks/index.tsv"

# --- packaging/examples: every server passes katana check --offline, every client its own ---
for f in "$TOP"/packaging/examples/*.json "$TOP"/packaging/examples/nodes/*.json; do
    name=${f#"$TOP"/}
    python3 "$TOP/tests/docs/docex.py" file --out "$T/ex.json" --subst-config "$T/subst-config" "$f" ||
        { fail "$name: docex.py file"; continue; }
    if out=$("$KATANA" check --offline -c "$T/ex.json" 2>&1); then
        pass "$name: katana check --offline: $(tail -n 1 <<<"$out")"
    else
        fail "$name: katana check --offline: $out"
    fi
done
PEERS=${KATANA_PEERS:-/var/cache/katana-peers}/bin
for vendor in xray sing-box; do
    [ -x "$PEERS/$vendor" ] || { echo "SKIP: $KT_NAME: $PEERS/$vendor is missing: clients/$vendor/ not checked"; continue; }
    for f in "$TOP"/packaging/examples/clients/$vendor/*.json; do
        name=${f#"$TOP"/}
        [ -e "$TOP/packaging/examples/nodes/$(basename "$f")" ] ||
            fail "$name: no server example of the same name in packaging/examples/nodes/"
        if [ "$vendor" = xray ]; then cmd=("$PEERS/xray" run -test -c "$f")
        else cmd=("$PEERS/sing-box" check -c "$f"); fi
        if out=$("${cmd[@]}" 2>&1); then pass "$name: $vendor accepts it"
        else fail "$name: $vendor refuses it: $out"; fi
    done
done

summary=
for kind in config config-member node node-member node-body shell output not-runnable; do
    summary+=" $kind ${KINDS[$kind]:-0},"
done
kt_log "blocks:${summary%,}"
check "some shell blocks ran" test "${KINDS[shell]:-0}" -gt 0
check "some config blocks were checked" test "${KINDS[config]:-0}" -gt 0
awk -F'\t' '$2 == "not-runnable" { print "  not run: " $3 ": " $4 }' "$T/blocks/index.tsv"
kt_finish
