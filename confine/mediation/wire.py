"""The protocol between the supervisor and the broker, and nothing else.

One request per datagram on a SOCK_SEQPACKET pair: a fixed header, then
names and data; the descriptors the call acts on travel with it as
SCM_RIGHTS. One reply per request, in any order (a call that blocks holds up
only its own reply), matched by request id; a file the broker opened for the
agent travels back as SCM_RIGHTS.

Threat: both ends belong to confine (the supervisor, and the broker, which
the agent can neither ptrace nor take descriptors from), so requests and
replies come from confine itself. What the agent controls is what the
supervisor copies out of it (addresses, data, its msghdr and control
messages): the callers bound every length before these helpers decode it.
"""
from __future__ import annotations

import array
import ctypes
import enum
import os
import socket
import struct

from ..record import NamedTuple


class Op(enum.IntEnum):
    """Every request the broker serves."""
    CONNECT = 1
    SENDTO = 2
    SENDMSG = 3
    LISTEN = 4
    ROOTS = 5       # once, first: where pathname unix sockets may be (see RootsRequest)
    NEWSOCK = 6     # make a socket for the agent (no pidfd_getfd: mediation/sockfd.py)
    LISTENER = 7    # once, before any file or socket call: the notify listener (see ListenerRequest)
    ASKS = 8        # once: which refusals the broker puts to the supervisor first (see AsksRequest)
    VERDICT = 9     # the supervisor's verdict on a question the broker put (see VerdictRequest)
    OPEN = 10
    TRUNCATE = 11
    MKDIR = 12
    MKNOD = 13
    SYMLINK = 14
    LINK = 15
    RENAME = 16
    UNLINK = 17     # unlink, unlinkat without AT_REMOVEDIR
    RMDIR = 18      # rmdir, unlinkat with AT_REMOVEDIR
    CHMOD = 20      # metadata calls, without a mount namespace (see MetaRequest)
    CHOWN = 21
    UTIMES = 22
    SETXATTR = 23
    REMOVEXATTR = 24
    WRITABLE = 25   # once, before any metadata call: the writable paths (see WritableRequest)


SOCKET_OPS = frozenset({Op.CONNECT, Op.SENDTO, Op.SENDMSG, Op.LISTEN, Op.ROOTS, Op.NEWSOCK})
CONFIG_OPS = frozenset({Op.ASKS, Op.VERDICT})
FILE_OPS = frozenset({Op.OPEN, Op.TRUNCATE, Op.MKDIR, Op.MKNOD, Op.SYMLINK, Op.LINK, Op.RENAME,
                      Op.UNLINK, Op.RMDIR})
META_OPS = frozenset({Op.CHMOD, Op.CHOWN, Op.UTIMES, Op.SETXATTR, Op.REMOVEXATTR})
XATTR_SIZE_MAX = 65536             # the kernel's own limits, checked before copying
XATTR_NAME_MAX = 255

# Largest payload copied for one mediated send: a stream socket gets a short
# write (legal, callers loop), a datagram larger than this gets EMSGSIZE.
DATA_CAP = 1 << 20
REQUEST_MAX = DATA_CAP + 4096     # the broker's receive buffer
MAX_FDS = 255                     # descriptors one request may carry
REASON_CAP = 2048                 # bytes of a refusal's reason in a reply

_HEAD = struct.Struct("<QB")                   # every request starts: id, op
_SOCKET = struct.Struct("<QBiiIiiiQB")         # id, op, flags, resolve, namelen, nfds_passed,
                                               # tgid, tid, notification id, ANSWER bit
_ROOTS = struct.Struct("<QBI")                 # id, op, number of roots
_FILE = struct.Struct("<QBqQQIiiiiQB")         # id, op, flags, mode, dev/length, umask,
                                               # tgid, tid, fd index for path 1, for path 2,
                                               # notification id, ANSWER_* bits
