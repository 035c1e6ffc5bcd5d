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
* an existing file is pinned with O_PATH, judged by its name in the pinned
  parent and its inode, and then that very file is opened through
  /proc/self/fd with the agent's flags, so O_TRUNC, permissions and
  read-only mounts are checked by the kernel in its own order;
* a new file is made with O_CREAT|O_EXCL|O_NOFOLLOW at the judged name.

Where a name is in the workdir is found by descriptor (_locate), never by
parsing what readlink says of /proc/self/fd/N: that string reads the same for
a live directory named `x (deleted)` as for a deleted one, and does not exist
past PATH_MAX. It is used only as a guess the kernel must confirm (openat2 from
a root of the workdir reaching the very same inode); otherwise ".." is walked
and compared by (st_dev, st_ino) with the workdir's roots. What cannot be told
is refused (EACCES), never allowed.

Pathname unix socket addresses are resolved here too (unix_target), in the
agent's view, and judged by descriptor against the roots the supervisor sent.

Without a mount namespace the host's mounts are writable, and Landlock does
not restrict chmod, chown, utime or extended attributes: those calls come here
(handle_meta). The path is resolved to an O_PATH descriptor as the kernel
would (following the last symlink or not), that very file is judged by
descriptor (walking ".." to a writable root the supervisor sent, never past a
read-only entry or secret; the name guard for workdir names) and the call is
made on the descriptor, so a rename or symlink swapped in meanwhile changes
nothing. A file with more than one name is refused: another name may lie
outside the writable paths (a hard link made before the run), and no
descriptor can tell where.

The agent's umask is applied here (the broker's own is 0), its "self" in /proc
is its own pid in its pid namespace. Where the supervisor did not read the
umask (a mkdir, an open with O_CREAT but not O_EXCL: most name something that
exists, and nothing is made), it is read here only when a name is made
(Umasks).

