"""The broker protocol and the supervisor's report sink, without a sandbox."""
import errno
import os
import socket

from confine.kernel.seccomp import FILE_CALLS, OPEN_CALLS, SOCKET_CALLS, syscall_number
from confine.mediation import Mediator, supervisor, wire
from confine.mediation.wire import FileRequest, Op, Reply, SocketRequest


def test_every_op_is_a_socket_or_a_file_op():
    assert (wire.SOCKET_OPS | wire.FILE_OPS | wire.META_OPS | wire.CONFIG_OPS
            | {Op.WRITABLE, Op.LISTENER}) == set(Op)
    assert not wire.SOCKET_OPS & wire.FILE_OPS
    assert not (wire.SOCKET_OPS | wire.FILE_OPS) & wire.META_OPS


def test_meta_requests_round_trip():
    m = wire.MetaRequest(4, Op.SETXATTR, 0x100, 0, b"a/b", 1, 0xFFFFFFFF, 7, b"user.x",
                         b"\0bin\0ary", 3, 9)
    assert wire.MetaRequest.unpack(m.pack()) == m
    w = wire.WritableRequest(0, 3, 2)
    assert wire.WritableRequest.unpack(w.pack()) == w
    assert wire.request_head(w.pack()) == (0, Op.WRITABLE)


def test_requests_and_replies_round_trip():
    s = SocketRequest(7, Op.SENDMSG, 0x40, True, b"", b"data", 2)
    assert SocketRequest.unpack(s.pack()) == s
    assert wire.request_head(s.pack()) == (7, Op.SENDMSG)
    f = FileRequest(9, Op.RENAME, 1, 0o644, -1, 0o022, 5, 6, (0, -1), (b"a", b"/b"), b"")
    g = FileRequest.unpack(f.pack())
    assert g._replace(arg=0) == f._replace(arg=0) and g.arg == 2**64 - 1
    rid, rep = wire.decode_reply(Reply(-1, 13, "x" * 5000).encode(3))
    assert rid == 3 and rep == Reply(-1, 13, "x" * wire.REASON_CAP)
    assert wire.decode_reply(b"short") is None


def test_direct_answers_round_trip():
    # the notification id and the answer bits reach the broker
    f = FileRequest(9, Op.OPEN, 0, 0o644, 0, 0o022, 5, 6, (0, -1), (b"a", b""), b"",
                    2**64 - 2, wire.ANSWER | wire.ANSWER_CLOEXEC)
    assert FileRequest.unpack(f.pack()) == f
    assert wire.request_head(wire.ListenerRequest(0).pack()) == (0, Op.LISTENER)


def test_rights_control_parses_back_and_other_messages_are_refused():
    buf, n = wire.rights_control([3, 4, 5])
    assert wire.parse_rights(buf.raw[:n]) == [3, 4, 5]
    assert wire.rights_control([]) == (None, 0)
    creds = wire.CMSG_HDR.pack(wire.CMSG_HDR.size + 12, socket.SOL_SOCKET,
                               socket.SCM_CREDENTIALS) + bytes(12)
    assert wire.parse_rights(creds) is None


def _mediator(**kw):
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    b.close()
    return Mediator(-1, a, ["/"], os.getuid(), **kw)


def test_every_mediated_syscall_has_a_handler():
    m = _mediator(files=True)
    names = tuple(SOCKET_CALLS) + tuple(OPEN_CALLS) + FILE_CALLS
    want = {syscall_number(n) for n in names if syscall_number(n) is not None}
    # bind is notified only where pidfd_getfd is refused (mediation/sockfd.py)
    bind = {syscall_number("bind"), syscall_number("setsockopt")}
    # execve/execveat are notified only under approvals.exec (Plan.exec_notify)
    bind |= {syscall_number("execve"), syscall_number("execveat")}
    assert set(m.handlers) == want | bind
    assert set(_mediator().handlers) == {syscall_number(n) for n in SOCKET_CALLS} | bind


def test_denials_reach_the_callers_sink_at_most_once_each_and_capped():
    seen = []
    m = _mediator(warn=seen.append)
    for i in range(supervisor.MAX_REPORTED + 50):
        m._report(f"thing {i}")
        m._report(f"thing {i}")
    assert len(seen) == supervisor.MAX_REPORTED + 1
    assert seen[0] == "denied: thing 0" and "no more are shown" in seen[-1]


def test_socket_and_roots_requests_round_trip():
    s = SocketRequest(3, Op.CONNECT, 0, True, b"\x01\x00/x.sock", b"", 0, 17, 18)
    assert SocketRequest.unpack(s.pack()) == s
    listen = SocketRequest(4, Op.LISTEN, 511, False, b"", b"", 0)
    assert SocketRequest.unpack(listen.pack()) == listen
    direct = s._replace(nid=2**64 - 5, answer=wire.ANSWER)
    assert SocketRequest.unpack(direct.pack()) == direct
    r = wire.RootsRequest(0, (b"", b"docker.sock", b""))
    assert wire.RootsRequest.unpack(r.pack()) == r
    assert wire.request_head(r.pack()) == (0, Op.ROOTS)
    assert wire.RootsRequest.unpack(wire.RootsRequest(0, ()).pack()).names == ()


