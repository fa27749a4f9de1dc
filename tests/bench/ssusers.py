#!/usr/bin/env python3
"""Load tools of the Shadowsocks many-users benchmark (issue 13, tests/bench/ssusers-bench.sh).

  tcp-rate --port P --seconds S [--threads K]
      New connections per second through a port forward (ss-tunnel): each connection sends
      16 bytes, waits for their echo and closes. Prints "<conns/s> <failures> <conns>".
  udp-rate --port P --seconds S [--window W]
      Datagrams per second echoed through a UDP port forward (ss-tunnel -u), W in flight.
      Prints "<datagrams/s> <lost> <datagrams>".
  first-echo --port P --password PW [--password PW ...] --src 127.0.0.N [--repeat R]
      Our own Shadowsocks AEAD client (aes-256-gcm, PROTOCOLS.md section 2) to a server at
      127.0.0.1:P, one connection per password from source address --src (with --fresh, each
      password from the next address: never-seen clients when the addresses are new), to the echo
      server --echo-port: the time from sending the first chunk to the echo's first byte, ms,
      one line per connection ("timeout" after 10 s). --repeat R connects R times per password
      (returning clients).
  echo-lat --port P --seconds S [--interval-ms I]
      One established connection through a port forward (ss-tunnel): every I ms (default 10) a
      64-byte message, timed until its echo is back (30 s at most: the flow then ends there).
      Prints "<p50> <p99> <max> <count>" in ms;
      with --series FILE also "<t_since_start_ms> <rtt_ms>" per message into FILE.
  junk --port P --seconds S [--tcp-rate R] [--udp-rate U] [--src 127.0.N.M]
      Junk at the server 127.0.0.1:P from --src: R connections per second that send 50 random
      bytes (kept open until the end: the server drains them) and U random datagrams (60 to
      200 bytes) per second. Prints "<connections> <datagrams>".
  burst --port P --echo-port E --src 127.0.N.M --password PW [--password PW ...]
      Every password at once (one thread each, each from its own next address: never-seen
      clients), our own client as first-echo; prints "<ok> <failed> <slowest ms>".

Loopback only; every socket has a timeout.
"""
import argparse
import hashlib
import os
import socket
import struct
import sys
import threading
import time

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF


def loopback(host):
    if not host.startswith("127."):
        sys.exit("ssusers: %s is not a loopback address" % host)
    return host


