#!/bin/bash
# Issue 8, supervisor/README.md "Include direction": no circle between the files of supervisor/.
# Every object of libsv.a is a node, an undefined symbol that another object defines is an edge;
# the graph must have no cycle (main had conn/udp <-> worker and tracker <-> ledger <-> sampler).
set -euo pipefail
lib=${KATANA_TOP_BUILDDIR:-.}/libsv.a
command -v nm >/dev/null || { echo "SKIP: no nm"; exit 77; }
command -v python3 >/dev/null || { echo "SKIP: no python3"; exit 77; }
[ -f "$lib" ] || { echo "FAIL: $lib is not built"; exit 1; }
nm -A "$lib" | python3 -c '
import collections, sys
defs, refs = {}, []
for line in sys.stdin:
    p = line.split()
    if ":" not in p[0]:
        continue
    obj = p[0].split(":")[1]
    if len(p) == 3 and p[1] in "TDBRCV":
        defs[p[2]] = obj
    elif len(p) >= 2 and p[-2] == "U":
        refs.append((obj, p[-1]))
graph = collections.defaultdict(set)
for obj, sym in refs:
    if sym in defs and defs[sym] != obj:
        graph[obj].add(defs[sym])
state, path, bad = {}, [], []
def visit(v):
    state[v] = 1
    path.append(v)
    for w in sorted(graph[v]):
        if state.get(w) == 1:
            bad.append(path[path.index(w):] + [w])
        elif w not in state:
            visit(w)
    path.pop()
    state[v] = 2
for v in sorted(graph):
    if v not in state:
        visit(v)
for c in bad:
    print("FAIL: cycle " + " -> ".join(c))
if not bad:
    print("PASS: %d objects, no cycle" % len(graph))
sys.exit(1 if bad else 0)
'
