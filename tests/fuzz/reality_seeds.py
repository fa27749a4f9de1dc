#!/usr/bin/env python3
"""reality_seeds: writes the REALITY ClientHellos (issue 11, PROTOCOLS-2.md §1.2) that
tests/unit/test_reality.c reads from tests/unit/vectors/reality/ and, with a split byte in
front, the seeds of tests/fuzz/fuzz_reality.in/. Synthetic TLS 1.3 hellos sealed as the
clients do (server key bytes 01..20 of the §1.7 vector, client share 21..40, random 40..5f,
client version 1.8.1 as sing-box, time 0x65000000, short id 0123456789abcdef, SNI
www.example.com), and variants that must fail. Run from the top of the tree after a change
(needs python3-cryptography); the files are committed.
"""
import os
import struct
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

SERVER_PRIV = bytes(range(1, 33))
SERVER_PUB = X25519PrivateKey.from_private_bytes(SERVER_PRIV).public_key().public_bytes_raw()
CLIENT_PRIV = bytes(range(0x21, 0x41))

def ext(t, body):
    return struct.pack(">HH", t, len(body)) + body

def hello(sni=b"www.example.com", sid8=bytes.fromhex("0123456789abcdef"), share="x25519",
          tls13=True, t=0x65000000, ver=(1, 8, 1)):
    rnd = bytes(range(0x40, 0x60))
    cpub = X25519PrivateKey.from_private_bytes(CLIENT_PRIV).public_key().public_bytes_raw()
    exts = b""
    exts += ext(0, struct.pack(">HBH", len(sni) + 3, 0, len(sni)) + sni)
    exts += ext(10, struct.pack(">H", 4) + b"\x00\x1d\x11\xec")
    exts += ext(13, struct.pack(">H", 4) + b"\x08\x07\x04\x03")
    if tls13:
        exts += ext(43, b"\x04\x03\x04\x03\x03")
    if share == "x25519":
        ks = struct.pack(">HH", 0x1d, 32) + cpub
    else:
        ks = struct.pack(">HH", 0x11ec, 1216) + bytes(i * 7 & 255 for i in range(1184)) + cpub
    exts += ext(51, struct.pack(">H", len(ks)) + ks)
    body = b"\x03\x03" + rnd + b"\x20" + bytes(32) + struct.pack(">H", 6) + \
        b"\x13\x01\x13\x02\x13\x03" + b"\x01\x00" + struct.pack(">H", len(exts)) + exts
    msg = b"\x01" + struct.pack(">I", len(body))[1:] + body
    shared = X25519PrivateKey.from_private_bytes(CLIENT_PRIV).exchange(
        X25519PublicKey.from_public_bytes(SERVER_PUB))
    key = HKDF(hashes.SHA256(), 32, rnd[:20], b"REALITY").derive(shared)
    p = bytes(ver) + b"\x00" + struct.pack(">I", t) + sid8
    sealed = AESGCM(key).encrypt(rnd[20:], p, msg)
    return msg[:39] + sealed + msg[71:]

def record(msg, split=None):
    if split is None:
        return b"\x16\x03\x01" + struct.pack(">H", len(msg)) + msg
    return record(msg[:split]) + record(msg[split:])

seeds = {
    "valid": record(hello()),
    "valid-two-records": record(hello(), split=50),
    "valid-mlkem-only": record(hello(share="mlkem")),
    "wrong-short-id": record(hello(sid8=bytes.fromhex("0123456789abcdee"))),
    "wrong-sni": record(hello(sni=b"www.example.org")),
    "no-tls13": record(hello(tls13=False)),
    "valid-then-garbage": record(hello()) + b"\x17\x03\x03\x00\x05hello",
    "http-get": b"GET / HTTP/1.1\r\nHost: www.example.com\r\n\r\n",
    "empty": b"",
}
for i, (name, data) in enumerate(sorted(seeds.items())):
    if name != "empty":
        open(os.path.join("tests/unit/vectors/reality", name), "wb").write(data)
    open(os.path.join("tests/fuzz/fuzz_reality.in", name), "wb").write(bytes([i % 6]) + data)
