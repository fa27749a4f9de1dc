#!/bin/bash
# Xboard machine channel, `sync.nodes` (issue 14, PROTOCOLS-2.md §6.4): the panel pushes the
# machine's new node set over the machine's WebSocket and katana applies it at once, with the
# machine's pull_interval at 600 s so that no REST list pull can explain it. A node the set
# drops stops listening and the usage it still held is pushed (through the machine's other
# node, as the REST path does); a node the set adds starts listening and serves its user.
# Checks: node 12's listener closes within 5 s of the sync.nodes; the outbox is pushed empty and
# the panel's per-user totals equal katana's usage exactly, user 2's bytes billed through node
# 11; node 13 listens within 10 s and relays its user's bytes; no machine/nodes request between
# the pushes and those changes.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/panel.sh"
kt_need ss-local curl sqlite3
needs_katana "xboard machine channel" || skip_all "needs katana"
PANEL_TYPE=xboard

U1=$(kt_uuid); U2=$(kt_uuid); U3=$(kt_uuid)
echo_start
panel_start 60 60 "1:$U1"          # node mode state, unused: the machine's nodes answer
kt_ports 2; P12=${PORTS[0]}; P13=${PORTS[1]}
N11=$(ss_node 11 "$NODE_PORT" "1:$U1"); N12=$(ss_node 12 "$P12" "2:$U2")
N13=$(ss_node 13 "$P13" "3:$U3")
machine_set 600 "$N11, $N12"
machine_kat_config "$T/config.json"
kat_start "$T/config.json"
check "the machine's channel came up" ws_wait_up 10
check "node 12 listens" kt_wait_port "$P12" 10
cl_start u1 "$CIPHER" "$U1" "$NODE_PORT"; C1=$CL_PORT
cl_start u2 "$CIPHER" "$U2" "$P12"; C2=$CL_PORT
stream_bg s1 "$C1" 262144 1048576 ok; S1=$STREAM_PID
stream_bg s2 "$C2" "$MIB" 1048576 ok; S2=$STREAM_PID
stream_wait s1 "$S1" 20 "node 11 serves user 1"
stream_wait s2 "$S2" 20 "node 12 serves user 2 (1 MiB echoed)"
sleep 2.5   # the sampler folds the streams' bytes, a flush writes them to the outbox
PEND=$(outbox_pending)
echo "outbox before the removal: [$(tr '\n' ';' <<<"$PEND")]"
check "user 2's usage is pending in the outbox before the removal (push interval 60 s)" \
    bash -c "grep -q '^2 [1-9]' <<<'$PEND'"

# node 12 leaves the machine: sync.nodes over the channel, no pull for 600 s
LIST0=$(panel_hits machine/nodes)
machine_set 600 "$N11"
port_closed() { ! kt_wait_port "$1" 0.2 2>/dev/null; }
for ((i = 0; i < 50; i++)); do port_closed "$P12" && break; sleep 0.1; done
check "the removed node stops listening within 5 s" port_closed "$P12"
check "the outbox is pushed empty" wait_outbox_empty 10
KAT=$(kat_snapshot)
check "the panel's per-user totals equal katana's usage exactly" \
    same_totals "totals" "$KAT" "$(panel_totals)"
check "the removed node's usage went through the machine's other node" python3 -c '
import json, sys
nt = json.loads(sys.argv[1])["node_totals"]
sys.exit(0 if "2" in nt.get("11", {}) and "12" not in nt else 1)' "$(panel_ctl state)"

# node 13 joins the machine: it starts without waiting for a pull interval
machine_set 600 "$N11, $N13"
check "the added node listens within 10 s" kt_wait_port "$P13" 10
cl_start u3 "$CIPHER" "$U3" "$P13"; C3=$CL_PORT
stream_bg added "$C3" 262144 1048576 ok; S3=$STREAM_PID
stream_wait added "$S3" 20 "the added node serves its user"
check "the first node still serves" tcp_rt "$C1" ok
LIST1=$(panel_hits machine/nodes)
check "no machine/nodes pull explains it ($LIST0 then $LIST1 requests)" test "$LIST0" = "$LIST1"
kat_stop
check "katana exits 0" test "$SRV_RC" = 0
kt_finish
