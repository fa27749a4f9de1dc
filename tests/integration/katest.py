#!/usr/bin/env python3
"""katest: stdlib-only helpers for katana's end-to-end tests (loopback only).

Subcommands (each prints OK/FAIL lines and exits 0 on success, 1 on failure):
  freeport  [--count N]                      N ports free for TCP and UDP on 127.0.0.1
  wait-port --port P [--timeout S]           wait until 127.0.0.1:P accepts TCP
  echo      --port P [--hosts A,B] [--ready-file F]
                                             TCP+UDP echo server on loopback addresses
  tcp       --socks P --dest-port D [...]    SOCKS5 CONNECT, send a seeded pattern, check the echo
  udp       --socks P --dest-port D [...]    SOCKS5 UDP ASSOCIATE round trips
  garbage   --port P [--udp]                 random bytes to a port; nothing may come back
  mkconfig  ...                              write a katana config (JSON; allow_private unless
                                             --no-allow-private)
  usage     --log F [--offset N]             last "usage user" line per user after byte N
  ssplan    --config F                       (self-check mode) ss-server / Trojan reference
                                             server parameters of a config
  sse       --file F                         events of a captured SSE stream, one JSON line each
  hold      --port P --conns N [...]         N connections that send a few bytes and stay open
  cpu       --pid PID [--secs S] [--max PCT] CPU use of a process over S seconds (/proc)
  httpd     --port P --body B [--status N]   fixed-answer HTTP server (the Trojan fallback)
  tlsprobe  --port P --mode M [--wait S]     one bad-input connection (half ClientHello, garbage
                                             TLS record, plain HTTP); OK when closed, no HTTP back
  stall     --port P --conns N --mode M ...  N connections that never finish a TLS handshake
  sockets   --pid PID --port P               TCP connections PID holds on local port P (/proc)
  vmess     --port P --uuid U --dest-port D  one hand-made VMess AEAD request (aes-128-gcm) to
            [--age S] [--replay] --expect E  the echo server: ok = echoed; refused = no byte back
                                             and no close for --wait s (drained); --replay sends
                                             an accepted request's bytes again, expecting refusal
  vlessburst --port P --uuid U --dest-port D N clear VLESS requests from several loopback
            --sources A,B,.. [--conns N]     sources at one instant; per source: admitted, total;
            [--hold S --ready-file F         --hold: kept open S s (or until the release file
             --release-file R]               exists), then "held N still served, M cut"
  xudp      --port P --uuid U --gid HEX      one clear VLESS Mux.Cool connection with an XUDP
            [--count N] [--steal]            session (GlobalID HEX) to a remote socket of its
                                             own; prints the source port the remote saw
  xudp-client --socks P --relay-port R       the same through a real client (SOCKS5 UDP) whose
            --server-port S                  connection a relay R -> S of its own drops
"""

import argparse
import ipaddress
import json
import os
import random
import resource
import select
import socket
import struct
import tempfile
import sys
import threading
import time
import uuid

LOOPBACK_V4 = ipaddress.ip_network("127.0.0.0/8")
MAX_DATAGRAM = 65507


def die(msg, code=1):
    print("FAIL " + msg, flush=True)
    sys.exit(code)


def require_loopback(host):
    """Refuse any address that is not loopback (names are sent through SOCKS unresolved)."""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return
    if not ip.is_loopback:
        die("refusing non-loopback address %s" % host, 2)


def pattern(seed, n):
    """n deterministic pseudo-random bytes for a seed (the payload every test checks)."""
    return random.Random(seed).randbytes(n)


def touch(path, text="ready\n"):
    if path:
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.rename(tmp, path)


# --- ports -----------------------------------------------------------------------------

# Test ports come from below the kernel's ephemeral range (ip_local_port_range, 32768-60999 on
# Debian): a port picked there can be taken, before its server binds it, by the local end of any
# outgoing connection of the tests running side by side. Here only another test's pick can meet
# it, and the bind checks below make that unlikely.
TEST_PORT_LO, TEST_PORT_HI = 20000, 32767


