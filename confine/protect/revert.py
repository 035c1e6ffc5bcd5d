"""Verify and revert: after the run, put every protected path back.

`verify_and_revert()` (at exit, and whenever the launcher wants) compares the
workdir with the snapshot and finds what was created, modified, renamed or
deleted; it restores the original, moves anything new into a quarantine
directory outside the workdir (never deletes it), strips dangerous keys from
the config of git repositories created during the run and moves their hooks
away, and returns a report.  This covers what a mount cannot: paths that did
not exist at start (`.envrc`, a nested repository made with `git init`),
protected paths that are symlinks, and hosts without namespaces, where it is
the only layer.  Threat: the agent (or what it left running) races or tricks
the reverter, so it never follows a symlink and never writes outside the
workdir except into the quarantine directory.
"""
from __future__ import annotations

import errno
import os
import re
import stat
import time
from hashlib import sha256
from typing import Callable, Iterator, Mapping, Sequence

from ..errors import printable
from ..paths import is_under, state_dir
from ..record import dataclass, field
from . import gitdata, gitlink, index
from .gitconfig import (
    KEY_REFUSED,
    ConfigItem,
    is_dangerous_key,
    location_path,
    parse_git_config,
    sanitize_git_config,
    vet_git_config,
)
from .guard import fold
from .report import format_report
from .snapshot import (
    _DIR,
    _FILE,
    _O_PATH,
    FILE_COPY_CAP,
    Entry,
    Root,
    Snapshot,
    _parent_of,
    _Scan,
    _Unsafe,
)

__all__ = ["Change", "Report", "verify_and_revert", "default_quarantine_dir", "remove_at"]

QUARANTINE_COPY_CAP = 512 << 20  # bytes copied when a move crosses filesystems ...
QUARANTINE_ENTRY_CAP = 10_000    # ... and entries (each is a new inode owned by the supervisor)
QUARANTINE_COPY_DEPTH = 64       # directory levels copied (two descriptors per level)
QUARANTINE_WORKDIR = "WORKDIR.txt"  # a run's workdir, for the line that drops the run (keep.py)
_QPATH_MAX = 2048                # longer quarantine paths are shortened (PATH_MAX is 4096)
_RUN_ID = re.compile(r"(\d{8}-\d{6})-\d+(\..*)?")
_FILE_TYPES = {stat.S_IFSOCK: "socket", stat.S_IFIFO: "fifo", stat.S_IFCHR: "char device",
               stat.S_IFBLK: "block device"}


@dataclass
class Change:
    what: str          # created | modified | deleted | mode | type | new-repo | moved | unchecked | external
    path: str          # workdir-relative
    action: str        # quarantined | restored | sanitized | kept | left | failed | noted
    detail: str = ""
    quarantine: str | None = None
    alert: bool = True


@dataclass
class Report:
    changes: list[Change] = field(default_factory=list)
    quarantine_dir: str | None = None
    namespaces_active: bool = False
    seconds: float = 0.0
    specials: list[str] = field(default_factory=list)   # quarantine paths of specials not copied
    # how the scan found what changed: the kernel's reports (changes.py), or why every
    # directory's stamp was taken instead
    exit_walk: str = ""
    # the quarantines of the other protected roots (a run's write grants: roots.py)
    other_quarantine: list[str] = field(default_factory=list)

    @property
    def alerts(self) -> list[Change]:
        return [c for c in self.changes if c.alert]

    @property
    def failed(self) -> list[Change]:
        return [c for c in self.changes if c.action == "failed"]

    def __bool__(self) -> bool:
        return bool(self.alerts)


def default_quarantine_dir(run_id: str, *, euid: int | None = None, home: str | None = None) -> str:
    """/var/lib/confine/quarantine/RUN as root, else
    $XDG_STATE_HOME (~/.local/state)/confine/quarantine/RUN."""
    return os.path.join(state_dir("quarantine", euid=euid, home=home), run_id)


class _Quarantine:
    def __init__(self, path: str, workdir: str):
        rp = os.path.realpath(path)
        w = workdir.rstrip("/")
        if rp == w or rp.startswith(w + "/"):
            raise ValueError(f"quarantine directory {path} lies inside the workdir")
        self.path = rp
        self.workdir = workdir
        self.fd: int | None = None
        self.copied = 0            # bytes copied across filesystems
        self.entries = 0           # inodes created by copying
        self.skipped = 0           # entries removed from the workdir without a copy (over a cap)
        self.truncated = 0         # files copied only in part (over the byte cap)
        self.specials: list[str] = []   # (quarantine path: type) of specials recorded, not copied
        self.n_specials = 0

    def _open(self) -> int:
        if self.fd is None:
            os.makedirs(self.path, mode=0o700, exist_ok=True)
            self.fd = os.open(self.path, _DIR)
            st = os.fstat(self.fd)
            if st.st_uid != os.geteuid():
                raise OSError(errno.EPERM, f"quarantine directory {self.path} is not ours")
            os.fchmod(self.fd, 0o700)
            self._note_workdir()
        return self.fd

    def _note_workdir(self) -> None:
        """The workdir, for the line that drops this run later (keep.py); first,
        so a quarantined name of the same spelling gets another slot."""
        try:
            fd = os.open(QUARANTINE_WORKDIR, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                         | os.O_CLOEXEC, 0o600, dir_fd=self.fd)
        except OSError:
            return
        try:
            os.write(fd, self.workdir.encode("utf-8", "surrogateescape") + b"\n")
        finally:
            os.close(fd)

    def slot(self, rel: str) -> tuple[int, str, str]:
        """(parent fd, name, full path) of a free place for rel; caller closes the fd."""
        cur = os.dup(self._open())
        comps = rel.split("/")
        if len(os.fsencode(os.path.join(self.path, rel))) > _QPATH_MAX:
            # a path no tool could open by name (PATH_MAX): a short one, named in the report
            digest = sha256(os.fsencode(rel)).hexdigest()[:16]
            comps = ["long-paths", f"{digest}-{comps[-1][:64]}"]
        try:
            for c in comps[:-1]:
                try:
                    os.mkdir(c, 0o700, dir_fd=cur)
                except FileExistsError:
                    pass
                nxt = os.open(c, _DIR, dir_fd=cur)
                os.close(cur)
                cur = nxt
            name, n = comps[-1], 0
            while True:
                cand = name if n == 0 else f"{name}.{n}"
                try:
                    os.stat(cand, dir_fd=cur, follow_symlinks=False)
                except FileNotFoundError:
                    break
                n += 1
            return cur, cand, os.path.join(self.path, *comps[:-1], cand)
        except BaseException:
            os.close(cur)
            raise

    def special(self, qpath: str, mode: int) -> None:
        self.n_specials += 1
        if len(self.specials) < QUARANTINE_ENTRY_CAP:
            self.specials.append(f"{qpath}: {_FILE_TYPES.get(stat.S_IFMT(mode), 'special')}, "
                                 f"mode {stat.S_IMODE(mode):o}")

    def write_report(self, data: bytes) -> None:
        """Append to REPORT.txt: bytes, so any file name can be written; by
        descriptor, never through a symlink."""
        fd = os.open("REPORT.txt", os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW
                     | os.O_CLOEXEC, 0o600, dir_fd=self._open())
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _run_time(stamp: str) -> float | None:
    """The local time a run id's YYYYMMDD-HHMMSS names, None if it names none. By
    hand rather than time.strptime, which imports _strptime, calendar and locale
    and compiles their patterns: ~5 ms on every exit."""
    try:
        y, mo, d = int(stamp[0:4]), int(stamp[4:6]), int(stamp[6:8])
        h, mi, sec = int(stamp[9:11]), int(stamp[11:13]), int(stamp[13:15])
    except ValueError:
        return None
    if len(stamp) != 15 or stamp[8] != "-" or not (1 <= mo <= 12 and h < 24 and mi < 60
                                                    and sec <= 61):
        return None
    leap = y % 4 == 0 and (y % 100 != 0 or y % 400 == 0)
    if not 1 <= d <= (31, 29 if leap else 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)[mo - 1]:
        return None
    try:
        return time.mktime((y, mo, d, h, mi, sec, 0, 0, -1))
    except (OverflowError, ValueError):
        return None