_META = struct.Struct("<QBiiIIIiiIII")         # id, op, at-flags, fd index, mode/xattr flags,
                                               # uid, gid, tgid, tid, path, name, value lengths
_WRITABLE = struct.Struct("<QBII")             # id, op, writable roots, holes
_LISTENER = struct.Struct("<QB")               # id, op
_REPLY = struct.Struct("<Qqi")                 # id, return value, errno
_FORWARD = struct.Struct("<QQi6QBqi")          # FORWARDED, notification id, syscall nr, args,
                                               # 1: reply follows, 2: O_CLOEXEC; ret, errno
FORWARDED = 0xFFFFFFFFFFFFFFFF                 # a reply's id: a Forwarded, not a reply
REPLY_MAX = _REPLY.size + 4096                 # the supervisor's receive buffer
_U64 = 0xFFFFFFFFFFFFFFFF


def request_head(body: bytes) -> tuple[int, int]:
    """(request id, op number) of any request; the number may not be an Op."""
    return _HEAD.unpack_from(body)


class SocketRequest(NamedTuple):
    """connect/sendto/sendmsg/listen (flags: the backlog). Descriptors: the
    socket, then (resolve, and the path in `name` is relative) the agent's
    cwd, then the ones the agent passes with SCM_RIGHTS. resolve: `name` is a pathname unix address the broker
    resolves in the agent's view and checks against the roots (RootsRequest);
    tgid, tid: what "self" and "thread-self" mean in the agent's /proc.
    nid, answer: as FileRequest's (ANSWER: the broker answers the notification
    itself, one hop fewer; never for a socket made for the agent, whose reply
    the supervisor still has to act on)."""
    rid: int
    op: Op
    flags: int
    resolve: bool
    name: bytes
    data: bytes
    npassed: int
    tgid: int = 0
    tid: int = 0
    nid: int = 0
    answer: int = 0

    def pack(self) -> bytes:
        return _SOCKET.pack(self.rid, self.op, self.flags, 1 if self.resolve else 0,
                            len(self.name), self.npassed, self.tgid, self.tid, self.nid,
                            self.answer & ANSWER) + self.name + self.data

    @classmethod
    def unpack(cls, body: bytes) -> "SocketRequest":
        rid, op, flags, resolve, namelen, npassed, tgid, tid, nid, answer = \
            _SOCKET.unpack_from(body)
        rest = body[_SOCKET.size:]
        return cls(rid, Op(op), flags, bool(resolve), rest[:namelen], rest[namelen:], npassed,
                   tgid, tid, nid, answer)


class RootsRequest(NamedTuple):
    """Where pathname unix sockets may be, by descriptor (the supervisor's
    own configuration, opened before the agent runs). One descriptor per
    name: for b"" the directory under which any socket may be, else the
    directory holding the one allowed entry of that name."""
    rid: int
    names: tuple[bytes, ...]

    def pack(self) -> bytes:
        return _ROOTS.pack(self.rid, Op.ROOTS, len(self.names)) + b"\0".join(self.names)

    @classmethod
    def unpack(cls, body: bytes) -> "RootsRequest":
        rid, _, n = _ROOTS.unpack_from(body)
        names = body[_ROOTS.size:].split(b"\0") if n else []
        return cls(rid, tuple(names[:n]) + (b"",) * (n - len(names)))


