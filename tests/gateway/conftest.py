"""Loopback servers for the gateway tests: a fake DNS upstream that counts queries, HTTPS and
HTTP origin servers, and a gateway wired to them.

Only loopback addresses are used. Names resolve (through the fake upstream) to loopback,
private or metadata addresses; the gateway's dialler is wrapped so that a bug could
never send a packet to anything but loopback (`dialled` records every attempt).
"""
from __future__ import annotations

import ipaddress
import json
import shutil
import socket
import ssl
import struct
import subprocess
import threading
import time

import pytest

from confine.gateway import DNSServer, Gateway, Limits, Pins, Resolver, Rules
from confine.gateway import proxy as proxy_mod


class FakeUpstream:
    """A recursive resolver stand-in on 127.0.0.1 (UDP and TCP): `zone` maps a lower-case
    name to [(type, value)], type "A", "AAAA" or "CNAME". Names in `truncate` are answered
    with TC over UDP (the full answer over TCP). Every query is recorded in `queries`."""

    def __init__(self, zone, truncate=()):
        self.zone = zone
        self.truncate = set(truncate)
        self.queries: list[tuple[str, int, str]] = []
        self.lock = threading.Lock()
        for _ in range(50):     # a UDP port whose TCP twin is free too
            self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            self.udp.bind(("127.0.0.1", 0))
            self.port = self.udp.getsockname()[1]
            self.tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self.tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                self.tcp.bind(("127.0.0.1", self.port))
                break
            except OSError:
                self.udp.close()
                self.tcp.close()
        self.tcp.listen(16)
        self.stopped = False
        threading.Thread(target=self._udp_loop, daemon=True).start()
        threading.Thread(target=self._tcp_loop, daemon=True).start()

    def names(self):
        with self.lock:
            return [n for n, _, _ in self.queries]

    def _answer(self, data, proto):
        mid, flags, qd = struct.unpack_from("!HHH", data, 0)
        off, labels = 12, []
        while data[off]:
            n = data[off]
            labels.append(data[off + 1:off + 1 + n].decode("ascii"))
            off += 1 + n
        qname_end = off + 1
        qtype = struct.unpack_from("!H", data, qname_end)[0]
        question = data[12:qname_end + 4]
        name = ".".join(labels).lower()
        with self.lock:
            self.queries.append((name, qtype, proto))
        recs = []
        cur = name
        for _ in range(5):
            entries = self.zone.get(cur, [])
            cn = [v for t, v in entries if t == "CNAME"]
            for t, v in entries:
                if t == "A" and qtype == 1:
                    recs.append((cur, 1, ipaddress.IPv4Address(v).packed))
                if t == "AAAA" and qtype == 28:
                    recs.append((cur, 28, ipaddress.IPv6Address(v).packed))
            if cn:
                recs.append((cur, 5, b"".join(bytes([len(x)]) + x.encode() for x in cn[0].split(".")) + b"\0"))
                cur = cn[0]
            else:
                break
        rcode = 0 if name in self.zone else 3
        body = b""
        for owner, t, rd in recs:
            enc = b"".join(bytes([len(x)]) + x.encode() for x in owner.split(".")) + b"\0"
            body += enc + struct.pack("!HHIH", t, 1, 30, len(rd)) + rd
        tc = proto == "udp" and name in self.truncate
        fl = 0x8180 | rcode | (0x0200 if tc else 0)
        if tc:
            return struct.pack("!HHHHHH", mid, fl, 1, 0, 0, 0) + question
        return struct.pack("!HHHHHH", mid, fl, 1, len(recs), 0, 0) + question + body

    def _udp_loop(self):
        while True:
            try:
                data, peer = self.udp.recvfrom(65535)
            except OSError:
                return
            try:
                self.udp.sendto(self._answer(data, "udp"), peer)
            except Exception:
                pass

    def _tcp_loop(self):
        while True:
            try:
                c, _ = self.tcp.accept()
            except OSError:
                return
            with c:
                try:
                    n = struct.unpack("!H", c.recv(2))[0]
                    data = b""
                    while len(data) < n:
                        data += c.recv(n - len(data))
                    out = self._answer(data, "tcp")
                    c.sendall(struct.pack("!H", len(out)) + out)
                except Exception:
                    pass

    def close(self):
        self.udp.close()
        self.tcp.close()