def _open_dir(pfd: int, name: str) -> int:
    """Open directory name below pfd (never through a symlink); a directory
    of ours that lacks u+rwx (the agent took it away) gets it back, by
    descriptor."""
    try:
        return os.open(name, _DIR, dir_fd=pfd)
    except PermissionError:
        fd = os.open(name, _O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=pfd)
        try:
            st = os.fstat(fd)
            if st.st_uid != os.geteuid():
                raise
            os.chmod(f"/proc/self/fd/{fd}", stat.S_IMODE(st.st_mode) | stat.S_IRWXU)
        finally:
            os.close(fd)
        return os.open(name, _DIR, dir_fd=pfd)


def _clear_files(fd: int) -> list[str]:
    """Unlink every non-directory in directory fd; return the subdirectory names."""
    st = os.fstat(fd)
    if st.st_mode & stat.S_IRWXU != stat.S_IRWXU and st.st_uid == os.geteuid():
        os.fchmod(fd, stat.S_IMODE(st.st_mode) | stat.S_IRWXU)
    subdirs = []
    for e in list(os.scandir(fd)):
        try:
            if e.is_dir(follow_symlinks=False):
                subdirs.append(e.name)
                continue
        except OSError:
            pass
        try:
            os.unlink(e.name, dir_fd=fd)
        except FileNotFoundError:
            pass
        except IsADirectoryError:
            subdirs.append(e.name)
    return subdirs


def remove_at(pfd: int, name: str) -> None:
    """Remove `name` below the directory `pfd` and everything under it.

    Never follows a symlink, never recurses (a chain of thousands of
    directories is fine) and holds one directory descriptor at a time:
    going back up opens ".." and checks it is the directory it came from
    (device and inode), so a directory moved meanwhile stops the removal
    instead of sending it elsewhere.  Directories of ours without u+rwx get
    it back.  Never crosses into another filesystem.  Raises OSError if
    something could not be removed (the rest is removed)."""
    st = os.stat(name, dir_fd=pfd, follow_symlinks=False)
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(name, dir_fd=pfd)
        return
    top = os.fstat(pfd)
    first: OSError | None = None
    cur = _open_dir(pfd, name)
    cst = os.fstat(cur)
    # one frame per level: [name in parent, dev, ino, pending subdirectories, retries]
    stack: list[list] = [[name, cst.st_dev, cst.st_ino, None, 0]]
    try:
        while stack:
            frame = stack[-1]
            if frame[3] is None:
                try:
                    frame[3] = _clear_files(cur)
                except OSError as e:
                    first = first or e
                    frame[3] = []
            if frame[3]:
                child = frame[3].pop()
                try:
                    nfd = _open_dir(cur, child)
                except FileNotFoundError:
                    continue
                except NotADirectoryError:
                    try:
                        os.unlink(child, dir_fd=cur)
                    except OSError as e:
                        first = first or e
                    continue
                except OSError as e:
                    first = first or e
                    continue
                nst = os.fstat(nfd)
                if nst.st_dev != top.st_dev:
                    os.close(nfd)
                    first = first or OSError(errno.EXDEV, f"{child}: another filesystem")
                    continue
                os.close(cur)
                cur = nfd
                stack.append([child, nst.st_dev, nst.st_ino, None, 0])
                continue
            up = os.open("..", _DIR, dir_fd=cur)
            ust = os.fstat(up)
            want = (stack[-2][1], stack[-2][2]) if len(stack) > 1 else (top.st_dev, top.st_ino)
            if (ust.st_dev, ust.st_ino) != want:
                os.close(up)
                raise OSError(errno.ESTALE, f"{frame[0]} was moved while being removed")
            os.close(cur)
            cur = up
            try:
                os.rmdir(frame[0], dir_fd=cur)
            except FileNotFoundError:
                pass
            except OSError as e:
                if e.errno == errno.ENOTEMPTY and frame[4] < 3:
                    # something appeared meanwhile: go down again, a bounded number of times
                    frame[3], frame[4] = None, frame[4] + 1
                    try:
                        cur2 = _open_dir(cur, frame[0])
                    except OSError as e2:
                        first = first or e2
                        stack.pop()
                        continue
                    c2 = os.fstat(cur2)
                    frame[1], frame[2] = c2.st_dev, c2.st_ino
                    os.close(cur)
                    cur = cur2
                    continue
                first = first or e
            stack.pop()
    finally:
        os.close(cur)
    if first is not None:
        raise first


