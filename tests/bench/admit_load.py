#!/usr/bin/env python3
"""admit_load: load for tests/bench/admit-bench.sh (issue 33; stdlib only, loopback only).

  rtt --socks P --dest-port D --count N [--timeout S]
        N SOCKS5 CONNECTs through a local client (ss-local) one after the other, each with one
        8-byte round trip to the echo server. Prints the median and slowest time from connect
        to the echo, in ms, and how many failed.
  tls --port P --password PW --dest-port D --count N --cycles C --pid PID [--settle S]
        C cycles of N Trojan-over-TLS connections (TLS handshake, the Trojan request to the
        echo server at D, one round trip each), all held, then closed. Per cycle the RSS of
        process PID (/proc/PID/status VmRSS) with them open and S seconds after katana closed
        them (its descriptors back to their idle count).
"""

import argparse
import hashlib
import os
import resource
import socket
import ssl
import struct
import sys
import time


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def fds(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def recv_exact(s, n):
    buf = b""
    while len(buf) < n:
        d = s.recv(n - len(buf))
        if not d:
            raise IOError("closed")
        buf += d
    return buf


def socks_rtt(port, dest_port, i, timeout):
    t0 = time.monotonic()
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(b"\x05\x01\x00")
        if recv_exact(s, 2) != b"\x05\x00":
            raise IOError("no-auth refused")
        s.sendall(b"\x05\x01\x00\x01" + socket.inet_aton("127.0.0.1") + struct.pack("!H", dest_port))
        if recv_exact(s, 10)[1] != 0:
            raise IOError("refused")
        probe = struct.pack("!Q", i)
        s.sendall(probe)
        if recv_exact(s, 8) != probe:
            raise IOError("echo differs")
    finally:
        s.close()
    return (time.monotonic() - t0) * 1000.0


def cmd_rtt(a):
    times, failed = [], 0
    for i in range(a.count):
        try:
            times.append(socks_rtt(a.socks, a.dest_port, i, a.timeout))
        except (OSError, IOError):
            failed += 1
    times.sort()
    med = times[len(times) // 2] if times else float("nan")
    slow = times[-1] if times else float("nan")
    print("%d clients: median %.1f ms, slowest %.1f ms, %d failed" % (a.count, med, slow, failed))
    return 0


def trojan_open(ctx, port, password, dest_port, i):
    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    s = ctx.wrap_socket(raw, server_hostname="node.test")
    head = hashlib.sha224(password.encode()).hexdigest().encode() + b"\r\n"
    head += b"\x01\x01" + socket.inet_aton("127.0.0.1") + struct.pack("!H", dest_port) + b"\r\n"
    probe = struct.pack("!Q", i)
    s.sendall(head + probe)
    if recv_exact(s, 8) != probe:
        raise IOError("echo differs")
    return s


def cmd_tls(a):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < a.count + 64:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(a.count + 64, hard), hard))
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    idle = rss_kib(a.pid)
    idle_fds = fds(a.pid)
    print("idle: katana RSS %.1f MiB" % (idle / 1024.0), flush=True)
    last = idle
    for c in range(1, a.cycles + 1):
        conns, failed = [], 0
        for i in range(a.count):
            try:
                conns.append(trojan_open(ctx, a.port, a.password, a.dest_port, i))
            except (OSError, IOError, ssl.SSLError):
                failed += 1
        peak = rss_kib(a.pid)
        for s in conns:
            s.close()
        t0 = time.monotonic()
        while fds(a.pid) > idle_fds + 8 and time.monotonic() - t0 < 60:
            time.sleep(0.1)
        closed_s = time.monotonic() - t0
        t_end = time.monotonic() + a.settle
        while a.trace and time.monotonic() < t_end:
            time.sleep(0.5)
            print("  trace: RSS %.1f MiB, %d descriptors" % (rss_kib(a.pid) / 1024.0,
                  fds(a.pid)), flush=True)
        time.sleep(max(0.0, t_end - time.monotonic()))
        after = rss_kib(a.pid)
        print("cycle %d: %d open (%d failed): RSS %.1f MiB open, %.1f MiB %.0f s after katana "
              "closed them (in %.1f s) (%+.1f MiB on the idle RSS, %+.1f MiB on the last cycle)"
              % (c, len(conns), failed, peak / 1024.0, after / 1024.0, a.settle, closed_s,
                 (after - idle) / 1024.0, (after - last) / 1024.0), flush=True)
        last = after
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("rtt")
    c.add_argument("--socks", type=int, required=True)
    c.add_argument("--dest-port", type=int, required=True)
    c.add_argument("--count", type=int, default=20)
    c.add_argument("--timeout", type=float, default=30)
    c = sub.add_parser("tls")
    c.add_argument("--port", type=int, required=True)
    c.add_argument("--password", required=True)
    c.add_argument("--dest-port", type=int, required=True)
    c.add_argument("--count", type=int, default=5000)
    c.add_argument("--cycles", type=int, default=4)
    c.add_argument("--pid", type=int, required=True)
    c.add_argument("--settle", type=float, default=3)
    c.add_argument("--trace", action="store_true", help="print the RSS every 0.5 s meanwhile")
    a = p.parse_args()
    return {"rtt": cmd_rtt, "tls": cmd_tls}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
