#!/usr/bin/env python3
"""apiload: stdlib-only load helpers for the REST API limit tests (t-api-limits.sh; loopback only).

Each subcommand opens its connections, writes a one-line JSON summary to --ready-file (and
stdout), then holds every connection that is still open (answered ones included) until it is
killed (SIGTERM), unless --report-after is given.

  hold   --port P --count N [--sources A,B] [--send TEXT] [--report-after S]
         N plain TCP connections (round robin over the source addresses) that send TEXT (may be
         empty) and nothing more. Summary: connected, failed. With --report-after, it then
         waits S seconds, prints {"report": true, "closed": C, "open": O} (C: the connections
         the server closed) and exits.
  relays --socks P --dest-port D --count N [--check-file F]
         N SOCKS5 CONNECTs through ss-local to the echo server, each checked with one 8-byte
         round trip. Summary: open, failed. With --check-file, each time F appears it makes one
         more round trip on every relay held, writes {"alive": A, "dead": D} to F.out and
         removes F.
  sse    --port P --count N [--sources A,B] [--path PATH] [--token T] [--timeout S]
         N concurrent stream requests. Each ends up as one of: served (200 and the stream's
         first comment), refused (503 with a JSON {"error": ...} body), closed (EOF or reset
         with no answer), silent (nothing within S seconds), other (any other answer).
  trickle --port P --count N [--sources A,B] [--interval S] [--max S]
         N connections that send a request line and then one more header byte every S seconds,
         never finishing the request. Prints {"report": true, "closed": C, "open": O,
         "seconds": [...]} (seconds from connect to the server closing each one, the open ones
         left out) once all are closed or --max seconds have passed, and exits.
  keepalive --port P [--source A] [--path PATH] [--token T] [--pause S]
         One connection: a full GET, its answer, S seconds of silence, the same GET again.
         Prints {"report": true, "first": CODE, "second": CODE or null} and exits.
"""

import argparse
import ipaddress
import json
import os
import selectors
import signal
import socket
import struct
import sys
import time


def die(msg, code=2):
    print("FAIL " + msg, flush=True)
    sys.exit(code)


def loopback(host):
    if not ipaddress.ip_address(host).is_loopback:
        die("refusing non-loopback address %s" % host)
    return host


def summary(a, obj):
    line = json.dumps(obj, sort_keys=True)
    print(line, flush=True)
    if a.ready_file:
        tmp = a.ready_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(line + "\n")
        os.rename(tmp, a.ready_file)


def hold_forever():
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while True:
        time.sleep(3600)


def connect(host, port, source, timeout):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.bind((source, 0))
        s.connect((host, port))
    except OSError:
        s.close()
        raise
    return s


def sources(a):
    return [loopback(x) for x in a.sources.split(",")]


# --- hold ------------------------------------------------------------------------------

def peer_closed(s):
    """True when the peer closed or reset the connection (non-blocking peek)."""
    s.setblocking(False)
    try:
        d = s.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        return d == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def cmd_hold(a):
    src = sources(a)
    conns, failed = [], 0
    payload = a.send.encode().decode("unicode_escape").encode("latin-1")
    for i in range(a.count):
        try:
            s = connect("127.0.0.1", a.port, src[i % len(src)], 5)
            if payload:
                s.sendall(payload)
            conns.append(s)
        except OSError:
            failed += 1
    summary(a, {"connected": len(conns), "failed": failed})
    if a.report_after is None:
        hold_forever()
    time.sleep(a.report_after)
    closed = sum(1 for s in conns if peer_closed(s))
    print(json.dumps({"report": True, "closed": closed, "open": len(conns) - closed}),
          flush=True)
    return 0


# --- relays ----------------------------------------------------------------------------

def recv_exact(s, n):
    buf = b""
    while len(buf) < n:
        d = s.recv(n - len(buf))
        if not d:
            raise IOError("closed")
        buf += d
    return buf


def socks_connect(socks_port, dest_port):
    s = socket.create_connection(("127.0.0.1", socks_port), timeout=10)
    s.sendall(b"\x05\x01\x00")
    if recv_exact(s, 2) != b"\x05\x00":
        raise IOError("no-auth refused")
    s.sendall(b"\x05\x01\x00\x01" + socket.inet_aton("127.0.0.1") + struct.pack("!H", dest_port))
    rep = recv_exact(s, 10)
    if rep[1] != 0 or rep[3] != 1:
        raise IOError("SOCKS5 reply %d" % rep[1])
    return s


