"""The gateway as an HTTP proxy and as the transparent entry, with real clients (curl, urllib,
ssl) and real loopback servers. Every refusal has an allowed control beside it."""
from __future__ import annotations

import os
import select
import shutil
import socket
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

from confine.gateway import Limits

CLEAN_ENV = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}


def tunnel(gw, target, extra=b"", timeout=5.0):
    """CONNECT through the gateway: (socket, status line)."""
    s = socket.create_connection(gw.address, timeout=timeout)
    s.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode() + extra)
    buf = b""
    while b"\r\n\r\n" not in buf:
        d = s.recv(4096)
        if not d:
            break
        buf += d
    return s, buf.split(b"\r\n")[0].decode()


def tls_get(sock, name, cafile, path="/"):
    ctx = ssl.create_default_context(cafile=str(cafile))
    with ctx.wrap_socket(sock, server_hostname=name) as t:
        t.sendall(f"GET {path} HTTP/1.1\r\nHost: {name}\r\nConnection: close\r\n\r\n".encode())
        out = b""
        while True:
            d = t.recv(65536)
            if not d:
                break
            out += d
    return out.split(b"\r\n\r\n", 1)[1].decode()


def one(events, **match):
    """The one event whose fields have the given values."""
    hits = [e for e in events if all(e.get(k) == v for k, v in match.items())]
    assert len(hits) == 1, (match, events)
    return hits[0]


def closed_within(sock, seconds):
    """True if the peer closes (EOF or reset) within `seconds`."""
    sock.settimeout(seconds)
    try:
        while True:
            if not sock.recv(65536):
                return True
    except (ConnectionResetError, ssl.SSLError, ssl.SSLEOFError):
        return True
    except socket.timeout:
        return False


@pytest.fixture
def https_stack(make_stack, https_origin):
    p = https_origin.port
    return make_stack([f"allowed.test:{p}", f"also.test:{p}", f"127.0.0.1:{p}", f"meta.test:{p}",
                       f"private.test:{p}", f"mapped.test:{p}", "169.254.169.254:*"])


# --- allowed ------------------------------------------------------------------------------------
@pytest.mark.skipif(shutil.which("curl") is None, reason="curl not installed")
def test_curl_through_connect(https_stack, https_origin, tls_files, upstream):
    st, p = https_stack, https_origin.port
    r = subprocess.run(["curl", "-sS", "--max-time", "10", "--proxy", f"http://127.0.0.1:{st.gw.port}",
                        "--cacert", str(tls_files[0]), f"https://allowed.test:{p}/hello"],
                       capture_output=True, text=True, env=CLEAN_ENV, timeout=20)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "sni=allowed.test host=allowed.test:%d path=/hello" % p
    ev = st.wait_connects(1)[0]
    assert ev["decision"] == "allow" and ev["host"] == "allowed.test" and ev["port"] == p
    assert ev["rule"] == f"allow allowed.test:{p}" and ev["sni"] == "allowed.test"
    assert ev["dialled"] == f"127.0.0.1:{p}" and ev["resolved"] == ["127.0.0.1"]
    assert ev["bytes_up"] > 0 and ev["bytes_down"] > 0 and ev["duration_ms"] >= 0
    assert set(upstream.names()) == {"allowed.test"}


def test_urllib_through_proxy(https_stack, https_origin, tls_files):
    st, p = https_stack, https_origin.port
    ctx = ssl.create_default_context(cafile=str(tls_files[0]))
    proxy = f"http://127.0.0.1:{st.gw.port}"
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({"https": proxy}),
                                         urllib.request.HTTPSHandler(context=ctx))
    with opener.open(f"https://allowed.test:{p}/u", timeout=10) as resp:
        assert resp.read().decode() == f"sni=allowed.test host=allowed.test:{p} path=/u"


def test_plain_http_absolute_uri(make_stack, http_origin):
    p = http_origin.port
    st = make_stack([f"allowed.test:{p}", f"127.0.0.1:{p}"])
    proxy = f"http://127.0.0.1:{st.gw.port}"
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": proxy}))
    with opener.open(f"http://allowed.test:{p}/plain?q=1", timeout=10) as resp:
        assert resp.read().decode() == f"sni=None host=allowed.test:{p} path=/plain?q=1"
    req = http_origin.requests[-1]
    assert req.startswith(b"GET /plain?q=1 HTTP/1.1\r\n") and b"Connection: close" in req
    assert b"Proxy-Connection" not in req


