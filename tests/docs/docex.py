#!/usr/bin/env python3
"""docex.py: the fenced blocks of the documentation, as tests/docs/t-docs-examples.sh runs them.

Every fenced block (```) of the Markdown files given carries a decision: the last non-blank
line before its opening fence is an HTML comment

    <!-- example: KIND [ARG] -->

with KIND one of (docs/testing.md, "Examples in the documentation"):

    config               a whole katana config file
    config-member        top-level members ("db": {...}); a local node is added when the
                         block has no "nodes"
    node                 one or more nodes[] entries ({"tag": ..., "panel": ...})
    node-member TYPE     members of a nodes[] entry ("cert": {...}), on a local TYPE node
    node-body TYPE       a node body ({...} or "node": {...}), served by a local TYPE panel
    shell                commands run by the test (bash, set -euo pipefail)
    output               what a program prints (a JSON one must parse)
    not-runnable: REASON not run here, for REASON

A block without a decision, an unknown kind, or a marker with no block after it is an error.

  docex.py prepare --out DIR [--subst-config F] [--subst-shell F] FILE...
      writes DIR/NNN.json (a config for `katana check --offline`), DIR/NNN.sh (a shell block,
      each command preceded by `doc_line FILE:LINE "STATUSES"`, the HTTP statuses its comment
      names) or nothing (output, not-runnable), and DIR/index.tsv: NNN, kind, FILE:LINE,
      and the argument or reason. Substitution files hold one FROM<TAB>TO per line, applied in
      order to the block's text (TO may name $T, expanded from the environment). Certificate
      and key files a config names that do not exist are made (a self-signed pair).
      Exits 1 when a block has no valid decision, an output block's JSON does not parse or a
      config block is not JSON after its wrapping.
  docex.py file --out OUT [--subst-config F] FILE
      writes the config file FILE to OUT with the substitutions applied and its certificate
      files made, as for a config block.
  docex.py links --root DIR FILE...
      checks every relative link of the Markdown files ([text](target), [label]: target,
      outside fenced blocks and code spans): its file exists, lies inside DIR (the source tree,
      so nothing points into ../shared/ or elsewhere outside the repository), and a #fragment
      into a Markdown file names one of its headings (GitHub's anchors). Links with a scheme
      (https:, mailto:) are not followed. Prints one line per bad link; exits 1 when there is one.
"""
import argparse
import json
import os
import re
import subprocess
import sys

KINDS = ("config", "config-member", "node", "node-member", "node-body", "shell", "output",
         "not-runnable")
TYPED = ("node-member", "node-body")
NODE_TYPES = ("shadowsocks", "trojan", "vless", "vmess")
MARKER = re.compile(r"^\s*<!--\s*example:\s*(.*?)\s*-->\s*$")
FENCE = re.compile(r"^(\s*)(```+|~~~+)\s*([^\s`]*)")
# The local panel a wrapped block is served by: one user with a UUID (every type takes it).
DOC_UUID = "0b7d3f4e-2c61-4a8d-9e15-7f2a6c3b8d44"
BASE_BODIES = {
    "shadowsocks": {"server_port": 18388, "cipher": "aes-256-gcm"},
    "trojan": {"server_port": 18443, "server_name": "node.example"},
    "vless": {"server_port": 18443},
    "vmess": {"server_port": 18443},
}


class DocError(Exception):
    pass


def blocks(path):
    """Yield (line, lang, marker, body) for each fenced block of the file at path; marker is
    the text after "example:" or None."""
    lines = open(path, encoding="utf-8").read().split("\n")
    i = 0
    pending = None   # (line, text) of a marker not yet followed by its block
    while i < len(lines):
        m = MARKER.match(lines[i])
        if m:
            if pending is not None:
                raise DocError("%s:%d: example marker with no block after it" % (path, pending[0]))
            pending = (i + 1, m.group(1))
            i += 1
            continue
        f = FENCE.match(lines[i])
        if not f:
            if pending is not None and lines[i].strip() != "":
                raise DocError("%s:%d: example marker with no block after it" % (path, pending[0]))
            i += 1
            continue
        fence = f.group(2)
        start = i
        i += 1
        body = []
        while i < len(lines) and not lines[i].strip().startswith(fence):
            body.append(lines[i][len(f.group(1)):] if lines[i].startswith(f.group(1)) else lines[i])
            i += 1
        if i >= len(lines):
            raise DocError("%s:%d: block never closed" % (path, start + 1))
        i += 1
        yield start + 1, f.group(3), pending[1] if pending else None, "\n".join(body) + "\n"
        pending = None
    if pending is not None:
        raise DocError("%s:%d: example marker with no block after it" % (path, pending[0]))


