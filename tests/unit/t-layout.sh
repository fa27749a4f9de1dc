#!/bin/bash
# Issue 25 "Done when", STYLE.md (one job per file, short functions): no .c (or .c.inc) file of supervisor/
# outside its protocol cores, crypto and transport layers (supervisor/proto/, crypto/,
# transport/), and none of agent/, over 1 200 lines; no function in those files with a body over
# 80 lines. A function is a line at column 0 that opens a definition (a name and its parameters,
# no `=` before them) through its `}` at column 0; its body is its lines from its opening `{` to
# that `}`. Every violation is printed; tests/unit/layout-allow.txt lists the ones let
# through for now (one `path` or `path:function` per line), any other one fails.
set -euo pipefail
top_src=${KATANA_TOP_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
allow=${KATANA_LAYOUT_ALLOW:-$top_src/tests/unit/layout-allow.txt}
max_lines=1200
max_body=80
cd "$top_src"
files=$(find supervisor agent \( -name '*.c' -o -name '*.c.inc' \) -not -path 'supervisor/proto/*' \
	-not -path 'supervisor/crypto/*' -not -path 'supervisor/transport/*' | LC_ALL=C sort)
[ -n "$files" ] || { echo "FAIL: no source under $top_src"; exit 1; }
# shellcheck disable=SC2086
found=$(awk -v max_lines="$max_lines" -v max_body="$max_body" '
function file_end() { if (file != "" && lines > max_lines) printf "%s %d\n", file, lines }
FNR == 1 { file_end(); file = FILENAME; name = ""; open_at = 0 }
{ lines = FNR }
# A definition starts at column 0 with a name and "(" and no "=" before it.
!open_at && name == "" && /^[A-Za-z_][^=;]*\(/ && !/^(typedef|struct [a-z_]+ *\{)/ {
	head = $0
	sub(/\(.*/, "", head)
	n = split(head, w, /[ *]+/)
	name = w[n]
}
name != "" && !open_at && /;[ \t]*$/ && !/\{/ { name = "" }
name != "" && !open_at && /\{[ \t]*$/ { open_at = FNR }
open_at && /^\}/ {
	if (FNR - open_at + 1 > max_body)
		printf "%s:%s %d\n", FILENAME, name, FNR - open_at + 1
	name = ""; open_at = 0
}
END { file_end() }
' $files)
status=0
while read -r what n; do
	[ -n "$what" ] || continue
	if grep -qxF "$what" <(sed 's/#.*//; s/[[:space:]]*$//' "$allow" 2>/dev/null); then
		echo "ALLOWED: $what ($n lines)"
	else
		echo "FAIL: $what ($n lines; at most $max_lines a file, $max_body a function body)"
		status=1
	fi
done <<<"$found"
while read -r entry; do
	if [ -n "$entry" ] && ! awk -v e="$entry" '$1 == e { f = 1 } END { exit !f }' <<<"$found"; then
		echo "NOTE: $entry is fixed: remove it from $allow"
	fi
done < <(sed 's/#.*//; s/[[:space:]]*$//' "$allow" 2>/dev/null)
if [ "$status" = 0 ]; then
	echo "PASS: $(wc -w <<<"$files") files, no new violation"
fi
exit "$status"