def _copy_out(spfd: int, sname: str, dpfd: int, dname: str, q: _Quarantine, qpath: str) -> None:
    """Copy the tree sname (below spfd) to dname (below dpfd), never following
    a symlink, without recursion, within the quarantine's caps: beyond
    QUARANTINE_ENTRY_CAP entries, QUARANTINE_COPY_CAP bytes or
    QUARANTINE_COPY_DEPTH levels nothing more is copied (counted in
    q.skipped; the caller removes the original anyway), and sockets, fifos
    and devices are recorded by name (q.special), not recreated."""
    # frames: (source dir fd, destination dir fd, destination path, pending names)
    stack: list[tuple[int, int, str, list[str]]] = []

    def one(sfd: int, name: str, dfd: int, dpath: str) -> None:
        st = os.stat(name, dir_fd=sfd, follow_symlinks=False)
        if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode) or stat.S_ISLNK(st.st_mode)):
            q.special(dpath, st.st_mode)
            return
        if q.entries >= QUARANTINE_ENTRY_CAP or (stat.S_ISDIR(st.st_mode)
                                                 and len(stack) >= QUARANTINE_COPY_DEPTH):
            q.skipped += 1
            return
        q.entries += 1
        if stat.S_ISLNK(st.st_mode):
            os.symlink(os.readlink(name, dir_fd=sfd), dpath.rsplit("/", 1)[-1], dir_fd=dfd)
        elif stat.S_ISDIR(st.st_mode):
            dn = dpath.rsplit("/", 1)[-1]
            os.mkdir(dn, 0o700, dir_fd=dfd)
            nsfd = os.open(name, _DIR, dir_fd=sfd)
            try:
                ndfd = os.open(dn, _DIR, dir_fd=dfd)
            except BaseException:
                os.close(nsfd)
                raise
            stack.append((nsfd, ndfd, dpath, sorted(os.listdir(nsfd), reverse=True)))
        else:
            fd = os.open(name, _FILE, dir_fd=sfd)
            try:
                out = os.open(dpath.rsplit("/", 1)[-1], os.O_WRONLY | os.O_CREAT | os.O_EXCL
                              | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dfd)
                try:
                    while True:
                        room = QUARANTINE_COPY_CAP - q.copied
                        b = os.read(fd, min(1 << 20, room)) if room > 0 else b""
                        if not b:
                            if room <= 0 and os.read(fd, 1):
                                q.truncated += 1
                            break
                        os.write(out, b)
                        q.copied += len(b)
                finally:
                    os.close(out)
            finally:
                os.close(fd)

    try:
        one(spfd, sname, dpfd, qpath)
        while stack:
            sfd, dfd, dpath, pending = stack[-1]
            if not pending:
                os.close(sfd)
                os.close(dfd)
                stack.pop()
                continue
            n = pending.pop()
            try:
                one(sfd, n, dfd, f"{dpath}/{n}")
            except FileNotFoundError:
                pass
    finally:
        for sfd, dfd, _, _ in stack:
            os.close(sfd)
            os.close(dfd)


class _Reverter:
    def __init__(self, snap: Snapshot, cur: _Scan, q: _Quarantine, report: Report,
                 writable: Sequence[str] = ()):
        self.snap = snap
        self.writable = tuple(writable)     # what the agent could write (see _into_writable)
        self.cur = cur
        self.fs = cur.fs
        self.q = q
        self.report = report
        self.is_root = os.geteuid() == 0
        self.copy_notes = ""         # what the last cross-filesystem copy left out
        self.hold: Callable[[int, str, str, str], bool] | None = None   # see verify_and_revert

    def held(self, rel: str, kind: str) -> bool:
        """rel, created during the run, kept as a held file by `hold` and removed
        here; False: not one to hold (or the copy failed), quarantine it as before."""
        if self.hold is None:
            return False
        try:
            pfd, name = self.fs.parent(rel)
        except (OSError, _Unsafe):
            return False        # the quarantine tries, and says why it cannot
        try:
            try:
                if not self.hold(pfd, name, rel, kind):
                    return False
            except OSError:
                return False
            try:
                remove_at(pfd, name)
            except (OSError, _Unsafe) as ex:
                self.add("created", rel, "failed", "kept as a held file, but it cannot be "
                         f"removed from the workdir: {_why(ex)}")
        finally:
            os.close(pfd)
        return True

    def take_copy_notes(self, detail: str) -> str:
        n, self.copy_notes = self.copy_notes, ""
        return f"{detail}; {n}" if detail and n else (detail or n)

    def add(self, what: str, path: str, action: str, detail: str = "",
            quarantine: str | None = None, alert: bool = True) -> Change:
        c = Change(what, path, action, self.take_copy_notes(detail), quarantine, alert)
        self.report.changes.append(c)
        return c

    def quarantine(self, rel: str) -> str:
        pfd, name = self.fs.parent(rel)
        try:
            qpfd, qname, qpath = self.q.slot(rel)
            try:
                try:
                    os.rename(name, qname, src_dir_fd=pfd, dst_dir_fd=qpfd)
                except OSError as e:
                    if e.errno != errno.EXDEV:
                        raise
                    self._copy(pfd, name, qpfd, qname, qpath)
                    remove_at(pfd, name)
            finally:
                os.close(qpfd)
        finally:
            os.close(pfd)
        return qpath

    def _copy(self, pfd: int, name: str, qpfd: int, qname: str, qpath: str) -> None:
        """_copy_out, and say what the caps left out (on the change that follows)."""
        q = self.q
        before = (q.skipped, q.truncated, q.n_specials)
        _copy_out(pfd, name, qpfd, qname, q, qpath)
        skipped, truncated, specials = (a - b for a, b in
                                        zip((q.skipped, q.truncated, q.n_specials), before, strict=True))
        notes = []
        if specials:
            notes.append(f"{specials} socket(s)/fifo(s)/device(s) recorded by name in "
                         "REPORT.txt, not copied")
        if skipped:
            notes.append(f"{skipped} entr{'y' if skipped == 1 else 'ies'} over the quarantine's "
                         f"cap ({QUARANTINE_ENTRY_CAP} entries, {QUARANTINE_COPY_CAP >> 20} MiB, "
                         f"{QUARANTINE_COPY_DEPTH} levels) removed without a copy")
        if truncated:
            notes.append(f"{truncated} file(s) copied only in part (byte cap)")
        self.copy_notes = "; ".join(notes)

    def keep_copy(self, rel: str, data: bytes) -> str:
        """Put `data` into quarantine under rel's name.  Not keep_current: the
        bytes kept must be the ones that were read and checked, not whatever
        the file holds by the time it is copied (nor capped by the quarantine's
        copy budget)."""
        qpfd, qname, qpath = self.q.slot(rel)
        try:
            fd = os.open(qname, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                         0o600, dir_fd=qpfd)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
        finally:
            os.close(qpfd)
        return qpath

    def keep_current(self, rel: str) -> str:
        """Copy the current content of a file into quarantine (no move)."""
        pfd, name = self.fs.parent(rel)
        try:
            qpfd, qname, qpath = self.q.slot(rel)
            try:
                self._copy(pfd, name, qpfd, qname, qpath)
            finally:
                os.close(qpfd)
        finally:
            os.close(pfd)
        return qpath

    def rewrite_in_place(self, rel: str, e: Entry) -> None:
        """Truncate and rewrite the file that is there (same inode as e)."""
        pfd, name = self.fs.parent(rel)
        try:
            fd = os.open(name, os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                         dir_fd=pfd)
        finally:
            os.close(pfd)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != (e.dev, e.ino):
                raise OSError(errno.ESTALE, "replaced while being restored")
            os.ftruncate(fd, 0)
            view = memoryview(e.data or b"")
            while view:
                view = view[os.write(fd, view):]
            os.fchmod(fd, e.mode)
        finally:
            os.close(fd)

    def _own(self, fd: int, uid: int, gid: int) -> None:
        if self.is_root:
            os.fchown(fd, uid, gid)

    def write_file(self, rel: str, data: bytes, mode: int, uid: int, gid: int) -> None:
        """Atomically put `data` at rel (temp file in the same directory + rename)."""
        pfd, name = self.fs.parent(rel, create=True)
        try:
            tmp = f".confine-restore-{os.getpid()}-{time.monotonic_ns()}"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                         0o600, dir_fd=pfd)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                self._own(fd, uid, gid)
                os.fchmod(fd, mode)
            finally:
                os.close(fd)
            try:
                os.rename(tmp, name, src_dir_fd=pfd, dst_dir_fd=pfd)
            except OSError:
                os.unlink(tmp, dir_fd=pfd)
                raise
        finally:
            os.close(pfd)

    def chmod(self, rel: str, e: Entry) -> None:
        pfd, name = self.fs.parent(rel)
        try:
            fd = os.open(name, _O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=pfd)
            try:
                st = os.fstat(fd)
                if stat.S_ISLNK(st.st_mode):
                    raise OSError(errno.ELOOP, "became a symlink")
                os.chmod(f"/proc/self/fd/{fd}", e.mode)
            finally:
                os.close(fd)
        finally:
            os.close(pfd)

    def restore(self, rel: str, e: Entry) -> str:
        """Recreate a snapshot entry at rel (nothing may be there). Returns a note."""
        if e.kind == "f":
            if e.data is None:
                raise OSError(errno.ENODATA, "no copy kept (too large or unreadable at start)")
            self.write_file(rel, e.data, e.mode, e.uid, e.gid)
        elif e.kind == "d":
            pfd, name = self.fs.parent(rel, create=True)
            try:
                os.mkdir(name, 0o700, dir_fd=pfd)
                fd = os.open(name, _DIR, dir_fd=pfd)
                try:
                    self._own(fd, e.uid, e.gid)
                    os.fchmod(fd, e.mode)
                finally:
                    os.close(fd)
            finally:
                os.close(pfd)
        elif e.kind == "l":
            if e.target is None:
                raise OSError(errno.ENODATA, "symlink target unknown")
            pfd, name = self.fs.parent(rel, create=True)
            try:
                os.symlink(e.target, name, dir_fd=pfd)
                if self.is_root:
                    os.chown(name, e.uid, e.gid, dir_fd=pfd, follow_symlinks=False)
            finally:
                os.close(pfd)
        else:
            raise OSError(errno.EOPNOTSUPP, "was not a file, directory or symlink")
        return "restored"


