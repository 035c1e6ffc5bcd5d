"""The swap's request side, pure (credentials/swap.py): how the agent's byte stream is cut
into requests (the next head is where the body ends, never inside it), which heads may
go, and where a placeholder is swapped or refused. The real relays are in
tests/gateway/test_tls_swap.py."""
from __future__ import annotations

import base64

import pytest

from confine.credentials.binding import Binding, Target
from confine.credentials.swap import Refusal, Swap, _Requests, _Scanner, _values
from confine.gateway import http1

PH, VALUE = "confine-ph-aaaa1111", "real-value-bbbb2222"
HOST = "forge.test"


def swap(**kw):
    kw.setdefault("targets", (Target(HOST, 443),))
    events = []
    s = Swap((Binding("TOKEN", PH, VALUE, **kw),), ca=None, emit=events.append)  # type: ignore[arg-type]
    s.events = events
    return s


def head(first="GET / HTTP/1.1", *lines, host=HOST):
    return ("\r\n".join([first, f"Host: {host}", *lines]) + "\r\n\r\n").encode()


def feed(s, data, chunks=1):
    r = _Requests(s, HOST, 443, None)
    step = max(1, len(data) // chunks)
    return b"".join(r.feed(data[i:i + step]) for i in range(0, len(data), step))


@pytest.mark.parametrize("chunks", [1, 7, 1000])
def test_bodies_are_framed_and_the_next_head_is_judged(chunks):
    s = swap()
    body = b"x" * 300
    hidden = head("GET / HTTP/1.1", host="other.test")   # a request inside a body is body bytes
    chunked = b"%x\r\n" % len(hidden) + hidden + b"\r\n5;ext=1\r\nhello\r\n0\r\nTrailer: t\r\n\r\n"
    data = (head("POST /a HTTP/1.1", f"Content-Length: {len(body)}", f"Authorization: Bearer {PH}") + body
            + head("POST /b HTTP/1.1", "Transfer-Encoding: chunked") + chunked
            + head("GET /c HTTP/1.1", f"Authorization: token {PH}"))
    out = feed(s, data, chunks)
    # the two Authorization headers swapped, the body (with its hidden head) as it was
    assert out.count(VALUE.encode()) == 2 and hidden in out
    assert out.replace(VALUE.encode(), PH.encode()) == data
    # control: the same head outside a body is refused (another host than the SNI's)
    with pytest.raises(Refusal, match="not the connection's host"):
        feed(s, hidden)


def pieces(s, data, step):
    """Feed `data` in pieces of `step` bytes: (what went upstream, the Refusal or None)."""
    r = _Requests(s, HOST, 443, None)
    sent = b""
    for i in range(0, len(data), step):
        try:
            sent += r.feed(data[i:i + step])
        except Refusal as e:
            return sent, e
    return sent, None


def chunked(*parts: bytes) -> bytes:
    return b"".join(b"%x;ext=1\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


LONG = b"y" * 70_000


BODIES = {
    "length": lambda p: (b"data=" + p + b"&x=1", "length"),
    "read-boundary": lambda p: (LONG[:65530] + p + LONG, "length"),
    "across-chunks": lambda p: (chunked(b"token=" + p[:7], p[7:] + b"&more"), "chunked"),
    "trailer": lambda p: (chunked(b"a", b"b")[:-2] + b"X-Sig: " + p + b"\r\n\r\n", "chunked"),
}


@pytest.mark.parametrize("case, step", [(c, n) for c in BODIES for n in (1, 4096, 1 << 20)
                                         if (c == "read-boundary") == (n == 4096) or n == 1 << 20])
def test_a_placeholder_in_a_body_is_a_disclosure_the_origin_never_gets_whole(case, step):
    def request(p):
        body, framing = BODIES[case](p.encode())
        frame = f"Content-Length: {len(body)}" if framing == "length" else "Transfer-Encoding: chunked"
        return head("POST /up HTTP/1.1", frame, f"Authorization: Bearer {PH}") + body

    s = swap()
    sent, e = pieces(s, request(PH), step)
    assert e is not None and "attempted disclosure" in e.reason and "in the body" in e.reason
    assert e.status == 403 and PH.encode() not in sent
    assert s.events[-1]["disclosure"] is True and s.events[-1]["where"] == "the body"
    # control: the same body with another string of that length goes through unchanged
    other = "confine-ph-zzzz9999"
    assert len(other) == len(PH)
    sent, e = pieces(swap(), request(other), step)
    assert e is None and sent == request(other).replace(PH.encode(), VALUE.encode())


def test_a_body_refusal_after_an_answer_began_just_ends_the_connection():
    s = swap()
    r = _Requests(s, HOST, 443, None)
    r.feed(head("POST / HTTP/1.1", "Content-Length: 100") + b"abc")
    r.answered = True          # the origin answered early (what _pump_origin marks)
    with pytest.raises(Refusal) as e:
        r.feed(PH.encode())
    assert e.value.status == 0


def test_a_placeholder_a_refresh_added_is_searched_too():
    s = swap()
    s.add_binding(Binding("NEW", "confine-ph-new-55555", "new-real-value-5555", (Target(HOST, 443),)))
    with pytest.raises(Refusal, match="placeholder of NEW in the body"):
        feed(s, head("PUT / HTTP/1.1", "Content-Length: 20") + b"confine-ph-new-55555")


def test_plain_body_search_keeps_the_end_of_each_piece():
    s = swap()
    check = s.plain_body(http1.parse_head(head("POST / HTTP/1.1")), HOST, 80)
    said = [check(bytes([c])) for c in b"aa" + PH.encode()]     # one byte a piece
    assert said[:-1] == [None] * (len(PH) + 1) and "attempted disclosure" in (said[-1] or "")
    # control: the same bytes without the placeholder's last one are not refused
    check = s.plain_body(http1.parse_head(head("POST / HTTP/1.1")), HOST, 80)
    assert [check(bytes([c])) for c in b"aa" + PH[:-1].encode() + b"!"] == [None] * (len(PH) + 2)


@pytest.mark.parametrize("lines, status", [
    (["Content-Length: 3", "Transfer-Encoding: chunked"], 400),
    (["Transfer-Encoding: gzip, chunked"], 501),
    (["Content-Length: 3", "Content-Length: 4"], 400),
])
def test_ambiguous_framing_refused(lines, status):
    with pytest.raises(Refusal) as e:
        feed(swap(), head("POST / HTTP/1.1", *lines) + b"abc")
    assert e.value.status == status
    assert feed(swap(), head("POST / HTTP/1.1", "Content-Length: 3") + b"abc")   # control


@pytest.mark.parametrize("bad", [b"zz\r\n", b"-1\r\n", b"1" * 16 + b"\r\n", b"3\r\nabcX"])
def test_bad_chunks_refused(bad):
    with pytest.raises(Refusal, match="chunked"):
        feed(swap(), head("POST / HTTP/1.1", "Transfer-Encoding: chunked") + bad + b"\r\n" * 3)


def test_upgrade_relays_the_rest_as_bytes_with_no_swap():
    s = swap()
    data = head("GET /ws HTTP/1.1", "Upgrade: websocket", "Connection: Upgrade") + b"frame " + PH.encode()
    assert feed(s, data) == data        # after the upgrade nothing is judged, nothing swapped


def test_host_must_be_the_sni_host():
    with pytest.raises(Refusal) as e:
        feed(swap(), head(host="other.test"))
    assert e.value.status == 421
    with pytest.raises(Refusal):
        feed(swap(), head(host=f"{HOST}:8443"))
    assert feed(swap(), head(host=f"{HOST.upper()}.")) and feed(swap(), head(host=f"{HOST}:443"))


def test_basic_password_swapped_and_reencoded():
    s = swap()
    cred = base64.b64encode(f"agent:{PH}".encode()).decode()
    out = feed(s, head("GET /repo.git/info/refs HTTP/1.1", f"Authorization: Basic {cred}"))
    assert base64.b64encode(f"agent:{VALUE}".encode()) in out and PH.encode() not in out
    assert [(e["name"], e["decision"]) for e in s.events] == [("TOKEN", "allow")]
    assert VALUE not in repr(s.events)


@pytest.mark.parametrize("lines, where", [
    ([f"X-Forward: {PH}"], "the header x-forward"),
    ([f"Authorization: Digest {PH}"], "authorization (digest)"),
    ([f"Cookie: a={PH}"], "the header cookie"),
])
def test_placeholder_anywhere_else_in_the_head_is_a_disclosure(lines, where):
    s = swap()
    with pytest.raises(Refusal, match="attempted disclosure") as e:
        feed(s, head("GET / HTTP/1.1", *lines))
    assert where in e.value.reason
    assert s.events[-1]["disclosure"] is True and s.events[-1]["decision"] == "deny"


def test_named_header_swapped_only_for_its_binding():
    assert VALUE.encode() in feed(swap(headers=("x-api-key",)), head("GET / HTTP/1.1", f"X-Api-Key: {PH}"))
    with pytest.raises(Refusal):
        feed(swap(), head("GET / HTTP/1.1", f"X-Api-Key: {PH}"))


def test_value_with_a_line_break_is_never_written():
    s = Swap((Binding("T", PH, "abc\r\nX-Evil: 1", (Target(HOST, 443),)),), ca=None)  # type: ignore[arg-type]
    with pytest.raises(Refusal, match="control"):
        feed(s, head("GET / HTTP/1.1", f"Authorization: Bearer {PH}"))


def test_plain_http_never_carries_a_placeholder():
    s = swap()
    h = http1.parse_head(head("GET http://forge.test/ HTTP/1.1", f"Authorization: Bearer {PH}"))
    assert "attempted disclosure" in (s.plain_refusal(h, HOST, 80) or "")
    assert s.plain_refusal(http1.parse_head(head()), HOST, 80) is None


@pytest.mark.parametrize("t, host, port, method, path, ok", [
    (Target("forge.test"), "forge.test", 8443, "GET", "/", True),
    (Target("forge.test", 443), "forge.test", 8443, "GET", "/", False),
    (Target("*.forge.test"), "api.forge.test", 443, "GET", "/", True),
    (Target("*.forge.test"), "forge.test", 443, "GET", "/", False),
    (Target("*.forge.test"), "evilforge.test", 443, "GET", "/", False),
    (Target("forge.test", methods=frozenset({"GET"})), "forge.test", 443, "post", "/", False),
    (Target("forge.test", paths=("/api",)), "forge.test", 443, "GET", "/api/x", True),
    (Target("forge.test", paths=("/api",)), "forge.test", 443, "GET", "/apix", False),
    (Target("forge.test", paths=("/api",)), "forge.test", 443, "GET", "/api/../admin", False),
    (Target("forge.test", paths=("/api",)), "forge.test", 443, "GET", "/api/%2e%2e/admin", False),
    (Target("forge.test", paths=("/api",)), "forge.test", 443, "GET", "/api\\..\\admin", False),
    (Target("forge.test", paths=("/api",)), "forge.test", 443, "GET", "/api/./x", False),
    (Target("forge.test", paths=("/api",)), "forge.test", 443, "GET", "/api/x%2fy", False),
    (Target("forge.test", paths=("/api",)), "forge.test", 443, "GET", "/api?q=/..", True),
    (Target("forge.test", paths=("/api/",)), "forge.test", 443, "GET", "/api", True),
    (Target("forge.test", paths=("/api/",)), "forge.test", 443, "GET", "/apix/", False),
    (Target("forge.test", paths=("/",)), "forge.test", 443, "GET", "/anything", True),
    (Target("forge.test", 443), "FORGE.test.", 443, "GET", "/", True),
    (Target("forge.test", 443), "forge.test", None, "GET", "/", False),   # a port not known
    (Target("forge.test"), "forge.test", None, "GET", "/", True),
])
def test_targets(t, host, port, method, path, ok):
    assert t.matches(host, port, method, path) is ok


@pytest.mark.parametrize("step", [1, 3, 7])
def test_a_value_echoed_across_many_small_records_is_cut(step):
    """The response side's search (the same `_Scanner`): a value the origin sends back in
    pieces smaller than it is still found where it ends (the kept end spans several
    pieces), and the connection is cut; whole in one piece it is put back to its
    placeholder (the control)."""
    s = swap()
    scanner = _Scanner(_values(s.bindings), lambda b, replaced: s._log_echo(b, HOST, 443, replaced))
    data = b"echo: " + VALUE.encode() + b" end"
    out = b""
    with pytest.raises(Refusal, match="sent the value of TOKEN back"):
        for i in range(0, len(data), step):
            buf = bytearray(data[i:i + step])
            scanner.scan(buf, len(buf))
            out += bytes(buf)
    assert VALUE.encode() not in out
    whole = bytearray(data)
    _Scanner(_values(s.bindings), lambda b, replaced: s._log_echo(b, HOST, 443, replaced)).scan(whole, len(whole))
    assert bytes(whole) == data.replace(VALUE.encode(), PH.encode())
