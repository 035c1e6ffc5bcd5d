"""The snapshot: every protected path of the workdir at start, and the mount plan.

Runs in the supervisor before the agent starts.  It records what a person's
git, editor or shell would run later (content hash, a copy of small files,
modes, directory listings, symlink targets), so that revert.py can put it back,
and derives the plan of the mount namespace layer (kernel/namespaces.py):
read-only binds over protected paths that exist, read-write binds that pin
git directories and the directories inside a pattern in place.

Always protected, whatever the pattern list: `.git` files (gitdir pointers),
and paths that the existing, trusted git configuration points into the
workdir: core.hooksPath (also from ~/.gitconfig, e.g. `.husky`), include.path
and includeIf.*.path, and the program of command-valued keys (core.fsmonitor,
filter drivers, ...) when it is a file in the workdir.

Walk: everything below the workdir is walked, fd by fd with O_NOFOLLOW (a
symlinked directory is never entered: its target, if in the workdir, is
walked where it really is), git internals included: a bare repository or a
`.git` hidden in `.git/objects`, `refs`, `logs` or `lfs` is a git directory
that a person's git reaches through a symlink (`tools -> .git/objects/x`),
so it is found and checked like any other.  node_modules, virtualenvs
and build trees are walked too: a nested repository anywhere can be reached
by a person's `git status` through a gitlink, so skipping them would leave a
hole; measured: 100k directories with 300k files take about 1.7 s (2-core VM), and from
the second run on about a fifth of that: the directory index (index.py) vouches for
the directories that did not change, so they are not listed again (and as root the exit
check lists only where the kernel reported a new name: changes.py).  Nesting is followed
up to MAX_DEPTH directories; symlinks are resolved by descriptor, at most MAX_LINKS of them.
What the walk cannot look at (deeper nesting, more than ENTRY_CAP protected entries, a
directory it cannot list, a longer link chain) is recorded in `unchecked`: the exit check
(revert.py) quarantines it rather than trust it.
"""
from __future__ import annotations

import errno
import fnmatch
import os
import stat
import time
from hashlib import sha256
from typing import Any, Collection, Iterable, Iterator, Sequence

from ..kernel import namespaces
from ..paths import rel_under
from ..policy.patterns import Pattern, compile_patterns
from ..record import dataclass, field
from . import changes as _changes
from . import index as _index
from .gitconfig import _BOOL_WORDS, _COMMAND_KEYS, parse_git_config
from .index import RACY_NS, Record

__all__ = ["Entry", "Root", "GitDir", "Snapshot", "snapshot", "GIT_SKIP"]

FILE_COPY_CAP = 1 << 20         # keep a copy of protected files up to 1 MiB ...
TOTAL_COPY_CAP = 64 << 20       # ... and 64 MiB in all; larger ones: hash only
HASH_CAP = 256 << 20            # above this, compare inode/size/ctime only
ENTRY_CAP = 100_000             # entries recorded below protected directories
MAX_DEPTH = 400                 # directory nesting followed by the walk
MAX_LINKS = 40                  # symlinks followed while resolving one path (the kernel's limit)
# git's own storage inside a git directory.  The name guard (guard.py) does not look for
# submodule git directories below these; the walk enters them all the same.
GIT_SKIP = frozenset({"objects", "refs", "logs", "lfs"})

_O_PATH = getattr(os, "O_PATH", 0o10000000)
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_PATHDIR = _O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


# --- snapshot data -------------------------------------------------------------------------

@dataclass
class Entry:
    rel: str
    kind: str                      # "f" file, "d" directory, "l" symlink, "o" other
    mode: int                      # S_IMODE
    uid: int
    gid: int
    dev: int
    ino: int
    size: int = 0
    ctime_ns: int = 0
    nlink: int = 1
    sha256: str | None = None      # files: None if unreadable or above HASH_CAP
    data: bytes | None = None      # files: a copy when small enough
    target: str | None = None      # symlinks
    root: str = ""                 # the protected root this entry belongs to


@dataclass
class Root:
    rel: str
    tree: bool                     # the whole tree below is protected
    why: str                       # the pattern, or what referenced it
    gitdir: str | None = None      # set for roots inside a git directory
    mounted: bool = False          # covered by a read-only bind of the mount plan
    trusted: bool = False          # mounted and not reachable through a hard link


@dataclass
class GitDir:
    rel: str
    dev: int
    ino: int
    worktree: str | None = None    # workdir-relative, None for bare / unknown


@dataclass
class Snapshot:
    workdir: str
    patterns: tuple[Pattern, ...]
    run_id: str
    roots: dict[str, Root]
    entries: dict[str, Entry]
    gitdirs: dict[str, GitDir]
    pins: tuple[str, ...]
    extra: tuple[tuple[str, bool, str], ...]   # (rel, tree, why) from trusted git configs
    global_hooks: tuple[str, ...]              # relative core.hooksPath from global configs
    mount_plan: namespaces.Plan
    guard_only: tuple[tuple[str, str], ...]    # (rel, reason): existing, not covered by a mount
    notes: tuple[str, ...]                     # what could not be recorded
    taken_at: float = 0.0
    seconds: float = 0.0
    # rel -> (dev, ino, mode) of the workdir (""), every git directory, the directories
    # between them and the workdir, and their objects/refs/info/hooks: restored at exit
    dir_modes: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    # gitdir rel -> what gitdata.py recorded (refs, index entries, grafts, alternates)
    git_state: dict[str, Any] = field(default_factory=dict)
    # `<gitdir>/config` of repositories that exist at start, left without a
    # read-only bind because the name guard checks every rename onto them
    # (snapshot(guarded=True)); the exit check accepts the same content there
    checked_configs: tuple[str, ...] = ()
    # the directory index of this walk (index.py), where it is kept between runs and its key
    dir_index: dict[str, Record] = field(default_factory=dict, repr=False)
    index_dir: str | None = None
    index_key: tuple[Any, ...] | None = None
    index_reused: int = 0          # directories the index vouched for (not listed again)
    index_note: str = ""           # why no stored index was used
    index_stored: bool = False     # dir_index is the very index stored (nothing to write)
    # the kernel's reports of names made in the workdir's filesystem since before the
    # walk (changes.py; None: not available, `changes_note` says why)
    changes: Any = field(default=None, repr=False)
    changes_note: str = ""
    unchecked: tuple[tuple[str, str], ...] = ()    # (rel, why) the walk could not look at

    def describe(self) -> dict[str, object]:
        """JSON-able view for --dry-run: what is protected and how."""
        ro = {"/".join(m.rel) for m in self.mount_plan.mounts if m.readonly}
        return {
            "workdir": self.workdir,
            "patterns": [p.text for p in self.patterns],
            "git_directories": sorted(self.gitdirs),
            "protected": [{"path": r.rel, "tree": r.tree, "why": r.why,
                           "read_only_bind": r.mounted, "trusted": r.trusted}
                          for r in sorted(self.roots.values(), key=lambda r: r.rel)],
            "read_only_binds": sorted(ro),
            "pinned": sorted("/".join(m.rel) for m in self.mount_plan.mounts if not m.readonly),
            "bases": [b.path for b in self.mount_plan.bases],
            "bases_complete": self.mount_plan.complete,
            "guard_only": [{"path": p, "reason": why} for p, why in self.guard_only],
            "checked_configs": list(self.checked_configs),
            "notes": list(self.notes),
            "seconds": round(self.seconds, 3),
            "index": {"directories": len(self.dir_index), "reused": self.index_reused,
                      "stored_in": self.index_dir, "note": self.index_note,
                      "exit_reports": self.changes_note or "the kernel's (fanotify)"},
        }

    def summary(self) -> str:
        return (f"{len(self.roots)} protected paths in {len(self.gitdirs)} git directories, "
                f"{len(self.mount_plan.mounts)} binds x {len(self.mount_plan.bases)} "
                f"path(s) to the workdir, snapshot {self.seconds:.2f}s")