Held names (guard.hold_at, protect/held.py): a new protected file or directory
of the working tree that would be refused is made in the run's held area
instead, at the same workdir-relative path below it, and the agent's call
succeeds (git's checkout, tar and unzip then go on). The held area is outside
the workdir and never becomes part of it (a directory from outside is never
renamed in: EXDEV). A path through a held directory (`.vscode/tasks.json`
after `mkdir .vscode`) continues there; for everything else the name does not
exist. When git installs an index (`index.lock` renamed onto `.git/index`),
the entries of held paths get the skip-worktree bit, so git neither reports
them deleted nor commits their deletion. If the hold cannot be made, the call
is refused as before.

Pointer files (protect/gitlink.py: a new `.git` file, a worktree's
`commondir`) are opened by git before their content exists: the broker makes
them without a name (O_TMPFILE), and at the start of the next call reads what
was written, judges it and puts a fresh copy at the name (_settle); one that
does not pass never appears. A new `.gitmodules` (git's lock-file rename) and
a submodule's core.worktree are checked by content like a git config.
"""
from __future__ import annotations

import ctypes
import errno
import os
import stat
import struct
import threading
from typing import TYPE_CHECKING, Callable

from confine.errors import printable
from confine.kernel import landlock, notify
from confine.kernel.libc import check, libc, oserror

# The guard's only runtime names here: its verdicts "vet this git config" and
# "vet this .gitmodules", the prefix of the broker's own temporary names, the
# folding names are compared by, and a root's key; gitlink judges pointer files'
# content.
from confine.protect import gitlink
from confine.protect.gitconfig import ConfigItem
from confine.protect.guard import INTERNAL, VET, VET_MODULES, fold, root_key
from confine.protect.held import held_key, mark_skip_worktree
from confine.undo.client import KeepClient

from ..record import NamedTuple
from .wire import (
    APPROVED_WRITE,
    ASK_UNIX,
    ASK_WRITE,
    UMASK_READ,
    UMASK_UNREAD,
    FileRequest,
    MetaRequest,
    Op,
    Reply,
    debug,
)

# Read once where this module is imported (the supervisor, before the broker's
# fork): the broker's own seccomp filter may refuse the Landlock calls.
_TRUNCATE_ABI_MISSING = landlock.kernel_abi() < 3

if TYPE_CHECKING:
    from confine.protect.guard import Guard

MAXLINKS = 40
# Deepest directory the guard judges: one level is a few syscalls, and a
# path within PATH_MAX has fewer than 2048 components.
MAX_DEPTH = 4096
SCAN_CAP = 200_000     # entries read to find a directory's name when the hint fails
PROC_SUPER_MAGIC = 0x9FA0
RESOLVE_BENEATH = 0x08
AT_SYMLINK_FOLLOW = 0x400
AT_EMPTY_PATH = 0x1000
RENAME_NOREPLACE, RENAME_EXCHANGE, RENAME_WHITEOUT = 1, 2, 4
AT_SYMLINK_NOFOLLOW = 0x100
CONFIG_CAP = 1 << 20
# Checked git configs the broker holds open at once (see FileBroker.vetted):
# one per repository git config ran in; more only if the agent keeps
# renamed-away configs alive, and then a further `git config` is refused.
# With PINNED_CAP (+ the replaced configs pinned later) well below the usual
# 1024 descriptors a process may have.
VETTED_CAP = 256
# Files protected at start the broker holds open (FileBroker.pinned); past
# this a removed one's number may come back as a new file the guard refuses.
PINNED_CAP = 256
# Pointer files (.git, commondir) written but not yet checked and put in
# place (FileBroker.pointers): git has one at a time; past this more are refused.
POINTERS_CAP = 64
INDEX_CAP = 256 << 20     # a bigger index is installed unchanged (held entries look deleted)
_STATFS_SIZE = 128


# File systems on which no file call the broker makes can wait on anything but
# the local kernel; on any other (NFS, FUSE, CIFS...) a call may hang, so it is
# made on a worker thread (broker.py), never on the one receiving requests.
LOCAL_FS = frozenset({
    0x01021994,     # tmpfs
    0x858458F6,     # ramfs
    0xEF53,         # ext2/3/4
    0x58465342,     # xfs
    0x9123683E,     # btrfs
    0x794C7630,     # overlayfs
    0xF2F52010,     # f2fs
    0xCA451A4E,     # bcachefs
    0x2FC12FC1,     # zfs
    0x73717368,     # squashfs
    PROC_SUPER_MAGIC,
})


class Deferred(Exception):
    """Raised on the broker's receiving thread before a call that might block
    changes anything: the call is made again from the start on a worker."""


class Refused(Exception):
    """errno and the reason the supervisor reports once."""
    def __init__(self, err: int, reason: str):
        super().__init__(reason)
        self.errno = err
        self.reason = reason


class AskFirst(Refused):
    """A refusal the engine may turn into an allow (wire.ASK): `fd` is the very
    file judged (the caller owns it), `subject` what the question is about."""
    def __init__(self, err: int, reason: str, fd: int, subject: str):
        super().__init__(err, reason)
        self.fd = fd
        self.subject = subject


class _StatfsBuf(threading.local):
    """A struct statfs per thread: one per call was a fifth of _fstype's time."""

    def __init__(self) -> None:
        self.buf = ctypes.create_string_buffer(_STATFS_SIZE)


_statfs = _StatfsBuf()


def _fstype(fd: int) -> int:
    buf = _statfs.buf
    if libc.fstatfs(fd, buf) != 0:
        return 0
    return _F_TYPE.unpack_from(buf)[0]


_F_TYPE = struct.Struct("<q")


def _proc_root(fd: int) -> bool:
    return _fstype(fd) == PROC_SUPER_MAGIC and os.fstat(fd).st_ino == 1


def path_of(fd: int) -> str | None:
    """Where the descriptor's file is, for messages only: never judged, since a
    live directory named `x (deleted)` reads like a deleted one and a path
    longer than PATH_MAX does not read at all."""
    try:
        p = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None
    if not p.startswith("/") or p.endswith(" (deleted)"):
        return None
    return p


def _ident(st: os.stat_result) -> tuple[int, int]:
    return st.st_dev, st.st_ino


def _hint(fd: int) -> list[bytes]:
    """The components the kernel names for fd: a guess at each directory's
    name, kept only where a (st_dev, st_ino) comparison confirms it."""
    try:
        p = os.readlink(b"/proc/self/fd/%d" % fd)
    except OSError:
        return []
    return [c for c in p.split(b"/") if c] if p.startswith(b"/") else []


def _same(pfd: int, name: bytes, st: os.stat_result) -> bool:
    """`name` in directory pfd is, itself (no symlink followed), the file st."""
    try:
        return _ident(os.stat(name, dir_fd=pfd, follow_symlinks=False)) == _ident(st)
    except OSError:
        return False


def _name_in(up: int, st: os.stat_result, guess: bytes | None) -> bytes | None:
    """The name under which directory `up` holds the directory `st`, None if
    it cannot be told (unreadable, not found, more than SCAN_CAP entries)."""
    want = _ident(st)

    def same(name: bytes) -> bool:
        try:
            return _ident(os.stat(name, dir_fd=up, follow_symlinks=False)) == want
        except OSError:
            return False
    if guess is not None and guess not in (b".", b"..") and same(guess):
        return guess
    try:
        dfd = os.open(b".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=up)
    except OSError:
        return None
    try:
        dirs: list[bytes] = []
        with os.scandir(dfd) as it:
            for n, e in enumerate(it):
                if n >= SCAN_CAP:
                    return None
                name = os.fsencode(e.name)
                if e.inode() == st.st_ino and same(name):
                    return name
                if e.is_dir(follow_symlinks=False):
                    dirs.append(name)
        # d_ino may differ from st_ino (a mount point, overlayfs): compare by stat
        return next((name for name in dirs if same(name)), None)
    except OSError:
        return None
    finally:
        os.close(dfd)


class Task(NamedTuple):
    """The agent thread a call is made for: what "self" and "thread-self" mean
    in its /proc (ids in its pid namespace), and its umask (UMASK_READ: read
    when needed, Umasks); nid: the notification it waits in."""
    tgid: int
    tid: int
    umask: int
    nid: int = 0


def _status_umask(raw: bytes) -> int:
    """The Umask: line of a /proc/TID/status text (0o022 if absent, as the
    supervisor's)."""
    i = raw.find(b"\nUmask:")
    if i < 0:
        return 0o022
    end = raw.find(b"\n", i + 7)
    return int(raw[i + 7:end if end >= 0 else len(raw)], 8)


class Unread(Exception):
    """The umask could not be read here (Umasks); nothing was made."""


class Umasks:
    """The umask of an agent thread, read from its status file in this view's
    /proc (the agent's pid namespace: its tid there) when a call makes a name
    and the supervisor did not read it. The umask changes at any time, so it
    is read on every call; the file stays open per thread. A read through it
    fails (ESRCH) once the thread it was opened for is gone, so a read that
    succeeds proves that thread still holds this tid, the one the notifying
    thread held when the supervisor checked its notification. A file opened
    now is proved the same way by the notification itself (ID_VALID after the
    read): its thread still waits, so it held this tid throughout. A status
    file that cannot be read here (a profile without /proc), or no listener
    to prove it with: Unread, before anything is made."""

    CAP = 64

    def __init__(self) -> None:
        self.listener = -1          # the agent's seccomp listener (broker.py)
        self.by_tid: dict[int, int] = {}
        self.lock = threading.Lock()

    def get(self, task: Task) -> int:
        with self.lock:
            fd = self.by_tid.get(task.tid)
            if fd is not None:
                try:
                    raw = os.pread(fd, 512, 0)
                except OSError:
                    raw = b""
                if raw:
                    return _status_umask(raw)
                del self.by_tid[task.tid]
                os.close(fd)
            if self.listener < 0:
                raise Unread()
            try:
                fd = os.open(b"/proc/%d/task/%d/status" % (task.tgid, task.tid),
                             os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                raise Unread() from None
            try:
                try:
                    raw = os.pread(fd, 512, 0)
                except OSError:
                    raw = b""
                if not raw or _fstype(fd) != PROC_SUPER_MAGIC:
                    raise Unread()
                if not notify.id_valid(self.listener, task.nid):
                    raise oserror(err=errno.ESRCH)    # gone: nothing is made for it
            except BaseException:
                os.close(fd)
                raise
            while len(self.by_tid) >= self.CAP:
                os.close(self.by_tid.pop(next(iter(self.by_tid))))
            self.by_tid[task.tid] = fd
            return _status_umask(raw)


class FileBroker:
    """Judges and performs; one instance per run, shared by the request threads."""

    def __init__(self, guard: Guard | None):
        self.guard = guard
        # Checked git configs installed by this broker, by identity, each held by
        # an O_PATH descriptor: an inode number is only meaningful while the
        # inode lives (ext4 gives a freed number to the very next new file), and
        # the descriptor keeps it alive. Dropped once no name leads to it.
        self.vetted: dict[tuple[int, int], int] = {}
        # The files the guard knows by inode (protected at start), held open
        # before the agent runs: without a bind (Landlock only; an existing
        # repository's config) the agent may remove one, and its number must
        # not pass to the next new file. Repository configs first, bounded.
        self.pinned: dict[tuple[int, int], int] = {}
        # Pointer files git is writing (_pointer_open): (directory, name) ->
        # (that directory pinned, name, the nameless file, gitlink kind).
        self.pointers: dict[tuple[tuple[int, int], bytes], tuple[int, bytes, int, str]] = {}
        # Refusals of pointers judged during another call: said with the next
        # reply that has nothing of its own to say (bounded).
        self.late: list[str] = []
        if guard is not None and guard.inodes:
            for rel in guard.files:
                if len(self.pinned) >= PINNED_CAP:
                    break
                try:
                    fd = os.open(os.path.join(guard.workdir, rel),
                                 os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
                except OSError:
                    continue
                ident = _ident(os.fstat(fd))
                if ident in guard.inodes and ident not in self.pinned:
                    self.pinned[ident] = fd
                else:
                    os.close(fd)
        self.root = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        self.umasks = Umasks()
        # The supervisor's keeper (confine/undo/): files of the workdir are kept
        # there before they are removed, replaced or written; None: nothing is kept.
        self.undo: KeepClient | None = None
        # The thread that receives requests (broker.py): a call on it that might
        # block raises Deferred instead.
        self.inline: int | None = None
        # Held while a name is judged and made (never around a call that can
        # block): every name the agent makes comes through here, so none can
        # appear or change type between a check and the call it guards.
        self.lock = threading.Lock()
        self.slow_only = False     # no openat2 here: walk every path component by component
        # The held area, pinned by descriptor (the supervisor made it and sent
        # its identity): without it nothing is held and protected names are refused.
        self.held_fd: int | None = None
        self.held: set[tuple[str, ...]] = set()    # raw workdir components held so far
        self._said = threading.local()              # the held line of this thread's call
        if guard is not None and guard.held is not None:
            try:
                hfd = os.open(guard.held, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW
                              | os.O_CLOEXEC)
                if _ident(os.fstat(hfd)) == guard.held_ident:
                    self.held_fd = hfd
                else:
                    os.close(hfd)
            except OSError:
                pass
        # The workdir by identity, as the broker sees it (every path it is
        # mounted at is the same directory): positions are judged by walking
        # ".." from the pinned parent until one of these, or the top, is met.
        # The descriptors pin the inodes, so their numbers are not reused.
        self.roots: dict[tuple[int, int], int] = {}
        # What a position below each root starts with (guard.Roots: the roots of
        # write grants are told apart from the workdir's, one guard each).
        self.prefix: dict[tuple[int, int], tuple[str, ...]] = {}
        self.socket_dirs: set[tuple[int, int]] = set()
        # Where metadata calls may act without a mount namespace (set_writable).
        self.meta_roots: set[tuple[int, int]] = set()
        self.meta_holes: set[tuple[int, int]] = set()
        self.judge_truncate = False
        self.socket_entries: set[tuple[tuple[int, int], bytes]] = set()
        self.asks = 0       # wire.ASK_* bits: refusals put to the supervisor first (AsksRequest)
        for r in (guard.roots if guard is not None else ()):
            try:
                fd = os.open(r, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
            except OSError:
                continue
            ident = _ident(os.fstat(fd))
            if ident in self.roots:
                os.close(fd)
                continue
            self.roots[ident] = fd
            assert guard is not None
            self.prefix[ident] = guard.prefix(r)
        # Each root's own name in this view (the kernel's, so no symlink in it):
        # the fast path of _locate tries the directory's name below these.
        self.root_names: list[tuple[bytes, int, tuple[str, ...]]] = []
        for r in (guard.roots if guard is not None else ()):
            try:
                fd = os.open(r, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
            except OSError:
                continue
            name = _hint(fd)
            if name and _ident(os.fstat(fd)) in self.roots:
                self.root_names.append((b"/" + b"/".join(name), fd,
                                        self.prefix[_ident(os.fstat(fd))]))
            else:
                os.close(fd)

    # ------------------------------------------------------------ resolution

    def _walk(self, task: Task, dirfd: int, path: bytes) -> tuple[int, bytes, bool]:
        """(pinned parent, last component, trailing slash). The caller closes
        the parent. On the receiving thread, Deferred for a parent on a file
        system that is not local (nothing was changed yet)."""
        pfd, base, slash, fstype = self._walk_to(task, dirfd, path)
        if self.inline is not None and self.inline == threading.get_ident() \
                and (fstype if fstype is not None else _fstype(pfd)) not in LOCAL_FS:
            os.close(pfd)
            raise Deferred()
        return pfd, base, slash

    def _walk_to(self, task: Task, dirfd: int, path: bytes) -> tuple[int, bytes, bool, int | None]:
        """_walk, and the parent's file system type where it was asked."""
        if not path:
            raise oserror(err=errno.ENOENT)
        slash = path.endswith(b"/")
        body = path.rstrip(b"/")
        if not body:                                   # "/" itself
            return os.dup(self.root), b".", False, None
        head, sep, base = body.rpartition(b"/")
        if not sep:
            head = b"."
        elif not head:
            head = b"/"
        if self.slow_only:
            return (*self._slow(task, dirfd, path), None)
        if head == b"." and sep == b"":
            # A name in dirfd itself: what openat2(".") would give, without the
            # walk (the lookup of the name itself checks search permission).
            if not stat.S_ISDIR(os.fstat(dirfd).st_mode):
                raise oserror(err=errno.ENOTDIR)
            pfd = os.dup(dirfd)
            fstype = _fstype(pfd)
            if fstype != PROC_SUPER_MAGIC:
                return pfd, base, slash, fstype
            os.close(pfd)
            return (*self._slow(task, dirfd, path), None)
        try:
            pfd = notify.openat2(head, os.O_PATH | os.O_DIRECTORY, notify.RESOLVE_NO_MAGICLINKS,
                                 dirfd=dirfd)
        except OSError as e:
            if e.errno == errno.ENOSYS:      # e.g. systemd's RestrictSUIDSGID= answers ENOSYS
                self.slow_only = True
            elif e.errno in (errno.ENOENT, errno.ENOTDIR):
                # Perhaps through a held directory, or through /proc/self (/dev/fd):
                # the kernel read "self" as the broker, whose fd N or task T may not
                # exist (ENOENT) where the agent's does; a magic link there gives
                # ELOOP only when the broker happens to hold that fd. The walk reads
                # "self" as the agent (Claude Code's mkdir("/proc/self/fd/N/x")).
                return (*self._slow(task, dirfd, path), None)
            elif e.errno != errno.ELOOP:
                raise
            pfd = None
        if pfd is not None:
            fstype = _fstype(pfd)
            if fstype != PROC_SUPER_MAGIC:
                return pfd, base, slash, fstype
            os.close(pfd)
        return (*self._slow(task, dirfd, path), None)

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
                try:
                    nxt = os.open(c, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=cur)
                except FileNotFoundError:
                    nxt = self._held_dir(cur, c)
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

    # ------------------------------------------------------------ position

    def _locate(self, fd: int) -> tuple[str, ...] | None:
        """The raw components of directory fd below the workdir, () for the
        workdir, None if it is not below it. Found by descriptor: ".." is
        walked up to a root of the workdir (by st_dev, st_ino) or to the top of
        this view; a name is taken only when a stat of it in its parent is that
        very directory. Refused (EACCES) when it cannot be told: the guard
        never allows what it could not judge."""
        if not self.roots:
            raise Refused(errno.EACCES, "the name guard cannot find the workdir")
        hint = _hint(fd)
        fast = self._locate_fast(fd, hint)
        if fast is not False:
            return fast
        if not self._below_root(fd):
            return None
        cur = os.dup(fd)
        try:
            st = os.fstat(cur)
            if st.st_nlink == 0:
                raise oserror(err=errno.ENOENT)    # a removed directory holds no new names
            names: list[bytes | None] = []
            for _ in range(MAX_DEPTH):
                if _ident(st) in self.roots:
                    if None in names:
                        raise Refused(errno.EACCES, "cannot tell where this directory is in "
                                      "the workdir (a name it could not read)")
                    return self.prefix[_ident(st)] + tuple(
                        os.fsdecode(n) for n in reversed(names) if n is not None)
                up = os.open(b"..", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=cur)
                ust = os.fstat(up)
                if _ident(ust) == _ident(st):
                    os.close(up)
                    return None                    # the top of this view: not below the workdir
                k = len(names)
                names.append(_name_in(up, st, hint[-1 - k] if k < len(hint) else None))
                os.close(cur)
                cur, st = up, ust
            raise Refused(errno.EACCES, f"more than {MAX_DEPTH} directories deep: too deep for "
                          "the name guard to judge")
        except OSError as e:
            if e.errno == errno.ENOENT:
                raise
            raise Refused(errno.EACCES, f"cannot tell where this directory is ({e.strerror})") \
                from None
        finally:
            os.close(cur)

    def _locate_fast(self, fd: int, hint: list[bytes]) -> tuple[str, ...] | bool:
        """_locate in one openat2 call where the kernel's name for fd lies
        below a root's: the name is only a guess, kept when the kernel,
        resolving it from that root (RESOLVE_BENEATH, no symlinks, no magic
        links), arrives at this very directory. False: no verdict, walk."""
        if not hint or self.slow_only:
            return False
        full = b"/" + b"/".join(hint)
        flags = RESOLVE_BENEATH | notify.RESOLVE_NO_SYMLINKS | notify.RESOLVE_NO_MAGICLINKS
        for name, rfd, pre in self.root_names:
            if full == name:
                rel = b"."
            elif full.startswith(name + b"/"):
                rel = full[len(name) + 1:]
            else:
                continue
            try:
                got = notify.openat2(rel, os.O_PATH | os.O_DIRECTORY, flags, dirfd=rfd)
            except OSError:
                return False
            try:
                st, gst = os.fstat(fd), os.fstat(got)
            finally:
                os.close(got)
            if _ident(gst) != _ident(st) or st.st_nlink == 0:
                return False
            return pre if rel == b"." else pre + tuple(os.fsdecode(c) for c in rel.split(b"/"))
        return False

    def _below_root(self, fd: int) -> bool:
        """Whether walking ".." from directory fd meets a root of the workdir
        (identities only: names are needed only below one)."""
        cur = os.dup(fd)
        try:
            st = os.fstat(cur)
            if st.st_nlink == 0:
                raise oserror(err=errno.ENOENT)    # a removed directory holds no new names
            for _ in range(MAX_DEPTH):
                if _ident(st) in self.roots:
                    return True
                up = os.open(b"..", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=cur)
                os.close(cur)
                cur = up
                ust = os.fstat(cur)
                if _ident(ust) == _ident(st):
                    return False                   # the top of this view
                st = ust
        except OSError as e:
            if e.errno == errno.ENOENT:
                raise
            raise Refused(errno.EACCES, f"cannot tell where this directory is ({e.strerror})") \
                from None
        finally:
            os.close(cur)
        raise Refused(errno.EACCES, f"more than {MAX_DEPTH} directories deep: too deep for the "
                      "name guard to judge")

    def _position(self, pfd: int, base: bytes) -> tuple[str, ...] | None:
        """Raw components of the name base in the pinned directory pfd."""
        comps = self._locate(pfd)
        if comps is None:
            return None
        return comps if base in (b".", b"") else comps + (os.fsdecode(base),)

    def _positions(self, opfd: int, obase: bytes, npfd: int,
                   nbase: bytes) -> tuple[tuple[str, ...] | None, tuple[str, ...] | None]:
        """_position of two names; the directory is placed once when both
        pinned parents are the same directory (a rename within it)."""
        if _ident(os.fstat(opfd)) != _ident(os.fstat(npfd)):
            return self._position(opfd, obase), self._position(npfd, nbase)
        comps = self._locate(opfd)
        if comps is None:
            return None, None
        return (comps if obase in (b".", b"") else comps + (os.fsdecode(obase),),
                comps if nbase in (b".", b"") else comps + (os.fsdecode(nbase),))

    def _placed(self, fd: int, st: os.stat_result) -> tuple[int, bytes] | None:
        """(its directory, its name) for the non-directory fd: the kernel's
        name for it, followed from the root of this view through no symlink
        (one openat2, else component by component); None if that name does not
        lead to this very file. The caller closes the directory."""
        hint = _hint(fd)
        if not hint:
            return None
        cur = -1
        try:
            if len(hint) > 1 and not self.slow_only:
                try:
                    cur = notify.openat2(b"/".join(hint[:-1]), os.O_PATH | os.O_DIRECTORY,
                                         notify.RESOLVE_NO_SYMLINKS
                                         | notify.RESOLVE_NO_MAGICLINKS, dirfd=self.root)
                except OSError as e:
                    if e.errno != errno.ENOSYS:
                        raise
                    self.slow_only = True
            if cur < 0:
                cur = os.dup(self.root)
                for c in hint[:-1]:
                    nxt = os.open(c, os.O_PATH | os.O_NOFOLLOW | os.O_DIRECTORY | os.O_CLOEXEC,
                                  dir_fd=cur)
                    os.close(cur)
                    cur = nxt
            if _ident(os.stat(hint[-1], dir_fd=cur, follow_symlinks=False)) == _ident(st):
                cur, found = -1, cur
                return found, hint[-1]
        except OSError:
            pass
        finally:
            if cur >= 0:
                os.close(cur)
        return None

    def _file_position(self, fd: int, st: os.stat_result) -> tuple[str, ...] | None:
        """Where the file fd is (reached through /proc magic links, or followed
        by the kernel). A regular file that cannot be placed is refused; a file
        without a name (nlink 0) or one whose writes leave nothing behind (a
        pipe, a device) has no position to judge."""
        if stat.S_ISDIR(st.st_mode):
            return self._locate(fd)
        if st.st_nlink == 0 and not stat.S_ISLNK(st.st_mode):
            return None            # unlinked: a new name for it is judged by linkat
        placed = self._placed(fd, st)
        if placed is not None:
            try:
                return self._position(*placed)
            finally:
                os.close(placed[0])
        if stat.S_ISREG(st.st_mode):
            raise Refused(errno.EACCES, "cannot tell where this file is (renamed, removed or "
                          "too deep to name)")
        return None

    # ------------------------------------------------------------ unix sockets

    def set_socket_roots(self, fds: list[int], names: tuple[bytes, ...]) -> None:
        """Where pathname unix sockets may be (wire.RootsRequest), by identity."""
        for fd, name in zip(fds, names, strict=False):
            ident = _ident(os.fstat(fd))
            if name:
                self.socket_entries.add((ident, name))
            else:
                self.socket_dirs.add(ident)

    def unix_target(self, task: Task, dirfd: int, path: bytes) -> int:
        """The socket file the agent's connect() to `path` reaches, resolved
        here in the agent's view (its mounts, its /proc, its uid: nothing the
        agent names can steer a lookup into the supervisor's /proc), as an
        O_PATH descriptor, if it lies under an allowed root: judged by
        descriptor, walking ".." from its directory. Refused otherwise."""
        pfd, base, slash = self._walk(task, dirfd, path)
        opath = -1
        try:
            # as open() with O_PATH: a final symlink is followed
            opath = os.open(base + (b"/" if slash else b""), os.O_PATH | os.O_CLOEXEC, dir_fd=pfd)
            st = os.fstat(opath)
            if not stat.S_ISSOCK(st.st_mode):
                raise oserror(err=errno.ECONNREFUSED)
            # The name walked to is this very socket (no symlink followed at the
            # end): placed by the directory walked to, else by the kernel's name.
            if not slash and _same(pfd, base, st):
                placed: tuple[int, bytes] | None = (pfd, base)
                pfd = -1                        # _socket_allowed closes it
            else:
                placed = self._placed(opath, st)
            if placed is None or not self._socket_allowed(*placed):
                where = path_of(opath)
                why = (f"connect to unix socket {os.fsdecode(path)}"
                       + (f" (-> {where})" if where and where.encode() != path else "")
                       + ": outside the workdir and unix_sockets.allow")
                self._ask_unix(opath, where or os.fsdecode(path), why)
                raise Refused(errno.EACCES, why)
        except BaseException as e:
            if opath >= 0 and not isinstance(e, AskFirst):
                os.close(opath)
            raise
        finally:
            if pfd >= 0:
                os.close(pfd)
        return opath

    def _ask_unix(self, opath: int, where: str, why: str) -> None:
        """approvals.unix_sockets may allow it: asked first (AskFirst), on the socket
        already resolved, so what is approved is the very file connected to."""
        if self.asks & ASK_UNIX and where.startswith("/"):
            raise AskFirst(errno.EACCES, why, opath, where)

    def _socket_allowed(self, pfd: int, base: bytes) -> bool:
        try:
            st = os.fstat(pfd)
            if (_ident(st), base) in self.socket_entries or _ident(st) in self.socket_dirs:
                return True
            cur = os.dup(pfd)
            try:
                for _ in range(MAX_DEPTH):
                    if _ident(st) in self.socket_dirs:
                        return True
                    up = os.open(b"..", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=cur)
                    ust = os.fstat(up)
                    os.close(cur)
                    cur = up
                    if _ident(ust) == _ident(st):
                        return False
                    st = ust
                return False
            finally:
                os.close(cur)
        finally:
            os.close(pfd)

    def _check_create(self, pfd: int, base: bytes, kind: str, hold: bool = False) -> int | None:
        """Refuses (Refused) a creation the guard does not allow; with hold,
        one it may hold instead returns the held parent directory (the caller
        makes `base` there and closes it). None: make it where asked."""
        if self.guard is None or base in (b".", b".."):
            return None
        comps = self._position(pfd, base)
        folded = self.guard.folded(comps)
        why = self.guard.create_at(folded, kind)
        if why is None:
            return None
        assert comps is not None
        if kind == "file" and self.asks & ASK_WRITE and self._asked_write(pfd, base, comps, why):
            return None
        if hold and self.held_fd is not None and self.guard.hold_at(folded, kind):
            # Made elsewhere, so the kernel's own check comes first: search
            # permission on this directory (_walk_to did not walk to it for a
            # name in the dirfd itself). EACCES, as the kernel.
            os.stat(b".", dir_fd=pfd)
            try:
                hfd = self._held_parent(comps)
            except OSError as e:
                raise Refused(errno.EACCES, f"{_verb(kind)} {self.guard.show(comps)}: {why} "
                              f"(it could not be held: {e.strerror or e})") from None
            self.held.add(comps)
            # escaped: the names come from the tree being checked out
            self._said.line = (f"held {printable(self.guard.show(comps))}: {why}: made in the run's "
                               "held area, not in the workdir (listed at exit)")
            return hfd
        raise Refused(errno.EACCES, f"{_verb(kind)} {self.guard.show(comps)}: {why}")

    def _asked_write(self, pfd: int, base: bytes, comps: tuple[str, ...], why: str) -> bool:
        """approvals.protected_writes may allow a new file at a protected name: the
        supervisor's engine is asked (wire.ASK) with FileBroker.lock released (the
        answer may take a person's minute; the caller's O_EXCL create then judges
        what is there by the time it is back). Called with the lock held. True:
        made in place, said to the supervisor (APPROVED_WRITE) with the file's
        identity once opened (_approved_line); Refused: denied, with the reason;
        False: nothing can ask (the guard's refusal stands)."""
        ask = getattr(self._said, "ask", None)
        if ask is None:
            if self.inline == threading.get_ident():
                raise Deferred()     # asked again on a thread of its own, where waiting is fine
            return False
        rel = "/".join(comps)
        shown = self.guard.show(comps) if self.guard is not None else rel
        self.lock.release()
        try:
            allowed, reason = ask(f"protected_write\0{rel}\0create {shown}: {why}")
        finally:
            self.lock.acquire()
        if not allowed:
            raise Refused(errno.EACCES, f"create {shown}: {why}: {reason}" if reason
                          else f"create {shown}: {why}")
        if self._position(pfd, base) != comps:
            # its directory was moved while the person was asked: the name
            # approved is not where the file would be made
            raise Refused(errno.EACCES, f"create {shown}: {why}: moved while asked")
        self._said.approved = rel
        return True

    def ask_with(self, ask: Callable[[str], tuple[bool, str]] | None) -> None:
        """This thread's way to put a question to the supervisor (broker._Verdicts),
        for the call it performs next; None: it cannot wait (the receiving thread)."""
        self._said.ask = ask

    def _approved_line(self, fd: int) -> str:
        """The reply's line for an open the engine approved (_asked_write), "" otherwise."""
        rel = getattr(self._said, "approved", None)
        if not rel:
            return ""
        st = os.fstat(fd)
        return f"{APPROVED_WRITE}{rel}\0{st.st_dev}:{st.st_ino}"

    # ------------------------------------------------------------ held names

    def _held_parent(self, comps: tuple[str, ...]) -> int:
        """The directory of the held area that mirrors comps[:-1], made as
        needed, one component at a time and never through a symlink (the
        agent can write the held area too). The caller closes it."""
        assert self.held_fd is not None
        cur = os.dup(self.held_fd)
        try:
            for c in held_key(comps) + comps[1 if root_key(comps) else 0:-1]:
                name = os.fsencode(c)
                try:
                    os.mkdir(name, 0o700, dir_fd=cur)
                except FileExistsError:
                    pass
                nxt = os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                              dir_fd=cur)
                os.close(cur)
                cur = nxt
            return cur
        except BaseException:
            os.close(cur)
            raise

    def _held_dir(self, cur: int, name: bytes) -> int:
        """The held directory that stands for the missing workdir name `name`
        in directory cur, if one was held; FileNotFoundError otherwise."""
        if self.held_fd is None or self.guard is None or name in (b".", b".."):
            raise oserror(err=errno.ENOENT)
        try:
            comps = self._position(cur, name)
        except Refused:
            comps = None
        if comps is None or not any(comps[:k] in self.held for k in range(1, len(comps) + 1)):
            raise oserror(err=errno.ENOENT)
        try:
            hfd = self._held_parent(comps[:-1] + ("",))
        except OSError:
            raise oserror(err=errno.ENOENT) from None
        try:
            return os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                           dir_fd=hfd)
        except OSError:
            raise oserror(err=errno.ENOENT) from None
        finally:
            os.close(hfd)

    def _in_held(self, fd: int) -> bool:
        """Whether directory fd lies in the held area, where names the agent
        cannot see must behave as missing: git's O_EXCL creation and mkdir of
        a path it found absent succeed there (a second checkout, a cherry-pick)."""
        if self.held_fd is None or not self.held:
            return False
        want = _ident(os.fstat(self.held_fd))
        cur = os.dup(fd)
        try:
            st = os.fstat(cur)
            if st.st_dev != want[0]:
                return False            # another filesystem (a TMPDIR tmpfs): at once
            for _ in range(MAX_DEPTH):
                if _ident(st) == want:
                    return True
                if _ident(st) in self.roots:
                    return False        # the workdir (never below the held area)
                up = os.open(b"..", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=cur)
                os.close(cur)
                cur = up
                ust = os.fstat(cur)
                if _ident(ust) == _ident(st):
                    return False
                st = ust
            return False
        except OSError:
            return False
        finally:
            os.close(cur)

    def _held_open(self, hfd: int, base: bytes, flags: int, mode: int) -> int:
        """A new file at `base` in the held directory hfd, replacing a held
        one (for the agent the name does not exist, so every creation is new)."""
        tmp = (INTERNAL + os.urandom(8).hex()).encode()
        fd = os.open(tmp, (flags | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC)
                     & ~os.O_TRUNC, mode, dir_fd=hfd)
        try:
            os.rename(tmp, base, src_dir_fd=hfd, dst_dir_fd=hfd)
        except BaseException:
            os.close(fd)
            try:
                os.unlink(tmp, dir_fd=hfd)
            except OSError:
                pass
            raise
        return fd

    def _mark_index(self, opfd: int, obase: bytes, dc: tuple[str, ...]) -> None:
        """git is about to install the index opfd/obase as dc (`W/.git/index`):
        held paths below W get the skip-worktree bit (best effort: the agent's
        view only, never a protection)."""
        top = dc[:-2]
        below = {h[len(top):] for h in self.held if h[:len(top)] == top and len(h) > len(top)}
        if not below:
            return

        def held(path: bytes) -> bool:
            comps = tuple(os.fsdecode(path).split("/"))
            return any(comps[:k] in below for k in range(1, len(comps) + 1))
        try:
            fd = os.open(obase, os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                         dir_fd=opfd)
        except OSError:
            return
        try:
            st = os.fstat(fd)
            # Only git's own fresh lock file, never another name of a file protected
            # at start. (A vetted config renamed here never parses as an index.)
            if (not stat.S_ISREG(st.st_mode) or st.st_size > INDEX_CAP or st.st_nlink != 1
                    or (self.guard is not None and _ident(st) in self.guard.inodes)):
                return
            data = b""
            while len(data) < st.st_size:
                chunk = os.pread(fd, st.st_size - len(data), len(data))
                if not chunk:
                    break
                data += chunk
            new = mark_skip_worktree(data, held)
            if new is None or new == data:
                return
            view, off = memoryview(new), 0
            while off < len(new):
                off += os.pwrite(fd, view[off:], off)
            os.ftruncate(fd, len(new))
        except OSError:
            pass
        finally:
            os.close(fd)

    def _check_write(self, fd: int, at: tuple[int, bytes] | None = None) -> None:
        """fd is about to be written; at: the pinned parent and name it was
        opened by (else it is placed by _file_position)."""
        st = os.fstat(fd)
        if _ident(st) in self.vetted:
            raise Refused(errno.EACCES, f"write {path_of(fd)}: a git config checked by confine")
        if self.guard is None:
            return
        if _ident(st) in self.guard.inodes:
            comps: tuple[str, ...] | None = None
        else:
            comps = self._position(*at) if at is not None else self._file_position(fd, st)
        why = self.guard.write_at(self.guard.folded(comps), st.st_dev, st.st_ino)
        if why is not None:
            where = self.guard.show(comps) if comps is not None else path_of(fd) or "a file"
            raise Refused(errno.EACCES, f"write {where}: {why}")

    # ------------------------------------------------------------ operations

    def _mode(self, task: Task, mode: int, bits: int) -> int:
        """The mode a name is made with: the agent's umask applied."""
        umask = task.umask if task.umask != UMASK_READ else self.umasks.get(task)
        return mode & bits & ~umask

    def open(self, task: Task, dirfd: int, path: bytes, flags: int, mode: int) -> int:
        acc = flags & os.O_ACCMODE
        writing = acc != os.O_RDONLY or bool(flags & os.O_TRUNC)
        creat = bool(flags & os.O_CREAT)
        excl = creat and bool(flags & os.O_EXCL)
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
                    if creat and not slash and base in _POINTER_NAMES:
                        fd = self._pointer_open(pfd, base, flags, self._mode(task, mode, 0o666))
                        if fd is not None:
                            return fd
                    if slash and creat:        # the kernel refuses (EISDIR): nothing is made
                        return os.open(name, flags | os.O_CLOEXEC, self._mode(task, mode, 0o7777),
                                       dir_fd=pfd)
                    if excl:
                        with self.lock:
                            hfd = self._check_create(pfd, base, "file", hold=True)
                            if hfd is not None:
                                try:
                                    return self._held_open(hfd, base, flags,
                                                           self._mode(task, mode, 0o7777))
                                finally:
                                    os.close(hfd)
                            if self._in_held(pfd):
                                return self._held_open(pfd, base, flags,
                                                       self._mode(task, mode, 0o7777))
                            return os.open(base, flags | os.O_CLOEXEC | os.O_NOFOLLOW,
                                           self._mode(task, mode, 0o7777), dir_fd=pfd)
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
                                hfd = self._check_create(pfd, base, "file", hold=True)
                                if hfd is not None:
                                    try:
                                        return self._held_open(hfd, base, flags,
                                                           self._mode(task, mode, 0o7777))
                                    finally:
                                        os.close(hfd)
                                return os.open(base, flags | os.O_CLOEXEC | os.O_EXCL
                                               | os.O_NOFOLLOW, self._mode(task, mode, 0o7777),
                                               dir_fd=pfd)
                        except FileExistsError:
                            continue       # made meanwhile: judge what is there now
                    try:
                        fmt = stat.S_IFMT(os.fstat(opath).st_mode)
                        if fmt in (stat.S_IFIFO, stat.S_IFCHR, stat.S_IFBLK) \
                                and self.inline == threading.get_ident():
                            raise Deferred()        # opening it may wait for a peer
                        if fmt == stat.S_IFLNK:
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
                            self._check_write(opath, None if proc or slash else (pfd, base))
                        if flags & os.O_TRUNC and acc == os.O_RDONLY:
                            # O_RDONLY|O_TRUNC truncates with no write access that
                            # Landlock below ABI 3 would check
                            self._check_truncate(opath)
                        if writing and fmt == stat.S_IFREG and self.undo is not None:
                            self._keep_file(opath, "truncate" if flags & os.O_TRUNC else "write",
                                            None if proc or slash else (pfd, base))
                        # The very file judged, opened the way the agent asked (O_TRUNC,
                        # permissions, read-only mounts: the kernel's own order).
                        # (only O_TMPFILE makes a file here: the mode is for it)
                        return os.open(f"/proc/self/fd/{opath}", (flags | os.O_CLOEXEC)
                                       & ~(os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW),
                                       self._mode(task, mode, 0o7777)
                                       if flags & os.O_TMPFILE == os.O_TMPFILE else 0)
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
            self._check_truncate(opath)
            self._keep_file(opath, "truncate")
            os.truncate(f"/proc/self/fd/{opath}", length)
        finally:
            os.close(opath)
        return 0

    def mkdir(self, task: Task, dirfd: int, path: bytes, mode: int) -> int:
        pfd, base, _ = self._walk(task, dirfd, path)
        try:
            if self._exists(pfd, base):
                # What the kernel answers before any permission or Landlock check
                # (`mkdir -p` asks this of every parent): nothing is made, so
                # there is nothing for the guard to judge. Looked up here, as the
                # agent's uid in its view, so it tells no more than a stat would.
                raise oserror(err=errno.EEXIST)
            hfd = self._check_create(pfd, base, "dir", hold=True)
            if hfd is None:
                try:
                    os.mkdir(base, self._mode(task, mode, 0o1777), dir_fd=pfd)
                except FileExistsError:
                    if not (_is_dir(pfd, base) and self._in_held(pfd)):
                        raise
                return 0
            try:
                # Made again (git's checkout asks once per file below it): the
                # agent sees no directory there, so mkdir succeeds; what is held stays.
                os.mkdir(base, self._mode(task, mode, 0o1777) | 0o700, dir_fd=hfd)
            except FileExistsError:
                if not _is_dir(hfd, base):
                    raise
            finally:
                os.close(hfd)
        finally:
            os.close(pfd)
        return 0

    def _exists(self, pfd: int, base: bytes) -> bool:
        """base is a name in the pinned directory pfd (any type, a dangling
        symlink too) and not one the held area stands in for: in a held
        directory a name the agent cannot see must stay missing (mkdir there
        succeeds, see mkdir)."""
        try:
            os.lstat(base, dir_fd=pfd)
        except OSError:
            return False
        return not self._in_held(pfd)

    def mknod(self, task: Task, dirfd: int, path: bytes, mode: int, dev: int) -> int:
        pfd, base, slash = self._walk(task, dirfd, path)
        try:
            fmt = stat.S_IFMT(mode)
            self._check_create(pfd, base, "file" if fmt in (0, stat.S_IFREG) else "node")
            os.mknod(base + (b"/" if slash else b""), fmt | self._mode(task, mode, 0o7777), dev,
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
                g = self.guard
                src: str | None = None
                dst: str | None = None
                dc: tuple[str, ...] | None = None
                if g is not None and obase.startswith(INTERNAL.encode()):
                    raise Refused(errno.EACCES, f"rename {os.fsdecode(obase)}: a temporary name "
                                  "of confine's")
                if g is not None and obase not in (b".", b"..") and nbase not in (b".", b".."):
                    # Both positions by descriptor, or a refusal: never skipped.
                    sc, dc = self._positions(opfd, obase, npfd, nbase)
                    sf, df = g.folded(sc), g.folded(dc)
                    src = g.show(sc) if sc is not None else os.fsdecode(obase)
                    dst = g.show(dc) if dc is not None else os.fsdecode(nbase)
                    verdict = g.rename_to_at(df, bool(flags & RENAME_EXCHANGE)
                                             or not _is_file(opfd, obase))
                    if flags & RENAME_EXCHANGE:
                        back = g.rename_to_at(sf)
                        if back is not None:
                            raise Refused(errno.EACCES, f"exchange {dst} with {src}: "
                                          + (back if back not in (VET, VET_MODULES)
                                             else "protected path"))
                        if verdict in (VET, VET_MODULES):
                            verdict = ("protected path (.git/config)" if verdict == VET
                                       else "protected path (.gitmodules)")
                    # A directory from outside the workdir (or from another protected
                    # root, judged by its own patterns) would bring names nobody
                    # judged: EXDEV, so mv and shutil.move copy it, name by name.
                    if df is not None and (sf is None or root_key(sf) != root_key(df)) \
                            and _is_dir(opfd, obase):
                        raise oserror(err=errno.EXDEV)
                    if flags & RENAME_EXCHANGE and sf is not None \
                            and (df is None or root_key(sf) != root_key(df)) \
                            and _is_dir(npfd, nbase):
                        raise oserror(err=errno.EXDEV)
                if verdict == VET_MODULES:
                    return self._vet_gitmodules(opfd, obase, npfd, nbase, flags, src, dst)
                if verdict == VET:
                    assert g is not None
                    return self._vet_config(opfd, obase, npfd, nbase, flags, src, dst,
                                            g.trusted_config(df), dc)
                if verdict is not None:
                    raise Refused(errno.EACCES, f"rename {src} to {dst}: {verdict}")
                if (self.held and dc is not None and len(dc) >= 2 and dc[-2:] == (".git", "index")
                        and not flags & RENAME_EXCHANGE):
                    self._mark_index(opfd, obase, dc)
                kept = (self._keep_rename(opfd, obase, npfd, nbase, flags)
                        if self.undo is not None else [])
                try:
                    check(libc.renameat2(opfd, obase + (b"/" if oslash else b""),
                                           npfd, nbase + (b"/" if nslash else b""), flags))
                except OSError as e:
                    if e.errno == errno.EBUSY and not flags & (RENAME_EXCHANGE | RENAME_WHITEOUT) \
                            and not oslash and not nslash \
                            and self._onto_bound_file(opfd, obase, npfd, nbase):
                        return 0
                    for at in kept:
                        self._unkeep(*at)
                    raise
            finally:
                os.close(npfd)
        finally:
            os.close(opfd)
        return 0

    def _onto_bound_file(self, opfd: int, obase: bytes, npfd: int, nbase: bytes) -> bool:
        """A file saved by a temporary name renamed onto a file bound over its name (an
        agent's login file: its placeholder copy, credentials/logins.py), which the
        kernel refuses (EBUSY): the content written into the bound file in place and
        the temporary name removed, as the save meant. Only onto a regular file of the
        agent's own that it may write here (a read-only bind of a protected file cannot
        be opened for writing): nothing the agent could not do with open and write.
        False: not such a case, the rename's EBUSY stands."""
        try:
            sfd = os.open(obase, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                          dir_fd=opfd)
        except OSError:
            return False
        try:
            sst = os.fstat(sfd)
            if not stat.S_ISREG(sst.st_mode) or sst.st_size > CONFIG_CAP:
                return False
            data = os.read(sfd, CONFIG_CAP + 1)
        finally:
            os.close(sfd)
        try:
            dfd = os.open(nbase, os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                          dir_fd=npfd)
        except OSError:
            return False
        try:
            dst = os.fstat(dfd)
            if not stat.S_ISREG(dst.st_mode) or dst.st_uid != os.geteuid() \
                    or _ident(dst) == _ident(sst) or len(data) > CONFIG_CAP:
                return False
            try:
                os.unlink(obase, dir_fd=opfd)      # itself a bound name: EBUSY, nothing written
            except OSError:
                return False
            os.pwrite(dfd, data, 0)
            os.ftruncate(dfd, len(data))
        finally:
            os.close(dfd)
        return True

    def _vet_config(self, opfd: int, obase: bytes, npfd: int, nbase: bytes, flags: int,
                    src: str | None, dst: str | None, trusted: bytes | None = None,
                    at: tuple[str, ...] | None = None) -> int:
        """git's lock-file protocol onto <gitdir>/config: check every key, then
        install the checked bytes as a new inode the agent never had open.
        trusted: the config that was there at start (an existing repository):
        its own entries may stay."""
        from confine import protect
        if flags & (RENAME_EXCHANGE | RENAME_WHITEOUT):
            raise Refused(errno.EACCES, f"rename onto {dst}: protected path (.git/config)")
        data, st = self._read_lock(opfd, obase, src, dst)
        # A repository made during the run may point at local paths while it runs
        # (a local clone): its config is sanitized at exit, locations and all.
        bad, perr = protect.vet_git_config(
            data, trusted, values=trusted is not None,
            allow=None if at is None else lambda it: self._points_back(at[:-1], it))
        if perr or bad:
            what = f"syntax error ({perr})" if perr else \
                "key(s) " + ", ".join(sorted({it.name for it, _ in bad}))
            why = protect.KEY_REFUSED if perr else "; ".join(
                dict.fromkeys(w if w == protect.KEY_REFUSED else f"{it.name}: {w}"
                              for it, w in bad))
            raise Refused(errno.EACCES, f"git config {dst}: {what} not allowed in a repository "
                          f"config written inside the sandbox ({why})")
        self._install_checked(npfd, nbase, data, stat.S_IMODE(st.st_mode) & 0o666,
                              flags & RENAME_NOREPLACE)
        _drop(opfd, obase)
        return 0

    def _read_lock(self, opfd: int, obase: bytes, src: str | None,
                   dst: str | None) -> tuple[bytes, os.stat_result]:
        """The content of git's lock file about to be renamed onto dst."""
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
        return data, st

    def _vet_gitmodules(self, opfd: int, obase: bytes, npfd: int, nbase: bytes, flags: int,
                        src: str | None, dst: str | None) -> int:
        """git's lock-file protocol onto a new `.gitmodules` (git submodule
        add): every entry checked (protect/gitlink.py), then the checked bytes
        installed as a new inode the agent never had open."""
        if flags & (RENAME_EXCHANGE | RENAME_WHITEOUT):
            raise Refused(errno.EACCES, f"rename onto {dst}: protected path (.gitmodules)")
        data, st = self._read_lock(opfd, obase, src, dst)
        bad = gitlink.gitmodules_problems(data, self._local_url)
        if bad:
            raise Refused(errno.EACCES, f"git config {dst}: {printable('; '.join(bad))}: not allowed "
                          "in a .gitmodules written inside the sandbox (the next `git submodule "
                          "update` there clones and runs what it names)")
        self._install_checked(npfd, nbase, data, stat.S_IMODE(st.st_mode) & 0o666,
                              flags & RENAME_NOREPLACE)
        _drop(opfd, obase)
        return 0

    def _local_url(self, path: str) -> str | None:
        """Why a local repository may not be a submodule's url: inside the
        workdir, or where this sandbox may write (tried: a nameless file made
        there and dropped at once, as the agent would make one); None if not."""
        comps = self.guard.rel(path) if self.guard is not None else None
        if comps is not None:
            if comps and comps[0].startswith("/"):      # below another protected root
                return "in a write grant: writable inside the sandbox (the agent could " \
                       "prepare what the person's git clones)"
            return "inside the workdir (the agent could prepare what the person's git clones)"
        for d in (path, os.path.join(path, ".git")):
            try:
                os.close(os.open(d, os.O_TMPFILE | os.O_WRONLY | os.O_CLOEXEC, 0o600))
            except OSError as e:
                if e.errno in (errno.EACCES, errno.EROFS, errno.EPERM):
                    continue
                if e.errno in (errno.ENOENT, errno.ENOTDIR) and d != path:
                    continue                # no .git directory: a bare repository
                return f"cannot tell whether the sandbox may write there ({e.strerror})"
            return "writable inside the sandbox (the agent could prepare what the person's git " \
                   "clones)"
        return None

    def _install_checked(self, npfd: int, nbase: bytes, data: bytes, mode: int,
                         flags: int) -> None:
        """Put the checked bytes at nbase as a new inode the agent never had
        open (held in `vetted`, so no later open may write it)."""
        self._pin_replaced(npfd, nbase)
        tmp = (INTERNAL + os.urandom(8).hex()).encode()
        tfd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                      0, dir_fd=npfd)
        try:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(tfd, view):]
                os.fchmod(tfd, mode)
                self._hold_vetted(tfd)
            finally:
                os.close(tfd)
            check(libc.renameat2(npfd, tmp, npfd, nbase, flags))
        except BaseException:
            try:
                os.unlink(tmp, dir_fd=npfd)
            except OSError:
                pass
            raise

    # ------------------------------------------------------------ pointer files

    def _pointer_open(self, pfd: int, base: bytes, flags: int, mode: int) -> int | None:
        """A `.git` file or a worktree's `commondir` that git is writing
        (protect/gitlink.py): made without a name (O_TMPFILE) and put in place
        by _settle once its content passes. None: not such a pointer (judged
        as any other name). Only a new one, or one this broker put there
        (git rewrites a submodule's `.git` with O_TRUNC)."""
        if self.guard is None or flags & os.O_ACCMODE == os.O_RDONLY:
            return None
        try:
            st: os.stat_result | None = os.stat(base, dir_fd=pfd, follow_symlinks=False)
        except FileNotFoundError:
            st = None
        if st is not None and (flags & os.O_EXCL or not flags & os.O_TRUNC
                               or _ident(st) not in self.vetted):
            return None
        comps = self._position(pfd, base)
        kind = self.guard.pointer_at(self.guard.folded(comps))
        if kind is None:
            return None
        with self.lock:
            key = (_ident(os.fstat(pfd)), base)
            if key not in self.pointers and len(self.pointers) >= POINTERS_CAP:
                raise Refused(errno.EACCES, f"create {self.guard.show(comps or ())}: more than "
                              f"{POINTERS_CAP} git pointer files written and not yet checked")
            keep = (flags & (os.O_APPEND | os.O_NONBLOCK)) | os.O_RDWR | os.O_CLOEXEC
            tfd = os.open(b".", keep | os.O_TMPFILE, mode, dir_fd=pfd)
            try:
                mine = os.dup(tfd)
                held = os.open(b".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=pfd)
            except BaseException:
                os.close(tfd)
                raise
            old = self.pointers.pop(key, None)
            self.pointers[key] = (held, base, mine, kind)
            if old is not None:
                os.close(old[0])
                os.close(old[2])
            return tfd

    def _settle(self) -> None:
        """Put the pointer files whose content passes in place; at the start of
        every call, so git's next step after writing one finds it there. One
        that does not pass never appears (said as a refusal); one whose git
        directory is not made yet waits (git clone writes the `.git` file of a
        submodule first)."""
        if not self.pointers:
            return
        with self.lock:
            for key, (pfd, base, tfd, kind) in list(self.pointers.items()):
                try:
                    data = os.pread(tfd, gitlink.MAX_BYTES + 1, 0)
                    if not data.endswith(b"\n") and len(data) <= gitlink.MAX_BYTES:
                        continue        # not written yet
                    if not self._place_pointer(pfd, base, data, kind, tfd):
                        continue
                except Refused as r:
                    if len(self.late) < POINTERS_CAP:
                        self.late.append(r.reason)
                except OSError:
                    pass
                del self.pointers[key]
                os.close(pfd)
                os.close(tfd)

    def _place_pointer(self, pfd: int, base: bytes, data: bytes, kind: str, tfd: int) -> bool:
        """Judge the pointer's content where its directory is now, and put a
        fresh copy of it at its name (True); False: its target directory does
        not exist yet; Refused with the reason otherwise."""
        assert self.guard is not None
        g = self.guard
        comps = self._position(pfd, base)
        where = printable(g.show(comps)) if comps is not None else os.fsdecode(base)
        if comps is None or g.pointer_at(g.folded(comps)) != kind:
            raise Refused(errno.EACCES, f"create {where}: a git pointer file moved out of place")
        if kind == gitlink.COMMONDIR:
            if data != gitlink.COMMONDIR_CONTENT:
                raise Refused(errno.EACCES, f"create {where}: a worktree's commondir other than "
                              "`../..` would point git at another repository")
        else:
            try:
                target = gitlink.gitdir_of(data, comps[:-1], g.roots)
                why = gitlink.allowed_target(g.folded(target) or ())
                if why is None:
                    found = self._real_dir(target)
                    if found is None:
                        return False
                    if not found:
                        why = "not a directory reached without a symlink"
            except ValueError as e:
                why = str(e)
            if why is not None:
                raise Refused(errno.EACCES, f"create {where}: a .git file would point git at "
                              f"another directory: {printable(why)}")
        self._install_checked(pfd, base, data, stat.S_IMODE(os.fstat(tfd).st_mode) & 0o666, 0)
        return True

    def _points_back(self, gitdir: tuple[str, ...], it: ConfigItem) -> bool:
        """Whether `it` is the core.worktree git writes in a submodule's git
        directory (raw components): its working tree, whose `.git` file (read
        by descriptor, no symlink) points back here (protect/gitlink.py)."""
        if self.guard is None or (it.section, it.sub, it.key) != ("core", None, "worktree") \
                or it.value is None:
            return False
        g = self.guard
        try:
            wt = gitlink.worktree_of(gitdir, it.value, fold)
        except ValueError:
            return False
        data = self._read_below(wt + (".git",))
        if data is None:
            return False
        try:
            back = gitlink.gitdir_of(data, wt, g.roots)
        except ValueError:
            return False
        return g.folded(back) == g.folded(gitdir)

    def _read_below(self, comps: tuple[str, ...]) -> bytes | None:
        """The first gitlink.MAX_BYTES of the regular file at the workdir
        components, opened one component at a time, never through a symlink."""
        if not comps:
            return None
        try:
            cur = self._dir_below(comps[:-1])
        except OSError:
            return None
        try:
            fd = os.open(os.fsencode(comps[-1]), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK
                         | os.O_CLOEXEC, dir_fd=cur)
            try:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    return None
                return os.pread(fd, gitlink.MAX_BYTES, 0)
            finally:
                os.close(fd)
        except OSError:
            return None
        finally:
            os.close(cur)

    def _real_dir(self, comps: tuple[str, ...]) -> bool | None:
        """Whether the workdir components name a directory, opened from the
        workdir one component at a time, never through a symlink; None when
        a component does not exist."""
        try:
            os.close(self._dir_below(comps))
            return True
        except FileNotFoundError:
            return None
        except OSError:
            return False

    def _dir_below(self, comps: tuple[str, ...]) -> int:
        """The directory at the workdir components (O_PATH), opened from the
        workdir one component at a time, never through a symlink."""
        if not self.roots:
            raise oserror(err=errno.EACCES)
        cur = os.dup(next(iter(self.roots.values())))
        try:
            for c in comps:
                nxt = os.open(os.fsencode(c), os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW
                              | os.O_CLOEXEC, dir_fd=cur)
                os.close(cur)
                cur = nxt
        except BaseException:
            os.close(cur)
            raise
        return cur

    def _pin_replaced(self, pfd: int, name: bytes) -> None:
        """The file about to be replaced, if the guard knows it by inode (a
        config protected at start): held open for the rest of the run, so its
        number is not handed to a new file the guard would then refuse as
        "another name" of it. Bounded by the guard's own set."""
        if self.guard is None or not self.guard.inodes or len(self.pinned) >= PINNED_CAP + 64:
            return
        try:
            fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=pfd)
        except OSError:
            return
        ident = _ident(os.fstat(fd))
        if ident in self.guard.inodes and ident not in self.pinned:
            self.pinned[ident] = fd
        else:
            os.close(fd)

    def _hold_vetted(self, fd: int) -> None:
        """Remember the checked config open as fd, by an O_PATH descriptor of
        its own (so its inode number cannot pass to another file); first drop
        those no name leads to any more (git replaced them: an unlinked file
        not made with O_TMPFILE can never be linked again)."""
        for ident, held in list(self.vetted.items()):
            try:
                gone = os.fstat(held).st_nlink == 0
            except OSError:
                gone = True
            if gone:
                del self.vetted[ident]
                os.close(held)
        if len(self.vetted) >= VETTED_CAP:
            raise Refused(errno.EACCES, f"git config: more than {VETTED_CAP} checked git configs "
                          "in use at once (renamed away and kept)")
        held = os.open(f"/proc/self/fd/{fd}", os.O_PATH | os.O_CLOEXEC)
        self.vetted[_ident(os.fstat(held))] = held

    # ------------------------------------------------------------ removal and undo

    def remove(self, task: Task, dirfd: int, path: bytes, rmdir: bool) -> int:
        """unlink or rmdir of the last component itself (never followed), after
        the keeper kept what the workdir held there at the start. The call
        runs here, in the agent's Landlock domain: its rights and the
        read-only binds answer as they would the agent."""
        pfd, base, slash = self._walk(task, dirfd, path)
        try:
            kept = False
            if self.undo is not None and base not in (b".", b".."):
                kept = self._keep_at(pfd, base, "rmdir" if rmdir else "unlink")
            name = base + (b"/" if slash else b"")
            try:
                if rmdir:
                    os.rmdir(name, dir_fd=pfd)
                else:
                    os.unlink(name, dir_fd=pfd)
            except OSError:
                if kept:
                    self._unkeep(pfd, base)
                raise
        finally:
            os.close(pfd)
        return 0

    def _undo_rel(self, pfd: int, base: bytes) -> str | None:
        """The workdir-relative path of base in pfd, None outside the workdir
        (another protected root, the TMPDIR, the held area: not kept)."""
        if self.guard is None:
            return None
        comps = self._position(pfd, base)
        if comps is None or not comps or root_key(comps):
            return None
        return "/".join(comps)

    def _keep_at(self, pfd: int, base: bytes, op: str) -> bool:
        """Ask the keeper to keep the file at base (not followed) before `op`;
        Refused with its reason when it refuses (deletions not approved, no
        keeper). True: kept now (the path's first change); False: nothing
        there, not in the workdir, made during the run, or kept before."""
        assert self.undo is not None
        try:
            vfd = os.open(base, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=pfd)
        except OSError:
            return False            # nothing there: the call itself answers
        try:
            # the run's own file: nothing to keep, no need to place it
            if self.undo.made_in_run(vfd):
                return False
            rel = self._undo_rel(pfd, base)
            if rel is None:
                return False
            why, new = self.undo.keep(op, rel, vfd, pfd)
        finally:
            os.close(vfd)
        if why:
            raise Refused(errno.EACCES, why)
        return new

    def _unkeep(self, pfd: int, base: bytes) -> None:
        """The call failed after its file was kept: the keeper forgets it."""
        assert self.undo is not None
        try:
            rel = self._undo_rel(pfd, base)
        except (OSError, Refused):
            return
        if rel is not None:
            self.undo.forget(rel)

    def _keep_file(self, fd: int, op: str, at: tuple[int, bytes] | None = None) -> None:
        """The regular file fd (O_PATH) is about to be truncated or written in
        place: the keeper copies it first (a link would share the change).
        at: its pinned parent and name, else it is placed by the kernel's name."""
        if self.undo is None or self.guard is None:
            return
        st = os.fstat(fd)
        if st.st_nlink == 0:
            return
        if at is not None:
            self._keep_at(*at, op)
            return
        placed = self._placed(fd, st)
        if placed is None:
            return              # not placed: _check_write refused what is protected
        try:
            self._keep_at(*placed, op)
        finally:
            os.close(placed[0])

    def _keep_rename(self, opfd: int, obase: bytes, npfd: int, nbase: bytes,
                     flags: int) -> list[tuple[int, bytes]]:
        """A rename replaces what is at the destination and moves the source
        away from its name: both kept (a directory moved away stays whole
        under its new name: only its name is not kept). Returns what was kept."""
        kept: list[tuple[int, bytes]] = []
        if obase in (b".", b"..") or nbase in (b".", b".."):
            return kept
        if flags & RENAME_NOREPLACE == 0 and _exists_nofollow(npfd, nbase) \
                and self._keep_at(npfd, nbase, "rename-over"):
            kept.append((npfd, nbase))
        if not _is_dir(opfd, obase) and self._keep_at(opfd, obase, "rename-away"):
            kept.append((opfd, obase))
        return kept

    # ------------------------------------------------------------ metadata (no mount namespace)

    def set_writable(self, roots: list[int], holes: list[int]) -> None:
        """The writable paths and the read-only entries and secrets below them
        (wire.WritableRequest), by identity."""
        self.meta_roots = {_ident(os.fstat(fd)) for fd in roots}
        self.meta_holes = {_ident(os.fstat(fd)) for fd in holes}
        # from ABI 3 on Landlock's TRUNCATE right answers (EACCES) in this domain
        self.judge_truncate = _TRUNCATE_ABI_MISSING

    def _check_truncate(self, fd: int) -> None:
        """Without a mount namespace (set_writable) truncation is judged like a
        metadata change: the host's mounts are writable, and Landlock below ABI 3
        has no TRUNCATE right (features.NO_NS_REPLACEMENTS)."""
        if self.judge_truncate:
            with self.lock:
                self.meta_check(fd, "truncate")

    def _writable_dir(self, fd: int) -> bool:
        """Whether walking ".." from directory fd meets a writable root before a
        read-only entry, a secret or the top of this view."""
        cur = os.dup(fd)
        try:
            st = os.fstat(cur)
            for _ in range(MAX_DEPTH):
                here = _ident(st)
                if here in self.meta_holes:
                    return False
                if here in self.meta_roots:
                    return True
                up = os.open(b"..", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=cur)
                os.close(cur)
                cur = up
                st = os.fstat(cur)
                if _ident(st) == here:
                    return False
        finally:
            os.close(cur)
        raise Refused(errno.EACCES, f"more than {MAX_DEPTH} directories deep: too deep to judge")

    def meta_check(self, fd: int, verb: str) -> None:
        """May the file fd (O_PATH) have its metadata changed? Refused (EROFS,
        as a read-only host view would) outside the writable paths, EACCES
        for what cannot be judged or the name guard refuses."""
        st = os.fstat(fd)
        where = path_of(fd) or "a file"
        outside = Refused(errno.EROFS, f"{verb} {where}: outside the writable paths (no mount "
                          "namespace: refused as the read-only host view would)")
        if not self.meta_roots or _ident(st) in self.meta_holes:
            raise outside
        if stat.S_ISDIR(st.st_mode):
            start, base = os.dup(fd), b"."
        else:
            if st.st_nlink > 1:
                raise Refused(errno.EACCES, f"{verb} {where}: the file has {st.st_nlink} names "
                              "(hard links) and another may lie outside the writable paths")
            if st.st_nlink == 0:        # no name left: nothing on the host's paths changes
                if self.guard is not None and _ident(st) in self.guard.inodes:
                    raise Refused(errno.EACCES, f"{verb} {where}: a file protected at start")
                return
            placed = self._placed(fd, st)
            if placed is None:
                raise Refused(errno.EACCES, f"{verb} {where}: cannot tell where this file is")
            start, base = placed
        try:
            # a carved write grant may name the file itself
            if _ident(st) not in self.meta_roots and not self._writable_dir(start):
                raise outside
            if self.guard is not None:
                comps = self._position(start, base)
                # The guard's creation verdict: what may be made there may have its
                # metadata changed (git init's .git/hooks and *.sample hooks, which git
                # never runs); a file protected at start never, by any name.
                kind = ("dir" if stat.S_ISDIR(st.st_mode) else "file" if stat.S_ISREG(st.st_mode)
                        else "symlink" if stat.S_ISLNK(st.st_mode) else "node")
                why = (self.guard.write_at(None, st.st_dev, st.st_ino)
                       or self.guard.create_at(self.guard.folded(comps), kind))
                if why is not None:
                    shown = self.guard.show(comps) if comps is not None else where
                    raise Refused(errno.EACCES, f"{verb} {shown}: {why}")
        except OSError as e:
            raise Refused(errno.EACCES, f"{verb} {where}: cannot tell where this file is "
                          f"({e.strerror})") from None
        finally:
            os.close(start)

    def handle_meta(self, req: MetaRequest, fds: list[int]) -> Reply:
        """Resolve, judge and perform one metadata call; fds[req.dir] is the
        directory (or, with no path, the descriptor's own file)."""
        task = Task(req.tgid, req.tid, 0)
        d = fds[req.dir] if req.dir >= 0 else self.root
        verb = {Op.CHMOD: "chmod", Op.CHOWN: "chown", Op.UTIMES: "utime",
                Op.SETXATTR: "setxattr", Op.REMOVEXATTR: "removexattr"}[req.op]
        try:
            if req.path:
                nofollow = os.O_NOFOLLOW if req.flags & AT_SYMLINK_NOFOLLOW else 0
                obj = self.open(task, d, req.path, os.O_PATH | nofollow, 0)
            else:
                obj = os.dup(d)
            try:
                with self.lock:
                    self.meta_check(obj, verb)
                self._meta_perform(req, obj)
            finally:
                os.close(obj)
            return Reply(0)
        except Refused as r:
            return Reply(-1, r.errno, r.reason)
        except OSError as e:
            return Reply(-1, e.errno or errno.EIO)

    @staticmethod
    def _meta_perform(req: MetaRequest, obj: int) -> None:
        """The call on the judged file itself: AT_EMPTY_PATH on its descriptor,
        or its /proc/self/fd magic link, which reaches exactly that file."""
        link = stat.S_ISLNK(os.fstat(obj).st_mode)
        proc = f"/proc/self/fd/{obj}"
        if req.op == Op.CHMOD:
            if link:
                raise oserror(err=errno.EOPNOTSUPP)   # fchmodat2's answer for a symlink
            os.chmod(proc, req.mode & 0o7777)
        elif req.op == Op.CHOWN:
            check(libc.fchownat(ctypes.c_int(obj), b"", ctypes.c_uint(req.uid),
                                ctypes.c_uint(req.gid), ctypes.c_int(AT_EMPTY_PATH)))
        elif req.op == Op.UTIMES:
            times = ctypes.create_string_buffer(req.value, 32) if req.value else None
            check(libc.utimensat(ctypes.c_int(obj), b"", times, ctypes.c_int(AT_EMPTY_PATH)))
        elif link:
            raise oserror(err=errno.EPERM)   # user.* xattrs never sit on symlinks
        elif req.op == Op.SETXATTR:
            os.setxattr(proc, req.name, req.value, req.mode)
        else:
            os.removexattr(proc, req.name)

    # ------------------------------------------------------------ dispatch

    def handle(self, req: FileRequest, fds: list[int]) -> Reply:
        """Perform req; fds are the directories req.dirs index. Never raises
        OSError or Refused: they become the reply."""
        self._settle()
        rep = self._handle(req, fds)
        if self.late and not rep.reason:
            with self.lock:
                if self.late:
                    rep = rep._replace(reason=self.late.pop(0))
        return rep

    def _handle(self, req: FileRequest, fds: list[int]) -> Reply:
        task = Task(req.tgid, req.tid, req.umask, req.nid)
        d1, d2 = (fds[i] if i >= 0 else self.root for i in req.dirs)
        (p1, p2), op = req.paths, req.op
        self._said.line = ""
        self._said.approved = None
        try:
            if op == Op.OPEN:
                fd = self.open(task, d1, p1, req.flags, req.mode)
                return Reply(0, reason=self._approved_line(fd) or self._said.line, fd=fd)
            if op == Op.TRUNCATE:
                ret = self.truncate(task, d1, p1, req.arg)
            elif op in (Op.UNLINK, Op.RMDIR):
                with self.lock:
                    ret = self.remove(task, d1, p1, op == Op.RMDIR)
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
            return Reply(ret, reason=self._said.line)
        except Refused as r:
            return Reply(-1, r.errno, r.reason)
        except Unread:
            return Reply(-1, UMASK_UNREAD)
        except OSError as e:
            if debug():
                import traceback
                traceback.print_exc()
            return Reply(-1, e.errno or errno.EIO)


def _drop(dfd: int, name: bytes) -> None:
    """git's lock file, once its checked content is installed (gone already: fine)."""
    try:
        os.unlink(name, dir_fd=dfd)
    except OSError:
        pass


# Calls that make or move a name: performed under FileBroker.lock.
_MAKES_NAMES = frozenset({Op.MKDIR, Op.MKNOD, Op.SYMLINK, Op.LINK, Op.RENAME})
# Names of the pointer files git writes (gitlink.kind decides, case-folded):
# any other spelling is judged as an ordinary protected name.
_POINTER_NAMES = frozenset({b".git", b"commondir"})



def _is_file(pfd: int, base: bytes) -> bool:
    """A regular file (under FileBroker.lock: no other name can be made or
    moved there meanwhile)."""
    try:
        return stat.S_ISREG(os.lstat(base, dir_fd=pfd).st_mode)
    except OSError:
        return False


def _exists_nofollow(pfd: int, base: bytes) -> bool:
    try:
        os.lstat(base, dir_fd=pfd)
    except OSError:
        return False
    return True


def _is_dir(pfd: int, base: bytes) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(base, dir_fd=pfd).st_mode)
    except OSError:
        return False


def _verb(kind: str) -> str:
    return {"file": "create", "dir": "mkdir", "symlink": "symlink", "link": "hard link",
            "node": "mknod"}.get(kind, "create")
