#!/usr/bin/env python3
"""reality_hello: one REALITY ClientHello (issue 11, PROTOCOLS-2.md §1.2) sent to a port, sealed
as Xray's and sing-box's clients seal it but with a timestamp the caller chooses, so that a test
can show a client outside the server's time window (§1.3 step 6) is relayed to the target.

A synthetic TLS 1.3 hello (X25519 share, TLS_AES_128_GCM_SHA256 and the other two suites, SNI,
the session id sealed with AES-256-GCM under HKDF-SHA256(X25519(client, server public key),
random[0..20), "REALITY")). It reads what the server answers for up to --wait seconds and prints
"bytes=N first=HEX" (the first 3 bytes; "16 03 03" for a ServerHello record, whoever sent it).

With --flight-file (the target's first flight as reality_target.py recorded it) it also prints
"mirror=ok" when the answer mirrors the target's as §1.5 says: a ServerHello record of the same
size with the target's version, random, session id, cipher suite and extensions in the same
order, only the key share's data ours; a 6-byte CCS; then records of the target's sizes.
Else "mirror=differs: WHY".

usage: reality_hello.py --port P --public-key B64URL --short-id HEX --sni NAME --offset SECONDS
                       [--flight-file F] [--client-version X.Y.Z (default Xray's 26.3.27)]
                       [--hello-file F (replay the hello saved there, else save this one)]
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


def hello(server_pub, short_id, sni, when, version=(26, 3, 27)):
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
    plain = bytes(list(version) + [0]) + struct.pack(">I", when) + short_id.ljust(8, b"\0")
    sealed = AESGCM(auth).encrypt(rnd[20:], plain, msg)
    return msg[:39] + sealed + msg[71:]


def records(data):
    """[(type, body)] of the whole records at the start of data."""
    out, at = [], 0
    while at + 5 <= len(data):
        n = struct.unpack(">H", data[at + 3:at + 5])[0]
        if at + 5 + n > len(data):
            break
        out.append((data[at], data[at + 5:at + 5 + n]))
        at += 5 + n
    return out


def server_hello(body):
    """(version, random, session id, suite, [(ext type, data)]) of a ServerHello message."""
    b = body[4:]
    sid_len = b[34]
    at = 35 + sid_len
    suite = b[at:at + 2]
    at += 3
    end = at + 2 + struct.unpack(">H", b[at:at + 2])[0]
    at += 2
    exts = []
    while at + 4 <= end:
        kind, n = struct.unpack(">HH", b[at:at + 4])
        exts.append((kind, b[at + 4:at + 4 + n]))
        at += 4 + n
    return b[:2], b[2:34], b[35:35 + sid_len], suite, exts


def mirror(got, target):
    """Why @p got does not mirror @p target (§1.5), or None."""
    g, t = records(got), records(target)
    if len(g) < len(t) or not t or g[0][0] != 22 or t[0][0] != 22:
        return "records: %d got, %d from the target" % (len(g), len(t))
    gs, ts = server_hello(g[0][1]), server_hello(t[0][1])
    for i, name in enumerate(["version", "random", "session id", "cipher suite"]):
        if gs[i] != ts[i]:
            return "%s %s, the target's %s" % (name, gs[i].hex(), ts[i].hex())
    if [k for k, _ in gs[4]] != [k for k, _ in ts[4]]:
        return "extensions %s, the target's %s" % ([k for k, _ in gs[4]], [k for k, _ in ts[4]])
    for (k, gd), (_, td) in zip(gs[4], ts[4]):
        if k == 51 and (gd[:4] != td[:4] or gd == td):
            return "key share not ours in the target's group"
        if k != 51 and gd != td:
            return "extension %d differs" % k
    if g[1] != (20, b"\x01"):
        return "no 6-byte CCS after the ServerHello"
    sizes = [len(b) + 5 for _, b in g[:len(t)]]
    tsizes = [len(b) + 5 for _, b in t]
    if sizes != tsizes:
        return "record sizes %s, the target's %s" % (sizes, tsizes)
    return None


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--public-key", required=True)
    p.add_argument("--short-id", default="")
    p.add_argument("--sni", default="localhost")
    p.add_argument("--offset", type=int, default=0, help="seconds added to the clock")
    p.add_argument("--wait", type=float, default=3.0)
    p.add_argument("--flight-file")
    p.add_argument("--client-version", default="26.3.27", help="x.y.z sealed in the hello")
    p.add_argument("--hello-file", help="send the hello saved in this file (a replay), or save "
                   "the new one there when the file does not exist")
    a = p.parse_args()
    pub = base64.urlsafe_b64decode(a.public_key + "=" * (-len(a.public_key) % 4))
    version = tuple(int(x) for x in a.client_version.split("."))
    if a.hello_file and os.path.exists(a.hello_file):
        with open(a.hello_file, "rb") as f:
            msg = f.read()
    else:
        msg = hello(pub, bytes.fromhex(a.short_id), a.sni.encode(), int(time.time()) + a.offset,
                    version)
        if a.hello_file:
            with open(a.hello_file, "wb") as f:
                f.write(msg)
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
    if a.flight_file:
        with open(a.flight_file, "rb") as f:
            target = f.read()
        print("target's records: %s" % [len(b) + 5 for _, b in records(target)])
        print("our records: %s" % [len(b) + 5 for _, b in records(got)])
        why = mirror(got, target)
        print("mirror=ok" if why is None else "mirror=differs: " + why)


if __name__ == "__main__":
    main()