def cmd_relays(a):
    conns, failed = [], 0
    for i in range(a.count):
        try:
            s = socks_connect(a.socks, a.dest_port)
            probe = struct.pack("!Q", i)
            s.sendall(probe)
            if recv_exact(s, 8) != probe:
                raise IOError("echo differs")
            conns.append(s)
        except (OSError, IOError):
            failed += 1
    summary(a, {"open": len(conns), "failed": failed})
    if not a.check_file:
        hold_forever()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    round_no = 0
    while True:
        time.sleep(0.05)
        if not os.path.exists(a.check_file):
            continue
        round_no += 1
        alive = 0
        for i, s in enumerate(conns):
            try:
                s.settimeout(5)
                probe = struct.pack("!II", round_no, i)
                s.sendall(probe)
                if recv_exact(s, 8) == probe:
                    alive += 1
            except (OSError, IOError):
                pass
        tmp = a.check_file + ".out.tmp"
        with open(tmp, "w") as f:
            f.write(json.dumps({"alive": alive, "dead": len(conns) - alive}) + "\n")
        os.rename(tmp, a.check_file + ".out")
        os.unlink(a.check_file)


# --- sse -------------------------------------------------------------------------------

class Sub:
    """One stream request: connect, send, read until it can be classified."""

    def __init__(self, sock, request):
        self.s, self.out, self.buf, self.verdict = sock, request, b"", None

    def classify(self):
        head, sep, body = self.buf.partition(b"\r\n\r\n")
        if not sep:
            return None
        status = head.split(b"\r\n", 1)[0].split(b" ")
        code = int(status[1]) if len(status) > 1 and status[1].isdigit() else 0
        if code == 200:
            return "served" if b": katana stream" in body else None
        if code == 503:
            # a short JSON body: complete once it parses, whatever the framing
            start = body.find(b"{")
            try:
                obj = json.loads(body[start:body.rfind(b"}") + 1]) if start >= 0 else None
            except ValueError:
                obj = None
            if isinstance(obj, dict) and isinstance(obj.get("error"), str):
                return "refused"
            return None
        return "other:%d" % code


def cmd_sse(a):
    src = sources(a)
    sel = selectors.DefaultSelector()
    auth = "Authorization: Bearer %s\r\n" % a.token if a.token else ""
    request = ("GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n%sAccept: text/event-stream\r\n\r\n"
               % (a.path, auth)).encode()
    subs, counts = [], {"served": 0, "refused": 0, "closed": 0, "silent": 0, "other": 0}
    for i in range(a.count):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        s.bind((src[i % len(src)], 0))
        err = s.connect_ex(("127.0.0.1", a.port))
        sub = Sub(s, request)
        subs.append(sub)
        if err not in (0, 115):   # EINPROGRESS
            sub.verdict = "closed"
            s.close()
            continue
        sel.register(s, selectors.EVENT_WRITE | selectors.EVENT_READ, sub)
    pending = sum(1 for x in subs if x.verdict is None)
    deadline = time.monotonic() + a.timeout
    while pending and time.monotonic() < deadline:
        for key, ev in sel.select(timeout=0.2):
            sub = key.data
            try:
                if ev & selectors.EVENT_WRITE and sub.out:
                    n = sub.s.send(sub.out)
                    sub.out = sub.out[n:]
                    if not sub.out:
                        sel.modify(sub.s, selectors.EVENT_READ, sub)
                if ev & selectors.EVENT_READ:
                    d = sub.s.recv(65536)
                    if not d:
                        raise ConnectionResetError("eof")
                    sub.buf += d
                    sub.verdict = sub.classify()
            except OSError:
                sub.verdict = sub.classify() or "closed"
                sel.unregister(sub.s)
                sub.s.close()
                pending -= 1
                continue
            if sub.verdict is not None:
                sel.unregister(sub.s)   # kept open, as a browser keeps a connection alive
                pending -= 1
    for sub in subs:
        v = sub.verdict or "silent"
        counts[v if v in counts else "other"] += 1
    counts["examples"] = sorted({x.verdict for x in subs if x.verdict and
                                 x.verdict.startswith("other")})
    summary(a, counts)
    hold_forever()


