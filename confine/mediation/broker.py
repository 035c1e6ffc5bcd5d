"""The broker: performs the mediated calls the supervisor approved or handed on.

It is forked by the agent's child after Landlock was applied, so it lives in
the agent's own Landlock domain (TCP port rules and abstract-socket scoping
apply to it exactly as to the agent), carries the ordinary deny filter but not
the notifying one, and is not dumpable (the agent can neither ptrace it nor
steal its descriptors). Socket calls are performed here on the supervisor's
copies of the agent's socket, address and data; file calls are judged by the
name guard and performed in files.py.

It also receives the agent's notifications itself (wire.ListenerRequest.receive):
a file call, and a connect() to a pathname unix address (the supervisor
decides nothing for one: files.unix_target judges it here either way), it
reads, judges, performs and answers here, one hop fewer; every other kind, and
any such call it cannot finish here, goes to the supervisor as it came
(wire.Forwarded). What it holds is written to the in-flight record
(inflight.py), so that its death fails those calls instead of leaving them
waiting.
"""
from __future__ import annotations

import array
import ctypes
import errno
import fcntl
import os
import queue
import select
import socket
import struct
import threading
from typing import TYPE_CHECKING, Callable, NoReturn

from confine.kernel import notify
from confine.kernel.libc import libc
from confine.undo.client import KeepClient

from . import inflight, sockfd
from .files import AskFirst, Deferred, FileBroker, Refused, Task
from .supervisor import CONNECT_NR, FILE_NR, MAX_ADDR, U32, Tasks, _pathname, gather_file
from .wire import (
    ANSWER,
    ANSWER_CLOEXEC,
    ASK,
    ASK_WAIT,
    FILE_OPS,
    MAX_FDS,
    META_OPS,
    REASON_CAP,
    REQUEST_MAX,
    SOCKET_OPS,
    UMASK_UNREAD,
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
    request_head,
    rights_control,
)

if TYPE_CHECKING:
    from confine.protect.guard import Guard


