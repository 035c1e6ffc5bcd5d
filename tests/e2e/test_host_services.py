"""A service on the host's loopback reached by name (issue 23 item 2): real confined
processes, started as root (--user) and as the unprivileged test account.

The agent has a network namespace of its own, so its 127.0.0.1 is not the host's:
`--allow-host localhost:P` must reach exactly port P of the host's loopback
(through confine's gateway, which dials from the host's namespace) and nothing
else. The servers run in this test process, on the host's loopback only; nothing
leaves the machine.
"""
from __future__ import annotations

import http.server
import json
import os
import shutil
import socket
import textwrap
import threading
from collections.abc import Iterator

import pytest
from conftest import PY, write_owned

BODY = b"host-service-ok"


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        self.send_response(200)
        self.send_header("Content-Length", str(len(BODY)))
        self.end_headers()
        self.wfile.write(BODY)

    def log_message(self, *a: object) -> None:
        pass


class _V6Server(http.server.ThreadingHTTPServer):
    address_family = socket.AF_INET6


def _serve(host: str, port: int) -> http.server.ThreadingHTTPServer:
    cls = _V6Server if ":" in host else http.server.ThreadingHTTPServer
    srv = cls((host, port), _Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def _two_ports(host: str = "127.0.0.1") -> tuple[int, int]:
    """P and P+1, both free on `host` now."""
    for _ in range(50):
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
            s.bind((host, 0))
            p = s.getsockname()[1]
        if p >= 65535:
            continue
        try:
            with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
                s.bind((host, p + 1))
        except OSError:
            continue
        return p, p + 1
    raise RuntimeError("no two free neighbouring ports")


@pytest.fixture
def servers() -> Iterator[tuple[int, int]]:
    p, q = _two_ports()
    a, b = _serve("127.0.0.1", p), _serve("127.0.0.1", q)
    yield p, q
    for s in (a, b):
        s.shutdown()
        s.server_close()


# Inside: a raw socket connect (what a program that ignores the proxy variables
# does) to each (address, port), one HTTP GET; the outcome per target.
CONNECTS = textwrap.dedent("""
    import json, socket, sys
    out = {}
    for target in sys.argv[1:]:
        host, port = target.rsplit(":", 1)
        host = host.strip("[]")
        fam = socket.AF_INET6 if ":" in host else socket.AF_INET
        s = socket.socket(fam, socket.SOCK_STREAM)
        s.settimeout(10)
        try:
            s.connect((host, int(port)))
            s.sendall(b"GET / HTTP/1.0\\r\\nHost: x\\r\\n\\r\\n")
            data = b""
            while True:
                got = s.recv(4096)
                if not got:
                    break
                data += got
            out[target] = "ok" if b"host-service-ok" in data else "bytes:" + repr(data[:80])
        except OSError as e:
            out[target] = type(e).__name__ + ":" + str(e.errno)
        finally:
            s.close()
    print(json.dumps(out))
""")


def _connects(sb, targets: list[str], *opts: str) -> tuple[dict[str, str], str]:
    p = sb.run([PY, "-c", CONNECTS, *targets], *opts, timeout=90)
    lines = [x for x in p.stdout.splitlines() if x.startswith("{")]
    assert lines, (p.returncode, p.stdout, p.stderr)
    return json.loads(lines[-1]), p.stderr


def _curl(sb, url: str, *opts: str):
    return sb.run(["curl", "-sS", "--max-time", "10", url], *opts, timeout=90)


def test_allow_host_localhost_reaches_that_port_of_the_host_only(sandbox, servers):
    p, q = servers
    here, next_door = f"127.0.0.1:{p}", f"127.0.0.1:{q}"
    # control: both ports answer outside, as the same identity
    out = sandbox.outside([PY, "-c", CONNECTS, here, next_door])
    assert json.loads(out.stdout) == {here: "ok", next_door: "ok"}, out.stderr

    flag = ("--allow-host", f"localhost:{p}")
    r = _curl(sandbox, f"http://localhost:{p}/", *flag)
    assert r.returncode == 0 and r.stdout == BODY.decode(), (r.stdout, r.stderr)
    got, err = _connects(sandbox, [here, f"[::1]:{p}", next_door], *flag)
    assert got[here] == "ok", (got, err)
    # localhost:P is [::1]:P too: the host's service listens on 127.0.0.1 only,
    # and the gateway tries the other loopback address of the same entry
    assert got[f"[::1]:{p}"] == "ok", (got, err)
    assert got[next_door] != "ok", (got, err)
    assert f"--allow-host localhost:{q}" in err and "confine:" in err, err
    assert "any host" not in err, err

    # the control inside: without the flag, P itself is refused, and the line says
    # how to reach it
    got, err = _connects(sandbox, [here])
    assert got[here] != "ok", (got, err)
    assert f"--allow-host localhost:{p}" in err, err


def test_allow_host_by_address(sandbox, servers):
    p, q = servers
    got, err = _connects(sandbox, [f"127.0.0.1:{p}", f"127.0.0.1:{q}"],
                         "--allow-host", f"127.0.0.1:{p}")
    assert got == {f"127.0.0.1:{p}": "ok", f"127.0.0.1:{q}": got[f"127.0.0.1:{q}"]}, got
    assert got[f"127.0.0.1:{q}"] != "ok", (got, err)


def test_network_allow_localhost_in_a_profile(sandbox, servers):
    p, q = servers
    prof = write_owned(os.path.join(sandbox.workdir, "svc.yaml"),
                       f"extends: default\nnetwork:\n  allow: ['localhost:{p}']\n", sandbox.pw)
    got, err = _connects(sandbox, [f"127.0.0.1:{p}", f"127.0.0.1:{q}"], "-p", prof)
    assert got[f"127.0.0.1:{p}"] == "ok" and got[f"127.0.0.1:{q}"] != "ok", (got, err)
    assert f"--allow-host localhost:{q}" in err, err


def test_allow_host_ipv6_loopback(sandbox):
    try:
        p, q = _two_ports("::1")
        a, b = _serve("::1", p), _serve("::1", q)
    except OSError as e:
        pytest.skip(f"SKIPPED LOUDLY: this host has no IPv6 loopback ({e})")
    try:
        here, next_door = f"[::1]:{p}", f"[::1]:{q}"
        out = sandbox.outside([PY, "-c", CONNECTS, here, next_door])
        assert json.loads(out.stdout) == {here: "ok", next_door: "ok"}, out.stderr
        got, err = _connects(sandbox, [here, next_door], "--allow-host", here)
        assert got[here] == "ok" and got[next_door] != "ok", (got, err)
        got, err = _connects(sandbox, [here])
        assert got[here] != "ok", (got, err)
    finally:
        for s in (a, b):
            s.shutdown()
            s.server_close()


@pytest.mark.parametrize("entry", ["localhost", "127.0.0.1", "localhost:*", "127.0.0.0/8:80"])
def test_a_loopback_entry_needs_one_port(sandbox, entry):
    r = sandbox.run(["true"], "--allow-host", entry)
    assert r.returncode == 125, (r.returncode, r.stderr)
    assert f"--allow-host {entry}" in r.stderr and "loopback" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


pytestmark = pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl")
