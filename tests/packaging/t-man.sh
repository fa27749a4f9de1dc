#!/bin/bash
# t-man.sh: katana(8) documents every command and katana.json(5) explains every configuration
# key the parser accepts, and both generated man pages are clean roff.
#  - commands: every command of the command table (each `const ag_cli_cmd ag_cli_X` of agent/*.c,
#    its `.name`) has a ": `NAME" term in the COMMANDS section of the katana page and a
#    "**katana NAME**" line in its SYNOPSIS; every kind of `katana keygen` (the `kinds[]` table of
#    agent/keygen.c) has a ": `keygen KIND" term or is named in one (": `keygen x25519`|`reality`");
#  - keys: every string in a `keys[] = {...}` list and every json_object_get(..., "key") of
#    agent/agent_config.c must appear as a path component (`a.key`, `key`, `x[].key`) in a ": term"
#    line of the katana.json page of packaging/man/katana.man.md;
#  - roff: groff -ww reports no warning for katana.8 and katana.json.5 (from the build tree).
# Exit: 0 pass, 1 fail, 77 skip (no groff).
set -euo pipefail
SRC=${KATANA_TOP_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
BLD=${KATANA_TOP_BUILDDIR:-$SRC}
MAN_MD=$SRC/packaging/man/katana.man.md
fails=0

# section NAME: the lines of section NAME ("# NAME") of the katana(8) page.
section() {
    awk -v want="# $1" '/^%page /{ p = ($2 == "katana") } p && /^# /{ s = ($0 == want) }
                        p && s' "$MAN_MD"
}
commands=$(awk '/^const ag_cli_cmd ag_cli_/ { want = 1 }
                want && match($0, /\.name = "[a-z0-9-]+"/) {
                    print substr($0, RSTART + 9, RLENGTH - 10); want = 0 }' "$SRC"/agent/*.c)
[ -n "$commands" ] || { echo "FAIL: t-man: no command table found in agent/*.c"; exit 1; }
cmd_terms=$(section COMMANDS | grep '^: ')
synopsis=$(section SYNOPSIS)
for c in $commands; do
    if grep -q "^: \`$c[\` ]" <<<"$cmd_terms" && grep -q "^\*\*katana $c\*\*" <<<"$synopsis"; then
        echo "PASS: t-man: command $c is in katana(8) SYNOPSIS and COMMANDS"
    else
        echo "FAIL: t-man: command $c (agent/*.c) has no SYNOPSIS line or COMMANDS entry in katana(8) ($MAN_MD)"
        fails=$((fails + 1))
    fi
done
kinds=$(sed -n '/^static const keygen_kind kinds\[\]/,/^};/p' "$SRC/agent/keygen.c" |
        grep -o '{"[a-z0-9-]*"' | tr -d '{"')
[ -n "$kinds" ] || { echo "FAIL: t-man: no keygen kinds found in agent/keygen.c"; exit 1; }
for k in $kinds; do
    if grep -q -E "^: \`keygen ([a-z0-9-]+\`\|\`)*$k\`" <<<"$cmd_terms"; then
        echo "PASS: t-man: keygen $k is in katana(8) COMMANDS"
    else
        echo "FAIL: t-man: keygen $k (agent/keygen.c) has no COMMANDS entry in katana(8) ($MAN_MD)"
        fails=$((fails + 1))
    fi
done

keys=$( { grep -E 'keys\[\] *= *\{' -A3 "$SRC/agent/agent_config.c" |
          sed -n '/keys\[\]/,/NULL/p' | grep -o '"[a-z_]*"' ;
        grep -o 'json_object_get([^,]*, *"[a-z_]*")' "$SRC/agent/agent_config.c" |
          grep -o '"[a-z_]*"' ; } | tr -d '"' | sort -u)
[ -n "$keys" ] || { echo "FAIL: t-man: no keys found in agent/agent_config.c"; exit 1; }

terms=$(awk '/^%page /{ p = ($2 == "katana.json") } p && /^: /' "$MAN_MD")
for k in $keys; do
    if grep -q -E "(^: |[\`.]|\[\]\.)$k([\`.[]|\$)" <<<"$terms"; then
        echo "PASS: t-man: key $k is explained in katana.json(5)"
    else
        echo "FAIL: t-man: key $k (agent/agent_config.c) has no entry in katana.json(5) ($MAN_MD)"
        fails=$((fails + 1))
    fi
done

if ! command -v groff >/dev/null 2>&1; then
    echo "SKIP: t-man: groff is not installed, roff not checked"
    [ "$fails" = 0 ] && exit 77
    exit 1
fi
for page in katana.8 katana.json.5; do
    f=$BLD/$page
    if [ ! -s "$f" ]; then
        echo "FAIL: t-man: $f was not generated"; fails=$((fails + 1)); continue
    fi
    warn=$(LC_ALL=C.UTF-8 groff -man -Tutf8 -ww -z "$f" 2>&1 || echo "groff failed")
    if [ -z "$warn" ] && grep -q '^\.TH ' "$f"; then
        echo "PASS: t-man: $page is clean roff"
    else
        echo "FAIL: t-man: $page: ${warn:-no .TH line}"; fails=$((fails + 1))
    fi
done
[ "$fails" = 0 ]
