"""Pathname unix-socket mediation for kernels without Landlock RESOLVE_UNIX.

Landlock below ABI 9 does not mediate connect() to pathname unix sockets, and
seccomp cannot see a path. So connect(), sendto() with an address and
sendmsg() raise a seccomp user notification, and nothing the agent asked for
is ever resumed with CONTINUE: between a check and the kernel re-reading the
agent's memory another thread could swap the address or the descriptor.
Instead:

* the supervisor copies the address (and data) out of the agent, takes its
  own reference to the socket with pidfd_getfd, checks that the notification
  is still valid, and decides;
* a pathname unix address is resolved in the supervisor and must lie under an
  allowed root (workdir, private tmp, profile `unix_sockets.allow`); the socket
  file is then pinned with openat2(O_PATH, RESOLVE_NO_SYMLINKS) so no later
  rename or symlink can redirect it;
* the call itself is performed by the *broker*: a process forked by the agent's
  child after Landlock was applied, so it lives in the agent's own Landlock
  domain (TCP port rules and abstract-socket scoping apply to it exactly as to
  the agent), carries the ordinary deny filter but not the notifying one, and
  is not dumpable (the agent can neither ptrace it nor steal its descriptors).
"""
from __future__ import annotations

import array
import ctypes
import errno
import os
import queue
import select
import socket
import stat
import struct
import sys
import threading

from . import fsbroker
from .kernel import notify
from .paths import is_under

OP_CONNECT, OP_SENDTO, OP_SENDMSG = 1, 2, 3
# glibc probes these on every user or host lookup and falls back by itself;
# still denied (nscd would resolve names: a DNS channel), just not reported.
QUIET = ("/run/nscd/socket", "/run/systemd/userdb/", "/run/systemd/resolve/io.systemd.Resolve")
# Largest payload copied for one mediated send: a stream socket gets a short
# write (legal, callers loop), a datagram larger than this gets EMSGSIZE.
DATA_CAP = 1 << 20
MAX_REPORTED = 100
_REQ = struct.Struct("<QBiiIi")      # id, op, flags, has_opath, namelen, nfds_passed
_REP = struct.Struct("<Qqi")         # id, return value, errno

_libc = ctypes.CDLL(None, use_errno=True)


class _MsgHdr(ctypes.Structure):
    _fields_ = [("msg_name", ctypes.c_void_p), ("msg_namelen", ctypes.c_uint32),
                ("msg_iov", ctypes.c_void_p), ("msg_iovlen", ctypes.c_size_t),
                ("msg_control", ctypes.c_void_p), ("msg_controllen", ctypes.c_size_t),
                ("msg_flags", ctypes.c_int)]


_MSGHDR_SIZE = ctypes.sizeof(_MsgHdr)
_IOVEC = struct.Struct("<QQ")
_CMSG_HDR = struct.Struct("<Qii")   # cmsg_len (size_t), level, type


def _cmsg_align(n: int) -> int:
    return (n + 7) & ~7


# ---------------------------------------------------------------- broker side

