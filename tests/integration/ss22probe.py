#!/usr/bin/env python3
"""Shadowsocks 2022 TCP requests crafted for t-ss2022-clients.sh (PROTOCOLS.md §3.2, §3.7):
a request (or with --udp a datagram) to 127.0.0.1:DEST with a chosen timestamp age, an EIH for
a chosen user key, sent once or twice with the same bytes (a replay). Prints, per connection, how many bytes the server
answered within --wait seconds ("answered N"); a refused request gets 0. BLAKE3 derive_key comes
from the b3derive helper (katana's blake3.c); AES from python3-cryptography. Loopback only."""
import argparse
import base64
import os
import socket
import struct
import subprocess
import sys
import time

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM


def derive(helper, context, material, n):
    out = subprocess.run([helper, context, material.hex(), str(n)], check=True,
                         capture_output=True, text=True).stdout.strip()
    return bytes.fromhex(out)


def blake3_16(helper, data):
    out = subprocess.run([helper, "--hash", data.hex(), "16"], check=True,
                         capture_output=True, text=True).stdout.strip()
    return bytes.fromhex(out)


def nonce(i):
    return i.to_bytes(12, "little")


def build(a):
    upsk = base64.b64decode(a.upsk)
    k = len(upsk)
    salt = os.urandom(k)
    wire = salt
    if a.ipsk:
        ipsk = base64.b64decode(a.ipsk)
        idkey = derive(a.helper, "shadowsocks 2022 identity subkey", ipsk + salt, k)
        enc = Cipher(algorithms.AES(idkey), modes.ECB()).encryptor()
        wire += enc.update(blake3_16(a.helper, upsk)) + enc.finalize()
    key = derive(a.helper, "shadowsocks 2022 session subkey", upsk + salt, k)
    aead = AESGCM(key)
    var = bytes([1, 127, 0, 0, 1]) + struct.pack(">HH", a.dest_port, 0) + b"ping"
    fixed = bytes([0]) + struct.pack(">QH", int(time.time()) - a.age, len(var))
    return wire + aead.encrypt(nonce(0), fixed, None) + aead.encrypt(nonce(1), var, None)


def build_udp(a):
    """One client datagram (AES methods, PROTOCOLS.md 3.5/3.7): separate header, EIH, body."""
    upsk = base64.b64decode(a.upsk)
    k = len(upsk)
    sep = os.urandom(8) + struct.pack(">Q", 0)
    hkey = base64.b64decode(a.ipsk) if a.ipsk else upsk
    wire = Cipher(algorithms.AES(hkey), modes.ECB()).encryptor().update(sep)
    if a.ipsk:
        h = blake3_16(a.helper, upsk)
        wire += Cipher(algorithms.AES(hkey), modes.ECB()).encryptor().update(
            bytes(x ^ y for x, y in zip(h, sep)))
    key = derive(a.helper, "shadowsocks 2022 session subkey", upsk + sep[:8], k)
    body = (bytes([0]) + struct.pack(">QH", int(time.time()) - a.age, 0) +
            bytes([1, 127, 0, 0, 1]) + struct.pack(">H", a.dest_port) + b"ping")
    return wire + AESGCM(key).encrypt(sep[4:], body, None)


def send_udp(a, wire):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.sendto(wire, ("127.0.0.1", a.port))
    got = 0
    deadline = time.time() + a.wait
    try:
        while time.time() < deadline:
            s.settimeout(max(0.05, deadline - time.time()))
            s.recvfrom(65536)
            got += 1
    except socket.timeout:
        pass
    s.close()
    return got


def send(a, wire):
    s = socket.create_connection(("127.0.0.1", a.port), timeout=a.wait)
    s.sendall(wire)
    got = 0
    deadline = time.time() + a.wait
    try:
        while time.time() < deadline:
            s.settimeout(max(0.05, deadline - time.time()))
            d = s.recv(65536)
            if not d:
                break
            got += len(d)
    except (socket.timeout, ConnectionResetError):
        pass
    s.close()
    return got


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--helper", required=True, help="path of the b3derive program")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--dest-port", type=int, required=True)
    p.add_argument("--upsk", required=True, help="the user's key, base64")
    p.add_argument("--ipsk", help="the server key, base64 (multi-user: adds an EIH)")
    p.add_argument("--age", type=int, default=0, help="seconds the timestamp lies in the past")
    p.add_argument("--times", type=int, default=1, help="send the same bytes this many times")
    p.add_argument("--wait", type=float, default=2.0)
    p.add_argument("--udp", action="store_true",
                   help="a UDP datagram instead; prints the datagrams answered per send")
    a = p.parse_args()
    wire = build_udp(a) if a.udp else build(a)
    for _ in range(a.times):
        print("answered %d" % (send_udp(a, wire) if a.udp else send(a, wire)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
