#!/usr/bin/env python3
"""TLS 1.3 inner traffic for XTLS Vision tests (issue 11, PROTOCOLS-2.md §2): Vision only
switches to direct copy when the proxied stream is TLS 1.3, so the far end and the client here
speak TLS end to end through the proxy.

  server --port P --cert C --key K --ready-file F
      TLS 1.3 on 127.0.0.1:P. Each connection sends a 9-byte request: 'E', 'D' or 'H' and a u64 n.
      'E': echo n bytes back; 'D': send n bytes of the pattern; then close.
      'H' (half-close, client first): answer one byte, read n bytes, then the raw socket until
      its end (the client's FIN), print "TLSPEER half N bytes then EOF (K more)" (N the bytes
      read, K the raw bytes after them), then send ANSWER bytes of the pattern and close.
  client --socks S --dest-port P --mode echo|down|half --bytes N --seed X [--metrics URL]
      SOCKS5 CONNECT through 127.0.0.1:S to 127.0.0.1:P, TLS (no verification: a test CA is not
      the point), then the request; checks the answer byte for byte (echo: the first KiB alone,
      its echo awaited, then the rest while reading). Prints
      "TLSPEER ok RAW_UP RAW_DOWN": the TLS bytes that crossed the SOCKS connection each way
      (what the proxy's outbound carried: handshake and records included).
      half: after the one-byte answer, sends n bytes, waits 0.5 s, reads the proxy's
      katana_vision_splice_bytes_total from URL (GET /metrics), half-closes its socket
      (shutdown SHUT_WR) and reads until the end; then polls the counter for up to 5 s until it
      moves, and reads it again 1 s later. Prints "TLSPEER half RAW_UP RAW_DOWN ANSWER
      SPLICED": ANSWER the answer bytes that arrived whole and in order, SPLICED the counter's
      rise after the half-close. Exit 0 unless the handshake or the upload failed.
Loopback only; every socket has a timeout.
"""
import argparse
import hashlib
import socket
import ssl
import struct
import sys
import threading
import time
import urllib.request

ANSWER = 256 * 1024  # the 'H' answer: 256 KiB


def pattern(seed, n):
    out, i = bytearray(), 0
    while len(out) < n:
        out += hashlib.sha256(("%s:%d" % (seed, i)).encode()).digest() * 64
        i += 1
    return bytes(out[:n])


def serve_one(conn, ctx):
    try:
        conn.settimeout(60)
        with ctx.wrap_socket(conn, server_side=True) as t:
            head = b""
            while len(head) < 9:
                c = t.recv(9 - len(head))
                if not c:
                    return
                head += c
            mode, n = head[:1], struct.unpack(">Q", head[1:])[0]
            if mode == b"E":
                left = n
                while left > 0:
                    c = t.recv(min(65536, left))
                    if not c:
                        return
                    t.sendall(c)
                    left -= len(c)
            elif mode == b"H":
                t.sendall(b"A")
                left = n
                while left > 0:
                    c = t.recv(min(65536, left))
                    if not c:
                        break
                    left -= len(c)
                # then the raw socket up to its end: a proxy's client may send bytes that are not
                # of this TLS stream as it closes (Xray's and sing-box's Vision clients: their
                # outer TLS close_notify, 24 bytes, into the raw stream)
                extra = 0
                while True:
                    c = socket.socket.recv(t, 65536)
                    if not c:
                        break
                    extra += len(c)
                print("TLSPEER half %d bytes then EOF (%d more)" % (n - left, extra), flush=True)
                t.sendall(pattern("down", ANSWER))
            elif mode == b"D":
                block = pattern("down", 1 << 20)
                left = n
                while left > 0:
                    k = min(left, len(block))
                    t.sendall(block[:k])
                    left -= k
            try:
                t.unwrap()
            except (OSError, ssl.SSLError):
                pass
    except (OSError, ssl.SSLError):
        pass
    finally:
        conn.close()


def cmd_server(a):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    ctx.load_cert_chain(a.cert, a.key)
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", a.port))
    ls.listen(64)
    ls.settimeout(None)  # serves until its caller stops it, however long before the first client
    open(a.ready_file, "w").write("ready\n")
    while True:
        c, _ = ls.accept()
        threading.Thread(target=serve_one, args=(c, ctx), daemon=True).start()


def socks_connect(port, dest_port, timeout):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.sendall(b"\x05\x01\x00")
    if s.recv(2) != b"\x05\x00":
        raise OSError("SOCKS5: no method accepted")
    s.sendall(b"\x05\x01\x00\x01" + socket.inet_aton("127.0.0.1") + struct.pack(">H", dest_port))
    r = b""
    while len(r) < 10:
        c = s.recv(10 - len(r))
        if not c:
            raise OSError("SOCKS5: closed")
        r += c
    if r[1] != 0:
        raise OSError("SOCKS5: reply %d" % r[1])
    return s


