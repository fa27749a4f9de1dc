#!/bin/bash
# supervisor/README.md "Include direction", issue 25 "no include or symbol circle in any library":
# no circle between the files of any library named in noinst_LIBRARIES (libsv, libag: agent/ and
# panel/, libapi, libdb), checked two ways.
# - Symbols: every object of lib*.a is a node, an undefined symbol that another object of the
#   same archive defines is an edge.
# - Includes: the file modules of the library's sources (as the *.am fragments list them) and of
#   every header they reach are the nodes (foo.c, foo.h and foo_internal.h are module foo); a
#   `#include "..."` from a file of module A of a header of module B is the edge A -> B.
# Either graph must have no cycle; each circle is printed with the lines that make it.
# tests/unit/cycles-allow.txt names edges taken out of both graphs for now (one per line:
# `include A -> B` with module paths, or `symbol LIB A.o -> B.o`); the circles they let through
# are printed as ALLOWED, so the list shows what is still to break. A new circle fails.
set -euo pipefail
top_src=${KATANA_TOP_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
top_build=${KATANA_TOP_BUILDDIR:-.}
command -v nm >/dev/null || { echo "SKIP: no nm"; exit 77; }
command -v python3 >/dev/null || { echo "SKIP: no python3"; exit 77; }
exec python3 - "$top_src" "$top_build" "${KATANA_CYCLES_ALLOW:-$top_src/tests/unit/cycles-allow.txt}" <<'PY'
import collections, os, re, subprocess, sys

top, build, allow_path = sys.argv[1:4]

# The *.am fragments: variable assignments (=, +=, line continuations, $(var) references),
# conditionals ignored (every source of every branch counts), includes followed.
am_vars = {}
def read_am(path):
    text = open(path).read().replace("\\\n", " ")
    for line in text.split("\n"):
        m = re.match(r"\s*include\s+\$\(srcdir\)/(\S+)", line)
        if m:
            read_am(os.path.join(top, m.group(1)))
            continue
        m = re.match(r"([A-Za-z0-9_]+)\s*(\+?=)\s*(.*)$", line)
        if m:
            name, op, value = m.groups()
            words = value.split("#")[0].split()
            am_vars[name] = words if op == "=" else am_vars.get(name, []) + words
def expand(words):
    out = []
    for w in words:
        m = re.fullmatch(r"\$\(([A-Za-z0-9_]+)\)", w)
        out += expand(am_vars.get(m.group(1), [])) if m else [w]
    return out
read_am(os.path.join(top, "Makefile.am"))
libs = {}
for lib in expand(am_vars.get("noinst_LIBRARIES", [])):
    srcs = expand(am_vars.get(lib.replace(".", "_") + "_SOURCES", []))
    libs[lib[:-2]] = [s for s in srcs if s.endswith((".c", ".h"))]
if not libs:
    print("FAIL: no library found in %s/Makefile.am" % top)
    sys.exit(1)

allowed = set()
if os.path.exists(allow_path):
    for line in open(allow_path):
        line = line.split("#")[0].strip()
        if line:
            allowed.add(" ".join(line.split()))

def sccs(graph):
    """Tarjan: the strongly connected components of more than one node, each sorted."""
    index, low, on, stack, out = {}, {}, set(), [], []
    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))
    sys.setrecursionlimit(100000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out

def circle(graph, comp):
    """One shortest circle through the component's first node, as a list of nodes."""
    start, inside = comp[0], set(comp)
    prev, queue = {start: None}, collections.deque([start])
    while queue:
        v = queue.popleft()
        for w in sorted(graph.get(v, ())):
            if w == start:
                path = [v]
                while prev[path[-1]] is not None:
                    path.append(prev[path[-1]])
                return list(reversed(path)) + [start]
            if w in inside and w not in prev:
                prev[w] = v
                queue.append(w)
    return comp

failed, n_allowed, edges_seen = False, 0, set()
def check(kind, label, graph, why, key, mine=lambda comp: True):
    """Prints every circle of graph that mine() keeps: the circle, the line making each of its
    edges and every node tied in it. Returns the number the allow-list lets pass."""
    global failed
    edges_seen.update(key(v, w) for v, ws in graph.items() for w in ws)
    reduced = {v: {w for w in ws if key(v, w) not in allowed} for v, ws in graph.items()}
    bad = [b for b in sccs(reduced) if mine(b)]
    let = 0
    def show(g, comp):
        c = circle(g, comp)
        for v, w in zip(c, c[1:]):
            print("    %s -> %s  (%s)" % (v, w, why[(v, w)]))
        if len(comp) > len(c) - 1:
            print("    tied in the same circle: %s" % " ".join(comp))
        return c
    for comp in sccs(graph):
        if not mine(comp):
            continue
        live = [b for b in bad if set(b) <= set(comp)]
        for b in live:
            failed = True
            print("FAIL: %s %s circle %s" % (label, kind, " -> ".join(circle(reduced, b))))
            show(reduced, b)
        if not live:
            let += 1
            print("ALLOWED: %s %s circle %s" % (label, kind, " -> ".join(circle(graph, comp))))
            show(graph, comp)
            for v in comp:
                for w in sorted(graph[v] & set(comp)):
                    if key(v, w) in allowed:
                        print("    allowed: %s  (%s)" % (key(v, w), why[(v, w)]))
    return let

# Symbols, per archive.
for lib in sorted(libs):
    path = os.path.join(build, lib + ".a")
    if not os.path.exists(path):
        print("FAIL: %s is not built" % path)
        failed = True
        continue
    nm = subprocess.run(["nm", "-A", path], capture_output=True, text=True, check=True).stdout
    defs, refs = {}, []
    for line in nm.splitlines():
        p = line.split()
        if not p or ":" not in p[0]:
            continue
        obj = p[0].split(":")[1]
        if len(p) == 3 and p[1] in "TDBRCV":
            defs[p[2]] = obj
        elif len(p) >= 2 and p[-2] == "U":
            refs.append((obj, p[-1]))
    graph, why = collections.defaultdict(set), {}
    for obj, sym in refs:
        if sym in defs and defs[sym] != obj:
            graph[obj].add(defs[sym])
            why.setdefault((obj, defs[sym]), "uses " + sym)
    graph = dict(graph)
    n_allowed += check("symbol", lib, graph, why, lambda a, b, lib=lib: "symbol %s %s -> %s" % (lib, a, b))
    print("checked: %s symbols, %d objects" % (lib, len(graph)))

# Includes: one graph of every file the libraries reach; a circle is named by the libraries
# that list its files.
inc_re = re.compile(r'\s*#\s*include\s+"([^"]+)"')
def module(path):
    m = os.path.splitext(path)[0]
    return m[:-len("_internal")] if m.endswith("_internal") else m
graph, why, owner = collections.defaultdict(set), {}, collections.defaultdict(set)
for lib, srcs in libs.items():
    for s in srcs:
        owner[module(s)].add(lib)
todo, seen = sorted({s for srcs in libs.values() for s in srcs}), set()
while todo:
    f = todo.pop()
    if f in seen:
        continue
    seen.add(f)
    if not os.path.exists(os.path.join(top, f)):
        print("FAIL: %s is listed but does not exist" % f)
        failed = True
        continue
    for n, line in enumerate(open(os.path.join(top, f), errors="replace"), 1):
        m = inc_re.match(line)
        if not m:
            continue
        cands = [os.path.normpath(os.path.join(os.path.dirname(f), m.group(1))),
                 os.path.normpath(m.group(1))]
        target = next((c for c in cands if os.path.isfile(os.path.join(top, c))), None)
        if target is None:
            continue  # config.h and other generated or system headers
        todo.append(target)
        a, b = module(f), module(target)
        graph[b]
        if a != b:
            graph[a].add(b)
            why.setdefault((a, b), "%s:%d includes %s" % (f, n, target))
graph = dict(graph)
for lib in sorted(libs):
    # The library's own modules and every module they reach; a circle is reported under each
    # library that lists one of its modules.
    reach, stack = set(), [v for v in graph if lib in owner.get(v, ())]
    while stack:
        v = stack.pop()
        if v not in reach:
            reach.add(v)
            stack += graph[v]
    sub = {v: graph[v] & reach for v in reach}
    n_allowed += check("include", lib, sub, why, lambda a, b: "include %s -> %s" % (a, b),
                       lambda comp, lib=lib: any(lib in owner.get(v, ()) for v in comp))
    print("checked: %s includes, %d modules" % (lib, len(sub)))

for entry in sorted(allowed - edges_seen):
    print("NOTE: no such edge any more, remove it from %s: %s" % (allow_path, entry))
if failed:
    sys.exit(1)
print("PASS: no circle%s" % (" (%d allowed by %s)" % (n_allowed, allow_path) if n_allowed else ""))
PY
