# shellcheck shell=bash
# bulk-judge.sh: sourced by the benchmarks that time `bulk send` into `bulk sink`
# (tests/bench/bulk.c): a transfer counts only when it was whole (issue 24: a cut transfer is a
# failure, never a figure).
#
# bulk_judged SINK_OUT TENTHS CMD...: run CMD (a `bulk send`, possibly behind a wrapper such
# as /usr/bin/time; its stdout is the byte count it wrote, its stderr a failed write's reason)
# and wait at most TENTHS tenths of a second for the sink's next line in SINK_OUT. Sets
# BULK_SENT (what the sender wrote, "-" when it printed nothing), BULK_BYTES and BULK_SECS (the
# sink's figures for the transfer: first to last byte) and returns 0 when the transfer was
# whole: the sender ended without an error and the sink got exactly the bytes it wrote.
# Otherwise sets BULK_CUT to why (a failed write, nothing at the sink, fewer bytes than sent)
# and returns 1.
bulk_judged() {
    local out=$1 tenths=$2 lines rc=0 line err
    shift 2
    BULK_SENT=- BULK_BYTES=- BULK_SECS=- BULK_CUT=
    lines=$(wc -l <"$out")
    err=$(mktemp "${TMPDIR:-/tmp}/bulk-judge.XXXXXX")
    BULK_SENT=$("$@" 2>"$err") || rc=$?
    BULK_SENT=${BULK_SENT:--}
    for _ in $(seq 1 "$tenths"); do
        [ "$(wc -l <"$out")" -gt "$lines" ] && break; sleep 0.1
    done
    line=$(tail -n +"$((lines + 1))" "$out" | awk 'NF == 2' | head -n 1)
    [ -z "$line" ] || read -r BULK_BYTES BULK_SECS <<<"$line"
    if [ "$rc" != 0 ]; then
        BULK_CUT="the sender failed after $BULK_SENT bytes: $(tail -n 1 "$err")"
    elif [ -z "$line" ]; then
        BULK_CUT="nothing reached the sink ($BULK_SENT bytes sent)"
    elif [ "$BULK_BYTES" != "$BULK_SENT" ]; then
        BULK_CUT="the sink got $BULK_BYTES of the $BULK_SENT bytes sent"
    fi
    rm -f "$err"
    [ -z "$BULK_CUT" ]
}