def test_port_range():
    """(lo, hi) of the ports tests pick from: TEST_PORT_LO..HI, ending below the ephemeral range
    when this kernel's starts lower."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            eph_lo = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        eph_lo = TEST_PORT_HI + 1
    hi = min(TEST_PORT_HI, eph_lo - 1)
    return (TEST_PORT_LO, hi) if hi - TEST_PORT_LO >= 1000 else (1024, 65535)


# A port found free is not bound by its server at once: until then another pick, by this test or
# by one running beside it, could find it free too. Every pick is therefore also reserved, by a
# file made with O_EXCL in one directory shared by all tests of this user, for RESERVE_S seconds.
RESERVE_S = 600


def reserve_port(port):
    """True when PORT was not reserved in the last RESERVE_S seconds; it is reserved now."""
    d = os.path.join(tempfile.gettempdir(), "katest-ports-%d" % os.getuid())
    os.makedirs(d, mode=0o700, exist_ok=True)
    path = os.path.join(d, str(port))
    for _ in range(2):
        try:
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
            return True
        except FileExistsError:
            try:
                if time.time() - os.stat(path).st_mtime < RESERVE_S:
                    return False
                os.unlink(path)
            except FileNotFoundError:
                pass
    return False


def pick_ports(count, udp=True):
    """COUNT distinct loopback ports, each free for TCP (and for UDP when UDP) at the time of the
    call and not handed out by another pick in the last RESERVE_S seconds, chosen at random in
    test_port_range(). Dies after 2000 tries."""
    lo, hi = test_port_range()
    ports = []
    for _ in range(2000):
        if len(ports) == count:
            break
        port = random.randint(lo, hi)
        if port in ports or not reserve_port(port):
            continue
        kinds = (socket.SOCK_STREAM, socket.SOCK_DGRAM) if udp else (socket.SOCK_STREAM,)
        held = []
        try:
            for kind in kinds:
                s = socket.socket(socket.AF_INET, kind)
                held.append(s)
                s.bind(("127.0.0.1", port))
            ports.append(port)
        except OSError:
            pass
        finally:
            for s in held:
                s.close()
    if len(ports) < count:
        die("freeport: no %d free ports in %d-%d" % (count, lo, hi))
    return ports


def cmd_freeport(a):
    print(" ".join(str(p) for p in pick_ports(a.count)))
    return 0


def any_free_port():
    """A free loopback TCP port: the REST API of every test daemon gets its own, so that tests
    running side by side never meet on the default 127.0.0.1:9090."""
    return pick_ports(1, udp=False)[0]


def cmd_wait_port(a):
    deadline = time.monotonic() + a.timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((a.host, a.port), timeout=0.5):
                return 0
        except OSError:
            time.sleep(0.05)
    die("nothing listens on %s:%d after %.1fs" % (a.host, a.port, a.timeout))


# --- echo server -----------------------------------------------------------------------

# A connection that opens with DOWNLOAD_MAGIC + b"N SEED\n" gets N seeded bytes as fast as
# the socket takes them, then EOF (cmd_download): a download that no upload paces.
DOWNLOAD_MAGIC = b"KTDOWNLOAD "
DOWNLOAD_MAX = 1 << 30


def download_bytes(n, seed):
    return random.Random(seed).randbytes(n)


def _tcp_echo_conn(c):
    try:
        first = True
        while True:
            d = c.recv(262144)
            if not d:
                break
            if first and d.startswith(DOWNLOAD_MAGIC):
                while b"\n" not in d and len(d) < 512:
                    more = c.recv(512)
                    if not more:
                        break
                    d += more
                n, seed = d[len(DOWNLOAD_MAGIC):].split(b"\n", 1)[0].split(b" ", 1)
                c.sendall(download_bytes(min(int(n), DOWNLOAD_MAX), seed.decode()))
                break
            first = False
            c.sendall(d)
    except OSError:
        pass
    finally:
        c.close()


def _tcp_echo_accept(ls):
    while True:
        c, _ = ls.accept()
        threading.Thread(target=_tcp_echo_conn, args=(c,), daemon=True).start()


def _udp_echo(us):
    while True:
        d, peer = us.recvfrom(MAX_DATAGRAM)
        us.sendto(d, peer)


def cmd_echo(a):
    threads = []
    hosts = []
    for h in a.hosts.split(","):
        require_loopback(h)
        fam = socket.AF_INET6 if ":" in h else socket.AF_INET
        ls = socket.socket(fam, socket.SOCK_STREAM)
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            ls.bind((h, a.port))
        except OSError as e:
            if fam == socket.AF_INET6:
                print("echo: no IPv6 loopback (%s), skipping %s" % (e, h), flush=True)
                continue
            raise
        hosts.append(h)
        ls.listen(512)
        us = socket.socket(fam, socket.SOCK_DGRAM)
        us.bind((h, a.port))
        threads.append(threading.Thread(target=_tcp_echo_accept, args=(ls,), daemon=True))
        threads.append(threading.Thread(target=_udp_echo, args=(us,), daemon=True))
    for t in threads:
        t.start()
    touch(a.ready_file)
    print("echo on %s port %d (tcp+udp)" % (",".join(hosts), a.port), flush=True)
    while True:
        time.sleep(3600)


# --- SOCKS5 --------------------------------------------------------------------------

def socks_addr(host, port):
    """SOCKS5 ATYP + address + port for an IP literal or a host name."""
    try:
        ip = ipaddress.ip_address(host)
        if ip.version == 4:
            return b"\x01" + ip.packed + struct.pack("!H", port)
        return b"\x04" + ip.packed + struct.pack("!H", port)
    except ValueError:
        name = host.encode()
        if len(name) > 255:
            raise ValueError("host name too long")
        return b"\x03" + bytes([len(name)]) + name + struct.pack("!H", port)


def recv_exact(s, n):
    buf = b""
    while len(buf) < n:
        d = s.recv(n - len(buf))
        if not d:
            raise IOError("SOCKS5 server closed during handshake")
        buf += d
    return buf


def socks_reply(s):
    """Read a SOCKS5 reply; return (rep, bound host, bound port)."""
    ver, rep, _, atyp = recv_exact(s, 4)
    if ver != 5:
        raise IOError("bad SOCKS5 version %d in reply" % ver)
    if atyp == 1:
        host = socket.inet_ntop(socket.AF_INET, recv_exact(s, 4))
    elif atyp == 4:
        host = socket.inet_ntop(socket.AF_INET6, recv_exact(s, 16))
    elif atyp == 3:
        host = recv_exact(s, recv_exact(s, 1)[0]).decode()
    else:
        raise IOError("bad ATYP %d in SOCKS5 reply" % atyp)
    port = struct.unpack("!H", recv_exact(s, 2))[0]
    return rep, host, port


def socks_auth(s):
    """The SOCKS5 greeting: no authentication, or with $KATEST_SOCKS_AUTH ("USER:PASS") the
    user name / password method (RFC 1929), which the server must then accept."""
    auth = os.environ.get("KATEST_SOCKS_AUTH")
    if not auth:
        s.sendall(b"\x05\x01\x00")
        if recv_exact(s, 2) != b"\x05\x00":
            raise IOError("SOCKS5 server refused the no-auth method")
        return
    user, _, pw = auth.partition(":")
    s.sendall(b"\x05\x01\x02")
    if recv_exact(s, 2) != b"\x05\x02":
        raise IOError("SOCKS5 server refused the user name / password method")
    s.sendall(b"\x01" + bytes([len(user)]) + user.encode() + bytes([len(pw)]) + pw.encode())
    if recv_exact(s, 2) != b"\x01\x00":
        raise IOError("SOCKS5 server refused the user name / password")


def socks_open(socks_port, cmd, host, port, timeout):
    s = socket.create_connection(("127.0.0.1", socks_port), timeout=timeout)
    socks_auth(s)
    s.sendall(b"\x05" + bytes([cmd]) + b"\x00" + socks_addr(host, port))
    rep, bhost, bport = socks_reply(s)
    if rep != 0:
        raise IOError("SOCKS5 reply code %d" % rep)
    return s, bhost, bport


# --- TCP download --------------------------------------------------------------------

def cmd_download(a):
    """Ask the echo server behind a SOCKS5 client for --bytes seeded bytes, read them as fast
    as they come and compare them with the expected ones (issue 11: a download that the
    server's flow control, not the upload, has to pace)."""
    require_loopback(a.dest_host)
    t0 = time.monotonic()
    try:
        s, _, _ = socks_open(a.socks, 1, a.dest_host, a.dest_port, a.timeout)
        s.sendall(DOWNLOAD_MAGIC + b"%d %s\n" % (a.bytes, a.seed.encode()))
        got = bytearray()
        while len(got) <= a.bytes:
            d = s.recv(1 << 20)
            if not d:
                break
            got += d
        s.close()
    except OSError as e:
        print("%s: download failed after %.1fs: %s" % (a.label, time.monotonic() - t0, e))
        return 1
    want = download_bytes(a.bytes, a.seed)
    ok = bytes(got) == want
    print("%s: %d of %d bytes in %.2fs, %s" % (a.label, len(got), a.bytes,
          time.monotonic() - t0, "identical" if ok else "DIFFERENT"))
    return 0 if ok else 1


# --- TCP round trip ------------------------------------------------------------------

class Stream:
    """One connection: a sender thread writes the pattern (optionally paced),
    the caller's thread reads the echo and compares it byte by byte. With first > 0 the
    sender writes the first `first` bytes alone and waits for their echo before the rest
    (an application's request before its bulk, as a browser's ClientHello)."""

    def __init__(self, sock, data, rate, chunk, first=0, unpace_file=None):
        self.s, self.data, self.rate, self.chunk = sock, data, rate, chunk
        self.unpace_file = unpace_file
        self.first = min(first, len(data))
        self.first_echoed = threading.Event()
        self.sent, self.send_err = 0, None

    def _send(self):
        t0 = time.monotonic()
        try:
            if self.first:
                self.s.sendall(self.data[:self.first])
                self.sent = self.first
                if not self.first_echoed.wait(60):
                    return
            while self.sent < len(self.data):
                n = min(self.chunk, len(self.data) - self.sent)
                self.s.sendall(self.data[self.sent:self.sent + n])
                self.sent += n
                if self.rate and self.unpace_file and os.path.exists(self.unpace_file):
                    self.rate = 0   # told to finish: the rest as fast as the socket takes it
                if self.rate:
                    ahead = self.sent / self.rate - (time.monotonic() - t0)
                    if ahead > 0:
                        time.sleep(ahead)
        except OSError as e:
            self.send_err = e

    def run(self, idle_timeout, ready_file):
        """Return (received ok bytes, end reason). Reason is 'complete', 'eof',
        'reset: ...', 'timeout' or 'mismatch at N'."""
        th = threading.Thread(target=self._send, daemon=True)
        th.start()
        got, reason = 0, "complete"
        self.s.settimeout(idle_timeout)
        while got < len(self.data):
            try:
                d = self.s.recv(262144)
            except socket.timeout:
                reason = "timeout"
                break
            except OSError as e:
                reason = "reset: %s" % e
                break
            if not d:
                reason = "eof"
                break
            if d != self.data[got:got + len(d)]:
                return got, "mismatch at byte %d" % got
            if got == 0:
                touch(ready_file)
            got += len(d)
            if got >= self.first:
                self.first_echoed.set()
        self.first_echoed.set()
        return got, reason


def one_tcp(a, idx, results):
    label = "%s#%d" % (a.label, idx)
    data = pattern("%s/%d" % (a.seed, idx), a.bytes)
    t0 = time.monotonic()
    try:
        if a.socks:
            s, _, _ = socks_open(a.socks, 1, a.dest_host, a.dest_port, a.timeout)
        else:
            s = socket.create_connection(("127.0.0.1", a.direct), timeout=a.timeout)
    except (OSError, IOError) as e:
        results[idx] = (0, "connect failed: %s" % e, 0.0)
        return
    try:
        got, reason = Stream(s, data, a.rate, a.chunk, a.first_echo,
                             a.unpace_file).run(a.timeout, a.ready_file)
    finally:
        s.close()
    results[idx] = (got, reason, time.monotonic() - t0)


def judge_tcp(a, idx, got, reason, secs):
    """Apply --expect to one connection's outcome; print a line; return True if as expected."""
    what = "%s#%d %s:%d %d bytes" % (a.label, idx, a.dest_host, a.dest_port, a.bytes)
    if reason.startswith("mismatch"):
        print("FAIL tcp %s: echo differs (%s)" % (what, reason))
        return False
    if a.expect == "ok":
        ok = reason == "complete"
        print("%s tcp %s: %s, %d bytes identical in %.2fs" %
              ("OK" if ok else "FAIL", what, reason, got, secs))
        return ok
    if a.expect == "refused":
        ok = got == 0
        print("%s tcp %s: expected refusal, got %d echoed bytes (%s)" %
              ("OK" if ok else "FAIL", what, got, reason))
        return ok
    if a.expect == "closed":
        # refused by the server: closed (EOF or reset) without a byte, not left hanging
        ok = got == 0 and (reason == "eof" or reason.startswith("reset"))
        print("%s tcp %s: expected a close without data, %s after %d bytes (%.2fs)" %
              ("OK" if ok else "FAIL", what, reason, got, secs))
        return ok
    # cut: the connection must end early (EOF/reset), and what did come back was intact
    ok = reason != "complete" and reason != "timeout"
    print("%s tcp %s: expected a cut, %s after %d identical bytes (%.2fs)" %
          ("OK" if ok else "FAIL", what, reason, got, secs))
    return ok


def cmd_tcp(a):
    require_loopback(a.dest_host)
    results = [None] * a.conns
    ths = [threading.Thread(target=one_tcp, args=(a, i, results)) for i in range(a.conns)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    ok = all(judge_tcp(a, i, *r) for i, r in enumerate(results))
    sys.stdout.flush()
    return 0 if ok else 1


# --- UDP round trip ------------------------------------------------------------------

def udp_wrap(host, port, payload):
    return b"\x00\x00\x00" + socks_addr(host, port) + payload


def udp_unwrap(pkt):
    if len(pkt) < 10 or pkt[2] != 0:
        raise IOError("bad SOCKS5 UDP header")
    atyp = pkt[3]
    if atyp == 1:
        off = 4 + 4
    elif atyp == 4:
        off = 4 + 16
    elif atyp == 3:
        off = 5 + pkt[4]
    else:
        raise IOError("bad ATYP %d in UDP reply" % atyp)
    return pkt[off + 2:]


def udp_exchange(u, relay, a, payload):
    """Send one datagram (3 tries); return the echoed payload or None."""
    for _ in range(3 if a.expect == "ok" else 1):   # retries only cover loss
        u.sendto(udp_wrap(a.dest_host, a.dest_port, payload), relay)
        end = time.monotonic() + a.wait
        while time.monotonic() < end:
            u.settimeout(max(0.01, end - time.monotonic()))
            try:
                d, _ = u.recvfrom(MAX_DATAGRAM)
            except socket.timeout:
                break
            body = udp_unwrap(d)
            if body[:8] == payload[:8]:
                return body
    return None


def cmd_udp(a):
    require_loopback(a.dest_host)
    try:
        ctl, bhost, bport = socks_open(a.socks, 3, "0.0.0.0", 0, 5)
    except (OSError, IOError) as e:
        die("udp: UDP ASSOCIATE via %d failed: %s" % (a.socks, e))
    if bhost in ("0.0.0.0", "::"):
        bhost = "127.0.0.1"
    require_loopback(bhost)
    u = socket.socket(socket.AF_INET6 if ":" in bhost else socket.AF_INET, socket.SOCK_DGRAM)
    u.bind(("127.0.0.1", 0) if ":" not in bhost else ("::1", 0))
    ok = udp_phase(u, (bhost, bport), a, 0)
    if a.then_expect:
        # the same association (same client socket) after something changed on the server:
        # tell the caller we are ready, wait for its go, then expect a.then_expect
        if a.ready_file:
            touch(a.ready_file)
        end = time.monotonic() + 30
        while not os.path.exists(a.go_file) and time.monotonic() < end:
            time.sleep(0.05)
        if not os.path.exists(a.go_file):
            die("udp: no go file %s within 30 s" % a.go_file)
        a.expect = a.then_expect
        ok = udp_phase(u, (bhost, bport), a, a.count) and ok
    ctl.close()
    return 0 if ok else 1


def udp_phase(u, relay, a, first):
    """a.count round trips from datagram number @first on; print one OK/FAIL line."""
    echoed = 0
    for i in range(first, first + a.count):
        payload = struct.pack("!Q", i) + pattern("%s/%d" % (a.seed, i), a.size - 8)
        body = udp_exchange(u, relay, a, payload)
        if body is not None and body != payload:
            die("udp datagram #%d came back altered" % i)
        echoed += body is not None
    what = "%d datagrams x %d bytes via %d -> %s:%d" % (a.count, a.size, a.socks,
                                                       a.dest_host, a.dest_port)
    if a.expect == "ok":
        ok = echoed == a.count
        print("%s udp %s: %d echoed identical" % ("OK" if ok else "FAIL", what, echoed))
    else:
        ok = echoed == 0
        print("%s udp %s: expected refusal, %d echoed" % ("OK" if ok else "FAIL", what, echoed))
    return ok


def cmd_udp_cone(a):
    """Issue 10 (XUDP, PROTOCOLS-2.md §5): through one SOCKS5 UDP association, datagrams to two
    remotes (sockets of this process on loopback) alternately must each reach the remote they
    name, and each remote's answer must come back carrying that remote's address; then a third
    remote that was never addressed sends to the association's outbound address (full cone)
    and must reach the client with its own address. One OK/FAIL line per part."""
    try:
        ctl, bhost, bport = socks_open(a.socks, 3, "0.0.0.0", 0, 5)
    except (OSError, IOError) as e:
        die("udp-cone: UDP ASSOCIATE via %d failed: %s" % (a.socks, e))
    if bhost in ("0.0.0.0", "::"):
        bhost = "127.0.0.1"
    require_loopback(bhost)
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.bind(("127.0.0.1", 0))
    remotes = []
    for _ in range(3):
        r = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        r.bind(("127.0.0.1", 0))
        remotes.append(r)

    def client_recv():
        u.settimeout(5)
        d, _ = u.recvfrom(MAX_DATAGRAM)
        if len(d) < 10 or d[2] != 0 or d[3] != 1:
            raise IOError("reply without an IPv4 source: %r" % d[:10])
        return ("%d.%d.%d.%d" % tuple(d[4:8]), struct.unpack("!H", d[8:10])[0]), d[10:]

    ok = True
    mapping = None
    try:
        for i in range(a.count):
            r = remotes[i % 2]
            payload = struct.pack("!Q", i) + pattern("%s/%d" % (a.seed, i), a.size - 8)
            u.sendto(udp_wrap("127.0.0.1", r.getsockname()[1], payload), (bhost, bport))
            ready, _, _ = select.select(remotes, [], [], 5)
            if ready != [r]:
                die("udp-cone: datagram #%d for port %d reached %s" % (
                    i, r.getsockname()[1], [x.getsockname()[1] for x in ready] or "nothing"))
            got, mapping = r.recvfrom(MAX_DATAGRAM)
            if got != payload:
                die("udp-cone: datagram #%d arrived altered" % i)
            r.sendto(payload[::-1], mapping)
            src, body = client_recv()
            if src != r.getsockname() or body != payload[::-1]:
                die("udp-cone: answer #%d came back from %s:%d (sent from %s:%d) %s" % (
                    i, src[0], src[1], *r.getsockname(),
                    "identical" if body == payload[::-1] else "altered"))
        print("OK udp-cone %d datagrams to 2 remotes alternately: each reached its remote, "
              "each answer carried its remote's address" % a.count, flush=True)
        third = remotes[2]
        payload = pattern(a.seed + "/cone", a.size)
        third.sendto(payload, mapping)
        src, body = client_recv()
        if src != third.getsockname() or body != payload:
            die("udp-cone: the third remote's datagram came back from %s:%d, %s" % (
                src[0], src[1], "identical" if body == payload else "altered"))
        print("OK udp-cone full cone: a remote never addressed reached the client with its "
              "address", flush=True)
    except (OSError, IOError) as e:
        print("FAIL udp-cone: %s" % e, flush=True)
        ok = False
    ctl.close()
    return 0 if ok else 1


class XudpConn:
    """One clear VLESS connection with command 3 (Mux.Cool) carrying XUDP session 0 the way
    Xray's client sends it (PROTOCOLS-2.md §5.1, §5.2): a New UDP frame with the destination,
    the 8-byte GlobalID and the first datagram, then Keep frames with network 2 and each
    datagram's destination. Counts its wire bytes both ways."""

    def __init__(self, port, uuid_text, gid, timeout):
        self.s = socket.create_connection(("127.0.0.1", port), timeout)
        self.s.settimeout(timeout)
        self.gid, self.first, self.up, self.down, self.head = gid, True, 0, 0, False
        self._send(b"\x00" + uuid.UUID(uuid_text).bytes + b"\x00\x03")

    def _send(self, b):
        self.s.sendall(b)
        self.up += len(b)

    def _recv(self, n):
        b = recv_exact(self.s, n)
        self.down += len(b)
        return b

    def datagram(self, port, payload):
        addr = struct.pack("!H", port) + b"\x01" + socket.inet_aton("127.0.0.1")
        if self.first:
            meta = struct.pack("!HBB", 0, 1, 1) + b"\x02" + addr + self.gid
            self.first = False
        else:
            meta = struct.pack("!HBB", 0, 2, 1) + b"\x02" + addr
        self._send(struct.pack("!H", len(meta)) + meta + struct.pack("!H", len(payload)) + payload)

    def frame(self):
        """The next frame: (session, status, metadata after the option, data)."""
        if not self.head:
            if self._recv(2) != b"\x00\x00":
                raise IOError("no VLESS response header")
            self.head = True
        ml = struct.unpack("!H", self._recv(2))[0]
        meta = self._recv(ml)
        if ml < 4:
            raise IOError("metadata of %d bytes" % ml)
        data = b""
        if meta[3] & 1:
            data = self._recv(struct.unpack("!H", self._recv(2))[0])
        return struct.unpack("!H", meta[:2])[0], meta[2], meta[4:], data

    def close(self):
        self.s.close()


def xudp_phase(a, c, remote, tag):
    """COUNT datagrams through C to REMOTE, each answered by REMOTE to the address it came
    from; each answer must come back in a Keep frame carrying REMOTE's address.
    @return the source ports REMOTE saw (a set)."""
    ports = set()
    rport = remote.getsockname()[1]
    for i in range(a.count):
        payload = struct.pack("!Q", i) + pattern("%s/%s/%d" % (a.seed, tag, i), a.size - 8)
        c.datagram(rport, payload)
        ready, _, _ = select.select([remote], [], [], a.timeout)
        if not ready:
            raise IOError("%s: datagram #%d never reached the remote" % (tag, i))
        got, mapping = remote.recvfrom(MAX_DATAGRAM)
        if got != payload:
            raise IOError("%s: datagram #%d arrived altered" % (tag, i))
        ports.add(mapping[1])
        remote.sendto(payload[::-1], mapping)
        sid, status, meta, data = c.frame()
        want_src = b"\x02" + struct.pack("!H", rport) + b"\x01" + socket.inet_aton("127.0.0.1")
        if sid != 0 or status != 2 or meta != want_src or data != payload[::-1]:
            raise IOError("%s: answer #%d: session %d status %d source %s, %s" % (
                tag, i, sid, status, meta.hex(), "identical" if data == payload[::-1]
                else "altered"))
    return ports


def cmd_xudp(a):
    """Issue 10 (XUDP GlobalID re-attach, PROTOCOLS-2.md §5.3): one clear VLESS Mux.Cool
    connection sends COUNT datagrams of XUDP session 0 with GlobalID --gid to a remote socket
    of this process, which answers each; then it closes (abruptly: no End frame, as a dropped
    connection). Prints 'XUDP_PORT N' (the one source port the remote saw) and 'XUDP_WIRE UP
    DOWN' (the client's wire bytes). --steal: a second connection with the same GlobalID is
    opened while the first is still open; the remote must see the same port from both, and
    the first must get an End frame for session 0."""
    gid = bytes.fromhex(a.gid)
    if len(gid) != 8:
        die("--gid: 16 hex digits", 2)
    remote = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    remote.bind(("127.0.0.1", 0))
    conns = []
    try:
        c = XudpConn(a.port, a.uuid, gid, a.timeout)
        conns.append(c)
        ports = xudp_phase(a, c, remote, "first")
        if a.steal:
            c2 = XudpConn(a.port, a.uuid, gid, a.timeout)
            conns.append(c2)
            ports2 = xudp_phase(a, c2, remote, "second")
            sid, status, _, _ = c.frame()
            if (sid, status) != (0, 3):
                raise IOError("the first connection got session %d status %d, not End of 0" %
                              (sid, status))
            print("OK xudp steal: the first connection got End for session 0; ports %s then %s"
                  % (sorted(ports), sorted(ports2)), flush=True)
            if ports2 != ports:
                raise IOError("the second connection's datagrams came from %s, the first's from %s"
                              % (sorted(ports2), sorted(ports)))
        if len(ports) != 1:
            raise IOError("the remote saw several source ports: %s" % sorted(ports))
        print("OK xudp %d datagrams with GlobalID %s, each answered through session 0" %
              (a.count, a.gid), flush=True)
        print("XUDP_PORT %d" % ports.pop())
        print("XUDP_WIRE %d %d" % (sum(x.up for x in conns), sum(x.down for x in conns)),
              flush=True)
        ok = True
    except (OSError, IOError, ValueError) as e:
        print("FAIL xudp: %s" % e, flush=True)
        ok = False
    for c in conns:
        c.close()
    remote.close()
    return 0 if ok else 1


class CutRelay:
    """TCP relay 127.0.0.1:PORT -> 127.0.0.1:TO (threads) whose connections cut() ends at once,
    as a network that loses a client's connection; it keeps accepting new ones. Counts the bytes
    it relayed each way (up = towards TO)."""

    def __init__(self, port, to):
        self.to, self.conns, self.lock = to, [], threading.Lock()
        self.bytes = {"up": 0, "down": 0}
        self.ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.ls.bind(("127.0.0.1", port))
        self.ls.listen(16)
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.ls.accept()
                u = socket.create_connection(("127.0.0.1", self.to), 5)
            except OSError:
                return
            with self.lock:
                self.conns += [c, u]
            for x, y, way in ((c, u, "up"), (u, c, "down")):
                threading.Thread(target=self._pipe, args=(x, y, way), daemon=True).start()

    def _pipe(self, x, y, way):
        try:
            while True:
                b = x.recv(65536)
                if not b:
                    break
                if way == "down":  # counted before the client can see it
                    self._count(way, len(b))
                y.sendall(b)
                if way == "up":  # counted once the server's socket took it
                    self._count(way, len(b))
        except OSError:
            pass
        for z in (x, y):
            try:
                z.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _count(self, way, n):
        with self.lock:
            self.bytes[way] += n

    def cut(self):
        """Drop every connection (RST both ways). @return how many client connections."""
        with self.lock:
            conns, self.conns = self.conns, []
        for z in conns:
            try:  # shutdown first: it wakes the pipe threads blocked in recv() on z
                z.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                z.shutdown(socket.SHUT_RDWR)
                z.close()
            except OSError:
                pass
        return len(conns) // 2


def cmd_xudp_client(a):
    """Issue 10 (XUDP GlobalID re-attach with a real client): a SOCKS5 UDP association through
    a client (Xray) whose server connection goes through a relay of this process
    (--relay-port -> --server-port). Datagrams from one local UDP socket (so one GlobalID) to
    a remote socket of this process, each answered; then the relay drops the client's
    connection, and datagrams from the same socket are sent again (each retried, the client
    dials anew) until the remote sees them. Prints 'XUDP_PORTS BEFORE AFTER': the source ports
    the remote saw before and after the cut, and 'XUDP_WIRE UP DOWN': the bytes the relay
    carried (every connection of the client)."""
    relay = CutRelay(a.relay_port, a.server_port)
    remote = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    remote.bind(("127.0.0.1", 0))
    rport = remote.getsockname()[1]
    try:
        ctl, bhost, bport = socks_open(a.socks, 3, "0.0.0.0", 0, 5)
    except (OSError, IOError) as e:
        die("xudp-client: UDP ASSOCIATE via %d failed: %s" % (a.socks, e))
    if bhost in ("0.0.0.0", "::"):
        bhost = "127.0.0.1"
    require_loopback(bhost)
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.bind(("127.0.0.1", 0))

    def exchange(i, tries):
        """One datagram to the remote (sent up to TRIES times); the remote answers it; the
        answer must reach u. @return the source port the remote saw."""
        payload = struct.pack("!Q", i) + pattern("%s/%d" % (a.seed, i), 200)
        for _ in range(tries):
            u.sendto(udp_wrap("127.0.0.1", rport, payload), (bhost, bport))
            ready, _, _ = select.select([remote], [], [], 1)
            if ready:
                break
        else:
            raise IOError("datagram #%d never reached the remote (%d tries)" % (i, tries))
        got, mapping = remote.recvfrom(MAX_DATAGRAM)
        while got != payload:  # a retried earlier datagram arriving late
            ready, _, _ = select.select([remote], [], [], 2)
            if not ready:
                raise IOError("datagram #%d arrived altered" % i)
            got, mapping = remote.recvfrom(MAX_DATAGRAM)
        remote.sendto(payload[::-1], mapping)
        u.settimeout(5)
        while True:
            d, _ = u.recvfrom(MAX_DATAGRAM)
            if len(d) < 10 or d[2] != 0 or d[3] != 1:
                raise IOError("answer #%d without an IPv4 source: %r" % (i, d[:10]))
            src = ("%d.%d.%d.%d" % tuple(d[4:8]), struct.unpack("!H", d[8:10])[0])
            body = d[10:]
            if body == payload[::-1]:
                break
        if src != ("127.0.0.1", rport):
            raise IOError("answer #%d came back from %s" % (i, src))
        return mapping[1]

    ok = True
    try:
        before = {exchange(i, 3) for i in range(a.count)}
        n = relay.cut()
        print("OK xudp-client: %d datagrams answered; the relay dropped %d connection(s)" %
              (a.count, n), flush=True)
        if n < 1:
            raise IOError("the client had no connection through the relay")
        after = {exchange(a.count + i, 10) for i in range(a.count)}
        print("OK xudp-client: %d datagrams answered after the cut" % a.count, flush=True)
        if len(before) != 1 or len(after) != 1:
            raise IOError("several source ports: before %s after %s" % (sorted(before),
                                                                         sorted(after)))
        print("XUDP_PORTS %d %d" % (before.pop(), after.pop()), flush=True)
        time.sleep(0.5)  # the relay's threads count what they just passed on
        with relay.lock:
            print("XUDP_WIRE %d %d" % (relay.bytes["up"], relay.bytes["down"]), flush=True)
    except (OSError, IOError, ValueError) as e:
        print("FAIL xudp-client: %s" % e, flush=True)
        ok = False
    ctl.close()
    u.close()
    remote.close()
    relay.cut()
    return 0 if ok else 1


# --- random bytes at a port ------------------------------------------------------------

def garbage_udp(port, blob, wait):
    """Send one random datagram; return a FAIL/OK line (an answer of any size is a FAIL)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
        u.connect(("127.0.0.1", port))   # connected: an ICMP port-unreachable is reported
        u.settimeout(wait)
        try:
            u.send(blob[:MAX_DATAGRAM])
            d = u.recv(MAX_DATAGRAM)
        except socket.timeout:
            return "OK garbage udp %d bytes: no answer" % len(blob)
        except ConnectionRefusedError:
            return "FAIL garbage udp %d bytes: port unreachable (nothing listens)" % len(blob)
        except OSError as e:
            return "OK garbage udp %d bytes: %s" % (len(blob), e)
    return "FAIL garbage udp %d bytes: got %d bytes back" % (len(blob), len(d))


def garbage_tcp(port, blob, wait):
    """Connect, send random bytes, read: EOF, reset or silence is fine, any byte is a FAIL."""
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=wait)
    except OSError as e:
        return "FAIL garbage tcp %d bytes: cannot connect: %s" % (len(blob), e)
    try:
        with s:
            s.sendall(blob)
            s.settimeout(wait)
            d = s.recv(65536)
    except socket.timeout:
        return "OK garbage tcp %d bytes: no answer, silent" % len(blob)
    except OSError as e:
        return "OK garbage tcp %d bytes: no answer, %s" % (len(blob), e.__class__.__name__)
    if d:
        return "FAIL garbage tcp %d bytes: got %d bytes back" % (len(blob), len(d))
    return "OK garbage tcp %d bytes: no answer, closed" % len(blob)


def cmd_garbage(a):
    rnd = random.Random(a.seed)
    bad = 0
    for size in (int(x) for x in a.sizes.split(",")):
        blob = rnd.randbytes(size)
        line = garbage_udp(a.port, blob, a.wait) if a.udp else garbage_tcp(a.port, blob, a.wait)
        print(line, flush=True)
        bad += line.startswith("FAIL")
    return 1 if bad else 0


# --- held connections and CPU use (t-fd-exhaustion.sh, t-conn-cap.sh) -----------------

def hold_conns(a, first_bytes):
    """Open --conns TCP connections to 127.0.0.1:PORT one after the other, send first_bytes()
    on each (nothing when it returns b""), and keep them all open until --release-file exists
    (or --max-secs pass). 'connected N failed M' goes to --ready-file and stdout. Returns the
    open sockets; the caller closes them."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = a.conns + 64
    if soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(need, hard), hard))
    socks, failed = [], 0
    for _ in range(a.conns):
        try:
            s = socket.create_connection(("127.0.0.1", a.port), timeout=a.connect_timeout)
            data = first_bytes()
            if data:
                s.sendall(data)
            socks.append(s)
        except OSError:
            failed += 1
    text = "connected %d failed %d\n" % (len(socks), failed)
    touch(a.ready_file, text)
    print(text, end="", flush=True)
    deadline = time.monotonic() + a.max_secs
    while time.monotonic() < deadline and not (a.release_file and os.path.exists(a.release_file)):
        time.sleep(0.02)
    return socks


