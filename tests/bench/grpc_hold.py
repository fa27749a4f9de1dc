#!/usr/bin/env python3
"""grpc_hold: idle VLESS-over-gRPC+TLS connections for tests/bench/peers-bench.sh.

Xray-core's and sing-box's gRPC clients carry every proxied connection as one more HTTP/2
stream on a single shared connection, so they cannot open N real server connections. This
opener does what N such clients would each do once (PROTOCOLS-2.md §3): a TLS connection
(ALPN h2, the certificate checked against --ca for --sni), the HTTP/2 preface and SETTINGS,
one stream POST /SERVICE/Tun (content-type application/grpc) whose first gRPC message is a
Hunk carrying the VLESS request (version 0, the uuid, no addons, TCP to 127.0.0.1:--dest-port)
and one payload byte. It acknowledges the server's SETTINGS, prints "ready N" (N opened) and
keeps every connection open until its standard input closes. Loopback only (fixed address).

usage: grpc_hold.py --port P --conns N --uuid UUID --dest-port SINK [--service NAME]
                    [--sni node.test] [--ca CA_FILE]
"""
import argparse
import socket
import ssl
import struct
import sys
import uuid


def frame(ftype, flags, stream, payload):
    """An HTTP/2 frame (RFC 9113 §4.1)."""
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + \
        struct.pack(">I", stream) + payload


def hpack_literal(name, value):
    """A literal header field without indexing, new name, no Huffman (RFC 7541 §6.2.2);
    names and values here are shorter than 127 bytes."""
    n, v = name.encode(), value.encode()
    return b"\x00" + bytes([len(n)]) + n + bytes([len(v)]) + v


def varint(n):
    out = b""
    while n >= 0x80:
        out += bytes([n & 0x7F | 0x80])
        n >>= 7
    return out + bytes([n])


def opening(a):
    """The bytes a client sends to open one idle proxied connection."""
    headers = b"".join(hpack_literal(k, v) for k, v in (
        (":method", "POST"), (":scheme", "https"), (":path", "/%s/Tun" % a.service),
        (":authority", a.sni), ("content-type", "application/grpc"), ("te", "trailers")))
    vless = b"\x00" + uuid.UUID(a.uuid).bytes + b"\x00\x01" + struct.pack(">H", a.dest_port) + \
        b"\x01" + socket.inet_aton("127.0.0.1") + b"x"
    hunk = b"\x0a" + varint(len(vless)) + vless
    message = b"\x00" + struct.pack(">I", len(hunk)) + hunk
    return (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + frame(4, 0, 0, b"") +
            frame(1, 4, 1, headers) + frame(0, 0, 1, message))


def ack_settings(conn):
    """Read frames until the server's own SETTINGS, then acknowledge it."""
    buf = b""
    while True:
        while len(buf) >= 9:
            length = int.from_bytes(buf[:3], "big")
            if len(buf) < 9 + length:
                break
            ftype, flags = buf[3], buf[4]
            buf = buf[9 + length:]
            if ftype == 4 and not flags & 1:
                conn.sendall(frame(4, 1, 0, b""))
                return
        data = conn.recv(65536)
        if not data:
            raise ConnectionError("closed before its SETTINGS")
        buf += data


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--conns", type=int, required=True)
    p.add_argument("--uuid", required=True)
    p.add_argument("--dest-port", type=int, required=True)
    p.add_argument("--service", default="kt-bench")
    p.add_argument("--sni", default="node.test")
    p.add_argument("--ca")
    a = p.parse_args()
    ctx = ssl.create_default_context(cafile=a.ca) if a.ca else ssl._create_unverified_context()
    ctx.set_alpn_protocols(["h2"])
    hello = opening(a)
    held = []
    for i in range(a.conns):
        try:
            raw = socket.create_connection(("127.0.0.1", a.port), timeout=10)
            conn = ctx.wrap_socket(raw, server_hostname=a.sni)
            if conn.selected_alpn_protocol() != "h2":
                raise ConnectionError("ALPN %r, not h2" % conn.selected_alpn_protocol())
            conn.sendall(hello)
            ack_settings(conn)
        except (OSError, ConnectionError) as e:
            print("grpc_hold: connection %d: %s" % (i, e), file=sys.stderr)
            break
        held.append(conn)
    print("ready %d" % len(held), flush=True)
    sys.stdin.buffer.read()
    return 0 if len(held) == a.conns else 1


if __name__ == "__main__":
    sys.exit(main())