class FileRequest(NamedTuple):
    """A file-system call. dirs: for each path the index of its directory in
    the descriptors sent along, -1 for an absolute path (or no path)."""
    rid: int
    op: Op
    flags: int
    mode: int
    arg: int                    # dev for mknod, length for truncate
    umask: int                  # or UMASK_READ
    tgid: int                   # the agent's "self" in its /proc
    tid: int                    # and its "thread-self"
    dirs: tuple[int, int]
    paths: tuple[bytes, bytes]  # b"" when the call has one path
    target: bytes               # a symlink's contents
    nid: int = 0                # the notification, answered by the broker with ANSWER
    answer: int = 0             # ANSWER, ANSWER_CLOEXEC

    def pack(self) -> bytes:
        return (_FILE.pack(self.rid, self.op, self.flags, self.mode, self.arg & _U64, self.umask,
                           self.tgid, self.tid, self.dirs[0], self.dirs[1], self.nid, self.answer)
                + b"\0".join((*self.paths, self.target)))

    @classmethod
    def unpack(cls, body: bytes) -> "FileRequest":
        rid, op, flags, mode, arg, umask, tgid, tid, d1, d2, nid, answer = _FILE.unpack_from(body)
        p1, p2, target = (body[_FILE.size:].split(b"\0") + [b"", b""])[:3]
        return cls(rid, Op(op), flags, mode, arg, umask, tgid, tid, (d1, d2), (p1, p2), target,
                   nid, answer)


# FileRequest.umask: not read by the supervisor (a mkdir, an open with O_CREAT
# but not O_EXCL: mostly of names that exist, which need none); the broker
# reads it if it makes the name (files.Umasks).
UMASK_READ = 0xFFFFFFFF
# Reply.err when the broker could not read it (no /proc grant here, no
# listener) before making anything: the supervisor reads it itself from then
# on and hands the call over again.
UMASK_UNREAD = 0x10000      # no errno

# FileRequest.answer: the broker answers the notification itself (one hop
# fewer: the opened file goes straight into the agent), and installs the file
# with O_CLOEXEC.
ANSWER = 1
ANSWER_CLOEXEC = 2


# Reply.err: the broker asks before it refuses (AsksRequest): reason is
# "KIND\0SUBJECT\0REFUSAL". The request stays open: the broker's thread waits
# for a VerdictRequest with the same request id, then replies again (the
# call's real answer). The engine (confine/approval) decides, in the
# supervisor: the broker runs in the agent's Landlock domain and decides nothing.
ASK = 0x10001               # no errno
ASK_UNIX = 1                # AsksRequest bits: a connect to a unix socket outside the grants
ASK_WRITE = 2               # a new file at a protected (run-later) name of the workdir
# Reply.reason of an open the engine approved (ASK_WRITE): "APPROVED_WRITE REL\0DEV:INO",
# the file made, for the exit check (protect/revert.py accepts exactly that file)
APPROVED_WRITE = "approved write "
ASK_WAIT = 300.0            # the broker's longest wait for a verdict: past it, refused
_ASKS = struct.Struct("<QBI")                  # id, op, ASK_* bits
_VERDICT = struct.Struct("<QBQB")              # id, op, the asking request's id, allowed


class AsksRequest(NamedTuple):
    """Which refusals the broker turns into questions (ASK_* bits), sent once,
    before any call, only when the run's engine may allow such a thing."""
    rid: int
    bits: int

    def pack(self) -> bytes:
        return _ASKS.pack(self.rid, Op.ASKS, self.bits)

    @classmethod
    def unpack(cls, body: bytes) -> "AsksRequest":
        rid, _, bits = _ASKS.unpack_from(body)
        return cls(rid, bits)


class VerdictRequest(NamedTuple):
    """The engine's verdict on the question of request `asked` (a Reply with ASK);
    reason: what the agent is told, with the refusal, when it is denied."""
    rid: int
    asked: int
    allowed: bool
    reason: str = ""

    def pack(self) -> bytes:
        return (_VERDICT.pack(self.rid, Op.VERDICT, self.asked, 1 if self.allowed else 0)
                + self.reason.encode("utf-8", "replace")[:REASON_CAP])

    @classmethod
    def unpack(cls, body: bytes) -> "VerdictRequest":
        rid, _, asked, allowed = _VERDICT.unpack_from(body)
        return cls(rid, asked, bool(allowed), body[_VERDICT.size:].decode("utf-8", "replace"))