# --- fd-based access below the workdir -------------------------------------------------------

class _Unsafe(Exception):
    """A component on the way is a symlink or not a directory."""


def _join(a: str, b: str) -> str:
    return f"{a}/{b}" if a else b


def _parent_of(rel: str) -> str:
    return rel.rsplit("/", 1)[0] if "/" in rel else ""


class _Fs:
    def __init__(self, workdir: str):
        self.path = workdir
        self.fd = os.open(workdir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)

    def close(self) -> None:
        os.close(self.fd)

    def parent(self, rel: str, create: bool = False) -> tuple[int, str]:
        """(fd of the parent directory, last name); the caller closes the fd.
        FileNotFoundError if a parent is missing (unless create), _Unsafe if a
        component is a symlink or not a directory."""
        comps = rel.split("/")
        cur = os.dup(self.fd)
        try:
            for c in comps[:-1]:
                # O_PATH: search permission is enough, as for any path lookup
                try:
                    nxt = os.open(c, _PATHDIR, dir_fd=cur)
                except FileNotFoundError:
                    if not create:
                        raise
                    os.mkdir(c, 0o755, dir_fd=cur)
                    nxt = os.open(c, _PATHDIR, dir_fd=cur)
                except OSError as e:
                    if e.errno in (errno.ELOOP, errno.ENOTDIR):
                        raise _Unsafe(rel) from None
                    raise
                os.close(cur)
                cur = nxt
            return cur, comps[-1]
        except BaseException:
            os.close(cur)
            raise

    def open_dir(self, rel: str) -> int | None:
        """A read-only descriptor of the directory rel; None if it cannot be opened
        without following a symlink."""
        try:
            if rel:
                pfd, name = self.parent(rel)
                try:
                    return os.open(name, _DIR, dir_fd=pfd)
                finally:
                    os.close(pfd)
            return os.dup(self.fd)
        except (OSError, _Unsafe):
            return None

    def readlink(self, rel: str) -> str | None:
        """Target of the symlink rel (its directory reached without symlinks)."""
        try:
            pfd, name = self.parent(rel)
        except (OSError, _Unsafe):
            return None
        try:
            return os.readlink(name, dir_fd=pfd)
        except OSError:
            return None
        finally:
            os.close(pfd)

    def listdir(self, rel: str) -> list[tuple[str, bool]] | None:
        """(name, is a directory) of the entries of the directory rel; None if it
        cannot be opened without following a symlink."""
        fd = self.open_dir(rel)
        if fd is None:
            return None
        try:
            return [(e.name, e.is_dir(follow_symlinks=False)) for e in os.scandir(fd)]
        except OSError:
            return None
        finally:
            os.close(fd)

    def open_file(self, rel: str) -> int | None:
        """A read-only descriptor of the regular file rel (no symlink followed)."""
        try:
            pfd, name = self.parent(rel)
        except (OSError, _Unsafe):
            return None
        try:
            fd = os.open(name, _FILE, dir_fd=pfd)
        except OSError:
            return None
        finally:
            os.close(pfd)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            return None
        return fd

    def chmod_dir(self, rel: str, mode: int, ident: tuple[int, int]) -> None:
        """chmod of the very directory recorded as ident (dev, ino), by an O_PATH
        descriptor reached without symlinks; OSError otherwise."""
        try:
            if rel:
                pfd, name = self.parent(rel)
                try:
                    fd = os.open(name, _PATHDIR, dir_fd=pfd)
                finally:
                    os.close(pfd)
            else:
                fd = os.dup(self.fd)
        except _Unsafe:
            raise OSError(errno.ELOOP, "a component is a symlink") from None
        try:
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) != ident:
                raise OSError(errno.ESTALE, "replaced while being restored")
            os.chmod(f"/proc/self/fd/{fd}", mode)
        finally:
            os.close(fd)

    def lstat(self, rel: str) -> os.stat_result | None:
        if rel == "":
            return os.fstat(self.fd)
        try:
            pfd, name = self.parent(rel)
        except (OSError, _Unsafe):
            return None
        try:
            return os.stat(name, dir_fd=pfd, follow_symlinks=False)
        except OSError:
            return None
        finally:
            os.close(pfd)

    def read_file(self, pfd: int, name: str, st: os.stat_result, cap: int) -> bytes | None:
        """Content of a regular file (None: unreadable, changed or larger than cap)."""
        if st.st_size > cap:
            return None
        try:
            fd = os.open(name, _FILE, dir_fd=pfd)
        except OSError:
            return None
        try:
            st2 = os.fstat(fd)
            if not stat.S_ISREG(st2.st_mode) or st2.st_ino != st.st_ino:
                return None
            chunks, total = [], 0
            while total <= cap:
                b = os.read(fd, 1 << 20)
                if not b:
                    break
                chunks.append(b)
                total += len(b)
            return b"".join(chunks) if total <= cap else None
        finally:
            os.close(fd)


    def hash_file(self, pfd: int, name: str, st: os.stat_result,
                  keep: bool) -> tuple[str | None, bytes | None]:
        """(sha256, content if keep) of a regular file, read in chunks; (None,
        None) if unreadable, replaced meanwhile, or larger than HASH_CAP."""
        if st.st_size > HASH_CAP:
            return None, None
        try:
            fd = os.open(name, _FILE, dir_fd=pfd)
        except OSError:
            return None, None
        try:
            st2 = os.fstat(fd)
            if not stat.S_ISREG(st2.st_mode) or st2.st_ino != st.st_ino:
                return None, None
            h, chunks, total = sha256(), [], 0
            while True:
                b = os.read(fd, 1 << 20)
                if not b:
                    break
                total += len(b)
                if total > HASH_CAP:
                    return None, None
                h.update(b)
                if keep:
                    chunks.append(b)
            return h.hexdigest(), (b"".join(chunks) if keep and total <= FILE_COPY_CAP else None)
        finally:
            os.close(fd)


