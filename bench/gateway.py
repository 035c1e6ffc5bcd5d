#!/usr/bin/env python3
"""Benchmark: the egress gateway against a direct connection, on loopback (issue 14 item 11).

Run with a Python that can import confine (the install's own):
    /opt/confine/bin/python bench/gateway.py [--quick] [--json] [--link=1gbit]
Three processes: an HTTP origin on 127.0.0.1, the gateway (as the supervisor would run it:
its own process, an address rule allowing the origin), and the client. Measured:
- bulk: one download of 1 GiB (quick: 256 MiB), direct and through the proxy (absolute-URI
  GET: the gateway parses the head, dials, relays; past 1 MiB by splice(2)); MB/s and the
  ratio gateway / direct;
- connection setup: sequential requests of a 1-byte body, time from connect() to the last
  byte; median and p90, and the median added by the gateway;
- 200 concurrent connections, each a 64 KiB body: wall time, all must succeed.
Loopback only: nothing leaves the machine. On loopback both paths are CPU-bound and the
gateway's crosses loopback twice, so the ratio is a floor for a real network path;
--link=RATE (root) puts the origin behind a veth shaped to RATE in a network namespace of
its own, which is what a download over a real link looks like (still this machine only).
bench/run.py imports `measure`; bench/tls_swap.py reuses the origin, the link and the
measuring loops.
"""
from __future__ import annotations

import functools
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from typing import Callable

# argv: the address to listen on; with a second argument (a PEM with the chain and key),
# HTTPS instead of HTTP
ORIGIN = r"""
import socket, ssl, sys, threading
BUF = b"\0" * (1 << 20)
ctx = None
if len(sys.argv) > 2:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(sys.argv[2])
def one(c):
    try:
        if ctx is not None:
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            c = ctx.wrap_socket(c, server_side=True)
        head = b""
        while b"\r\n\r\n" not in head:
            d = c.recv(65536)
            if not d:
                return
            head += d
        n = int(head.split(b" ", 2)[1].rsplit(b"/", 1)[1])
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % n)
        while n > 0:
            k = min(n, len(BUF))
            c.sendall(BUF[:k])
            n -= k
        if ctx is not None:
            c.unwrap()
    except (OSError, ValueError):
        pass
    finally:
        c.close()
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1", 0)); s.listen(1024)
print(s.getsockname()[1], flush=True)
while True:
    c, _ = s.accept()
    threading.Thread(target=one, args=(c,), daemon=True).start()
"""

GATEWAY = r"""
import sys, time
from confine.gateway import Gateway, Limits, Pins, Resolver, Rules
port = int(sys.argv[1])
host = sys.argv[2] if len(sys.argv) > 2 else "127.0.0.1"
rules = Rules.parse([f"{host}:{port}"])
# literals only: the resolver is never asked (its upstream is a closed local port)
res = Resolver([("127.0.0.1", 9)], rules, Pins())
gw = Gateway(rules, res, limits=Limits(max_conns=512)).start()
print(gw.port, flush=True)
sys.stdin.read()
gw.stop()
"""


def _start(argv: list[str]) -> tuple[subprocess.Popen[str], int]:
    p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None
    line = p.stdout.readline()
    if not line.strip():
        p.kill()
        raise RuntimeError(f"{argv[:3]} did not start")
    return p, int(line)


def _get(addr: tuple[str, int], target: str, buf: bytearray) -> int:
    """One GET; the body's length. `target` is a path (direct) or an absolute URI (proxy)."""
    s = socket.create_connection(addr, timeout=60)
    try:
        s.sendall(f"GET {target} HTTP/1.1\r\nHost: {ORIGIN_HOST[0]}:{ORIGIN_PORT[0]}\r\n\r\n".encode())
        return body_length(s.recv_into, buf)
    finally:
        s.close()


