#!/bin/bash
# t-man.sh: katana.json(5) explains every configuration key the parser accepts, and both
# generated man pages are clean roff.
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
