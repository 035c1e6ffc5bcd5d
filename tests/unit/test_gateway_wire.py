"""Gateway parsers on hostile bytes: DNS messages, TLS ClientHello (SNI), HTTP request heads."""
from __future__ import annotations

import ssl
import struct

import pytest

from confine.gateway import dnswire as w
from confine.gateway import http1
from confine.gateway.sni import MalformedHello, parse_client_hello, sni_of


# --- DNS ---------------------------------------------------------------------------------------
def test_query_roundtrip():
    q = w.parse(w.build_query(0x1234, "Example.COM", w.AAAA))
    assert q.id == 0x1234 and q.rd and not q.qr
    assert q.questions[0].name == "Example.COM" and q.questions[0].qtype == w.AAAA
    assert q.udp_size == w.EDNS_SIZE


def test_response_echoes_and_answers():
    q = w.parse(w.build_query(7, "a.test", w.A, edns=None))
    r = w.parse(w.build_response(q, w.NOERROR, [(w.A, 60, bytes([192, 0, 2, 1]))]))
    assert r.qr and r.id == 7 and r.rcode == w.NOERROR and not r.tc
    assert [(x.name, x.ttl, w.rdata_address(x.rtype, x.rdata).compressed) for x in r.answers] == \
        [("a.test", 60, "192.0.2.1")]
    assert r.udp_size is None


def test_truncation_without_edns():
    q = w.parse(w.build_query(7, "a.test", w.AAAA, edns=None))
    answers = [(w.AAAA, 60, bytes(15) + bytes([i])) for i in range(40)]
    out = w.build_response(q, w.NOERROR, answers, limit=w.udp_limit(q))
    assert len(out) <= 512
    r = w.parse(out)
    assert r.tc and r.answers == []
    q2 = w.parse(w.build_query(7, "a.test", w.AAAA))
    assert len(w.build_response(q2, w.NOERROR, answers, limit=w.udp_limit(q2))) > 512


def _hdr(qd=1, an=0):
    return struct.pack("!HHHHHH", 1, 0x0100, qd, an, 0, 0)


@pytest.mark.parametrize("body", [
    b"\xc0\x0c\x00\x01\x00\x01",                       # pointer to itself
    b"\xc0\x0e\x00\x01\x00\x01",                       # forward pointer
    b"\x01a\xc0\x0c\x00\x01\x00\x01",                  # loop back to the start
    b"\x40" + b"a" * 64 + b"\x00\x00\x01\x00\x01",     # label type 01
    b"\x05ab",                                         # label past the end
    b"\x01a",                                          # no terminator
    (b"\x3f" + b"a" * 63) * 4 + b"\x00\x00\x01\x00\x01",   # name > 255 bytes
    b"\x01a\x00\x00",                                  # truncated question
])
def test_hostile_names(body):
    with pytest.raises(w.DNSFormatError):
        w.parse(_hdr() + body)


def test_counts_and_sizes():
    with pytest.raises(w.DNSFormatError):
        w.parse(b"\0" * 11)
    with pytest.raises(w.DNSFormatError):
        w.parse(_hdr(qd=1, an=300) + b"\x00\x00\x01\x00\x01")
    with pytest.raises(w.DNSFormatError):                   # promised records missing
        w.parse(_hdr(qd=1, an=2) + b"\x00\x00\x01\x00\x01")
    rec = b"\xc0\x0c" + struct.pack("!HHIH", w.A, 1, 5, 50) + b"\0" * 4
    with pytest.raises(w.DNSFormatError):                   # rdata past the end
        w.parse(_hdr(qd=1, an=1) + b"\x01a\x00\x00\x01\x00\x01" + rec)


def test_pointer_chain_limit():
    # a chain of backward pointers longer than MAX_POINTERS
    body = b"\x01a\x00"
    base = 12
    chain = b""
    for i in range(w.MAX_POINTERS + 2):
        target = base if i == 0 else base + 3 + 2 * (i - 1)
        chain += bytes([0xC0 | (target >> 8), target & 0xFF])
    msg = struct.pack("!HHHHHH", 1, 0, 1, 0, 0, 0) + body + chain
    last = base + 3 + 2 * (w.MAX_POINTERS + 1)
    with pytest.raises(w.DNSFormatError):
        w._read_name(msg, last)
    assert w._read_name(msg, base + 3)[0] == (b"a",)


# --- TLS ClientHello -------------------------------------------------------------------------
def client_hello(server_hostname: str | None) -> bytes:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(inc, out, server_hostname=server_hostname)
    with pytest.raises(ssl.SSLWantReadError):
        obj.do_handshake()
    return out.read()