# --- refused ------------------------------------------------------------------------------------
def test_not_allowed_refused_at_once(https_stack, https_origin, upstream):
    st, p = https_stack, https_origin.port
    t0 = time.monotonic()
    s, status = tunnel(st.gw, f"other.test:{p}")
    assert status.startswith("HTTP/1.1 403"), status
    assert time.monotonic() - t0 < 1.0
    s.close()
    s, status = tunnel(st.gw, "allowed.test:443")           # right name, other port
    assert status.startswith("HTTP/1.1 403")
    s.close()
    ev = st.wait_connects(2)                               # events come in the order connections end
    assert [e["decision"] for e in ev] == ["deny", "deny"] and all(e["rule"] == "no rule" for e in ev)
    assert "other.test" in one(ev, host="other.test")["reason"]
    assert one(ev, host="other.test")["allow_with"] == f"other.test:{p}"
    assert one(ev, host="allowed.test")["allow_with"] == "allowed.test"
    assert "other.test" not in upstream.names() and https_origin.accepted == 0


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl not installed")
def test_curl_not_allowed(https_stack, https_origin, tls_files, upstream):
    r = subprocess.run(["curl", "-sS", "--max-time", "10", "--proxy", f"http://127.0.0.1:{https_stack.gw.port}",
                        "--cacert", str(tls_files[0]), f"https://other.test:{https_origin.port}/"],
                       capture_output=True, text=True, env=CLEAN_ENV, timeout=20)
    assert r.returncode != 0 and "403" in r.stderr
    assert https_origin.accepted == 0 and upstream.names() == []


def test_mismatched_sni_refused(https_stack, https_origin, tls_files):
    st, p = https_stack, https_origin.port
    s, status = tunnel(st.gw, f"allowed.test:{p}")
    assert status.startswith("HTTP/1.1 200")
    with pytest.raises((ssl.SSLError, OSError)):
        tls_get(s, "also.test", tls_files[0])                # also allowed, but not this tunnel's host
    s, status = tunnel(st.gw, f"allowed.test:{p}")
    with pytest.raises((ssl.SSLError, OSError)):             # no SNI at all
        ctx = ssl.create_default_context(cafile=str(tls_files[0]))
        ctx.check_hostname = False
        ctx.wrap_socket(s, server_hostname=None).do_handshake()
    ev = st.wait_connects(2)
    assert "does not match" in one(ev, sni="also.test")["reason"]
    assert "no SNI" in one(ev, sni=None)["reason"]
    assert https_origin.accepted == 0                        # refused before anything was dialled
    s, _ = tunnel(st.gw, f"allowed.test:{p}")                # control
    assert tls_get(s, "allowed.test", tls_files[0]).startswith("sni=allowed.test")


def test_not_tls_in_tunnel_refused(https_stack, https_origin):
    s, status = tunnel(https_stack.gw, f"allowed.test:{https_origin.port}")
    assert status.startswith("HTTP/1.1 200")
    s.sendall(b"SSH-2.0-OpenSSH_9.6\r\n")
    assert closed_within(s, 3)
    assert https_origin.accepted == 0


def test_no_second_host_through_a_tunnel(https_stack, https_origin, tls_files, upstream):
    st, p = https_stack, https_origin.port
    # a second CONNECT pipelined behind the first is tunnel data, not a request: refused
    s, status = tunnel(st.gw, f"allowed.test:{p}", extra=f"CONNECT other.test:{p} HTTP/1.1\r\n\r\n".encode())
    assert status.startswith("HTTP/1.1 200")
    assert closed_within(s, 3)
    # after a whole TLS session, the tunnel is still the one upstream connection: a second
    # ClientHello for another name goes to the same server, never through a new dial
    s, _ = tunnel(st.gw, f"allowed.test:{p}")
    assert tls_get(s, "allowed.test", tls_files[0]).startswith("sni=allowed.test")
    ev = st.wait_connects(2)
    assert "not a TLS ClientHello" in one(ev, decision="deny")["reason"]
    assert sorted(str(e.get("dialled")) for e in ev) == [f"127.0.0.1:{p}", "None"]
    assert "other.test" not in upstream.names() and https_origin.accepted == 1