def body_length(recv_into: Callable[[memoryview], int], buf: bytearray) -> int:
    """Read one 200 answer to its end (the origin closes after it): the body's length."""
    got, head = 0, b""
    view = memoryview(buf)
    while True:
        n = recv_into(view)
        if not n:
            return got
        if head is not None:
            head += bytes(view[:n])
            i = head.find(b"\r\n\r\n")
            if i < 0:
                continue
            if not head.startswith(b"HTTP/1.1 200"):
                raise RuntimeError(f"refused: {head[:200]!r}")
            got += len(head) - i - 4
            head = None
            continue
        got += n


def best_mb_s(get: Callable[[], int], size: int, reps: int) -> float:
    """The best of `reps` downloads of `size` bytes, MB/s."""
    best = 0.0
    for _ in range(reps):
        t = time.perf_counter()
        n = get()
        dt = time.perf_counter() - t
        if n != size:
            raise RuntimeError(f"{n} bytes of {size}")
        best = max(best, size / dt / 1e6)
    return round(best, 1)


def setup_ms(get: Callable[[], int], reqs: int) -> dict:
    """`reqs` sequential small requests after 20 to warm up: median and p90, ms."""
    for _ in range(20):
        get()
    ts = []
    for _ in range(reqs):
        t = time.perf_counter()
        get()
        ts.append((time.perf_counter() - t) * 1000)
    ts.sort()
    return {"median": round(statistics.median(ts), 3), "p90": round(ts[int(len(ts) * 0.9)], 3)}


def stop(procs: list[subprocess.Popen[str]]) -> None:
    """End the helper processes (their stdin closed first: the gateway's signal to stop)."""
    for p in procs:
        try:
            if p.stdin:
                p.stdin.close()
        except OSError:
            pass
        p.kill()
        p.wait()


def args() -> tuple[bool, str | None]:
    """--quick, --link=RATE."""
    return "--quick" in sys.argv, next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--link=")), None)


ORIGIN_PORT = [0]
ORIGIN_HOST = ["127.0.0.1"]
NS, HOST_IP, NS_IP = "confine-bench-origin", "10.231.0.1", "10.231.0.2"


def _sh(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, timeout=30)


def _link_up(rate: str) -> None:
    """A network namespace on the other end of a veth whose sending side is shaped
    to `rate` (tc tbf): a network path of that speed, on this machine only."""
    _link_down()
    _sh("ip", "netns", "add", NS)
    _sh("ip", "link", "add", "cbh", "type", "veth", "peer", "name", "cbn", "netns", NS)
    _sh("ip", "addr", "add", f"{HOST_IP}/30", "dev", "cbh")
    _sh("ip", "link", "set", "cbh", "up")
    _sh("ip", "-n", NS, "addr", "add", f"{NS_IP}/30", "dev", "cbn")
    _sh("ip", "-n", NS, "link", "set", "cbn", "up")
    _sh("ip", "-n", NS, "link", "set", "lo", "up")
    _sh("ip", "netns", "exec", NS, "tc", "qdisc", "add", "dev", "cbn", "root", "tbf",
        "rate", rate, "burst", "1mb", "latency", "50ms")


def _link_down() -> None:
    subprocess.run(["ip", "netns", "del", NS], capture_output=True, timeout=30)
    subprocess.run(["ip", "link", "del", "cbh"], capture_output=True, timeout=30)


def _concurrent(addr: tuple[str, int], tgt: Callable[[int], str], conns: int) -> dict:
    """`conns` GETs of 64 KiB started together: wall time, how many succeeded."""
    errors: list[str] = []
    done = [0]
    lock = threading.Lock()
    start = threading.Barrier(conns + 1)

    def one() -> None:
        b = bytearray(65536)
        start.wait()
        try:
            n = _get(addr, tgt(65536), b)
            with lock:
                done[0] += n == 65536
        except (OSError, RuntimeError) as e:
            with lock:
                errors.append(str(e))
    th = [threading.Thread(target=one) for _ in range(conns)]
    for x in th:
        x.start()
    t = time.perf_counter()
    start.wait()
    for x in th:
        x.join()
    return {"wall_ms": round((time.perf_counter() - t) * 1000, 1), "ok": done[0], "errors": len(errors)}


