#!/usr/bin/env python3
"""reality_target: the REALITY target site of t-reality.sh (issue 11), an HTTPS server on
127.0.0.1 (TLS 1.2/1.3 with Python's ssl, so X25519 as REALITY's target needs, PROTOCOLS-2.md
§1.4) that answers every request with a fixed page. Each accepted connection adds one to the
number in --count-file, so that a test can tell that a connection reached the target. TLS runs
over memory BIOs so that the raw first flight of each handshake (ServerHello .. Finished, as
sent) replaces the file --flight-file: what katana's ServerHello must mirror (§1.5).

With --proxy-file, each connection must open with a PROXY protocol header (v1 or v2, REALITY's
xver, PROTOCOLS-2.md §1.1), which is appended to that file as one line ("v1 PROXY TCP4 src dst
sport dport", "v2 TCP4 src:sport dst:dport", or "none" when the connection did not open with
one) before TLS goes on with the bytes after it.

usage: reality_target.py --port P --cert C --key K --body TEXT --count-file F --ready-file R
                         [--flight-file L] [--proxy-file X]
"""

import argparse
import ipaddress
import os
import socket
import ssl
import struct
import threading

LOCK = threading.Lock()
COUNT = [0]


def write_file(path, data):
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


V2_SIG = b"\r\n\r\n\x00\r\nQUIT\n"


def proxy_header(conn):
    """(description, the bytes read after the PROXY header) of a connection's opening."""
    data = b""
    while len(data) < 16 or (data.startswith(V2_SIG) and
                             len(data) < 16 + struct.unpack(">H", data[14:16])[0]):
        if data[:6] == b"PROXY " and b"\r\n" in data:
            break
        if len(data) >= 6 and not (data[:6] == b"PROXY " or V2_SIG.startswith(data[:12])):
            return "none", data
        chunk = conn.recv(4096)
        if not chunk:
            return "none", data
        data += chunk
    if data[:6] == b"PROXY ":
        line, rest = data.split(b"\r\n", 1)
        return "v1 " + line.decode(errors="replace"), rest
    if not data.startswith(V2_SIG):
        return "none", data
    cmd, fam, n = data[12], data[13], struct.unpack(">H", data[14:16])[0]
    body, rest = data[16:16 + n], data[16 + n:]
    if cmd != 0x21 or fam not in (0x11, 0x21):
        return "v2 cmd=%02x fam=%02x" % (cmd, fam), rest
    a = 4 if fam == 0x11 else 16
    src, dst = ipaddress.ip_address(body[:a]), ipaddress.ip_address(body[a:2 * a])
    sp, dp = struct.unpack(">HH", body[2 * a:2 * a + 4])
    return "v2 TCP%d %s:%d %s:%d" % (4 if a == 4 else 6, src, sp, dst, dp), rest


def serve(conn, ctx, answer, count_file, flight_file, proxy_file):
    with LOCK:
        COUNT[0] += 1
        write_file(count_file, b"%d\n" % COUNT[0])
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    if proxy_file:
        try:
            conn.settimeout(10)
            what, rest = proxy_header(conn)
        except OSError:
            what, rest = "none", b""
        with LOCK:
            with open(proxy_file, "a") as f:
                f.write(what + "\n")
        incoming.write(rest)
    tls = ctx.wrap_bio(incoming, outgoing, server_side=True)
    first = [True]

    def flush():
        data = outgoing.read()
        if data and first[0]:
            first[0] = False
            if flight_file:
                with LOCK:
                    write_file(flight_file, data)
        if data:
            conn.sendall(data)

    def run(op):
        """op() over the socket: feed it the peer's bytes until it needs none."""
        while True:
            try:
                r = op()
                flush()
                return r
            except ssl.SSLWantReadError:
                flush()
                chunk = conn.recv(65536)
                if not chunk:
                    raise ConnectionError("peer closed")
                incoming.write(chunk)

    try:
        conn.settimeout(10)
        run(tls.do_handshake)
        data = b""
        while b"\r\n\r\n" not in data and len(data) < 65536:
            chunk = run(lambda: tls.read(4096))
            if not chunk:
                break
            data += chunk
        if data:
            run(lambda: tls.write(answer))
    except (OSError, ssl.SSLError):
        pass
    finally:
        conn.close()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--cert", required=True)
    p.add_argument("--key", required=True)
    p.add_argument("--body", required=True)
    p.add_argument("--count-file", required=True)
    p.add_argument("--ready-file", required=True)
    p.add_argument("--flight-file")
    p.add_argument("--proxy-file")
    a = p.parse_args()
    body = a.body.encode()
    answer = (b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n"
              b"Connection: close\r\n\r\n" % len(body)) + body
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(a.cert, a.key)
    ctx.set_alpn_protocols(["http/1.1"])
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", a.port))
    ls.listen(512)
    write_file(a.count_file, b"0\n")
    open(a.ready_file, "w").close()
    while True:
        c, _ = ls.accept()
        threading.Thread(target=serve, args=(c, ctx, answer, a.count_file, a.flight_file,
                                             a.proxy_file), daemon=True).start()


if __name__ == "__main__":
    main()