def _differs(a: Entry, b: Entry) -> str | None:
    """None if b (now) matches a (snapshot); else "type", "content", "target" or "mode"."""
    if a.kind != b.kind:
        return "type"
    if a.kind == "f":
        if a.size != b.size:
            return "content"
        if (a.dev, a.ino, a.ctime_ns) != (b.dev, b.ino, b.ctime_ns):
            if a.sha256 is None or b.sha256 is None or a.sha256 != b.sha256:
                return "content"
    if a.kind == "l" and a.target != b.target:
        return "target"
    if a.mode != b.mode:
        return "mode"
    return None


class _ExitScan(_Scan):
    """The scan of the workdir as the agent left it.  It must not give up:
    a failure below one root or directory is recorded as unchecked there (the
    check then quarantines it) and the scan goes on; a directory the agent
    made unreadable to us (ours, as when confine was started by the agent's
    own account) gets u+rwx back, by descriptor, and is looked at."""

    def __init__(self, *a: object, **kw: object) -> None:
        super().__init__(*a, **kw)  # type: ignore[arg-type]
        self.opened: list[tuple[str, int]] = []     # (rel, mode before) made readable again

    def _unreadable(self, pfd: int, name: str, rel: str) -> bool:
        try:
            fd = os.open(name, _O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=pfd)
        except OSError:
            return False
        try:
            st = os.fstat(fd)
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
                return False
            os.chmod(f"/proc/self/fd/{fd}", stat.S_IMODE(st.st_mode) | stat.S_IRWXU)
        except OSError:
            return False
        finally:
            os.close(fd)
        self.opened.append((rel, stat.S_IMODE(st.st_mode)))
        return True

    def record(self, rel: str, tree: bool, why: str, gitdir: str | None = None,
               depth: int = 0) -> None:
        try:
            super().record(rel, tree, why, gitdir, depth)
        except Exception as e:  # noqa: BLE001 - one path must not end the whole check
            self._unchecked(rel, f"could not be checked ({type(e).__name__}: {e})")

    def _visit(self, rel: str, fd: int) -> list[str]:
        try:
            return super()._visit(rel, fd)
        except Exception as e:  # noqa: BLE001
            self._unchecked(rel, f"could not be checked ({type(e).__name__}: {e})")
            return []


def verify_and_revert(snap: Snapshot, *, quarantine_dir: str | None = None,
                      trust_mounts: bool = False, home: str | None = None,
                      writable: Sequence[str] = (),
                      approved: Mapping[str, tuple[int, int]] | None = None,
                      hold: Callable[[int, str, str, str], bool] | None = None) -> Report:
    """Compare the workdir with `snap`, put protected paths back, report.

    Supervisor side; call it after the agent and everything it left running
    are gone (and, if wanted, periodically while it runs: then it races the
    agent and is best-effort).  Never follows a symlink, never writes outside
    the workdir except into the quarantine directory (default:
    default_quarantine_dir(snap.run_id), whose runs the session bounds: see
    keep.py), never deletes what it could copy: whatever it removes
    from the workdir is moved there (across filesystems within caps; sockets,
    fifos and devices are named in the report).

    Whatever it could not look at (a directory it cannot list, nesting or
    entries past the limits, a symlink chain past the kernel's 40 links, an
    error of its own) counts as changed: it is quarantined, and reported.
    An error of the check itself ends neither the check nor the revert of
    the rest: it becomes a "failed" change.

    trust_mounts=True (pass it only when the namespace step ran in the child
    with snap.mount_plan, and snap.mount_plan.complete): paths under the
    read-only binds cannot have been changed by the agent, so changes found
    there came from outside the sandbox (the person's editor, say) and are
    reported, not reverted.

    writable: the paths the agent could write besides the workdir (its home,
    the run's TMPDIR, write grants): a git location set during the run that
    points into one of them, or the workdir, is an alert.

    approved: new files at protected names the approval engine allowed while the
    agent ran (workdir-relative path -> (st_dev, st_ino) of the file made): such
    a file is kept, with its digest in the report, if it is still that very
    file, a regular file with one name; anything else there is handled as ever.

    hold: an exclusive workdir's (held.hold_at_exit): called with (parent fd,
    name, rel, kind) for each name created during the run that would be
    quarantined; True: it was kept as a held file, and is removed here instead.

    Returns a Report; `report.alerts` is what the launcher must print
    (format_report) and turn into a distinct outcome.
    """
    with index.no_gc():
        return _verify_and_revert(snap, quarantine_dir, trust_mounts, home, writable,
                                  approved or {}, hold)