class ListenerRequest(NamedTuple):
    """The agent's seccomp listener, sent once with SCM_RIGHTS before any file
    or socket call: the broker answers those on it (FileRequest.answer,
    SocketRequest.answer); it replies to the supervisor only when the
    supervisor is to answer (and say why). receive: the broker also receives
    every notification itself (docs/security-model.md, "Who receives the
    agent's calls"); a second descriptor, the in-flight record
    (mediation/inflight.py), travels with it."""
    rid: int
    receive: bool = False

    def pack(self) -> bytes:
        return _LISTENER.pack(self.rid, Op.LISTENER) + (b"\1" if self.receive else b"")

    @classmethod
    def unpack(cls, body: bytes) -> "ListenerRequest":
        rid, _ = _LISTENER.unpack_from(body)
        return cls(rid, body[_LISTENER.size:_LISTENER.size + 1] == b"\1")


class Forwarded(NamedTuple):
    """A notification the broker received and hands to the supervisor (a kind
    it does not own, or a file call it could not read or finish inline), with
    a descriptor for the calling thread (a pidfd: the supervisor's view of its
    pid). reply: set when the broker already performed the call and the
    supervisor is to say why and answer (held, refused); its file, if any,
    travels after the pidfd."""
    nid: int
    nr: int
    args: tuple[int, ...]
    reply: Reply | None = None
    cloexec: bool = False       # the file in the reply goes in with O_CLOEXEC

    def pack(self) -> bytes:
        r = self.reply
        bits = (1 if r is not None else 0) | (2 if self.cloexec else 0)
        head = _FORWARD.pack(FORWARDED, self.nid, self.nr, *self.args, bits,
                             r.ret if r else 0, r.err if r else 0)
        return head + (Reply(0, 0, r.reason).encode(0)[_REPLY.size:] if r else b"")

    @classmethod
    def unpack(cls, data: bytes) -> "Forwarded | None":
        if len(data) < _FORWARD.size:
            return None
        _, nid, nr, *rest = _FORWARD.unpack_from(data)
        args, bits, ret, err = tuple(rest[:6]), rest[6], rest[7], rest[8]
        reply = Reply(ret, err, data[_FORWARD.size:].decode("utf-8", "surrogateescape")) \
            if bits & 1 else None
        return cls(nid, nr, args, reply, bool(bits & 2))


class MetaRequest(NamedTuple):
    """chmod/chown/utimes/setxattr/removexattr on a path (relative to the
    descriptor at index `dir`, -1: absolute) or, with AT_EMPTY_PATH and no
    path, on that descriptor itself. value: the xattr value, or for UTIMES the
    two struct timespec (b"": now)."""
    rid: int
    op: Op
    flags: int                  # AT_SYMLINK_NOFOLLOW, AT_EMPTY_PATH
    dir: int
    path: bytes
    mode: int = 0               # chmod's mode; setxattr's XATTR_CREATE/XATTR_REPLACE
    uid: int = 0xFFFFFFFF
    gid: int = 0xFFFFFFFF
    name: bytes = b""           # the attribute's name
    value: bytes = b""
    tgid: int = 0
    tid: int = 0

    def pack(self) -> bytes:
        return (_META.pack(self.rid, self.op, self.flags, self.dir, self.mode, self.uid, self.gid,
                           self.tgid, self.tid, len(self.path), len(self.name), len(self.value))
                + self.path + self.name + self.value)

    @classmethod
    def unpack(cls, body: bytes) -> "MetaRequest":
        rid, op, flags, d, mode, uid, gid, tgid, tid, lp, ln, lv = _META.unpack_from(body)
        rest = body[_META.size:]
        return cls(rid, Op(op), flags, d, rest[:lp], mode, uid, gid, rest[lp:lp + ln],
                   rest[lp + ln:lp + ln + lv], tgid, tid)