def broker_main(sock: socket.socket, guard=None) -> None:
    """Serve requests until the supervisor closes its end. Never returns."""
    lock = threading.Lock()
    os.umask(0)      # file requests carry the agent's umask and apply it themselves
    files = fsbroker.Broker(guard)

    def reply(rid: int, ret: int, err: int, reason: str = "", fd: int | None = None) -> None:
        msg = _REP.pack(rid, ret, err) + reason.encode(errors="replace")[:2048]
        with lock:
            try:
                if fd is None:
                    sock.send(msg)
                else:
                    socket.send_fds(sock, [msg], [fd])
            except OSError:
                os._exit(0)

    def handle_file(body: bytes, fds: list[int]) -> None:
        rid = struct.unpack_from("<Q", body)[0]
        fd = None
        try:
            ret, err, reason, fd = files.handle(body, fds)
            reply(rid, ret, err, reason, fd)
        finally:
            for f in fds + ([fd] if fd is not None else []):
                try:
                    os.close(f)
                except OSError:
                    pass

    def handle(body: bytes, fds: list[int]) -> None:
        if body[8] >= fsbroker.OP_OPEN:
            return handle_file(body, fds)
        rid, op, flags, has_opath, namelen, npass = _REQ.unpack_from(body)
        rest = body[_REQ.size:]
        name, data = rest[:namelen], rest[namelen:]
        sockfd = fds[0]
        extra = fds[1:]
        try:
            if has_opath:
                path = f"/proc/self/fd/{extra[0]}".encode()
                name = struct.pack("<H", socket.AF_UNIX) + path + b"\0"
                extra = extra[1:]
            nbuf = ctypes.create_string_buffer(name, len(name)) if name else None
            nlen = len(name)
            ctypes.set_errno(0)
            if op == OP_CONNECT:
                ret = _libc.connect(sockfd, nbuf, nlen)
            elif op == OP_SENDTO:
                ret = _libc.sendto(sockfd, data, ctypes.c_size_t(len(data)), flags, nbuf, nlen)
            else:
                iov = (ctypes.c_char * max(len(data), 1)).from_buffer_copy(data or b"\0")
                iovec = notify.IoVec(ctypes.cast(iov, ctypes.c_void_p), len(data))
                ctrl = None
                clen = 0
                if extra:
                    fd_bytes = array.array("i", extra).tobytes()
                    clen = _cmsg_align(_CMSG_HDR.size + len(fd_bytes))
                    raw = _CMSG_HDR.pack(_CMSG_HDR.size + len(fd_bytes), socket.SOL_SOCKET,
                                         socket.SCM_RIGHTS) + fd_bytes
                    ctrl = ctypes.create_string_buffer(raw, clen)
                hdr = _MsgHdr(ctypes.cast(nbuf, ctypes.c_void_p) if nbuf else None, nlen,
                              ctypes.cast(ctypes.pointer(iovec), ctypes.c_void_p), 1,
                              ctypes.cast(ctrl, ctypes.c_void_p) if ctrl else None, clen, 0)
                ret = _libc.sendmsg(sockfd, ctypes.byref(hdr), flags)
            err = ctypes.get_errno() if ret < 0 else 0
            reply(rid, ret, err)
        finally:
            for fd in fds:
                try:
                    os.close(fd)
                except OSError:
                    pass

    # Workers are reused (starting a thread costs more than most calls); a call
    # that blocks (a FIFO opened for writing) holds only its own worker, since
    # every request gets an idle worker reserved for it or a new one.
    jobs: queue.SimpleQueue = queue.SimpleQueue()
    idle = [0]
    idle_lock = threading.Lock()

    def worker() -> None:
        while True:
            body, fds = jobs.get()
            try:
                handle(body, fds)
            except Exception:  # noqa: BLE001 - answer rather than leave the agent waiting
                reply(struct.unpack_from("<Q", body)[0], -1, errno.EIO)
            with idle_lock:
                idle[0] += 1

    while True:
        try:
            body, fds, _, _ = socket.recv_fds(sock, DATA_CAP + 4096, 255)
        except OSError:
            os._exit(0)
        if not body:
            os._exit(0)
        with idle_lock:
            spawn = idle[0] == 0
            if not spawn:
                idle[0] -= 1
        jobs.put((body, fds))
        if spawn:
            threading.Thread(target=worker, daemon=True).start()


# ------------------------------------------------------------ supervisor side