class Origin:
    """An HTTPS (or plain HTTP) server on `host`: answers each request with
    'sni=<SNI> host=<Host> path=<path>' and closes. Counts accepted connections."""

    def __init__(self, host="127.0.0.1", ctx=None):
        self.ctx = ctx
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, 0))
        self.sock.listen(512)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self.requests: list[bytes] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._loop, daemon=True).start()

    def _loop(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            with self.lock:
                self.accepted += 1
            threading.Thread(target=self._one, args=(c,), daemon=True).start()

    def _one(self, c):
        sni = [None]
        try:
            c.settimeout(10)
            if self.ctx is not None:
                c = self.ctx.wrap_socket(c, server_side=True)
                sni[0] = getattr(c, "confine_sni", None)
            buf = b""
            while b"\r\n\r\n" not in buf:
                d = c.recv(65536)
                if not d:
                    return
                buf += d
            with self.lock:
                self.requests.append(buf)
            line = buf.split(b"\r\n")[0].decode()
            host = [h.split(b":", 1)[1].strip().decode() for h in buf.split(b"\r\n")[1:]
                    if h.lower().startswith(b"host:")]
            body = f"sni={sni[0]} host={host[0] if host else None} path={line.split(' ')[1]}".encode()
            time.sleep(0.05)   # a pipelined second request would arrive by now
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
        except (OSError, ssl.SSLError):
            pass
        finally:
            c.close()

    def close(self):
        self.sock.close()


@pytest.fixture(scope="session")
def tls_files(tmp_path_factory):
    if shutil.which("openssl") is None:
        pytest.skip("openssl CLI not installed: no test certificate")
    d = tmp_path_factory.mktemp("tls")
    cert, key = d / "cert.pem", d / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", "/CN=allowed.test",
                    "-addext", "subjectAltName=DNS:allowed.test,DNS:other.test,DNS:also.test"],
                   check=True, capture_output=True, timeout=30)
    return cert, key


@pytest.fixture
def https_origin(tls_files):
    cert, key = tls_files
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(cert), str(key))
    ctx.sni_callback = lambda sslsock, name, _ctx: setattr(sslsock, "confine_sni", name)
    o = Origin(ctx=ctx)
    yield o
    o.close()


@pytest.fixture
def http_origin():
    o = Origin()
    yield o
    o.close()


ZONE = {
    "allowed.test": [("A", "127.0.0.1")],
    "also.test": [("A", "127.0.0.1")],
    "other.test": [("A", "127.0.0.1")],
    "alias.test": [("CNAME", "target.elsewhere")],
    "target.elsewhere": [("A", "127.0.0.1")],
    "meta.test": [("A", "169.254.169.254"), ("AAAA", "fd00:ec2::254")],
    "private.test": [("A", "10.0.0.5")],
    "mixed.test": [("A", "10.0.0.6"), ("A", "127.0.0.1")],
    "mapped.test": [("AAAA", "::ffff:169.254.169.254")],
    "many.test": [("AAAA", f"2606:4700::{i:x}") for i in range(1, 41)],
    "big.test": [("A", "127.0.0.1")],
    "elsewhere.test": [("A", "127.0.0.3")],
}


@pytest.fixture
def upstream():
    u = FakeUpstream(ZONE, truncate={"big.test"})
    yield u
    u.close()


class Stack:
    """A gateway and its DNS server, over the fake upstream; `events` collects log lines."""

    def __init__(self, upstream, allow, deny=(), allowed_ips=(), limits=None):
        self.events: list[dict] = []
        self.lock = threading.Lock()
        self.rules = Rules.parse(allow, deny, allowed_ips=allowed_ips)
        self.pins = Pins()
        self.resolver = Resolver([("127.0.0.1", upstream.port)], self.rules, self.pins, timeout=2.0)
        self.gw = Gateway(self.rules, self.resolver, log=self._log, limits=limits or Limits(handshake_timeout=3.0,
                                                                                             idle_timeout=10.0))
        self.dns = DNSServer(self.resolver, log=self._log)

    def _log(self, ev):
        json.dumps(ev)            # every event must be one JSON line
        with self.lock:
            self.events.append(dict(ev))

    def connects(self):
        with self.lock:
            return [e for e in self.events if e["event"] == "connect"]

    def wait_connects(self, n, timeout=5.0):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if len(self.connects()) >= n:
                return self.connects()
            time.sleep(0.01)
        return self.connects()


@pytest.fixture
def dialled(monkeypatch):
    """Every upstream address the gateway tries; anything not loopback fails the test
    (and is never connected to)."""
    seen: list[str] = []
    orig = proxy_mod.Gateway._dial

    def guarded(self, conn, addrs, port):
        for a in addrs:
            seen.append(str(a))
            assert ipaddress.ip_address(a).is_loopback, f"the gateway tried to dial {a}"
        return orig(self, conn, addrs, port)

    monkeypatch.setattr(proxy_mod.Gateway, "_dial", guarded)
    return seen


@pytest.fixture
def make_stack(upstream, dialled):
    made = []

    def make(allow, deny=(), allowed_ips=(), limits=None):
        s = Stack(upstream, allow, deny, allowed_ips, limits)
        s.gw.start()
        s.dns.start()
        made.append(s)
        return s
    yield make
    for s in made:
        s.gw.stop()
        s.dns.stop()