def broker_main(sock: socket.socket, guard: Guard | None = None,
                undo: socket.socket | None = None, undo_started: int = 0) -> NoReturn:
    """Serve requests until the supervisor closes its end. Never returns.
    undo: the supervisor's keeper (confine/undo/), asked before a workdir file
    is removed, replaced or written."""
    lock = threading.Lock()
    os.umask(0)      # file requests carry the agent's umask and apply it themselves
    files = FileBroker(guard)
    if undo is not None:
        files.undo = KeepClient(undo, undo_started)
    listener = [-1]  # the agent's seccomp listener (ListenerRequest), once sent
    verdicts = _Verdicts()

    def reply(rid: int, answer: Reply, req: FileRequest | SocketRequest | None = None) -> None:
        if req is not None and req.answer & ANSWER and listener[0] >= 0:
            got = _answer(listener[0], req, answer)
            if got is None:
                return      # answered: the supervisor forgets it (Mediator._prune)
            answer = got
        msg = answer.encode(rid)
        with lock:
            try:
                if answer.fd is None:
                    sock.send(msg)
                else:
                    socket.send_fds(sock, [msg], [answer.fd])
            except OSError:
                os._exit(0)

    def file_call(rid: int, body: bytes, fds: list[int]) -> None:
        answer = None
        try:
            req = FileRequest.unpack(body)
            # off the receiving thread: a refusal the engine may allow is asked here
            files.ask_with(lambda why: verdicts.ask(reply, rid, why))
            try:
                answer = files.handle(req, fds)
            finally:
                files.ask_with(None)
            reply(rid, answer, req)
        finally:
            _close(fds + ([answer.fd] if answer is not None and answer.fd is not None else []))

    def meta_call(rid: int, body: bytes, fds: list[int]) -> None:
        try:
            reply(rid, files.handle_meta(MetaRequest.unpack(body), fds))
        finally:
            _close(fds)

    def socket_call(rid: int, body: bytes, fds: list[int]) -> None:
        try:
            req = SocketRequest.unpack(body)
            reply(rid, _socket_call(files, req, fds, lambda why: verdicts.ask(reply, rid, why)), req)
        finally:
            _close(fds)

    def handle(body: bytes, fds: list[int]) -> None:
        rid, op = request_head(body)
        if op == Op.NEWSOCK:      # no pidfd_getfd: a socket for the agent (sockfd.py)
            answer = sockfd.make(sockfd.NewSocket.unpack(body), fds)
            try:
                reply(rid, answer)
            finally:
                _close(fds + ([answer.fd] if answer.fd is not None else []))
        elif op in SOCKET_OPS:
            socket_call(rid, body, fds)
        elif op in FILE_OPS:
            file_call(rid, body, fds)
        elif op in META_OPS:
            meta_call(rid, body, fds)
        else:
            _close(fds)
            reply(rid, Reply(-1, errno.ENOSYS))

    # One thread receives at a time (the leader) and performs right there the
    # file calls that cannot block: no hand-off, no other thread woken. Before
    # a call that can block (a socket or metadata call; a file call that
    # stopped before changing anything, Deferred: a FIFO or device opened, a
    # directory on a network or FUSE file system) it hands the receiving to
    # another thread (a parked one, else a new one) and performs the call
    # itself: waking that thread is not in the call's way (a queue to a worker
    # was: a wake-up per socket call), a call that blocks holds only its own
    # thread, and such calls of several agent threads go on side by side.
    # What makes or moves a name is still judged and made under FileBroker.lock.
    baton = threading.Condition()
    parked = [0]    # threads waiting to receive next
    tokens = [0]    # hand-overs not yet taken by a parked thread
    waiting = select.poll()
    waiting.register(sock, select.POLLIN)
    answers: queue.SimpleQueue = queue.SimpleQueue()
    answering: list[threading.Thread] = []

    def answerer() -> None:
        while True:
            rid, answer, req = answers.get()
            try:
                reply(rid, answer, req)
            finally:
                if answer.fd is not None:
                    _close([answer.fd])

    def hand_over() -> bool:
        """Another thread receives from now on; False: none could be had (this
        one goes on receiving after the call)."""
        files.inline = None     # the next leader sets its own
        with baton:
            if parked[0] > tokens[0]:
                tokens[0] += 1
                baton.notify()
                return True
        try:
            threading.Thread(target=lead, daemon=True).start()
        except RuntimeError:
            return False
        return True

    def follow() -> None:
        with baton:
            parked[0] += 1
            while not tokens[0]:
                baton.wait()
            tokens[0] -= 1
            parked[0] -= 1

    def configure(op: int, body: bytes, fds: list[int]) -> bool:
        """The run's configuration, sent once before any call (so received
        in order by the first leader); False: op is a call."""
        if op == Op.LISTENER:
            if listener[0] < 0 and fds:
                listener[0] = files.umasks.listener = fds[0]
                if ListenerRequest.unpack(body).receive and len(fds) == 2:
                    try:
                        own[0] = inflight.Table(fds[1])
                    except (OSError, ValueError):
                        # the supervisor now waits for this side to receive: dying
                        # makes it receive (and fail every call, said once)
                        os._exit(0)
                _close(fds[1:])
            else:
                _close(fds)
        elif op == Op.ROOTS:
            try:
                files.set_socket_roots(fds, RootsRequest.unpack(body).names)
            except (OSError, ValueError):
                pass       # no roots: every pathname connect is refused
            _close(fds)
        elif op == Op.ASKS:
            files.asks = AsksRequest.unpack(body).bits
            _close(fds)
        elif op == Op.VERDICT:
            v = VerdictRequest.unpack(body)
            verdicts.give(v.asked, v.allowed, v.reason)
            _close(fds)
        elif op == Op.WRITABLE:
            try:
                w = WritableRequest.unpack(body)
                files.set_writable(fds[:w.nroots], fds[w.nroots:w.nroots + w.nholes])
            except (OSError, ValueError):
                pass       # no roots: every metadata call is refused
            _close(fds)
        else:
            return False
        return True

    def serve(body: bytes, fds: list[int]) -> bool:
        """Perform one request; False once the receiving was handed over."""
        rid, op = request_head(body)
        if configure(op, body, fds):
            return True
        if op in FILE_OPS:
            answer = None
            req = None
            try:
                req = FileRequest.unpack(body)
                answer = files.handle(req, fds)
            except Deferred:
                pass
            except Exception:  # noqa: BLE001 - answer rather than leave the agent waiting
                if os.environ.get("CONFINE_DEBUG"):
                    import traceback
                    traceback.print_exc()
                answer = Reply(-1, errno.EIO)
            if answer is not None:
                if answer.fd is not None and req is not None and req.answer & ANSWER \
                        and waiting.poll(0):
                    # Installing the file completes only once the agent's thread
                    # has run (ADDFD); with another request waiting, one thread
                    # of its own waits for that (already running while calls
                    # come in: no wake-up per call), not the next call.
                    _close(fds)
                    if not answering:
                        answering.append(threading.Thread(target=answerer, daemon=True))
                        answering[0].start()
                    answers.put((rid, answer, req))
                    return True
                try:
                    reply(rid, answer, req)
                finally:
                    _close(fds + ([answer.fd] if answer.fd is not None else []))
                return True
        if op in SOCKET_OPS and _cannot_wait(op, fds):
            # Performed right here, as an inline file call is: no other thread
            # woken (that hand-over was most of what the one-hop change added
            # to a unix connect). A walk off the local file systems or a
            # question to the supervisor raises Deferred before anything is
            # done: then on a thread that may wait, as any other socket call.
            sreq = None
            try:
                sreq = SocketRequest.unpack(body)
                answer = _socket_call(files, sreq, fds, _defer)
            except Deferred:
                answer = None
            except Exception:  # noqa: BLE001 - answer rather than leave the agent waiting
                answer = Reply(-1, errno.EIO)
            if answer is not None:
                try:
                    reply(rid, answer, sreq)
                finally:
                    _close(fds)
                return True
        leading = not hand_over()
        try:
            handle(body, fds)
        except Exception:  # noqa: BLE001 - answer rather than leave the agent waiting
            reply(rid, Reply(-1, errno.EIO))
        return leading

    # Receiving the agent's notifications here (wire.ListenerRequest.receive):
    # the leader also waits on the listener and performs there, inline, the
    # file calls that read and finish without waiting; everything else goes to
    # the supervisor as it came (wire.Forwarded).
    own: list[inflight.Table | None] = [None]
    tasks = Tasks()

    def forward(n: notify.Notif, slot: int, answer: Reply | None = None,
                cloexec: bool = False, leading: bool = True) -> None:
        """Hand n to the supervisor with a pidfd for its thread (answer: the
        call was performed here, the supervisor says why and answers).
        leading: called by the receiving thread, the only one that uses `tasks`."""
        table = own[0]
        pidfd, owned = _thread_pidfd(tasks if leading else None, n.pid)
        try:
            # ID_VALID after the pidfd: the thread still waited, so the pidfd is its
            if pidfd < 0 or not notify.id_valid(listener[0], n.id):
                if answer is None or answer.fd is None:
                    try:
                        notify.respond(listener[0], n.id, error=errno.EPERM)
                    except OSError:
                        pass    # gone: nothing waits
                return
            msg = Forwarded(n.id, n.data.nr, tuple(n.data.args), answer, cloexec).pack()
            fds = [pidfd] + ([answer.fd] if answer is not None and answer.fd is not None else [])
            with lock:
                try:
                    socket.send_fds(sock, [msg], fds)
                except OSError:
                    os._exit(0)
        finally:
            if owned:
                os.close(pidfd)
            if table is not None:
                table.drop(slot)

    def receive(table: inflight.Table) -> bool:
        """One notification, received and performed here or handed on; False
        once the receiving was handed to another thread."""
        try:
            n = notify.recv(listener[0])
        except OSError:
            return True     # the call was interrupted between poll and recv
        slot = table.hold(n.id)
        if n.data.nr == CONNECT_NR and slot:
            done = unix_connect(n, slot, table)
            if done is not None:
                return done
        received_file_call(n, slot, table)
        return True

    def received_file_call(n: notify.Notif, slot: int, table: inflight.Table) -> None:
        """A file call performed here, or handed on as it came."""
        decode = FILE_NR.get(n.data.nr) if guard is not None and slot else None
        if decode is None:
            return forward(n, slot)
        try:
            got = gather_file(decode, n, tasks, _take, False)
        except Exception:  # noqa: BLE001 - unreadable here: the supervisor's view decides
            got = None
        if got is None:
            return forward(n, slot)
        answer = None
        try:
            if not notify.id_valid(listener[0], n.id):
                return table.drop(slot)
            req = got.request(0)
            try:
                answer = files.handle(req, got.fds)
            except Deferred:
                # stopped before changing anything: the supervisor sends it back
                # as a request, performed on a thread that may wait (serve)
                return forward(n, slot)
            except Exception:  # noqa: BLE001 - answer rather than leave the agent waiting
                answer = Reply(-1, errno.EIO)
            if answer.ret < 0 and answer.err == UMASK_UNREAD:
                return forward(n, slot)         # nothing made: the umask is read there
            left = _answer(listener[0], req, answer)
            if left is None:
                return table.drop(slot)
            forward(n, slot, left, bool(req.answer & ANSWER_CLOEXEC))
        finally:
            _close(got.fds + ([answer.fd] if answer is not None and answer.fd is not None
                              else []))

    def unix_connect(n: notify.Notif, slot: int, table: inflight.Table) -> bool | None:
        """A connect() to a pathname unix address, read, judged and
        performed here as the supervisor's request would have it (its reading,
        files.unix_target's judging): no hop through the supervisor, which
        decides nothing for such an address. None: nothing was done, the
        supervisor handles it (another family, an abstract or unnamed
        address, a socket that may wait, pidfd_getfd refused, a question
        for the person, a memory that cannot be read here). A call that may
        wait (a blocking stream socket) is performed after handing the
        receiving to another thread, as serve does: then False."""
        a = n.data.args
        addrlen = a[2] & U32
        if not 2 < addrlen <= MAX_ADDR:
            return None
        fds: list[int] = []
        try:
            raw = notify.read_mem(n.pid, a[1], addrlen)
            if not _pathname(raw):
                return None
            _, tgid, tid, pidfd = tasks.facts(n.pid, umask=False)
            fds.append(notify.pidfd_getfd(pidfd, a[0] & U32))
            sock = socket.socket(fileno=fds[0])     # only asked: the descriptor stays in fds
            family = sock.family
            sock.detach()
            if family != socket.AF_UNIX:
                _close(fds)
                return None
            if raw[2] != ord("/"):
                # the agent's cwd by its thread id (not a name it chose), as the supervisor takes it
                fds.append(os.open(f"/proc/{n.pid}/cwd", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC))
            # everything above was read from the agent: its thread still waits
            if not notify.id_valid(listener[0], n.id):
                _close(fds)
                table.drop(slot)
                return True
        except Exception:  # noqa: BLE001 - unreadable here: the supervisor's view decides
            _close(fds)
            return None
        try:
            # From here this thread may not be the receiving one (no `tasks`),
            # and the call is answered whatever happens.
            leading = _cannot_wait(Op.CONNECT, fds) or not hand_over()
            table.lose_as(slot, errno.ECONNREFUSED)     # never EIO for a connect
            req = SocketRequest(0, Op.CONNECT, 0, True, raw, b"", 0, tgid, tid, n.id, ANSWER)
            try:
                answer = _socket_call(files, req, fds, _defer)
            except Deferred:
                # nothing done yet: the supervisor asks (or walks), on the old path
                forward(n, slot, leading=leading)
                return leading
            except Exception:  # noqa: BLE001 - answer rather than leave the agent waiting
                answer = Reply(-1, errno.EIO)
            left = _answer(listener[0], req, answer)
            if left is None:
                table.drop(slot)
            else:   # a refusal to say: the supervisor says it and answers
                forward(n, slot, left, leading=leading)
            return leading
        finally:
            _close(fds)

    def lead() -> None:
        # One buffer per thread for every request: socket.recv_fds would map
        # (and unmap) a fresh REQUEST_MAX buffer per call.
        inbox = bytearray(REQUEST_MAX)
        both: select.poll | None = None
        while True:
            files.inline = threading.get_ident()
            table = own[0]
            if table is not None:
                if both is None:
                    both = select.poll()
                    both.register(sock, select.POLLIN)
                    both.register(listener[0], select.POLLIN)
                ready = dict(both.poll())
                ev = ready.get(listener[0], 0)
                if ev & select.POLLIN and not ready.get(sock.fileno(), 0) & select.POLLIN:
                    if not receive(table):
                        follow()
                    continue
                if ev & (select.POLLHUP | select.POLLERR) and not ev & select.POLLIN:
                    own[0] = None   # no agent process left: requests only, until the end
                if not ready.get(sock.fileno()):
                    continue
            try:
                body, fds = _receive(sock, inbox)
            except OSError:
                os._exit(0)
            if not body:
                os._exit(0)
            if not serve(body, fds):
                follow()

    lead()
    os._exit(0)