class Tls:
    """TLS over a socket through memory BIOs, counting the raw bytes each way."""

    def __init__(self, sock):
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        ctx.minimum_version = ssl.TLSVersion.TLSv1_3
        self.inc, self.outg = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.obj = ctx.wrap_bio(self.inc, self.outg, server_hostname="localhost")
        self.sock = sock
        self.up = self.down = 0
        self.lock = threading.Lock()

    def _flush(self):
        data = self.outg.read()
        if data:
            self.sock.sendall(data)
            self.up += len(data)

    def _fill(self):
        c = self.sock.recv(65536)
        if not c:
            self.inc.write_eof()
            return False
        self.down += len(c)
        self.inc.write(c)
        return True

    def handshake(self):
        while True:
            try:
                self.obj.do_handshake()
                self._flush()
                return
            except ssl.SSLWantReadError:
                self._flush()
                if not self._fill():
                    raise OSError("closed during the handshake")

    def send(self, data):
        with self.lock:
            self.obj.write(data)
            self._flush()

    def recv(self):
        while True:
            try:
                with self.lock:
                    return self.obj.read(65536)
            except ssl.SSLWantReadError:
                if not self._fill():
                    return b""
            except ssl.SSLZeroReturnError:
                return b""


def splice_bytes(url):
    """katana_vision_splice_bytes_total from the API's GET /metrics."""
    with urllib.request.urlopen(url, timeout=10) as r:
        for line in r.read().decode().splitlines():
            f = line.split()
            if len(f) == 2 and f[0] == "katana_vision_splice_bytes_total":
                return int(f[1])
    raise OSError("no katana_vision_splice_bytes_total in " + url)


def half_client(s, t, n, seed, url):
    """The 'H' exchange: upload n bytes, half-close, read the answer (see the module doc)."""
    t.send(b"H" + struct.pack(">Q", n))
    ack = b""
    while not ack:
        ack = t.recv()
        if not ack:
            raise OSError("closed before the answer to 'H'")
    data = pattern(seed, n)
    for i in range(0, n, 16384):
        t.send(data[i:i + 16384])
    time.sleep(0.5)
    before = splice_bytes(url)
    s.shutdown(socket.SHUT_WR)
    got = bytearray()
    try:
        while True:
            c = t.recv()
            if not c:
                break
            got += c
    except (OSError, ssl.SSLError):
        pass
    want = pattern("down", ANSWER)
    whole = 0
    while whole < len(got) and whole < len(want) and got[whole] == want[whole]:
        whole += 1
    after = before
    for _ in range(50):
        after = splice_bytes(url)
        if after != before:
            time.sleep(1.0)  # the rest of what it moves
            after = splice_bytes(url)
            break
        time.sleep(0.1)
    s.close()
    print("TLSPEER half %d %d %d %d" % (t.up, t.down, whole, after - before))
    return 0


def cmd_client(a):
    s = socks_connect(a.socks, a.dest_port, 30)
    t = Tls(s)
    t.handshake()
    n = a.bytes
    if a.mode == "half":
        return half_client(s, t, n, a.seed, a.metrics)
    mode = b"E" if a.mode == "echo" else b"D"
    t.send(mode + struct.pack(">Q", n))
    err = []
    got = hashlib.sha256()
    ref = hashlib.sha256()
    total = 0
    if a.mode == "echo":
        want = pattern(a.seed, n)
        # A first piece alone, its echo awaited before the bulk: each Vision side then reads a
        # write of whole TLS records, on which it may switch to direct (PROTOCOLS-2.md §2.5),
        # instead of bulk records cut by its reads.
        first = min(n, 1024)
        t.send(want[:first])
        while total < first:
            c = t.recv()
            if not c:
                break
            got.update(c)
            total += len(c)
        def sender():
            try:
                for i in range(first, n, 16384):
                    t.send(want[i:i + 16384])
            except OSError as e:
                err.append(e)
        th = threading.Thread(target=sender, daemon=True)
        th.start()
    else:
        want = pattern("down", 1 << 20)
    while total < n:
        c = t.recv()
        if not c:
            break
        got.update(c)
        total += len(c)
    if a.mode == "echo":
        ref.update(want)
    else:
        left = n
        while left > 0:
            k = min(left, len(want))
            ref.update(want[:k])
            left -= k
    s.close()
    if err or total != n or got.digest() != ref.digest():
        print("TLSPEER bad: got %d of %d bytes, %s" % (total, n,
              "differ" if total == n else "short"))
        return 1
    print("TLSPEER ok %d %d" % (t.up, t.down))
    return 0


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    sv = sub.add_parser("server")
    sv.add_argument("--port", type=int, required=True)
    sv.add_argument("--cert", required=True)
    sv.add_argument("--key", required=True)
    sv.add_argument("--ready-file", required=True)
    cl = sub.add_parser("client")
    cl.add_argument("--socks", type=int, required=True)
    cl.add_argument("--dest-port", type=int, required=True)
    cl.add_argument("--mode", choices=["echo", "down", "half"], default="echo")
    cl.add_argument("--metrics", help="half: the proxy's GET /metrics URL")
    cl.add_argument("--bytes", type=int, required=True)
    cl.add_argument("--seed", default="x")
    a = p.parse_args()
    socket.setdefaulttimeout(60)
    sys.exit(cmd_server(a) if a.cmd == "server" else cmd_client(a))


if __name__ == "__main__":
    main()