def measure(python: str = sys.executable, quick: bool = False, link: str | None = None) -> dict:
    """link: a rate for tc (e.g. "1gbit"): the origin sits behind a shaped veth in a
    network namespace of its own (root only), as a real network path would, instead
    of on loopback, where both paths are CPU-bound."""
    size = (256 if quick else 1024) << 20
    conns = 200
    reqs = 200 if quick else 1000
    host = "127.0.0.1"
    pre: list[str] = []
    if link:
        _link_up(link)
        host, pre = NS_IP, ["ip", "netns", "exec", NS]
    ORIGIN_HOST[0] = host
    try:
        origin, oport = _start(pre + [python, "-c", ORIGIN, host])
    except BaseException:
        if link:
            _link_down()
        raise
    ORIGIN_PORT[0] = oport
    gw, gport = _start([python, "-c", GATEWAY, str(oport), host])
    out: dict = {"size_mib": size >> 20, "requests": reqs, "concurrent": conns, "reps": 1 if quick else 3,
                 "path": f"veth shaped to {link}" if link else "loopback"}
    try:
        direct = ((host, oport), lambda n: f"/size/{n}")
        proxy = (("127.0.0.1", gport), lambda n: f"http://{host}:{oport}/size/{n}")
        buf = bytearray(1 << 20)
        for name, (addr, tgt) in (("direct", direct), ("gateway", proxy)):
            out[f"bulk_{name}_mb_s"] = best_mb_s(functools.partial(_get, addr, tgt(size), buf), size, out["reps"])
        out["bulk_ratio"] = round(out["bulk_gateway_mb_s"] / out["bulk_direct_mb_s"], 3)
        small = bytearray(4096)
        for name, (addr, tgt) in (("direct", direct), ("gateway", proxy)):
            out[f"setup_{name}_ms"] = setup_ms(functools.partial(_get, addr, tgt(1), small), reqs)
        out["setup_added_ms"] = round(out["setup_gateway_ms"]["median"] - out["setup_direct_ms"]["median"], 3)
        for name, (addr, tgt) in (("direct", direct), ("gateway", proxy)):
            out[f"concurrent_{name}"] = _concurrent(addr, tgt, conns)
        out["load"] = round(os.getloadavg()[0], 2)
        out["cores"] = os.cpu_count()
    finally:
        stop([gw, origin])
        if link:
            _link_down()
    return out


def render(r: dict) -> list[tuple[str, str, str, str]]:
    """Rows (measure, direct, through the gateway, ratio or added) for a table."""
    d, g = r["setup_direct_ms"], r["setup_gateway_ms"]
    cd, cg = r["concurrent_direct"], r["concurrent_gateway"]
    return [
        (f"download of {r['size_mib']} MiB, MB/s (best of {r.get('reps', 3)})", f"{r['bulk_direct_mb_s']:.0f}",
         f"{r['bulk_gateway_mb_s']:.0f}", f"{r['bulk_ratio']:.2f}x (goal >= 0.90)"),
        (f"connection setup + 1-byte GET, ms (median of {r['requests']})", f"{d['median']:.3f}",
         f"{g['median']:.3f}", f"{r['setup_added_ms']:+.3f} ms (goal < 1 ms)"),
        ("same, p90, ms", f"{d['p90']:.3f}", f"{g['p90']:.3f}", ""),
        (f"{r['concurrent']} concurrent GETs of 64 KiB, wall ms (all ok)", f"{cd['wall_ms']:.0f} ({cd['ok']})",
         f"{cg['wall_ms']:.0f} ({cg['ok']})", f"{cg['wall_ms'] / cd['wall_ms']:.2f}x"),
    ]


def main() -> int:
    quick, link = args()
    r = measure(sys.executable, quick, link)
    if "--json" in sys.argv:
        print(json.dumps(r, indent=1))
        return 0
    print(f"gateway vs direct over {r['path']} ({r['cores']} cores, load {r['load']}):")
    for row in render(r):
        print(f"  {row[0]:<58} direct {row[1]:>10}  gateway {row[2]:>10}  {row[3]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