# glibc probes these on every user or host lookup and falls back by itself;
# still denied (nscd would resolve names: a DNS channel), just not reported.
QUIET = (b"/run/nscd/socket", b"/run/systemd/userdb/", b"/run/systemd/resolve/io.systemd.Resolve")


class _Verdicts:
    """Calls waiting for the supervisor's verdict on a question (wire.ASK): the
    thread performing the call waits (socket calls run on a thread of their
    own, broker_main), the receiving thread hands it the VerdictRequest."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.waiting: dict[int, list] = {}

    def ask(self, reply: Callable[[int, Reply], None], rid: int, question: str) -> tuple[bool, str]:
        if len(question.encode("utf-8", "replace")) > REASON_CAP:
            # a reply's reason is cut there: a question about a cut name would
            # be judged on a name that is not the one made
            return False, "too long a name to ask about"
        box: list = [threading.Event(), None]
        with self.lock:
            self.waiting[rid] = box
        try:
            reply(rid, Reply(-1, ASK, question))
            box[0].wait(ASK_WAIT)
        finally:
            with self.lock:
                self.waiting.pop(rid, None)
        return box[1] if box[1] is not None else (False, "no verdict in time")

    def give(self, rid: int, allowed: bool, reason: str) -> None:
        with self.lock:
            box = self.waiting.get(rid)
            if box is not None:
                box[1] = (allowed, reason)
                box[0].set()


def _socket_call(files: FileBroker, req: SocketRequest, fds: list[int],
                 ask: Callable[[str], tuple[bool, str]] | None = None) -> Reply:
    """fds: the socket, then the agent's cwd if req.resolve and the path is
    relative, then the descriptors to pass; ask: puts a question to the
    supervisor (wire.ASK) and waits for its verdict."""
    sockfd, extra = fds[0], fds[1:]
    ctypes.set_errno(0)
    if req.op == Op.LISTEN:
        # Here, so that the listener's SO_PEERCRED (copied to every client at
        # connect) and SO_PEERPIDFD name a process of the agent's, with its
        # uid and gid, not the supervisor (root, outside the sandbox).
        ret = libc.listen(sockfd, req.flags)
        return Reply(ret, ctypes.get_errno() if ret < 0 else 0)
    name = req.name
    opath = -1
    if req.resolve:
        path = name[2:].split(b"\0", 1)[0]
        relative = not path.startswith(b"/")
        try:
            opath = files.unix_target(Task(req.tgid, req.tid, 0),
                                      extra[0] if relative else files.root, path)
        except AskFirst as r:
            opath = _asked(r, ask, "unix_socket", path)
            if isinstance(opath, Reply):
                return opath
        except Refused as r:
            return Reply(-1, r.errno, "" if path.startswith(QUIET) else r.reason)
        except OSError as e:
            return Reply(-1, errno.ECONNREFUSED if e.errno == errno.ELOOP else e.errno or errno.EIO)
        # Connecting through /proc/self/fd reaches the very file judged,
        # whatever was renamed or swapped in at its name since.
        name = struct.pack("<H", socket.AF_UNIX) + b"/proc/self/fd/%d\0" % opath
        if relative:
            extra = extra[1:]
    try:
        return _perform(req, sockfd, name, extra)
    finally:
        if opath >= 0:
            os.close(opath)


def _cannot_wait(op: int, fds: list[int]) -> bool:
    """Whether a socket request can be performed without waiting on anyone:
    listen(), a call on a non-blocking socket, a datagram socket's connect()
    (the kernel only records the peer). A blocking stream connect waits while
    the listener's backlog is full, a blocking send while the buffer is."""
    if op == Op.LISTEN:
        return True
    if op not in (Op.CONNECT, Op.SENDTO, Op.SENDMSG) or not fds:
        return False
    try:
        if fcntl.fcntl(fds[0], fcntl.F_GETFL) & os.O_NONBLOCK:
            return True
        if op != Op.CONNECT:
            return False
        sock = socket.socket(fileno=fds[0])     # only asked: the descriptor stays the caller's
        try:
            return sock.type == socket.SOCK_DGRAM
        finally:
            sock.detach()
    except OSError:
        return False