def decision(path, line, marker):
    """(kind, arg) of a marker text; DocError when it is missing or malformed."""
    where = "%s:%d" % (path, line)
    if marker is None:
        raise DocError("%s: block without a decision (<!-- example: KIND --> before it; "
                       "docs/testing.md)" % where)
    if marker.startswith("not-runnable"):
        reason = marker[len("not-runnable"):].lstrip(":").strip()
        if not reason:
            raise DocError("%s: not-runnable needs a reason (not-runnable: REASON)" % where)
        return "not-runnable", reason
    words = marker.split()
    kind, args = words[0], words[1:]
    if kind not in KINDS:
        raise DocError("%s: unknown example kind %r (one of %s)" % (where, kind, ", ".join(KINDS)))
    if kind in TYPED:
        if len(args) != 1 or args[0] not in NODE_TYPES:
            raise DocError("%s: %s needs a node type (%s)" % (where, kind, " | ".join(NODE_TYPES)))
        return kind, args[0]
    if args:
        raise DocError("%s: %s takes no argument" % (where, kind))
    return kind, ""


def read_subst(path):
    """[(from, to)] of a substitution file, $VARS in TO expanded from the environment."""
    out = []
    if path is None:
        return out
    for raw in open(path, encoding="utf-8"):
        raw = raw.rstrip("\n")
        if raw == "" or raw.startswith("#"):
            continue
        src, sep, dst = raw.partition("\t")
        if not sep:
            raise DocError("%s: %r: expected FROM<TAB>TO" % (path, raw))
        out.append((src, os.path.expandvars(dst)))
    return out


def substitute(text, table):
    """text with every FROM of table replaced by its TO, in one pass (a TO is not searched
    again); at one place the first FROM declared that matches wins."""
    if not table:
        return text
    pattern = re.compile("|".join(re.escape(src) for src, _ in table))
    to = dict(table)
    return pattern.sub(lambda m: to[m.group(0)], text)


def loads(text, where):
    """The JSON value of text; DocError naming where when it does not parse."""
    try:
        return json.loads(text)
    except ValueError as e:
        raise DocError("%s: not JSON: %s" % (where, e))


def local_panel(node_type, body):
    """A local panel serving body as a node of node_type, with the one user DOC_UUID."""
    return {"type": "local", "node_type": node_type, "node": body,
            "users": {"users": [{"id": 1, "uuid": DOC_UUID}]}}


def needs_cert(node_type, body):
    """A node of node_type with this body serves TLS with a certificate of its entry."""
    if node_type == "trojan":
        return body.get("tls") != 2
    if node_type in ("vless", "vmess"):
        return body.get("tls") == 1
    return "tls" in str(body.get("plugin_opts", "")).split(";")


def base_node(node_type="shadowsocks", body=None):
    """A loopback nodes[] entry "doc" of node_type on a local panel (body, or the type's
    BASE_BODIES one), with a self-signed certificate when the body serves TLS."""
    body = dict(BASE_BODIES[node_type]) if body is None else body
    node = {"tag": "doc", "listen": "127.0.0.1", "panel": local_panel(node_type, body)}
    if needs_cert(node_type, body):
        node["cert"] = {"mode": "self"}
    return node


