"""Mediated socket calls where the host refuses pidfd_getfd (issue 12).

Docker's default seccomp profile refuses pidfd_getfd to a process without
CAP_SYS_PTRACE, and a socket cannot be opened through /proc/PID/fd, so the
supervisor cannot take the agent's socket to perform a call on it. Instead:

* the supervisor learns the socket's kind without it (`learn`): the inode from
  /proc/TID/fd/N (pinned O_PATH, so the number cannot be reused meanwhile),
  family, type and protocol from the socket's `system.sockprotoname`, its
  state from sock_diag (unix_diag by inode; inet_diag dumps, which list bound,
  listening and connected sockets, bound-only TCP ones too), O_NONBLOCK and
  FD_CLOEXEC from /proc/TID/fdinfo/N;
* only a socket whose every state the call makes can be carried over is
  replaced: fresh (unbound, unconnected) for connect and sendto/sendmsg with an
  address, bound and idle for a unix listen. Anything else is refused with a
  reason, never silently changed;
* the broker, in the agent's Landlock domain, makes a NEW socket of that kind
  (NewSocket: its creator's credentials and domain are the agent's, which
  abstract-socket scoping and SO_PEERCRED read), the judged call is performed
  on it exactly as on a taken socket (supervisor.py), and the supervisor
  installs it in the agent's descriptor with SECCOMP_IOCTL_NOTIF_ADDFD and
  SECCOMP_ADDFD_FLAG_SETFD, FD_CLOEXEC as it was, before the answer. Not with
  SECCOMP_ADDFD_FLAG_SEND: that answers with the descriptor's number, and a
  connect or send returns 0 or a byte count;
* before installing, the notification must still be valid and the agent's
  descriptor must still be the inode the kind was learnt from. Another
  thread swapping the descriptor after that check loses only its own
  descriptor (it is replaced by a socket already judged);
* bind() is notified there too, and setsockopt() of the options a bind
  reads (kernel.seccomp NOFD_SOCKOPTS): the broker binds a new socket (the
  agent's address; a relative name from its cwd), which replaces the agent's;
* the sockets so made that later calls must find again are kept (Made, at
  most KEPT, the oldest let go): datagram sockets (the resolver's sendmmsg on
  the socket it connected, a send on a connected datagram socket) and bound
  ones until their listen or connect, which are then performed on that very
  socket, as with pidfd_getfd.

What does not carry over (docs/limits.md): socket options set before the
call (but those three), and a dup() of the descriptor made before it (it
keeps the old socket); a connected socket confine did not make cannot be
sent on with sendmsg (a connection cannot move), nor can descriptors be
passed (SCM_RIGHTS) without pidfd_getfd to take them.
"""
from __future__ import annotations

import ctypes
import errno
import os
import socket
import stat
import struct
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Callable

from confine.kernel import notify
from confine.kernel.libc import check, libc

from ..record import NamedTuple
from .wire import Op, Reply, SocketRequest

if TYPE_CHECKING:
    from .supervisor import Mediator, _SocketCall

SECCOMP_ADDFD_FLAG_SETFD = 1
NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
NLMSG_ERROR, NLMSG_DONE = 2, 3
UDIAG_SHOW_NAME, UDIAG_SHOW_VFS, UDIAG_SHOW_PEER = 0x1, 0x2, 0x4
UNIX_DIAG_NAME, UNIX_DIAG_VFS, UNIX_DIAG_PEER = 0, 1, 2
TCP_ESTABLISHED, TCP_CLOSE, TCP_LISTEN = 1, 7, 10
O_PATH_FLAG = 0o10000000
KEPT = 64                 # datagram sockets kept for later calls on them

_NLMSG = struct.Struct("<IHHII")
_UNIX_REQ = struct.Struct("<BBHIIIII")
_UNIX_MSG = struct.Struct("<BBBBIII")
_INET_REQ = struct.Struct("<BBBBI48s")
_INET_INODE = 4 + 48 + 16           # inet_diag_msg: idiag_inode's offset
_NEWSOCK = struct.Struct("<QBiiiII")  # id, op, family, type (with SOCK_NONBLOCK), proto, flags,
                                      # namelen