def _defer(question: str) -> tuple[bool, str]:
    """On the receiving thread nobody can be asked (the verdict comes to it)."""
    raise Deferred()


def _asked(r: AskFirst, ask: Callable[[str], tuple[bool, str]] | None, kind: str,
           path: bytes) -> int | Reply:
    """The file judged (r.fd) if the supervisor's engine allows it, else the
    refusal with the engine's reason (the agent's EACCES, the `confine:` line)."""
    if ask is None or path.startswith(QUIET):
        os.close(r.fd)
        return Reply(-1, r.errno, "" if path.startswith(QUIET) else r.reason)
    try:
        allowed, why = ask(f"{kind}\0{r.subject}\0{r.reason}")
    except BaseException:
        os.close(r.fd)
        raise
    if allowed:
        return r.fd
    os.close(r.fd)
    return Reply(-1, r.errno, f"{r.reason}: {why}" if why else r.reason)


def _perform(req: SocketRequest, sockfd: int, name: bytes, extra: list[int]) -> Reply:
    nbuf = ctypes.create_string_buffer(name, len(name)) if name else None
    nlen = len(name)
    ctypes.set_errno(0)
    if req.op == Op.CONNECT:
        ret = libc.connect(sockfd, nbuf, nlen)
    elif req.op == Op.SENDTO:
        ret = libc.sendto(sockfd, req.data, ctypes.c_size_t(len(req.data)), req.flags, nbuf, nlen)
    else:
        data = req.data
        iov = (ctypes.c_char * max(len(data), 1)).from_buffer_copy(data or b"\0")
        iovec = notify.IoVec(ctypes.cast(iov, ctypes.c_void_p), len(data))
        ctrl, clen = rights_control(extra)
        hdr = MsgHdr(ctypes.cast(nbuf, ctypes.c_void_p) if nbuf else None, nlen,
                     ctypes.cast(ctypes.pointer(iovec), ctypes.c_void_p), 1,
                     ctypes.cast(ctrl, ctypes.c_void_p) if ctrl else None, clen, 0)
        ret = libc.sendmsg(sockfd, ctypes.byref(hdr), req.flags)
    return Reply(ret, ctypes.get_errno() if ret < 0 else 0)


