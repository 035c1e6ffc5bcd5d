"""File-system calls performed for the agent by the broker (see broker.py).

The supervisor turns a notified open/creat/truncate/mkdir/mknod/symlink/link/
rename into a request; the broker, inside the agent's Landlock domain and
mount namespace with the agent's uid, performs it here. Every name is acted
on relative to a pinned parent directory after the name guard (guard.py) has
judged that very name, so a rename or symlink swapped in meanwhile cannot
redirect the call:

* intermediate components are resolved first (openat2 with
  RESOLVE_NO_MAGICLINKS; through /proc a component walk that reads "self"
  as the agent, and lets the kernel follow /proc/PID/fd/N magic links);
* the last component is never followed by the kernel: a symlink there is
  read and resolved again, as the kernel would, up to 40 links;
* an existing file is pinned with O_PATH, judged by its own name and inode
  (readlink of that descriptor), and then that very file is opened through
  /proc/self/fd with the agent's flags, so O_TRUNC, permissions and
  read-only mounts are checked by the kernel in its own order;
* a new file is made with O_CREAT|O_EXCL|O_NOFOLLOW at the judged name.

The agent's umask is applied here (the broker's own is 0), its "self" in /proc
is its own pid in its pid namespace.
"""
from __future__ import annotations

import ctypes
import errno
import os
import secrets
import stat
import struct
import threading
from typing import TYPE_CHECKING, NamedTuple

from confine.kernel import notify
from confine.kernel.libc import check, libc, oserror

# The guard's only runtime names here: its verdict "vet this git config" and
# the prefix of the broker's own temporary names.
from confine.protect.guard import INTERNAL, VET

from .wire import FileRequest, Op, Reply, debug

if TYPE_CHECKING:
    from confine.protect.guard import Guard

MAXLINKS = 40
PROC_SUPER_MAGIC = 0x9FA0
AT_SYMLINK_FOLLOW = 0x400
AT_EMPTY_PATH = 0x1000
RENAME_NOREPLACE, RENAME_EXCHANGE, RENAME_WHITEOUT = 1, 2, 4
CONFIG_CAP = 1 << 20
_STATFS_SIZE = 128


class Refused(Exception):
    """errno and the reason the supervisor reports once."""
    def __init__(self, err: int, reason: str):
        super().__init__(reason)
        self.errno = err
        self.reason = reason


def _fstype(fd: int) -> int:
    buf = ctypes.create_string_buffer(_STATFS_SIZE)
    if libc.fstatfs(fd, buf) != 0:
        return 0
    return struct.unpack_from("<q", buf.raw)[0]


def _proc_root(fd: int) -> bool:
    return _fstype(fd) == PROC_SUPER_MAGIC and os.fstat(fd).st_ino == 1


def path_of(fd: int) -> str | None:
    """Where the descriptor's file is, None if it was deleted."""
    try:
        p = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None
    if not p.startswith("/") or p.endswith(" (deleted)"):
        return None
    return p


class Task(NamedTuple):
    """The agent thread a call is made for: what "self" and "thread-self" mean
    in its /proc (ids in its pid namespace), and its umask."""
    tgid: int
    tid: int
    umask: int