def wrap(kind, arg, text, where):
    """The whole config a config-like block stands for."""
    if kind == "config":
        return loads(text, where)
    if kind == "config-member":
        cfg = loads("{" + text + "}", where)
        cfg.setdefault("nodes", [base_node()])
        return cfg
    if kind == "node":
        nodes = loads("[" + text + "]", where)
        return {"nodes": nodes}
    if kind == "node-member":
        members = loads("{" + text + "}", where)
        node = base_node(arg)
        node.update(members)
        return {"nodes": [node]}
    if kind == "node-body":
        try:
            body = json.loads(text)
        except ValueError:
            body = loads("{" + text + "}", where).get("node")
        if not isinstance(body, dict):
            raise DocError("%s: expected a node body object or a \"node\" member" % where)
        return {"nodes": [base_node(arg, body)]}
    raise DocError("%s: %s is not a config kind" % (where, kind))


def cert_pairs(value):
    """Yield every (cert_file, key_file) of a config."""
    if isinstance(value, dict):
        if "cert_file" in value and "key_file" in value:
            yield value["cert_file"], value["key_file"]
        for v in value.values():
            yield from cert_pairs(v)
    elif isinstance(value, list):
        for v in value:
            yield from cert_pairs(v)


def make_certs(cfg, cfg_dir):
    """A self-signed pair at every certificate path of cfg that does not exist."""
    for crt, key in cert_pairs(cfg):
        crt = os.path.join(cfg_dir, crt)
        key = os.path.join(cfg_dir, key)
        if os.path.exists(crt) and os.path.exists(key):
            continue
        for p in (crt, key):
            os.makedirs(os.path.dirname(p), exist_ok=True)
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2", "-subj",
                        "/CN=node.example", "-keyout", key, "-out", crt],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def comment_of(line):
    """The text of a shell line's trailing comment ('' when none); quotes are respected."""
    quote = None
    for i, c in enumerate(line):
        if quote:
            if c == quote:
                quote = None
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or line[i - 1] in " \t"):
            return line[i + 1:]
    return ""


def shell_script(text, where_file, first_line):
    """The shell block as a script: `doc_line FILE:LINE "STATUSES"` before each command."""
    out = []
    cont = False
    heredoc = None
    for k, line in enumerate(text.rstrip("\n").split("\n")):
        if heredoc is not None:
            out.append(line)
            if line.strip() == heredoc:
                heredoc = None
            continue
        if not cont and line.strip() != "" and not line.lstrip().startswith("#"):
            statuses = " ".join(re.findall(r"\b[2-5][0-9][0-9]\b", comment_of(line)))
            out.append('doc_line %s:%d "%s"' % (where_file, first_line + 1 + k, statuses))
        out.append(line)
        h = re.search(r"<<-?\s*['\"]?(\w+)['\"]?", line)
        if h:
            heredoc = h.group(1)
        cont = line.endswith("\\")
    return "\n".join(out) + "\n"


def prepare(a):
    """The prepare command (module docstring): writes the blocks and index.tsv to a.out;
    0, or 1 after printing every error."""
    subst_config = read_subst(a.subst_config)
    subst_shell = read_subst(a.subst_shell)
    os.makedirs(a.out, exist_ok=True)
    index = []
    errors = []
    n = 0
    for path in a.files:
        rel = os.path.relpath(path, a.root) if a.root else path
        try:
            found = list(blocks(path))
        except DocError as e:
            errors.append(str(e))
            continue
        for line, lang, marker, body in found:
            n += 1
            where = "%s:%d" % (rel, line)
            base = os.path.join(a.out, "%03d" % n)
            try:
                kind, arg = decision(rel, line, marker)
                if kind in ("config", "config-member", "node", "node-member", "node-body"):
                    cfg = wrap(kind, arg, substitute(body, subst_config), where)
                    make_certs(cfg, a.out)
                    with open(base + ".json", "w", encoding="utf-8") as f:
                        json.dump(cfg, f, indent=2)
                elif kind == "shell":
                    with open(base + ".sh", "w", encoding="utf-8") as f:
                        f.write(shell_script(substitute(body, subst_shell), rel, line))
                elif kind == "output" and lang == "json":
                    loads(body, where)
            except DocError as e:
                errors.append(str(e))
                continue
            index.append("%03d\t%s\t%s\t%s" % (n, kind, where, arg))
    with open(os.path.join(a.out, "index.tsv"), "w", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in index))
    for e in errors:
        print("docex: " + e, file=sys.stderr)
    return 1 if errors else 0