def _kind(mode: int) -> str:
    if stat.S_ISREG(mode):
        return "f"
    if stat.S_ISDIR(mode):
        return "d"
    if stat.S_ISLNK(mode):
        return "l"
    return "o"


# --- scanning: discovery + recording (used for the snapshot and for verification) -----------

class _Scan:
    def __init__(self, workdir: str, pats: Sequence[Pattern], *, copy: bool,
                 prev: Snapshot | None = None,
                 extra: Iterable[tuple[str, bool, str]] = (), global_hooks: Iterable[str] = (),
                 parse_configs: bool = True, home: str | None = None,
                 git_configs: Sequence[str] | None = None,
                 cached: dict[str, Record] | None = None):
        self.workdir = workdir
        self.fs = _Fs(workdir)
        self.pats = [p for p in pats if not p.git]
        self.git_pats = [p for p in pats if p.git]
        self.first: dict[str, list[Pattern]] = {}
        self.wild_first: list[Pattern] = []
        for p in self.pats:
            if p.wild(0):
                self.wild_first.append(p)
            else:
                self.first.setdefault(p.comps[0], []).append(p)
        self.copy = copy
        self.prev = prev
        self.budget = TOTAL_COPY_CAP
        self.roots: dict[str, Root] = {}
        self.entries: dict[str, Entry] = {}
        self.gitdirs: dict[str, GitDir] = {}
        self.pins: dict[str, tuple[int, int]] = {}  # rel -> (dev, ino) of directories to pin
        self.notes: list[str] = []
        self.pointers: dict[str, str | None] = {}   # .git file -> target gitdir rel (None: outside/unsafe)
        self.pointer_targets: set[str] = set()
        self._worktree_of: dict[str, str] = {}
        self.extra: list[tuple[str, bool, str]] = list(extra)
        self.global_hooks: list[str] = list(global_hooks)
        self.parse_configs = parse_configs
        self.home = home
        self.git_configs = git_configs
        self.n_entries = 0
        # (rel, why): what this scan could not look at; the exit check quarantines them
        self.unchecked: list[tuple[str, str]] = []
        self._capped: set[str] = set()
        # the directory index (index.py): `cached` from an earlier walk, `index` from this one
        self.cached = cached
        self.index: dict[str, Record] = {}
        self.reused = 0                             # directories not listed again
        self._listed: tuple[bool, tuple[str, ...]] | None = None
        self._racy = 0
        self._dev = -1
        # Where the kernel reported, since before the start's walk, every directory a
        # name appeared in (changes.py): those (`changed`), and only what leads to one of
        # them or to a directory listed every time (`need`), are walked; a directory
        # vouched for has its entries as at start, so its subdirectories need no stat.
        self.changed: set[str] | None = None
        self.need: set[str] = set()

    def only_changed(self, changed: set[str], start: dict[str, Record]) -> None:
        """Walk only what `changed` (complete reports of where names appeared since
        `start`, this run's index, was taken) and the directories listed every time need."""
        need: set[str] = set()
        for r in [*changed, *(r for r, v in start.items() if not v[4])]:
            while r and r not in need:
                need.add(r)
                r = _parent_of(r)
        self.changed, self.need, self.index = changed, need, dict(start)

    def _unchecked(self, rel: str, why: str) -> None:
        self.unchecked.append((rel, why))
        self.notes.append(f"{rel or '.'}: {why}")

    def _unreadable(self, pfd: int, name: str, rel: str) -> bool:
        """A directory could not be opened or listed (EACCES).  True: it was
        made readable, try again.  The snapshot leaves it; the exit check
        (revert.py) gives the agent's own directories back their u+rwx."""
        return False

    # --- roots --------------------------------------------------------------
    def record(self, rel: str, tree: bool, why: str, gitdir: str | None = None,
               depth: int = 0) -> None:
        if not rel or rel.startswith("../") or rel == "..":
            return
        for r in self._covering(rel):
            if r.tree and r.rel != rel:
                return  # already inside a protected tree
        old = self.roots.get(rel)
        if old is not None:
            if tree and not old.tree:
                old.tree = True
                self._record_entries(rel, True, depth)
            return
        st = self.fs.lstat(rel)
        if st is None:
            return
        self.roots[rel] = Root(rel, tree, why, gitdir)
        self._record_entries(rel, tree, depth)

    def _covering(self, rel: str) -> Iterator[Root]:
        parts = rel.split("/")
        for i in range(1, len(parts) + 1):
            r = self.roots.get("/".join(parts[:i]))
            if r is not None:
                yield r

    def _normalize(self) -> None:
        """A tree recorded after a root below it swallows that root (its
        entries were recorded again, owned by the tree)."""
        for rel in list(self.roots):
            parts = rel.split("/")
            for i in range(1, len(parts)):
                r = self.roots.get("/".join(parts[:i]))
                if r is not None and r.tree:
                    del self.roots[rel]
                    break

    def _record_entries(self, rel: str, tree: bool, depth: int) -> None:
        try:
            pfd, name = self.fs.parent(rel)
        except (OSError, _Unsafe):
            return
        try:
            self._entry(pfd, name, rel, rel, tree, depth, 0)
        finally:
            os.close(pfd)

    def _entry(self, pfd: int, name: str, rel: str, root: str, tree: bool,
               depth: int, level: int) -> None:
        try:
            st = os.stat(name, dir_fd=pfd, follow_symlinks=False)
        except OSError:
            return
        self.n_entries += 1
        if self.n_entries > ENTRY_CAP:
            if root not in self._capped:
                self._capped.add(root)
                self._unchecked(root, f"more than {ENTRY_CAP} entries in protected directories: "
                                f"{rel} and later ones not recorded")
            return
        k = _kind(st.st_mode)
        e = Entry(rel, k, stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid, st.st_dev, st.st_ino,
                  st.st_size, st.st_ctime_ns, st.st_nlink, root=root)
        self.entries[rel] = e
        if k == "f":
            p = self.prev.entries.get(rel) if self.prev else None
            if (p is not None and p.kind == "f" and (p.dev, p.ino, p.size, p.ctime_ns)
                    == (st.st_dev, st.st_ino, st.st_size, st.st_ctime_ns)):
                e.sha256 = p.sha256  # the kernel sets ctime on every change: unchanged
                return
            keep = self.copy and st.st_size <= min(FILE_COPY_CAP, self.budget)
            e.sha256, data = self.fs.hash_file(pfd, name, st, keep)
            if data is not None:
                e.data = data
                self.budget -= len(data)
            if self.copy and e.sha256 is None:
                self.notes.append(f"{rel}: unreadable or larger than {HASH_CAP} bytes: "
                                  "changes detected from inode, size and ctime only")
            elif self.copy and data is None:
                self.notes.append(f"{rel}: {st.st_size} bytes, no copy kept (cannot be restored)")
        elif k == "l":
            try:
                e.target = os.readlink(name, dir_fd=pfd)
            except OSError:
                e.target = None
            self._link_target(rel, depth)
        elif k == "d" and tree:
            if level > 64:
                self._unchecked(rel, "nested deeper than 64 levels, not recorded below")
                return
            try:
                try:
                    fd = os.open(name, _DIR, dir_fd=pfd)
                except PermissionError:
                    if not self._unreadable(pfd, name, rel):
                        raise
                    fd = os.open(name, _DIR, dir_fd=pfd)
            except OSError as ex:
                self._unchecked(rel, f"cannot list ({os.strerror(ex.errno)})")
                return
            try:
                for de in sorted(os.scandir(fd), key=lambda d: d.name):
                    self._entry(fd, de.name, _join(rel, de.name), root, tree, depth, level + 1)
            finally:
                os.close(fd)

    def _link_target(self, rel: str, depth: int) -> None:
        """A protected symlink whose target is in the workdir: protect the target."""
        if depth >= 8:
            return
        trel = self._resolve(rel)
        if not trel:
            return
        st = self.fs.lstat(trel)
        if st is None:
            return
        self.record(trel, stat.S_ISDIR(st.st_mode), f"target of symlink {rel}", depth=depth + 1)

    # --- walking ------------------------------------------------------------
    def walk(self) -> None:
        st0 = os.fstat(self.fs.fd)
        self._racy = time.time_ns() - RACY_NS
        self._dev = st0.st_dev
        visited = {(st0.st_dev, st0.st_ino)}
        cached = self.cached if self.cached is not None else {}
        index, roots, wfd, lstat = self.index, self.roots, self.fs.fd, os.stat
        targets, reused = self.pointer_targets, 0
        changed, need = self.changed, self.need
        # frames: [rel, fd (None: not opened, the index vouched for it), pending, stat]
        stack: list[list] = [["", os.dup(self.fs.fd), None, st0]]
        try:
            while stack:
                top = stack[-1]
                rel, fd, pending, st = top
                if pending is None:
                    pending = top[2] = self._listing(top)
                    fd = top[1]
                if not pending:
                    if fd is not None:
                        os.close(fd)
                    stack.pop()
                    continue
                name = pending.pop()
                child = f"{rel}/{name}" if rel else name
                # The index vouches for a plain directory whose stamp is unchanged:
                # its subdirectories come from the index, it is not opened.  By path
                # from the workdir: every directory above was vouched for or listed
                # just now, so each name on the way is the directory it was.
                rec = cached.get(child)
                cst = cfd = None
                if changed is not None and fd is None:
                    # below a directory vouched for: the same entries as at start
                    if child not in need:
                        continue
                    if rec is not None and rec[4] and child not in changed \
                            and child not in targets and len(stack) < MAX_DEPTH:
                        index[child] = rec
                        reused += 1
                        sub = rec[5]
                        if type(sub) is not tuple:
                            raise ValueError(f"index record of {child!r}")
                        if sub:
                            stack.append([child, None, [n for n in sub if not (
                                (r := roots.get(f"{child}/{n}")) and r.tree)], None])
                        continue
                if rec is not None and rec[4] and child not in targets \
                        and (changed is None or child not in changed):
                    try:
                        cst = lstat(child, dir_fd=wfd, follow_symlinks=False)
                    except OSError:
                        cst = None
                    if cst is not None and not (cst.st_ctime_ns == rec[2] and cst.st_ino == rec[1]
                                                and cst.st_dev == rec[0]
                                                and cst.st_mtime_ns == rec[3]
                                                and cst.st_mode & 0o170000 == stat.S_IFDIR):
                        cst = None
                if cst is None:
                    cfd = self._open_child(fd, rel, name, child)
                    if cfd is None:
                        continue
                    cst = os.fstat(cfd)
                ident = (cst.st_dev, cst.st_ino)
                if ident in visited:
                    if cfd is not None:
                        os.close(cfd)
                    continue
                visited.add(ident)
                if len(stack) >= MAX_DEPTH:
                    if cfd is not None:
                        os.close(cfd)
                    self._unchecked(child, f"nested deeper than {MAX_DEPTH} directories, "
                                    "not checked")
                    continue
                if cfd is None:
                    index[child] = rec
                    reused += 1
                    sub = rec[5]
                    if type(sub) is not tuple:
                        raise ValueError(f"index record of {child!r}")
                    # a directory without subdirectories needs no frame, nor one where
                    # nothing below changed or is listed every time (changed, need)
                    if sub and (changed is None or child in need):
                        stack.append([child, None, [n for n in sub if not (
                            (r := roots.get(f"{child}/{n}")) and r.tree)], cst])
                else:
                    stack.append([child, cfd, None, cst])
        finally:
            self.reused = reused
            for item in stack:
                if item[1] is not None:
                    os.close(item[1])
        # .git files pointing into the workdir somewhere the walk did not reach
        for target in list(self.pointers.values()):
            if target is not None and target not in self.gitdirs:
                self._visit_gitdir_at(target)
        self._worktrees()
        if self.parse_configs:
            self._config_references()
        for rel, tree, why in self.extra:
            self.record(rel, tree, why)
        for hp in self.global_hooks:
            for g in list(self.gitdirs.values()):
                if g.worktree is not None:
                    t = os.path.normpath(_join(g.worktree, hp))
                    if t != ".." and not t.startswith("../") and t != ".":
                        self.record(t, True, "core.hooksPath in the global git config")
        self._normalize()

    def _open_child(self, fd: int | None, rel: str, name: str, child: str) -> int | None:
        """A descriptor of the subdirectory `name` of rel (fd: rel's, or None
        when rel was not opened); None if it is not a directory to enter."""
        pfd = fd
        try:
            if pfd is None:
                try:
                    pfd, _ = self.fs.parent(child)
                except _Unsafe:
                    return None
            try:
                try:
                    return os.open(name, _DIR | os.O_NONBLOCK, dir_fd=pfd)
                except PermissionError:
                    if not self._unreadable(pfd, name, child):
                        raise
                    return os.open(name, _DIR | os.O_NONBLOCK, dir_fd=pfd)
            finally:
                if fd is None:
                    os.close(pfd)
        except OSError as e:
            if e.errno not in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
                self._unchecked(child, f"not checked ({os.strerror(e.errno)})")
            return None

    def _listing(self, top: list) -> list[str]:
        """The subdirectories to walk of the directory of frame `top` (opened),
        listed (_visit); the index of this walk records what the listing showed."""
        rel, fd, _, st = top
        self._listed = None
        pending = self._visit(rel, fd)
        if self._listed is not None:
            plain, names = self._listed
            # a mount inside the workdir may be any filesystem: listed every time
            plain = plain and st.st_dev == self._dev
            ctime = st.st_ctime_ns if st.st_ctime_ns < self._racy else -1
            self.index[rel] = (st.st_dev, st.st_ino, ctime, st.st_mtime_ns, plain, names)
        return pending

    def _visit_gitdir_at(self, rel: str) -> None:
        try:
            pfd, name = self.fs.parent(rel)
        except (OSError, _Unsafe):
            return
        try:
            fd = os.open(name, _DIR, dir_fd=pfd)
        except OSError:
            os.close(pfd)
            return
        try:
            self._add_gitdir(rel, fd)
        finally:
            os.close(fd)
            os.close(pfd)

    def _visit(self, rel: str, fd: int) -> list[str]:
        try:
            ents = list(os.scandir(fd))
        except OSError as e:
            self._unchecked(rel, f"cannot list ({os.strerror(e.errno)}), not checked")
            return []
        names = {e.name for e in ents}
        # plain: nothing here the walk acts on, so an unchanged listing needs no new look
        plain = True
        if ("HEAD" in names and (("objects" in names and "refs" in names) or "commondir" in names)) \
                or rel.endswith("/.git") or rel == ".git" or rel in self.pointer_targets:
            plain = False
            self._add_gitdir(rel, fd)
        subdirs = []
        alldirs = []
        # once per entry of every directory (a tar's 50,000): nothing looked up or
        # joined for a name no pattern starts with
        first, wild, roots = self.first, self.wild_first, self.roots
        for e in ents:
            name = e.name
            try:
                isdir = e.is_dir(follow_symlinks=False)
            except OSError:
                isdir = False
                plain = False
            if name == ".git":
                plain = False
                if not isdir:
                    self._pointer(_join(rel, name), rel)
            if name in first:
                for p in first[name]:
                    plain = False
                    if not (p.anchored and rel):
                        self._match(rel, p)
            for p in wild:
                if fnmatch.fnmatchcase(name, p.comps[0]):
                    plain = False
                    if not (p.anchored and rel):
                        self._match(rel, p, name)
            if not isdir:
                continue
            alldirs.append(name)
            r = roots.get(_join(rel, name)) if roots else None
            if r is not None and r.tree:
                continue
            subdirs.append(name)
        subdirs.sort(reverse=True)
        alldirs.sort(reverse=True)
        self._listed = (plain, tuple(alldirs))
        return subdirs

    def _expand(self, base: str, comps: Sequence[str], first: str | None = None) -> list[str]:
        """Existing paths matching comps below base; intermediate components
        must be real directories (lstat), never symlinks."""
        cur = [base]
        for i, c in enumerate(comps):
            nxt = []
            for b in cur:
                if i == 0 and first is not None:
                    names = [first]
                elif any(ch in c for ch in "*?["):
                    try:
                        pfd, nm = (self.fs.parent(b) if b else (os.dup(self.fs.fd), None))
                    except (OSError, _Unsafe):
                        continue
                    try:
                        if nm is None:
                            listing = os.listdir(pfd)
                        else:
                            dfd = os.open(nm, _DIR, dir_fd=pfd)
                            try:
                                listing = os.listdir(dfd)
                            finally:
                                os.close(dfd)
                    except OSError:
                        listing = []
                    finally:
                        os.close(pfd)
                    names = [n for n in listing if fnmatch.fnmatchcase(n, c)]
                else:
                    names = [c]
                for n in names:
                    cand = _join(b, n)
                    st = self.fs.lstat(cand)
                    if st is None:
                        continue
                    if i < len(comps) - 1 and not stat.S_ISDIR(st.st_mode):
                        continue
                    nxt.append(cand)
            cur = nxt
        return cur

    def _match(self, rel: str, p: Pattern, first: str | None = None) -> None:
        for m in self._expand(rel, p.comps, first):
            self.record(m, p.tree, p.text)
            self._pin_between(rel, m)

    def _pin_between(self, base: str, rel: str) -> None:
        """Directories inside a pattern match (".claude" of ".claude/commands")."""
        parts = rel.split("/")
        nbase = len(base.split("/")) if base else 0
        for i in range(nbase + 1, len(parts)):
            d = "/".join(parts[:i])
            if d not in self.pins:
                st = self.fs.lstat(d)
                if st is not None and stat.S_ISDIR(st.st_mode):
                    self.pins[d] = (st.st_dev, st.st_ino)

    def _add_gitdir(self, rel: str, fd: int) -> None:
        if rel in self.gitdirs:
            return
        st = os.fstat(fd)
        self.gitdirs[rel] = GitDir(rel, st.st_dev, st.st_ino)
        if rel:
            self.pins[rel] = (st.st_dev, st.st_ino)
        for p in self.git_pats:
            for m in self._expand(rel, p.comps):
                self.record(m, p.tree, p.text, gitdir=rel)
                self._pin_between(rel, m)

    def _pointer(self, rel: str, wt: str) -> None:
        """A `.git` file (or symlink): always protected; follow it when it
        points to a git directory inside the workdir."""
        self.record(rel, False, "gitdir pointer (.git file)")
        target = None
        st = self.fs.lstat(rel)
        if st is not None and stat.S_ISREG(st.st_mode):
            try:
                pfd, name = self.fs.parent(rel)
                try:
                    data = self.fs.read_file(pfd, name, st, 4096)
                finally:
                    os.close(pfd)
            except (OSError, _Unsafe):
                data = None
            if data and data.startswith(b"gitdir:"):
                t = data[7:].strip().split(b"\n")[0].decode("utf-8", "surrogateescape")
                target = self._inside(t, wt)
        elif st is not None and stat.S_ISLNK(st.st_mode):
            target = self._resolve(rel)
        if target is not None:
            tst = self.fs.lstat(target)
            if tst is None or not stat.S_ISDIR(tst.st_mode):
                target = None
        self.pointers[rel] = target
        if target is not None:
            self.pointer_targets.add(target)
            self._worktree_of.setdefault(target, wt)

    def _resolve(self, rel: str) -> str | None:
        """Workdir-relative real path of the existing `rel`, resolved
        component by component (by descriptor inside the workdir, never
        following a link implicitly), following at most MAX_LINKS symlinks as
        the kernel does: os.path.realpath recurses once per link, and a long
        chain raised RecursionError.  None if it leads out of the workdir or to
        nothing; past the limits also noted as unchecked."""
        wcomps = [c for c in self.workdir.split("/") if c]
        todo = list(reversed(rel.split("/")))
        fds: list[int] = [os.dup(self.fs.fd)]     # inside: fds[i] is the directory of names[:i]
        names: list[str] = []
        outside: list[str] | None = None          # resolved absolute components, when outside
        links = 0
        try:
            while todo:
                c = todo.pop()
                if c in ("", "."):
                    continue
                if outside is None and c == ".." and not names:
                    outside = wcomps[:-1]          # the workdir is a real path: its parent is
                    continue
                if c == "..":
                    if outside is not None:
                        if outside:
                            outside.pop()
                    else:
                        names.pop()
                        os.close(fds.pop())
                    continue
                try:
                    if outside is None:
                        st = os.stat(c, dir_fd=fds[-1], follow_symlinks=False)
                    else:
                        st = os.lstat("/" + "/".join(outside + [c]))
                except OSError:
                    return None
                if stat.S_ISLNK(st.st_mode):
                    links += 1
                    if links > MAX_LINKS:
                        self._unchecked(rel, f"symlink chain longer than {MAX_LINKS} links, "
                                        "target not checked")
                        return None
                    try:
                        t = (os.readlink(c, dir_fd=fds[-1]) if outside is None
                             else os.readlink("/" + "/".join(outside + [c])))
                    except OSError:
                        return None
                    if t.startswith("/"):
                        while len(fds) > 1:
                            os.close(fds.pop())
                        names.clear()
                        outside = [] if wcomps else None
                    todo.extend(reversed(t.split("/")))
                    continue
                if todo and not stat.S_ISDIR(st.st_mode):
                    return None                    # a file in the middle of the path
                if outside is not None:
                    outside.append(c)
                    if outside == wcomps:          # back in the workdir
                        outside = None
                    elif len(outside) > MAX_DEPTH:
                        return None
                    continue
                if not todo:
                    names.append(c)
                    break
                if len(fds) > MAX_DEPTH:
                    self._unchecked(rel, f"symlink target nested deeper than {MAX_DEPTH} "
                                    "directories, not checked")
                    return None
                try:
                    fds.append(os.open(c, _PATHDIR, dir_fd=fds[-1]))
                except OSError:
                    return None
                names.append(c)
            if outside is not None:
                return None
            return "/".join(names)
        finally:
            for fd in fds:
                os.close(fd)

    def _inside(self, path: str, base: str) -> str | None:
        """Workdir-relative form of path (relative to base) if it stays inside."""
        full = path if os.path.isabs(path) else os.path.join(self.workdir, base, path)
        full = os.path.normpath(full)
        w = self.workdir.rstrip("/")
        if full == w:
            return ""
        if not full.startswith(w + "/"):
            return None
        return full[len(w) + 1:]

    def _worktrees(self) -> None:
        for rel, g in self.gitdirs.items():
            if rel == ".git" or rel.endswith("/.git"):
                g.worktree = _parent_of(rel)
            elif rel in self._worktree_of:
                g.worktree = self._worktree_of[rel]

    # --- references from trusted git configuration --------------------------
    def _read_rel(self, rel: str, cap: int = 1 << 20) -> bytes | None:
        st = self.fs.lstat(rel)
        if st is None or not stat.S_ISREG(st.st_mode):
            return None
        try:
            pfd, name = self.fs.parent(rel)
        except (OSError, _Unsafe):
            return None
        try:
            return self.fs.read_file(pfd, name, st, cap)
        finally:
            os.close(pfd)

    def _expand_home(self, v: str) -> str | None:
        """git's `~/` and `~user/` expansion (interpolate_path); None if it cannot be
        expanded (the user's home unknown, no such account)."""
        if not v.startswith("~"):
            return v
        user, _, rest = v[1:].partition("/")
        if not user:
            home = self.home if self.home is not None else os.path.expanduser("~")
        else:
            try:
                import pwd
                home = pwd.getpwnam(user).pw_dir
            except (KeyError, ImportError):
                return None
        return os.path.join(home, rest) if rest else home

    def _path_ref(self, v: str, base: str) -> str | None:
        """Workdir-relative form of a path value (relative to base, a workdir-relative
        directory or an absolute one), None if outside or not expandable."""
        full = self._expand_home(v)
        if full is None:
            return None
        if not os.path.isabs(full):
            full = os.path.join(base if os.path.isabs(base) else os.path.join(self.workdir, base),
                                full)
        return self._inside(full, "")

    @staticmethod
    def _command_paths(v: str) -> list[str]:
        """Every word of a command value that names a file by path (has a `/` or
        starts with `~`): git runs these with the shell, so the program may be any
        word (`sh tools/x`, `env A=1 ./bin/p`), not only the first."""
        out = []
        for w in v.lstrip().lstrip("!").replace(";", " ").replace("|", " ").replace("&", " ") \
                .split():
            w = w.strip("'\"")
            if "=" in w and not w.startswith(("/", ".", "~")):
                w = w.split("=", 1)[1]
            if "/" in w or w.startswith("~"):
                out.append(w)
        return out

    def _config_items(self, items: list, where: str, path_base: str, cmd_base: str | None,
                      found: list[tuple[str, bool, str]], out_files: list[str],
                      global_cfg: bool) -> None:
        """References of one config file's items.  path_base: what relative include
        paths are relative to (the config file's directory); cmd_base: what relative
        hooksPath and programs are relative to (the worktree), None for a global
        config, where a relative one applies below every worktree."""
        for it in items:
            name = it.name.lower()
            v = it.value
            if v is None or v == "":
                continue
            if name == "include.path" or (it.section == "includeif" and it.key == "path"):
                full = self._expand_home(v)
                if full is None:
                    continue
                if not os.path.isabs(full):
                    pb = path_base if os.path.isabs(path_base) else \
                        os.path.join(self.workdir, path_base)
                    full = os.path.join(pb, full)
                t = self._inside(full, "")
                if t:
                    found.append((t, False, f"{it.name} in {where}"))
                elif t is None:
                    out_files.append(os.path.normpath(full))   # outside: read it as well
            elif name == "core.hookspath":
                if cmd_base is None and not (v.startswith("~") or os.path.isabs(v)):
                    if v not in self.global_hooks:
                        self.global_hooks.append(v)
                    continue
                t = self._path_ref(v, cmd_base or "")
                if t:
                    found.append((t, True, f"core.hooksPath in {where}"))
            elif any(fnmatch.fnmatchcase(name, k) for k in _COMMAND_KEYS) or \
                    (it.section == "alias" and v.lstrip().startswith("!")):
                if name == "core.fsmonitor" and v.strip().lower() in _BOOL_WORDS:
                    continue
                for w in self._command_paths(v):
                    if cmd_base is None and not (w.startswith("~") or os.path.isabs(w)):
                        # relative program in a global config: below every worktree
                        if global_cfg and os.path.normpath(w) not in self.global_hooks:
                            self.global_hooks.append(os.path.normpath(w))
                        continue
                    t = self._path_ref(w, cmd_base or "")
                    if t:
                        found.append((t, False, f"{it.name} in {where}"))

    def _config_references(self) -> None:
        found: list[tuple[str, bool, str]] = []
        outside: list[str] = []
        for rel, g in list(self.gitdirs.items()):
            for cfg in ("config", "config.worktree"):
                crel = _join(rel, cfg)
                data = self._read_rel(crel)
                if data is None:
                    continue
                items, _ = parse_git_config(data)
                for it in items:  # core.worktree first: relative paths below depend on it
                    if it.name == "core.worktree" and it.value and g.worktree is None:
                        g.worktree = self._inside(it.value, rel)
                base = g.worktree if g.worktree is not None else rel
                self._config_items(items, crel, rel, base, found, outside, False)
        # Global and system configuration (and what they include, outside the workdir,
        # up to git's own include depth): every file they name in the workdir is a
        # protected path; a relative core.hooksPath or program applies to every worktree.
        todo = [(p, 0) for p in self._global_config_files()]
        seen: set[str] = set()
        while todo:
            path, depth = todo.pop(0)
            if path in seen or depth > 10 or len(seen) > 100:
                continue
            seen.add(path)
            data = _read_config_file(path)
            if data is None:
                continue
            items, _ = parse_git_config(data)
            more: list[str] = []
            self._config_items(items, path, os.path.dirname(path), None, found, more, True)
            todo.extend((m, depth + 1) for m in more)
        # files included from the workdir's configs may live outside it: read those too
        for path in outside:
            data = _read_config_file(path)
            if data is None:
                continue
            items, _ = parse_git_config(data)
            self._config_items(items, path, os.path.dirname(path), None, found, [], False)
        # a config in the workdir named by another one: its own references count too
        done: set[str] = set()
        i = 0
        while i < len(found) and i < 1000:
            t, tree, why = found[i]
            i += 1
            if tree or t in done or not why.lower().startswith(("include.path", "includeif")):
                continue
            done.add(t)
            data = self._read_rel(t)
            if data is None:
                continue
            items, _ = parse_git_config(data)
            self._config_items(items, t, _parent_of(t), "", found, [], False)
        for t in found:
            if t not in self.extra:
                self.extra.append(t)

    def _global_config_files(self) -> list[str]:
        if self.git_configs is not None:
            return list(self.git_configs)
        out = ["/etc/gitconfig"]
        if self.home:
            out.append(os.path.join(self.home, ".gitconfig"))
            out.append(os.path.join(self.home, ".config", "git", "config"))
        xdg = os.environ.get("XDG_CONFIG_HOME")
        if xdg and os.path.isabs(xdg):
            out.append(os.path.join(xdg, "git", "config"))
        return list(dict.fromkeys(out))