def tcp_rate(a):
    stop = time.monotonic() + a.seconds
    counts = [0] * a.threads
    fails = [0] * a.threads
    msg = b"0123456789abcdef"

    def run(k):
        while time.monotonic() < stop:
            try:
                with socket.create_connection(("127.0.0.1", a.port), timeout=5) as s:
                    s.sendall(msg)
                    got = b""
                    while len(got) < len(msg):
                        d = s.recv(64)
                        if not d:
                            break
                        got += d
                    if got == msg:
                        counts[k] += 1
                    else:
                        fails[k] += 1
            except OSError:
                fails[k] += 1
    t0 = time.monotonic()
    ts = [threading.Thread(target=run, args=(k,)) for k in range(a.threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    print("%.0f %d %d" % (sum(counts) / (time.monotonic() - t0), sum(fails), sum(counts)))


def udp_rate(a):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.connect(("127.0.0.1", a.port))
    s.settimeout(1)
    got = lost = 0
    seq = 0
    t0 = time.monotonic()
    stop = t0 + a.seconds
    inflight = 0
    while time.monotonic() < stop:
        while inflight < a.window:
            s.send(struct.pack(">I", seq) + b"x" * 60)
            seq += 1
            inflight += 1
        try:
            s.recv(2048)
            got += 1
            inflight -= 1
        except socket.timeout:
            lost += inflight
            inflight = 0
    print("%.0f %d %d" % (got / (time.monotonic() - t0), lost, got))


def master_key(password, n=32):
    out, prev = b"", b""
    while len(out) < n:
        prev = hashlib.md5(prev + password.encode()).digest()
        out += prev
    return out[:n]


class Aead:
    def __init__(self, key, salt):
        sub = HKDF(algorithm=hashes.SHA1(), length=32, salt=salt, info=b"ss-subkey").derive(key)
        self.c = AESGCM(sub)
        self.n = 0

    def nonce(self):
        v = self.n.to_bytes(12, "little")
        self.n += 1
        return v

    def seal(self, p):
        return self.c.encrypt(self.nonce(), p, None)

    def open(self, p):
        return self.c.decrypt(self.nonce(), p, None)


def recv_n(s, n):
    b = b""
    while len(b) < n:
        d = s.recv(n - len(b))
        if not d:
            raise OSError("closed")
        b += d
    return b


def first_echo(a):
    src = [int(x) for x in loopback(a.src).split(".")]
    for i, pw in enumerate(a.password):
        ip = "127.%d.%d.%d" % (src[1], src[2], src[3] + (i if a.fresh else 0))
        key = master_key(pw)
        for _ in range(a.repeat):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.settimeout(10)
            s.bind((ip, 0))
            s.connect(("127.0.0.1", a.port))
            salt = os.urandom(32)
            up = Aead(key, salt)
            hdr = b"\x01\x7f\x00\x00\x01" + struct.pack(">H", a.echo_port) + b"ping"
            wire = salt + up.seal(struct.pack(">H", len(hdr))) + up.seal(hdr)
            t0 = time.perf_counter()
            try:
                s.sendall(wire)
                rsalt = recv_n(s, 32)
                t1 = time.perf_counter()
                down = Aead(key, rsalt)
                n = struct.unpack(">H", down.open(recv_n(s, 18)))[0]
                if down.open(recv_n(s, n + 16)) != b"ping"[:n]:
                    sys.exit("ssusers: wrong echo")
                print("%.3f" % ((t1 - t0) * 1000))
            except OSError:
                print("timeout")
            finally:
                s.close()


def echo_lat(a):
    s = socket.create_connection(("127.0.0.1", a.port), timeout=5)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.settimeout(30)  # a stalled server shows as a long echo, not as an error
    msg = b"x" * 64
    rtts, series = [], []
    t_start = time.monotonic()
    stop = t_start + a.seconds
    nxt = t_start
    while time.monotonic() < stop:
        t0 = time.perf_counter()
        try:
            s.sendall(msg)
            got = 0
            while got < len(msg):
                d = s.recv(len(msg) - got)
                if not d:
                    raise OSError("closed")
                got += len(d)
        except OSError as e:
            sys.stderr.write("ssusers: the established flow failed: %s\n" % e)
            rtts.append((time.perf_counter() - t0) * 1000)
            break
        rtt = (time.perf_counter() - t0) * 1000
        rtts.append(rtt)
        series.append(((time.monotonic() - t_start) * 1000, rtt))
        nxt += a.interval_ms / 1000
        pause = nxt - time.monotonic()
        if pause > 0:
            time.sleep(pause)
    s.close()
    rtts.sort()
    pick = lambda q: rtts[min(len(rtts) - 1, int(q * len(rtts)))]
    if a.series:
        with open(a.series, "w") as f:
            for t, r in series:
                f.write("%.1f %.3f\n" % (t, r))
    print("%.2f %.2f %.2f %d" % (pick(0.5), pick(0.99), rtts[-1], len(rtts)))


def junk(a):
    src = loopback(a.src)
    held, conns, dgrams = [], 0, 0
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.bind((src, 0))
    t0 = time.monotonic()
    stop = t0 + a.seconds
    while True:
        now = time.monotonic()
        if now >= stop:
            break
        while conns < (now - t0) * a.tcp_rate:
            try:
                c = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                c.settimeout(2)
                c.bind((src, 0))
                c.connect(("127.0.0.1", a.port))
                c.sendall(os.urandom(50))
                held.append(c)
            except OSError:
                pass
            conns += 1
        while dgrams < (now - t0) * a.udp_rate:
            u.sendto(os.urandom(60 + dgrams % 141), ("127.0.0.1", a.port))
            dgrams += 1
        time.sleep(0.005)
    for c in held:
        c.close()
    print("%d %d" % (conns, dgrams))


def burst(a):
    src = [int(x) for x in loopback(a.src).split(".")]
    res = [None] * len(a.password)
    go = threading.Event()

    def one(i, pw):
        ip = "127.%d.%d.%d" % (src[1], src[2], src[3] + i)
        key = master_key(pw)
        try:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.settimeout(10)
            s.bind((ip, 0))
            s.connect(("127.0.0.1", a.port))
            salt = os.urandom(32)
            up = Aead(key, salt)
            hdr = b"\x01\x7f\x00\x00\x01" + struct.pack(">H", a.echo_port) + b"ping"
            wire = salt + up.seal(struct.pack(">H", len(hdr))) + up.seal(hdr)
            go.wait()
            t0 = time.perf_counter()
            s.sendall(wire)
            recv_n(s, 32)
            res[i] = (time.perf_counter() - t0) * 1000
            s.close()
        except OSError:
            res[i] = None
    ts = [threading.Thread(target=one, args=(i, pw)) for i, pw in enumerate(a.password)]
    for t in ts:
        t.start()
    time.sleep(0.5)  # every connection open: then all first chunks at once
    go.set()
    for t in ts:
        t.join()
    ok = [r for r in res if r is not None]
    print("%d %d %.1f" % (len(ok), len(res) - len(ok), max(ok) if ok else -1))


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("tcp-rate")
    c.add_argument("--port", type=int, required=True)
    c.add_argument("--seconds", type=float, default=5)
    c.add_argument("--threads", type=int, default=4)
    c = sub.add_parser("udp-rate")
    c.add_argument("--port", type=int, required=True)
    c.add_argument("--seconds", type=float, default=5)
    c.add_argument("--window", type=int, default=4)
    c = sub.add_parser("first-echo")
    c.add_argument("--port", type=int, required=True)
    c.add_argument("--echo-port", type=int, required=True)
    c.add_argument("--password", action="append", required=True)
    c.add_argument("--src", default="127.0.0.1")
    c.add_argument("--fresh", action="store_true", help="each password from the next address")
    c.add_argument("--repeat", type=int, default=1)
    c = sub.add_parser("echo-lat")
    c.add_argument("--port", type=int, required=True)
    c.add_argument("--seconds", type=float, default=5)
    c.add_argument("--interval-ms", type=float, default=10)
    c.add_argument("--series")
    c = sub.add_parser("junk")
    c.add_argument("--port", type=int, required=True)
    c.add_argument("--seconds", type=float, default=5)
    c.add_argument("--tcp-rate", type=float, default=20)
    c.add_argument("--udp-rate", type=float, default=50)
    c.add_argument("--src", default="127.0.5.1")
    c = sub.add_parser("burst")
    c.add_argument("--port", type=int, required=True)
    c.add_argument("--echo-port", type=int, required=True)
    c.add_argument("--password", action="append", required=True)
    c.add_argument("--src", default="127.0.6.1")
    a = p.parse_args()
    {"tcp-rate": tcp_rate, "udp-rate": udp_rate, "first-echo": first_echo, "echo-lat": echo_lat,
     "junk": junk, "burst": burst}[a.cmd](a)


if __name__ == "__main__":
    main()