EXISTING, CWD, UNLINK = 1, 2, 4       # NewSocket.flags

# system.sockprotoname -> (family, type, protocol); anything else cannot be made again
_PROTOS: dict[bytes, tuple[int, int, int]] = {
    b"UNIX-STREAM": (socket.AF_UNIX, socket.SOCK_STREAM, 0),
    b"UNIX": (socket.AF_UNIX, 0, 0),          # datagram or seqpacket: unix_diag says
    b"TCP": (socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP),
    b"TCPv6": (socket.AF_INET6, socket.SOCK_STREAM, socket.IPPROTO_TCP),
    b"UDP": (socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_UDP),
    b"UDPv6": (socket.AF_INET6, socket.SOCK_DGRAM, socket.IPPROTO_UDP),
}

WHY = "this host refuses pidfd_getfd, so the call is performed on a new socket of the same kind"


class Refused(OSError):
    """The call cannot be carried over to a new socket: refused, with a reason."""

    def __init__(self, reason: str, err: int = errno.EPERM) -> None:
        super().__init__(err, reason)
        self.reason = reason


class Kind(NamedTuple):
    """What the supervisor learnt of the agent's socket, without it."""
    family: int
    type: int
    proto: int
    ino: int
    nonblock: bool
    cloexec: bool
    state: str          # "fresh", "bound", "connected", "listening", "bound or connected" (inet)
    name: bytes = b""   # a unix socket's bound address (sun_path; abstract: leading NUL)
    vfs: tuple[int, int, int] | None = None   # its socket file: inode, major, minor

    def shown(self) -> str:
        fam = {socket.AF_UNIX: "unix", socket.AF_INET: "IPv4", socket.AF_INET6: "IPv6"}
        typ = {socket.SOCK_STREAM: "stream", socket.SOCK_DGRAM: "datagram",
               socket.SOCK_SEQPACKET: "seqpacket"}
        return f"{fam.get(self.family, self.family)} {typ.get(self.type, self.type)} socket"


class Replace(Exception):
    """Raised by the supervisor's _take_socket: no socket to take; this kind
    can be made again."""

    def __init__(self, kind: Kind) -> None:
        super().__init__(kind)
        self.kind = kind


# -- learning the kind (supervisor)

def socket_ino(tid: int, fd: int) -> int | None:
    """The socket inode the agent's descriptor refers to now, or None."""
    try:
        link = os.readlink(f"/proc/{tid}/fd/{fd}")
    except OSError:
        return None
    if not (link.startswith("socket:[") and link.endswith("]")):
        return None
    try:
        return int(link[8:-1])
    except ValueError:
        return None


def learn(tid: int, fd: int) -> Kind:
    """The kind and state of the agent's socket `fd`; OSError EBADF/ENOTSOCK as
    the kernel would answer, Refused where it cannot be learnt."""
    if fd < 0:
        raise OSError(errno.EBADF, "bad descriptor")
    try:
        pin = os.open(f"/proc/{tid}/fd/{fd}", os.O_PATH | os.O_CLOEXEC)
    except FileNotFoundError:
        raise OSError(errno.EBADF, "bad descriptor") from None
    try:
        st = os.fstat(pin)
        if not stat.S_ISSOCK(st.st_mode):
            raise OSError(errno.ENOTSOCK, "not a socket")
        ino = st.st_ino
        flags = _fdinfo_flags(tid, fd, ino)
        if flags is None:
            raise OSError(errno.EBADF, "the descriptor changed")
        if flags & O_PATH_FLAG:
            raise OSError(errno.EBADF, "an O_PATH descriptor")
        try:
            proto = os.getxattr(f"/proc/self/fd/{pin}", "system.sockprotoname").rstrip(b"\0")
        except OSError:
            raise Refused(f"the kind of the agent's socket cannot be learnt ({WHY})") from None
        kind = _PROTOS.get(proto)
        if kind is None:
            raise Refused(f"a {proto.decode(errors='replace')} socket cannot be made again "
                          f"({WHY}; only unix, TCP and UDP sockets can)")
        if not _same_netns(tid):
            raise Refused(f"the agent has a network namespace of its own ({WHY}, "
                          "and confine can make sockets only in its own)")
        family, typ, pr = kind
        nonblock, cloexec = bool(flags & os.O_NONBLOCK), bool(flags & os.O_CLOEXEC)
        if family == socket.AF_UNIX:
            typ, state, name, vfs = _unix_state(ino)
            out = Kind(family, typ, pr, ino, nonblock, cloexec, state, name, vfs)
        else:
            state = "bound or connected" if _inet_listed(family, pr, ino) else "fresh"
            out = Kind(family, typ, pr, ino, nonblock, cloexec, state)
        # the state was read after the pin: still the same socket?
        if socket_ino(tid, fd) != ino:
            raise OSError(errno.EBADF, "the descriptor changed")
        return out
    finally:
        os.close(pin)