def _read_config_file(path: str, cap: int = 1 << 20) -> bytes | None:
    """A config file outside the workdir (the user's own, trusted): regular files only,
    never blocking on a FIFO or device a config names."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, cap)
    except OSError:
        return None
    finally:
        os.close(fd)


# --- snapshot ------------------------------------------------------------------------------

def _run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + f"-{os.getpid()}"


def snapshot(workdir: str, patterns: Iterable[str] | Sequence[Pattern] | None = None, *,
             home: str | None = None, git_configs: Sequence[str] | None = None,
             run_id: str | None = None, guarded: bool = False,
             index_dir: str | None = None, changes: Any = None) -> Snapshot:
    """Record every protected path of `workdir` and plan the mount namespace.

    Runs in the supervisor before the fork (single-threaded).  `patterns`:
    pattern strings (None: DEFAULT_PATTERNS) or compiled Patterns.  `home`:
    the home directory of the person who will use the workdir afterwards
    (its ~/.gitconfig may set a relative core.hooksPath); `git_configs`
    replaces the list of global config files read (/etc/gitconfig,
    ~/.gitconfig, ~/.config/git/config).  `guarded`: the name guard will
    judge the run's calls (seccomp user notification works), so each
    repository's `config` gets no read-only bind: git's rename of
    config.lock onto it is checked by the guard instead (`checked_configs`).
    `index_dir`: where the directory index is kept between runs (index.py;
    None: neither read nor kept); verify_and_revert stores the exit's there.
    `changes`: a kept changes.Changes group to serve this run, where it can
    (an earlier run's `Snapshot.changes`; else a new one is made).
    Raises OSError if the workdir cannot be opened, ValueError for a bad
    pattern.
    """
    t0 = time.monotonic()
    workdir = os.path.realpath(workdir)
    if patterns is None:
        pats = compile_patterns(None)
    else:
        plist = list(patterns)
        pats = tuple(plist) if plist and all(isinstance(p, Pattern) for p in plist) \
            else compile_patterns(plist)
    with _index.no_gc():
        return _snapshot(workdir, pats, home, git_configs, run_id, guarded, index_dir, t0,
                         changes)


def _has_subdirectory(fd: int) -> bool:
    """The directory fd holds a directory (or cannot be listed: then assume so)."""
    try:
        with os.scandir(fd) as it:
            return any(e.is_dir(follow_symlinks=False) for e in it)
    except OSError:
        return True


def _snapshot(workdir: str, pats: tuple[Pattern, ...], home: str | None,
              git_configs: Sequence[str] | None, run_id: str | None, guarded: bool,
              index_dir: str | None, t0: float, kept: Any) -> Snapshot:
    from . import gitdata  # it reads what the walk found; it imports this module
    sc = _Scan(workdir, pats, copy=True, home=home, git_configs=git_configs)
    key, note = None, ""
    changes, changes_note = None, "no directory index"
    try:
        why = _index.unsupported(sc.fs.fd)
        if why is not None:
            index_dir, note = None, why
        if index_dir is not None:
            key = _index.cache_key(workdir, sc.fs.fd, pats)
            sc.cached = _index.load(index_dir, key)
            note = "" if sc.cached is not None else "no stored index for this workdir"
            if sc.cached is not None and len(sc.cached) < _changes.WORTH_DIRS:
                changes_note = (f"{len(sc.cached)} directories at the last run: their "
                                "stamps cost less than the reports")
            elif sc.cached is None and not _has_subdirectory(sc.fs.fd):
                # a fresh checkout's or a CI job's workdir: one stamp at exit, where the
                # reports would be parsed name by name (a clone's thousands) for nothing
                changes_note = ("no directory in the workdir at the start: one stamp costs "
                                "less than the reports")
            elif kept is not None and kept.restart(sc.fs.fd):
                changes, changes_note = kept, ""
            else:
                # before the walk: a name made while it runs is reported as well
                changes, changes_note = _changes.open_changes(sc.fs.fd)
        try:
            sc.walk()
        except (TypeError, ValueError, IndexError, AttributeError) as e:
            if sc.cached is None:
                raise
            # a stored index not as written: the walk of every directory, as without one
            old, sc = sc, _Scan(workdir, pats, copy=True, home=home, git_configs=git_configs)
            old.fs.close()
            note = f"the stored index was not usable ({type(e).__name__})"
            sc.walk()
        modes = gitdata.dir_modes(sc.fs, sc.gitdirs)
        state = gitdata.record(sc)
    finally:
        sc.fs.close()
    if why is not None:
        sc.index = {}   # nor for this run's exit check
        changes, changes_note = None, why
    checked = _checked_configs(sc) if guarded else []
    plan, guard_only = _mount_plan(workdir, sc, set(checked))
    snap = Snapshot(workdir, pats, run_id or _run_id(), sc.roots, sc.entries, sc.gitdirs,
                    tuple(sorted(sc.pins)), tuple(sc.extra), tuple(sc.global_hooks), plan,
                    tuple(guard_only), tuple(sc.notes), time.time(), time.monotonic() - t0,
                    modes, state, tuple(checked), sc.index, index_dir, key, sc.reused, note,
                    sc.cached is not None and sc.index == sc.cached)
    snap.changes, snap.changes_note, snap.unchecked = changes, changes_note, tuple(sc.unchecked)
    return snap


def _checked_configs(sc: _Scan) -> list[str]:
    """Repository configs whose read-only bind the name guard replaces: git
    changes them by renaming config.lock onto them (EBUSY onto a mount point),
    for `git config`, `remote add`, `push -u`, `checkout --track`.  Only a
    plain file of its own (one link, its content copied, so the check knows
    what the person had there) that no protected tree covers; the rest keeps
    its bind."""
    out = []
    for rel, r in sc.roots.items():
        e = sc.entries.get(rel)
        if (r.gitdir is None or rel != _join(r.gitdir, "config") or e is None or e.kind != "f"
                or e.nlink != 1 or e.data is None or e.root != rel):
            continue
        if any(t.tree and t.rel != rel for t in sc._covering(rel)):
            continue
        out.append(rel)
    return sorted(out)


def _mount_plan(workdir: str, sc: _Scan, checked: Collection[str] = ()
                ) -> tuple[namespaces.Plan, list[tuple[str, str]]]:
    ro: dict[str, Entry] = {}
    guard_only: list[tuple[str, str]] = []
    for rel in sc.roots:
        e = sc.entries.get(rel)
        if e is None or rel in checked:
            continue
        if e.kind == "l":
            guard_only.append((rel, "is a symlink (a mount cannot cover the link itself)"))
            continue
        if e.kind == "o":
            guard_only.append((rel, "is not a file, directory or symlink"))
            continue
        ro[rel] = e
    ro_dirs = [k for k, e in ro.items() if e.kind == "d"]

    def covered(rel: str) -> bool:
        return any(rel != d and rel_under(rel, d) for d in ro_dirs)

    mounts = []
    for rel in sorted(set(sc.pins) | set(ro), key=lambda k: (k.count("/"), k)):
        if not rel or covered(rel):
            continue
        comps = tuple(rel.split("/"))
        if rel in ro:
            e = ro[rel]
            mounts.append(namespaces.Mount(comps, True, e.dev, e.ino, e.kind == "d"))
        else:
            dev, ino = sc.pins[rel]
            mounts.append(namespaces.Mount(comps, False, dev, ino, True))
    planned = {"/".join(m.rel) for m in mounts if m.readonly}
    hard: dict[str, str] = {}
    for e in sc.entries.values():
        if e.kind == "f" and e.nlink > 1:
            hard.setdefault(e.root, e.rel)
    for rel, r in sc.roots.items():
        if rel in planned or (rel in ro and covered(rel)):
            r.mounted = True
            r.trusted = rel not in hard
            if rel in hard:
                guard_only.append((rel, f"hard-linked elsewhere ({hard[rel]}): writable through "
                                        "the other link"))
    paths, complete = namespaces.reachable_paths(workdir)
    bases = []
    for p in paths:
        try:
            st = os.stat(p)
        except OSError:
            continue
        bases.append(namespaces.Base(p, st.st_dev, st.st_ino))
    return namespaces.Plan(tuple(bases), tuple(mounts), complete), guard_only