def cmd_hold(a):
    """hold_conns with --bytes random bytes on each connection, then close them all (FIN).
    A connection that the server never accepts still completes in its accept queue."""
    rnd = random.Random(a.seed)
    for s in hold_conns(a, lambda: rnd.randbytes(a.bytes)):
        s.close()
    return 0


def proc_ticks(pid):
    """utime + stime of a process, in clock ticks (/proc/PID/stat fields 14 and 15)."""
    with open("/proc/%d/stat" % pid) as f:
        text = f.read()
    fields = text[text.rindex(")") + 2:].split()
    return int(fields[11]) + int(fields[12])


def cmd_cpu(a):
    """CPU use of --pid over --secs seconds, in percent of one core; fails above --max."""
    hz = os.sysconf("SC_CLK_TCK")
    t0, c0 = time.monotonic(), proc_ticks(a.pid)
    time.sleep(a.secs)
    t1, c1 = time.monotonic(), proc_ticks(a.pid)
    pct = 100.0 * (c1 - c0) / hz / (t1 - t0)
    ok = a.max is None or pct <= a.max
    print("%s cpu %.1f%% over %.1f s" % ("OK" if ok else "FAIL", pct, t1 - t0), flush=True)
    return 0 if ok else 1


def cmd_sockets(a):
    """Print how many TCP connections (any state but LISTEN) process --pid holds whose local
    port is --port: its socket inodes (/proc/PID/fd) matched against /proc/net/tcp{,6}. With
    --udp, how many UDP sockets it holds on that local port (/proc/net/udp{,6})."""
    inodes = set()
    fd_dir = "/proc/%d/fd" % a.pid
    for name in os.listdir(fd_dir):
        try:
            target = os.readlink(os.path.join(fd_dir, name))
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    count = 0
    kind = "udp" if a.udp else "tcp"
    for table in ("/proc/net/%s" % kind, "/proc/net/%s6" % kind):
        try:
            with open(table) as f:
                rows = f.readlines()[1:]
        except OSError:
            continue
        for row in rows:
            w = row.split()
            if (int(w[1].rsplit(":", 1)[1], 16) == a.port and (a.udp or w[3] != "0A")
                    and w[9] in inodes):
                count += 1
    print(count)
    return 0


