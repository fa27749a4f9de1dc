#!/usr/bin/env python3
"""Hold many live flows through katana (issue 13 "Scale benchmarks", tests/bench/conns-bench.sh).

  hold --port P --uuid U --count N [--per-conn K] --ready-file F [--stall S] [--max-secs S]
      A sink listening on 127.0.0.1 (a free port) and N flows through katana's clear VLESS node
      at 127.0.0.1:P (PROTOCOLS.md section 5), each to the sink with 8 bytes of payload: one
      request per connection (K = 1), or K Mux.Cool sessions per connection (command 3, section
      7), so that N flows cost katana N + N / K descriptors instead of 2 N. A flow counts as open
      once the sink has read its 8 bytes (katana dialled it and relayed them).
      Writes {"open": O, "failed": X, "seconds": S} to F (and stdout) once every request is
      answered or failed (or nothing moved for --stall seconds), then holds every connection until killed (SIGTERM) or --max-secs.

One process, one epoll loop, non-blocking sockets; at most 256 connects in flight. Loopback
only. The caller raises RLIMIT_NOFILE (each flow needs a descriptor here, each connection one).
"""
import argparse
import json
import os
import selectors
import signal
import socket
import struct
import sys
import time
import uuid

PAYLOAD = b"katflow!"
IN_FLIGHT = 256


def hold(a):
    sink = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sink.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sink.bind(("127.0.0.1", 0))
    sink.listen(4096)
    sink.setblocking(False)
    sink_port = sink.getsockname()[1]
    head = b"\x00" + uuid.UUID(a.uuid).bytes + b"\x00"
    dest = struct.pack(">H", sink_port) + b"\x01" + socket.inet_aton("127.0.0.1")

    def request(k):
        """The bytes of client connection k: one flow (command 1), or Mux.Cool New frames
        (command 3, PROTOCOLS.md section 7.2) with the payload, one per session."""
        n = min(a.per_conn, a.count - k * a.per_conn)
        if a.per_conn == 1:
            return head + b"\x01" + dest + PAYLOAD
        frames = b"".join(struct.pack(">HHBBB", 4 + 1 + len(dest), sid, 1, 1, 1) + dest +
                          struct.pack(">H", len(PAYLOAD)) + PAYLOAD for sid in range(1, n + 1))
        return head + b"\x03" + frames

    sel = selectors.DefaultSelector()
    sel.register(sink, selectors.EVENT_READ, ("listen", None))
    clients, accepted = [], []
    started = 0
    opened = failed = 0
    got = {}             # accepted socket -> bytes read so far
    t0 = time.monotonic()
    deadline = t0 + a.max_secs

    def start_one():
        nonlocal started, failed
        k = len(clients)
        n = min(a.per_conn, a.count - k * a.per_conn)
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        clients.append(s)
        started += n
        err = s.connect_ex(("127.0.0.1", a.port))
        if err not in (0, 115):  # EINPROGRESS
            failed += n
            s.close()
            return
        sel.register(s, selectors.EVENT_WRITE, ("client", k))

    progress, last = 0, time.monotonic()
    while opened + failed < a.count and time.monotonic() < min(deadline, last + a.stall):
        while started < a.count and started - opened - failed < IN_FLIGHT:
            start_one()
        if opened + failed != progress:
            progress, last = opened + failed, time.monotonic()
        for key, ev in sel.select(timeout=1):
            kind, k = key.data
            s = key.fileobj
            if kind == "listen":
                while True:
                    try:
                        c, _ = s.accept()
                    except BlockingIOError:
                        break
                    c.setblocking(False)
                    accepted.append(c)
                    got[c] = 0
                    sel.register(c, selectors.EVENT_READ, ("sink", None))
            elif kind == "client":
                sel.unregister(s)
                req = request(k)
                n = min(a.per_conn, a.count - k * a.per_conn)
                try:
                    if s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) != 0:
                        raise OSError("connect failed")
                    s.setblocking(True)
                    s.settimeout(10)
                    s.sendall(req)
                    s.setblocking(False)
                except OSError:
                    failed += n
            else:
                try:
                    d = s.recv(64)
                except OSError:
                    d = b""
                if not d:
                    sel.unregister(s)
                    failed += 1   # katana closed it before its payload came
                    continue
                got[s] += len(d)
                if got[s] >= len(PAYLOAD):
                    sel.unregister(s)   # open: nothing more is read from it
                    opened += 1
    summary = {"open": opened, "failed": a.count - opened,
               "seconds": round(time.monotonic() - t0, 2)}
    text = json.dumps(summary)
    print(text, flush=True)
    if a.ready_file:
        with open(a.ready_file + ".tmp", "w") as f:
            f.write(text + "\n")
        os.rename(a.ready_file + ".tmp", a.ready_file)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while time.monotonic() < deadline:
        time.sleep(0.5)
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("hold")
    c.add_argument("--port", type=int, required=True, help="katana's clear VLESS node")
    c.add_argument("--uuid", required=True)
    c.add_argument("--count", type=int, default=10000)
    c.add_argument("--per-conn", type=int, default=1,
                   help="flows per client connection: 1 = plain VLESS, more = Mux.Cool sessions "
                        "(at most 128)")
    c.add_argument("--ready-file")
    c.add_argument("--stall", type=float, default=15)
    c.add_argument("--max-secs", type=float, default=600)
    a = p.parse_args()
    return hold(a)


if __name__ == "__main__":
    sys.exit(main())
