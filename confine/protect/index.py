"""The workdir's directory index, kept between runs (issue 13, goal 2).

The walk of snapshot.py looks at every directory of the workdir, at start and
at exit.  It records, per directory it listed, a stamp (device, inode, ctime
and mtime, taken by fstat *before* the listing) and what the listing showed:
`plain` (no name in it that the walk acts on: no pattern's first component,
no `.git`, not a git directory) and the names of its subdirectories.  A later
walk that finds the same stamp need not list that directory again: any entry
added, removed or renamed in a directory sets its ctime, and ctime cannot be
set by anyone (utimensat sets mtime and atime, never ctime).  Only plain
directories are skipped; every other one, and every directory whose stamp
differs, is listed as before, and what sits below a pattern match (protected
entries, git data, configs) is always read again.

A stamp whose ctime is within RACY_NS of the walk is not trusted later (the
kernel's clock has a coarse tick: a change in the same tick as the fstat could
leave ctime equal): such a directory is listed every time until it is older.

Stored between runs (`load`, `save`) only where the agent cannot write: root's
/var/lib/confine/index, or the invoking user's $XDG_STATE_HOME/confine/index
(never the workdir, never the agent home), in a directory owned by the
caller with mode 0700, as a file owned by the caller and not writable by
others, keyed by the workdir's path, device, inode and mount id, the caller,
the patterns, confine's version and the walk's code.  Anything that does not
match, cannot be read or is not well formed: no index, the walk lists every
directory as before.
"""
from __future__ import annotations

import contextlib
import gc
import marshal
import os
import stat
import time
from hashlib import sha256
from typing import Any, Iterator, Sequence

from ..paths import is_under, state_dir
from ..policy.patterns import Pattern

__all__ = ["RACY_NS", "Record", "FILESYSTEMS", "default_dir", "dir_for", "unsupported",
           "cache_key", "load", "save", "touch", "no_gc"]

RACY_NS = 1_000_000_000          # a stamp this close to the walk is listed again next time
KEEP = 32                        # index files kept per directory (the oldest go)
MAX_BYTES = 256 << 20            # an index file larger than this is not read ...
MAX_DIRS = 2_000_000             # ... nor one of more directories written
_FORMAT = 1
_MAGIC = b"confine-index\n"

# rel -> (dev, ino, ctime_ns or -1 when racy, mtime_ns, plain, subdirectory names)
Record = tuple[int, int, int, int, bool, tuple[str, ...]]


@contextlib.contextmanager
def no_gc() -> Iterator[None]:
    """The walk makes a tuple per directory and keeps them all: the cyclic
    collector would scan them again and again (a third of the time) and find
    nothing to free. Turned back on, it would still scan them all once (21 ms
    for 90k directories): they go to the oldest generation unscanned instead
    (gc.freeze then unfreeze), or, in confine's own process (OWN_PROCESS: the
    CLI, which froze its imports), stay out of every collection like them. A
    program that froze objects of its own gets neither (unfreeze would release
    its objects, freeze would keep its young garbage forever)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            if OWN_PROCESS:
                gc.freeze()
            elif not gc.get_freeze_count():
                gc.freeze()
                gc.unfreeze()
            gc.enable()


# Set by the CLI (cli/fast.py): the process runs nothing but confine.
OWN_PROCESS = False


def default_dir(*, euid: int | None = None, home: str | None = None) -> str:
    """/var/lib/confine/index as root, else $XDG_STATE_HOME (~/.local/state)/confine/index:
    beside the quarantine (revert.default_quarantine_dir), outside every agent home."""
    return state_dir("index", euid=euid, home=home)


def dir_for(policy: Any) -> tuple[str | None, str]:
    """(the index directory for a run of `policy`, or None and why not): never
    one the agent could write, whatever the profile grants."""
    path = os.path.realpath(default_dir())
    grants = [policy.workdir, *(g.path for g in (*policy.write, *policy.devices))]
    for g in grants:
        if is_under(path, os.path.realpath(g)) or is_under(os.path.realpath(g), path):
            return None, f"the index directory {path} is writable in the sandbox ({g})"
    return path, ""


# Filesystems whose ctime has a fine grain, is set by the kernel on every change and
# cannot be set by anyone else.  Not: FAT (2 s, no real ctime), network and FUSE
# filesystems (a server's or another client's clock and caches), overlayfs (copy-up).
FILESYSTEMS = frozenset({"ext4", "xfs", "btrfs", "tmpfs", "f2fs", "bcachefs", "zfs"})


def unsupported(fd: int) -> str | None:
    """Why the directory `fd` is on a filesystem whose stamps cannot vouch for a
    listing (None: they can)."""
    mid = _mount_id(fd)
    try:
        with open("/proc/self/mountinfo", "rb") as f:
            for ln in f:
                parts = ln.split()
                if parts and parts[0] == str(mid).encode():
                    fstype = parts[parts.index(b"-") + 1].decode("ascii", "replace")
                    return None if fstype in FILESYSTEMS else \
                        f"no directory index on {fstype} (its timestamps cannot vouch for a listing)"
    except (OSError, ValueError, IndexError):
        pass
    return "no directory index: the workdir's filesystem is unknown"


def _mount_id(fd: int) -> int:
    try:
        with open(f"/proc/self/fdinfo/{fd}", "rb") as f:
            for ln in f:
                if ln.startswith(b"mnt_id:"):
                    return int(ln.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return -1


def _code_stamp() -> tuple[int, ...]:
    """The walk's code: an index from other code is not read (a development
    checkout changes without a version bump)."""
    out: list[int] = []
    here = os.path.dirname(os.path.abspath(__file__))
    for n in ("snapshot.py", "index.py"):
        try:
            st = os.stat(os.path.join(here, n))
            out += [st.st_size, st.st_mtime_ns, st.st_ino]
        except OSError:
            out += [-1, -1, -1]
    return tuple(out)


def cache_key(workdir: str, fd: int, patterns: Sequence[Pattern]) -> tuple[Any, ...]:
    """Everything the index depends on; `fd` is the workdir's open descriptor."""
    from .. import __version__  # confine/__init__ imports the api, which imports this
    st = os.fstat(fd)
    pats = tuple((p.text, p.tree, p.git, p.anchored, tuple(p.comps)) for p in patterns)
    return (_FORMAT, __version__, _code_stamp(), workdir, st.st_dev, st.st_ino, _mount_id(fd),
            os.geteuid(), pats)