def test_plain_http_one_request_per_connection(make_stack, http_origin, upstream):
    p = http_origin.port
    st = make_stack([f"allowed.test:{p}", f"127.0.0.1:{p}"])
    s = socket.create_connection(st.gw.address, timeout=5)
    s.sendall(f"GET http://allowed.test:{p}/one HTTP/1.1\r\nHost: allowed.test:{p}\r\n\r\n"
              f"GET http://other.test:{p}/two HTTP/1.1\r\nHost: other.test:{p}\r\n\r\n".encode())
    out = b""
    while True:
        d = s.recv(65536)
        if not d:
            break
        out += d
    assert out.count(b"HTTP/1.1 200") == 1 and b"path=/one" in out
    assert len(http_origin.requests) == 1 and b"/two" not in http_origin.requests[0]
    assert "other.test" not in upstream.names()
    # Host header disagreeing with the absolute URI: refused
    s = socket.create_connection(st.gw.address, timeout=5)
    s.sendall(f"GET http://allowed.test:{p}/x HTTP/1.1\r\nHost: other.test:{p}\r\n\r\n".encode())
    assert s.recv(100).startswith(b"HTTP/1.1 400")


def test_metadata_refused_even_when_allowed(https_stack, https_origin, dialled):
    st, p = https_stack, https_origin.port
    for target in (f"meta.test:{p}", "169.254.169.254:80", f"mapped.test:{p}", f"[::ffff:169.254.169.254]:{p}"):
        s, status = tunnel(st.gw, target)
        assert status.startswith("HTTP/1.1 403"), (target, status)
        s.close()
    ev = st.wait_connects(4)
    assert all(e["decision"] == "deny" and "metadata" in e["reason"] for e in ev)
    assert dialled == []


def test_private_address_refused(https_stack, https_origin, dialled):
    s, status = tunnel(https_stack.gw, f"private.test:{https_origin.port}")
    assert status.startswith("HTTP/1.1 403")
    assert "private" in https_stack.wait_connects(1)[0]["reason"]
    assert dialled == []


def test_loopback_needs_the_explicit_rule(make_stack, https_origin, tls_files, dialled):
    p = https_origin.port
    st = make_stack([f"allowed.test:{p}"])                  # no 127.0.0.1 rule
    s, status = tunnel(st.gw, f"allowed.test:{p}")
    assert status.startswith("HTTP/1.1 403")
    assert "loopback" in st.wait_connects(1)[0]["reason"] or "this host" in st.wait_connects(1)[0]["reason"]
    s, status = tunnel(st.gw, f"127.0.0.1:{p}")
    assert status.startswith("HTTP/1.1 403")
    assert dialled == []


# --- the transparent entry -------------------------------------------------------------------
def redirected(st, dst_ip, dst_port):
    """A client socket whose connection the gateway took over as if redirected to it."""
    lst = socket.socket()
    lst.bind(("127.0.0.1", 0))
    lst.listen(1)
    c = socket.create_connection(lst.getsockname(), timeout=5)
    srv, _ = lst.accept()
    lst.close()
    st.gw.handle_redirected(srv, dst_ip, dst_port, pid=4242)
    return c