# --- configs -------------------------------------------------------------------------

def parse_user(text):
    """ID:UUID or ID:UUID:DEVICE_LIMIT."""
    parts = text.split(":")
    limit = int(parts[2]) if len(parts) > 2 else None
    return {"id": int(parts[0]), "uuid": parts[1], "speed_limit": None, "device_limit": limit}


# --- VLESS burst from several source addresses (issue 12, device limit race) -----------

def vless_burst_one(a, src, idx, go, done, results, held):
    """One clear VLESS TCP request (PROTOCOLS.md §5) from SRC to the echo server, started at GO;
    the connection stays open until DONE so that an admitted session stays live meanwhile."""
    payload = pattern("%s/%d" % (src, idx), 64)
    s = None
    ok = False
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.settimeout(a.timeout)
        s.bind((src, 0))
        s.connect(("127.0.0.1", a.port))
        go.wait()
        req = (b"\x00" + uuid.UUID(a.uuid).bytes + b"\x00\x01" + struct.pack(">H", a.dest_port) +
               b"\x01" + socket.inet_aton("127.0.0.1"))
        s.sendall(req + payload)
        got = recv_exact(s, 2 + len(payload))
        ok = got == b"\x00\x00" + payload
    except (OSError, IOError, ValueError):
        ok = False
    except threading.BrokenBarrierError:
        ok = False
    results[idx] = (src, ok)
    done.wait(a.timeout + a.hold)
    if ok and a.hold > 0:
        # still served after the hold: the same connection echoes again
        try:
            more = pattern("%s/%d/again" % (src, idx), 64)
            s.sendall(more)
            ok = recv_exact(s, len(more)) == more
        except (OSError, IOError, ValueError):
            ok = False
        held[idx] = ok
    if s is not None:
        s.close()


