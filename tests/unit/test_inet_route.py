"""The supervisor's rewriting of an IPv4/IPv6 connect (mediation/inet.py) for a
service on the host's loopback: only the exact port a host loopback entry names
is handed to the gateway; every other loopback port stays the agent's own."""
from __future__ import annotations

import socket
import struct

from confine.gateway.rules import Rules
from confine.mediation import inet

REDIRECT, DNS, PROXY = 3129, 53, 3128


def _routes(rules: Rules, expected: list) -> inet.InetRoutes:
    def expect(client, ip, port, pid=None):
        expected.append((ip, port))
        return True
    return inet.InetRoutes(redirect_port=REDIRECT, dns_port=DNS, proxy_port=PROXY,
                           expect=expect,
                           host_service=lambda ip, port: rules.host_service(ip, port) is not None,
                           refused=lambda *a: None)


def _addr(ip: str, port: int) -> bytes:
    if ":" in ip:
        return struct.pack("<H", socket.AF_INET6) + struct.pack(
            "!HI16sI", port, 0, socket.inet_pton(socket.AF_INET6, ip), 0)
    return struct.pack("<H", socket.AF_INET) + struct.pack(
        "!H4s8x", port, socket.inet_aton(ip))


def _route(routes: inet.InetRoutes, ip: str, port: int, fam=socket.AF_INET) -> bytes:
    with socket.socket(fam, socket.SOCK_STREAM) as s:
        return inet.route(routes, True, _addr(ip, port), s.fileno(), 1)


def test_only_the_named_host_loopback_port_goes_to_the_gateway():
    got: list = []
    r = _routes(Rules.parse(["localhost:11434", "127.0.0.1:5432", f"localhost:{PROXY}"]), got)
    redirected = inet.sockaddr(socket.AF_INET, REDIRECT)
    assert _route(r, "127.0.0.1", 11434) == redirected
    assert _route(r, "127.0.0.1", 5432) == redirected
    assert inet.parse(_route(r, "::1", 11434, socket.AF_INET6), socket.AF_INET6) == (
        inet.LOOP4, REDIRECT)                       # v4-mapped to the gateway
    assert got == [("127.0.0.1", 11434), ("127.0.0.1", 5432), ("::1", 11434)]
    # every other loopback port is the agent's own (Landlock decides), and so are
    # the gateway's own ports in the agent's namespace, whatever an entry says
    for ip, port in (("127.0.0.1", 11435), ("127.0.0.2", 11434), ("::1", 5432),
                     ("0.0.0.0", 11434), ("127.0.0.1", PROXY)):
        fam = socket.AF_INET6 if ":" in ip else socket.AF_INET
        raw = _addr(ip, port)
        with socket.socket(fam, socket.SOCK_STREAM) as s:
            assert inet.route(r, True, raw, s.fileno(), 1) == raw, (ip, port)
    assert len(got) == 3


def test_without_a_host_loopback_entry_loopback_is_unchanged():
    got: list = []
    r = _routes(Rules.parse(["example.com"]), got)
    raw = _addr("127.0.0.1", 11434)
    with socket.socket() as s:
        assert inet.route(r, True, raw, s.fileno(), 1) == raw
    assert got == []