def test_transparent(make_stack, https_origin, http_origin, tls_files, upstream):
    p, hp = https_origin.port, http_origin.port
    st = make_stack([f"allowed.test:{p}", f"also.test:{p}", f"elsewhere.test:{p}", f"allowed.test:{hp}"],
                    allowed_ips=["127.0.0.1"])
    # before the name was resolved by confine, the address is not pinned: refused
    c = redirected(st, "127.0.0.1", p)
    with pytest.raises((ssl.SSLError, OSError)):
        tls_get(c, "allowed.test", tls_files[0])
    st.resolver.resolve("allowed.test")
    st.resolver.resolve("elsewhere.test")
    # now allowed
    c = redirected(st, "127.0.0.1", p)
    assert tls_get(c, "allowed.test", tls_files[0]).startswith("sni=allowed.test")
    # plain HTTP: the Host header names the host
    c = redirected(st, "127.0.0.1", hp)
    c.sendall(f"GET /t HTTP/1.1\r\nHost: allowed.test:{hp}\r\n\r\n".encode())
    assert b"path=/t" in c.recv(4096)
    # an allowed name that confine never resolved to this address: refused
    c = redirected(st, "127.0.0.1", p)
    with pytest.raises((ssl.SSLError, OSError)):
        tls_get(c, "also.test", tls_files[0])
    # a name pinned to another address (127.0.0.3) sent to this one: refused
    c = redirected(st, "127.0.0.1", p)
    with pytest.raises((ssl.SSLError, OSError)):
        tls_get(c, "elsewhere.test", tls_files[0])
    # a name that is not allowed: refused
    c = redirected(st, "127.0.0.1", p)
    with pytest.raises((ssl.SSLError, OSError)):
        tls_get(c, "other.test", tls_files[0])
    # no SNI: refused
    c = redirected(st, "127.0.0.1", p)
    ctx = ssl.create_default_context(cafile=str(tls_files[0]))
    ctx.check_hostname = False
    with pytest.raises((ssl.SSLError, OSError)):
        ctx.wrap_socket(c, server_hostname=None).do_handshake()
    ev = st.wait_connects(7)
    assert [e["decision"] for e in ev].count("allow") == 2
    allowed = [e for e in ev if e["decision"] == "allow"]
    assert all(e["pid"] == 4242 and e["mode"] == "transparent" for e in ev)
    assert {e["host"] for e in allowed} == {"allowed.test"}
    reasons = " | ".join(e.get("reason", "") for e in ev if e["decision"] == "deny")
    assert "not resolved by confine" in reasons and "not allowed" in reasons and "without SNI" in reasons
    assert https_origin.accepted == 1 and "other.test" not in upstream.names()


