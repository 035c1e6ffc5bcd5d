"""Mediated socket calls where pidfd_getfd is refused (issue 12; mediation/sockfd.py).

Every confine run here starts under the Docker-like parent filter of
tests/conditions/launcher.py (namespaces and pidfd_getfd refused), as root and
as the unprivileged account. The supervisor cannot take the agent's socket, so
the judged call is performed on a new socket of the same kind made by the
broker, which then replaces the agent's descriptor (SECCOMP_ADDFD_FLAG_SETFD).
Each allowed call is a real round trip with a server; each refusal has that
control beside it, and a listener outside that must see nothing.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading

import pytest
from conftest import PREFIX, PY, last_json, probe_code
from test_egress import net  # noqa: F401 - the gateway's network namespaces and servers

pytestmark = pytest.mark.e2e

HERE = os.path.dirname(os.path.abspath(__file__))
LAUNCHER = os.path.join(os.path.dirname(HERE), "conditions", "launcher.py")
VENV_PY = os.path.join(PREFIX, "bin", "python")


@pytest.fixture
def docker(sandbox):
    """The sandbox, with confine started under the Docker-like filter."""
    sandbox.wrap = [VENV_PY, LAUNCHER, "--no-userns", "--"]
    sandbox.layers = "landlock"
    return sandbox


class Server:
    """A unix server owned by the test (outside any sandbox): a stream one
    echoes what each client sends; a datagram one keeps what arrives."""

    def __init__(self, path: str, kind: int = socket.SOCK_STREAM):
        self.path = path
        self.kind = kind
        self.got: list[bytes] = []
        self.hits = 0
        self.stop = False
        self.sock = socket.socket(socket.AF_UNIX, kind)
        self.sock.bind(path)
        os.chmod(path, 0o777)
        if kind == socket.SOCK_STREAM:
            self.sock.listen(64)
        self.sock.settimeout(0.2)
        self.t = threading.Thread(target=self._serve, daemon=True)
        self.t.start()

    def _serve(self) -> None:
        while not self.stop:
            try:
                if self.kind == socket.SOCK_STREAM:
                    c, _ = self.sock.accept()
                    self.hits += 1
                    c.settimeout(2)
                    try:
                        data = c.recv(100)
                        if data:
                            c.sendall(b"echo:" + data)
                    except OSError:
                        pass
                    c.close()
                else:
                    self.got.append(self.sock.recv(1000))
                    self.hits += 1
            except OSError:
                continue

    def close(self) -> None:
        self.stop = True
        self.t.join(2)
        self.sock.close()


@pytest.fixture
def outside():
    """A directory outside the workdir that anyone may reach by permissions."""
    d = tempfile.mkdtemp(prefix="confine-sockets-", dir="/tmp")
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def servers(docker, outside):
    made = {"in": Server(os.path.join(docker.workdir, "srv.sock")),
            "out": Server(os.path.join(outside, "srv.sock")),
            "din": Server(os.path.join(docker.workdir, "dgram.sock"), socket.SOCK_DGRAM),
            "dout": Server(os.path.join(outside, "dgram.sock"), socket.SOCK_DGRAM)}
    yield made
    for s in made.values():
        s.close()


def _params(servers) -> dict:
    return {k: s.path for k, s in servers.items()}


def _run(sb, body: str, params: dict, *opts: str):
    p, r = sb.probe(body, params, *opts)
    assert r is not None, (p.returncode, p.stdout[-2000:], p.stderr[-3000:])
    assert "the broker is gone" not in p.stderr, p.stderr
    return p, r


CONNECT_BODY = r'''
import asyncio, fcntl
def round_trip(path, inherit=False, nonblock=False):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    fd = s.fileno()
    if inherit:
        os.set_inheritable(fd, True)
    try:
        s.connect(path)
        s.sendall(b"ping")
        got = s.recv(100).decode()
        return [got, s.fileno() == fd, os.get_inheritable(fd),
                s.getsockopt(socket.SOL_SOCKET, socket.SO_TYPE)]
    finally:
        s.close()
async def aio(path):
    r, w = await asyncio.open_unix_connection(path)
    nb = bool(fcntl.fcntl(w.get_extra_info("socket").fileno(), fcntl.F_GETFL) & os.O_NONBLOCK)
    w.write(b"async")
    await w.drain()
    got = (await r.read(100)).decode()
    w.close()
    return [got, nb]
attempt("workdir", lambda: round_trip(P["in"]))
attempt("workdir, inheritable", lambda: round_trip(P["in"], inherit=True))
attempt("workdir, relative", lambda: round_trip("srv.sock"))
attempt("workdir, asyncio (non-blocking)", lambda: asyncio.run(aio(P["in"])))
attempt("outside", lambda: round_trip(P["out"]))
attempt("outside, asyncio", lambda: asyncio.run(aio(P["out"])))
'''


def test_unix_stream_connect(docker, servers):
    """A connect to a server in the workdir works (an echo round trip; the
    descriptor keeps its number, FD_CLOEXEC or not, and O_NONBLOCK for asyncio);
    one to a server outside is refused and that server sees nothing. Control:
    outside the sandbox the same program reaches both."""
    p, out = docker.outside_probe(CONNECT_BODY, _params(servers))
    assert out["outside"] == ["echo:ping", True, False, 1], out
    hits = servers["out"].hits
    p, r = _run(docker, CONNECT_BODY, _params(servers))
    assert r["workdir"] == ["echo:ping", True, False, 1], (r, p.stderr)
    assert r["workdir, inheritable"] == ["echo:ping", True, True, 1], r
    assert r["workdir, relative"] == ["echo:ping", True, False, 1], r
    assert r["workdir, asyncio (non-blocking)"] == ["echo:async", True], r
    assert r["outside"] == "EACCES" and r["outside, asyncio"] == "EACCES", r
    assert servers["out"].hits == hits, "a connection from inside reached the outside server"
    assert "pidfd_getfd" not in p.stderr, p.stderr


DGRAM_BODY = r'''
def send(path, data):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        return s.sendto(data, path)
    finally:
        s.close()
def sendmsg(path, data):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        return s.sendmsg([data], [], 0, path)
    finally:
        s.close()
def twice(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        s.connect(path)
        return [s.send(b"first"), s.sendmsg([b"second"])]
    finally:
        s.close()
attempt("sendto workdir", lambda: send(P["din"], b"to-workdir"))
attempt("sendmsg workdir", lambda: sendmsg(P["din"], b"msg-workdir"))
attempt("connected, send and sendmsg", lambda: twice(P["din"]))
attempt("sendto outside", lambda: send(P["dout"], b"to-outside"))
attempt("sendmsg outside", lambda: sendmsg(P["dout"], b"msg-outside"))
'''


def test_unix_dgram_sendto(docker, servers):
    """sendto/sendmsg with an address to a datagram server in the workdir
    arrives; a connected datagram socket (made by confine) keeps sending,
    sendmsg included; to one outside: refused, nothing arrives. Control:
    outside, both arrive."""
    p, out = docker.outside_probe(DGRAM_BODY, _params(servers))
    assert out["sendto outside"] == len(b"to-outside"), out
    for _ in range(50):       # the control's datagrams, before counting the run's
        if len(servers["din"].got) >= 4 and len(servers["dout"].got) >= 2:
            break
        threading.Event().wait(0.1)
    assert len(servers["dout"].got) == 2, servers["dout"].got
    servers["din"].got.clear()
    servers["dout"].got.clear()
    p, r = _run(docker, DGRAM_BODY, _params(servers))
    assert r["sendto workdir"] == len(b"to-workdir"), (r, p.stderr)
    assert r["sendmsg workdir"] == len(b"msg-workdir"), r
    assert r["connected, send and sendmsg"] == [5, 6], (r, p.stderr)
    assert r["sendto outside"] == "EACCES" and r["sendmsg outside"] == "EACCES", r
    for _ in range(20):
        if len(servers["din"].got) >= 4:
            break
        threading.Event().wait(0.1)
    assert sorted(servers["din"].got) == sorted([b"to-workdir", b"msg-workdir", b"first",
                                                 b"second"]), servers["din"].got
    assert servers["dout"].got == [], "a datagram from inside reached the outside server"


LISTEN_BODY = r'''
def serve(path):
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    fd = srv.fileno()
    srv.bind(path)
    srv.listen(4)
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    c.connect(path)
    a, _ = srv.accept()
    c.sendall(b"hello")
    got = a.recv(100).decode()
    uid = struct.unpack("iII", c.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[1]
    same = srv.fileno() == fd and srv.getsockname() == path
    c.close(); a.close(); srv.close()
    return [got, uid == os.getuid(), same]
def abstract():
    name = b"\0confine-sockets-%d" % os.getpid()
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(name)
    srv.listen(1)
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    c.connect(name)
    a, _ = srv.accept()
    c.sendall(b"abstract")
    got = a.recv(100).decode()
    c.close(); a.close(); srv.close()
    return got
def listen_for_outside(path):
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(4)
    os.chmod(path, 0o777)
    print(json.dumps({"ready": True}), flush=True)
    srv.settimeout(20)
    a, _ = srv.accept()
    return a.recv(100).decode()
attempt("listen in workdir", lambda: serve(os.path.join(os.getcwd(), "mine.sock")))
attempt("listen, relative name", lambda: serve("rel.sock"))
attempt("listen, abstract name", abstract)
if P.get("wait"):
    attempt("outside client", lambda: listen_for_outside("served.sock"))
'''


def test_listen_unix_in_workdir(docker):
    """bind() and listen() on a unix socket in the workdir work (bind is mediated
    here: the broker binds a new socket, kept for the listen): a client
    connects, data flows, the listener carries the agent's credentials
    (SO_PEERCRED) and the very name it was bound to (relative too); an
    abstract name works the same; a client outside the sandbox reaches a
    listener in the workdir."""
    p, r = _run(docker, LISTEN_BODY, {})
    assert r["listen in workdir"] == ["hello", True, True], (r, p.stderr)
    assert r["listen, relative name"] == ["hello", True, True], (r, p.stderr)
    assert r["listen, abstract name"] == "abstract", (r, p.stderr)
    proc = docker.popen([PY, "-c", probe_code(LISTEN_BODY, {"wait": True})],
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = ""
        while proc.stdout is not None:
            line = proc.stdout.readline()
            if not line or line.startswith('{"ready"'):
                break
        assert line.startswith('{"ready"'), proc.stderr.read() if proc.stderr else ""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as c:
            c.settimeout(5)
            c.connect(os.path.join(docker.workdir, "served.sock"))
            c.sendall(b"from-outside")
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
        proc.wait()
    assert last_json(out)["outside client"] == "from-outside", err


ABSTRACT_BODY = r'''
def conn(name):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(name)
    finally:
        s.close()
def dgram(name):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        s.sendto(b"x", name)
    finally:
        s.close()
attempt("abstract connect", lambda: conn(b"\0" + P["name"].encode()))
attempt("abstract sendto", lambda: dgram(b"\0" + P["name"].encode() + b"-dgram"))
'''


def test_host_abstract_socket_refused(docker):
    """An abstract socket of the host (outside the sandbox) stays unreachable:
    the new socket is the broker's, in the agent's Landlock domain, so the
    abstract-socket scope refuses it. Control: outside, both reach it."""
    name = "confine-sockets-host-%d" % os.getpid()
    ab = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    ab.bind(b"\0" + name.encode())
    ab.listen(8)
    abd = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    abd.bind(b"\0" + name.encode() + b"-dgram")
    try:
        p, out = docker.outside_probe(ABSTRACT_BODY, {"name": name})
        assert out["abstract connect"] == "ok" and out["abstract sendto"] == "ok", out
        ab.accept()[0].close()
        abd.recv(10)
        p, r = _run(docker, ABSTRACT_BODY, {"name": name})
        assert r["abstract connect"] == "EPERM" and r["abstract sendto"] == "EPERM", (r, p.stderr)
        ab.setblocking(False)
        abd.setblocking(False)
        with pytest.raises(BlockingIOError):
            ab.accept()
        with pytest.raises(BlockingIOError):
            abd.recv(10)
    finally:
        ab.close()
        abd.close()


STATE_BODY = r'''
def bound_then_connect(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.bind("client.sock")
        s.connect(path)
        return s.getsockname()
    finally:
        s.close()
def bound_long_ago(path):
    # more sockets bound since than the supervisor keeps (sockfd.KEPT): the
    # first one's bind is no longer its own to carry over
    first = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    first.bind("first.sock")
    later = []
    for i in range(70):
        t = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        t.bind("later-%d.sock" % i)
        later.append(t)
    try:
        first.connect(path)
    finally:
        first.close()
        for t in later:
            t.close()
def connect_twice(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
        s.connect(path)
    finally:
        s.close()
def passing(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        s.sendmsg([b"x"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("i", 0))], 0, path)
    finally:
        s.close()
def fresh(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
    finally:
        s.close()
def pair(msg):
    a, b = socket.socketpair()
    try:
        if msg:
            return a.sendmsg([b"x"])
        a.send(b"y")
        return b.recv(1).decode()
    finally:
        a.close()
        b.close()
attempt("bound, then connect", lambda: bound_then_connect(P["in"]))
attempt("bound long ago, then connect", lambda: bound_long_ago(P["in"]))
attempt("connect twice", lambda: connect_twice(P["in"]))
attempt("sendmsg passing a descriptor", lambda: passing(P["din"]))
attempt("fresh, connect (control)", lambda: fresh(P["in"]))
attempt("socketpair, sendmsg", lambda: pair(True))
attempt("socketpair, send (control)", lambda: pair(False))
'''


def test_state_that_cannot_carry_over_is_refused(docker, servers):
    """A socket bound by a mediated bind() keeps its name through connect(); one
    whose bind the supervisor no longer keeps would lose its name on a new
    socket: refused with a reason (EPERM and a confine: line); connect() on a
    connected stream socket is EISCONN as the kernel says; descriptors passed
    with SCM_RIGHTS cannot be taken, nor a connected socket confine did not
    make (sendmsg on a socketpair): refused with a reason. Control: a fresh
    socket connects, send() on the pair works, and outside all of it works."""
    p, out = docker.outside_probe(STATE_BODY, _params(servers))
    assert out["bound, then connect"] == "client.sock", out
    assert out["bound long ago, then connect"] == "ok", out
    assert out["sendmsg passing a descriptor"] == "ok", out
    assert out["connect twice"] == "EISCONN", out
    assert out["socketpair, sendmsg"] == 1, out
    for f in os.listdir(docker.workdir):
        if f.endswith(".sock") and f not in ("srv.sock", "dgram.sock"):
            os.unlink(os.path.join(docker.workdir, f))
    p, r = _run(docker, STATE_BODY, _params(servers))
    assert r["fresh, connect (control)"] == "ok", (r, p.stderr)
    assert r["bound, then connect"] == "client.sock", (r, p.stderr)
    assert r["bound long ago, then connect"] == "EPERM", (r, p.stderr)
    assert "connect() on a bound unix stream socket refused" in p.stderr, p.stderr
    assert r["connect twice"] == "EISCONN", r
    assert r["sendmsg passing a descriptor"] == "EPERM", r
    assert "SCM_RIGHTS" in p.stderr, p.stderr
    assert r["socketpair, send (control)"] == "y", r
    assert r["socketpair, sendmsg"] == "EPERM", r      # README Limits
    assert "a connection cannot move to a new socket" in p.stderr, p.stderr


RACE_BODY = r'''
import threading, time
stop = False
other = socket.socket(socket.AF_INET, socket.SOCK_STREAM)    # a socket of another kind
bound = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
bound.bind("race-bound.sock")
swaps = [other.fileno(), bound.fileno(), os.open("/dev/null", os.O_RDONLY)]
target = [None]
def swapper():
    i = 0
    while not stop:
        t = target[0]
        if t is not None:
            try:
                os.dup2(swaps[i % 3], t)
            except OSError:
                pass
            i += 1
th = threading.Thread(target=swapper)
th.start()
seen = {}
deadline = time.time() + 3
n = 0
while time.time() < deadline and n < 400:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    target[0] = s.fileno()
    for path in (P["in"], P["out"]):
        try:
            s.connect(path)
            r = "ok:" + ("in" if path == P["in"] else "out")
        except OSError as e:
            r = en(e.errno)
        seen[r] = seen.get(r, 0) + 1
    target[0] = None
    try:
        s.close()
    except OSError:
        pass
    n += 1
binds = {}
for i in range(100):          # the same race on bind() and listen()
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    target[0] = s.fileno()
    try:
        s.bind("race-%d.sock" % i)
        s.listen(1)
        r = "ok"
    except OSError as e:
        r = en(e.errno)
    target[0] = None
    binds[r] = binds.get(r, 0) + 1
    try:
        s.close()
    except OSError:
        pass
stop = True
th.join()
R["seen"] = seen
R["binds"] = binds
R["tries"] = n
def after():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(P["in"]); s.sendall(b"after"); got = s.recv(100).decode(); s.close()
    return got
attempt("after the race", after)
'''


def test_dup2_race_on_the_descriptor(docker, servers):
    """Another thread dup2()s a TCP socket, a bound unix socket and /dev/null
    onto the descriptor while connect() is mediated (bounded: at most 400
    rounds, 3 s): nothing reaches the outside server, the kind learnt is
    never applied to another socket (no "ok:out"), and the supervisor
    survives (a connect afterwards round-trips); the same on bind() and
    listen() (100 rounds) leaves nothing outside the workdir."""
    hits = servers["out"].hits
    p, r = _run(docker, RACE_BODY, _params(servers))
    assert r["tries"] > 0, r
    assert "ok:out" not in r["seen"], r
    assert servers["out"].hits == hits, "a connection reached the outside server during the race"
    assert r["after the race"] == "echo:after", (r, p.stderr)
    assert sum(r["binds"].values()) == 100, r
    assert sorted(os.listdir(os.path.dirname(servers["out"].path))) == ["dgram.sock", "srv.sock"]


TCP_BODY = r'''
def tcp(port, nonblock=False):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        if nonblock:
            s.setblocking(False)
            try:
                s.connect(("127.0.0.1", port))
            except BlockingIOError:
                pass
            import select
            select.select([], [s], [], 5)
            err = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if err:
                return en(err)
            s.setblocking(True)
        else:
            s.settimeout(5)
            s.connect(("127.0.0.1", port))
        s.sendall(b"tcp")
        return s.recv(100).decode()
    finally:
        s.close()
def bound_tcp(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind(("127.0.0.1", P["bindable"]))
        s.connect(("127.0.0.1", port))
        s.sendall(b"bound")
        return [s.recv(100).decode(), s.getsockname()[1] == P["bindable"]]
    finally:
        s.close()
def tcp_server():
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        srv.bind(("127.0.0.1", P["server"]))
        srv.listen(1)
        c = socket.create_connection(("127.0.0.1", P["server"]), timeout=5)
        a, _ = srv.accept()
        c.sendall(b"served")
        got = a.recv(100).decode()
        c.close(); a.close()
        return got
    finally:
        srv.close()
attempt("granted port", lambda: tcp(P["port"]))
attempt("granted port, non-blocking", lambda: tcp(P["port"], True))
attempt("other port", lambda: tcp(P["port2"]))
attempt("bound, then connect", lambda: bound_tcp(P["port"]))
attempt("bind, listen, accept", tcp_server)
def reuse():
    socks = []
    for _ in range(2):         # SO_REUSEPORT before bind: both may bind the port
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        s.bind(("127.0.0.1", P["shared"]))
        socks.append(s)
    s.listen(1)
    got = [t.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT) for t in socks]
    for t in socks:
        t.close()
    return got
attempt("SO_REUSEPORT, then bind twice", reuse)
'''


class TcpEcho:
    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.hits = 0
        self.stop = False
        self.t = threading.Thread(target=self._serve, daemon=True)
        self.t.start()

    def _serve(self) -> None:
        while not self.stop:
            try:
                c, _ = self.sock.accept()
            except OSError:
                continue
            self.hits += 1
            c.settimeout(2)
            try:
                data = c.recv(100)
                if data:
                    c.sendall(b"echo:" + data)
            except OSError:
                pass
            c.close()

    def close(self) -> None:
        self.stop = True
        self.t.join(2)
        self.sock.close()


def test_tcp_loopback_port_profile(docker, tmp_path_factory):
    """A profile granting connect_tcp to one loopback port: TCP to it works
    (blocking and non-blocking, a round trip on the new socket); another port
    stays refused by Landlock (the broker connects in the agent's domain) and
    sees nothing; a socket bound to a granted port keeps it through connect(),
    and a server binds, listens and accepts on another (bind is mediated here).
    Control: outside, both ports answer."""
    a, b = TcpEcho(), TcpEcho()
    ports = []
    for _ in range(6):
        free = socket.socket()
        free.bind(("127.0.0.1", 0))
        ports.append(free.getsockname()[1])
        free.close()
    prof_dir = tempfile.mkdtemp(prefix="confine-prof-", dir="/tmp")
    os.chmod(prof_dir, 0o755)
    prof = os.path.join(prof_dir, "tcp.yaml")
    with open(prof, "w") as f:
        f.write(f"extends: default\nnetwork:\n  connect_tcp: [{a.port}, {ports[1]}]\n"
                f"  bind_tcp: [{ports[0]}, {ports[1]}, {ports[4]}]\n")
    os.chmod(prof, 0o644)
    params = {"port": a.port, "port2": b.port, "bindable": ports[0], "server": ports[1],
              "shared": ports[4]}
    try:
        # the control binds other ports (their TIME_WAIT would hold the ones inside)
        p, out = docker.outside_probe(TCP_BODY, dict(params, bindable=ports[2], server=ports[3],
                                                      shared=ports[5]))
        assert out["SO_REUSEPORT, then bind twice"] == [1, 1], out
        assert out["granted port"] == "echo:tcp" and out["other port"] == "echo:tcp", out
        hits = b.hits
        p, r = _run(docker, TCP_BODY, params, "-p", prof)
        assert r["granted port"] == "echo:tcp", (r, p.stderr)
        assert r["granted port, non-blocking"] == "echo:tcp", (r, p.stderr)
        assert r["other port"] == "EACCES", r
        assert b.hits == hits, "a connection reached the port the profile does not grant"
        assert r["bound, then connect"] == ["echo:bound", True], (r, p.stderr)
        assert r["bind, listen, accept"] == "served", (r, p.stderr)
        # the option set before bind() is on the socket bound (setsockopt is mediated here)
        assert r["SO_REUSEPORT, then bind twice"] == [1, 1], (r, p.stderr)
    finally:
        a.close()
        b.close()
        shutil.rmtree(prof_dir, ignore_errors=True)


def test_dry_run_names_the_mechanism(docker):
    """`--dry-run` under the same filter says how socket calls are mediated
    here, and no longer that they are refused."""
    p = docker.confine("exec", "-w", docker.workdir, "--dry-run", "--json", "--", "true")
    d = json.loads(p.stdout)
    mech = d["mechanisms"]["seccomp_notify"]
    assert "pidfd_getfd refused" in mech and "new socket of the same kind" in mech, mech
    notes = " ".join(d["notes"])
    assert "are refused, since the agent's socket cannot be taken" not in notes, notes
    assert "is performed on a new socket of the same kind" in notes, notes


@pytest.mark.parametrize("mode", ["root", "user"])
def test_egress_through_the_gateway(mode, test_user, confine_bin, net):  # noqa: F811
    """With the egress gateway (tests/e2e/test_egress.py's network namespaces and
    servers): the resolver's connected UDP socket and its sendmmsg reach
    confine's DNS server (the datagram socket made for the agent is kept and
    used again), a direct TLS connect to an allowed name goes through the
    gateway's redirect (the new socket is bound to a loopback port and
    announced), a direct IP is refused by the gateway and UDP elsewhere by the
    supervisor; the upstream sees only the allowed connection. Control: the
    same under pidfd_getfd (no launcher) gives the same answers."""
    import test_egress as eg
    body = eg.py(eg.ATTEMPTS + r'''
run("resolve", lambda: resolve("allowed.test"))
run("direct_tls", lambda: tls("allowed.test"))
run("direct_ip", lambda: plain("1.1.1.1", 8443))
run("udp", lambda: udp("1.1.1.1", 9999))
print(json.dumps(R))
''')
    want = {"resolve": ["1.1.1.1"], "direct_tls": "hello from allowed.test sni=allowed.test",
            "direct_ip": "ECONNREFUSED", "udp": "EACCES"}
    sb = eg.Sandbox(mode, test_user, eg.make_workdir(test_user)).without_namespaces()
    try:
        p = eg.inside(sb, net, body, *eg.ALLOW)
        assert eg.last_json(p.stdout) == want, ("control", p.stderr)
        sb.wrap = [VENV_PY, LAUNCHER, "--no-userns", "--"]
        m = net.mark()
        p = eg.inside(sb, net, body, *eg.ALLOW)
        assert p.stdout.strip(), p.stderr
        assert eg.last_json(p.stdout) == want, p.stderr
        assert "pidfd_getfd" not in p.stderr, p.stderr
        assert {e["dst"] for e in net.since(m) if e["ev"] in ("accept", "udp")} == {"1.1.1.1:443"}
    finally:
        shutil.rmtree(sb.workdir, ignore_errors=True)


BIND_BODY = r'''
def bind_at(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.bind(path)
    finally:
        s.close()
def bind_via_symlink(path):
    os.symlink(os.path.dirname(path), "to-outside")
    bind_at("to-outside/" + os.path.basename(path))
attempt("bind outside the workdir", lambda: bind_at(P["dir"] + "/a.sock"))
attempt("bind outside, through a symlink", lambda: bind_via_symlink(P["dir"] + "/b.sock"))
attempt("bind in the workdir (control)", lambda: bind_at("c.sock"))
'''


def test_bind_is_judged_as_the_agents_own(docker, outside):
    """The broker binds in the agent's Landlock domain: a socket file outside
    the workdir (a directory anyone may write) is refused, directly or
    through a symlink, and nothing is created there; one in the workdir is
    made (control), and outside the sandbox the same binds work."""
    os.chmod(outside, 0o777)
    p, out = docker.outside_probe(BIND_BODY, {"dir": outside})
    assert out["bind outside the workdir"] == "ok", out
    for f in os.listdir(outside):
        os.unlink(os.path.join(outside, f))
    for f in ("to-outside", "c.sock"):
        os.unlink(os.path.join(docker.workdir, f))
    p, r = _run(docker, BIND_BODY, {"dir": outside})
    assert r["bind in the workdir (control)"] == "ok", (r, p.stderr)
    assert r["bind outside the workdir"] == "EACCES", r
    assert r["bind outside, through a symlink"] == "EACCES", r
    assert os.listdir(outside) == [], os.listdir(outside)