def _verify_and_revert(snap: Snapshot, quarantine_dir: str | None, trust_mounts: bool,
                       home: str | None, writable: Sequence[str] = (),
                       approved: Mapping[str, tuple[int, int]] | None = None,
                       hold: Callable[[int, str, str, str], bool] | None = None) -> Report:
    t0 = time.monotonic()
    report = Report(namespaces_active=trust_mounts)
    q = _Quarantine(quarantine_dir or default_quarantine_dir(snap.run_id, home=home), snap.workdir)
    report.quarantine_dir = q.path
    # The start's directory index vouches for every plain directory whose stamp
    # (ctime: the agent cannot set it) is unchanged: the scan lists only what changed.
    cur = _ExitScan(snap.workdir, snap.patterns, copy=False, prev=snap, extra=snap.extra,
                    global_hooks=snap.global_hooks, parse_configs=False,
                    cached=snap.dir_index or None)
    report.exit_walk = _only_changed(snap, cur)
    complete = False
    try:
        try:
            try:
                cur.walk()
            except (TypeError, ValueError, IndexError, AttributeError):
                if cur.cached is None:
                    raise
                # the index is not as the snapshot made it: every directory, as without it
                old, cur = cur, _ExitScan(snap.workdir, snap.patterns, copy=False, prev=snap,
                                          extra=snap.extra, global_hooks=snap.global_hooks,
                                          parse_configs=False)
                old.fs.close()
                report.exit_walk = "every directory's stamp: the index is not as the snapshot made it"
                cur.walk()
            complete = True
        except Exception as e:  # noqa: BLE001 - revert what was seen, say what was not
            report.changes.append(Change("unchecked", "", "failed", "the scan of the workdir "
                                         f"stopped ({type(e).__name__}: {e}): paths it had not "
                                         "reached are NOT checked"))
        rv = _Reverter(snap, cur, q, report, (snap.workdir, *writable))
        rv.hold = hold
        for rel, mode in cur.opened:
            rv.add("mode", rel, "noted", f"was mode {mode:o}, unreadable to the check: given "
                   "u+rwx back to check it", alert=False)
        try:
            _revert(snap, cur, rv, trust_mounts and snap.mount_plan.complete, approved or {})
        except Exception as e:  # noqa: BLE001
            rv.add("unchecked", "", "failed", f"the revert stopped ({type(e).__name__}: {e}): "
                   "what it had not reached is NOT reverted")
        for what, check in (("modes", lambda: gitdata.check_modes(snap, cur, rv)),  # item 7
                            ("git data", lambda: gitdata.check(snap, cur, rv, _quarantine))):
            try:
                check()
            except Exception as e:  # noqa: BLE001 - one check failing never stops the rest
                rv.add("unchecked", "", "failed", f"the check of {what} stopped "
                       f"({type(e).__name__}: {e}): it is NOT checked")
        unchecked = {r for r, _ in cur.unchecked}
        for n in cur.notes:
            rel = n.split(":", 1)[0]
            if rel not in unchecked and (rel or ".") not in unchecked:
                report.changes.append(Change("unchecked", rel, "noted",
                                             n.split(":", 1)[-1].strip()))
        report.specials = list(q.specials)
        if any(c.quarantine for c in report.changes):
            try:
                text = format_report(report, verbose=True, limit=None)
                extra = "".join(f"  special   {printable(sp)}: recorded, not copied\n"
                                for sp in q.specials)
                if q.n_specials > len(q.specials):
                    extra += f"  ... and {q.n_specials - len(q.specials)} more specials\n"
                q.write_report((text + "\n" + extra).encode("utf-8", "surrogateescape"))
            except OSError as e:
                report.changes.append(Change("unchecked", "", "noted", "could not write "
                                             f"REPORT.txt in the quarantine: {_why(e)}"))
    finally:
        cur.fs.close()
        q.close()
    if complete and snap.index_dir is not None and snap.index_key is not None:
        # for the next start: what the revert changed has a new ctime, so it is listed again
        try:
            if snap.index_stored and cur.index == snap.dir_index:
                index.touch(snap.index_dir, snap.index_key)   # the same index: not written again
            else:
                index.save(snap.index_dir, snap.index_key, cur.index)
        except OSError as e:
            report.changes.append(Change("unchecked", "", "noted", "could not keep the "
                                         f"workdir's directory index: {_why(e)}", alert=False))
    report.seconds = time.monotonic() - t0
    return report


def _only_changed(snap: Snapshot, cur: _Scan) -> str:
    """Let the scan walk only the directories the kernel reported a name in
    since the start's walk began (and what leads to those listed every time),
    where the reports are complete; otherwise it takes every directory's stamp.
    Says which."""
    if snap.changes is None:
        return f"every directory's stamp: {snap.changes_note or 'no reports'}"
    if not snap.dir_index or snap.unchecked:
        return "every directory's stamp: " + ("the start's walk could not look at "
                                              f"{snap.unchecked[0][0] or '.'}" if snap.unchecked
                                              else "no index of the start")
    try:
        st, top = os.fstat(cur.fs.fd), snap.dir_index.get("")
        if top is None or (top[0], top[1]) != (st.st_dev, st.st_ino):
            return "every directory's stamp: the workdir is not the directory walked at start"
        dirty, why = snap.changes.changed(cur.fs.fd, snap.workdir)
        if dirty is None:
            return f"every directory's stamp: {why}"
        cur.only_changed(dirty, snap.dir_index)
    except (OSError, TypeError, ValueError, IndexError) as e:
        cur.changed, cur.need, cur.index = None, set(), {}
        return f"every directory's stamp: the reports could not be used ({type(e).__name__})"
    return f"the kernel's reports: {len(dirty)} directories changed"


def _ancestors(rel: str) -> Iterator[str]:
    """rel, then each directory above it inside the workdir, longest first ("" last)."""
    while True:
        yield rel
        if not rel:
            return
        rel = _parent_of(rel)


