"""Servers for tests/e2e/test_egress.py, run inside the test's own "outside"
network namespace (never on the host's network): a DNS upstream on
10.53.0.53:53 that records every query, an HTTPS origin on 1.1.1.1:443 (a
self-signed certificate for allowed.test; GET /, a git smart-HTTP ref
advertisement, a PyPI simple index with one wheel; a request is logged once its
body (Content-Length or chunked) is whole, with the body's sha256), the same
origin in plain HTTP on 1.1.1.1:80, and listeners that only
count what reaches them (1.1.1.1:8443, 169.254.169.254:80/443, 10.9.9.9:443,
UDP 1.1.1.1:9999). Every event is one JSON line in LOG.

usage: egress_servers.py LOG CERT KEY ADVERT WHEEL READY
"""
from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import socket
import ssl
import struct
import sys
import threading

LOG, CERT, KEY, ADVERT, WHEEL, READY = sys.argv[1:7]
_lock = threading.Lock()

ZONE = {
    "allowed.test": "1.1.1.1",
    "other.test": "1.1.1.1",
    "private.test": "10.9.9.9",
    "meta.test": "169.254.169.254",
    "secret-data.exfil.test": "1.1.1.1",
}


def log(**ev: object) -> None:
    with _lock, open(LOG, "a") as f:
        f.write(json.dumps(ev) + "\n")


def dns_answer(data: bytes, proto: str) -> bytes:
    mid, _flags = struct.unpack_from("!HH", data, 0)
    off, labels = 12, []
    while data[off]:
        n = data[off]
        labels.append(data[off + 1:off + 1 + n].decode("ascii", "replace"))
        off += 1 + n
    qtype = struct.unpack_from("!H", data, off + 1)[0]
    question = data[12:off + 5]
    name = ".".join(labels).lower()
    log(ev="dns", name=name, qtype=qtype, proto=proto)
    body, count = b"", 0
    if name in ZONE and qtype == 1:
        body = b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, 30, 4) + ipaddress.IPv4Address(ZONE[name]).packed
        count = 1
    rcode = 0 if name in ZONE else 3
    return struct.pack("!HHHHHH", mid, 0x8180 | rcode, 1, count, 0, 0) + question + body


def dns_udp() -> None:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("10.53.0.53", 53))
    while True:
        data, peer = s.recvfrom(65535)
        try:
            s.sendto(dns_answer(data, "udp"), peer)
        except Exception:  # noqa: BLE001
            pass


def dns_tcp(lst: socket.socket) -> None:
    while True:
        c, _ = lst.accept()
        with c:
            try:
                c.settimeout(5)
                n = struct.unpack("!H", c.recv(2))[0]
                data = b""
                while len(data) < n:
                    data += c.recv(n - len(data))
                out = dns_answer(data, "tcp")
                c.sendall(struct.pack("!H", len(out)) + out)
            except Exception:  # noqa: BLE001
                pass


def counter(host: str, port: int) -> None:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((host, port))
    s.listen(64)
    while True:
        c, peer = s.accept()
        log(ev="accept", dst=f"{host}:{port}", peer=peer[0])
        c.close()


def udp_counter(host: str, port: int) -> None:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((host, port))
    while True:
        _, peer = s.recvfrom(65535)
        log(ev="udp", dst=f"{host}:{port}", peer=peer[0])


def read_body(c: socket.socket, head: bytes, rest: bytes) -> bytes | None:
    """The request's whole body (None: the client stopped first)."""
    lines = [h.lower() for h in head.split(b"\r\n")[1:]]

    def more() -> bytes:
        d = c.recv(65536)
        if not d:
            raise EOFError
        return d
    try:
        if b"transfer-encoding: chunked" in lines:
            out = b""
            while True:
                while b"\r\n" not in rest:
                    rest += more()
                line, rest = rest.split(b"\r\n", 1)
                n = int(line.split(b";")[0], 16)
                if not n:
                    while b"\r\n\r\n" not in b"\r\n" + rest:
                        rest += more()
                    return out
                while len(rest) < n + 2:
                    rest += more()
                out, rest = out + rest[:n], rest[n + 2:]
        n = next((int(h.split(b":", 1)[1]) for h in lines if h.startswith(b"content-length:")), 0)
        while len(rest) < n:
            rest += more()
        return rest[:n]
    except (EOFError, OSError, ValueError):
        return None


def https(port: int = 443) -> None:
    ctx: ssl.SSLContext | None = None
    seen: dict[int, str | None] = {}
    if port == 443:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(CERT, KEY)
        ctx.sni_callback = lambda sock, name, _c: seen.__setitem__(id(sock), name)
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("1.1.1.1", port))
    s.listen(64)
    advert = open(ADVERT, "rb").read()
    wheel = open(WHEEL, "rb").read()
    wname = os.path.basename(WHEEL)
    digest = hashlib.sha256(wheel).hexdigest()

    def one(raw: socket.socket) -> None:
        try:
            raw.settimeout(10)
            c = ctx.wrap_socket(raw, server_side=True) if ctx is not None else raw
            buf = b""
            while b"\r\n\r\n" not in buf:
                d = c.recv(65536)
                if not d:
                    return
                buf += d
            line = buf.split(b"\r\n")[0].decode()
            path = line.split(" ")[1]
            host = [h.split(b":", 1)[1].strip().decode() for h in buf.split(b"\r\n")[1:]
                    if h.lower().startswith(b"host:")]
            auth = [h.split(b":", 1)[1].strip().decode() for h in buf.split(b"\r\n")[1:]
                    if h.lower().startswith(b"authorization:")]
            head, _, rest = buf.partition(b"\r\n\r\n")
            got = read_body(c, head, rest)
            if got is None:
                return
            log(ev="request", sni=seen.get(id(c)), host=host[0] if host else None, path=path,
                auth=auth[0] if auth else None, port=port, method=line.split(" ")[0],
                body=hashlib.sha256(got).hexdigest(), body_len=len(got))
            ctype = "text/plain"
            if path.startswith("/repo.git/info/refs"):
                body, ctype = advert, "application/x-git-upload-pack-advertisement"
            elif path.rstrip("/") == "/simple/confinetestpkg":
                body = (f'<html><body><a href="/files/{wname}#sha256={digest}">{wname}</a>'
                        "</body></html>").encode()
                ctype = "text/html"
            elif path == f"/files/{wname}":
                body, ctype = wheel, "application/octet-stream"
            else:
                body = f"hello from allowed.test sni={seen.get(id(c))}\n".encode()
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: " + ctype.encode()
                      + b"\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
            c.close()
        except (OSError, ssl.SSLError):
            pass
        finally:
            raw.close()

    while True:
        c, peer = s.accept()
        log(ev="accept", dst=f"1.1.1.1:{port}", peer=peer[0])
        threading.Thread(target=one, args=(c,), daemon=True).start()


def main() -> None:
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    tcp.bind(("10.53.0.53", 53))
    tcp.listen(16)
    targets = [(dns_udp, ()), (dns_tcp, (tcp,)), (https, ()), (https, (80,)),
               (counter, ("1.1.1.1", 8443)), (counter, ("169.254.169.254", 80)),
               (counter, ("169.254.169.254", 443)), (counter, ("10.9.9.9", 443)),
               (udp_counter, ("1.1.1.1", 9999))]
    for fn, args in targets:
        threading.Thread(target=fn, args=args, daemon=True).start()
    with open(READY, "w") as f:
        f.write("ready\n")
    threading.Event().wait()


if __name__ == "__main__":
    main()
