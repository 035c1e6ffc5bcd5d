#!/usr/bin/env python3
"""Benchmark: TLS terminated at the gateway for the credential swap, against a direct TLS
connection and the plain gateway tunnel (issue 24 item 8).

Run with a Python that can import confine (the install's own):
    /opt/confine/bin/python bench/tls_swap.py [--quick] [--json] [--link=1gbit]
Three processes: an HTTPS origin (its certificate from a test CA made here), the gateway
(as the supervisor runs it: its own process; one binding toward the origin's name, the
test CA as upstream_ca), and the client (Python's ssl, trusting the test CA directly and
the run CA through the gateway). Three paths:
- direct: TLS from the client to the origin;
- tunnel: CONNECT through the gateway, no binding (TLS end to end, spliced past 1 MiB);
- swap: CONNECT through a gateway with a binding: TLS terminated with the run CA's leaf,
  the request head judged and the placeholder swapped, TLS again to the origin.
Measured: one download of 1 GiB (quick: 256 MiB), MB/s and swap / direct; connection
setup (TCP + TLS handshake + a 1-byte GET), median and p90, and the median added by the
swap. --link=RATE (root) puts the origin behind a veth shaped to RATE in a network
namespace of its own (bench/gateway.py's link; this machine only). The origin, the link
and the measuring loops are bench/gateway.py's. Goals (issue 24):
swap >= 0.8x direct over the 1 Gbit/s veth, < 2 ms added to connection setup.
"""
from __future__ import annotations

import functools
import json
import os
import socket
import ssl
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gateway as gwb  # noqa: E402

NAME = "forge.bench"
PLACEHOLDER = "confine-bench-placeholder-0000"

GATEWAY = r"""
import sys
from confine.credentials.binding import Binding, Target
from confine.credentials.ca import RunCA
from confine.credentials.swap import Swap
from confine.gateway import Gateway, Limits, Pins, Resolver, Rules
from confine.gateway.addresses import normalise
port, host, swap, ca_file, bundle = int(sys.argv[1]), sys.argv[2], sys.argv[3] == "1", sys.argv[4], sys.argv[5]
name = sys.argv[6]
rules = Rules.parse([f"{name}:{port}"], allowed_ips=[f"{host}/32"])

class Fixed(Resolver):
    # the name's one address, pinned as confine's DNS would (what is measured is the relay)
    def resolve(self, n):
        a = normalise(host)
        self.pins.add(n, [a], 300)
        return [a], []

res = Fixed([("127.0.0.1", 9)], rules, Pins())
cred = None
if swap:
    ca = RunCA()
    open(bundle, "wb").write(ca.pem)
    cred = Swap([Binding("TOKEN", sys.argv[7], "real-value", (Target(name, port),))], ca, upstream_ca=[ca_file])
gw = Gateway(rules, res, limits=Limits(max_conns=512), credentials=cred).start()
print(gw.port, flush=True)
sys.stdin.read()
gw.stop()
"""


MAKE_CA = r"""
import sys
from confine.credentials.ca import RunCA
ca = RunCA("confine bench origin CA")
open(sys.argv[1], "wb").write(ca.pem)
open(sys.argv[2], "wb").write(ca.leaf_pem(sys.argv[3]) + ca._leaf_key_pem)
"""


def _get(addr: tuple[str, int], port: int, ctx: ssl.SSLContext, size: int, proxy: bool, buf: bytearray) -> int:
    """One HTTPS GET (through CONNECT when `proxy`); the body's length."""
    s = socket.create_connection(addr, timeout=60)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        if proxy:
            s.sendall(f"CONNECT {NAME}:{port} HTTP/1.1\r\nHost: {NAME}:{port}\r\n\r\n".encode())
            got = b""
            while b"\r\n\r\n" not in got:
                d = s.recv(4096)
                if not d:
                    raise RuntimeError("proxy closed")
                got += d
            if not got.startswith(b"HTTP/1.1 200"):
                raise RuntimeError(f"refused: {got[:80]!r}")
        t = ctx.wrap_socket(s, server_hostname=NAME)
        t.sendall(f"GET /size/{size} HTTP/1.1\r\nHost: {NAME}:{port}\r\n"
                  f"Authorization: Bearer {PLACEHOLDER}\r\n\r\n".encode())

        def recv_into(view: memoryview) -> int:
            try:
                return t.recv_into(view)
            except ssl.SSLEOFError:     # the origin's close without close_notify: the end
                return 0
        return gwb.body_length(recv_into, buf)
    finally:
        s.close()