def _answer(listener: int, req: FileRequest | SocketRequest, answer: Reply) -> Reply | None:
    """Give the agent the answer to req's notification here (the opened file
    installed in it, or the return value or errno): None, nothing is sent
    back. A notification that is gone (the agent's call was interrupted)
    needs no answer; any other failure leaves the answer to the supervisor,
    as an error (EIO: the file is not installed). An answer with something to
    say (the guard's reason, a held name, a refusal the supervisor explains
    from the waiting thread's cwd) is returned unanswered, for the
    supervisor: said before the agent goes on, never lost when it exits."""
    if answer.reason or (answer.ret < 0 and answer.err in (errno.EACCES, errno.EROFS,
                                                            errno.EBUSY, UMASK_UNREAD)):
        return answer
    try:
        if answer.fd is not None and answer.ret >= 0:
            try:
                notify.addfd_send(listener, req.nid, answer.fd, bool(req.answer & ANSWER_CLOEXEC))
            except OSError as e:
                if e.errno != errno.ENOENT:
                    notify.respond(listener, req.nid, error=e.errno or errno.EIO)
        else:
            notify.respond(listener, req.nid, val=answer.ret if answer.ret >= 0 else 0,
                           error=(answer.err or errno.EIO) if answer.ret < 0 else 0)
    except OSError as e:
        if e.errno != errno.ENOENT:
            return Reply(-1, errno.EIO)
    return None


