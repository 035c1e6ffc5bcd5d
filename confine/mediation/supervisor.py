"""The supervisor's side: answers the notifications of the agent's filter that
the broker hands on (wire.Forwarded: every kind but the file calls the broker
reads and performs itself, docs/security-model.md "Who receives the agent's
calls"), or all of them where it receives them itself (the broker gone,
CONFINE_TEST_TWO_HOPS).

Nothing the agent asked for is ever resumed with CONTINUE: between a check and
the kernel re-reading the agent's memory another thread could swap the
address or the descriptor. Instead:

* the supervisor copies the address (and data) out of the agent, takes its
  own reference to the socket with pidfd_getfd, checks that the notification
  is still valid, and decides;
* a pathname unix address must lie under an allowed root (workdir, private
  tmp, profile `unix_sockets.allow`): the roots are opened here once, before
  the agent runs, and handed to the broker, which resolves the address in the
  agent's own view and judges it by descriptor (files.unix_target). Nothing
  the agent names is resolved here: the supervisor's /proc shows host pids;
* a file call's paths are copied and its directories taken (pidfd_getfd, or
  the agent's cwd); the broker judges and performs it (files.py);
* the call itself is performed by the broker (broker.py), in the agent's
  Landlock domain, listen() too (see _listen);
* without a mount namespace, chmod/chown/utime/xattr calls (META_CALLS) are
  copied the same way and judged by the broker against the writable paths
  (files.FileBroker.handle_meta), on the very file it resolved.

Where the host refuses pidfd_getfd (Docker without CAP_SYS_PTRACE), an
agent's directory or file is taken by opening /proc/TID/fd/N (O_PATH: the same
file, checked by id_valid afterwards like the cwd); a socket cannot be taken
that way, so the call is performed on a new socket of the same kind, which
then replaces the agent's (sockfd.py); what cannot be carried over to a new
socket is refused, with a reason.

Fail closed: a call the supervisor cannot decode or copy is answered with an
error (EPERM on a bug), a call handed to a broker that dies gets EIO (file
calls) or ECONNREFUSED (sockets), never a pass.
"""
from __future__ import annotations

import ctypes
import errno
import functools
import os
import select
import socket
import struct
import sys
import threading
import time
from typing import Any, Callable, Sequence

from confine.errors import default_warn, printable
from confine.kernel import caps, notify, sysfs
from confine.kernel.seccomp import (
    FILE_CALLS,
    META_CALLS,
    OPEN_CALLS,
    SOCKET_CALLS,
    syscall_number,
)

from ..record import NamedTuple
from . import inet, inflight, sockfd
from .files import _fstype
from .signals import CALLS as _SIGNAL_CALLS
from .wire import (
    ANSWER,
    ANSWER_CLOEXEC,
    APPROVED_WRITE,
    ASK,
    ASK_UNIX,
    ASK_WRITE,
    DATA_CAP,
    FORWARDED,
    IOVEC,
    MSGHDR_SIZE,
    REPLY_MAX,
    UMASK_READ,
    UMASK_UNREAD,
    XATTR_NAME_MAX,
    XATTR_SIZE_MAX,
    AsksRequest,
    FileRequest,
    Forwarded,
    ListenerRequest,
    MetaRequest,
    MsgHdr,
    Op,
    Reply,
    RootsRequest,
    SocketRequest,
    VerdictRequest,
    WritableRequest,
    debug,
    decode_reply,
    parse_rights,
)

MAX_REPORTED = 100
LOSS_RECHECK = 0.01     # seconds: see _goes_on
PRUNE_AT = 64           # pending requests before those answered by the broker are dropped
MAX_ADDR = 128          # a sockaddr longer than sockaddr_storage is EINVAL
AT_FDCWD = -100
_O_TMPFILE = os.O_TMPFILE & ~os.O_DIRECTORY    # makes a file: the umask applies
AT_SYMLINK_NOFOLLOW = 0x100
AT_EMPTY_PATH = 0x1000
AT_REMOVEDIR = 0x200
O_PATH_FLAG = 0o10000000
U32 = 0xFFFFFFFF
# The broker receives the agent's notifications itself (one hop fewer per file
# call). CONFINE_TEST_TWO_HOPS=1: the supervisor does, as before this change,
# for bench/file_mediation.py's A/B only; it takes no protection away.
RECEIVE = os.environ.get("CONFINE_TEST_TWO_HOPS") != "1"


class _Pending(NamedTuple):
    """A request the broker has not answered yet."""
    nid: int            # the notification to answer
    cloexec: bool       # install the descriptor in the reply with O_CLOEXEC
    lost: int           # errno the agent gets if the broker dies first
    # what the call wrote or reached, for the message should it be refused with
    # no reason from the guard (EACCES, EROFS, EBUSY): (tid, dirfd, path,
    # creates, a rename's (dirfd, source) or None) for file calls, (port,
    # address) for a TCP connect

    what: tuple | None = None
    # sockfd.py: what to do with the reply instead (a socket made for the agent)
    then: Callable[[Any, list[int]], None] | None = None
    # the broker answers it itself (FileRequest.answer) and then sends no
    # reply: dropped by _prune once the notification is gone
    direct: bool = False
    # a file call sent without its umask: handed over again, umask read here,
    # if the broker could not read it (wire.UMASK_UNREAD)
    retry: Callable[[], None] | None = None
    pid: int = 0        # the calling thread (the supervisor's pid namespace)


class _SocketCall(NamedTuple):
    op: Op
    fd: int             # the agent's socket
    flags: int
    raw: bytes          # the address as the agent gave it (b"" for none)
    data: bytes
    passed: list[int]   # agent descriptors sent with SCM_RIGHTS
    full: int | None = None   # sendto's length before DATA_CAP


class _FileCall(NamedTuple):
    op: Op
    paths: list[tuple[int, int]]   # (agent dirfd, agent address of the path)
    flags: int = 0
    mode: int = 0
    arg: int = 0
    target: bytes = b""


class _MetaCall(NamedTuple):
    op: Op
    dfd: int                  # the agent's dirfd, or the descriptor itself (path None)
    path: int | None          # address of the path; None: the descriptor's own file
    flags: int = 0            # AT_SYMLINK_NOFOLLOW, AT_EMPTY_PATH
    mode: int = 0
    uid: int = U32
    gid: int = U32
    name: int = 0             # address of the xattr name
    value: tuple[int, int] = (0, 0)       # address and size of the xattr value
    times: tuple[str, int] | None = None  # ("utimbuf"|"timeval"|"timespec", address)


Handler = Callable[[notify.Notif], None]


class _Refusal(NamedTuple):
    """A verdict where no engine could judge: denied."""
    allowed: bool = False
    by: str = "confine"
    reason: str = "nothing here can approve it"


def _goes_on(tid: int) -> bool:
    """The thread will run its own code again: not gone, not killed, not frozen by the
    leftover walk (supervise.kill_leftovers stops every process before it kills any).
    Asked twice, LOSS_RECHECK apart: a teardown signals the processes one by one, and
    the broker may die, and be heard of here, before the last of them is signalled."""
    for first in (True, False):
        if not first:
            time.sleep(LOSS_RECHECK)
        st = sysfs.proc_stat(tid)
        if st is None or st.state in ("T", "t", "Z", "X") or sysfs.kill_pending(tid):
            return False
    return True