def cmd_vlessburst(a):
    """CONNS VLESS connections spread over SOURCES, all sending at one instant; prints one line
    per source: SOURCE ADMITTED TOTAL (admitted: got the echo)."""
    sources = a.sources.split(",")
    for src in sources:
        require_loopback(src)
    go = threading.Barrier(a.conns, timeout=a.timeout)
    done = threading.Event()
    results = [None] * a.conns
    held = [None] * a.conns
    ths = [threading.Thread(target=vless_burst_one,
                            args=(a, sources[i % len(sources)], i, go, done, results, held))
           for i in range(a.conns)]
    for t in ths:
        t.start()
    deadline = time.monotonic() + a.timeout + 2
    while time.monotonic() < deadline and any(r is None for r in results):
        time.sleep(0.05)
    if a.hold <= 0:
        done.set()
    for src in sources:
        mine = [r for r in results if r is not None and r[0] == src]
        print("%s %d %d" % (src, sum(1 for r in mine if r[1]), len(mine)))
    sys.stdout.flush()
    if a.hold > 0:
        if a.ready_file:
            touch(a.ready_file)
        end = time.monotonic() + a.hold
        while time.monotonic() < end and not (a.release_file and os.path.exists(a.release_file)):
            time.sleep(0.1)
    done.set()
    for t in ths:
        t.join(a.timeout)
    if a.hold > 0:
        n_ok = sum(1 for v in held if v is True)
        n_cut = sum(1 for v in held if v is False)
        print("held %d still served, %d cut" % (n_ok, n_cut))
    return 0


# --- source-address relay -------------------------------------------------------------

RELAY_COUNT = {"up": 0, "down": 0}
RELAY_LOCK = threading.Lock()


def relay_pipe(src, dst, count=None):
    """Copy src to dst until EOF. With count ("up" or "down", relay --count-file), add the bytes
    to that total and write both totals to the file, and pass EOF on as a half-close."""
    try:
        while True:
            d = src.recv(65536)
            if not d:
                break
            if count is not None:  # what the sender put on the wire, delivered or not
                with RELAY_LOCK:
                    RELAY_COUNT[count] += len(d)
                    with open(count_file_path + ".tmp", "w") as f:
                        f.write("%d %d\n" % (RELAY_COUNT["up"], RELAY_COUNT["down"]))
                    os.rename(count_file_path + ".tmp", count_file_path)
            dst.sendall(d)
    except OSError:
        pass
    if count is not None:
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        return
    for s in (dst, src):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


count_file_path = None


def relay_one(c, a):
    try:
        u = socket.create_connection(("127.0.0.1", a.to), timeout=a.timeout,
                                     source_address=(a.source, 0))
    except OSError:
        c.close()
        return
    u.settimeout(None)
    c.settimeout(None)
    counting = a.count_file is not None
    t = threading.Thread(target=relay_pipe, args=(u, c, "down" if counting else None),
                         daemon=True)
    t.start()
    relay_pipe(c, u, "up" if counting else None)
    t.join()
    c.close()
    u.close()


def cmd_relay(a):
    """Plain TCP relay 127.0.0.1:PORT -> 127.0.0.1:TO whose outgoing side is bound to SOURCE,
    so that a client behind it (ss-local) reaches the server from another loopback address.
    With --count-file, the bytes relayed each way (all connections) are kept in that file as
    "UP DOWN" (up = towards TO), and EOF passes as a half-close."""
    global count_file_path
    count_file_path = a.count_file
    require_loopback(a.source)
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", a.port))
    ls.listen(64)
    if a.ready_file:
        open(a.ready_file, "w").close()
    while True:
        c, _ = ls.accept()
        threading.Thread(target=relay_one, args=(c, a), daemon=True).start()