# --- trickle ---------------------------------------------------------------------------

def cmd_trickle(a):
    src = sources(a)
    conns = []
    for i in range(a.count):
        s = connect("127.0.0.1", a.port, src[i % len(src)], 5)
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        s.setblocking(False)
        conns.append([s, time.monotonic(), None])   # socket, connected at, closed after
    end = time.monotonic() + a.max
    next_byte = time.monotonic() + a.interval
    while time.monotonic() < end and any(c[2] is None for c in conns):
        now = time.monotonic()
        for c in conns:
            if c[2] is not None:
                continue
            gone = peer_closed(c[0])
            if not gone and now >= next_byte:
                try:
                    c[0].send(b"a")
                except OSError:
                    gone = True
            if gone:
                c[2] = round(now - c[1], 2)
                c[0].close()
        if now >= next_byte:
            next_byte += a.interval
        time.sleep(0.05)
    closed = [c[2] for c in conns if c[2] is not None]
    print(json.dumps({"report": True, "closed": len(closed), "open": len(conns) - len(closed),
                      "seconds": closed}), flush=True)
    return 0


# --- keepalive -------------------------------------------------------------------------

def read_answer(s):
    """The status code of one HTTP/1.1 answer with a Content-Length body, or None."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        d = s.recv(4096)
        if not d:
            return None
        buf += d
    head, _, body = buf.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"content-length":
            length = int(v.strip())
    while len(body) < length:
        d = s.recv(4096)
        if not d:
            return None
        body += d
    status = head.split(b"\r\n", 1)[0].split(b" ")
    return int(status[1]) if len(status) > 1 and status[1].isdigit() else None


def cmd_keepalive(a):
    auth = "Authorization: Bearer %s\r\n" % a.token if a.token else ""
    request = ("GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n%s\r\n" % (a.path, auth)).encode()
    s = connect("127.0.0.1", a.port, loopback(a.source), 10)
    codes = []
    for i in range(2):
        if i:
            time.sleep(a.pause)
        try:
            s.sendall(request)
            codes.append(read_answer(s))
        except OSError:
            codes.append(None)
    print(json.dumps({"report": True, "first": codes[0], "second": codes[1]}), flush=True)
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("hold")
    c.add_argument("--port", type=int, required=True)
    c.add_argument("--count", type=int, required=True)
    c.add_argument("--sources", default="127.0.0.1")
    c.add_argument("--send", default="", help="text to send first (backslash escapes)")
    c.add_argument("--report-after", type=float)
    c.add_argument("--ready-file")
    c = sub.add_parser("relays")
    c.add_argument("--socks", type=int, required=True)
    c.add_argument("--dest-port", type=int, required=True)
    c.add_argument("--count", type=int, required=True)
    c.add_argument("--ready-file")
    c.add_argument("--check-file")
    c = sub.add_parser("sse")
    c.add_argument("--port", type=int, required=True)
    c.add_argument("--count", type=int, required=True)
    c.add_argument("--sources", default="127.0.0.1")
    c.add_argument("--path", default="/v1/connections/events")
    c.add_argument("--token", default="")
    c.add_argument("--timeout", type=float, default=10)
    c.add_argument("--ready-file")
    c = sub.add_parser("trickle")
    c.add_argument("--port", type=int, required=True)
    c.add_argument("--count", type=int, required=True)
    c.add_argument("--sources", default="127.0.0.1")
    c.add_argument("--interval", type=float, default=1.0)
    c.add_argument("--max", type=float, default=15.0)
    c = sub.add_parser("keepalive")
    c.add_argument("--port", type=int, required=True)
    c.add_argument("--count", type=int, default=1)
    c.add_argument("--source", default="127.0.0.1")
    c.add_argument("--path", default="/healthz")
    c.add_argument("--token", default="")
    c.add_argument("--pause", type=float, default=1.0)
    a = p.parse_args()
    if not 1 <= a.count <= 5000:
        die("--count must be 1..5000")
    sys.exit({"hold": cmd_hold, "relays": cmd_relays, "sse": cmd_sse, "trickle": cmd_trickle,
              "keepalive": cmd_keepalive}[a.cmd](a))


if __name__ == "__main__":
    main()