def _revert(snap: Snapshot, cur: _Scan, rv: _Reverter, trusted_mode: bool,
            approved: Mapping[str, tuple[int, int]] | None = None) -> None:
    # Every lookup below goes by the ancestors of one path (a bounded number),
    # never over all paths moved or handled: the cost stays linear in the
    # entries (10k sockets in a protected tree once took half a minute).
    # --- directories (git directories, protected trees) renamed during the run,
    #     recognised by inode, so a renamed repository is not taken for a new one
    snap_anchor: dict[tuple[int, int], str] = {(g.dev, g.ino): rel for rel, g in snap.gitdirs.items()}
    for rel in snap.roots:
        e = snap.entries.get(rel)
        if e is not None and e.kind == "d":
            snap_anchor[(e.dev, e.ino)] = rel
    cur_anchor: dict[str, tuple[int, int]] = {rel: (g.dev, g.ino) for rel, g in cur.gitdirs.items()}
    for rel in cur.roots:
        e = cur.entries.get(rel)
        if e is not None and e.kind == "d":
            cur_anchor[rel] = (e.dev, e.ino)
    moved: dict[str, str] = {}                  # current rel -> snapshot rel
    for rel, ino in cur_anchor.items():
        old = snap_anchor.get(ino)
        if old is not None and old != rel and cur_anchor.get(old) != ino:
            moved[rel] = old
    for rel in sorted(moved, key=len, reverse=True):    # keep the outermost of nested moves
        for up in _ancestors(_parent_of(rel)) if rel else ():
            if up in moved and up != rel and moved[rel] == moved[up] + rel[len(up):]:
                del moved[rel]
                break
    back = {old: new for new, old in moved.items()}

    def to_snap(rel: str) -> str:
        for new in _ancestors(rel):
            if new in moved:
                return moved[new] + rel[len(new):]
        return rel

    def to_cur(srel: str) -> str:
        for old in _ancestors(srel):
            if old in back:
                return back[old] + srel[len(old):]
        return srel

    def trusted(srel: str) -> bool:
        """Under a read-only bind that the agent could not write through.  The
        bind sits on the root's directory entry: if that entry now holds
        another inode (replaced on the host by rename, e.g. `git config` run
        outside), the kernel detached the agent's bind then, so trust ends."""
        if not trusted_mode:
            return False
        for r in _roots_covering(snap.roots, srel):
            if r.trusted and (r.tree or r.rel == srel):
                old = snap.entries.get(r.rel)
                now = cur.entries.get(to_cur(r.rel))
                return (old is not None and now is not None and old.kind == now.kind
                        and (old.dev, old.ino) == (now.dev, now.ino))
        return False

    handled: set[str] = set()                   # current rels moved away (skip what is below)
    checked = set(snap.checked_configs)

    def below_handled(rel: str) -> bool:
        return any(a in handled for a in _ancestors(rel))

    # --- 0. what the scan could not look at: moved away unchecked ------------------
    _unchecked(snap, cur, rv, handled, to_snap, trusted)
    if handled:
        for rel in [r for r in cur.entries if below_handled(r)]:
            del cur.entries[rel]
        for rel in [g for g in cur.gitdirs if below_handled(g)]:
            del cur.gitdirs[rel]
        for rel in [m for m in moved if below_handled(m)]:
            del moved[rel]
        back.clear()
        back.update({old: new for new, old in moved.items()})

    for new, old in sorted(moved.items()):
        rv.add("moved", new, "noted", f"was {old} (same directory, renamed during the run)",
               alert=False)

    cur_by_snap = {to_snap(rel): rel for rel in cur.entries}
    new_gitdirs = {rel for rel in cur.gitdirs if to_snap(rel) not in snap.gitdirs}

    # --- 1. created or changed, outermost first ----------------------------------
    def changed(rel: str) -> None:
        now = cur.entries[rel]
        srel = to_snap(rel)
        old = snap.entries.get(srel)
        if old is None:                                         # created
            if trusted(srel):
                rv.add("external", rel, "left", "created under a read-only bind, so not by the "
                       "agent", alert=False)
                return
            root = cur.roots.get(now.root)
            gd = root.gitdir if root is not None else None
            if gd is not None and gd in new_gitdirs:
                _new_repo_entry(rv, cur, rel, now, gd, handled)
                return
            if root is not None and rel == root.rel and root.why.startswith("gitdir pointer"):
                target = cur.pointers.get(rel)
                if target is not None and target in cur.gitdirs:
                    rv.add("created", rel, "kept", f"links to the git directory {target} in the "
                           "workdir, which is checked as well", alert=False)
                    return
            if now.kind == "f" and rel.rsplit("/", 1)[-1] == ".gitmodules" \
                    and _new_gitmodules(rv, rel):
                return
            if approved and _approved_kept(rv, rel, now, approved):
                return
            if rv.held(rel, now.kind):
                handled.add(rel)        # listed with the held files (held.format_held)
                return
            _quarantine(rv, rel, "created", handled)
            return
        how = _differs(old, now)
        if trusted(srel):
            rv.add("external", rel, "left", f"{how} changed under a read-only bind, so not by "
                   "the agent", alert=False)
            return
        if srel in checked and how in ("content", "mode") and _checked_config(rv, rel, old, now):
            return
        if how == "mode":
            try:
                rv.chmod(rel, old)
                rv.add("mode", rel, "restored", f"mode {now.mode:o} -> {old.mode:o}")
            except (OSError, _Unsafe) as ex:
                rv.add("mode", rel, "failed", f"cannot restore mode {old.mode:o}: {_why(ex)}")
            return
        what = "type" if how == "type" else "modified"
        if how == "content" and (old.dev, old.ino) == (now.dev, now.ino) and old.data is not None:
            # Same inode, new content: put the content back in place.  Replacing
            # the directory entry would detach a read-only bind that the agent's
            # mount namespace may hold on it.
            try:
                qpath = rv.keep_current(rel)
                rv.rewrite_in_place(rel, old)
                rv.add(what, rel, "restored", "original content put back (in place), the "
                       "changed content kept", quarantine=qpath)
                return
            except (OSError, _Unsafe):
                rv.copy_notes = ""
                # e.g. a read-only file we may not open for writing: replace it instead
        qpath = _quarantine(rv, rel, what, handled, report=False)
        if qpath is None:
            return
        try:
            rv.restore(rel, old)
            rv.add(what, rel, "restored", "original put back, the changed one moved away",
                   quarantine=qpath)
        except (OSError, _Unsafe) as ex:
            rv.add(what, rel, "failed", f"moved away, but the original cannot be put back: "
                   f"{_why(ex)}", quarantine=qpath)

    todo = sorted((rel for rel, e in cur.entries.items()
                   if to_snap(rel) not in snap.entries
                   or _differs(snap.entries[to_snap(rel)], e) is not None),
                  key=lambda k: (k.count("/"), k))
    for rel in todo:
        if below_handled(rel):
            continue
        try:
            changed(rel)
        except Exception as ex:  # noqa: BLE001 - one path must not end the revert
            rv.add("unchecked", rel, "failed", f"the check failed here ({type(ex).__name__}: "
                   f"{ex}): NOT reverted")

    # --- 2. deleted (including what was below entries put back above) ----------
    gone_gitdirs = {g for g in snap.gitdirs if g and g not in back and g not in cur.gitdirs}

    def deleted(srel: str) -> None:
        rel = to_cur(srel)
        if trusted(srel):
            if srel in snap.roots:
                rv.add("external", rel, "left", "gone from under a read-only bind: renamed or "
                       "removed outside the sandbox", alert=False)
            return
        parent = _parent_of(rel)
        pst = rv.fs.lstat(parent)
        if pst is None or not stat.S_ISDIR(pst.st_mode):
            sp = _parent_of(srel)
            if sp not in snap.entries and sp not in gone_gitdirs:
                rv.add("deleted", rel, "noted", f"{parent or '.'} is gone as well: not recreated",
                       alert=False)
            return
        if rv.fs.lstat(rel) is not None:
            return
        try:
            rv.restore(rel, snap.entries[srel])
            rv.add("deleted", rel, "restored", "recreated from the snapshot")
        except (OSError, _Unsafe) as ex:
            rv.add("deleted", rel, "failed", f"cannot recreate: {_why(ex)}")

    for srel in sorted((s for s in snap.entries if s not in cur_by_snap),
                       key=lambda k: (k.count("/"), k)):
        try:
            deleted(srel)
        except Exception as ex:  # noqa: BLE001
            rv.add("deleted", to_cur(srel), "failed", f"the check failed here "
                   f"({type(ex).__name__}: {ex}): NOT recreated")

    # --- 3. git directories that vanished -----------------------------------------
    for g in sorted(gone_gitdirs):
        rv.add("deleted", g, "noted", "git directory removed or moved out of the workdir: "
               "nothing left there to run", alert=False)