def test_transparent_refuses_hard_addresses(make_stack, dialled):
    st = make_stack(["169.254.169.254:*"])
    c = redirected(st, "169.254.169.254", 80)
    assert closed_within(c, 3)
    c = redirected(st, "::ffff:10.0.0.1", 443)
    c.sendall(b"GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
    assert closed_within(c, 3)
    assert dialled == []


# --- bounds --------------------------------------------------------------------------------------
def test_200_concurrent_connections(make_stack, https_origin, tls_files):
    # All 200 tunnels wait at the barrier before their ClientHello: the handshake
    # deadline must outlast the slowest CONNECT on a loaded machine (speed is bench/'s).
    p = https_origin.port
    st = make_stack([f"allowed.test:{p}", f"127.0.0.1:{p}"],
                    limits=Limits(handshake_timeout=120, idle_timeout=120))
    n = 200
    barrier = threading.Barrier(n, timeout=120)

    def one(i):
        s, status = tunnel(st.gw, f"allowed.test:{p}", timeout=120)
        assert status.startswith("HTTP/1.1 200")
        barrier.wait()                       # all 200 tunnels are open at the same time
        return tls_get(s, "allowed.test", tls_files[0], f"/{i}")

    with ThreadPoolExecutor(n) as pool:
        bodies = list(pool.map(one, range(n)))
    assert sorted(bodies) == sorted(f"sni=allowed.test host=allowed.test path=/{i}" for i in range(n))
    assert len([e for e in st.wait_connects(n) if e["decision"] == "allow"]) == n


def test_over_the_connection_cap_refused(make_stack, https_origin):
    p = https_origin.port
    st = make_stack([f"allowed.test:{p}", f"127.0.0.1:{p}"], limits=Limits(max_conns=2, handshake_timeout=3))
    held = [socket.create_connection(st.gw.address, timeout=5) for _ in range(2)]
    time.sleep(0.2)
    s, status = tunnel(st.gw, f"allowed.test:{p}")
    assert status.startswith("HTTP/1.1 503")
    for h in held:
        h.close()
    time.sleep(0.3)
    s, status = tunnel(st.gw, f"allowed.test:{p}")           # control: a slot is free again
    assert status.startswith("HTTP/1.1 200")


def test_stalled_clients_time_out(make_stack, https_origin, tls_files):
    p = https_origin.port
    st = make_stack([f"allowed.test:{p}", f"127.0.0.1:{p}"], limits=Limits(handshake_timeout=0.5, idle_timeout=1.0))
    silent = socket.create_connection(st.gw.address, timeout=5)
    slow = socket.create_connection(st.gw.address, timeout=5)
    after_connect, status = tunnel(st.gw, f"allowed.test:{p}")
    assert status.startswith("HTTP/1.1 200")
    t0 = time.monotonic()
    # a slow loris: a byte every 0.1 s, for as long as the gateway lets it (never a whole head)
    while time.monotonic() - t0 < 3:
        try:
            slow.send(b"X")
        except OSError:
            break
        if select.select([slow], [], [], 0.1)[0]:
            break
    slow_lasted = time.monotonic() - t0
    assert slow_lasted < 1.5, slow_lasted                    # one deadline for the whole head
    for s in (silent, slow, after_connect):
        assert closed_within(s, 2)
    assert time.monotonic() - t0 < 3
    # the gateway still serves while and after stalled clients sat on it
    s, _ = tunnel(st.gw, f"allowed.test:{p}")
    assert tls_get(s, "allowed.test", tls_files[0]).startswith("sni=allowed.test")
    ev = st.wait_connects(4)
    assert sum("timeout" in e.get("reason", "") for e in ev) == 3


def test_stop_closes_everything(make_stack, https_origin, tls_files):
    p = https_origin.port
    st = make_stack([f"allowed.test:{p}", f"127.0.0.1:{p}"])
    idle = socket.create_connection(st.gw.address, timeout=5)
    s, _ = tunnel(st.gw, f"allowed.test:{p}")
    ctx = ssl.create_default_context(cafile=str(tls_files[0]))
    t = ctx.wrap_socket(s, server_hostname="allowed.test")   # an open, idle TLS tunnel
    time.sleep(0.1)
    t0 = time.monotonic()
    st.gw.stop()
    assert time.monotonic() - t0 < 3
    assert closed_within(idle, 2) and closed_within(t, 2)
    assert st.gw.active() == 0
    with pytest.raises(OSError):
        socket.create_connection(st.gw.address, timeout=1)


def _has_ipv6_loopback():
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _has_ipv6_loopback(), reason="no ::1 here")
def test_ipv6_listener_and_literal(upstream, dialled, tls_files, https_origin):
    from confine.gateway import Gateway, Pins, Resolver, Rules
    p = https_origin.port
    rules = Rules.parse([f"[::ffff:127.0.0.1]:{p}"])
    gw = Gateway(rules, Resolver([("127.0.0.1", upstream.port)], rules, Pins()), host="::1").start()
    try:
        s, status = tunnel(gw, f"[::ffff:127.0.0.1]:{p}")    # v4-mapped literal: the v4 address
        assert status.startswith("HTTP/1.1 200")
        ctx = ssl.create_default_context(cafile=str(tls_files[0]))
        ctx.check_hostname = False
        with ctx.wrap_socket(s, server_hostname=None) as t:
            t.sendall(b"GET /v6 HTTP/1.1\r\nHost: x\r\n\r\n")
            assert b"path=/v6" in t.recv(4096)
        assert dialled == ["127.0.0.1"]
    finally:
        gw.stop()


def test_redirect_port_serves_only_announced_connections(make_stack, https_origin, tls_files):
    p = https_origin.port
    st = make_stack([f"allowed.test:{p}"], allowed_ips=["127.0.0.1"])
    st.resolver.resolve("allowed.test")
    # what the supervisor will do: bind the agent's socket, announce it, connect it to the gateway
    c = socket.socket()
    c.bind(("127.0.0.1", 0))
    assert st.gw.expect(c.getsockname(), "127.0.0.1", p, pid=77)
    c.connect(("127.0.0.1", st.gw.redirect_port))
    assert tls_get(c, "allowed.test", tls_files[0]).startswith("sni=allowed.test")
    # a connection nobody announced (or announced once and already used) is refused
    stray = socket.create_connection(("127.0.0.1", st.gw.redirect_port), timeout=5)
    assert closed_within(stray, 2)
    ev = st.wait_connects(2)
    ok = one(ev, decision="allow")
    assert ok["pid"] == 77 and ok["mode"] == "transparent"
    assert "did not redirect" in one(ev, decision="deny")["reason"]
    assert https_origin.accepted == 1