def cmd_mkconfig(a):
    if a.protocol == "trojan":
        # the UniProxy trojan node (PANEL.md 1.4); routes are left out
        node = {"server_port": a.port, "server_name": a.server_name, "network": "tcp"}
    elif a.protocol == "vless":
        # the UniProxy vless node (PANEL.md 1.4): TLS when a certificate is given
        tls = 1 if a.cert_self or a.cert_file else 0
        node = {"server_port": a.port, "network": "tcp", "tls": tls, "flow": None,
                "decryption": None}
    elif a.protocol == "anytls":
        # issue 27: the Xboard anytls node (TLS with the node's certificate, default padding)
        node = {"server_port": a.port, "server_name": a.server_name}
    elif a.protocol in ("socks", "http", "mixed"):
        # issue 27: the Xboard socks / http node (tls 1 with a certificate), a local mixed one
        node = {"server_port": a.port, "tls": 1 if (a.cert_self or a.cert_file) else 0}
    elif a.protocol == "vmess":
        # the UniProxy vmess node (PANEL.md 1.4): TLS when a certificate is given
        tls = 1 if (a.cert_self or a.cert_file) else 0
        node = {"server_port": a.port, "network": "tcp", "tls": tls, "networkSettings": None}
    else:
        node = {"server_port": a.port, "cipher": a.cipher,
                "routes": [{"id": 1, "match": a.block or ["domain:blocked.test", "10.9.0.0/16"],
                            "action": "block"}]}
        if a.plugin_opts is not None:
            # issue 9: the Xboard shadowsocks node with the SIP003 v2ray-plugin
            node["plugin"] = "v2ray-plugin"
            node["plugin_opts"] = a.plugin_opts
        if a.server_key:
            node["server_key"] = a.server_key  # Shadowsocks 2022 (PANEL.md 1.4)
    if a.ws_path is not None and a.protocol != "shadowsocks":
        # issue 9: network ws with the panel's networkSettings (path, headers.Host); issue 10:
        # the same settings for network httpupgrade
        node["network"] = a.network
        node["networkSettings"] = {"path": a.ws_path}
        if a.ws_host:
            node["networkSettings"]["headers"] = {"Host": a.ws_host}
    if getattr(a, "grpc_service", None) is not None and a.protocol != "shadowsocks":
        # issue 10: network grpc with the panel's networkSettings.serviceName
        node["network"] = "grpc"
        node["networkSettings"] = {"serviceName": a.grpc_service}
    users = {"users": [parse_user(u) for u in a.user]}
    panel = {"type": "local"}
    if a.protocol != "shadowsocks":
        panel["node_type"] = a.protocol
    if a.node_file:
        write_json(a.node_file, node)
        panel["node_file"] = a.node_file
    else:
        panel["node"] = node
    if a.users_file:
        write_json(a.users_file, users)
        panel["users_file"] = a.users_file
    else:
        panel["users"] = users
    node_cfg = {"tag": "t1", "listen": "127.0.0.1", "panel": panel}
    if not a.no_allow_private:
        # the tests' echo servers are on loopback, which katana refuses to proxy users to
        # unless the node allows it (issue 15)
        node_cfg["allow_private"] = True
    if a.accept_proxy_protocol:
        node_cfg["accept_proxy_protocol"] = True  # behind a PROXY protocol front (HAProxy)
    if a.protocol in ("vmess", "shadowsocks", "socks", "http", "mixed") and \
            (a.cert_self or a.cert_file):
        node_cfg["cert"] = ({"mode": "self"} if a.cert_self else
                            {"mode": "file", "cert_file": a.cert_file, "key_file": a.key_file})
    if a.protocol in ("trojan", "anytls"):
        # issue 8: a certificate per node (files, or self-signed at start), optional fallback
        if a.cert_self:
            node_cfg["cert"] = {"mode": "self"}
        elif a.cert_file and a.key_file:
            node_cfg["cert"] = {"mode": "file", "cert_file": a.cert_file, "key_file": a.key_file}
        else:
            die("mkconfig --protocol trojan needs --cert-file and --key-file, or --cert-self", 2)
        if a.fallback:
            node_cfg["fallback"] = a.fallback
    if a.protocol == "vless":
        # issue 9: the certificate when the node has tls 1, optional fallback
        if a.cert_self:
            node_cfg["cert"] = {"mode": "self"}
        elif a.cert_file and a.key_file:
            node_cfg["cert"] = {"mode": "file", "cert_file": a.cert_file, "key_file": a.key_file}
        if a.fallback:
            node_cfg["fallback"] = a.fallback
    cfg = {"log": {"level": a.log_level}, "workers": a.workers,
           "api": {"listen": "127.0.0.1:%d" % (a.api_port or any_free_port())},
           "nodes": [node_cfg]}
    if a.grace is not None:
        cfg["shutdown_grace"] = a.grace
    if a.max_connections is not None:
        cfg["max_connections"] = a.max_connections
    if a.redis:
        # issue 12: the fleet-wide device limit
        cfg["redis"] = {"url": a.redis, "expiry": a.redis_expiry}
    write_json(a.out, cfg)
    return 0


# --- VMess AEAD client (PROTOCOLS.md §6; issue 9 negative tests) ------------------------------

def vmess_kdf(key, *path):
    """KDF(key, p1..pn): HMAC-SHA256 keyed "VMess AEAD KDF", each path element an HMAC over the
    previous level (PROTOCOLS.md §6.2)."""
    import hashlib
    import hmac

    def level(i, m):
        if i == 0:
            return hmac.new(b"VMess AEAD KDF", m, hashlib.sha256).digest()
        k = path[i - 1].ljust(64, b"\0")
        inner = level(i - 1, bytes(x ^ 0x36 for x in k) + m)
        return level(i - 1, bytes(x ^ 0x5c for x in k) + inner)
    return level(len(path), key)


def vmess_request(uuid_text, ts, dest_port, payload):
    """The wire bytes of one TCP request to 127.0.0.1:DEST_PORT with one aes-128-gcm chunk
    (options S|M, no padding), and (body key, body IV, V) to read the answer."""
    import hashlib
    import zlib
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    uid = bytes.fromhex(uuid_text.replace("-", ""))
    cmd_key = hashlib.md5(uid + b"c48619fe-8f02-49e0-b9e9-edf763e17e21").digest()
    key, iv, v = os.urandom(16), os.urandom(16), os.urandom(1)[0]
    addr = struct.pack(">HB", dest_port, 1) + socket.inet_aton("127.0.0.1")
    h = bytes([1]) + iv + key + bytes([v, 0x05, 0x03, 0, 1]) + addr
    h += struct.pack(">I", vmess_fnv1a(h))
    plain = struct.pack(">Q", ts) + os.urandom(4)
    plain += struct.pack(">I", zlib.crc32(plain) & 0xffffffff)
    enc = Cipher(algorithms.AES(vmess_kdf(cmd_key, b"AES Auth ID Encryption")[:16]),
                 modes.ECB()).encryptor()
    auth_id = enc.update(plain) + enc.finalize()
    nonce = os.urandom(8)
    k = lambda p: vmess_kdf(cmd_key, p, auth_id, nonce)
    wire = auth_id
    wire += AESGCM(k(b"VMess Header AEAD Key_Length")[:16]).encrypt(
        k(b"VMess Header AEAD Nonce_Length")[:12], struct.pack(">H", len(h)), auth_id)
    wire += nonce
    wire += AESGCM(k(b"VMess Header AEAD Key")[:16]).encrypt(
        k(b"VMess Header AEAD Nonce")[:12], h, auth_id)
    mask = struct.unpack(">H", hashlib.shake_128(iv).digest(2))[0]
    ct = AESGCM(key).encrypt(b"\0\0" + iv[2:12], payload, None)
    wire += struct.pack(">H", len(ct) ^ mask) + ct
    return wire, key, iv, v


def vmess_fnv1a(b):
    x = 0x811c9dc5
    for c in b:
        x = ((x ^ c) * 0x01000193) & 0xffffffff
    return x


def vmess_read_reply(s, key, iv, v, want, timeout):
    """Read the response header and chunks until len(want) payload bytes came. @return the
    payload, or None when the server closed or said nothing."""
    import hashlib
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    rk, riv = hashlib.sha256(key).digest()[:16], hashlib.sha256(iv).digest()[:16]
    buf = b""
    s.settimeout(timeout)

    def need(n):
        nonlocal buf
        while len(buf) < n:
            d = s.recv(65536)
            if not d:
                raise EOFError
            buf += d
        out, buf = buf[:n], buf[n:]
        return out
    try:
        hl = AESGCM(vmess_kdf(rk, b"AEAD Resp Header Len Key")[:16]).decrypt(
            vmess_kdf(riv, b"AEAD Resp Header Len IV")[:12], need(18), None)
        hdr = AESGCM(vmess_kdf(rk, b"AEAD Resp Header Key")[:16]).decrypt(
            vmess_kdf(riv, b"AEAD Resp Header IV")[:12], need(struct.unpack(">H", hl)[0] + 16),
            None)
        if hdr[0] != v:
            return None
        shake = hashlib.shake_128(riv).digest(4096)
        got, n = b"", 0
        while len(got) < len(want):
            mask = struct.unpack(">H", shake[2 * n:2 * n + 2])[0]
            size = struct.unpack(">H", need(2))[0] ^ mask
            got += AESGCM(rk).decrypt(struct.pack(">H", n) + riv[2:12], need(size), None)
            n += 1
        return got
    except (EOFError, socket.timeout, OSError):
        return None


def vmess_try(a, wire, key, iv, v, payload):
    """Send WIRE on a new connection. @return "ok" (echoed), "refused" (no byte back, still
    open after --wait s) or a description of anything else."""
    s = socket.create_connection(("127.0.0.1", a.port), timeout=5)
    try:
        s.sendall(wire)
        if a.expect == "ok":
            got = vmess_read_reply(s, key, iv, v, payload, a.timeout)
            return "ok" if got == payload else "no echo (%r)" % (got and got[:16])
        s.settimeout(a.wait)
        try:
            d = s.recv(1)
        except socket.timeout:
            return "refused"
        return "closed at once" if not d else "answered %d bytes" % len(d)
    finally:
        s.close()


def cmd_vmess(a):
    require_loopback("127.0.0.1")
    payload = b"vmess probe " + os.urandom(24).hex().encode()
    wire, key, iv, v = vmess_request(a.uuid, int(time.time()) - a.age, a.dest_port, payload)
    if a.replay:
        first = vmess_try(argparse.Namespace(**dict(vars(a), expect="ok")), wire, key, iv, v,
                          payload)
        if first != "ok":
            print("FAIL vmess: the request to replay was not accepted: %s" % first)
            return 1
    got = vmess_try(a, wire, key, iv, v, payload)
    if got != a.expect:
        print("FAIL vmess: expected %s, got %s" % (a.expect, got))
        return 1
    print("ok vmess: %s%s" % (got, " (replayed auth ID)" if a.replay else ""))
    return 0



def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")
    os.rename(tmp, path)


def load_json(path, limit=1 << 20):
    with open(path) as f:
        text = f.read(limit + 1)
    if len(text) > limit:
        raise ValueError("%s: larger than %d bytes" % (path, limit))
    return json.loads(text)