def _cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(python: str = sys.executable, quick: bool = False, link: str | None = None) -> dict:
    size = (256 if quick else 1024) << 20
    reqs = 200 if quick else 1000
    host, pre = "127.0.0.1", []
    tmp = tempfile.mkdtemp(prefix="confine-bench-tls-")
    ca_file, chain = os.path.join(tmp, "ca.pem"), os.path.join(tmp, "origin.pem")
    # the origin's test CA, made by the Python that has confine (the caller may not)
    subprocess.run([python, "-c", MAKE_CA, ca_file, chain, NAME], check=True, timeout=60)
    os.chmod(tmp, 0o755)
    if link:
        gwb._link_up(link)
        host, pre = gwb.NS_IP, ["ip", "netns", "exec", gwb.NS]
    procs: list[subprocess.Popen[str]] = []
    out: dict = {"size_mib": size >> 20, "requests": reqs, "reps": 1 if quick else 3,
                 "path": f"veth shaped to {link}" if link else "loopback"}
    try:
        origin, oport = gwb._start(pre + [python, "-c", gwb.ORIGIN, host, chain])
        procs.append(origin)
        bundle = os.path.join(tmp, "run-ca.pem")
        tunnel, tport = gwb._start([python, "-c", GATEWAY, str(oport), host, "0", ca_file, bundle, NAME,
                                    PLACEHOLDER])
        procs.append(tunnel)
        swapgw, sport = gwb._start([python, "-c", GATEWAY, str(oport), host, "1", ca_file, bundle, NAME,
                                    PLACEHOLDER])
        procs.append(swapgw)
        direct_ctx = ssl.create_default_context(cafile=ca_file)
        run_ctx = ssl.create_default_context(cafile=bundle)
        paths = {"direct": ((host, oport), direct_ctx, False),
                 "tunnel": (("127.0.0.1", tport), direct_ctx, True),
                 "swap": (("127.0.0.1", sport), run_ctx, True)}
        buf = bytearray(1 << 20)
        cpu0 = _cpu(swapgw.pid)
        for name, (addr, ctx, proxy) in paths.items():
            out[f"bulk_{name}_mb_s"] = gwb.best_mb_s(functools.partial(_get, addr, oport, ctx, size, proxy, buf), size,
                                                     out["reps"])
        out["bulk_ratio"] = round(out["bulk_swap_mb_s"] / out["bulk_direct_mb_s"], 3)
        # the swap's own CPU per GiB relayed (decrypt + judge + encrypt): what bounds it
        # on a link faster than one core can re-encrypt
        out["swap_cpu_s_per_gib"] = round((_cpu(swapgw.pid) - cpu0) / (out["reps"] * size / (1 << 30)), 2)
        small = bytearray(4096)
        gw_of = {"tunnel": tunnel, "swap": swapgw}
        for name, (addr, ctx, proxy) in paths.items():
            c0 = _cpu(gw_of[name].pid) if name in gw_of else 0.0
            out[f"setup_{name}_ms"] = gwb.setup_ms(functools.partial(_get, addr, oport, ctx, 1, proxy, small),
                                                   reqs)
            if name in gw_of:
                # the gateway's own CPU per connection (the 20 warm-up ones too): what the
                # wall time is made of when the machine is idle (under load it is mostly waiting)
                out[f"setup_{name}_cpu_ms"] = round((_cpu(gw_of[name].pid) - c0) * 1000 / (reqs + 20), 3)
        out["setup_added_ms"] = round(out["setup_swap_ms"]["median"] - out["setup_direct_ms"]["median"], 3)
        # what terminating TLS adds to the gateway's own cost (CONNECT, dial, relay)
        out["setup_added_vs_tunnel_ms"] = round(out["setup_swap_ms"]["median"] - out["setup_tunnel_ms"]["median"], 3)
        out["load"] = round(os.getloadavg()[0], 2)
        out["cores"] = os.cpu_count()
    finally:
        gwb.stop(procs)
        if link:
            gwb._link_down()
        for f in os.listdir(tmp):
            os.unlink(os.path.join(tmp, f))
        os.rmdir(tmp)
    return out


def render(r: dict) -> list[tuple[str, str, str, str, str]]:
    """Rows (measure, direct, tunnel, swap, ratio or added) for a table."""
    d, t, s = r["setup_direct_ms"], r["setup_tunnel_ms"], r["setup_swap_ms"]
    return [
        (f"HTTPS download of {r['size_mib']} MiB, MB/s (best of {r.get('reps', 3)})", f"{r['bulk_direct_mb_s']:.0f}",
         f"{r['bulk_tunnel_mb_s']:.0f}", f"{r['bulk_swap_mb_s']:.0f}", f"{r['bulk_ratio']:.2f}x (goal >= 0.80)"),
        (f"TCP + TLS + 1-byte GET, ms (median of {r['requests']})", f"{d['median']:.3f}", f"{t['median']:.3f}",
         f"{s['median']:.3f}", f"{r['setup_added_ms']:+.3f} ms (goal < 2 ms)"),
        ("same, p90, ms", f"{d['p90']:.3f}", f"{t['p90']:.3f}", f"{s['p90']:.3f}",
         f"{r['setup_added_vs_tunnel_ms']:+.3f} ms vs the tunnel (median)"),
        ("the gateway's CPU per connection, ms", "", f"{r['setup_tunnel_cpu_ms']:.3f}",
         f"{r['setup_swap_cpu_ms']:.3f}", ""),
        ("the swap's CPU per GiB relayed, s", "", "", f"{r['swap_cpu_s_per_gib']:.2f}", ""),
    ]


def main() -> int:
    quick, link = gwb.args()
    r = measure(sys.executable, quick, link)
    if "--json" in sys.argv:
        print(json.dumps(r, indent=1))
        return 0
    print(f"TLS swap vs direct over {r['path']} ({r['cores']} cores, load {r['load']}):")
    for row in render(r):
        print(f"  {row[0]:<52} direct {row[1]:>9}  tunnel {row[2]:>9}  swap {row[3]:>9}  {row[4]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