def _fdinfo_flags(tid: int, fd: int, ino: int) -> int | None:
    """The descriptor's open flags (O_NONBLOCK, O_CLOEXEC), if it is still `ino`."""
    flags = None
    seen = None
    try:
        with open(f"/proc/{tid}/fdinfo/{fd}") as f:
            for line in f:
                if line.startswith("flags:"):
                    flags = int(line.split()[1], 8)
                elif line.startswith("ino:"):
                    seen = int(line.split()[1])
    except (OSError, ValueError):
        return None
    return flags if seen == ino else None


def _same_netns(tid: int) -> bool:
    try:
        a, b = os.stat(f"/proc/{tid}/ns/net"), os.stat("/proc/self/ns/net")
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _diag(req: bytes, dump: bool) -> list[bytes]:
    """sock_diag's answers (each a message body) to one request, in this
    process's network namespace (the agent's: checked by the caller)."""
    s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, NETLINK_SOCK_DIAG)
    out: list[bytes] = []
    try:
        s.settimeout(5)
        flags = NLM_F_REQUEST | (NLM_F_DUMP if dump else 0)
        s.send(_NLMSG.pack(_NLMSG.size + len(req), SOCK_DIAG_BY_FAMILY, flags, 1, 0) + req)
        while True:
            data = s.recv(1 << 16)
            if not data:
                return out
            off = 0
            while off + _NLMSG.size <= len(data):
                ln, typ, _, _, _ = _NLMSG.unpack_from(data, off)
                if ln < _NLMSG.size:
                    return out
                body = data[off + _NLMSG.size:off + ln]
                if typ == NLMSG_DONE:
                    return out
                if typ == NLMSG_ERROR:
                    err = -struct.unpack_from("<i", body)[0] if len(body) >= 4 else errno.EIO
                    if err:
                        raise OSError(err, "sock_diag")
                    return out
                out.append(body)
                if not dump:
                    return out
                off += (ln + 3) & ~3
    finally:
        s.close()


def _unix_state(ino: int) -> tuple[int, str, bytes, tuple[int, int, int] | None]:
    """(type, state, bound address, its file) of a unix socket, by inode (unix_diag)."""
    req = _UNIX_REQ.pack(socket.AF_UNIX, 0, 0, 0xFFFFFFFF, ino,
                         UDIAG_SHOW_NAME | UDIAG_SHOW_VFS | UDIAG_SHOW_PEER, 0xFFFFFFFF, 0xFFFFFFFF)
    try:
        got = _diag(req, dump=False)
    except OSError:
        got = []
    if len(got) != 1 or len(got[0]) < _UNIX_MSG.size:
        raise Refused(f"the state of the agent's unix socket cannot be learnt ({WHY})")
    _, typ, st, _, seen, _, _ = _UNIX_MSG.unpack_from(got[0])
    if seen != ino:
        raise Refused(f"the state of the agent's unix socket cannot be learnt ({WHY})")
    name, peer, vfs = b"", False, None
    off = _UNIX_MSG.size
    body = got[0]
    while off + 4 <= len(body):
        ln, at = struct.unpack_from("<HH", body, off)
        if ln < 4:
            break
        if at == UNIX_DIAG_NAME:
            name = body[off + 4:off + ln]
        elif at == UNIX_DIAG_PEER:
            peer = True
        elif at == UNIX_DIAG_VFS and ln >= 12:
            vino, vdev = struct.unpack_from("<II", body, off + 4)
            vfs = (vino, vdev >> 20, vdev & 0xFFFFF)      # the kernel's dev_t
        off += (ln + 3) & ~3
    if st == TCP_LISTEN:
        state = "listening"
    elif peer or st == TCP_ESTABLISHED:
        state = "connected"
    elif name:
        state = "bound"
    elif st == TCP_CLOSE:
        state = "fresh"
    else:
        state = "bound or connected"
    return typ, state, name, vfs


