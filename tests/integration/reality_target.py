#!/usr/bin/env python3
"""reality_target: the REALITY target site of t-reality.sh (issue 11), an HTTPS server on
127.0.0.1 (TLS 1.2/1.3 with Python's ssl, so X25519 as REALITY's target needs, PROTOCOLS-2.md
§1.4) that answers every request with a fixed page. Each accepted connection adds one to the
number in --count-file, so that a test can tell that a connection reached the target.

usage: reality_target.py --port P --cert C --key K --body TEXT --count-file F --ready-file R
"""

import argparse
import os
import socket
import ssl
import threading

LOCK = threading.Lock()
COUNT = [0]


def serve(conn, ctx, answer, count_file):
    with LOCK:
        COUNT[0] += 1
        tmp = count_file + ".tmp"
        with open(tmp, "w") as f:
            f.write("%d\n" % COUNT[0])
        os.replace(tmp, count_file)
    try:
        conn.settimeout(10)
        tls = ctx.wrap_socket(conn, server_side=True)
    except (OSError, ssl.SSLError):
        conn.close()
        return
    try:
        data = b""
        while b"\r\n\r\n" not in data and len(data) < 65536:
            chunk = tls.recv(4096)
            if not chunk:
                break
            data += chunk
        if data:
            tls.sendall(answer)
    except (OSError, ssl.SSLError):
        pass
    finally:
        try:
            tls.close()
        except OSError:
            pass


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--cert", required=True)
    p.add_argument("--key", required=True)
    p.add_argument("--body", required=True)
    p.add_argument("--count-file", required=True)
    p.add_argument("--ready-file", required=True)
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
    with open(a.count_file, "w") as f:
        f.write("0\n")
    open(a.ready_file, "w").close()
    while True:
        c, _ = ls.accept()
        threading.Thread(target=serve, args=(c, ctx, answer, a.count_file), daemon=True).start()


if __name__ == "__main__":
    main()
