"""The gateway's DNS server against a fake upstream on loopback: what is asked upstream, what
is answered, what is pinned."""
from __future__ import annotations

import ipaddress
import socket
import struct

from confine.gateway import dnswire as w


def ask(dns, name, qtype=w.A, *, edns=True, tcp=False, raw=None):
    q = raw if raw is not None else w.build_query(0x4242, name, qtype, edns=w.EDNS_SIZE if edns else None)
    if tcp:
        with socket.create_connection(dns.address, timeout=5) as s:
            s.sendall(struct.pack("!H", len(q)) + q)
            n = struct.unpack("!H", s.recv(2))[0]
            data = b""
            while len(data) < n:
                data += s.recv(n - len(data))
    else:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.settimeout(5)
            s.sendto(q, dns.address)
            data = s.recv(65535)
    return w.parse(data)


def addrs(msg):
    return [str(w.rdata_address(r.rtype, r.rdata)) for r in msg.answers]


def test_allowed_name_resolved_and_pinned(make_stack, upstream):
    st = make_stack(["allowed.test"], allowed_ips=["127.0.0.1"])
    r = ask(st.dns, "Allowed.Test.")
    assert r.rcode == w.NOERROR and addrs(r) == ["127.0.0.1"]
    assert r.questions[0].name == "Allowed.Test"          # the question is echoed as asked
    assert st.pins.contains("allowed.test", ipaddress.ip_address("127.0.0.1"))
    assert upstream.names() == ["allowed.test"]
    r = ask(st.dns, "allowed.test", tcp=True)             # TCP too; answered from the cache
    assert addrs(r) == ["127.0.0.1"] and upstream.names() == ["allowed.test"]
    ev = [e for e in st.events if e["event"] == "dns"]
    assert ev[0]["decision"] == "allow" and ev[0]["rule"] == "allow allowed.test"
    assert ev[0]["answers"] == ["127.0.0.1"] and ev[0]["rcode"] == "NOERROR"


def test_not_allowed_name_never_reaches_upstream(make_stack, upstream):
    st = make_stack(["allowed.test"])
    secret = "c2VjcmV0LWRhdGE.exfil.other.test"
    for name, qt in ((secret, w.A), ("other.test", w.AAAA), ("other.test", w.TXT), ("x.allowed.test", w.A),
                     ("1.0.0.127.in-addr.arpa", w.PTR)):
        r = ask(st.dns, name, qt)
        assert r.rcode == w.NXDOMAIN and r.answers == []
    assert ask(st.dns, secret, tcp=True).rcode == w.NXDOMAIN
    assert upstream.names() == []
    ev = [e for e in st.events if e["event"] == "dns"]
    assert all(e["decision"] == "deny" and e["rcode"] == "NXDOMAIN" for e in ev)
    assert ev[0]["name"] == secret.lower()
    # control: an allowed name does reach the same upstream
    ask(st.dns, "allowed.test")
    assert upstream.names() == ["allowed.test"]


def test_refused_addresses_not_answered_nor_pinned(make_stack, upstream):
    st = make_stack(["meta.test", "private.test", "mixed.test", "mapped.test"])
    for name, qt in (("meta.test", w.A), ("meta.test", w.AAAA), ("private.test", w.A), ("mapped.test", w.AAAA)):
        r = ask(st.dns, name, qt)
        assert r.rcode == w.NOERROR and r.answers == [], name
        assert st.pins.addresses(name) == frozenset()
    r = ask(st.dns, "mixed.test")
    assert addrs(r) == []        # 10.0.0.6 private, 127.0.0.1 loopback: neither explicitly allowed
    ev = [e for e in st.events if e.get("name") == "meta.test"]
    assert any("metadata" in why for e in ev for why in e.get("refused", []))


def test_query_types(make_stack, upstream):
    st = make_stack(["allowed.test"], allowed_ips=["127.0.0.1"])
    assert ask(st.dns, "allowed.test", w.HTTPS).rcode == w.NOERROR
    assert ask(st.dns, "allowed.test", w.HTTPS).answers == []
    assert ask(st.dns, "allowed.test", w.TXT).answers == []
    assert ask(st.dns, "allowed.test", w.ANY).rcode == w.NOTIMP
    assert ask(st.dns, "allowed.test", w.AXFR, tcp=True).rcode == w.REFUSED
    assert upstream.names() == []          # only A and AAAA are ever asked upstream
    r = ask(st.dns, "allowed.test", w.AAAA)
    assert r.rcode == w.NOERROR and r.answers == []
    assert [q[1] for q in upstream.queries] == [w.AAAA]