def file_of(tid: int, kind: Kind) -> bytes | None:
    """The absolute name of a unix socket's file, if the name it was bound to
    (relative names: from the agent's cwd now) still leads to that very file
    (UNIX_DIAG_VFS); None if it does not (renamed, or a cwd changed since)."""
    name = kind.name.split(b"\0", 1)[0]
    if kind.vfs is None or not name:
        return None
    if not name.startswith(b"/"):
        try:
            name = os.path.join(os.fsencode(os.readlink(f"/proc/{tid}/cwd")), name)
        except OSError:
            return None
    try:
        st = os.stat(name)
    except OSError:
        return None
    if (st.st_ino, os.major(st.st_dev), os.minor(st.st_dev)) != kind.vfs:
        return None
    return name


def _inet_listed(family: int, proto: int, ino: int) -> bool:
    """The socket is in one of the kernel's tables (bound, listening, connected,
    or bound only: TCP_BOUND_INACTIVE since Linux 6.10); a fresh one is in none."""
    req = _INET_REQ.pack(family, proto, 0, 0, 0xFFFFFFFF, b"\0" * 40 + b"\xff" * 8)
    try:
        got = _diag(req, dump=True)
    except OSError:
        raise Refused(f"the state of the agent's socket cannot be learnt ({WHY})") from None
    return any(len(m) >= _INET_INODE + 4 and struct.unpack_from("<I", m, _INET_INODE)[0] == ino
               for m in got)


def refusal(kind: Kind, op: Op, listen_ok: bool = False) -> tuple[int, str] | None:
    """(errno, reason) when `op` cannot be carried over to a new socket of
    this kind; None when it can (a fresh socket; a bound idle unix one for
    listen)."""
    what = {Op.CONNECT: "connect", Op.SENDTO: "sendto", Op.SENDMSG: "sendmsg",
            Op.LISTEN: "listen"}.get(op, "call")
    if op == Op.LISTEN:
        if kind.family != socket.AF_UNIX:
            if kind.state == "fresh":
                return None      # the caller refuses it: an ephemeral port
            return errno.EPERM, (f"listen() on a bound TCP socket refused ({WHY}, and its "
                                 "bound port cannot be carried over)")
        if kind.state == "fresh":
            return errno.EINVAL, ""          # as the kernel: no listen on an unbound socket
        if kind.state == "bound" and kind.type != socket.SOCK_DGRAM:
            return None
        if kind.type == socket.SOCK_DGRAM:
            return errno.EOPNOTSUPP, ""
        return errno.EPERM, f"listen() on a {kind.state} {kind.shown()} refused ({WHY})"
    if kind.state == "fresh":
        return None
    if op == Op.CONNECT and kind.type == socket.SOCK_STREAM and kind.state == "connected":
        return errno.EISCONN, ""
    if op == Op.CONNECT and kind.state == "listening":
        return errno.EINVAL, ""
    if op != Op.CONNECT and kind.state == "connected":
        return errno.EPERM, (f"{what}() on a connected {kind.shown()} refused "
                             f"({WHY.split(',')[0]}, and a connection cannot move to a new "
                             "socket; send() and write() are not mediated)")
    return errno.EPERM, (f"{what}() on a {kind.state} {kind.shown()} refused ({WHY}; "
                         "only a fresh socket, neither bound nor connected, can be)")


# -- the sockets made (supervisor)