def cmd_ssplan(a):
    """Print the config as shell words for the ss-server self-check mode:
    'node PORT CIPHER', one 'user ID UUID' per user, one 'block MATCH' per block entry."""
    cfg = load_json(a.config)
    base = os.path.dirname(os.path.abspath(a.config))
    panel = cfg["nodes"][0]["panel"]
    rel = lambda p: p if os.path.isabs(p) else os.path.join(base, p)
    node = panel["node"] if "node" in panel else load_json(rel(panel["node_file"]))
    users = panel["users"] if "users" in panel else load_json(rel(panel["users_file"]))
    if panel.get("node_type", "shadowsocks") == "trojan":
        # (KT_SERVER=trojan|v2ray) the reference servers' parameters
        ncfg = cfg["nodes"][0]
        cert = ncfg.get("cert", {})
        print("node %d trojan" % node["server_port"])
        print("sni %s" % node.get("server_name", ""))
        if cert.get("mode") == "file":
            print("cert %s %s" % (rel(cert["cert_file"]), rel(cert["key_file"])))
        else:
            print("cert self")
        if ncfg.get("fallback"):
            print("fallback %s" % ncfg["fallback"])
    elif panel.get("node_type") == "vless":
        print("node %d vless" % node["server_port"])
    elif panel.get("node_type") == "vmess":
        print("node %d vmess" % node["server_port"])
    else:
        print("node %d %s" % (node["server_port"], node["cipher"]))
    for u in users["users"]:
        print("user %d %s" % (u["id"], u["uuid"]))
    for r in node.get("routes", []):
        if r.get("action") == "block":
            for m in r["match"]:
                print("block %s" % m)
    return 0


def cmd_usage(a):
    """Print 'ID UP DOWN' from the last 'usage user ID: up N down N' line per user
    found after byte --offset of the log (log lines may carry a prefix)."""
    last = {}
    with open(a.log, "rb") as f:
        f.seek(a.offset)
        for raw in f:
            line = raw.decode("utf-8", "replace")
            i = line.find("usage user ")
            if i < 0:
                continue
            w = line[i:].replace(":", " ").split()
            try:
                uid, up, down = int(w[2]), int(w[w.index("up") + 1]), int(w[w.index("down") + 1])
            except (ValueError, IndexError):
                continue
            last[uid] = (up, down)
    for uid in sorted(last):
        print("%d %d %d" % (uid, last[uid][0], last[uid][1]))
    return 0


# --- Trojan / TLS helpers (t-trojan-*.sh) ---------------------------------------------

HTTP_REASONS = {200: "OK", 404: "Not Found"}


def _httpd_conn(c, answer):
    """Read the request (until a blank line, 64 KiB or 2 s of silence), send ANSWER, close."""
    got = b""
    c.settimeout(2)
    try:
        while b"\r\n\r\n" not in got and len(got) < 65536:
            d = c.recv(65536)
            if not d:
                break
            got += d
    except OSError:
        pass
    try:
        if got:
            c.sendall(answer)
    except OSError:
        pass
    finally:
        c.close()


def cmd_httpd(a):
    """A fixed-answer HTTP/1.1 server on 127.0.0.1:PORT (the Trojan fallback web server): every
    request, whatever its bytes, gets the same status and body, then the connection closes."""
    body = a.body.encode()
    answer = ("HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n"
              "Connection: close\r\n\r\n" % (a.status, HTTP_REASONS.get(a.status, "Status"),
                                                 len(body))).encode() + body
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", a.port))
    ls.listen(512)
    touch(a.ready_file)
    while True:
        c, _ = ls.accept()
        threading.Thread(target=_httpd_conn, args=(c, answer), daemon=True).start()


def client_hello(server_name):
    """The bytes of a real TLS ClientHello (Python's ssl, SNI SERVER_NAME, ALPN h2/http1.1)."""
    import ssl
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols(["h2", "http/1.1"])
    inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(inc, out, server_hostname=server_name)
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return out.read()