class FileBroker:
    """Judges and performs; one instance per run, shared by the request threads."""

    def __init__(self, guard: Guard | None):
        self.guard = guard
        self.vetted: set[tuple[int, int]] = set()   # inodes of checked git configs
        self.root = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        # Held while a name is judged and made (never around a call that can
        # block): every name the agent makes comes through here, so none can
        # appear or change type between a check and the call it guards.
        self.lock = threading.Lock()
        self.slow_only = False     # no openat2 here: walk every path component by component

    # ------------------------------------------------------------ resolution

    def _walk(self, task: Task, dirfd: int, path: bytes) -> tuple[int, bytes, bool]:
        """(pinned parent, last component, trailing slash). The caller closes
        the parent."""
        if not path:
            raise oserror(err=errno.ENOENT)
        slash = path.endswith(b"/")
        body = path.rstrip(b"/")
        if not body:                                   # "/" itself
            return os.dup(self.root), b".", False
        head, sep, base = body.rpartition(b"/")
        if not sep:
            head = b"."
        elif not head:
            head = b"/"
        if self.slow_only:
            return self._slow(task, dirfd, path)
        try:
            pfd = notify.openat2(head, os.O_PATH | os.O_DIRECTORY, notify.RESOLVE_NO_MAGICLINKS,
                                 dirfd=dirfd)
        except OSError as e:
            if e.errno == errno.ENOSYS:      # e.g. systemd's RestrictSUIDSGID= answers ENOSYS
                self.slow_only = True
            elif e.errno != errno.ELOOP:
                raise
            pfd = None
        if pfd is not None and _fstype(pfd) != PROC_SUPER_MAGIC:
            return pfd, base, slash
        if pfd is not None:
            os.close(pfd)
        return self._slow(task, dirfd, path)

    def _slow(self, task: Task, dirfd: int, path: bytes) -> tuple[int, bytes, bool]:
        """Component by component, for paths through /proc."""
        slash = path.endswith(b"/")
        cur = os.dup(self.root if path.startswith(b"/") else dirfd)
        todo = [c for c in reversed(path.split(b"/")) if c]
        if not todo:
            return cur, b".", False
        links = 0
        try:
            while True:
                c = todo.pop()
                if not todo:
                    return cur, c, slash
                if c == b".":
                    continue
                if c in (b"self", b"thread-self") and _proc_root(cur):
                    me = [str(task.tgid).encode()]
                    if c == b"thread-self":
                        me += [b"task", str(task.tid).encode()]
                    todo.extend(reversed(me))
                    continue
                nxt = os.open(c, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=cur)
                st = os.fstat(nxt)
                if stat.S_ISLNK(st.st_mode):
                    links += 1
                    if links > MAXLINKS:
                        os.close(nxt)
                        raise oserror(err=errno.ELOOP)
                    if _fstype(nxt) == PROC_SUPER_MAGIC and not _proc_root(cur):
                        # /proc/PID/{fd/N,cwd,root,...}: only the kernel can follow these
                        os.close(nxt)
                        nxt = os.open(c, os.O_PATH | os.O_CLOEXEC, dir_fd=cur)
                        st = os.fstat(nxt)
                    else:
                        target = os.readlink(c, dir_fd=cur)
                        os.close(nxt)
                        if target.startswith(b"/"):
                            os.close(cur)
                            cur = os.dup(self.root)
                        todo.extend(x for x in reversed(target.split(b"/")) if x)
                        if not todo:
                            todo.append(b".")
                        continue
                if not stat.S_ISDIR(st.st_mode):
                    os.close(nxt)
                    raise oserror(err=errno.ENOTDIR)
                os.close(cur)
                cur = nxt
        except BaseException:
            os.close(cur)
            raise

    @staticmethod
    def _where(pfd: int, base: bytes) -> str | None:
        d = path_of(pfd)
        return None if d is None else os.path.join(d, os.fsdecode(base))

    def _check_create(self, pfd: int, base: bytes, kind: str) -> None:
        if self.guard is None or base in (b".", b".."):
            return
        where = self._where(pfd, base)
        if where is None:
            return                         # a deleted directory: nothing can be made there
        why = self.guard.create(where, kind)
        if why is not None:
            raise Refused(errno.EACCES, f"{_verb(kind)} {where}: {why}")

    def _check_write(self, fd: int) -> None:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) in self.vetted:
            raise Refused(errno.EACCES, f"write {path_of(fd)}: a git config checked by confine")
        if self.guard is None:
            return
        p = path_of(fd)
        why = self.guard.write(p, st.st_dev, st.st_ino)
        if why is not None:
            raise Refused(errno.EACCES, f"write {p or 'a file'}: {why}")

    # ------------------------------------------------------------ operations

    def open(self, task: Task, dirfd: int, path: bytes, flags: int, mode: int) -> int:
        acc = flags & os.O_ACCMODE
        writing = acc != os.O_RDONLY or bool(flags & os.O_TRUNC)
        creat = bool(flags & os.O_CREAT)
        excl = creat and bool(flags & os.O_EXCL)
        mode = mode & 0o7777 & ~task.umask
        if flags & os.O_PATH:           # no access, no creation: only "self" matters
            pfd, base, slash = self._walk(task, dirfd, path)
            try:
                return os.open(base + (b"/" if slash else b""), flags | os.O_CLOEXEC, dir_fd=pfd)
            finally:
                os.close(pfd)
        if creat and flags & os.O_DIRECTORY:
            raise oserror(err=errno.EINVAL)
        links = 0
        dfd, own = dirfd, False
        try:
            for _ in range(MAXLINKS + 16):
                pfd, base, slash = self._walk(task, dfd, path)
                try:
                    if base in (b"self", b"thread-self") and _proc_root(pfd):
                        me = str(task.tgid).encode()
                        base = me if base == b"self" else me + b"/task/" + str(task.tid).encode()
                    name = base + (b"/" if slash else b"")
                    if slash and creat:        # the kernel refuses (EISDIR): nothing is made
                        return os.open(name, flags | os.O_CLOEXEC, mode, dir_fd=pfd)
                    if excl:
                        with self.lock:
                            self._check_create(pfd, base, "file")
                            return os.open(base, flags | os.O_CLOEXEC | os.O_NOFOLLOW, mode,
                                           dir_fd=pfd)
                    proc = _fstype(pfd) == PROC_SUPER_MAGIC
                    try:
                        # In /proc the kernel follows magic links (fd/N) to files that
                        # exist; elsewhere a final symlink is read and resolved here.
                        opath = os.open(name, os.O_PATH | os.O_CLOEXEC
                                        | (0 if proc or slash else os.O_NOFOLLOW), dir_fd=pfd)
                    except FileNotFoundError:
                        if not creat or proc or base in (b".", b".."):
                            raise
                        try:
                            with self.lock:
                                self._check_create(pfd, base, "file")
                                return os.open(base, flags | os.O_CLOEXEC | os.O_EXCL
                                               | os.O_NOFOLLOW, mode, dir_fd=pfd)
                        except FileExistsError:
                            continue       # made meanwhile: judge what is there now
                    try:
                        if stat.S_ISLNK(os.fstat(opath).st_mode):
                            if flags & os.O_NOFOLLOW:
                                raise oserror(err=errno.ELOOP)
                            links += 1
                            if links > MAXLINKS:
                                raise oserror(err=errno.ELOOP)
                            path = os.readlink(b"", dir_fd=opath)   # the link judged
                            if own:
                                os.close(dfd)
                            dfd, own, pfd = pfd, True, -1
                            continue
                        if writing:
                            self._check_write(opath)
                        # The very file judged, opened the way the agent asked (O_TRUNC,
                        # permissions, read-only mounts: the kernel's own order).
                        return os.open(f"/proc/self/fd/{opath}", (flags | os.O_CLOEXEC)
                                       & ~(os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW), mode)
                    finally:
                        os.close(opath)
                finally:
                    if pfd >= 0:
                        os.close(pfd)
            raise oserror(err=errno.ELOOP)
        finally:
            if own:
                os.close(dfd)

    def truncate(self, task: Task, dirfd: int, path: bytes, length: int) -> int:
        opath = self.open(task, dirfd, path, os.O_PATH, 0)
        try:
            self._check_write(opath)
            os.truncate(f"/proc/self/fd/{opath}", length)
        finally:
            os.close(opath)
        return 0

    def mkdir(self, task: Task, dirfd: int, path: bytes, mode: int) -> int:
        pfd, base, _ = self._walk(task, dirfd, path)
        try:
            self._check_create(pfd, base, "dir")
            os.mkdir(base, mode & 0o1777 & ~task.umask, dir_fd=pfd)
        finally:
            os.close(pfd)
        return 0

    def mknod(self, task: Task, dirfd: int, path: bytes, mode: int, dev: int) -> int:
        pfd, base, slash = self._walk(task, dirfd, path)
        try:
            fmt = stat.S_IFMT(mode)
            self._check_create(pfd, base, "file" if fmt in (0, stat.S_IFREG) else "node")
            os.mknod(base + (b"/" if slash else b""), fmt | (mode & 0o7777 & ~task.umask), dev,
                     dir_fd=pfd)
        finally:
            os.close(pfd)
        return 0

    def symlink(self, task: Task, target: bytes, dirfd: int, path: bytes) -> int:
        pfd, base, slash = self._walk(task, dirfd, path)
        try:
            self._check_create(pfd, base, "symlink")
            os.symlink(target, base + (b"/" if slash else b""), dir_fd=pfd)
        finally:
            os.close(pfd)
        return 0

    def link(self, task: Task, odir: int, opath: bytes, ndir: int, npath: bytes, flags: int) -> int:
        if flags & ~(AT_SYMLINK_FOLLOW | AT_EMPTY_PATH):
            raise oserror(err=errno.EINVAL)
        npfd, nbase, nslash = self._walk(task, ndir, npath)
        try:
            self._check_create(npfd, nbase, "link")
            if not opath and flags & AT_EMPTY_PATH:
                self._check_source(odir)
                check(libc.linkat(odir, b"", npfd, nbase + (b"/" if nslash else b""),
                                    AT_EMPTY_PATH))
                return 0
            opfd, obase, oslash = self._walk(task, odir, opath)
            try:
                oname = obase + (b"/" if oslash else b"")
                try:
                    src = os.open(oname, os.O_PATH | os.O_CLOEXEC
                                  | (0 if flags & AT_SYMLINK_FOLLOW else os.O_NOFOLLOW), dir_fd=opfd)
                except OSError:
                    src = -1
                if src >= 0:
                    try:
                        self._check_source(src)
                    finally:
                        os.close(src)
                check(libc.linkat(opfd, oname, npfd, nbase + (b"/" if nslash else b""),
                                    flags & AT_SYMLINK_FOLLOW))
            finally:
                os.close(opfd)
        finally:
            os.close(npfd)
        return 0

    def _check_source(self, fd: int) -> None:
        try:
            self._check_write(fd)
        except Refused as r:
            raise Refused(errno.EACCES, "another name for a protected file: " + r.reason) from None

    def rename(self, task: Task, odir: int, opath: bytes, ndir: int, npath: bytes, flags: int) -> int:
        if flags & ~(RENAME_NOREPLACE | RENAME_EXCHANGE | RENAME_WHITEOUT):
            raise oserror(err=errno.EINVAL)
        opfd, obase, oslash = self._walk(task, odir, opath)
        try:
            npfd, nbase, nslash = self._walk(task, ndir, npath)
            try:
                verdict = None
                src = self._where(opfd, obase)
                dst = self._where(npfd, nbase)
                if self.guard is not None and obase not in (b".", b".."):
                    if src and os.path.basename(src).startswith(INTERNAL):
                        raise Refused(errno.EACCES, f"rename {src}: a temporary name of confine's")
                    if dst is not None and nbase not in (b".", b".."):
                        verdict = self.guard.rename_to(dst)
                    if flags & RENAME_EXCHANGE and src is not None:
                        back = self.guard.rename_to(src)
                        if back is not None:
                            raise Refused(errno.EACCES, f"exchange {dst} with {src}: "
                                          + (back if back != VET else "protected path"))
                        if verdict == VET:
                            verdict = "protected path (.git/config)"
                # A directory from outside the workdir would bring names nobody
                # judged: EXDEV, so mv and shutil.move copy it, name by name.
                if self.guard is not None and _moves_in(self.guard, src, dst) and _is_dir(opfd, obase):
                    raise oserror(err=errno.EXDEV)
                if self.guard is not None and flags & RENAME_EXCHANGE and _moves_in(self.guard, dst, src) \
                        and _is_dir(npfd, nbase):
                    raise oserror(err=errno.EXDEV)
                if verdict == VET:
                    return self._vet_config(opfd, obase, npfd, nbase, flags, src, dst)
                if verdict is not None:
                    raise Refused(errno.EACCES, f"rename {src} to {dst}: {verdict}")
                check(libc.renameat2(opfd, obase + (b"/" if oslash else b""),
                                       npfd, nbase + (b"/" if nslash else b""), flags))
            finally:
                os.close(npfd)
        finally:
            os.close(opfd)
        return 0

    def _vet_config(self, opfd: int, obase: bytes, npfd: int, nbase: bytes, flags: int,
                    src: str | None, dst: str | None) -> int:
        """git's lock-file protocol onto <gitdir>/config: check every key, then
        install the checked bytes as a new inode the agent never had open."""
        from confine import protect
        if flags & (RENAME_EXCHANGE | RENAME_WHITEOUT):
            raise Refused(errno.EACCES, f"rename onto {dst}: protected path (.git/config)")
        fd = os.open(obase, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=opfd)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise Refused(errno.EACCES, f"rename {src} to {dst}: not a regular file")
            data = b""
            while len(data) <= CONFIG_CAP:
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                data += chunk
        finally:
            os.close(fd)
        if len(data) > CONFIG_CAP:
            raise Refused(errno.EACCES, f"git config {dst}: larger than {CONFIG_CAP} bytes")
        items, perr = protect.parse_git_config(data)
        bad = sorted({it.name for it in items if not protect.is_safe_key(it)})
        if perr or bad:
            what = f"syntax error ({perr})" if perr else "key(s) " + ", ".join(bad)
            raise Refused(errno.EACCES, f"git config {dst}: {what} not allowed in a repository "
                          "config written inside the sandbox (they could run programs for the "
                          "next person using git there)")
        tmp = (INTERNAL + secrets.token_hex(8)).encode()
        tfd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                      0, dir_fd=npfd)
        try:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(tfd, view):]
                os.fchmod(tfd, stat.S_IMODE(st.st_mode) & 0o666)
                nst = os.fstat(tfd)
                self.vetted.add((nst.st_dev, nst.st_ino))
            finally:
                os.close(tfd)
            check(libc.renameat2(npfd, tmp, npfd, nbase, flags & RENAME_NOREPLACE))
        except BaseException:
            try:
                os.unlink(tmp, dir_fd=npfd)
            except OSError:
                pass
            raise
        try:
            os.unlink(obase, dir_fd=opfd)
        except OSError:
            pass
        return 0

    # ------------------------------------------------------------ dispatch

    def handle(self, req: FileRequest, fds: list[int]) -> Reply:
        """Perform req; fds are the directories req.dirs index. Never raises
        OSError or Refused: they become the reply."""
        task = Task(req.tgid, req.tid, req.umask)
        d1, d2 = (fds[i] if i >= 0 else self.root for i in req.dirs)
        (p1, p2), op = req.paths, req.op
        try:
            if op == Op.OPEN:
                return Reply(0, fd=self.open(task, d1, p1, req.flags, req.mode))
            if op == Op.TRUNCATE:
                ret = self.truncate(task, d1, p1, req.arg)
            elif op in _MAKES_NAMES:
                with self.lock:
                    if op == Op.MKDIR:
                        ret = self.mkdir(task, d1, p1, req.mode)
                    elif op == Op.MKNOD:
                        ret = self.mknod(task, d1, p1, req.mode, req.arg)
                    elif op == Op.SYMLINK:
                        ret = self.symlink(task, req.target, d1, p1)
                    elif op == Op.LINK:
                        ret = self.link(task, d1, p1, d2, p2, req.flags)
                    else:
                        ret = self.rename(task, d1, p1, d2, p2, req.flags)
            else:
                return Reply(-1, errno.ENOSYS)
            return Reply(ret)
        except Refused as r:
            return Reply(-1, r.errno, r.reason)
        except OSError as e:
            if debug():
                import traceback
                traceback.print_exc()
            return Reply(-1, e.errno or errno.EIO)


# Calls that make or move a name: performed under FileBroker.lock.
_MAKES_NAMES = frozenset({Op.MKDIR, Op.MKNOD, Op.SYMLINK, Op.LINK, Op.RENAME})


def _moves_in(guard: Guard, src: str | None, dst: str | None) -> bool:
    return src is not None and dst is not None and guard.rel(src) is None and guard.rel(dst) is not None


def _is_dir(pfd: int, base: bytes) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(base, dir_fd=pfd).st_mode)
    except OSError:
        return False


def _verb(kind: str) -> str:
    return {"file": "create", "dir": "mkdir", "symlink": "symlink", "link": "hard link",
            "node": "mknod"}.get(kind, "create")
