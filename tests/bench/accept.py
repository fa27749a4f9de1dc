#!/usr/bin/env python3
"""Accept-rate load of the Shadowsocks many-users benchmark (issue 13, tests/bench/accept-bench.sh).

Our own Shadowsocks AEAD client (aes-256-gcm, PROTOCOLS.md section 2; the crypto of
tests/bench/ssusers.py) against katana at 127.0.0.1:PORT, each request to the echo server at
127.0.0.1:ECHO and checked:

  tcp --port P --echo-port E --passwords-file F --seconds S [--fresh 127.A.B.C]
      New connections, one after another, for S seconds: a 16-byte request, its echo, close.
      Without --fresh: a returning client (127.0.0.1, the first password). With --fresh: each
      connection from the next loopback address from 127.A.B.C on and with the next password of
      the file (never-seen clients: a new address and a user not matched before), until the file
      or the time runs out.
  udp (same options)
      Datagrams, one in flight: returning = one socket at 127.0.0.1 (one association), fresh =
      a new socket from the next address with the next password for each datagram.
  --pair-port P2 --pair-passwords-file F2 (returning clients only)
      Alternate each request with one to a second katana at 127.0.0.1:P2 (the 1-user reference,
      first password of F2), so both see the same host load; each rate counts only the time
      spent in its own requests.

Prints "<per second> <failures> <done>", and with --pair-port the same three for P2 after them.
Loopback only; every socket has a 5 s timeout.
"""
import argparse
import ipaddress
import os
import socket
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ssusers import Aead, master_key, recv_n  # noqa: E402

MSG = b"0123456789abcdef"


def addresses(first):
    """Loopback addresses from FIRST on, skipping .0 and .255 host bytes."""
    ip = ipaddress.ip_address(first)
    while True:
        if not ip.is_loopback:
            sys.exit("accept: ran out of loopback addresses")
        if ip.packed[3] not in (0, 255):
            yield str(ip)
        ip += 1


def target(a):
    return b"\x01\x7f\x00\x00\x01" + struct.pack(">H", a.echo_port)


def tcp_once(a, key, src):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(5)
        s.bind((src, 0))
        s.connect(("127.0.0.1", a.port))
        salt = os.urandom(32)
        up = Aead(key, salt)
        hdr = target(a) + MSG
        s.sendall(salt + up.seal(struct.pack(">H", len(hdr))) + up.seal(hdr))
        down = Aead(key, recv_n(s, 32))
        n = struct.unpack(">H", down.open(recv_n(s, 18)))[0]
        return down.open(recv_n(s, n + 16)) == MSG


def udp_once(a, key, sock):
    salt = os.urandom(32)
    sock.send(salt + Aead(key, salt).seal(target(a) + MSG))
    d = sock.recv(2048)
    reply = Aead(key, d[:32]).open(d[32:])
    return reply.endswith(MSG)


def first_password(path):
    with open(path) as f:
        return next(line.strip() for line in f if line.strip())


def udp_socket(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(5)
    s.bind(("127.0.0.1", 0))
    s.connect(("127.0.0.1", port))
    return s


def run_pair(a):
    """Returning requests alternating between --port and --pair-port (see the module text)."""
    b = argparse.Namespace(**vars(a))
    b.port = a.pair_port
    sides = [[a, master_key(first_password(a.passwords_file)), 0, 0, 0.0],
             [b, master_key(first_password(a.pair_passwords_file)), 0, 0, 0.0]]
    socks = [udp_socket(a.port), udp_socket(b.port)] if a.cmd == "udp" else [None, None]
    stop = time.monotonic() + a.seconds
    turn = 0
    while time.monotonic() < stop:
        for k in (turn, 1 - turn):
            side = sides[k]
            t = time.monotonic()
            try:
                if a.cmd == "tcp":
                    ok = tcp_once(side[0], side[1], "127.0.0.1")
                else:
                    ok = udp_once(side[0], side[1], socks[k])
            except Exception:  # as in run()
                ok = False
            side[4] += time.monotonic() - t
            side[2] += ok
            side[3] += not ok
        turn = 1 - turn
    for s in socks:
        if s is not None:
            s.close()
    print(" ".join("%.1f %d %d" % (d / t if t > 0 else 0, f, d) for _, _, d, f, t in sides))


def run(a):
    if a.pair_port:
        if a.fresh:
            sys.exit("accept: --pair-port is for returning clients only")
        return run_pair(a)
    with open(a.passwords_file) as f:
        passwords = [line.strip() for line in f if line.strip()]
    keys = (master_key(pw) for pw in passwords)
    srcs = addresses(a.fresh) if a.fresh else None
    first = master_key(passwords[0])
    done = fails = 0
    usock = None
    if a.cmd == "udp" and not a.fresh:
        usock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        usock.settimeout(5)
        usock.bind(("127.0.0.1", 0))
        usock.connect(("127.0.0.1", a.port))
    t0 = time.monotonic()
    stop = t0 + a.seconds
    while time.monotonic() < stop:
        if a.fresh:
            key = next(keys, None)
            if key is None:
                break
            src = next(srcs)
        else:
            key, src = first, "127.0.0.1"
        try:
            if a.cmd == "tcp":
                ok = tcp_once(a, key, src)
            elif usock is not None:
                ok = udp_once(a, key, usock)
            else:
                with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                    s.settimeout(5)
                    s.bind((src, 0))
                    s.connect(("127.0.0.1", a.port))
                    ok = udp_once(a, key, s)
        except Exception:  # OSError (a timeout, a reset), InvalidTag, a short reply
            ok = False
        done += ok
        fails += not ok
    print("%.1f %d %d" % (done / (time.monotonic() - t0), fails, done))


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("tcp", "udp"):
        c = sub.add_parser(name)
        c.add_argument("--port", type=int, required=True)
        c.add_argument("--echo-port", type=int, required=True)
        c.add_argument("--passwords-file", required=True)
        c.add_argument("--seconds", type=float, default=3)
        c.add_argument("--fresh", help="first loopback source address of never-seen clients")
        c.add_argument("--pair-port", type=int, help="a reference katana to alternate with")
        c.add_argument("--pair-passwords-file", help="its returning client's password")
    run(p.parse_args())


if __name__ == "__main__":
    main()