def test_sni_of_real_hello():
    h = client_hello("allowed.test")
    assert sni_of(h) == "allowed.test"
    p = parse_client_hello(h)
    assert p is not None and p.consumed == len(h)
    assert sni_of(client_hello(None)) is None
    assert sni_of(client_hello("127.0.0.1")) is None      # Python sends no SNI for an address


def test_hello_incomplete_then_complete():
    h = client_hello("allowed.test")
    for n in (0, 1, 4, 5, 6, len(h) - 1):
        assert parse_client_hello(h[:n]) is None


def _resplit(h: bytes, size: int) -> bytes:
    """The same handshake bytes in records of `size` bytes each."""
    body = h[5:]
    out = b""
    for i in range(0, len(body), size):
        frag = body[i:i + size]
        out += b"\x16\x03\x01" + struct.pack("!H", len(frag)) + frag
    return out


def test_hello_split_over_records():
    h = client_hello("split.allowed.test")
    for size in (1, 3, 50):
        s = _resplit(h, size)
        assert sni_of(s) == "split.allowed.test"
        assert parse_client_hello(s[:-1]) is None


@pytest.mark.parametrize("mutate", [
    lambda h: b"\x17" + h[1:],                                # not handshake
    lambda h: h[:1] + b"\x02" + h[2:],                        # record version 2.x
    lambda h: h[:3] + b"\x00\x00" + h[5:],                    # zero-length record
    lambda h: h[:3] + b"\xff\xff" + h[5:],                    # record longer than allowed
    lambda h: h[:5] + b"\x02" + h[6:],                        # ServerHello
    lambda h: h[:6] + b"\x01\x00\x00" + h[9:],                # handshake claims 64 KiB
    lambda h: h[:5] + b"\x01\x00\x00\x04" + b"\x03\x03\x00\x00",   # body too short
])
def test_hello_malformed(mutate):
    h = mutate(client_hello("allowed.test"))
    with pytest.raises(MalformedHello):
        r = parse_client_hello(h)
        if r is None:     # an incomplete verdict is fine only if the caller's cap then refuses
            raise MalformedHello("incomplete")
    assert sni_of(h) is None


def test_hello_two_snis_refused():
    h = client_hello("aa.test")
    i = h.find(b"aa.test")
    # rewrite the first name to a different one of the same length: still one name
    assert sni_of(h[:i] + b"bb.test" + h[i + 7:]) == "bb.test"
    # a non-printable byte in the name: refused
    assert sni_of(h[:i] + b"b\x00.test" + h[i + 7:]) is None


# --- HTTP heads ------------------------------------------------------------------------------
def test_head_parse():
    raw = b"GET http://a.test/x?y HTTP/1.1\r\nHost: a.test\r\nX: 1\r\n\r\nbody"
    h = http1.parse_head(raw)
    assert (h.method, h.target, h.host(), h.size) == ("GET", "http://a.test/x?y", "a.test", len(raw) - 4)
    assert http1.absolute_target(h.target) == ("a.test", 80, "/x?y")
    assert http1.absolute_target("http://A.test:8080") == ("A.test", 8080, "/")
    assert http1.split_authority("[::1]:443", None) == ("::1", 443)
    out = http1.origin_head(h, "/x?y")
    assert out.startswith(b"GET /x?y HTTP/1.1\r\n") and b"Connection: close\r\n\r\n" in out


@pytest.mark.parametrize("raw", [
    b"GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\nHost: b.test\r\n\r\n",
    b"GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\n folded\r\n\r\n",
    b"GET http://a.test/ HTTP/1.1\r\nBad Header: x\r\n\r\n",
    b"GET  http://a.test/ HTTP/1.1\r\n\r\n",
    b"GET http://a.test/ HTTP/2.0\r\n\r\n",
    b"GET http://a.test/\x01 HTTP/1.1\r\n\r\n",
    b"GET http://a.test/ HTTP/1.1\r\nX: a\x00b\r\n\r\n",
    b"GET http://a.test/ HTTP/1.1\r\nHost: a.test",
    b"GET / HTTP/1.1\r\n" + b"X: " + b"a" * http1.MAX_HEAD + b"\r\n\r\n",
])
def test_head_refused(raw):
    with pytest.raises(http1.BadRequest):
        http1.parse_head(raw)


def test_framing():
    h = http1.parse_head(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\n")
    assert h.content_length() == 5
    for extra in (b"Transfer-Encoding: chunked\r\n", b"Content-Length: 6\r\n"):
        h = http1.parse_head(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n" + extra + b"\r\n")
        with pytest.raises(http1.BadRequest):
            h.content_length()
    with pytest.raises(http1.BadRequest):
        http1.absolute_target("https://a.test/")
    with pytest.raises(http1.BadRequest):
        http1.absolute_target("http://user@a.test/")
    with pytest.raises(http1.BadRequest):
        http1.split_authority("a.test", None)
