#!/bin/bash
# Log lines on a terminal start with their UTC time; in a file (or the journal, or a pipe) they
# are bare: "LEVEL module message". katana runs for 2 s under script(1), which gives it a
# terminal, then as usual with stderr in a file.
. "$(dirname "$0")/lib.sh"
kt_need script timeout
[ "$KT_SERVER" = katana ] || skip_all "katana's log format"

kt_ports 2
mkconfig "$T/config.json" "${PORTS[0]}" aes-128-gcm --user "1:$(kt_uuid)" --api-port "${PORTS[1]}"
BIN=$(katana_bin)
script -qec "timeout -s TERM 2 '$BIN' run -c '$T/config.json'" /dev/null >"$T/tty.out" 2>&1 || true
tr -d '\r' <"$T/tty.out" >"$T/tty.txt"; cat "$T/tty.txt"
check "on a terminal: the start's lines carry their UTC time" \
    grep -qE '^20[0-9]{2}-[01][0-9]-[0-3][0-9]T[0-2][0-9]:[0-5][0-9]:[0-5][0-9]\.[0-9]{3}Z INFO ag\.main katana .* running$' "$T/tty.txt"
check "on a terminal: every log line is stamped" \
    bash -c "! grep -E '^(ERROR|WARN|INFO|DEBUG) ' '$T/tty.txt'"
timeout -s TERM 2 "$BIN" run -c "$T/config.json" 2>"$T/file.log" || true
check "in a file: the lines are bare" grep -qE '^INFO ag\.main katana .* running$' "$T/file.log"
check "in a file: no line is stamped" bash -c "! grep -E '^20[0-9]{2}-' '$T/file.log'"
kt_finish