def _unchecked(snap: Snapshot, cur: _Scan, rv: _Reverter, handled: set[str],
               to_snap: Callable[[str], str], trusted: Callable[[str], bool]) -> None:
    """What the scan could not look at counts as changed: move it away.
    Exceptions: what was equally unchecked at start and provably unchanged
    (a symlink loop), and what is not ours and was unreadable at start as well
    (not the agent's: reported loudly, left in place)."""
    snap_notes = set(snap.notes)
    for rel, why in sorted(set(cur.unchecked), key=lambda t: (t[0].count("/"), t[0])):
        if any(a in handled for a in _ancestors(rel)):
            continue
        if rel == "":
            rv.add("unchecked", "", "failed", f"the workdir itself: {why}: NOT checked")
            continue
        srel = to_snap(rel)
        if trusted(srel):
            rv.add("unchecked", rel, "left", f"{why}; under a read-only bind, so not changed by "
                   "the agent", alert=False)
            continue
        if f"{srel}: {why}" in snap_notes:
            old, now = snap.entries.get(srel), cur.entries.get(rel)
            if old is not None and now is not None and old.kind == "l" and _differs(old, now) is None:
                rv.add("unchecked", rel, "noted", f"{why} (so at start as well, and unchanged)",
                       alert=False)
                continue
            st = rv.fs.lstat(rel)
            if st is not None and st.st_uid != os.geteuid() and not rv.is_root:
                rv.add("unchecked", rel, "failed", f"{why}; not ours, and so at start as well: "
                       "left in place, inspect it")
                continue
        try:
            _quarantine(rv, rel, "unchecked", handled, detail=f"{why}: moved away unchecked")
        except Exception as ex:  # noqa: BLE001
            rv.add("unchecked", rel, "failed", f"{why}; cannot move it away either "
                   f"({type(ex).__name__}: {ex})")


def _roots_covering(roots: dict[str, Root], rel: str) -> Iterator[Root]:
    parts = rel.split("/")
    for i in range(1, len(parts) + 1):
        r = roots.get("/".join(parts[:i]))
        if r is not None:
            yield r


def _why(ex: BaseException) -> str:
    if isinstance(ex, _Unsafe):
        return "a component of the path is a symlink or not a directory"
    if isinstance(ex, OSError):
        return ex.strerror or str(ex)
    return str(ex)


def _quarantine(rv: _Reverter, rel: str, what: str, handled: set[str],
                report: bool = True, detail: str = "") -> str | None:
    try:
        qpath = rv.quarantine(rel)
    except (OSError, _Unsafe) as ex:
        rv.add(what, rel, "failed", f"cannot move to quarantine: {_why(ex)}")
        return None
    handled.add(rel)
    if report:
        rv.add(what, rel, "quarantined", detail, quarantine=qpath)
    return qpath


def _approved_kept(rv: _Reverter, rel: str, now: Entry, approved: Mapping[str, tuple[int, int]]) -> bool:
    """A new file at a protected name the approval engine allowed: kept, with its
    digest, if it is the very file made then (same inode, a regular file, one name)."""
    if approved.get(rel) != (now.dev, now.ino) or now.kind != "f" or now.nlink != 1:
        return False
    digest = now.sha256
    if digest is None:
        data = _read_small(rv, rel)
        if data is None:
            return False       # cannot say what is kept: handled as any new file
        digest = sha256(data).hexdigest()
    rv.add("created", rel, "kept", f"approved during the run; sha256 {digest}", alert=False)
    return True


def _read_small(rv: _Reverter, rel: str) -> bytes | None:
    """A file's content (up to FILE_COPY_CAP) read by descriptor, no symlink followed;
    None if it cannot be read so."""
    try:
        pfd, name = rv.fs.parent(rel)
        try:
            return rv.fs.read_file(pfd, name, os.stat(name, dir_fd=pfd, follow_symlinks=False),
                                   FILE_COPY_CAP)
        finally:
            os.close(pfd)
    except (OSError, _Unsafe):
        return None