class Made:
    """The sockets installed in the agent that later calls must find again, by
    inode: datagram sockets (a send or connect on one is performed on it) and
    sockets a mediated bind() made (kept until the listen or connect that
    follows). Bounded (KEPT); the oldest is let go."""

    def __init__(self) -> None:
        self.fds: OrderedDict[int, tuple[int, bool]] = OrderedDict()   # ino -> (fd, stream)

    def keep(self, ino: int, fd: int, stream: bool) -> None:
        old = self.fds.pop(ino, None)
        if old is not None:
            os.close(old[0])
        self.fds[ino] = (os.dup(fd), stream)
        while len(self.fds) > KEPT:
            os.close(self.fds.popitem(last=False)[1][0])

    def take(self, tid: int, fd: int, keep: bool = False) -> int | None:
        """A descriptor of the agent's socket `fd` if it is one kept here (the
        inode cannot have been reused: it is held open), else None. A stream
        socket is let go unless `keep`: the call now made on it connects or
        listens."""
        ino = socket_ino(tid, fd)
        got = self.fds.get(ino) if ino is not None else None
        if got is None or ino is None:
            return None
        if got[1] and not keep:
            del self.fds[ino]
            return got[0]
        self.fds.move_to_end(ino)
        return os.dup(got[0])


def addfd_setfd(notify_fd: int, nid: int, srcfd: int, newfd: int, cloexec: bool) -> None:
    """Install srcfd in the notifying task as descriptor `newfd` (closing what
    was there), without answering the notification."""
    a = notify.NotifAddfd(id=nid, flags=SECCOMP_ADDFD_FLAG_SETFD, srcfd=srcfd, newfd=newfd,
                          newfd_flags=os.O_CLOEXEC if cloexec else 0)
    check(libc.ioctl(notify_fd, notify.IOCTL_ADDFD, ctypes.byref(a)), "SECCOMP_IOCTL_NOTIF_ADDFD")


# -- the request (supervisor -> broker) and the broker's side

class NewSocket(NamedTuple):
    """Make a socket of this kind (EXISTING: bind the one sent along instead)
    and bind it to `name` (a raw sockaddr; CWD: a relative unix name is the
    agent's, from the cwd sent along; UNLINK: first remove the socket file at
    that name, the old socket's, for listen)."""
    rid: int
    family: int
    type: int
    proto: int
    name: bytes = b""
    flags: int = 0

    def pack(self) -> bytes:
        return _NEWSOCK.pack(self.rid, Op.NEWSOCK, self.family, self.type, self.proto,
                             self.flags, len(self.name)) + self.name

    @classmethod
    def unpack(cls, body: bytes) -> "NewSocket":
        rid, _, fam, typ, proto, flags, n = _NEWSOCK.unpack_from(body)
        return cls(rid, fam, typ, proto, body[_NEWSOCK.size:_NEWSOCK.size + n], flags)

    @classmethod
    def of(cls, rid: int, kind: Kind, name: bytes = b"", flags: int = 0) -> "NewSocket":
        return cls(rid, kind.family, kind.type | (socket.SOCK_NONBLOCK if kind.nonblock else 0),
                   kind.proto, name, flags)


def unix_addr(path: bytes) -> bytes:
    return struct.pack("<H", socket.AF_UNIX) + path


_cwd_lock = threading.Lock()