def one_file(a):
    """A whole config file, substituted, with its certificate files made, written to --out."""
    text = substitute(open(a.file, encoding="utf-8").read(), read_subst(a.subst_config))
    cfg = loads(text, a.file)
    make_certs(cfg, os.path.dirname(os.path.abspath(a.out)))
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump(cfg, f, indent=2)
    return 0


INLINE_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REF_LINK = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)")
CODE_SPAN = re.compile(r"(`+).*?\1")
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def prose_lines(path, keep_code=False):
    """Yield (line number, text) of the lines of a Markdown file outside fenced blocks; code
    spans are blanked unless keep_code."""
    fence = None
    for n, line in enumerate(open(path, encoding="utf-8").read().split("\n"), 1):
        f = FENCE.match(line)
        if fence is None and f:
            fence = f.group(2)
            continue
        if fence is not None:
            if line.strip().startswith(fence):
                fence = None
            continue
        yield n, line if keep_code else CODE_SPAN.sub("", line)


def anchor(heading):
    """GitHub's anchor of a heading text: lower case, code marks and punctuation other than
    '-' and '_' dropped, spaces as '-'."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path):
    """The set of anchors of the headings of a Markdown file (a repeated one gets -1, -2...)."""
    seen = {}
    out = set()
    for _, line in prose_lines(path, keep_code=True):
        m = re.match(r"^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        a = anchor(m.group(1))
        k = seen.get(a, 0)
        seen[a] = k + 1
        out.add(a if k == 0 else "%s-%d" % (a, k))
    return out


def link_errors(root, path):
    """The bad relative links of the Markdown file at path, as "FILE:LINE: message" strings."""
    root = os.path.realpath(root)
    rel = os.path.relpath(path, root)
    errors = []
    for n, line in prose_lines(path):
        targets = INLINE_LINK.findall(line)
        m = REF_LINK.match(line)
        if m:
            targets.append(m.group(1))
        for t in targets:
            if SCHEME.match(t):
                continue
            file_part, _, frag = t.partition("#")
            where = "%s:%d: link %s" % (rel, n, t)
            dest = os.path.realpath(os.path.join(os.path.dirname(path), file_part)) \
                if file_part else os.path.realpath(path)
            if dest != root and not dest.startswith(root + os.sep):
                errors.append("%s: points outside the source tree (%s)" % (where, dest))
            elif not os.path.exists(dest):
                errors.append("%s: no such file" % where)
            elif frag and dest.endswith(".md") and frag not in anchors(dest):
                errors.append("%s: %s has no heading #%s" % (where, os.path.relpath(dest, root),
                                                            frag))
    return errors


def links(a):
    """The links command (module docstring): 0, or 1 after printing every bad link."""
    errors = []
    for path in a.files:
        errors += link_errors(a.root, path)
    for e in errors:
        print("docex: " + e, file=sys.stderr)
    return 1 if errors else 0


def main():
    """Parse the command line and run one command; its exit status."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    pp = sub.add_parser("prepare")
    pp.add_argument("--out", required=True)
    pp.add_argument("--root", help="print file names relative to this directory")
    pp.add_argument("--subst-config")
    pp.add_argument("--subst-shell")
    pp.add_argument("files", nargs="+")
    pf = sub.add_parser("file")
    pf.add_argument("--out", required=True)
    pf.add_argument("--subst-config")
    pf.add_argument("file")
    pl = sub.add_parser("links")
    pl.add_argument("--root", required=True)
    pl.add_argument("files", nargs="+")
    a = p.parse_args()
    try:
        return {"prepare": prepare, "file": one_file, "links": links}[a.cmd](a)
    except DocError as e:
        print("docex: %s" % e, file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