class Mediator:
    def __init__(self, notify_fd: int, broker: socket.socket, roots: list[str],
                 agent_uid: int, warn=None, files: bool = False):
        self.fd = notify_fd
        self.broker = broker
        # A stuck broker must not freeze every mediated call: a send that cannot
        # complete in time is answered ECONNREFUSED.
        self.broker.settimeout(5)
        self.roots = [os.path.realpath(r) for r in roots]
        self.uid = agent_uid
        self.pending: dict[int, int] = {}       # request id -> notification id
        self.next_id = 1
        self.denied: set[str] = set()
        self.warn = warn or (lambda m: print(f"confine: {m}", file=sys.stderr, flush=True))
        self.thread = threading.Thread(target=self._loop, name="confine-mediator", daemon=True)
        self.stats = {"allowed": 0, "denied": 0}
        self.files = files

    def start(self) -> None:
        self.thread.start()

    def _loop(self) -> None:
        poller = select.poll()
        poller.register(self.fd, select.POLLIN)
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
                    try:
                        self._handle(n)
                    except OSError as e:
                        if os.environ.get("CONFINE_DEBUG"):
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
                        self.warn("the broker is gone (killed?): from now on every mediated "
                                  "call fails (opens for writing, creates, renames, unix "
                                  "connects)")
                        for nid, _, err in self.pending.values():
                            self._respond(nid, error=err)
                        self.pending.clear()

    def _respond(self, nid: int, val: int = 0, error: int = 0) -> None:
        try:
            notify.respond(self.fd, nid, val=val, error=error)
        except OSError:
            pass  # the agent's call was interrupted; nothing to answer

    def _broker_reply(self) -> bool:
        """Handle one reply; False when the broker has hung up."""
        try:
            data, fds, _, _ = socket.recv_fds(self.broker, _REP.size + 4096, 1)
        except OSError:
            return False
        try:
            if not data:
                return False
            if len(data) < _REP.size:
                return True
            rid, ret, err = _REP.unpack_from(data)
            reason = data[_REP.size:].decode(errors="replace")
            got = self.pending.pop(rid, None)
            if got is None:
                return True
            nid, cloexec, _ = got
            if reason:
                self.stats["denied"] += 1
                self._report(reason)
            if fds and ret >= 0:
                try:
                    notify.addfd_send(self.fd, nid, fds[0], cloexec)
                except OSError as e:
                    if e.errno != errno.ENOENT:     # ENOENT: the call was interrupted
                        self._respond(nid, error=e.errno or errno.EIO)
                return True
            self._respond(nid, val=ret if ret >= 0 else 0, error=err if ret < 0 else 0)
            return True
        finally:
            for f in fds:
                os.close(f)

    # -- decisions

    def _report(self, what: str) -> None:
        """Each distinct denial once; a flood (a checkout full of refused files)
        is cut short rather than burying the terminal."""
        if what in self.denied:
            return
        self.denied.add(what)
        if len(self.denied) <= MAX_REPORTED:
            self.warn(f"denied: {what}")
        elif len(self.denied) == MAX_REPORTED + 1:
            self.warn(f"more than {MAX_REPORTED} different denials: no more are shown")

    def _deny(self, nid: int, what: str, quiet: bool = False) -> None:
        self.stats["denied"] += 1
        if not quiet:
            self._report(what)
        self._respond(nid, error=errno.EACCES)

    def _address(self, pid: int, raw: bytes, nid: int):
        """Returns (name bytes for the broker, O_PATH fd or None) or None if denied."""
        if len(raw) < 2 or struct.unpack_from("<H", raw)[0] != socket.AF_UNIX:
            return raw, None
        path = raw[2:]
        if not path or path[0] == 0:
            return raw, None                  # abstract or unnamed: Landlock scope decides
        path = path.split(b"\0", 1)[0].decode(errors="surrogateescape")
        if not path.startswith("/"):
            path = os.path.join(os.readlink(f"/proc/{pid}/cwd"), path)
        # /proc/self means the agent here, not the supervisor resolving it.
        for alias, mine in (("/proc/self/", f"/proc/{pid}/"),
                            ("/proc/thread-self/", f"/proc/{pid}/task/{pid}/")):
            if path.startswith(alias):
                path = mine + path[len(alias):]
        real = os.path.realpath(path)
        if not any(is_under(real, r) for r in self.roots):
            self._deny(nid, f"connect to unix socket {path}"
                       + (f" (-> {real})" if real != path else "")
                       + ": outside the workdir and unix_sockets.allow",
                       quiet=real.startswith(QUIET))
            return None
        try:
            opath = notify.openat2(real, os.O_PATH | os.O_NOFOLLOW,
                                   notify.RESOLVE_NO_SYMLINKS | notify.RESOLVE_NO_MAGICLINKS)
        except OSError as e:
            self._respond(nid, error=errno.ECONNREFUSED if e.errno == errno.ELOOP else e.errno)
            return None
        if not stat.S_ISSOCK(os.fstat(opath).st_mode):
            os.close(opath)
            self._respond(nid, error=errno.ECONNREFUSED)
            return None
        return b"", opath

    def _handle(self, n) -> None:
        pid, nid = n.pid, n.id
        a = list(n.data.args)
        nr = n.data.nr
        if nr in FS_NR:
            return self._file(n)
        if nr == NR["listen"]:
            return self._listen(pid, nid, a[0] & 0xFFFFFFFF, a[1] & 0xFFFFFFFF)
        if nr == NR["connect"]:
            op, fd, flags = OP_CONNECT, a[0], 0
            addrlen = a[2] & 0xFFFFFFFF
            if addrlen > 128:
                return self._respond(nid, error=errno.EINVAL)
            raw = notify.read_mem(pid, a[1], addrlen)
            data, passed = b"", []
        elif nr == NR["sendto"]:
            op, fd, flags = OP_SENDTO, a[0], a[3] & 0xFFFFFFFF
            addrlen = a[5] & 0xFFFFFFFF
            if addrlen > 128:
                return self._respond(nid, error=errno.EINVAL)
            raw = notify.read_mem(pid, a[4], addrlen) if a[4] else b""
            data = notify.read_mem(pid, a[1], min(a[2], DATA_CAP))
            passed = []
        elif nr == NR["sendmsg"]:
            op, fd, flags = OP_SENDMSG, a[0], a[2] & 0xFFFFFFFF
            hdr = _MsgHdr.from_buffer_copy(notify.read_mem(pid, a[1], _MSGHDR_SIZE))
            if hdr.msg_namelen > 128:
                return self._respond(nid, error=errno.EINVAL)
            raw = notify.read_mem(pid, hdr.msg_name, hdr.msg_namelen) if hdr.msg_name else b""
            if hdr.msg_iovlen > 1024:
                return self._respond(nid, error=errno.EMSGSIZE)
            iovs = notify.read_mem(pid, hdr.msg_iov, 16 * hdr.msg_iovlen) if hdr.msg_iovlen else b""
            chunks, total = [], 0
            for i in range(hdr.msg_iovlen):
                base, ln = _IOVEC.unpack_from(iovs, 16 * i)
                take = min(ln, DATA_CAP - total)
                if take:
                    chunks.append(notify.read_mem(pid, base, take))
                    total += take
                if ln > take:
                    break
            data = b"".join(chunks)
            passed = self._control(pid, hdr, nid)
            if passed is None:
                return
        else:
            return self._respond(nid, error=errno.ENOSYS)
        fds: list[int] = []
        pidfd = _pidfd(pid)
        try:
            fds.append(notify.pidfd_getfd(pidfd, fd & 0xFFFFFFFF))
            sockfd = fds[0]
            agent_fds, passed = passed, []
            try:
                for afd in agent_fds:
                    passed.append(notify.pidfd_getfd(pidfd, afd))
            except OSError:
                for f in fds + passed:
                    os.close(f)
                raise
        finally:
            os.close(pidfd)
        try:
            # Everything above was read from the agent: make sure the thread that
            # asked is still waiting (its pid cannot have been reused meanwhile).
            if not notify.id_valid(self.fd, nid):
                return
            try:
                stype = socket.socket(fileno=os.dup(sockfd))
            except OSError:
                stype = None
            is_stream = stype is not None and stype.type == socket.SOCK_STREAM
            if stype is not None:
                stype.close()
            full = (a[2] if nr == NR["sendto"] else None)
            if op == OP_SENDTO and full and full > DATA_CAP and not is_stream:
                return self._respond(nid, error=errno.EMSGSIZE)
            if raw and is_stream and op != OP_CONNECT:
                raw = b""  # a connected stream socket ignores the address
            decided = self._address(pid, raw, nid) if raw else (b"", None)
            if decided is None:
                return
            name, opath = decided
            if opath is not None:
                fds.append(opath)
            rid = self.next_id
            self.next_id += 1
            body = _REQ.pack(rid, op, flags, 1 if opath is not None else 0, len(name),
                             len(passed)) + name + data
            try:
                socket.send_fds(self.broker, [body], fds + passed)
            except OSError:
                return self._respond(nid, error=errno.ECONNREFUSED)
            self.pending[rid] = (nid, False, errno.ECONNREFUSED)
            self.stats["allowed"] += 1
        finally:
            for f in fds + passed:
                os.close(f)

    def _file(self, n) -> None:
        """A file-system call: copy its strings, take the agent's directories,
        and let the broker judge and perform it (fsbroker.py)."""
        pid, nid = n.pid, n.id
        a = [int(x) for x in n.data.args]
        name = FS_NR[n.data.nr]
        if not self.files:
            return self._respond(nid, error=errno.ENOSYS)
        i32 = lambda v: ctypes.c_int32(v & 0xFFFFFFFF).value  # noqa: E731
        cwd = AT_FDCWD
        flags = mode = arg = 0
        target = b""
        if name == "open":
            op, paths, flags, mode = fsbroker.OP_OPEN, [(cwd, a[0])], i32(a[1]), a[2]
        elif name == "creat":
            op, paths, mode = fsbroker.OP_OPEN, [(cwd, a[0])], a[1]
            flags = os.O_CREAT | os.O_WRONLY | os.O_TRUNC
        elif name == "openat":
            op, paths, flags, mode = fsbroker.OP_OPEN, [(a[0], a[1])], i32(a[2]), a[3]
        elif name == "truncate":
            op, paths, arg = fsbroker.OP_TRUNCATE, [(cwd, a[0])], a[1]
            if arg >= 1 << 63:
                return self._respond(nid, error=errno.EINVAL)
        elif name == "mkdir":
            op, paths, mode = fsbroker.OP_MKDIR, [(cwd, a[0])], a[1]
        elif name == "mkdirat":
            op, paths, mode = fsbroker.OP_MKDIR, [(a[0], a[1])], a[2]
        elif name == "mknod":
            op, paths, mode, arg = fsbroker.OP_MKNOD, [(cwd, a[0])], a[1], a[2]
        elif name == "mknodat":
            op, paths, mode, arg = fsbroker.OP_MKNOD, [(a[0], a[1])], a[2], a[3]
        elif name in ("symlink", "symlinkat"):
            target = notify.read_cstr(pid, a[0])
            op = fsbroker.OP_SYMLINK
            paths = [(cwd, a[1])] if name == "symlink" else [(a[1], a[2])]
        elif name in ("link", "linkat"):
            op = fsbroker.OP_LINK
            if name == "link":
                paths = [(cwd, a[0]), (cwd, a[1])]
            else:
                paths, flags = [(a[0], a[1]), (a[2], a[3])], i32(a[4])
        else:
            op = fsbroker.OP_RENAME
            if name == "rename":
                paths = [(cwd, a[0]), (cwd, a[1])]
            else:
                paths = [(a[0], a[1]), (a[2], a[3])]
                flags = i32(a[4]) if name == "renameat2" else 0
        mode &= 0xFFFFFFFF
        strs = [notify.read_cstr(pid, addr) for _, addr in paths]
        umask, tgid, tid = _task_facts(pid)
        fds: list[int] = []
        index: list[int] = []
        pidfd = _pidfd(pid)
        try:
            for (dfd, _), path in zip(paths, strs):
                if path.startswith(b"/"):
                    index.append(-1)
                    continue
                dfd = i32(dfd)
                if dfd == AT_FDCWD:
                    fds.append(os.open(f"/proc/{pid}/cwd", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC))
                else:
                    fds.append(notify.pidfd_getfd(pidfd, dfd))
                index.append(len(fds) - 1)
        except OSError:
            for f in fds:
                os.close(f)
            raise
        finally:
            os.close(pidfd)
        try:
            if not notify.id_valid(self.fd, nid):
                return
            index += [-1] * (2 - len(index))
            rid = self.next_id
            self.next_id += 1
            body = fsbroker.REQ.pack(rid, op, flags, mode, arg & 0xFFFFFFFFFFFFFFFF, umask,
                                     tgid, tid, index[0], index[1])
            body += b"\0".join(strs + [b""] * (2 - len(strs)) + [target])
            try:
                socket.send_fds(self.broker, [body], fds)
            except OSError:
                return self._respond(nid, error=errno.EIO)
            self.pending[rid] = (nid, op == fsbroker.OP_OPEN and bool(flags & os.O_CLOEXEC),
                                 errno.EIO)
            self.stats["allowed"] += 1
        finally:
            for f in fds:
                os.close(f)

    def _listen(self, pid: int, nid: int, fd: int, backlog: int) -> None:
        """listen() on an unbound TCP socket binds an ephemeral port without
        Landlock's BIND_TCP check; refuse that, perform the rest ourselves on
        the very socket we inspected (listen itself is not a Landlock right)."""
        pidfd = _pidfd(pid)
        try:
            sfd = notify.pidfd_getfd(pidfd, fd)
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
            try:
                s.listen(min(backlog, 0x7FFFFFFF))
            except OSError as e:
                return self._respond(nid, error=e.errno)
            self._respond(nid, 0)
        finally:
            s.close()

    def _control(self, pid: int, hdr, nid: int):
        """Descriptors passed with SCM_RIGHTS (agent numbers); None if refused."""
        if not hdr.msg_control or not hdr.msg_controllen:
            return []
        if hdr.msg_controllen > 4096:
            self._respond(nid, error=errno.EINVAL)
            return None
        ctrl = notify.read_mem(pid, hdr.msg_control, hdr.msg_controllen)
        fds: list[int] = []
        off = 0
        while off + _CMSG_HDR.size <= len(ctrl):
            ln, level, typ = _CMSG_HDR.unpack_from(ctrl, off)
            if ln < _CMSG_HDR.size or off + ln > len(ctrl):
                break
            if level == socket.SOL_SOCKET and typ == socket.SCM_RIGHTS:
                payload = ctrl[off + _CMSG_HDR.size: off + ln]
                fds += array.array("i", payload[: len(payload) // 4 * 4]).tolist()
            else:
                # SCM_CREDENTIALS would name the broker, not the agent: refuse.
                self._respond(nid, error=errno.EPERM)
                return None
            off += _cmsg_align(ln)
        return fds


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
    umask, tgid, nstid = 0o022, tid, tid
    with open(f"/proc/{tid}/status") as f:
        for line in f:
            if line.startswith("Umask:"):
                umask = int(line.split()[1], 8)
            elif line.startswith("NStgid:"):
                tgid = int(line.split()[-1])
            elif line.startswith("NSpid:"):
                nstid = int(line.split()[-1])
    return umask, tgid, nstid


AT_FDCWD = -100


def _nr(name: str) -> int:
    from .kernel import seccomp
    return seccomp.syscall_number(name)


from .kernel.seccomp import FILE_CALLS, OPEN_CALLS, SOCKET_CALLS  # noqa: E402

NR = {n: _nr(n) for n in SOCKET_CALLS}
FS_NR = {}
for _n in tuple(OPEN_CALLS) + FILE_CALLS:
    if _nr(_n) is not None:      # aarch64 has only the *at calls
        FS_NR[_nr(_n)] = _n