def test_cname_flattened(make_stack):
    st = make_stack(["alias.test"], allowed_ips=["127.0.0.1"])
    r = ask(st.dns, "alias.test")
    assert [(x.name, x.rtype) for x in r.answers] == [("alias.test", w.A)]
    assert st.pins.contains("alias.test", ipaddress.ip_address("127.0.0.1"))
    assert st.pins.addresses("target.elsewhere") == frozenset()


def test_truncated_upstream_retried_over_tcp(make_stack, upstream):
    st = make_stack(["big.test"], allowed_ips=["127.0.0.1"])
    assert addrs(ask(st.dns, "big.test")) == ["127.0.0.1"]
    assert [p for n, _, p in upstream.queries if n == "big.test"] == ["udp", "tcp"]


def test_udp_truncation_without_edns(make_stack):
    st = make_stack(["many.test"])
    r = ask(st.dns, "many.test", w.AAAA, edns=False)
    assert r.tc and r.answers == []
    assert len(addrs(ask(st.dns, "many.test", w.AAAA, tcp=True))) == 40
    assert len(addrs(ask(st.dns, "many.test", w.AAAA, edns=True))) == 40


def test_malformed_and_odd_queries(make_stack, upstream):
    st = make_stack(["allowed.test"])
    bad = struct.pack("!HHHHHH", 9, 0x0100, 1, 0, 0, 0) + b"\xc0\x0c\x00\x01\x00\x01"
    r = ask(st.dns, "", raw=bad)
    assert r.id == 9 and r.rcode == w.FORMERR
    two = struct.pack("!HHHHHH", 10, 0x0100, 2, 0, 0, 0) + (b"\x01a\x00\x00\x01\x00\x01" * 2)
    assert ask(st.dns, "", raw=two).rcode == w.FORMERR
    notify = struct.pack("!HHHHHH", 11, 4 << 11, 1, 0, 0, 0) + b"\x01a\x00\x00\x01\x00\x01"
    assert ask(st.dns, "", raw=notify).rcode == w.NOTIMP
    chaos = w.build_query(12, "allowed.test", w.TXT)
    chaos = chaos[:12] + chaos[12:12 + 14] + struct.pack("!HH", w.TXT, 3) + chaos[12 + 18:]
    assert ask(st.dns, "", raw=chaos).rcode == w.REFUSED
    odd = struct.pack("!HHHHHH", 13, 0x0100, 1, 0, 0, 0) + b"\x04a\x00.b\x04test\x00\x00\x01\x00\x01"
    assert ask(st.dns, "", raw=odd).rcode == w.NXDOMAIN
    dotted = struct.pack("!HHHHHH", 14, 0x0100, 1, 0, 0, 0) + b"\x0callowed.test\x00\x00\x01\x00\x01"
    assert ask(st.dns, "", raw=dotted).rcode == w.NXDOMAIN      # one label "allowed.test"
    assert upstream.names() == []
    # the server still answers after all that
    assert ask(st.dns, "allowed.test").rcode == w.NOERROR


def test_upstream_down_is_servfail(make_stack):
    st = make_stack(["allowed.test"])
    st.resolver.upstreams = [("127.0.0.1", 9)]    # discard port: nothing answers
    st.resolver.timeout = 0.3
    assert ask(st.dns, "allowed.test").rcode == w.SERVFAIL


def test_tcp_clients_bounded_and_stalled_ones_dropped(upstream):
    import time

    from confine.gateway import DNSServer, Pins, Resolver, Rules
    rules = Rules.parse(["allowed.test"], allowed_ips=["127.0.0.1"])
    res = Resolver([("127.0.0.1", upstream.port)], rules, Pins())
    with DNSServer(res, max_tcp=2, tcp_idle=0.5) as dns:
        stalled = [socket.create_connection(dns.address, timeout=5) for _ in range(2)]
        stalled[0].sendall(b"\x00")                  # half a length prefix, then nothing
        time.sleep(0.1)
        third = socket.create_connection(dns.address, timeout=5)
        third.settimeout(2)
        assert third.recv(10) == b""                 # over the cap: closed at once
        assert addrs(ask(dns, "allowed.test")) == ["127.0.0.1"]   # UDP still answers
        t0 = time.monotonic()
        for s in stalled:
            s.settimeout(3)
            assert s.recv(10) == b""
        assert time.monotonic() - t0 < 1.5
        time.sleep(0.1)
        assert addrs(ask(dns, "allowed.test", tcp=True)) == ["127.0.0.1"]   # a slot is free again
