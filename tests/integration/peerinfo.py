#!/usr/bin/env python3
"""Socket policy test helpers (issue 13), loopback only.

  serve  --port P --ready-file F      TCP and UDP on 127.0.0.1:P answering "PEER <ip>" with the
                                      address the flow came from; a TCP connection stays open
                                      until its client closes it
  ask    --socks S --dest-port P [--udp] [--hold SEC --ready-file F]
                                      through a SOCKS5 client, print the PEER line; --hold keeps
                                      the TCP flow open SEC seconds after writing the ready file
  sockopt --pid PID --dport P         as root: take (pidfd_getfd) PID's TCP socket connected to
                                      127.0.0.1:P and print its options (mark, nodelay,
                                      keepalive, idle, intvl, cnt, device, src)
"""
import argparse
import ctypes
import os
import socket
import struct
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import katest  # noqa: E402

SO_MARK = 36
SO_BINDTODEVICE = 25
SYS_PIDFD_OPEN = 434
SYS_PIDFD_GETFD = 438


def _serve_tcp(ls):
    while True:
        c, peer = ls.accept()

        def one(c=c, peer=peer):
            try:
                c.sendall(("PEER %s\n" % peer[0]).encode())
                while c.recv(4096):
                    pass
            except OSError:
                pass
            c.close()
        threading.Thread(target=one, daemon=True).start()


def _serve_udp(us):
    while True:
        _, peer = us.recvfrom(2048)
        us.sendto(("PEER %s\n" % peer[0]).encode(), peer)


def cmd_serve(a):
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", a.port))
    ls.listen(64)
    us = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    us.bind(("127.0.0.1", a.port))
    threading.Thread(target=_serve_tcp, args=(ls,), daemon=True).start()
    threading.Thread(target=_serve_udp, args=(us,), daemon=True).start()
    katest.touch(a.ready_file)
    while True:
        time.sleep(3600)


def cmd_ask(a):
    if a.udp:
        ctl, bhost, bport = katest.socks_open(a.socks, 3, "0.0.0.0", 0, 5)
        if bhost in ("0.0.0.0", "::"):
            bhost = "127.0.0.1"
        katest.require_loopback(bhost)
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        u.bind(("127.0.0.1", 0))
        u.settimeout(1.0)
        for _ in range(5):
            u.sendto(katest.udp_wrap("127.0.0.1", a.dest_port, b"who"), (bhost, bport))
            try:
                d, _ = u.recvfrom(2048)
            except socket.timeout:
                continue
            print(katest.udp_unwrap(d).decode().strip())
            ctl.close()
            return 0
        ctl.close()
        print("NO ANSWER")
        return 1
    s, _, _ = katest.socks_open(a.socks, 1, "127.0.0.1", a.dest_port, 5)
    s.settimeout(5)
    line = b""
    while not line.endswith(b"\n"):
        d = s.recv(256)
        if not d:
            break
        line += d
    print(line.decode().strip() or "NO ANSWER", flush=True)
    if a.hold:
        katest.touch(a.ready_file)
        time.sleep(a.hold)
    s.close()
    return 0 if line else 1


def _inode_of(dport):
    """The inode of the established TCP socket whose remote end is 127.0.0.1:dport."""
    want = "0100007F:%04X" % dport
    with open("/proc/net/tcp") as f:
        for row in f.readlines()[1:]:
            col = row.split()
            if col[2] == want and col[3] == "01":
                return col[9], col[1]
    return None, None


def cmd_sockopt(a):
    inode, local = _inode_of(a.dport)
    if inode is None:
        print("NO SOCKET")
        return 1
    target = "socket:[%s]" % inode
    fdnum = None
    for fd in os.listdir("/proc/%d/fd" % a.pid):
        try:
            if os.readlink("/proc/%d/fd/%s" % (a.pid, fd)) == target:
                fdnum = int(fd)
        except OSError:
            pass
    if fdnum is None:
        print("NO SOCKET IN PROCESS")
        return 1
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    pidfd = libc.syscall(SYS_PIDFD_OPEN, a.pid, 0)
    mine = libc.syscall(SYS_PIDFD_GETFD, pidfd, fdnum, 0) if pidfd >= 0 else -1
    if mine < 0:
        print("pidfd_getfd failed: %s" % os.strerror(ctypes.get_errno()))
        return 1
    s = socket.socket(fileno=mine)
    dev = s.getsockopt(socket.SOL_SOCKET, SO_BINDTODEVICE, 16).split(b"\0")[0].decode()
    ip = socket.inet_ntoa(struct.pack("<I", int(local.split(":")[0], 16)))
    print("mark=%d nodelay=%d keepalive=%d idle=%d intvl=%d cnt=%d device=%s src=%s" % (
        s.getsockopt(socket.SOL_SOCKET, SO_MARK),
        s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY),
        s.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE),
        s.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE),
        s.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL),
        s.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT),
        dev or "-", ip))
    s.detach()
    os.close(mine)
    os.close(pidfd)
    return 0


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("serve")
    c.add_argument("--port", type=int, required=True)
    c.add_argument("--ready-file", required=True)
    c = sub.add_parser("ask")
    c.add_argument("--socks", type=int, required=True)
    c.add_argument("--dest-port", type=int, required=True)
    c.add_argument("--udp", action="store_true")
    c.add_argument("--hold", type=float, default=0)
    c.add_argument("--ready-file")
    c = sub.add_parser("sockopt")
    c.add_argument("--pid", type=int, required=True)
    c.add_argument("--dport", type=int, required=True)
    a = p.parse_args()
    return {"serve": cmd_serve, "ask": cmd_ask, "sockopt": cmd_sockopt}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
