"""Every connection event is complete (issue 14 item 7): time, pid and executable of the process,
host, port, resolved and dialled address, SNI, decision, rule, approver, bytes each way,
duration; the proxy client's pid is found from its socket, "unknown" rather than a guess."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys

import pytest

from confine.gateway.owner import Finder, descendants, exe_of, socket_inode
from confine.gateway.proxy import EVENT_FIELDS

from .test_proxy import CLEAN_ENV, tls_get, tunnel

CLIENT = """
import socket, ssl, sys
gw, name, port, ca = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
s = socket.create_connection(("127.0.0.1", int(gw)), timeout=10)
s.sendall(f"CONNECT {name}:{port} HTTP/1.1\\r\\nHost: {name}:{port}\\r\\n\\r\\n".encode())
buf = b""
while b"\\r\\n\\r\\n" not in buf:
    buf += s.recv(4096)
ctx = ssl.create_default_context(cafile=ca)
t = ctx.wrap_socket(s, server_hostname=name)
t.sendall(f"GET / HTTP/1.1\\r\\nHost: {name}\\r\\n\\r\\n".encode())
print(t.recv(65536).split(b"\\r\\n\\r\\n", 1)[1].decode())
"""


def test_socket_inode_and_owner_of_a_loopback_connection():
    lst = socket.socket()
    lst.bind(("127.0.0.1", 0))
    lst.listen(1)
    c = socket.create_connection(lst.getsockname())
    srv, peer = lst.accept()
    try:
        assert socket_inode(peer, lst.getsockname()) == os.fstat(c.fileno()).st_ino
        assert socket_inode(lst.getsockname(), peer) == os.fstat(srv.fileno()).st_ino
        assert socket_inode(peer, ("127.0.0.1", 1)) is None          # control: another remote end
        # this process holds it: found when it is one of "the run's processes", else unknown
        assert Finder(lambda: [os.getpid()])(peer, lst.getsockname()).pid == os.getpid()
        assert Finder(lambda: [])(peer, lst.getsockname()).pid is None
    finally:
        for s in (c, srv, lst):
            s.close()


def test_socket_inode_ipv6():
    if not socket.has_ipv6:
        pytest.skip("no IPv6")
    lst = socket.socket(socket.AF_INET6)
    try:
        lst.bind(("::1", 0))
    except OSError:
        pytest.skip("no ::1")
    lst.listen(1)
    c = socket.create_connection(("::1", lst.getsockname()[1]))
    srv, peer = lst.accept()
    try:
        assert socket_inode(peer[:2], lst.getsockname()[:2]) == os.fstat(c.fileno()).st_ino
    finally:
        for s in (c, srv, lst):
            s.close()


def test_shared_socket_is_unknown_not_a_guess():
    lst = socket.socket()
    lst.bind(("127.0.0.1", 0))
    lst.listen(1)
    c = socket.create_connection(lst.getsockname())
    srv, peer = lst.accept()
    # a child inherits the socket: two processes hold it
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE,
                             pass_fds=(c.fileno(),))
    try:
        o = Finder(lambda: [os.getpid(), child.pid])(peer, lst.getsockname())
        assert o.pid is None and set(o.owners) == {os.getpid(), child.pid}
    finally:
        child.stdin.close()
        child.wait()
        for s in (c, srv, lst):
            s.close()


def test_descendants_and_exe():
    p = subprocess.Popen(["sleep", "30"])
    try:
        assert p.pid in descendants(os.getpid())
        assert os.getpid() not in descendants(os.getpid())
        assert exe_of(p.pid) == os.path.realpath(shutil.which("sleep"))
    finally:
        p.kill()
        p.wait()


def test_every_event_is_complete_and_the_proxy_client_is_found(make_stack, https_origin, tls_files):
    p = https_origin.port
    st = make_stack([f"allowed.test:{p}"], allowed_ips=["127.0.0.1"])
    r = subprocess.run([sys.executable, "-c", CLIENT, str(st.gw.port), "allowed.test", str(p), str(tls_files[0])],
                       capture_output=True, text=True, env=CLEAN_ENV, timeout=30)
    assert r.returncode == 0, r.stderr
    s, status = tunnel(st.gw, "other.test:443")           # refused, from this process (not a descendant)
    s.close()
    assert status.startswith("HTTP/1.1 403")
    evs = st.wait_connects(2)
    for ev in evs:
        assert set(EVENT_FIELDS) <= set(ev), ev
    allowed = next(e for e in evs if e["decision"] == "allow")
    assert allowed["pid"] != "unknown" and allowed["exe"] == os.path.realpath(sys.executable)
    assert allowed["host"] == "allowed.test" and allowed["sni"] == "allowed.test"
    assert allowed["resolved"] == ["127.0.0.1"] and allowed["dialled"] == f"127.0.0.1:{p}"
    assert allowed["bytes_up"] > 0 and allowed["bytes_down"] > 0 and allowed["approver"] is None
    denied = next(e for e in evs if e["decision"] == "deny")
    assert denied["pid"] == "unknown" and denied["exe"] is None and denied["dialled"] is None


def test_transparent_event_names_the_callers_pid(make_stack, https_origin, tls_files):
    p = https_origin.port
    st = make_stack([f"allowed.test:{p}"], allowed_ips=["127.0.0.1"])
    st.resolver.resolve("allowed.test")
    lst = socket.socket()
    lst.bind(("127.0.0.1", 0))
    lst.listen(1)
    c = socket.create_connection(lst.getsockname(), timeout=5)
    srv, _ = lst.accept()
    lst.close()
    st.gw.handle_redirected(srv, "127.0.0.1", p, pid=os.getpid())
    assert tls_get(c, "allowed.test", tls_files[0]).startswith("sni=allowed.test")
    ev = st.wait_connects(1)[0]
    assert set(EVENT_FIELDS) <= set(ev)
    assert ev["pid"] == os.getpid() and ev["exe"] == os.path.realpath(sys.executable)


def test_socket_inode_without_sock_diag(monkeypatch):
    from confine.gateway import owner

    def no_diag(*a):
        raise OSError(93, "no sock_diag")
    monkeypatch.setattr(owner, "_diag_inode", no_diag)
    lst = socket.socket()
    lst.bind(("127.0.0.1", 0))
    lst.listen(1)
    c = socket.create_connection(lst.getsockname())
    srv, peer = lst.accept()
    try:
        assert socket_inode(peer, lst.getsockname()) == os.fstat(c.fileno()).st_ino   # from /proc/net/tcp
        assert socket_inode(peer, ("127.0.0.1", 1)) is None
    finally:
        for s in (c, srv, lst):
            s.close()


NETNS_CHILD = """
import socket, sys, time
lst = socket.socket(); lst.bind(("127.0.0.1", 0)); lst.listen(1)
c = socket.create_connection(lst.getsockname()); srv, peer = lst.accept()
print(peer[0], peer[1], lst.getsockname()[1], flush=True)
sys.stdin.read()
"""


@pytest.mark.parametrize("how", ["proc", "diag"])
def test_owner_in_another_network_namespace(how):
    """The wiring puts the gateway's listeners in the agent's network namespace: the client's
    socket is not in this thread's tables. Found through the run process's /proc/PID/net, or
    through a sock_diag socket made in that namespace."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) for a network namespace")
    child = subprocess.Popen(["unshare", "-n", "sh", "-c", 'ip link set lo up 2>/dev/null; exec "$0" -c "$1"',
                              sys.executable, NETNS_CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        host, cport, lport = child.stdout.readline().split()
        client, server = (host, int(cport)), ("127.0.0.1", int(lport))
        py = next(p for p in descendants(child.pid) + [child.pid] if "python" in (exe_of(p) or ""))
        assert Finder(lambda: [])(client, server).pid is None               # control: not ours, no run pid
        if how == "proc":
            o = Finder(lambda: [py])(client, server)
        else:
            if shutil.which("nsenter") is None:
                pytest.skip("no nsenter(1)")
            r, w = socket.socketpair()
            helper = subprocess.Popen(["nsenter", f"--net=/proc/{py}/ns/net", sys.executable, "-c",
                                       "import socket, sys\n"
                                       "s = socket.socket(socket.AF_UNIX, fileno=int(sys.argv[1]))\n"
                                       "n = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 4)\n"
                                       "socket.send_fds(s, [b'x'], [n.fileno()])\n", str(w.fileno())],
                                      pass_fds=(w.fileno(),), stdin=subprocess.DEVNULL)
            _, fds, _, _ = socket.recv_fds(r, 1, 1)
            helper.wait(timeout=10)
            r.close()
            w.close()
            diag = socket.socket(fileno=fds[0])
            # control: a sock_diag socket of this namespace does not find it (and no /proc table)
            own = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 4)
            assert Finder(lambda: [py], net="/nonexistent", diag=own)(client, server).pid is None
            own.close()
            o = Finder(lambda: [py], net="/nonexistent", diag=diag)(client, server)
            diag.close()
        assert o.pid == py and "python" in (o.exe or ""), o
    finally:
        child.stdin.close()
        child.wait(timeout=10)