def test_bulk_both_ways_intact(make_stack):
    """Past SPLICE_AFTER bytes a direction moves by splice(2): the bytes must stay intact."""
    import hashlib
    import os as _os
    blob = _os.urandom(5 * 1024 * 1024 + 17)
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]
    got_up = []

    def serve():
        c, _ = srv.accept()
        c.settimeout(10)
        data = b""
        while len(data) < len(blob):
            d = c.recv(1 << 20)
            if not d:
                break
            data += d
        got_up.append(hashlib.sha256(data).hexdigest())
        c.sendall(blob)
        c.close()
    threading.Thread(target=serve, daemon=True).start()
    st = make_stack([f"127.0.0.1:{port}"])
    c = redirected(st, "127.0.0.1", port)
    sender = threading.Thread(target=c.sendall, args=(blob,), daemon=True)
    sender.start()
    down = b""
    c.settimeout(10)
    while True:
        d = c.recv(1 << 20)
        if not d:
            break
        down += d
    sender.join(5)
    assert got_up == [hashlib.sha256(blob).hexdigest()]
    assert hashlib.sha256(down).hexdigest() == hashlib.sha256(blob).hexdigest()
    ev = st.wait_connects(1)[0]
    assert ev["bytes_up"] == len(blob) and ev["bytes_down"] == len(blob) and ev["rule"] == f"allow 127.0.0.1:{port}"
    srv.close()


def test_unresolvable_and_upstream_down_are_502(make_stack, https_origin, dialled):
    p = https_origin.port
    st = make_stack([f"gone.test:{p}", f"allowed.test:{p}"])
    s, status = tunnel(st.gw, f"gone.test:{p}")             # NXDOMAIN upstream
    assert status.startswith("HTTP/1.1 502"), status
    st.resolver.upstreams = [("127.0.0.1", 9)]              # nothing answers there
    st.resolver.timeout = 0.3
    s, status = tunnel(st.gw, f"allowed.test:{p}")
    assert status.startswith("HTTP/1.1 502"), status
    ev = st.wait_connects(2)
    assert "has no address" in one(ev, host="gone.test")["reason"]
    assert "could not be resolved" in one(ev, host="allowed.test")["reason"]
    assert dialled == []


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl not installed")
def test_curl_plain_http_and_refusal_body(make_stack, http_origin):
    p = http_origin.port
    st = make_stack([f"allowed.test:{p}", f"127.0.0.1:{p}"])
    base = ["curl", "-sS", "--max-time", "10", "--proxy", f"http://127.0.0.1:{st.gw.port}"]
    r = subprocess.run(base + [f"http://allowed.test:{p}/c"], capture_output=True, text=True, env=CLEAN_ENV,
                       timeout=20)
    assert r.returncode == 0 and r.stdout == f"sni=None host=allowed.test:{p} path=/c", r.stderr
    r = subprocess.run(base + ["-i", f"http://other.test:{p}/c"], capture_output=True, text=True, env=CLEAN_ENV,
                       timeout=20)
    assert r.stdout.startswith("HTTP/1.1 403") and f"confine: other.test:{p} refused" in r.stdout
    assert len(http_origin.requests) == 1


# --- a service on the host's loopback (localhost:P) --------------------------------------------
def test_localhost_entry_by_proxy_and_redirect_never_asks_upstream(make_stack, http_origin,
                                                                   upstream):
    p = http_origin.port
    st = make_stack([f"localhost:{p}"])
    proxy = f"http://127.0.0.1:{st.gw.port}"
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": proxy}))
    with opener.open(f"http://localhost:{p}/svc", timeout=10) as resp:
        assert resp.read().decode() == f"sni=None host=localhost:{p} path=/svc"
    # the redirected connect to ::1 (the origin listens on 127.0.0.1 only) is dialled
    # at the entry's other loopback address
    c = redirected(st, "::1", p)
    c.sendall(f"GET /six HTTP/1.0\r\nHost: localhost:{p}\r\n\r\n".encode())
    got = b""
    while chunk := c.recv(4096):
        got += chunk
    assert b"path=/six" in got, got
    assert "localhost" not in upstream.names()
    # the neighbouring port and another loopback address are not the entry's
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": proxy}))
    for url in (f"http://localhost:{p + 1}/", f"http://127.0.0.2:{p}/"):
        with pytest.raises(urllib.error.HTTPError) as e:
            opener.open(url, timeout=10)
        assert e.value.code == 403, url