class Mediator:
    """Answers every notification of one agent's filter, on a thread of its
    own (start()); roots: where pathname unix sockets may be; files: the name
    guard is on (file calls go to the broker, else ENOSYS); warn: where each
    distinct denial is reported; events: the run's runtime.events.Events, which
    says each refusal once with what would grant it and logs every one (else
    `warn` says each distinct one)."""

    # Below Landlock ABI 6 without a network namespace (features.NO_NS_REPLACEMENTS):
    # every connect/send to an abstract address is refused; set by launch.
    refuse_abstract = False
    # approvals.exec: the command confine itself runs (launch sets it). Its exec is the
    # first one notified (no agent code runs before it), made by pid 1's child, not
    # dumpable yet, whose memory an unprivileged supervisor cannot read.
    first_exec: str | None = None
    caller = 0              # the thread whose notification is being handled
    broker_gone = False     # the broker's socket hung up: every call sent to it fails
    # the broker receives the notifications (inflight.py: what it holds), or None:
    # this side does
    table: inflight.Table | None = None
    said_gone = False       # that loss was reported (once)

    def __init__(self, notify_fd: int, broker: socket.socket, roots: Sequence[str],
                 agent_uid: int, warn: Callable[[str], None] = default_warn,
                 files: bool = False, inet_routes: inet.InetRoutes | None = None,
                 events: Any = None, meta: tuple[Sequence[str], Sequence[str]] | None = None,
                 real_ids: tuple[int, int] | None = None):
        self.fd = notify_fd
        # (uid, gid) the mediator's thread takes as its real ids (Plan.mediate_as)
        self.real_ids = real_ids
        # The egress gateway's routes: every IPv4/IPv6 destination is rewritten
        # (mediation/inet.py); None: Landlock alone decides (no gateway).
        self.inet = inet_routes
        self.broker = broker
        # A stuck broker must not freeze every mediated call: a send that cannot
        # complete in time is answered ECONNREFUSED.
        self.broker.settimeout(5)
        # The same socket without the timeout (its descriptor stays non-blocking),
        # for the per-call send: a socket with a timeout polls before every send.
        # A send that would block goes through self.broker and its timeout.
        self.post = socket.socket(fileno=os.dup(broker.fileno()))
        self.uid = agent_uid
        self.pending: dict[int, _Pending] = {}      # request id -> its notification
        self.prune_at = PRUNE_AT
        self.next_id = 1
        # The denials shown (at most MAX_REPORTED, so the memory an agent can make
        # the supervisor hold by varying its denials is bounded) and a count of
        # the rest.
        self.denied: set[str] = set()
        self.unshown = 0
        self._send_roots(roots)
        self._send_listener()
        # The run's approval engine (confine/approval, set on events by the
        # session): refusals it may allow are put to it first (_ask).
        self.approval = getattr(events, "approval", None)
        self._send_asks(files)
        if meta is not None:
            self._send_writable(*meta)
        self.getfd = True          # pidfd_getfd works here (False once the host refused it)
        self.umask_here = False    # the broker cannot read umasks (wire.UMASK_UNREAD)
        self.made = sockfd.Made()  # without pidfd_getfd: sockets made for the agent, kept
        self.tasks = Tasks()      # per-thread facts and pidfds of file and socket calls
        self.pids = PidfdPids()   # the pid behind a forwarded call's pidfd
        self.warn = warn
        self.events = events
        self.thread = threading.Thread(target=self._loop, name="confine-mediator", daemon=True)
        self.files = files
        # Syscall number -> handler; any other number is answered ENOSYS (file
        # calls too, unless the name guard is on).
        self.handlers: dict[int, Handler] = {
            nr: functools.partial(fn, self) for nr, fn in _SOCKET_NR.items()}
        if files:
            self.handlers.update({nr: functools.partial(Mediator._file, self, decode)
                                  for nr, decode in FILE_NR.items()})
        if meta is not None:
            self.handlers.update({nr: functools.partial(Mediator._meta, self, decode)
                                  for nr, decode in _META_NR.items()})
        # notified only under approvals.exec (Plan.exec_notify)
        for name, at in (("execve", False), ("execveat", True)):
            if (nr := syscall_number(name)) is not None:
                self.handlers[nr] = functools.partial(Mediator._exec, self, at)
        # notified only where pidfd_getfd is refused (runtime/channels.py)
        for name, fn in (("bind", Mediator._bind), ("setsockopt", Mediator._setsockopt)):
            if (nr := syscall_number(name)) is not None:
                self.handlers[nr] = functools.partial(fn, self)

    def start(self) -> None:
        self.thread.start()

    def mediate_signals(self, judge: Any) -> None:
        """Below Landlock ABI 6 without a pid namespace: the kill family and
        fcntl F_SETOWN, judged by mediation/signals.py."""
        for name in (*_SIGNAL_CALLS, "fcntl"):
            nr = syscall_number(name)
            if nr is not None:
                self.handlers[nr] = functools.partial(Mediator._signal, self, judge, name)

    def refuse_dgram(self) -> None:
        """No gateway: IPv4/IPv6 datagram sockets are notified (plan.dgram_notify)
        only to be refused here and said once: without it a DNS lookup fails with
        nothing but the program's own "could not resolve"."""
        nr = syscall_number("socket")
        if nr is not None:
            self.handlers[nr] = functools.partial(Mediator._dgram, self)

    def _exec(self, at: bool, n: notify.Notif) -> None:
        """approvals.exec: the program is judged by the engine and the call
        resumed (CONTINUE) or refused. A guardrail, never a boundary: the path
        is read before the kernel reads it again (it can be swapped), and a
        program can be reached another way (an interpreter, a copy). The path
        is made absolute with the caller's cwd or dirfd for matching only."""
        a = [int(x) for x in n.data.args]
        path, self.first_exec = self.first_exec, None
        if path is None:
            try:
                path = os.fsdecode(notify.read_cstr(n.pid, a[1] if at else a[0]))
            except OSError as e:
                # unreadable (the caller made itself not dumpable?): not judged, refused
                return self._respond(n.id, error=e.errno or errno.EFAULT)
        if not path.startswith("/"):
            dfd = _i32(a[0]) if at else AT_FDCWD
            try:
                base = os.readlink(f"/proc/{n.pid}/cwd" if dfd == AT_FDCWD
                                   else f"/proc/{n.pid}/fd/{dfd}")
                path = os.path.normpath(os.path.join(base, path))
            except OSError:
                pass        # matched as written
        if self.approval is None:
            self._report(f"exec {path}: nothing here can judge it (approvals.exec)")
            return self._respond(n.id, error=errno.EACCES)
        nid = n.id

        def done(v: Any) -> None:
            if v.allowed:
                try:
                    notify.respond(self.fd, nid, cont=True)
                except OSError:
                    pass    # interrupted: nothing to resume
                return
            self._report(f"exec {path}: denied by {v.by}" + (f" ({v.reason})" if v.reason else ""))
            self._respond(nid, error=errno.EACCES)
        self.approval.submit_for("exec", {"path": path}, n.pid, done)

    def _dgram(self, n: notify.Notif) -> None:
        self._respond(n.id, error=errno.EPERM)
        self._report(DGRAM_REFUSED)

    def _signal(self, judge: Any, name: str, n: notify.Notif) -> None:
        v = judge.decide(name, list(n.data.args), n.pid)
        if v.refused:
            self._report(v.refused)
        if v.cont:
            try:
                notify.respond(self.fd, n.id, cont=True)
            except OSError:
                pass       # interrupted: nothing to resume
            return
        self._respond(n.id, error=v.error)

    def _send_roots(self, roots: Sequence[str]) -> None:
        """The broker's first request: the allowed socket roots by descriptor.
        A directory allows everything below it; anything else (a socket file,
        or one that does not exist yet) only that name in its directory. A
        root that cannot be opened allows nothing."""
        fds: list[int] = []
        names: list[bytes] = []
        try:
            for r in roots:
                real = os.path.realpath(r)     # confine's own configuration, not the agent's
                try:
                    fds.append(os.open(real, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC))
                    names.append(b"")
                    continue
                except OSError:
                    pass
                head, base = os.path.split(real)
                try:
                    fds.append(os.open(head or "/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC))
                    names.append(os.fsencode(base))
                except OSError:
                    continue
            try:
                socket.send_fds(self.broker, [RootsRequest(0, tuple(names)).pack()], fds)
            except OSError:
                pass       # no broker: every mediated call fails anyway
        finally:
            for f in fds:
                os.close(f)

    def _send_listener(self) -> None:
        """The listener, so that the broker answers file and socket calls
        itself: the agent waits for one hop fewer, and the file the broker
        opened goes into it without coming here first (wire.ListenerRequest).
        With it, unless the old path is asked for (a benchmark's A/B), the
        broker receives every notification itself and hands on what it does
        not own (docs/security-model.md, "Who receives the agent's calls");
        the in-flight record (inflight.py) lets this side answer what it held
        should it die."""
        fds = [self.fd]
        if RECEIVE:
            try:
                fds.append(inflight.create())
                self.table = inflight.Table(fds[1])
            except OSError:
                self.table = None    # no record: this side receives, as before
        try:
            socket.send_fds(self.broker, [ListenerRequest(0, self.table is not None).pack()],
                            fds)
        except OSError:
            self.table = None      # no broker: every mediated call fails anyway
        finally:
            for f in fds[1:]:
                os.close(f)

    def _send_asks(self, files: bool) -> None:
        """Tell the broker which refusals to ask about first (wire.AsksRequest):
        only those the engine may allow, so a run that asks nothing pays nothing."""
        bits = 0
        if self.approval is not None:
            bits |= ASK_UNIX if self.approval.asks("unix_socket") else 0
            bits |= ASK_WRITE if files and self.approval.asks("protected_write") else 0
        if not bits:
            return
        try:
            self.broker.send(AsksRequest(0, bits).pack())
        except OSError:
            pass       # no broker: every mediated call fails anyway

    def _ask(self, rid: int, got: _Pending, question: str) -> None:
        """The broker asks before refusing (wire.ASK): the engine decides, here in
        the supervisor, without holding up this thread (the answer may take a
        person's minute); the verdict goes back to the broker's waiting call.
        Anything unclear is a denial."""
        self.pending[rid] = got       # the broker replies again with the call's answer
        parts = question.split("\0", 2)
        kind, subject, _ = parts if len(parts) == 3 else ("", "", "")

        def done(v: Any) -> None:
            why = "" if v.allowed else f"denied by {v.by}" + (f" ({v.reason})" if v.reason else "")
            try:
                self.broker.send(VerdictRequest(0, rid, bool(v.allowed), why).pack())
            except OSError:
                pass   # the broker is gone: its call fails with it
        if self.approval is None or kind not in ("unix_socket", "protected_write"):
            return done(_Refusal())
        self.approval.submit_for(kind, {"path": subject}, got.pid, done)

    def _send_writable(self, roots: Sequence[str], holes: Sequence[str]) -> None:
        """Where metadata calls may act (wire.WritableRequest), by descriptor: the
        supervisor's view is the agent's here (no mount namespace). A path that
        cannot be opened is left out: a root then allows nothing, a hole that
        does not exist holds nothing."""
        rfds: list[int] = []
        hfds: list[int] = []
        try:
            for paths, out in ((roots, rfds), (holes, hfds)):
                for p in paths:
                    try:
                        out.append(os.open(os.path.realpath(p), os.O_PATH | os.O_CLOEXEC))
                    except OSError:
                        continue
            try:
                socket.send_fds(self.broker, [WritableRequest(0, len(rfds), len(hfds)).pack()],
                                rfds + hfds)
            except OSError:
                pass       # no broker: every mediated call fails anyway
        finally:
            for f in rfds + hfds:
                os.close(f)

    def _take(self, pid: int, fd: int, pidfd: int = -1) -> int:
        """A descriptor for the agent's fd: pidfd_getfd, or where the host refuses
        it, /proc/TID/fd/N opened O_PATH (the same file; the caller proves with
        id_valid that the thread still waits). EBADF for no such descriptor.
        pidfd: the thread's, from Tasks (kept open there), else one is opened."""
        if fd < 0:
            raise OSError(errno.EBADF, "bad descriptor")
        if self.getfd:
            own = pidfd < 0
            if own:
                pidfd = _pidfd(pid)
            try:
                got = self._getfd(pidfd, fd)
            finally:
                if own:
                    os.close(pidfd)
            if got is not None:
                return got
        try:
            return os.open(f"/proc/{pid}/fd/{fd}", os.O_PATH | os.O_CLOEXEC)
        except FileNotFoundError:
            raise OSError(errno.EBADF, "bad descriptor") from None

    def _getfd(self, pidfd: int, fd: int) -> int | None:
        """pidfd_getfd; None (and never again this run) where the host refuses it."""
        try:
            return notify.pidfd_getfd(pidfd, fd)
        except OSError as e:
            if e.errno not in (errno.EPERM, errno.ENOSYS, errno.EACCES):
                raise
            self.getfd = False
            return None

    def _take_socket(self, pid: int, pidfd: int, fd: int, keep: bool = False) -> int:
        """The agent's socket itself: pidfd_getfd. Where the host refuses it (a
        /proc open cannot give a socket): a datagram socket made for the agent
        earlier (sockfd.Made), else sockfd.Replace with what was learnt of the
        socket, or OSError (sockfd.Refused: its reason reported). keep: the
        call (bind, setsockopt) comes before the listen or connect a kept
        stream socket is kept for."""
        if self.getfd:
            got = self._getfd(pidfd, fd)
            if got is not None:
                return got
        got = self.made.take(pid, fd, keep)
        if got is not None:
            return got
        try:
            kind = sockfd.learn(pid, fd)
        except sockfd.Refused as r:
            self._report(r.reason)
            raise
        raise sockfd.Replace(kind)

    def _loop(self) -> None:
        try:
            if self.real_ids is not None:
                # Fails closed if refused: every read of the agent is then EPERM,
                # so every mediated call is refused.
                try:
                    caps.thread_as(*self.real_ids)
                except OSError as e:
                    self.warn(f"the mediator cannot act as uid {self.real_ids[0]}: {e}; "
                              "every mediated call is refused")
            self._serve()
        finally:
            self.tasks.clear()      # a process running many sandboxes keeps no descriptors
            self.post.close()
        # No process uses the filter any more: the listener is done with too.
        os.close(self.fd)

    def _serve(self) -> None:
        poller = select.poll()
        # While the broker receives, this side hears of the listener only its
        # hang-up (the last agent process gone): no wake-up per call.
        poller.register(self.fd, select.POLLIN if self.table is None else 0)
        poller.register(self.broker.fileno(), select.POLLIN)
        while True:
            for fd, ev in poller.poll():
                if fd == self.fd:
                    if ev & (select.POLLHUP | select.POLLERR) and not ev & select.POLLIN:
                        return  # no process uses the filter any more
                    try:
                        n = notify.recv(self.fd)
                    except OSError:
                        continue  # the task died between poll and recv
                    self.caller = n.pid
                    try:
                        self._handle(n)
                    except OSError as e:
                        if debug():
                            self.warn(f"mediation of syscall {n.data.nr} failed: {e!r}")
                        self._respond(n.id, error=e.errno or errno.EPERM)
                    except Exception:  # never let a bug resume the agent unchecked
                        self._respond(n.id, error=errno.EPERM)
                else:
                    # Replies first; the hang-up comes with POLLIN too (recv gives 0
                    # bytes), so it is handled once nothing is left to read.
                    if ev & select.POLLIN and self._broker_reply():
                        continue
                    if ev & (select.POLLIN | select.POLLHUP | select.POLLERR):
                        poller.unregister(fd)
                        self.broker_gone = True
                        for p in self.pending.values():
                            self._lose(p.nid, p.lost, p.pid)
                        self.pending.clear()
                        if self.table is not None:
                            self._lose_held(self.table)
                            self.table = None
                            poller.modify(self.fd, select.POLLIN)

    def _handle(self, n: notify.Notif) -> None:
        handler = self.handlers.get(n.data.nr)
        if handler is None:
            return self._respond(n.id, error=errno.ENOSYS)
        handler(n)

    def _respond(self, nid: int, val: int = 0, error: int = 0) -> None:
        self._answered(nid, val, error)

    def _answered(self, nid: int, val: int = 0, error: int = 0) -> bool:
        """Answer a notification; False if its call was no longer waiting."""
        try:
            notify.respond(self.fd, nid, val=val, error=error)
        except OSError:
            return False  # the agent's call was interrupted; nothing to answer
        return True

    def _lose(self, nid: int, err: int, tid: int) -> None:
        """Fail a call (of thread `tid`) for want of a broker, and say so the first
        time it fails a process that goes on. At the end of a run the broker is
        killed together with the agent's last processes (the pid namespace's
        teardown, the cgroup kill, the leftover walk) in no set order, and a daemon
        the agent left (a tmux server) often outlives it by a few milliseconds: the
        calls of a process with SIGKILL queued are no loss to report. Judged before
        the answer, while the thread still waits for it (after, it may exit at once)."""
        if self.said_gone:
            self._respond(nid, error=err)
            return
        goes_on = notify.id_valid(self.fd, nid) and _goes_on(tid)
        if self._answered(nid, error=err) and goes_on:
            self.said_gone = True
            self.warn("the broker is gone (killed?): from now on every mediated "
                      "call fails (opens for writing, creates, renames, unix connects)")

    def _lose_held(self, table: inflight.Table) -> None:
        """The broker died holding notifications it received itself: fail each
        call still waiting (inflight.py: EIO, a unix connect ECONNREFUSED), then receive here (every call then
        fails for want of a broker, _send)."""
        for nid, err in table.held().items():
            if notify.id_valid(self.fd, nid):
                self._respond(nid, error=err)

    def _forwarded(self, data: bytes, fds: list[int]) -> None:
        """A notification the broker received and handed on: handled here as if
        received here, in this side's view (the thread's pid from the pidfd
        that came with it; every handler proves with ID_VALID that the thread
        still waits, so the pid is still that thread's). With a reply: the
        broker performed the call, this side says why and answers."""
        fwd = Forwarded.unpack(data)
        if fwd is None:
            return      # no id to answer: never sent by the broker (wire.Forwarded)
        n = notify.Notif()
        n.id = fwd.nid
        n.pid = self.pids.pid(fds[0]) if fds else 0
        n.data.nr = fwd.nr
        for i, a in enumerate(fwd.args):
            n.data.args[i] = a
        if n.pid <= 0:
            return self._respond(n.id, error=errno.EIO)    # gone: most likely nothing waits
        self.caller = n.pid
        if fwd.reply is None:
            try:
                self._handle(n)
            except OSError as e:
                self._respond(n.id, error=e.errno or errno.EPERM)
            except Exception:  # noqa: BLE001 - never let a bug resume the agent unchecked
                self._respond(n.id, error=errno.EPERM)
            return
        what: tuple | None = None
        decode = FILE_NR.get(fwd.nr)
        if decode is not None:
            try:
                got = gather_file(decode, n, self.tasks, self._take, True)
            except Exception:  # noqa: BLE001 - the message only, never the answer
                got = None
            if got is not None:
                for f in got.fds:
                    os.close(f)
                what = got.what
        self._give(fwd.reply, _Pending(n.id, fwd.cloexec, errno.EIO, what, pid=n.pid), fds[1:])

    def _broker_reply(self) -> bool:
        """Handle one reply; False when the broker has hung up."""
        try:
            data, fds, _, _ = socket.recv_fds(self.broker, REPLY_MAX, 2)
        except OSError:
            return False
        try:
            if not data:
                return False
            decoded = decode_reply(data)
            if decoded is None:
                return True
            rid, rep = decoded
            if rid == FORWARDED:
                self._forwarded(data, fds)
                return True
            got = self.pending.pop(rid, None)
            if got is None:
                return True
            if rep.ret < 0 and rep.err == ASK:
                try:
                    self._ask(rid, got, rep.reason)
                except Exception:  # noqa: BLE001 - never leave the broker waiting, never pass
                    try:
                        self.broker.send(VerdictRequest(0, rid, False, "the question failed").pack())
                    except OSError:
                        pass   # the broker is gone: its call fails with it
                return True
            if rep.ret < 0 and rep.err == UMASK_UNREAD:
                # nothing was made: from now on the umask is read here
                self.umask_here = True
                try:
                    if got.retry is None:
                        raise OSError(errno.EIO, "umask unread")
                    got.retry()
                except OSError as e:
                    self._respond(got.nid, error=e.errno or errno.EIO)
                except Exception:  # noqa: BLE001 - never leave the agent waiting, never pass
                    self._respond(got.nid, error=errno.EPERM)
                return True
            self._give(rep, got, fds)
            return True
        finally:
            for f in fds:
                os.close(f)

    def _give(self, rep: Reply, got: _Pending, fds: list[int]) -> None:
        """Say what the reply tells and answer the agent with it (fds: the file
        the broker opened for it, closed by the caller)."""
        self._said(rep, got)
        if got.then is not None:
            try:
                got.then(rep, fds)
            except Exception:  # noqa: BLE001 - never leave the agent waiting, never pass
                self._respond(got.nid, error=errno.EPERM)
            return
        if fds and rep.ret >= 0:
            try:
                notify.addfd_send(self.fd, got.nid, fds[0], got.cloexec)
            except OSError as e:
                if e.errno != errno.ENOENT:     # ENOENT: the call was interrupted
                    self._respond(got.nid, error=e.errno or errno.EIO)
            return
        self._respond(got.nid, val=rep.ret if rep.ret >= 0 else 0,
                      error=rep.err if rep.ret < 0 else 0)

    def _said(self, rep: Reply, got: _Pending) -> None:
        """What a reply tells the user: the guard's reason, or Landlock's or a
        read-only bind's refusal."""
        if rep.reason:
            self._report(rep.reason)
        elif rep.ret < 0 and rep.err in (errno.EACCES, errno.EROFS) and got.what is not None:
            try:
                self._landlock_refused(got.what, rep.err == errno.EROFS)
            except Exception:  # noqa: BLE001 - a message, never the agent's answer
                pass
        elif rep.ret < 0 and rep.err == errno.EBUSY and got.what is not None:
            try:
                self._busy(got.what)
            except Exception:  # noqa: BLE001 - a message, never the agent's answer
                pass

    def _send(self, nid: int, make: Callable[[int], bytes], fds: list[int], cloexec: bool,
              lost: int, what: tuple | None = None,
              then: Callable[[Any, list[int]], None] | None = None, direct: bool = False,
              retry: Callable[[], None] | None = None) -> bool:
        """Hand the request make(request id) to the broker; the agent gets
        `lost` if it cannot be sent (False) or the broker dies before answering."""
        rid = self.next_id
        self.next_id += 1
        try:
            msg = make(rid)
            try:
                socket.send_fds(self.post, [msg], fds)
            except BlockingIOError:
                socket.send_fds(self.broker, [msg], fds)
        except OSError as e:
            if self.broker_gone or e.errno in (errno.EPIPE, errno.ECONNRESET, errno.ENOTCONN):
                self._lose(nid, lost, self.caller)
            else:
                self._respond(nid, error=lost)
            return False
        self.pending[rid] = _Pending(nid, cloexec, lost, what, then, direct, retry, self.caller)
        if len(self.pending) >= self.prune_at:
            self._prune()
        return True

    def _prune(self) -> None:
        """Forget the requests the broker answered itself: their notification
        is no longer waiting (id_valid). One still waiting stays, so a broker
        that dies leaves it `lost`, never unanswered."""
        for rid, p in list(self.pending.items()):
            if p.direct and not notify.id_valid(self.fd, p.nid):
                del self.pending[rid]
        # calls that wait long (FIFOs) stay: prune again only once as many more came
        self.prune_at = max(PRUNE_AT, 2 * len(self.pending))

    # -- decisions

    def _report(self, what: str) -> None:
        """Each distinct denial once; a flood (a checkout full of refused files)
        is cut short rather than burying the terminal (Events bounds its own).
        A held name (protect/held.py) is no refusal: the call succeeded, the file
        went to the held area; said once per path, logged as such. Nor is a
        write the engine approved (wire.APPROVED_WRITE): the file it made is
        handed to the engine for the exit check."""
        if what.startswith(APPROVED_WRITE):
            return self._approved_write(what[len(APPROVED_WRITE):])
        if what.startswith("held "):
            if self.events is not None:
                self.events.emit({"event": "held", "what": what})
            if what not in self.denied and len(self.denied) < MAX_REPORTED:
                self.denied.add(what)
                self.warn(what)
            return
        if self.events is not None:
            try:
                self.events.mediated(what)
            except Exception:  # noqa: BLE001 - saying it must never stop the mediator
                try:
                    self.warn(f"denied: {what}")
                except Exception:  # noqa: BLE001
                    pass
            return
        if what in self.denied:
            return
        if len(self.denied) < MAX_REPORTED:
            self.denied.add(what)
            self.warn(what if what.startswith("held ") else f"denied: {what}")
            return
        self.unshown += 1
        if self.unshown == 1:
            self.warn(f"more than {MAX_REPORTED} different denials: no more are shown")

    def _approved_write(self, what: str) -> None:
        rel, _, ident = what.partition("\0")
        dev, _, ino = ident.partition(":")
        if self.approval is None or not (dev.isdigit() and ino.isdigit()):
            return
        self.approval.landed(rel, int(dev), int(ino))
        if rel not in self.denied and len(self.denied) < MAX_REPORTED:
            self.denied.add(rel)
            self.warn(f"approved: create {printable(rel)} (a protected name): kept by the exit "
                      "check as long as it is this file")

    def _landlock_refused(self, what: tuple, rofs: bool = False) -> None:
        """The broker, in the agent's Landlock domain, got EACCES without the
        guard refusing: Landlock's refusal, said even where its own records
        cannot be read (events decides; only paths outside every write grant);
        rofs: EROFS, the read-only view of the host refused a write.
        The agent's thread still waits for this answer, so its cwd and
        descriptors are the ones the call used; the path is for the message
        only, never for a decision."""
        if self.events is None:
            return
        if len(what) == 2:
            if not rofs:
                self.events.connect_refused(*what)
            return
        tid, dfd, raw, creates = what[:4]
        path = _shown(tid, dfd, raw)
        if path is not None and not _dac_denies(path, creates, self.uid):
            self.events.write_refused(path, creates, rofs)

    def _busy(self, what: tuple) -> None:
        """A rename's source is a mount point (EBUSY): a protected path bound
        read-only for the run (events knows which)."""
        if self.events is None or len(what) < 5 or what[4] is None:
            return
        path = _shown(what[0], *what[4])
        if path is not None:
            self.events.busy(path)

    def _deny(self, nid: int, what: str, quiet: bool = False) -> None:
        if not quiet:
            self._report(what)
        self._respond(nid, error=errno.EACCES)

    # -- socket calls

    def _connect(self, n: notify.Notif) -> None:
        a = list(n.data.args)
        addrlen = a[2] & 0xFFFFFFFF
        if addrlen > MAX_ADDR:
            return self._respond(n.id, error=errno.EINVAL)
        raw = notify.read_mem(n.pid, a[1], addrlen)
        self._socket(n, _SocketCall(Op.CONNECT, a[0], 0, raw, b"", []))

    def _sendto(self, n: notify.Notif) -> None:
        a = list(n.data.args)
        addrlen = a[5] & 0xFFFFFFFF
        if addrlen > MAX_ADDR:
            return self._respond(n.id, error=errno.EINVAL)
        raw = notify.read_mem(n.pid, a[4], addrlen) if a[4] else b""
        data = notify.read_mem(n.pid, a[1], min(a[2], DATA_CAP))
        self._socket(n, _SocketCall(Op.SENDTO, a[0], a[3] & 0xFFFFFFFF, raw, data, [], a[2]))

    def _sendmsg(self, n: notify.Notif) -> None:
        pid, nid = n.pid, n.id
        a = list(n.data.args)
        hdr = MsgHdr.from_buffer_copy(notify.read_mem(pid, a[1], MSGHDR_SIZE))
        if hdr.msg_namelen > MAX_ADDR:
            return self._respond(nid, error=errno.EINVAL)
        raw = notify.read_mem(pid, hdr.msg_name, hdr.msg_namelen) if hdr.msg_name else b""
        if hdr.msg_iovlen > 1024:
            return self._respond(nid, error=errno.EMSGSIZE)
        iovs = notify.read_mem(pid, hdr.msg_iov, IOVEC.size * hdr.msg_iovlen) if hdr.msg_iovlen else b""
        chunks, total = [], 0
        for i in range(hdr.msg_iovlen):
            base, ln = IOVEC.unpack_from(iovs, IOVEC.size * i)
            take = min(ln, DATA_CAP - total)
            if take:
                chunks.append(notify.read_mem(pid, base, take))
                total += take
            if ln > take:
                break
        passed = self._control(pid, hdr, nid)
        if passed is None:
            return
        self._socket(n, _SocketCall(Op.SENDMSG, a[0], a[2] & 0xFFFFFFFF, raw, b"".join(chunks),
                                    passed))

    def _socket(self, n: notify.Notif, call: _SocketCall) -> None:
        """Take the agent's socket (and the descriptors it passes), decide on
        the address, and hand the call to the broker."""
        pid, nid = n.pid, n.id
        if self.refuse_abstract and _abstract(call.raw):
            name = call.raw[3:].split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
            self._report(f"abstract unix socket @{name[:80]}: refused (no network namespace, "
                         "and Landlock below ABI 6 cannot scope abstract sockets)")
            return self._respond(nid, error=errno.EPERM)
        fds: list[int] = []
        passed: list[int] = []
        # the thread's pidfd, kept by the cache (no pidfd_open and close per call)
        pidfd = self.tasks.facts(pid, umask=False)[3]
        try:
            fds.append(self._take_socket(pid, pidfd, call.fd & 0xFFFFFFFF))
        except sockfd.Replace as r:
            return sockfd.perform(self, n, call, r.kind)
        try:
            if call.passed and not self.getfd:
                raise sockfd.refuse_passing(self._report)
            for afd in call.passed:
                passed.append(self._take_socket(pid, pidfd, afd))
        except OSError:
            for f in fds + passed:
                os.close(f)
            raise
        try:
            # Everything above was read from the agent: make sure the thread that
            # asked is still waiting (its pid cannot have been reused meanwhile).
            if not notify.id_valid(self.fd, nid):
                return
            self._socket_call(n, call, fds[0], passed)
        finally:
            for f in fds + passed:
                os.close(f)

    def _socket_call(self, n: notify.Notif, call: _SocketCall, sock: int, passed: list[int],
                     then: Callable[[Any, list[int]], None] | None = None) -> bool:
        """Decide on the address and hand the call on `sock` (the agent's
        socket, or one made for it: then `then` gets the reply) to the broker;
        False if it was answered here."""
        pid, nid = n.pid, n.id
        fds: list[int] = []
        try:
            try:
                stype = socket.socket(fileno=sock)
            except OSError:
                stype = None
            is_stream = stype is not None and stype.type == socket.SOCK_STREAM
            family = stype.family if stype is not None else None
            if stype is not None:
                stype.detach()      # only asked: `sock` stays the caller's
            if call.op == Op.SENDTO and call.full and call.full > DATA_CAP and not is_stream:
                self._respond(nid, error=errno.EMSGSIZE)
                return False
            raw = call.raw
            if raw and is_stream and call.op != Op.CONNECT:
                raw = b""  # a connected stream socket ignores the address
            if self.inet is not None and family in (socket.AF_INET, socket.AF_INET6):
                got = self._inet_route(nid, pid, call.op == Op.CONNECT, raw, sock, family)
                if got is None:
                    return False
                raw = got
            resolve = _pathname(raw)
            port = _inet_port(call.raw) if call.op == Op.CONNECT else 0
            # the address the agent asked for: a refused one is said as it wrote it
            what = (port, _inet_host(call.raw, family)) if port else None
            tgid = tid = 0
            if resolve:
                # The agent's cwd (its own, by its thread id: not a name it chose),
                # for a relative address; the broker resolves it (files.unix_target).
                if raw[2] != ord("/"):
                    fds.append(os.open(f"/proc/{pid}/cwd",
                                       os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC))
                _, tgid, tid, _ = self.tasks.facts(pid, umask=False)
            # The broker answers the agent itself unless the reply is for `then`
            # (a socket made for the agent) or has something to say (broker._answer).
            answer = ANSWER if then is None else 0
            return self._send(nid, lambda rid: SocketRequest(rid, call.op, call.flags, resolve,
                                                             raw, call.data, len(passed), tgid,
                                                             tid, nid, answer).pack(),
                              [sock] + fds + passed, False, errno.ECONNREFUSED, what, then,
                              direct=then is None)
        finally:
            for f in fds:
                os.close(f)

    def _inet_route(self, nid: int, pid: int, connect: bool, raw: bytes, sockfd: int,
                    family: int) -> bytes | None:
        """The IPv4/IPv6 destination the broker may use (inet.py), or None when
        the call was answered here (refused)."""
        assert self.inet is not None
        try:
            out = inet.route(self.inet, connect, raw, sockfd, pid)
        except inet.Refuse as r:
            self._respond(nid, error=r.errno)
            return None
        except OSError as e:
            self._respond(nid, error=e.errno or errno.EACCES)
            return None
        if not inet.final_check(out, family, connect):
            # never reached by design: a rewriting bug refuses, it does not open
            self._respond(nid, error=errno.EACCES)
            return None
        return out

    def _sendmmsg(self, n: notify.Notif) -> None:
        """sendmmsg: the glibc resolver sends its A and AAAA queries with one call
        on a connected UDP socket. Only IPv4/IPv6 sockets, only messages without
        an address or control data (their destination is the peer a mediated
        connect chose); performed here without blocking, msg_len written back.
        Anything else is refused as before (EPERM): use sendmsg."""
        pid, nid = n.pid, n.id
        a = [int(x) for x in n.data.args]
        vec, vlen, flags = a[1], min(a[2] & 0xFFFFFFFF, inet.MAX_MMSG), a[3] & 0xFFFFFFFF
        if self.inet is None or flags & inet.MSG_FASTOPEN:
            return self._respond(nid, error=errno.EPERM)
        if vlen == 0:
            return self._respond(nid, val=0)
        pidfd = _pidfd(pid)
        try:
            sfd = self._take_socket(pid, pidfd, a[0] & 0xFFFFFFFF)
        except sockfd.Replace as r:
            return sockfd.refuse_mmsg(self, nid, r.kind)
        finally:
            os.close(pidfd)
        try:
            try:
                s = socket.socket(fileno=os.dup(sfd))
            except OSError:
                return self._respond(nid, error=errno.ENOTSOCK)
            fam, stream = s.family, s.type == socket.SOCK_STREAM
            s.close()
            if fam not in (socket.AF_INET, socket.AF_INET6):
                return self._respond(nid, error=errno.EPERM)
            msgs = self._mmsg_data(pid, vec, vlen, stream)
            if isinstance(msgs, int):
                return self._respond(nid, error=msgs)
            if not notify.id_valid(self.fd, nid):
                return
            sent, err = inet.send_all(sfd, msgs, flags)
        finally:
            os.close(sfd)
        if not sent:
            return self._respond(nid, error=err or errno.EIO)
        for i, ln in enumerate(sent):
            try:
                notify.write_mem(pid, vec + inet.MMSGHDR_SIZE * i + MSGHDR_SIZE,
                                 struct.pack("<I", ln))
            except OSError:
                break
        self._respond(nid, val=len(sent))

    @staticmethod
    def _mmsg_data(pid: int, vec: int, vlen: int, stream: bool) -> list[bytes] | int:
        """The data of each message (an errno instead when one is refused). A
        message larger than the copy cap ends the batch: a stream gets it as a
        short write, a datagram EMSGSIZE (never a truncated datagram)."""
        raw = notify.read_mem(pid, vec, inet.MMSGHDR_SIZE * vlen)
        msgs: list[bytes] = []
        total = 0
        for i in range(vlen):
            hdr = MsgHdr.from_buffer_copy(raw, inet.MMSGHDR_SIZE * i)
            if (hdr.msg_name and hdr.msg_namelen) or (hdr.msg_control and hdr.msg_controllen):
                return errno.EPERM
            if hdr.msg_iovlen > 1024:
                return errno.EMSGSIZE
            iovs = (notify.read_mem(pid, hdr.msg_iov, IOVEC.size * hdr.msg_iovlen)
                    if hdr.msg_iovlen else b"")
            parts: list[bytes] = []
            have, cut = 0, False
            for j in range(hdr.msg_iovlen):
                base, ln = IOVEC.unpack_from(iovs, IOVEC.size * j)
                take = min(ln, inet.MAX_DGRAM - have)
                if take:
                    parts.append(notify.read_mem(pid, base, take))
                    have += take
                cut = cut or take < ln
            if cut and not stream:
                return errno.EMSGSIZE if not msgs else msgs
            msgs.append(b"".join(parts))
            total += have
            if cut or total >= DATA_CAP:
                break
        return msgs

    def _control(self, pid: int, hdr: MsgHdr, nid: int) -> list[int] | None:
        """Descriptors passed with SCM_RIGHTS (agent numbers); None if refused."""
        if not hdr.msg_control or not hdr.msg_controllen:
            return []
        if hdr.msg_controllen > 4096:
            self._respond(nid, error=errno.EINVAL)
            return None
        fds = parse_rights(notify.read_mem(pid, hdr.msg_control, hdr.msg_controllen))
        if fds is None:
            # SCM_CREDENTIALS would name the broker, not the agent: refuse.
            self._respond(nid, error=errno.EPERM)
        return fds

    def _listen(self, n: notify.Notif) -> None:
        """listen() on an unbound TCP socket binds an ephemeral port without
        Landlock's BIND_TCP check; refuse that, and let the broker perform the
        rest on the very socket inspected here (listen itself is not a Landlock
        right). Not performed here: the listener's credentials are what every
        client gets as SO_PEERCRED/SO_PEERPIDFD, and here they are root's and
        the supervisor's. Not resumed with CONTINUE either: the kernel would
        look the descriptor number up again, and another thread of the agent
        can dup2() an unbound TCP socket onto it between the check and the
        call. Whether a socket is bound only ever changes from no to yes, so
        the check still holds when the broker listens."""
        nid = n.id
        fd, backlog = n.data.args[0] & 0xFFFFFFFF, n.data.args[1] & 0xFFFFFFFF
        pidfd = _pidfd(n.pid)
        try:
            sfd = self._take_socket(n.pid, pidfd, fd)
        except sockfd.Replace as r:
            return sockfd.listen(self, n, r.kind, backlog)
        finally:
            os.close(pidfd)
        try:
            s = socket.socket(fileno=sfd)
        except OSError as e:
            os.close(sfd)
            return self._respond(nid, error=e.errno)
        try:
            if not notify.id_valid(self.fd, nid):
                return
            if s.family in (socket.AF_INET, socket.AF_INET6) and s.getsockname()[1] == 0:
                return self._deny(nid, "listen() on a TCP socket with no port bound "
                                       "(would bind an ephemeral port without Landlock)")
            self._send(nid, lambda rid: SocketRequest(rid, Op.LISTEN, min(backlog, 0x7FFFFFFF),
                                                      False, b"", b"", 0, nid=nid,
                                                      answer=ANSWER).pack(),
                       [s.fileno()], False, errno.EACCES, direct=True)
        finally:
            s.close()

    def _bind(self, n: notify.Notif) -> None:
        """bind(), notified only where the host refuses pidfd_getfd: the broker
        binds a new socket that replaces the agent's (sockfd.bind)."""
        a = [int(x) for x in n.data.args]
        addrlen = a[2] & U32
        if addrlen > MAX_ADDR:
            return self._respond(n.id, error=errno.EINVAL)
        raw = notify.read_mem(n.pid, a[1], addrlen) if addrlen else b""
        pidfd = _pidfd(n.pid)
        try:
            sfd = self._take_socket(n.pid, pidfd, a[0] & U32, keep=True)
        except sockfd.Replace as r:
            return sockfd.bind(self, n, raw, r.kind, None)
        finally:
            os.close(pidfd)
        try:
            sockfd.bind(self, n, raw, None, sfd)
        finally:
            os.close(sfd)

    def _setsockopt(self, n: notify.Notif) -> None:
        """setsockopt() of what a mediated bind must know (kernel.seccomp
        NOFD_SOCKOPTS), notified only where pidfd_getfd is refused (sockfd.setsockopt)."""
        a = [int(x) for x in n.data.args]
        optlen = a[4] & U32
        if optlen > 64:
            return self._respond(n.id, error=errno.EINVAL)
        value = notify.read_mem(n.pid, a[3], optlen) if optlen else b""
        pidfd = _pidfd(n.pid)
        try:
            sfd = self._take_socket(n.pid, pidfd, a[0] & U32, keep=True)
        except sockfd.Replace as r:
            return sockfd.setsockopt(self, n, a[1] & U32, a[2] & U32, value, r.kind, None)
        finally:
            os.close(pidfd)
        try:
            sockfd.setsockopt(self, n, a[1] & U32, a[2] & U32, value, None, sfd)
        finally:
            os.close(sfd)

    # -- file calls

    def _file(self, decode: Callable[[list[int], int], _FileCall | None], n: notify.Notif) -> None:
        """A file-system call: copy its strings, take the agent's directories,
        and let the broker judge and perform it (files.py)."""
        nid = n.id
        got = gather_file(decode, n, self.tasks, self._take, self.umask_here)
        if got is None:
            return self._respond(nid, error=errno.EINVAL)
        try:
            if not notify.id_valid(self.fd, nid):
                return
            self._send(nid, lambda rid: got.request(rid).pack(), got.fds, got.cloexec, errno.EIO, got.what, direct=True,
                       retry=functools.partial(self._file, decode, n) if got.later else None)
        finally:
            for f in got.fds:
                os.close(f)

    # -- metadata calls (no mount namespace)

    def _meta(self, decode: Callable[[list[int], int], _MetaCall | None],
              n: notify.Notif) -> None:
        """chmod/chown/utime/xattr: copy the path, name, value and times, take
        the directory (or the descriptor itself), and let the broker judge the
        very file against the writable paths and perform the call."""
        pid, nid = n.pid, n.id
        call = decode([int(x) for x in n.data.args], pid)
        if call is None:
            return self._respond(nid, error=errno.EINVAL)
        flags = call.flags
        if call.path is None:
            path = b""
            flags |= AT_EMPTY_PATH
            if _fd_flags(pid, _i32(call.dfd)) & O_PATH_FLAG:
                return self._respond(nid, error=errno.EBADF)   # as the kernel: no O_PATH
        else:
            path = notify.read_cstr(pid, call.path) if call.path else b""
            if not call.path and not flags & AT_EMPTY_PATH:
                return self._respond(nid, error=errno.EFAULT)
        if not path and not flags & AT_EMPTY_PATH:
            return self._respond(nid, error=errno.ENOENT)
        name = value = b""
        if call.op in (Op.SETXATTR, Op.REMOVEXATTR):
            try:
                name = notify.read_cstr(pid, call.name, XATTR_NAME_MAX + 1)
            except OSError as e:
                if e.errno == errno.ENAMETOOLONG:
                    return self._respond(nid, error=errno.ERANGE)
                raise
            if not name:
                return self._respond(nid, error=errno.ERANGE)
            addr, size = call.value
            if size > XATTR_SIZE_MAX:
                return self._respond(nid, error=errno.E2BIG)
            value = notify.read_mem(pid, addr, size) if size else b""
        elif call.op == Op.UTIMES and call.times is not None:
            got = _times(pid, *call.times)
            if got is None:
                return self._respond(nid, error=errno.EINVAL)
            value = got
        _, tgid, tid, pidfd = self.tasks.facts(pid, umask=False)
        fds: list[int] = []
        index = -1
        if not path.startswith(b"/"):
            dfd = _i32(call.dfd)
            if dfd == AT_FDCWD:
                fds.append(os.open(f"/proc/{pid}/cwd", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC))
            else:
                fds.append(self._take(pid, dfd, pidfd))
            index = 0
        try:
            if not notify.id_valid(self.fd, nid):
                return
            self._send(nid, lambda rid: MetaRequest(
                rid, call.op, flags, index, path, call.mode & U32, call.uid & U32,
                call.gid & U32, name, value, tgid, tid).pack(), fds, False, errno.EIO)
        finally:
            for f in fds:
                os.close(f)


class Gathered(NamedTuple):
    """A file call read out of the agent: the request (request(rid)), the
    descriptors it names (the caller closes them), the message facts (see
    _Pending.what), and whether its umask is left to the broker (later)."""
    request: Callable[[int], FileRequest]
    fds: list[int]
    what: tuple
    cloexec: bool
    later: bool


def gather_file(decode: Callable[[list[int], int], _FileCall | None], n: notify.Notif,
                tasks: Tasks, take: Callable[[int, int, int], int],
                umask_here: bool) -> Gathered | None:
    """Copy a file call's paths and take its directories (the agent's cwd, or
    the descriptor it named), in the view of whoever calls it: the
    supervisor, or the broker receiving the call itself (broker.py). None:
    the arguments are invalid (EINVAL). The caller checks ID_VALID after."""
    pid, nid = n.pid, n.id
    call = decode([int(x) for x in n.data.args], pid)
    if call is None:
        return None
    strs = [notify.read_cstr(pid, addr) for _, addr in call.paths]
    # The umask where a name may be made; the broker reads it itself for a
    # mkdir or a plain O_CREAT (mostly of names that exist), if it makes one.
    needs = call.op in (Op.MKDIR, Op.MKNOD) or (
        call.op == Op.OPEN and bool(call.flags & (os.O_CREAT | _O_TMPFILE)))
    later = needs and not umask_here and (call.op == Op.MKDIR or (
        call.op == Op.OPEN and call.flags & (os.O_EXCL | _O_TMPFILE) == 0))
    umask, tgid, tid, pidfd = tasks.facts(pid, needs and not later)
    if later:
        umask = UMASK_READ
    fds: list[int] = []
    index: list[int] = []
    cwd = -1        # one cwd for both names of a rename or link (as one lookup would see)
    try:
        for (dfd, _), path in zip(call.paths, strs, strict=True):
            if path.startswith(b"/"):
                index.append(-1)
                continue
            dfd = _i32(dfd)
            if dfd == AT_FDCWD and cwd >= 0:
                index.append(cwd)
                continue
            if dfd == AT_FDCWD:
                fds.append(os.open(f"/proc/{pid}/cwd", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC))
                cwd = len(fds) - 1
            else:
                fds.append(take(pid, dfd, pidfd))
            index.append(len(fds) - 1)
    except OSError:
        for f in fds:
            os.close(f)
        raise
    # the name a call makes (a rename's or link's destination), or writes
    made = 1 if call.op in (Op.RENAME, Op.LINK) else 0
    creates = (call.op not in (Op.OPEN, Op.TRUNCATE)
               or (call.op == Op.OPEN and bool(call.flags & os.O_CREAT)))
    what = (pid, _i32(call.paths[made][0]), strs[made], creates,
            (_i32(call.paths[0][0]), strs[0]) if call.op == Op.RENAME else None)
    index += [-1] * (2 - len(index))
    strs += [b""] * (2 - len(strs))
    cloexec = call.op == Op.OPEN and bool(call.flags & os.O_CLOEXEC)

    def request(rid: int) -> FileRequest:
        return FileRequest(rid, call.op, call.flags, call.mode & 0xFFFFFFFF, call.arg, umask,
                           tgid, tid, (index[0], index[1]), (strs[0], strs[1]), call.target,
                           nid, ANSWER | (ANSWER_CLOEXEC if cloexec else 0))
    return Gathered(request, fds, what, cloexec, later)


def _fd_flags(pid: int, fd: int) -> int:
    """The open flags of the agent's descriptor (its fdinfo); 0 if unreadable
    (the broker then meets the file as it is)."""
    try:
        with open(f"/proc/{pid}/fdinfo/{fd}") as f:
            for line in f:
                if line.startswith("flags:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return 0


_TIMESPEC2 = struct.Struct("<qqqq")


def _times(pid: int, kind: str, addr: int) -> bytes | None:
    """Two struct timespec from utime's utimbuf, utimes' timeval or utimensat's
    timespec (b"": the current time); None: invalid (EINVAL)."""
    if not addr:
        return b""
    if kind == "utimbuf":
        a, m = struct.unpack("<qq", notify.read_mem(pid, addr, 16))
        return _TIMESPEC2.pack(a, 0, m, 0)
    raw = notify.read_mem(pid, addr, 32)
    if kind == "timespec":
        return raw
    s1, u1, s2, u2 = _TIMESPEC2.unpack(raw)
    if not (0 <= u1 < 1_000_000 and 0 <= u2 < 1_000_000):
        return None
    return _TIMESPEC2.pack(s1, u1 * 1000, s2, u2 * 1000)


def _at(flags: int) -> int | None:
    """An *at call's flags, if only the ones these calls know are set."""
    flags = _i32(flags)
    return None if flags & ~(AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH) else flags


def _abstract(raw: bytes) -> bool:
    """raw is an abstract unix address (family AF_UNIX, sun_path[0] NUL, a name)."""
    return len(raw) > 2 and int.from_bytes(raw[:2], sys.byteorder) == socket.AF_UNIX \
        and raw[2] == 0


def _pathname(raw: bytes) -> bool:
    """raw is a pathname unix address (not abstract, not unnamed, not another
    family: for those Landlock scopes and port rules decide)."""
    return (len(raw) > 2 and struct.unpack_from("<H", raw)[0] == socket.AF_UNIX
            and raw[2] != 0)


def _shown(tid: int, dfd: int, raw: bytes) -> str | None:
    """The absolute path a call named, for a message (the thread still waits
    for its answer, so its cwd and descriptors are the ones it used)."""
    path = os.fsdecode(raw)
    if not path.startswith("/"):
        try:
            base = os.readlink(f"/proc/{tid}/cwd" if dfd == AT_FDCWD else f"/proc/{tid}/fd/{dfd}")
        except OSError:
            return None
        path = os.path.join(base, path)
    return os.path.normpath(path)


def _dac_denies(path: str, creates: bool, uid: int) -> bool:
    """The file's own permissions refuse `uid` writing (or creating) `path`
    (as this process sees it): then no grant would help, and the EACCES is
    not Landlock's to explain. Unknown, or allowed by the group bits (the
    agent's groups are not known here): False."""
    if uid == 0:
        return False
    try:
        st = os.stat(path)
        need = 0o2
    except OSError:
        st = None
    if st is None or (creates and not os.path.exists(path)):
        try:
            st = os.stat(os.path.dirname(path) or "/")
        except OSError:
            return False
        need = 0o3
    if st.st_uid == uid:
        return (st.st_mode >> 6) & need != need
    if (st.st_mode >> 3) & need == need:
        return False
    return st.st_mode & need != need


def _inet_host(raw: bytes, family: int | None) -> str:
    """The address of an IPv4/IPv6 sockaddr as text ("" for anything else)."""
    got = inet.parse(raw, family or socket.AF_INET) if family is not None else None
    return "" if got is None else str(got[0])


def _inet_port(raw: bytes) -> int:
    """The port of an IPv4/IPv6 address (0 for anything else)."""
    if len(raw) >= 4 and struct.unpack_from("<H", raw)[0] in (socket.AF_INET, socket.AF_INET6):
        return int(struct.unpack_from(">H", raw, 2)[0])
    return 0


def _pidfd_pid(pidfd: int) -> int:
    """The pid, in this side's view, of the thread a pidfd refers to (its
    fdinfo); 0 if gone or unknown."""
    try:
        with open(f"/proc/self/fdinfo/{pidfd}", "rb") as f:
            for line in f:
                if line.startswith(b"Pid:"):
                    return max(int(line.split()[1]), 0)
    except (OSError, ValueError, IndexError):
        pass
    return 0


PIDFS_MAGIC = 0x50494446


class PidfdPids:
    """_pidfd_pid without parsing fdinfo for every forwarded call (about 15 us
    of the unix connect's cost): on pidfs (Linux 6.9) a pidfd's inode number
    names its struct pid, unique for the boot and never reused, and a struct
    pid's number in this pid namespace never changes while it lives. So the
    pid first read from fdinfo is cached by inode; the pidfd that comes with
    the call keeps that struct pid alive, so a later pid with the same number
    (reuse) is another struct pid, another inode, another entry. A thread that
    exited is still refused (0) as fdinfo would: its pidfd polls readable.
    Where pidfds are anonymous inodes (one inode for all) nothing is cached."""

    CAP = 256

    def __init__(self) -> None:
        self.by_ino: dict[int, int] = {}
        self.unique: bool | None = None     # pidfs: known on the first pidfd

    def pid(self, pidfd: int) -> int:
        if self.unique is None:
            # not readlink: a pidfs pidfd still reads "anon_inode:[pidfd]"
            self.unique = _fstype(pidfd) == PIDFS_MAGIC
        if not self.unique:
            return _pidfd_pid(pidfd)
        try:
            ino = os.fstat(pidfd).st_ino
        except OSError:
            return 0
        got = self.by_ino.get(ino)
        if got is None:
            got = _pidfd_pid(pidfd)
            if got <= 0:
                return 0
            if len(self.by_ino) >= self.CAP:
                del self.by_ino[next(iter(self.by_ino))]
            self.by_ino[ino] = got
            return got
        # a PIDFD_THREAD pidfd polls readable once its thread exited (and a
        # process pidfd once the whole group did): fdinfo would say -1 then
        if select.select([pidfd], [], [], 0)[0]:
            del self.by_ino[ino]
            return 0
        return got


def _pidfd(tid: int) -> int:
    """A pidfd for the notifying thread (PIDFD_THREAD, Linux 6.9) or, on older
    kernels, for its thread group; id_valid() later proves it was not reused."""
    try:
        return notify.pidfd_open(tid, notify.PIDFD_THREAD)
    except OSError as e:
        if e.errno != errno.EINVAL:
            raise
    with open(f"/proc/{tid}/status") as f:
        tgid = next(int(line.split()[1]) for line in f if line.startswith("Tgid:"))
    return notify.pidfd_open(tgid)


def _task_facts(tid: int) -> tuple[int, int, int]:
    """umask, and the thread's process and thread ids in its own pid namespace
    (what "self" and "thread-self" mean in its /proc)."""
    fd = os.open(f"/proc/{tid}/status", os.O_RDONLY | os.O_CLOEXEC)
    try:
        raw = _read_all(fd)
    finally:
        os.close(fd)
    return (_status_umask(raw), *_status_ids(raw, tid))


def _read_all(fd: int) -> bytes:
    chunks = []
    while True:
        b = os.read(fd, 65536)
        if not b:
            return b"".join(chunks)
        chunks.append(b)


def _status_umask(raw: bytes) -> int:
    """The Umask: line of a /proc/TID/status text (0o022 if absent, as _task_facts)."""
    i = raw.find(b"\nUmask:")
    if i < 0:
        return 0o022
    end = raw.find(b"\n", i + 7)
    return int(raw[i + 7:end if end >= 0 else len(raw)], 8)


def _status_ids(raw: bytes, tid: int) -> tuple[int, int]:
    """NStgid and NSpid (innermost namespace) of a /proc/TID/status text."""
    tgid, nstid = tid, tid
    for line in raw.split(b"\n"):
        if line.startswith(b"NStgid:"):
            tgid = int(line.split()[-1])
        elif line.startswith(b"NSpid:"):
            nstid = int(line.split()[-1])
    return tgid, nstid


class Tasks:
    """_task_facts without parsing /proc/TID/status on every call: a thread's
    ids in its pid namespace never change while it lives, but its host tid is
    reused once it is reaped. So each entry keeps the thread's status file
    open; a read through that descriptor fails (ESRCH) once the thread it was
    opened for is gone, so a read that succeeds proves no other thread holds
    this tid yet, and the notifying thread, which held it before and (the
    caller's id_valid afterwards) still holds it, is the one cached. The same
    read gives the umask, which changes at any time (umask(2), or another
    process sharing its fs_struct): read on every call that needs it, never
    cached. A call that needs no umask is proved the same way by the thread's
    own pidfd (PIDFD_THREAD, Linux 6.9): it polls readable once the thread is
    gone, before its tid can be given to another."""

    CAP = 64        # two descriptors each (status, pidfd), far below RLIMIT_NOFILE

    def __init__(self) -> None:
        # tid -> (status fd, pidfd, NStgid, NSpid, a poll of the pidfd if it is
        # the thread's own, else None)
        self.by_tid: dict[int, tuple[int, int, int, int, select.poll | None]] = {}

    def facts(self, tid: int, umask: bool = True) -> tuple[int, int, int, int]:
        """(umask, tgid, tid in its namespace, a pidfd for it). The pidfd stays
        owned by the cache (closed when the entry goes). Without `umask` the
        umask given is 0o777 (nothing would be granted if it were used)."""
        got = self.by_tid.get(tid)
        if got is not None:
            if not umask and got[4] is not None:
                if not got[4].poll(0):
                    return 0o777, got[2], got[3], got[1]
            else:
                try:
                    raw = os.pread(got[0], 512, 0)
                except OSError:
                    raw = b""
                if raw:
                    return _status_umask(raw), got[2], got[3], got[1]
            self._drop(tid)
        sfd = os.open(f"/proc/{tid}/status", os.O_RDONLY | os.O_CLOEXEC)
        try:
            raw = _read_all(sfd)
            tgid, nstid = _status_ids(raw, tid)
            # After the status file: that file's read on the next call proves
            # this pidfd is of the same thread too.
            watch: select.poll | None = None
            try:
                pidfd = notify.pidfd_open(tid, notify.PIDFD_THREAD)
                watch = select.poll()
                watch.register(pidfd, select.POLLIN)
            except OSError as e:
                if e.errno != errno.EINVAL:
                    raise
                pidfd = _pidfd(tid)
        except BaseException:
            os.close(sfd)
            raise
        if not raw:
            os.close(sfd)
            os.close(pidfd)
            raise OSError(errno.ESRCH, "no such thread")
        while len(self.by_tid) >= self.CAP:
            self._drop(next(iter(self.by_tid)))
        self.by_tid[tid] = (sfd, pidfd, tgid, nstid, watch)
        return _status_umask(raw), tgid, nstid, pidfd

    def clear(self) -> None:
        for tid in list(self.by_tid):
            self._drop(tid)

    def _drop(self, tid: int) -> None:
        sfd, pidfd, _, _, _ = self.by_tid.pop(tid)
        os.close(sfd)
        if pidfd >= 0:
            os.close(pidfd)


def _i32(v: int) -> int:
    """A syscall argument as the C int the kernel reads (dirfds, flags)."""
    return ctypes.c_int32(v & 0xFFFFFFFF).value


def _truncate(a: list[int], pid: int) -> _FileCall | None:
    if a[1] >= 1 << 63:
        return None                       # a negative length
    return _FileCall(Op.TRUNCATE, [(AT_FDCWD, a[0])], arg=a[1])


# Each notified syscall, by name: how its arguments become a broker request
# (a = the six raw arguments). None: answered EINVAL.
_FILE_DECODERS: dict[str, Callable[[list[int], int], _FileCall | None]] = {
    "open": lambda a, pid: _FileCall(Op.OPEN, [(AT_FDCWD, a[0])], _i32(a[1]), a[2]),
    "creat": lambda a, pid: _FileCall(Op.OPEN, [(AT_FDCWD, a[0])],
                                      os.O_CREAT | os.O_WRONLY | os.O_TRUNC, a[1]),
    "openat": lambda a, pid: _FileCall(Op.OPEN, [(a[0], a[1])], _i32(a[2]), a[3]),
    "truncate": _truncate,
    "mkdir": lambda a, pid: _FileCall(Op.MKDIR, [(AT_FDCWD, a[0])], mode=a[1]),
    "mkdirat": lambda a, pid: _FileCall(Op.MKDIR, [(a[0], a[1])], mode=a[2]),
    "mknod": lambda a, pid: _FileCall(Op.MKNOD, [(AT_FDCWD, a[0])], mode=a[1], arg=a[2]),
    "mknodat": lambda a, pid: _FileCall(Op.MKNOD, [(a[0], a[1])], mode=a[2], arg=a[3]),
    "symlink": lambda a, pid: _FileCall(Op.SYMLINK, [(AT_FDCWD, a[1])],
                                        target=notify.read_cstr(pid, a[0])),
    "symlinkat": lambda a, pid: _FileCall(Op.SYMLINK, [(a[1], a[2])],
                                          target=notify.read_cstr(pid, a[0])),
    "link": lambda a, pid: _FileCall(Op.LINK, [(AT_FDCWD, a[0]), (AT_FDCWD, a[1])]),
    "linkat": lambda a, pid: _FileCall(Op.LINK, [(a[0], a[1]), (a[2], a[3])], _i32(a[4])),
    "rename": lambda a, pid: _FileCall(Op.RENAME, [(AT_FDCWD, a[0]), (AT_FDCWD, a[1])]),
    "renameat": lambda a, pid: _FileCall(Op.RENAME, [(a[0], a[1]), (a[2], a[3])]),
    "renameat2": lambda a, pid: _FileCall(Op.RENAME, [(a[0], a[1]), (a[2], a[3])], _i32(a[4])),
    "unlink": lambda a, pid: _FileCall(Op.UNLINK, [(AT_FDCWD, a[0])]),
    "rmdir": lambda a, pid: _FileCall(Op.RMDIR, [(AT_FDCWD, a[0])]),
    "unlinkat": lambda a, pid: _unlinkat(a),
}


def _unlinkat(a: list[int]) -> _FileCall | None:
    """unlinkat(dirfd, path, flags): AT_REMOVEDIR is rmdir; any other flag EINVAL."""
    flags = _i32(a[2])
    if flags & ~AT_REMOVEDIR:
        return None
    return _FileCall(Op.RMDIR if flags & AT_REMOVEDIR else Op.UNLINK, [(a[0], a[1])])



def _meta_at(op: Op, dfd: int, path: int, flags: int, **kw: Any) -> _MetaCall | None:
    """An *at form: a NULL path is the descriptor's own file with AT_EMPTY_PATH,
    EFAULT without (as the kernel)."""
    f = _at(flags)
    if f is None:
        return None
    if not path and not f & AT_EMPTY_PATH:
        raise OSError(errno.EFAULT, "bad address")
    return _MetaCall(op, dfd, path, f, **kw)


_NOFOLLOW = AT_SYMLINK_NOFOLLOW
_META_DECODERS: dict[str, Callable[[list[int], int], _MetaCall | None]] = {
    "chmod": lambda a, pid: _MetaCall(Op.CHMOD, AT_FDCWD, a[0], mode=a[1]),
    "fchmod": lambda a, pid: _MetaCall(Op.CHMOD, a[0], None, mode=a[1]),
    "fchmodat": lambda a, pid: _MetaCall(Op.CHMOD, a[0], a[1], mode=a[2]),
    "fchmodat2": lambda a, pid: _meta_at(Op.CHMOD, a[0], a[1], a[3], mode=a[2]),
    "chown": lambda a, pid: _MetaCall(Op.CHOWN, AT_FDCWD, a[0], uid=a[1], gid=a[2]),
    "lchown": lambda a, pid: _MetaCall(Op.CHOWN, AT_FDCWD, a[0], _NOFOLLOW, uid=a[1], gid=a[2]),
    "fchown": lambda a, pid: _MetaCall(Op.CHOWN, a[0], None, uid=a[1], gid=a[2]),
    "fchownat": lambda a, pid: _meta_at(Op.CHOWN, a[0], a[1], a[4], uid=a[2], gid=a[3]),
    "utime": lambda a, pid: _MetaCall(Op.UTIMES, AT_FDCWD, a[0], times=("utimbuf", a[1])),
    "utimes": lambda a, pid: _MetaCall(Op.UTIMES, AT_FDCWD, a[0], times=("timeval", a[1])),
    # a NULL path acts on the descriptor (what glibc's futimens is)
    "futimesat": lambda a, pid: _MetaCall(Op.UTIMES, a[0], a[1] or None,
                                          times=("timeval", a[2])),
    "utimensat": lambda a, pid: (None if _at(a[3]) is None or (not a[1] and _at(a[3]) & _NOFOLLOW)
                                 else _MetaCall(Op.UTIMES, a[0], a[1] or None, _at(a[3]) or 0,
                                                times=("timespec", a[2]))),
    "setxattr": lambda a, pid: _MetaCall(Op.SETXATTR, AT_FDCWD, a[0], mode=a[4], name=a[1],
                                         value=(a[2], a[3])),
    "lsetxattr": lambda a, pid: _MetaCall(Op.SETXATTR, AT_FDCWD, a[0], _NOFOLLOW, mode=a[4],
                                          name=a[1], value=(a[2], a[3])),
    "fsetxattr": lambda a, pid: _MetaCall(Op.SETXATTR, a[0], None, mode=a[4], name=a[1],
                                          value=(a[2], a[3])),
    "removexattr": lambda a, pid: _MetaCall(Op.REMOVEXATTR, AT_FDCWD, a[0], name=a[1]),
    "lremovexattr": lambda a, pid: _MetaCall(Op.REMOVEXATTR, AT_FDCWD, a[0], _NOFOLLOW,
                                             name=a[1]),
    "fremovexattr": lambda a, pid: _MetaCall(Op.REMOVEXATTR, a[0], None, name=a[1]),
    "setxattrat": lambda a, pid: _setxattrat(a, pid),
    "removexattrat": lambda a, pid: _meta_at(Op.REMOVEXATTR, a[0], a[1], a[2], name=a[3]),
}


def _setxattrat(a: list[int], pid: int) -> _MetaCall | None:
    """setxattrat(dfd, path, at_flags, name, struct xattr_args *, size): the
    value's address, size and flags sit in the struct."""
    if (a[5] & U32) < 16 or not a[4]:
        return None
    value, size, flags = struct.unpack("<QII", notify.read_mem(pid, a[4], 16))
    return _meta_at(Op.SETXATTR, a[0], a[1], a[2], mode=flags, name=a[3], value=(value, size))


# policy/explain.py reads this reason back (from_reason): keep the two in step
DGRAM_REFUSED = ("a UDP socket (a DNS lookup, or QUIC): this run has no network, so no "
                 "host name resolves")

_SOCKET_HANDLERS: dict[str, Callable[[Mediator, notify.Notif], None]] = {
    "connect": Mediator._connect, "sendto": Mediator._sendto,
    "sendmsg": Mediator._sendmsg, "listen": Mediator._listen,
    "sendmmsg": Mediator._sendmmsg,
}
# kernel.seccomp decides which calls notify; a call it adds without a handler
# here must fail the import, not be answered ENOSYS at run time.
if set(_SOCKET_HANDLERS) != set(SOCKET_CALLS) \
        or set(_FILE_DECODERS) != set(OPEN_CALLS) | set(FILE_CALLS) \
        or set(_META_DECODERS) != set(META_CALLS):
    raise ImportError("confine.mediation.supervisor: handlers do not match kernel.seccomp's "
                      "SOCKET_CALLS, OPEN_CALLS, FILE_CALLS")


def _numbers(table: dict) -> dict:
    """The table by this architecture's syscall numbers (aarch64 has only the *at calls)."""
    return {nr: fn for name, fn in table.items() if (nr := syscall_number(name)) is not None}


_SOCKET_NR: dict[int, Callable[[Mediator, notify.Notif], None]] = _numbers(_SOCKET_HANDLERS)
FILE_NR: dict[int, Callable[[list[int], int], _FileCall | None]] = _numbers(_FILE_DECODERS)
CONNECT_NR = syscall_number("connect")
_META_NR: dict[int, Callable[[list[int], int], _MetaCall | None]] = _numbers(_META_DECODERS)
