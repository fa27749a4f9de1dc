#!/usr/bin/env python3
"""A loopback web server for proxy tests: GET /blob/N/SEED answers N bytes made from SEED
(blob(n, seed) below, the same bytes the test computes); PUT or POST answers the SHA-256 hex of
the body it received; GET /head answers the request head it received (the proxy's rewrite).
Answers carry Content-Length and close the connection.

usage: blobweb.py serve PORT READY_FILE   (serve on 127.0.0.1:PORT, touch READY_FILE)
       blobweb.py write N SEED FILE        (write blob(N, SEED) to FILE)"""
import hashlib
import http.server
import sys


def blob(n, seed):
    """n bytes: SHA-256 in counter mode over seed."""
    out = bytearray()
    i = 0
    while len(out) < n:
        out += hashlib.sha256(("%s:%d" % (seed, i)).encode()).digest()
        i += 1
    return bytes(out[:n])


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def answer(self, body, ctype="application/octet-stream"):
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)
        self.close_connection = True

    def do_GET(self):
        parts = self.path.split("/")
        if len(parts) == 4 and parts[1] == "blob" and parts[2].isdigit():
            self.answer(blob(min(int(parts[2]), 64 << 20), parts[3]))
        elif self.path == "/head":
            head = "%s\r\n%s" % (self.requestline, str(self.headers))
            self.answer(head.encode(), "text/plain")
        else:
            self.send_error(404)

    def do_PUT(self):
        n = int(self.headers.get("Content-Length", "0"))
        h = hashlib.sha256()
        while n > 0:
            chunk = self.rfile.read(min(n, 65536))
            if not chunk:
                break
            h.update(chunk)
            n -= len(chunk)
        self.answer(h.hexdigest().encode(), "text/plain")

    do_POST = do_PUT


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "write":
        with open(sys.argv[4], "wb") as f:
            f.write(blob(int(sys.argv[2]), sys.argv[3]))
        return 0
    if len(sys.argv) != 4 or sys.argv[1] != "serve":
        sys.exit(__doc__)
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[2])), Handler)
    open(sys.argv[3], "w").close()
    srv.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