def probe_bytes(mode, server_name, seed):
    """What a bad-input probe sends: half a ClientHello, a TLS handshake record of random
    bytes, a plain-HTTP request, or nothing."""
    if mode == "half":
        hello = client_hello(server_name)
        return hello[:len(hello) // 2]
    if mode == "garbage":
        body = random.Random(seed).randbytes(512)
        return b"\x16\x03\x01" + struct.pack("!H", len(body)) + body
    if mode == "plain":
        return b"GET / HTTP/1.1\r\nHost: node.test\r\nConnection: close\r\n\r\n"
    return b""


def cmd_tlsprobe(a):
    """One connection to 127.0.0.1:PORT that sends a bad-input probe (see probe_bytes) and reads
    until the server closes or --wait seconds pass. --expect closed: OK when the server closed
    the connection (EOF or reset) within --wait and sent no HTTP answer (a TLS alert record is
    fine); --expect silent: OK when not a byte came back (closed or still open)."""
    data = probe_bytes(a.mode, a.server_name, a.seed)
    try:
        s = socket.create_connection(("127.0.0.1", a.port), timeout=a.wait)
    except OSError as e:
        die("tlsprobe %s: cannot connect: %s" % (a.mode, e))
    got, end, t0 = b"", "timeout", time.monotonic()
    with s:
        try:
            s.sendall(data)
            s.settimeout(a.wait)
            while len(got) < 65536:
                d = s.recv(65536)
                if not d:
                    end = "eof"
                    break
                got += d
        except socket.timeout:
            end = "timeout"
        except OSError as e:
            end = "reset (%s)" % e.__class__.__name__
    kind = "nothing" if not got else ("TLS alert" if got[:1] == b"\x15" else
                                      "HTTP answer" if got[:5] == b"HTTP/" else "other bytes")
    if a.expect == "silent":
        ok = not got
    else:
        ok = end != "timeout" and kind != "HTTP answer" and kind != "other bytes"
    print("%s tlsprobe %s (%d bytes sent): %s after %.2fs, got %d bytes (%s) %s" %
          ("OK" if ok else "FAIL", a.mode, len(data), end, time.monotonic() - t0, len(got),
           kind, got[:40].hex()), flush=True)
    return 0 if ok else 1


def cmd_stall(a):
    """hold_conns with connections that never finish a TLS handshake (each sends a probe, see
    probe_bytes, then stays silent); at release, prints how many the server had already closed
    ('closed K of N')."""
    data = probe_bytes(a.mode, a.server_name, "stall")
    socks = hold_conns(a, lambda: data)
    closed = 0
    for s in socks:
        s.setblocking(False)
        try:
            while s.recv(65536):
                pass
            closed += 1
        except BlockingIOError:
            pass
        except OSError:
            closed += 1
        s.close()
    print("closed %d of %d" % (closed, len(socks)), flush=True)
    return 0


# --- REST API helpers (t-api-*.sh) ----------------------------------------------------

def cmd_sse(a):
    """Print each complete Server-Sent Event of a captured stream as one JSON line
    {"event": NAME, "data": DATA}; DATA is parsed JSON (or the raw text). Comments are skipped;
    a trailing incomplete event is ignored. Bounded: at most 8 MiB are read."""
    with open(a.file, "rb") as f:
        text = f.read(8 << 20).decode("utf-8", "replace")
    for block in text.split("\n\n")[:-1]:
        name, data = "message", []
        for line in block.split("\n"):
            if line.startswith(":"):
                continue
            key, _, val = line.partition(":")
            val = val[1:] if val.startswith(" ") else val
            if key == "event":
                name = val
            elif key == "data":
                data.append(val)
        if not data:
            continue
        raw = "\n".join(data)
        try:
            obj = json.loads(raw)
        except ValueError:
            obj = raw
        print(json.dumps({"event": name, "data": obj}, separators=(",", ":")))
    return 0


# --- command line --------------------------------------------------------------------

def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("freeport")
    c.add_argument("--count", type=int, default=1)
    c = sub.add_parser("wait-port")
    c.add_argument("--port", type=int, required=True)
    c.add_argument("--host", default="127.0.0.1")
    c.add_argument("--timeout", type=float, default=10)
    c = sub.add_parser("echo")
    c.add_argument("--port", type=int, required=True)
    c.add_argument("--hosts", default="127.0.0.1")
    c.add_argument("--ready-file")
    for name in ("tcp", "udp"):
        c = sub.add_parser(name)
        c.add_argument("--socks", type=int, help="SOCKS5 port of the client")
        c.add_argument("--dest-host", default="127.0.0.1")
        c.add_argument("--dest-port", type=int, required=True)
        c.add_argument("--seed", default="katest")
        c.add_argument("--expect", choices=("ok", "refused", "cut", "closed") if name == "tcp"
                       else ("ok", "refused"), default="ok")
        c.add_argument("--timeout", type=float, default=10, help="idle timeout, seconds")
        c.add_argument("--label", default=name)
    c = sub.choices["tcp"]
    c.add_argument("--direct", type=int, help="connect to this port-forward instead of SOCKS5")
    c.add_argument("--bytes", type=int, default=1 << 20)
    c.add_argument("--conns", type=int, default=1)
    c.add_argument("--rate", type=float, default=0, help="bytes/s per connection, 0 = no pacing")
    c.add_argument("--chunk", type=int, default=65536)
    c.add_argument("--first-echo", type=int, default=0,
                   help="send this many bytes alone and wait for their echo before the rest")
    c.add_argument("--ready-file", help="written once the first echoed bytes arrive")
    c.add_argument("--unpace-file", help="once this file exists, --rate no longer applies: "
                   "the rest is sent as fast as the socket takes it")
    c = sub.choices["udp"]
    c.add_argument("--count", type=int, default=20)
    c.add_argument("--size", type=int, default=1200)
    c.add_argument("--wait", type=float, default=1.0, help="seconds to wait per try")
    c.add_argument("--then-expect", choices=("ok", "refused"),
                   help="keep the association: write --ready-file, wait for --go-file, then "
                        "run the round trips again expecting this")
    c.add_argument("--ready-file")
    c.add_argument("--go-file")
    c = sub.add_parser("download", help="issue 11: a fast download through a SOCKS5 client")
    c.add_argument("--socks", type=int, required=True)
    c.add_argument("--dest-host", default="127.0.0.1")
    c.add_argument("--dest-port", type=int, required=True)
    c.add_argument("--bytes", type=int, default=1 << 20)
    c.add_argument("--seed", default="download")
    c.add_argument("--timeout", type=float, default=10, help="idle timeout, seconds")
    c.add_argument("--label", default="download")
    c = sub.add_parser("garbage")
    c.add_argument("--port", type=int, required=True)
    c.add_argument("--udp", action="store_true")
    c.add_argument("--sizes", default="1,50,64,1024,65536")
    c.add_argument("--seed", default="garbage")
    c.add_argument("--wait", type=float, default=2.0)
    c = sub.add_parser("mkconfig")
    c.add_argument("--out", required=True)
    c.add_argument("--port", type=int, required=True)
    c.add_argument("--cipher", default="aes-256-gcm")
    c.add_argument("--server-key", help="shadowsocks 2022: the node's server_key (base64)")
    c.add_argument("--user", action="append", default=[],
                   help="ID:UUID[:DEVICE_LIMIT] (repeatable)")
    c.add_argument("--block", action="append", help="route block match (repeatable)")
    c.add_argument("--node-file")
    c.add_argument("--users-file")
    c.add_argument("--workers", type=int, default=1)
    c.add_argument("--grace", type=int, help="shutdown_grace, seconds")
    c.add_argument("--max-connections", type=int, help="max_connections")
    c.add_argument("--redis", help="redis.url (issue 12, fleet-wide device limit)")
    c.add_argument("--redis-expiry", type=int, default=60, help="redis.expiry, seconds")
    c.add_argument("--log-level", default="info")
    c.add_argument("--api-port", type=int, default=0, help="REST API port (default: a free one)")
    c.add_argument("--accept-proxy-protocol", action="store_true",
                   help="the node's nodes[].accept_proxy_protocol: every connection starts with "
                   "a PROXY protocol header")
    c.add_argument("--no-allow-private", action="store_true",
                   help="leave allow_private out: users may not reach loopback (katana default)")
    c.add_argument("--protocol", choices=("shadowsocks", "trojan", "vless", "vmess", "anytls",
                                          "socks", "http", "mixed"),
                   default="shadowsocks",
                   help="panel node_type (shadowsocks is the default and leaves node_type out)")
    c.add_argument("--server-name", default="node.test", help="trojan: the node's server_name")
    c.add_argument("--cert-file", help="trojan, vless, vmess (tls 1): PEM certificate chain (cert mode file)")
    c.add_argument("--key-file", help="trojan, vless, vmess (tls 1): PEM private key (cert mode file)")
    c.add_argument("--cert-self", action="store_true", help="trojan, vless, vmess (tls 1): cert mode self")
    c.add_argument("--fallback", help="trojan, vless: HOST:PORT that failed clients are relayed to")
    c.add_argument("--ws-path", help="trojan, vless, vmess: network ws with this "
                   "networkSettings.path")
    c.add_argument("--ws-host", help="trojan, vless, vmess: networkSettings.headers.Host (with "
                   "--ws-path)")
    c.add_argument("--network", choices=("ws", "httpupgrade"), default="ws",
                   help="trojan, vless, vmess: the network of --ws-path (default ws)")
    c.add_argument("--grpc-service", help="trojan, vless, vmess: network grpc with this "
                   "networkSettings.serviceName")
    c.add_argument("--plugin-opts", help="shadowsocks: plugin v2ray-plugin with these plugin_opts "
                   "(a certificate with --cert-file/--cert-self for tls)")
    c = sub.add_parser("vmess")
    c.add_argument("--port", type=int, required=True)
    c.add_argument("--uuid", required=True)
    c.add_argument("--dest-port", type=int, required=True)
    c.add_argument("--age", type=int, default=0, help="seconds the auth ID's timestamp lags")
    c.add_argument("--replay", action="store_true")
    c.add_argument("--expect", choices=("ok", "refused"), required=True)
    c.add_argument("--wait", type=float, default=2)
    c.add_argument("--timeout", type=float, default=10)
    c = sub.add_parser("relay")
    c.add_argument("--port", type=int, required=True)
    c.add_argument("--to", type=int, required=True)
    c.add_argument("--source", required=True)
    c.add_argument("--count-file", help="keep 'UP DOWN' byte totals here (half-close relay)")
    c.add_argument("--timeout", type=float, default=10)
    c.add_argument("--ready-file")
    c = sub.add_parser("vlessburst")
    c.add_argument("--port", type=int, required=True, help="katana's clear VLESS node")
    c.add_argument("--uuid", required=True)
    c.add_argument("--dest-port", type=int, required=True, help="the echo server on 127.0.0.1")
    c.add_argument("--sources", required=True, help="comma-separated loopback source IPs")
    c.add_argument("--conns", type=int, default=50)
    c.add_argument("--timeout", type=float, default=10)
    c.add_argument("--hold", type=float, default=0,
                   help="keep the connections open this long after the answers (ready file "
                        "then), then check that each admitted one still echoes")
    c.add_argument("--ready-file")
    c.add_argument("--release-file", help="--hold ends early once this file exists")
    c = sub.add_parser("usage")
    c.add_argument("--log", required=True)
    c.add_argument("--offset", type=int, default=0)
    c = sub.add_parser("ssplan")
    c.add_argument("--config", required=True)
    c = sub.add_parser("sse")
    c.add_argument("--file", required=True)
    c = sub.add_parser("hold")
    c.add_argument("--port", type=int, required=True)
    c.add_argument("--conns", type=int, default=1)
    c.add_argument("--bytes", type=int, default=10)
    c.add_argument("--seed", default="hold")
    c.add_argument("--connect-timeout", type=float, default=3)
    c.add_argument("--ready-file")
    c.add_argument("--release-file")
    c.add_argument("--max-secs", type=float, default=60)
    c = sub.add_parser("httpd")
    c.add_argument("--port", type=int, required=True)
    c.add_argument("--body", required=True)
    c.add_argument("--status", type=int, default=200)
    c.add_argument("--ready-file")
    for name in ("tlsprobe", "stall"):
        c = sub.add_parser(name)
        c.add_argument("--port", type=int, required=True)
        c.add_argument("--mode", choices=("half", "garbage", "plain", "none"), required=True)
        c.add_argument("--server-name", default="node.test")
        c.add_argument("--seed", default=name)
    sub.choices["tlsprobe"].add_argument("--wait", type=float, default=10)
    sub.choices["tlsprobe"].add_argument("--expect", choices=("closed", "silent"),
                                         default="closed")
    c = sub.choices["stall"]
    c.add_argument("--conns", type=int, default=1000)
    c.add_argument("--connect-timeout", type=float, default=3)
    c.add_argument("--ready-file")
    c.add_argument("--release-file")
    c.add_argument("--max-secs", type=float, default=60)
    c = sub.add_parser("cpu")
    c.add_argument("--pid", type=int, required=True)
    c.add_argument("--secs", type=float, default=2)
    c.add_argument("--max", type=float)
    c = sub.add_parser("udp-cone", help="issue 10: per-datagram destinations and full-cone "
                       "answers through one SOCKS5 UDP association")
    c.add_argument("--socks", type=int, required=True)
    c.add_argument("--count", type=int, default=6)
    c.add_argument("--size", type=int, default=200)
    c.add_argument("--seed", default="cone")
    c = sub.add_parser("xudp", help="issue 10: an XUDP session with a GlobalID over clear VLESS "
                       "Mux.Cool; prints the source port the remote saw")
    c.add_argument("--port", type=int, required=True)
    c.add_argument("--uuid", required=True)
    c.add_argument("--gid", required=True, help="16 hex digits (zeros: no GlobalID)")
    c.add_argument("--count", type=int, default=4)
    c.add_argument("--size", type=int, default=300)
    c.add_argument("--seed", default="xudp")
    c.add_argument("--timeout", type=float, default=5)
    c.add_argument("--steal", action="store_true")
    c = sub.add_parser("xudp-client", help="issue 10: XUDP re-attach through a real client "
                       "whose connection a relay of this process drops")
    c.add_argument("--socks", type=int, required=True)
    c.add_argument("--relay-port", type=int, required=True)
    c.add_argument("--server-port", type=int, required=True)
    c.add_argument("--count", type=int, default=3)
    c.add_argument("--seed", default="xudp-client")
    c = sub.add_parser("sockets")
    c.add_argument("--pid", type=int, required=True)
    c.add_argument("--port", type=int, required=True)
    c.add_argument("--udp", action="store_true", help="UDP sockets instead of TCP connections")
    a = p.parse_args()
    if a.cmd in ("tcp", "udp") and not (a.socks or getattr(a, "direct", None)):
        die("need --socks or --direct", 2)
    if a.cmd == "udp" and not 8 <= a.size <= 1400:
        die("--size must be 8..1400", 2)
    fn = {"freeport": cmd_freeport, "wait-port": cmd_wait_port, "echo": cmd_echo,
          "tcp": cmd_tcp, "udp": cmd_udp, "udp-cone": cmd_udp_cone, "xudp": cmd_xudp, "xudp-client": cmd_xudp_client, "garbage": cmd_garbage, "mkconfig": cmd_mkconfig,
          "usage": cmd_usage, "ssplan": cmd_ssplan, "sse": cmd_sse, "relay": cmd_relay,
          "hold": cmd_hold, "cpu": cmd_cpu, "sockets": cmd_sockets, "httpd": cmd_httpd,
          "tlsprobe": cmd_tlsprobe, "stall": cmd_stall, "vmess": cmd_vmess,
          "vlessburst": cmd_vlessburst, "download": cmd_download}[a.cmd]
    sys.exit(fn(a))


if __name__ == "__main__":
    main()