def _thread_pidfd(tasks: Tasks | None, tid: int) -> tuple[int, bool]:
    """A pidfd of thread `tid` (this side's view) and whether the caller owns
    it: the one Tasks keeps (no pidfd_open and close per forwarded call; Tasks
    proves it is still the thread that holds `tid`, the caller's ID_VALID
    afterwards that this thread is the one that waits), else a new one; -1
    where the kernel has no thread pidfds (PIDFD_THREAD, Linux 6.9)."""
    try:
        if tasks is not None:
            tasks.facts(tid, umask=False)
            entry = tasks.by_tid.get(tid)
            if entry is not None and entry[4] is not None:
                return entry[1], False
    except OSError:
        pass
    try:
        return notify.pidfd_open(tid, notify.PIDFD_THREAD), True
    except OSError:
        return -1, False


def _take(pid: int, fd: int, pidfd: int) -> int:
    """The agent's descriptor `fd` (a directory a file call names): pidfd_getfd,
    or /proc/TID/fd/N opened O_PATH where that is refused (the same file; the
    caller proves with ID_VALID that the thread still waits)."""
    if fd < 0:
        raise OSError(errno.EBADF, "bad descriptor")
    try:
        return notify.pidfd_getfd(pidfd, fd)
    except OSError as e:
        if e.errno not in (errno.EPERM, errno.ENOSYS, errno.EACCES):
            raise
    try:
        return os.open(f"/proc/{pid}/fd/{fd}", os.O_PATH | os.O_CLOEXEC)
    except FileNotFoundError:
        raise OSError(errno.EBADF, "bad descriptor") from None


_ANC = socket.CMSG_SPACE(MAX_FDS * 4)


def _receive(sock: socket.socket, inbox: bytearray) -> tuple[bytes, list[int]]:
    """One request and its descriptors: socket.recv_fds, into `inbox` (the
    supervisor bounds every request below REQUEST_MAX and MAX_FDS)."""
    n, anc, _, _ = sock.recvmsg_into([inbox], _ANC)
    fds: list[int] = []
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds += array.array("i", data[:len(data) // 4 * 4]).tolist()
    return bytes(inbox[:n]), fds


def _close(fds: list[int]) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass
