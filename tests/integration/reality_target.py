#!/usr/bin/env python3
"""reality_target: the REALITY target site of t-reality.sh (issue 11), an HTTPS server on
127.0.0.1 (TLS 1.2/1.3 with Python's ssl, so X25519 as REALITY's target needs, PROTOCOLS-2.md
§1.4) that answers every request with a fixed page. Each accepted connection adds one to the
number in --count-file, so that a test can tell that a connection reached the target. TLS runs
over memory BIOs so that the raw first flight of each handshake (ServerHello .. Finished, as
sent) replaces the file --flight-file: what katana's ServerHello must mirror (§1.5).

usage: reality_target.py --port P --cert C --key K --body TEXT --count-file F --ready-file R
                         [--flight-file L]
"""

import argparse
import os
import socket
import ssl
import threading

LOCK = threading.Lock()
COUNT = [0]


def write_file(path, data):
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def serve(conn, ctx, answer, count_file, flight_file):
    with LOCK:
        COUNT[0] += 1
        write_file(count_file, b"%d\n" % COUNT[0])
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
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
        threading.Thread(target=serve, args=(c, ctx, answer, a.count_file, a.flight_file), daemon=True).start()


if __name__ == "__main__":
    main()