def test_the_denial_set_stays_bounded():
    """Issue 10 item 11: distinct denials past the cap are counted, not kept."""
    seen = []
    m = _mediator(warn=seen.append)
    for i in range(20000):
        m._report(f"connect to unix socket /x/{i:08d}" + "y" * 100)
    assert len(m.denied) == supervisor.MAX_REPORTED
    assert m.unshown == 20000 - supervisor.MAX_REPORTED
    assert len(seen) == supervisor.MAX_REPORTED + 1


def test_asks_and_verdict_round_trip():
    a = wire.AsksRequest(0, wire.ASK_UNIX | wire.ASK_WRITE)
    assert wire.request_head(a.pack()) == (0, Op.ASKS)
    assert wire.AsksRequest.unpack(a.pack()) == a
    v = wire.VerdictRequest(0, 41, False, "denied by tty (é)")
    assert wire.request_head(v.pack())[1] == Op.VERDICT
    assert wire.VerdictRequest.unpack(v.pack()) == v
    long = wire.VerdictRequest(0, 1, True, "x" * 10000)
    assert len(wire.VerdictRequest.unpack(long.pack()).reason) == wire.REASON_CAP


def test_forwarded_notifications_round_trip_and_are_told_from_replies():
    """A notification the broker hands on (wire.Forwarded) is never taken for a
    reply to a request (its id is FORWARDED), keeps its arguments, and a
    datagram too short to hold one is dropped rather than misread."""
    args = (1, 2 ** 64 - 1, 0, 7, 8, 9)
    f = wire.Forwarded(2 ** 63 + 5, 257, args)
    data = f.pack()
    assert wire.decode_reply(data)[0] == wire.FORWARDED
    assert wire.Forwarded.unpack(data) == f
    said = wire.Forwarded(3, 83, args, Reply(3, 0, "held .envrc: naïve \udcff"), True)
    assert wire.Forwarded.unpack(said.pack()) == said
    assert wire.Forwarded.unpack(data[:-1]) is None
    assert len(said.pack()) <= wire.REPLY_MAX
    assert wire.ListenerRequest.unpack(wire.ListenerRequest(0, True).pack()).receive is True
    assert wire.ListenerRequest.unpack(wire.ListenerRequest(0).pack()).receive is False


def test_the_in_flight_record_names_what_the_broker_holds():
    """inflight.py: a held id is named until dropped, and the ids just above
    the newest one received (a call received but not yet written down) too;
    each with the errno its call gets (a unix connect ECONNREFUSED, as the
    supervisor's own requests give, anything else the broker writes EIO)."""
    import errno

    from confine.mediation import inflight
    fd = inflight.create()
    try:
        broker, supervisor_side = inflight.Table(fd), inflight.Table(fd)
    finally:
        os.close(fd)
    assert supervisor_side.held() == {}
    c = broker.hold(7)
    a = broker.hold(100)
    b = broker.hold(2 ** 64 - 1)
    broker.lose_as(a, errno.ECONNREFUSED)
    broker.lose_as(c, errno.EPERM)          # not the broker's to choose: EIO
    held = supervisor_side.held()
    assert {100, 2 ** 64 - 1, 0, 5} <= held.keys() and 99 not in held
    assert held[100] == errno.ECONNREFUSED and held[2 ** 64 - 1] == held[7] == errno.EIO
    broker.drop(a)
    broker.drop(b)
    assert 100 not in supervisor_side.held() and 2 ** 64 - 1 in supervisor_side.held()
    a = broker.hold(100)                    # a slot used again starts at EIO
    assert supervisor_side.held()[100] == errno.EIO


def test_a_forwarded_call_is_judged_for_the_thread_its_pidfd_names():
    """A broker that lies about a forwarded call: the supervisor takes the
    thread from the pidfd alone (the message carries no pid), answers EIO for
    a thread that is gone without judging anything, and drops a datagram that
    is not a Forwarded (no id to answer)."""
    from confine.kernel import notify
    m = _mediator(files=True)
    answered, handled = [], []
    m._respond = lambda nid, val=0, error=0: answered.append((nid, error))
    m._handle = lambda n: handled.append((n.id, n.pid, n.data.nr, list(n.data.args)))
    f = wire.Forwarded(77, 42, (1, 2, 3, 4, 5, 6))
    m._forwarded(f.pack()[:-3], [])
    assert answered == handled == []
    me = notify.pidfd_open(os.getpid())
    try:
        m._forwarded(f.pack(), [me])
    finally:
        os.close(me)
    assert handled == [(77, os.getpid(), 42, [1, 2, 3, 4, 5, 6])] and answered == []
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    gone = notify.pidfd_open(pid)
    os.waitpid(pid, 0)
    try:
        m._forwarded(f.pack(), [gone])
    finally:
        os.close(gone)
    assert answered == [(77, errno.EIO)] and len(handled) == 1