class WritableRequest(NamedTuple):
    """Where metadata calls may act, by descriptor (confine's own
    configuration, opened by the supervisor before the agent runs): the first
    `nroots` descriptors are writable trees, the rest read-only entries or
    secrets below them that stay refused."""
    rid: int
    nroots: int
    nholes: int

    def pack(self) -> bytes:
        return _WRITABLE.pack(self.rid, Op.WRITABLE, self.nroots, self.nholes)

    @classmethod
    def unpack(cls, body: bytes) -> "WritableRequest":
        rid, _, nroots, nholes = _WRITABLE.unpack_from(body)
        return cls(rid, nroots, nholes)


class Reply(NamedTuple):
    """The broker's answer: the call's return value, or -1 and errno; reason
    is set when the guard refused (reported once by the supervisor); fd is a
    file opened for the agent."""
    ret: int
    err: int = 0
    reason: str = ""
    fd: int | None = None

    def encode(self, rid: int) -> bytes:
        # surrogateescape both ways: a name's bytes that are not UTF-8 reach the
        # supervisor as they were, to be shown like every other name (errors.printable)
        try:
            reason = self.reason.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:
            reason = self.reason.encode("utf-8", "replace")
        return _REPLY.pack(rid, self.ret, self.err) + reason[:REASON_CAP]


def decode_reply(data: bytes) -> tuple[int, Reply] | None:
    """(request id, reply without fd), or None for a datagram too short to be one."""
    if len(data) < _REPLY.size:
        return None
    rid, ret, err = _REPLY.unpack_from(data)
    return rid, Reply(ret, err, data[_REPLY.size:].decode("utf-8", "surrogateescape"))


# ------------------------------------------------ msghdr and SCM_RIGHTS (x86_64/aarch64 ABI)

class MsgHdr(ctypes.Structure):
    _fields_ = [("msg_name", ctypes.c_void_p), ("msg_namelen", ctypes.c_uint32),
                ("msg_iov", ctypes.c_void_p), ("msg_iovlen", ctypes.c_size_t),
                ("msg_control", ctypes.c_void_p), ("msg_controllen", ctypes.c_size_t),
                ("msg_flags", ctypes.c_int)]


MSGHDR_SIZE = ctypes.sizeof(MsgHdr)
IOVEC = struct.Struct("<QQ")        # iov_base, iov_len
CMSG_HDR = struct.Struct("<Qii")    # cmsg_len (size_t), level, type


def cmsg_align(n: int) -> int:
    return (n + 7) & ~7


def rights_control(fds: list[int]) -> tuple[ctypes.Array | None, int]:
    """A control buffer passing fds with SCM_RIGHTS, and its length; (None, 0) for none."""
    if not fds:
        return None, 0
    fd_bytes = array.array("i", fds).tobytes()
    clen = cmsg_align(CMSG_HDR.size + len(fd_bytes))
    raw = CMSG_HDR.pack(CMSG_HDR.size + len(fd_bytes), socket.SOL_SOCKET,
                        socket.SCM_RIGHTS) + fd_bytes
    return ctypes.create_string_buffer(raw, clen), clen


def parse_rights(ctrl: bytes) -> list[int] | None:
    """The descriptor numbers in ctrl's SCM_RIGHTS messages; None if it holds
    any other kind of control message. A malformed tail ends the walk."""
    fds: list[int] = []
    off = 0
    while off + CMSG_HDR.size <= len(ctrl):
        ln, level, typ = CMSG_HDR.unpack_from(ctrl, off)
        if ln < CMSG_HDR.size or off + ln > len(ctrl):
            break
        if level != socket.SOL_SOCKET or typ != socket.SCM_RIGHTS:
            return None
        payload = ctrl[off + CMSG_HDR.size: off + ln]
        fds += array.array("i", payload[: len(payload) // 4 * 4]).tolist()
        off += cmsg_align(ln)
    return fds


def debug() -> bool:
    """CONFINE_DEBUG is set: both sides then show what a plain run hides."""
    return bool(os.environ.get("CONFINE_DEBUG"))
