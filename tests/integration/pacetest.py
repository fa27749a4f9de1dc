#!/usr/bin/env python3
"""pacetest: rate measurements for the speed-limit tests (issue 12), stdlib only, loopback only.

  serve --port P --ready-file F
        a bulk source and sink on 127.0.0.1:P. A connection's first byte picks the mode:
        b"D" = download: the server sends zeros as fast as the connection takes them;
        b"U" = upload: the server reads and discards, and every 100 ms sends back the total it
        received so far (8 bytes, big-endian), so the client sees the rate at the far end.
  flow --socks P --dest-port D --mode down|up --secs S --out FILE [--ready-file F]
        one SOCKS5 CONNECT (ss-local) to the server, pulling (down) or pushing (up) for S seconds.
        FILE gets {"samples": [[t, bytes], ...], "closed": bool}: t is time.time() and bytes
        is what the receiving end had by then (the client for down, the server for up).
  udp --socks P --dest-port D --count N --size B --secs S
        SOCKS5 UDP ASSOCIATE (ss-local): N datagrams of B bytes to the UDP echo server on
        127.0.0.1:D, evenly over S seconds; prints how many echoes came back (waiting 1 s more).
  rate --file FILE --from T0 --to T1
        prints the receiving end's rate in bytes/s between the absolute times T0 and T1
        (samples nearest inside the window).
"""

import argparse
import json
import socket
import struct
import sys
import threading
import time


def serve_conn(c):
    try:
        mode = c.recv(1)
        if mode == b"D":
            blob = bytes(65536)
            while True:
                c.sendall(blob)
        elif mode == b"U":
            total, last = 0, time.monotonic()
            c.settimeout(0.1)
            while True:
                try:
                    n = len(c.recv(262144) or b"")
                    if n == 0:
                        return
                    total += n
                except socket.timeout:
                    pass
                now = time.monotonic()
                if now - last >= 0.1:
                    c.sendall(struct.pack(">Q", total))
                    last = now
    except OSError:
        pass
    finally:
        c.close()


def cmd_serve(a):
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", a.port))
    ls.listen(64)
    with open(a.ready_file, "w") as f:
        f.write("ready\n")
    while True:
        c, _ = ls.accept()
        threading.Thread(target=serve_conn, args=(c,), daemon=True).start()


def socks_connect(port, dest_port):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(b"\x05\x01\x00")
    if s.recv(2) != b"\x05\x00":
        raise OSError("socks: no auth method")
    s.sendall(b"\x05\x01\x00\x01" + socket.inet_aton("127.0.0.1") + struct.pack(">H", dest_port))
    rep = b""
    while len(rep) < 10:
        more = s.recv(10 - len(rep))
        if not more:
            raise OSError("socks: closed")
        rep += more
    if rep[1] != 0:
        raise OSError("socks: refused %d" % rep[1])
    return s


def cmd_flow(a):
    s = socks_connect(a.socks, a.dest_port)
    s.settimeout(2)
    samples, closed = [], False
    end = time.time() + a.secs
    s.sendall(b"D" if a.mode == "down" else b"U")
    if a.ready_file:
        with open(a.ready_file, "w") as f:
            f.write("%f\n" % time.time())
    try:
        if a.mode == "down":
            total, last = 0, 0.0
            while time.time() < end:
                n = len(s.recv(262144))
                if n == 0:
                    closed = True
                    break
                total += n
                now = time.time()
                if now - last >= 0.05:
                    samples.append([now, total])
                    last = now
            samples.append([time.time(), total])
        else:
            blob = bytes(16384)
            s.setblocking(False)
            buf = b""
            while time.time() < end:
                try:
                    s.send(blob)
                except BlockingIOError:
                    time.sleep(0.002)
                try:
                    got = s.recv(4096)
                    if not got:
                        closed = True
                        break
                    buf += got
                    while len(buf) >= 8:
                        samples.append([time.time(), struct.unpack(">Q", buf[:8])[0]])
                        buf = buf[8:]
                except BlockingIOError:
                    pass
    except OSError:
        closed = True
    s.close()
    with open(a.out, "w") as f:
        json.dump({"samples": samples, "closed": closed}, f)
    return 0


def cmd_udp(a):
    ctl = socket.create_connection(("127.0.0.1", a.socks), timeout=10)
    ctl.sendall(b"\x05\x01\x00")
    if ctl.recv(2) != b"\x05\x00":
        raise OSError("socks: no auth method")
    ctl.sendall(b"\x05\x03\x00\x01" + bytes(6))
    rep = b""
    while len(rep) < 10:
        more = ctl.recv(10 - len(rep))
        if not more:
            raise OSError("socks: closed")
        rep += more
    relay = (socket.inet_ntoa(rep[4:8]), struct.unpack(">H", rep[8:10])[0])
    if relay[0] == "0.0.0.0":
        relay = ("127.0.0.1", relay[1])
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    u.setblocking(False)
    head = b"\x00\x00\x00\x01" + socket.inet_aton("127.0.0.1") + struct.pack(">H", a.dest_port)
    payload = bytes(a.size)
    got, start = 0, time.time()
    for i in range(a.count):
        due = start + a.secs * i / a.count
        while time.time() < due:
            try:
                u.recv(65536)
                got += 1
            except BlockingIOError:
                time.sleep(0.0005)
        u.sendto(head + payload, relay)
    end = time.time() + 1.0
    while time.time() < end:
        try:
            u.recv(65536)
            got += 1
        except BlockingIOError:
            time.sleep(0.001)
    print(got)
    ctl.close()
    return 0


def cmd_rate(a):
    with open(a.file) as f:
        samples = json.load(f)["samples"]
    inside = [x for x in samples if a.t0 <= x[0] <= a.t1]
    if len(inside) < 2 or inside[-1][0] - inside[0][0] < (a.t1 - a.t0) * 0.8:
        print("0")
        return 1
    (t0, b0), (t1, b1) = inside[0], inside[-1]
    print("%d" % ((b1 - b0) / (t1 - t0)))
    return 0


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("serve")
    c.add_argument("--port", type=int, required=True)
    c.add_argument("--ready-file", required=True)
    c = sub.add_parser("flow")
    c.add_argument("--socks", type=int, required=True)
    c.add_argument("--dest-port", type=int, required=True)
    c.add_argument("--mode", choices=["down", "up"], required=True)
    c.add_argument("--secs", type=float, required=True)
    c.add_argument("--out", required=True)
    c.add_argument("--ready-file")
    c = sub.add_parser("udp")
    c.add_argument("--socks", type=int, required=True)
    c.add_argument("--dest-port", type=int, required=True)
    c.add_argument("--count", type=int, required=True)
    c.add_argument("--size", type=int, required=True)
    c.add_argument("--secs", type=float, required=True)
    c = sub.add_parser("rate")
    c.add_argument("--file", required=True)
    c.add_argument("--from", dest="t0", type=float, required=True)
    c.add_argument("--to", dest="t1", type=float, required=True)
    a = p.parse_args()
    return {"serve": cmd_serve, "flow": cmd_flow, "udp": cmd_udp, "rate": cmd_rate}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