def _checked_config(rv: _Reverter, rel: str, old: Entry, now: Entry) -> bool:
    """True if the config of a repository that existed at start, changed
    during the run, may stay: the same rule the name guard applied to git's
    rename onto it (vet_git_config: safe keys, and the person's own entries
    as they were). A hard-linked file (writable through the other name) or
    one that cannot be read is not accepted: it is reverted as any change."""
    if now.kind != "f" or now.nlink != 1 or old.data is None:
        return False
    data = _read_small(rv, rel)
    if data is None:
        return False
    bad, err = vet_git_config(data, old.data)
    if bad or err:
        return False
    if now.mode != old.mode:
        try:
            rv.chmod(rel, old)
        except (OSError, _Unsafe):
            return False
    if data != old.data:
        before = {(it.name, it.value) for it in parse_git_config(old.data)[0]}
        after = {(it.name, it.value) for it in parse_git_config(data)[0]}
        # a network URL may still lead here (ssh to this machine): new ones only
        into = [f"{it.name} -> {p}" for it in parse_git_config(data)[0]
                if (it.name, it.value) not in before
                for p in [_into_writable(rv, rel, it)] if p]
        if into:
            rv.add("git-config", rel, "reverted", "set a git location into a path the agent "
                   "could write (" + ", ".join(into) + "): your next push or fetch would run "
                   "what it put there")
            return False
        added = sorted({n for n, _ in after - before})
        gone = sorted({n for n, _ in before - after})
        parts = ([f"set {', '.join(added)}"] if added else []) \
            + ([f"removed {', '.join(gone)}"] if gone else [])
        rv.add("git-config", rel, "kept", "changed by git through confine's check ("
               + ("; ".join(parts) or "same entries") + ")", alert=False)
    return True


def _into_writable(rv: _Reverter, rel: str, it: ConfigItem,
                   but_workdir: bool = False) -> str | None:
    """The path git location `it` of the config at `rel` names, if it lies
    (as written, or with symlinks resolved now) where the agent could write.
    Relative paths are taken from the repository's top (the worktree, or a
    bare repository itself); ~ paths are not judged (whose home is meant
    depends on who runs git, and a local one is refused at the call).
    but_workdir: a path in the workdir is not counted (whatever lies there
    is judged by this same check)."""
    p = location_path(it)
    if p is None or p.startswith("~"):
        return None
    top = os.path.dirname(os.path.join(rv.snap.workdir, rel))
    if os.path.basename(top) == ".git":
        top = os.path.dirname(top)
    full = os.path.normpath(os.path.join(top, p))
    for cand in dict.fromkeys((full, os.path.realpath(full))):
        if but_workdir and is_under(cand, rv.snap.workdir):
            continue
        if any(is_under(cand, w) for w in rv.writable):
            return cand
    return None


def _new_gitmodules(rv: _Reverter, rel: str) -> bool:
    """A new `.gitmodules` that may stay (git submodule add, through the
    broker's check): every entry passes gitlink.gitmodules_problems, a local
    url only outside the workdir (what the sandbox could write there is the
    broker's to judge, while the agent runs)."""
    data = _read_small(rv, rel)
    if data is None:
        return False
    wd = rv.snap.workdir.rstrip("/") + "/"

    def local(path: str) -> str | None:
        return "inside the workdir" if (path + "/").startswith(wd) else None
    if gitlink.gitmodules_problems(data, local):
        return False
    rv.add("created", rel, "kept", "submodule paths and urls only (checked)", alert=False)
    return True


def _points_back(cur: _Scan, gd: str, it: ConfigItem) -> bool:
    """A submodule's core.worktree as git writes it: its working tree, whose
    `.git` file (found by this walk) points back to the git directory gd."""
    if (it.section, it.sub, it.key) != ("core", None, "worktree") or it.value is None or not gd:
        return False
    try:
        wt = gitlink.worktree_of(tuple(gd.split("/")), it.value, fold)
    except ValueError:
        return False
    return cur.pointers.get("/".join(wt + (".git",))) == gd


def _new_repo_entry(rv: _Reverter, cur: _Scan, rel: str, e: Entry, gd: str,
                    handled: set[str]) -> None:
    """A protected entry of a git directory created during the run: keep the
    repository usable but harmless."""
    sub = rel[len(gd) + 1:] if gd else rel
    if sub in ("config", "config.worktree") and e.kind == "f":
        try:
            pfd, name = rv.fs.parent(rel)
            try:
                data = rv.fs.read_file(pfd, name, os.stat(name, dir_fd=pfd, follow_symlinks=False),
                                       FILE_COPY_CAP * 4)
            finally:
                os.close(pfd)
        except (OSError, _Unsafe):
            data = None
        if data is None:
            _quarantine(rv, rel, "new-repo", handled, detail="unreadable or too large config")
            return
        new, removed, err = sanitize_git_config(data, lambda it: _points_back(cur, gd, it))
        if not removed and err is None:
            return  # nothing but safe keys: leave it alone, say nothing
        try:
            qpath = rv.keep_copy(rel, data)
            rv.write_file(rel, new, e.mode, e.uid, e.gid)
        except (OSError, _Unsafe) as ex:
            _quarantine(rv, rel, "new-repo", handled, detail=f"cannot rewrite it ({_why(ex)})")
            return
        danger = [it.name for it, w in removed if w == KEY_REFUSED and is_dangerous_key(it)]
        other = [it.name for it, w in removed if w == KEY_REFUSED and not is_dangerous_key(it)]
        # Removed either way; an alert when it led out of the workdir into the agent's
        # reach (a local clone's origin in the workdir is judged by this same check).
        into = [f"{it.name} -> {p}" for it, _ in removed
                for p in [_into_writable(rv, rel, it, but_workdir=True)] if p]
        parts = []
        if danger:
            parts.append("removed " + ", ".join(danger) + " (run programs)")
        if other:
            parts.append("removed " + ", ".join(other) + " (not on the safe list)")
        parts += [f"removed {it.name} ({w})" for it, w in removed if w != KEY_REFUSED]
        if into:
            parts.append("a location pointed into a path the agent could write ("
                         + ", ".join(into) + ")")
        if err:
            parts.append(f"dropped the rest: {err}")
        rv.add("new-repo", rel, "sanitized", "; ".join(parts), quarantine=qpath,
               alert=bool(danger) or bool(err) or bool(into))
        return
    if sub == "hooks" and e.kind == "d":
        return  # the directory stays; its entries are looked at one by one
    if sub.startswith("hooks/"):
        name = rel.rsplit("/", 1)[-1]
        if e.kind == "f" and name.endswith(".sample") and sub.count("/") == 1:
            return  # git never runs *.sample
        _quarantine(rv, rel, "new-repo", handled, detail="hook in a repository created during "
                    "the run")
        return
    if sub == "commondir" and e.kind == "f":
        try:
            pfd, name = rv.fs.parent(rel)
            try:
                data = rv.fs.read_file(pfd, name, os.stat(name, dir_fd=pfd, follow_symlinks=False),
                                       4096)
            finally:
                os.close(pfd)
        except (OSError, _Unsafe):
            data = None
        t = cur._inside(data.decode("utf-8", "surrogateescape").strip(), gd) if data else None
        if t is not None and t in cur.gitdirs:
            return
        _quarantine(rv, rel, "new-repo", handled, detail="commondir pointing outside the workdir")
        return
    _quarantine(rv, rel, "new-repo", handled, detail="protected path in a repository created "
                "during the run")
