#!/usr/bin/env python3
"""splice_relay.py --port P: a relay that only splices, for tests/bench/peers-bench.sh.

A SOCKS5 server on 127.0.0.1:P (no auth, CONNECT to a loopback IPv4 address only) that, once
connected, moves the bytes of both directions with splice(2) through a pipe per direction
(1 MiB each) and nothing else: no decryption, no metering. Its CPU seconds per GB are about
what the kernel charges a process for relaying those bytes on loopback, next to which a server
that splices (Vision's direct copy) is compared. Blocking calls, one thread per direction;
runs until killed."""

import argparse
import fcntl
import os
import socket
import struct
import sys
import threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from katest import recv_exact  # noqa: E402

PIPE_BYTES = 1 << 20
CHUNK = 1 << 20


def socks_accept(c):
    """The SOCKS5 greeting and CONNECT of C. @return the connected upstream socket."""
    ver, nmeth = recv_exact(c, 2)
    recv_exact(c, nmeth)
    if ver != 5:
        raise OSError("not SOCKS5")
    c.sendall(b"\x05\x00")
    ver, cmd, _, atyp = recv_exact(c, 4)
    if cmd != 1 or atyp != 1:
        raise OSError("only CONNECT to an IPv4 address")
    host = socket.inet_ntoa(recv_exact(c, 4))
    port = struct.unpack(">H", recv_exact(c, 2))[0]
    if not host.startswith("127."):
        raise OSError("loopback destinations only")
    u = socket.create_connection((host, port), 10)
    u.settimeout(None)
    c.sendall(b"\x05\x00\x00\x01" + socket.inet_aton("127.0.0.1") + b"\x00\x00")
    return u


def pump(src, dst):
    """splice src -> pipe -> dst until EOF; then half-close dst."""
    r, w = os.pipe()
    try:
        fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
        while True:
            n = os.splice(src.fileno(), w, CHUNK)
            if n == 0:
                break
            while n > 0:
                n -= os.splice(r, dst.fileno(), n)
    except OSError:
        pass
    finally:
        os.close(r)
        os.close(w)
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass


def serve(c):
    try:
        u = socks_accept(c)
    except (OSError, ValueError):
        c.close()
        return
    t = threading.Thread(target=pump, args=(u, c), daemon=True)
    t.start()
    pump(c, u)
    t.join()
    c.close()
    u.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, required=True)
    a = ap.parse_args()
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", a.port))
    ls.listen(16)
    while True:
        c, _ = ls.accept()
        threading.Thread(target=serve, args=(c,), daemon=True).start()


if __name__ == "__main__":
    main()