def _name(key: tuple[Any, ...]) -> str:
    return sha256(repr(key).encode("utf-8", "surrogateescape")).hexdigest()[:32]


def _open_dir(path: str, create: bool) -> int | None:
    """The index directory, only if it is ours, a real directory and 0700."""
    if create:
        try:
            os.makedirs(path, mode=0o700, exist_ok=True)
        except OSError:
            return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    st = os.fstat(fd)
    if st.st_uid != os.geteuid() or stat.S_IMODE(st.st_mode) & 0o077:
        os.close(fd)
        return None
    return fd


def load(path: str, key: tuple[Any, ...]) -> dict[str, Record] | None:
    """The index stored for `key`, or None (missing, foreign, not ours alone, other key, bad)."""
    dfd = _open_dir(path, False)
    if dfd is None:
        return None
    try:
        fd = os.open(_name(key), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     dir_fd=dfd)
    except OSError:
        return None
    finally:
        os.close(dfd)
    try:
        st = os.fstat(fd)
        if (not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid()
                or stat.S_IMODE(st.st_mode) & 0o022 or st.st_nlink != 1
                or st.st_size > MAX_BYTES):
            return None
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read()
    except OSError:
        return None
    finally:
        os.close(fd)
    n = len(_MAGIC)
    if not data.startswith(_MAGIC) or sha256(data[n + 32:]).digest() != data[n:n + 32]:
        return None     # not written whole by save (a torn or damaged file)
    try:
        got = marshal.loads(data[n + 32:])
    except (ValueError, EOFError, TypeError):
        return None
    if not (isinstance(got, tuple) and len(got) == 2 and got[0] == key
            and isinstance(got[1], dict)):
        return None
    return got[1]


def save(path: str, key: tuple[Any, ...], index: dict[str, Record]) -> None:
    """Store `index` for `key` (atomically: a new file renamed into place);
    OSError if it cannot be written.  Older index files beyond KEEP go."""
    if len(index) > MAX_DIRS:
        return
    dfd = _open_dir(path, True)
    if dfd is None:
        raise OSError(f"{path}: not a private directory of ours")
    name = _name(key)
    tmp = f".{name}.{os.getpid()}"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600, dir_fd=dfd)
        try:
            body = marshal.dumps((key, index))
            view = memoryview(_MAGIC + sha256(body).digest() + body)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        _expire(dfd, name)
    except BaseException:
        try:
            os.unlink(tmp, dir_fd=dfd)
        except OSError:
            pass
        raise
    finally:
        os.close(dfd)


def touch(path: str, key: tuple[Any, ...]) -> None:
    """Mark the index of `key` as used now (the oldest go first), unchanged."""
    dfd = _open_dir(path, False)
    if dfd is None:
        return
    try:
        os.utime(_name(key), dir_fd=dfd, follow_symlinks=False)
    except OSError:
        pass
    finally:
        os.close(dfd)


def _expire(dfd: int, keep: str) -> None:
    dated = []
    stale = time.time_ns() - 600 * 10**9
    for e in os.scandir(dfd):
        try:
            mtime = e.stat(follow_symlinks=False).st_mtime_ns
        except OSError:
            continue
        if e.name.startswith(".") and mtime < stale:
            dated.append((-1, e.name))      # left by a save that was killed
        elif e.name != keep and len(e.name) == 32:
            dated.append((mtime, e.name))
    dated.sort(reverse=True)
    for _, n in dated[KEEP - 1:] + [d for d in dated[:KEEP - 1] if d[0] == -1]:
        try:
            os.unlink(n, dir_fd=dfd)
        except OSError:
            pass