def _bind(fd: int, raw: bytes, cwd: int) -> int:
    """bind(2) with the agent's very address; a relative unix name from the
    agent's cwd (the broker's own calls all go by descriptor, so borrowing its
    cwd for this call disturbs none of them). 0 or an errno."""
    buf = ctypes.create_string_buffer(raw, len(raw))
    with _cwd_lock:
        old = -1
        try:
            if cwd >= 0:
                old = os.open(".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
                os.fchdir(cwd)
            ctypes.set_errno(0)
            ret = libc.bind(fd, buf, len(raw))
            return ctypes.get_errno() or errno.EIO if ret < 0 else 0
        except OSError as e:
            return e.errno or errno.EIO
        finally:
            if old >= 0:
                os.fchdir(old)
                os.close(old)


def make(req: NewSocket, fds: list[int]) -> Reply:
    """The broker's side: in the agent's Landlock domain (a bind is judged
    there as the agent's own would be). The reply carries the new socket."""
    i = 0
    if req.flags & EXISTING:
        if not fds:
            return Reply(-1, errno.EBADF)
        sfd, i = fds[0], 1
    elif req.family not in (socket.AF_UNIX, socket.AF_INET, socket.AF_INET6):
        return Reply(-1, errno.EAFNOSUPPORT)
    else:
        try:
            sfd = socket.socket(req.family, req.type | socket.SOCK_CLOEXEC, req.proto).detach()
        except OSError as e:
            return Reply(-1, e.errno or errno.EIO)
    cwd = fds[i] if req.flags & CWD and len(fds) > i else -1
    err = 0
    if req.name:
        if req.flags & UNLINK:
            path = req.name[2:].split(b"\0", 1)[0]
            try:
                if stat.S_ISSOCK(os.lstat(path).st_mode):
                    os.unlink(path)
            except OSError:
                pass           # the bind says what is wrong
        err = _bind(sfd, req.name, cwd)
    if req.flags & EXISTING:
        return Reply(-1, err) if err else Reply(0)
    if err:
        os.close(sfd)
        return Reply(-1, err)
    return Reply(0, fd=sfd)


# -- the calls (supervisor): performed on a new socket, which then replaces the agent's

def _answer(m: Mediator, nid: int, err: int, reason: str) -> None:
    if reason:
        m._report(reason)
    m._respond(nid, error=err)


def refuse_passing(report: Callable[[str], None]) -> OSError:
    reason = (f"sendmsg() passing descriptors (SCM_RIGHTS) refused: {WHY.split(',')[0]}, "
              "so the descriptors passed cannot be taken")
    report(reason)
    return Refused(reason)


def refuse_mmsg(m: Mediator, nid: int, kind: Kind) -> None:
    """sendmmsg on a socket not made here: its messages have no address, so a
    fresh socket has no destination (as the kernel says); any other cannot be
    carried over."""
    if kind.state == "fresh":
        return m._respond(nid, error=errno.EDESTADDRREQ)
    _answer(m, nid, errno.EPERM, f"sendmmsg() on a {kind.state} {kind.shown()} not connected "
            f"through confine refused ({WHY.split(',')[0]}; use sendmsg)")


def perform(m: Mediator, n: notify.Notif, call: _SocketCall, kind: Kind) -> None:
    """connect, or sendto/sendmsg with an address: the broker makes a socket of
    this kind; the call is decided and performed on it as on the agent's own
    (Mediator._socket_call); if it succeeds (or a non-blocking connect is under
    way) it replaces the agent's socket."""
    nid = n.id
    if call.passed:
        refuse_passing(m._report)
        return m._respond(nid, error=errno.EPERM)
    got = refusal(kind, call.op)
    if got is not None:
        return _answer(m, nid, *got)
    if not notify.id_valid(m.fd, nid):
        return
    m._send(nid, lambda rid: NewSocket.of(rid, kind).pack(), [], False, errno.ECONNREFUSED,
            then=lambda rep, fds: _made(m, n, call, kind, rep, fds))


def _still(m: Mediator, n: notify.Notif, fd: int, kind: Kind) -> bool:
    """The notification still waits and the agent's descriptor is still the
    socket the kind was learnt from; answered (EBADF) if it is not."""
    if not notify.id_valid(m.fd, n.id):
        return False
    if socket_ino(n.pid, fd) != kind.ino:
        m._respond(n.id, error=errno.EBADF)
        return False
    return True


def _first(m: Mediator, n: notify.Notif, rep: Any, fds: list[int]) -> int | None:
    """The socket the broker made (a descriptor of the supervisor's own), or
    None when it could not (answered)."""
    if rep.ret < 0 or not fds:
        m._respond(n.id, error=rep.err or errno.EIO)
        return None
    return os.dup(fds[0])


def _made(m: Mediator, n: notify.Notif, call: _SocketCall, kind: Kind, rep: Any,
          fds: list[int]) -> None:
    s = _first(m, n, rep, fds)
    if s is None:
        return
    fd = call.fd & 0xFFFFFFFF
    try:
        if not _still(m, n, fd, kind):
            return
        keep = os.dup(s)
        try:
            sent = m._socket_call(n, call, s, [], then=lambda r, _: _install(m, n, fd, call.op,
                                                                            kind, keep, r))
        except BaseException:
            os.close(keep)
            raise
        if not sent:
            os.close(keep)
    finally:
        os.close(s)


def _install(m: Mediator, n: notify.Notif, fd: int, op: Op, kind: Kind, new: int,
             rep: Any, keep: bool = False) -> None:
    """The broker's answer on the new socket: on success it replaces the
    agent's descriptor (FD_CLOEXEC as it was), then the call is answered."""
    try:
        if rep.ret < 0 and not (op == Op.CONNECT and rep.err == errno.EINPROGRESS):
            return m._respond(n.id, error=rep.err or errno.EIO)
        if not _still(m, n, fd, kind):
            return
        try:
            addfd_setfd(m.fd, n.id, new, fd, kind.cloexec)
        except OSError as e:
            if e.errno != errno.ENOENT:          # ENOENT: the call was interrupted
                m._respond(n.id, error=e.errno or errno.EIO)
            return
        if keep or kind.type == socket.SOCK_DGRAM:
            m.made.keep(os.fstat(new).st_ino, new, kind.type != socket.SOCK_DGRAM)
        if rep.ret < 0:
            m._respond(n.id, error=rep.err)
        else:
            m._respond(n.id, val=rep.ret)
    finally:
        os.close(new)


def listen(m: Mediator, n: notify.Notif, kind: Kind, backlog: int) -> None:
    """listen(): a fresh TCP socket is refused as with pidfd_getfd (it would
    bind an ephemeral port without Landlock); a unix socket bound to a
    pathname gets a new socket bound there, which the broker listens on: the
    broker removes the old socket's file and binds the new one at that name
    (in the agent's Landlock domain), then the new one replaces the old. An
    abstract name cannot move: it is the old socket's until the agent's
    thread returns from this very call (the kernel drops the replaced file
    then), so that listen() is refused."""
    nid = n.id
    got = refusal(kind, Op.LISTEN)
    if got is not None:
        return _answer(m, nid, *got)
    if kind.family != socket.AF_UNIX:
        return m._deny(nid, "listen() on a TCP socket with no port bound "
                            "(would bind an ephemeral port without Landlock)")
    if kind.name.startswith(b"\0"):
        return _answer(m, nid, errno.EPERM, f"listen() on an abstract unix socket refused ({WHY}, "
                       "and its name stays the old socket's until the call returns); use a "
                       "socket file in the workdir")
    path = file_of(n.pid, kind)
    if path is None:
        return _answer(m, nid, errno.EPERM, f"listen() on a unix socket whose file is no longer "
                       f"at the name it was bound to refused ({WHY})")
    if not notify.id_valid(m.fd, nid):
        return
    m._send(nid, lambda rid: NewSocket.of(rid, kind, unix_addr(path), UNLINK).pack(), [], False,
            errno.EACCES,
            then=lambda rep, fds: _listen_made(m, n, kind, backlog, rep, fds))


def _listen_made(m: Mediator, n: notify.Notif, kind: Kind, backlog: int, rep: Any,
                 fds: list[int]) -> None:
    s = _first(m, n, rep, fds)
    if s is None:
        return
    fd = int(n.data.args[0]) & 0xFFFFFFFF
    try:
        if not _still(m, n, fd, kind):
            return
        keep = os.dup(s)
        if not m._send(n.id, lambda rid: SocketRequest(rid, Op.LISTEN, min(backlog, 0x7FFFFFFF),
                                                       False, b"", b"", 0).pack(),
                       [s], False, errno.EACCES,
                       then=lambda r, _: _install(m, n, fd, Op.LISTEN, kind, keep, r)):
            os.close(keep)
    finally:
        os.close(s)


def bind(m: Mediator, n: notify.Notif, raw: bytes, kind: Kind | None, sock: int | None) -> None:
    """bind(), notified only where pidfd_getfd is refused: so that what a bind
    gives (a name, a port) can carry over to the listen or connect after it,
    the broker binds a new socket (a fresh one of `kind`), which replaces the
    agent's and is kept (Made), or `sock`, a socket kept here already."""
    nid = n.id
    fds: list[int] = []
    flags = 0
    if len(raw) < 2:
        return m._respond(nid, error=errno.EINVAL)      # as the kernel: no family
    if sock is not None:
        fds.append(sock)
        flags |= EXISTING
    elif kind is not None and kind.state != "fresh":
        if kind.state == "connected":
            return _answer(m, nid, errno.EPERM, f"bind() on a connected {kind.shown()} refused "
                           f"({WHY.split(',')[0]}, and a connection cannot move to a new socket)")
        return m._respond(nid, error=errno.EINVAL)        # as the kernel: bound already
    if len(raw) > 2 and struct.unpack_from("<H", raw)[0] == socket.AF_UNIX \
            and raw[2] not in (0, ord("/")):
        try:
            fds.append(os.open(f"/proc/{n.pid}/cwd", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC))
        except OSError:
            return m._respond(nid, error=errno.ENOENT)
        flags |= CWD
    try:
        if not notify.id_valid(m.fd, nid):
            return
        if kind is None:
            m._send(nid, lambda rid: NewSocket(rid, 0, 0, 0, raw, flags).pack(), fds, False,
                    errno.EACCES)
            return
        k = kind
        m._send(nid, lambda rid: NewSocket.of(rid, k, raw, flags).pack(), fds, False,
                errno.EACCES, then=lambda rep, got: _bound(m, n, k, rep, got))
    finally:
        for f in fds[1 if sock is not None else 0:]:
            os.close(f)


def _bound(m: Mediator, n: notify.Notif, kind: Kind, rep: Any, fds: list[int]) -> None:
    s = _first(m, n, rep, fds)
    if s is None:
        return
    _install(m, n, int(n.data.args[0]) & 0xFFFFFFFF, Op.NEWSOCK, kind, s, rep, keep=True)


def setsockopt(m: Mediator, n: notify.Notif, level: int, opt: int, value: bytes,
               kind: Kind | None, sock: int | None) -> None:
    """SO_REUSEADDR, SO_REUSEPORT, IPV6_V6ONLY: set here on `sock` (a socket
    kept here, the agent's own), or on a new socket of `kind` (a fresh one),
    which replaces the agent's and is kept for the bind() that reads it. No
    judgement: the supervisor may set these on the agent's behalf."""
    nid = n.id
    if sock is not None:
        s = socket.socket(fileno=os.dup(sock))
        try:
            s.setsockopt(level, opt, value)
        except OSError as e:
            return m._respond(nid, error=e.errno or errno.EINVAL)
        finally:
            s.close()
        return m._respond(nid)
    if kind is None:
        return m._respond(nid, error=errno.EBADF)
    if kind.state != "fresh":
        return _answer(m, nid, errno.EPERM, f"setsockopt() on a {kind.state} {kind.shown()} "
                       f"refused ({WHY.split(',')[0]}, and only a fresh socket can be made again)")
    if not notify.id_valid(m.fd, nid):
        return
    k = kind
    m._send(nid, lambda rid: NewSocket.of(rid, k).pack(), [], False, errno.EACCES,
            then=lambda rep, got: _optioned(m, n, k, level, opt, value, rep, got))


def _optioned(m: Mediator, n: notify.Notif, kind: Kind, level: int, opt: int, value: bytes,
              rep: Any, fds: list[int]) -> None:
    s = _first(m, n, rep, fds)
    if s is None:
        return
    try:
        t = socket.socket(fileno=os.dup(s))
        try:
            t.setsockopt(level, opt, value)
        finally:
            t.close()
    except OSError as e:
        os.close(s)
        return m._respond(n.id, error=e.errno or errno.EINVAL)
    _install(m, n, int(n.data.args[0]) & 0xFFFFFFFF, Op.NEWSOCK, kind, s, rep, keep=True)
