"""What the supervisor learns of a socket without holding it (mediation/sockfd.py),
on this process's own sockets (the agent's are read the same way, by /proc/TID)."""
import errno
import os
import socket

import pytest

from confine.mediation import sockfd
from confine.mediation.wire import Op


def _learn(s) -> sockfd.Kind:
    return sockfd.learn(os.getpid(), s.fileno())


def test_unix_states_and_flags(tmp_path):
    name = b"\0confine-unit-%d" % os.getpid()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as fresh, \
            socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_NONBLOCK) as dg, \
            socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as srv, \
            socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as cli, \
            socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as path:
        os.set_inheritable(fresh.fileno(), True)
        k = _learn(fresh)
        assert (k.family, k.type, k.state, k.cloexec, k.nonblock) == \
            (socket.AF_UNIX, socket.SOCK_STREAM, "fresh", False, False)
        k = _learn(dg)
        assert (k.type, k.state, k.cloexec, k.nonblock) == (socket.SOCK_DGRAM, "fresh", True, True)
        srv.bind(name)
        assert (_learn(srv).state, _learn(srv).name) == ("bound", name)
        srv.listen(1)
        assert _learn(srv).state == "listening"
        cli.connect(name)
        assert _learn(cli).state == "connected"
        path.bind(str(tmp_path / "p.sock"))
        k = _learn(path)
        assert (k.type, k.state) == (socket.SOCK_SEQPACKET, "bound")
        assert sockfd.file_of(os.getpid(), k) == os.fsencode(tmp_path / "p.sock")
        os.rename(tmp_path / "p.sock", tmp_path / "moved.sock")
        assert sockfd.file_of(os.getpid(), k) is None     # the name no longer leads to it


def test_inet_fresh_and_bound_only():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as t, \
            socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as u:
        assert (_learn(t).proto, _learn(t).state) == (socket.IPPROTO_TCP, "fresh")
        assert (_learn(u).family, _learn(u).state) == (socket.AF_INET6, "fresh")
        t.bind(("127.0.0.1", 0))          # bound only: no listen, no connect
        assert _learn(t).state == "bound or connected"
        u.bind(("::1", 0))
        assert _learn(u).state == "bound or connected"


def test_what_cannot_be_learnt_or_made():
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0) as n:
        with pytest.raises(sockfd.Refused) as e:
            _learn(n)
        assert "NETLINK" in e.value.reason and e.value.errno == errno.EPERM
    with open("/dev/null") as f:
        with pytest.raises(OSError) as e2:
            sockfd.learn(os.getpid(), f.fileno())
        assert e2.value.errno == errno.ENOTSOCK
    with pytest.raises(OSError) as e3:
        sockfd.learn(os.getpid(), 100000)
    assert e3.value.errno == errno.EBADF


def test_refusals_by_state():
    k = sockfd.Kind(socket.AF_UNIX, socket.SOCK_STREAM, 0, 1, False, True, "fresh")
    assert sockfd.refusal(k, Op.CONNECT) is None
    assert sockfd.refusal(k, Op.LISTEN) == (errno.EINVAL, "")
    assert sockfd.refusal(k._replace(state="connected"), Op.CONNECT) == (errno.EISCONN, "")
    err, why = sockfd.refusal(k._replace(state="bound"), Op.CONNECT) or (0, "")
    assert err == errno.EPERM and "bound unix stream socket" in why
    assert sockfd.refusal(k._replace(state="bound", name=b"/x"), Op.LISTEN) is None
    d = k._replace(type=socket.SOCK_DGRAM, state="bound", name=b"/x")
    assert sockfd.refusal(d, Op.LISTEN) == (errno.EOPNOTSUPP, "")
    t = sockfd.Kind(socket.AF_INET, socket.SOCK_STREAM, 6, 1, False, True, "bound or connected")
    assert sockfd.refusal(t, Op.LISTEN)[0] == errno.EPERM


def test_new_socket_request_round_trip():
    r = sockfd.NewSocket(7, socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_NONBLOCK, 0, b"/a/b")
    assert sockfd.NewSocket.unpack(r.pack()) == r
