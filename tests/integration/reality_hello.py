#!/usr/bin/env python3
"""reality_hello: one REALITY ClientHello (issue 11, PROTOCOLS-2.md §1.2) sent to a port, sealed
as Xray's and sing-box's clients seal it but with a timestamp the caller chooses, so that a test
can show a client outside the server's time window (§1.3 step 6) is relayed to the target.

A synthetic TLS 1.3 hello (X25519 share, TLS_AES_128_GCM_SHA256 and the other two suites, SNI,
the session id sealed with AES-256-GCM under HKDF-SHA256(X25519(client, server public key),
random[0..20), "REALITY")). It reads what the server answers for up to --wait seconds and prints
"bytes=N first=HEX" (the first 3 bytes; "16 03 03" for a ServerHello record, whoever sent it).

usage: reality_hello.py --port P --public-key B64URL --short-id HEX --sni NAME --offset SECONDS
"""
import argparse
import base64
import os
import socket
import struct
import time

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF


def ext(kind, body):
    return struct.pack(">HH", kind, len(body)) + body


def hello(server_pub, short_id, sni, when):
    """The ClientHello handshake message with its sealed session id (§1.2 steps 2-7)."""
    key = X25519PrivateKey.generate()
    share = key.public_key().public_bytes_raw()
    rnd = os.urandom(32)
    exts = ext(0, struct.pack(">HBH", len(sni) + 3, 0, len(sni)) + sni)
    exts += ext(10, struct.pack(">H", 2) + b"\x00\x1d")
    exts += ext(13, struct.pack(">H", 6) + b"\x08\x07\x04\x03\x08\x04")
    exts += ext(43, b"\x02\x03\x04")
    ks = struct.pack(">HH", 0x1D, 32) + share
    exts += ext(51, struct.pack(">H", len(ks)) + ks)
    body = (b"\x03\x03" + rnd + b"\x20" + bytes(32) + struct.pack(">H", 6) +
            b"\x13\x01\x13\x02\x13\x03" + b"\x01\x00" + struct.pack(">H", len(exts)) + exts)
    msg = b"\x01" + struct.pack(">I", len(body))[1:] + body
    shared = key.exchange(X25519PublicKey.from_public_bytes(server_pub))
    auth = HKDF(hashes.SHA256(), 32, rnd[:20], b"REALITY").derive(shared)
    plain = bytes([26, 3, 27, 0]) + struct.pack(">I", when) + short_id.ljust(8, b"\0")
    sealed = AESGCM(auth).encrypt(rnd[20:], plain, msg)
    return msg[:39] + sealed + msg[71:]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--public-key", required=True)
    p.add_argument("--short-id", default="")
    p.add_argument("--sni", default="localhost")
    p.add_argument("--offset", type=int, default=0, help="seconds added to the clock")
    p.add_argument("--wait", type=float, default=3.0)
    a = p.parse_args()
    pub = base64.urlsafe_b64decode(a.public_key + "=" * (-len(a.public_key) % 4))
    msg = hello(pub, bytes.fromhex(a.short_id), a.sni.encode(), int(time.time()) + a.offset)
    got = b""
    with socket.create_connection(("127.0.0.1", a.port), timeout=a.wait) as s:
        s.sendall(b"\x16\x03\x01" + struct.pack(">H", len(msg)) + msg)
        end = time.monotonic() + a.wait
        try:
            while time.monotonic() < end and len(got) < 65536:
                s.settimeout(max(0.05, end - time.monotonic()))
                chunk = s.recv(65536)
                if not chunk:
                    break
                got += chunk
        except OSError:
            pass
    print("bytes=%d first=%s" % (len(got), got[:3].hex(" ")))


if __name__ == "__main__":
    main()
