"""Protected names that arrived with content: held for the person, not refused.

A clone, checkout, `git restore`, `git stash pop`, `tar x` or `unzip` of a
tree that carries `.vscode/`, `.idea/`, `.envrc` or `.mcp.json` creates files
that run later, outside the sandbox. Refusing them broke the operation
(`fatal: cannot create directory at '.vscode'`, an empty working tree, exit
128); writing them lets the agent plant code for the person's editor, direnv
or agent. So the broker (mediation/files.py) makes them in the run's held area
instead (`TMPDIR/held/<workdir path>`, outside the workdir), the operation
succeeds, and the name never exists in the workdir while the agent runs.

At exit the supervisor copies what is held there into the run's persistent
state (`held_dir`: /var/lib/confine/held/RUN as root, else
$XDG_STATE_HOME/confine/held/RUN), a directory of the invoking user's that the
agent cannot write, and lists it; `confine held` (cli/held.py) shows, applies
or discards it.

Threat: the held area is the agent's (the broker runs in its Landlock domain,
so the agent can write there too): anything in it may be a symlink to the
person's files, a FIFO, a million files, a 100 GiB file, a name with newlines
or escape sequences, a hard link. So the copy goes by descriptor, one
component at a time, never follows a symlink (links are listed, not copied),
copies regular files and directories only, within byte, entry and depth caps;
only paths the guard calls protected are taken (the rest is the agent's own
scratch and is left behind); every name is escaped when printed. `apply`
writes only what the person was shown (`show` records the hashes), only where
nothing exists, never through a symlink.
"""
from __future__ import annotations

import errno
import json
import os
import re
import stat
import struct
import time
from collections.abc import Callable, Iterator, Sequence
from hashlib import new as _new_hash
from hashlib import sha256
from typing import TYPE_CHECKING, Any

from ..errors import printable
from ..paths import state_dir
from ..record import dataclass, field

if TYPE_CHECKING:
    from .guard import Guard

HELD_NAME = "held"              # the held area's name in the run's TMPDIR
COPY_CAP = 256 << 20            # bytes kept from a run's held area ...
ENTRY_CAP = 10_000              # ... entries ...
DEPTH_CAP = 64                  # ... and directory levels below a held path
WALK_DEPTH = 256                # workdir levels looked at above a held path (a descriptor each)
LIST_LIMIT = 50                 # held paths named at exit (the rest: `confine held list`)
MANIFEST = "manifest.json"
SHOWN = "shown.json"
FILES = "files"
_RUN_ID = re.compile(r"\d{8}-\d{6}-\d+(\.[A-Za-z0-9_-]+)?")
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


# ------------------------------------------------------------------ the index

_EOIE_IEOT = (b"EOIE", b"IEOT")     # optional offset tables: stale once entries move


class _Index:
    """A parsed index: entries as (fixed head, flags, extended flags, name,
    version 4 compressed name), the extensions kept, the trailer's hash."""

    def __init__(self, data: bytes):
        self.ok = False
        if len(data) < 12 + 20 or data[:4] != b"DIRC":
            return
        self.hashlen, self.zero = 0, False
        for n, algo in ((20, "sha1"), (32, "sha256")):
            if len(data) > 12 + n and _new_hash(algo, data[:-n]).digest() == data[-n:]:
                self.hashlen = n
                break
        if not self.hashlen:
            if data[-20:] != b"\0" * 20:
                return
            self.hashlen, self.zero = 20, True   # index.skipHash: only SHA-1 is guessed
        self.ver, count = struct.unpack(">II", data[4:12])
        if self.ver not in (2, 3, 4):
            return
        fixed = 40 + self.hashlen
        end = len(data) - self.hashlen
        pos, prev = 12, b""
        self.entries: list[list[Any]] = []
        self.exts: list[bytes] = []
        try:
            for _ in range(count):
                if pos + fixed + 2 > end:
                    return
                head = data[pos:pos + fixed]
                flags = struct.unpack(">H", data[pos + fixed:pos + fixed + 2])[0]
                npos = pos + fixed + 2
                ext = 0
                if flags & 0x4000:
                    if self.ver < 3:
                        return
                    ext = struct.unpack(">H", data[npos:npos + 2])[0]
                    npos += 2
                if self.ver == 4:
                    shift = npos
                    c = data[shift]
                    strip = c & 0x7F
                    while c & 0x80:
                        shift += 1
                        c = data[shift]
                        strip = ((strip + 1) << 7) | (c & 0x7F)
                    shift += 1
                    nul = data.find(b"\0", shift, end)
                    if nul < 0 or strip > len(prev):
                        return
                    name = prev[:len(prev) - strip] + data[shift:nul]
                    tail = data[npos:nul + 1]
                    pos = nul + 1
                else:
                    nlen = flags & 0xFFF
                    nul = data.find(b"\0", npos, end) if nlen == 0xFFF else npos + nlen
                    if nul < 0 or nul > end:
                        return
                    name, tail = data[npos:nul], b""
                    pos += ((npos - pos) + (nul - npos) + 8) & ~7
                prev = name
                self.entries.append([head, flags, ext, name, tail])
            while pos + 8 <= end:
                sig = data[pos:pos + 4]
                size = struct.unpack(">I", data[pos + 4:pos + 8])[0]
                if sig == b"link" or pos + 8 + size > end:
                    return        # a split index: its entries live in another file
                if sig not in _EOIE_IEOT:
                    self.exts.append(data[pos:pos + 8 + size])
                pos += 8 + size
        except (IndexError, struct.error):
            return
        self.ok = pos == end

    def encode(self) -> bytes:
        ver = self.ver
        if ver == 2 and any(e[2] for e in self.entries):
            ver = 3
        out = []
        for head, flags, ext, name, tail in self.entries:
            flags = (flags | 0x4000) if ext else (flags & ~0x4000)
            entry = head + struct.pack(">H", flags) + (struct.pack(">H", ext) if ext else b"")
            if ver == 4:
                entry += tail
            else:
                entry += name
                entry += b"\0" * (8 - len(entry) % 8)
            out.append(entry)
        body = (b"DIRC" + struct.pack(">II", ver, len(self.entries)) + b"".join(out)
                + b"".join(self.exts))
        trailer = b"\0" * self.hashlen if self.zero else _new_hash(
            "sha1" if self.hashlen == 20 else "sha256", body).digest()
        return body + trailer


def mark_skip_worktree(data: bytes, held: Callable[[bytes], bool], on: bool = True) -> bytes | None:
    """The index `data` with the skip-worktree bit set (on=False: cleared) on
    the entries whose path `held` names; the same bytes if none changes; None
    when it cannot be done safely (an unknown version, a split index, a
    checksum that does not match). A version 2 index becomes version 3
    (extended flags need it); the optional EOIE and IEOT extensions, which
    hold offsets, are dropped; the trailer is recomputed with the hash the
    file used (SHA-1 or SHA-256; zeros stay zeros)."""
    idx = _Index(data)
    if not idx.ok:
        return None
    changed = False
    for e in idx.entries:
        if bool(e[2] & 0x4000) != on and held(e[3]):
            e[2] = (e[2] | 0x4000) if on else (e[2] & ~0x4000)
            changed = True
    return idx.encode() if changed else data


def skip_worktree_paths(data: bytes) -> set[bytes]:
    """Paths of an index that carry the skip-worktree bit."""
    idx = _Index(data)
    return {e[3] for e in idx.entries if e[2] & 0x4000} if idx.ok else set()


# ------------------------------------------------------------------ the held area

# The held area mirrors the first protected root (the workdir's) at its top; the Nth
# other root (guard.Roots) below OTHER_ROOT + N. The name begins with the guard's
# INTERNAL prefix, which the agent cannot create, and the first root's collection
# skips it: each root's names stay apart and are collected with that root's guard.
OTHER_ROOT = ".confine-vet-root-"


def held_key(comps: tuple[str, ...]) -> tuple[str, ...]:
    """The components of the held area above the mirror of a broker position's root."""
    return (OTHER_ROOT + comps[0][1:],) if comps and comps[0].startswith("/") else ()


def prepare(tmp: str, roots: Sequence[str], uid: int, gid: int) -> tuple[str, int] | None:
    """Make the run's held area in its TMPDIR before the fork: (path, O_PATH
    descriptor the supervisor keeps), or None where none can be made outside
    every protected root (then protected names are refused, as without holding)."""
    path = os.path.join(tmp, HELD_NAME)
    real_tmp = os.path.realpath(tmp).rstrip("/")
    for root in roots:
        wd = os.path.realpath(root).rstrip("/")
        if real_tmp == wd or real_tmp.startswith(wd + "/") or wd.startswith(real_tmp + "/"):
            return None
    try:
        os.mkdir(path, 0o700)
        fd = os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if os.geteuid() == 0:
            os.chown(f"/proc/self/fd/{fd}", uid, gid)
    except OSError:
        os.close(fd)
        return None
    return path, fd


def open_root(hfd: int, index: int) -> int | None:
    """The part of the held area (descriptor hfd) that holds the names of protected
    root `index` (held_key), None if nothing was held there. Never through a
    symlink: the agent can write the held area."""
    if index == 0:
        return os.dup(hfd)
    try:
        return os.open(OTHER_ROOT + str(index),
                       os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=hfd)
    except FileNotFoundError:
        return None


@dataclass
class Item:
    path: str           # workdir-relative (surrogateescape for bytes that are not UTF-8)
    root: str           # the held path it belongs to (itself for a held file or directory)
    kind: str           # file | dir
    size: int = 0
    sha256: str = ""
    mode: int = 0o644


@dataclass
class Held:
    run_id: str
    workdir: str
    dir: str | None                                   # the run's held state, None if nothing
    items: list[Item] = field(default_factory=list)
    left: list[str] = field(default_factory=list)     # what was not kept, and why

    @property
    def roots(self) -> list[Item]:
        return [i for i in self.items if i.path == i.root]


def held_base(*, euid: int | None = None, home: str | None = None) -> str:
    """/var/lib/confine/held as root, else $XDG_STATE_HOME (~/.local/state)/confine/held."""
    return state_dir("held", euid=euid, home=home)


def _open_own_dir(path: str, create: bool) -> int:
    """A directory of ours (made 0700 if asked), by descriptor; refused if
    another account owns it or a symlink is at its place."""
    if create:
        os.makedirs(path, mode=0o700, exist_ok=True)
    fd = os.open(path, _DIR)
    st = os.fstat(fd)
    if st.st_uid != os.geteuid():
        os.close(fd)
        raise OSError(errno.EPERM, f"{path} is not ours")
    return fd


class _Copier:
    def __init__(self) -> None:
        self.bytes = 0
        self.entries = 0
        self.left: list[str] = []

    def note(self, rel: str, why: str) -> None:
        if len(self.left) < ENTRY_CAP:
            self.left.append(f"{rel}: {why}")

    def file(self, sfd: int, name: str, dfd: int, rel: str) -> tuple[int, str, int] | None:
        """Copy the regular file name (below sfd) to dfd: (size, sha256, mode)."""
        try:
            fd = os.open(name, _FILE, dir_fd=sfd)
        except OSError as e:
            self.note(rel, f"not read ({e.strerror})")
            return None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                self.note(rel, "not a regular file")
                return None
            if self.bytes + st.st_size > COPY_CAP:
                self.note(rel, f"over the {COPY_CAP >> 20} MiB the held area keeps")
                return None
            out = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                          | os.O_CLOEXEC, 0o600, dir_fd=dfd)
            h = sha256()
            n = 0
            try:
                while True:
                    b = os.read(fd, min(1 << 20, COPY_CAP - self.bytes + 1))
                    if not b:
                        break
                    n += len(b)
                    self.bytes += len(b)
                    if self.bytes > COPY_CAP:
                        break
                    h.update(b)
                    view = memoryview(b)
                    while view:
                        view = view[os.write(out, view):]
            finally:
                os.close(out)
            if self.bytes > COPY_CAP:
                os.unlink(name, dir_fd=dfd)
                self.note(rel, f"over the {COPY_CAP >> 20} MiB the held area keeps")
                return None
            mode = 0o755 if st.st_mode & 0o100 else 0o644
            return n, h.hexdigest(), mode
        finally:
            os.close(fd)


def _entries(fd: int) -> list[str]:
    """Names in directory fd, at most 2 * ENTRY_CAP (the rest is never kept anyway)."""
    out: list[str] = []
    try:
        with os.scandir(fd) as it:
            for e in it:
                out.append(e.name)
                if len(out) >= 2 * ENTRY_CAP:
                    break
    except OSError:
        pass
    return sorted(out)


class Keeper:
    """Copies held paths into the run's state (`held_dir`: made on the first one),
    by descriptor, within the caps; `finish` writes the manifest. Used by
    `collect` (the held area at exit) and by `hold_at_exit` (an exclusive
    workdir's new protected names, taken from the workdir itself)."""

    def __init__(self, workdir: str, run_id: str, *, base: str | None = None,
                 home: str | None = None):
        self.held = Held(run_id, workdir, None)
        self.cp = _Copier()
        self.dest_fd: int | None = None
        self.dest = os.path.join(base or held_base(home=home), run_id)
        real, wd = os.path.realpath(self.dest), workdir.rstrip("/")
        if real == wd or real.startswith(wd + "/"):
            # the next agent could rewrite what the person is about to apply
            raise ValueError(f"the held state {self.dest} lies inside the workdir")

    def _dest_dir(self) -> int:
        if self.dest_fd is None:
            top = _open_own_dir(os.path.dirname(self.dest), True)
            try:
                os.mkdir(os.path.basename(self.dest), 0o700, dir_fd=top)
                self.dest_fd = os.open(os.path.basename(self.dest), _DIR, dir_fd=top)
            finally:
                os.close(top)
            os.mkdir(FILES, 0o700, dir_fd=self.dest_fd)
            self.held.dir = self.dest
        return self.dest_fd

    def _mirror(self, comps: tuple[str, ...]) -> int:
        cur = os.open(FILES, _DIR, dir_fd=self._dest_dir())
        try:
            for c in comps:
                try:
                    os.mkdir(c, 0o700, dir_fd=cur)
                except FileExistsError:
                    pass
                nxt = os.open(c, _DIR, dir_fd=cur)
                os.close(cur)
                cur = nxt
            return cur
        except BaseException:
            os.close(cur)
            raise

    def take(self, sfd: int, name: str, comps: tuple[str, ...]) -> bool:
        """Copy the held path comps (name below sfd), a file or a tree; False
        when nothing of it was kept (not a file or directory, over a cap)."""
        held, cp = self.held, self.cp
        rel = "/".join(comps)
        root = rel
        try:
            st = os.stat(name, dir_fd=sfd, follow_symlinks=False)
        except OSError:
            return False
        if stat.S_ISLNK(st.st_mode):
            cp.note(rel, "a symlink (not followed, not kept)")
            return False
        if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
            cp.note(rel, "not a regular file or directory (not kept)")
            return False
        if cp.entries >= ENTRY_CAP:
            cp.note(rel, f"over the {ENTRY_CAP} entries the held area keeps")
            return False
        dfd = self._mirror(comps[:-1])
        try:
            if stat.S_ISREG(st.st_mode):
                got = cp.file(sfd, name, dfd, rel)
                if got is not None:
                    cp.entries += 1
                    held.items.append(Item(rel, root, "file", got[0], got[1], got[2]))
                return got is not None
            # a tree: depth first, by descriptor, without recursion
            os.mkdir(name, 0o700, dir_fd=dfd)
            cp.entries += 1
            held.items.append(Item(rel, root, "dir", mode=0o755))
            stack = [(os.open(name, _DIR, dir_fd=sfd), os.open(name, _DIR, dir_fd=dfd), rel,
                      _entries_rev(sfd, name))]
            try:
                while stack:
                    s, d, at, pending = stack[-1]
                    if not pending:
                        os.close(s)
                        os.close(d)
                        stack.pop()
                        continue
                    n = pending.pop()
                    r = f"{at}/{n}"
                    try:
                        est = os.stat(n, dir_fd=s, follow_symlinks=False)
                    except OSError:
                        continue
                    if cp.entries >= ENTRY_CAP:
                        cp.note(r, f"over the {ENTRY_CAP} entries the held area keeps")
                        continue
                    if stat.S_ISLNK(est.st_mode):
                        cp.note(r, "a symlink (not followed, not kept)")
                    elif stat.S_ISREG(est.st_mode):
                        got = cp.file(s, n, d, r)
                        if got is not None:
                            cp.entries += 1
                            held.items.append(Item(r, root, "file", got[0], got[1], got[2]))
                    elif stat.S_ISDIR(est.st_mode):
                        if len(stack) >= DEPTH_CAP:
                            cp.note(r, f"deeper than {DEPTH_CAP} levels (not kept)")
                            continue
                        os.mkdir(n, 0o700, dir_fd=d)
                        cp.entries += 1
                        held.items.append(Item(r, root, "dir", mode=0o755))
                        try:
                            ns = os.open(n, _DIR, dir_fd=s)
                        except OSError:
                            continue
                        stack.append((ns, os.open(n, _DIR, dir_fd=d), r, _entries_rev_fd(ns)))
                    else:
                        cp.note(r, "not a regular file or directory (not kept)")
            finally:
                for s, d, _, _ in stack:
                    os.close(s)
                    os.close(d)
            return True
        finally:
            os.close(dfd)

    def finish(self) -> Held:
        """The manifest written (if anything was kept); what was kept."""
        self.held.left = self.cp.left
        if self.dest_fd is not None:
            try:
                _write_json(self.dest_fd, MANIFEST, manifest(self.held))
            finally:
                os.close(self.dest_fd)
                self.dest_fd = None
        return self.held


def collect(hfd: int, guard: Guard, run_id: str, *, base: str | None = None,
            home: str | None = None) -> Held:
    """Copy what the held area (descriptor hfd) holds at protected paths into
    the run's state; returns what was kept (Held.dir None: nothing held)."""
    from .guard import Guard as _G
    keep = Keeper(guard.workdir, run_id, base=base, home=home)
    # Walk the mirror of the workdir down to the first protected component of
    # each path: that is a held path; what lies elsewhere is not held.
    try:
        top = os.open(".", _DIR, dir_fd=hfd)
    except OSError:
        return keep.held
    walk: list[tuple[int, tuple[str, ...], list[str]]] = [(top, (), _entries_rev_fd(top))]
    try:
        while walk:
            fd, comps, pending = walk[-1]
            if not pending:
                os.close(fd)
                walk.pop()
                continue
            n = pending.pop()
            c = comps + (n,)
            if not comps and n.startswith(OTHER_ROOT):
                continue        # another protected root's part: collected with its guard
            if guard.match(_G.folded(c) or ()) is not None:
                try:
                    keep.take(fd, n, c)
                except OSError as e:
                    keep.cp.note("/".join(c), f"not kept ({e.strerror or e})")
                continue
            if len(walk) > WALK_DEPTH:
                keep.cp.note("/".join(c), f"deeper than {WALK_DEPTH} levels (not looked at)")
                continue
            try:
                nfd = os.open(n, _DIR, dir_fd=fd)
            except OSError:
                continue        # not a directory (the agent's scratch) or a symlink
            walk.append((nfd, c, _entries_rev_fd(nfd)))
    finally:
        for fd, _, _ in walk:
            os.close(fd)
        keep.finish()
    return keep.held


# ------------------------------------------------------------------ an exclusive workdir

INDEX_CAP = 256 << 20       # a bigger index is left as it is (held entries look deleted)


def hold_at_exit(keep: Keeper, guard: Guard) -> Callable[[int, str, str, str], bool]:
    """The exit check's hold (revert.verify_and_revert(hold=...)) for an exclusive
    workdir (policy/workdir_mode.py), where no broker held anything while the
    agent ran: a new name the guard would have held then (Guard.hold_at: a
    regular file or directory at a protected name of the working tree, never in
    a git directory) is copied into the held state now, and True tells the
    check to remove it from the workdir. Everything else new stays the check's
    (quarantined, or a new repository's config sanitized), as without a guard."""
    def hold(pfd: int, name: str, rel: str, kind: str) -> bool:
        comps = tuple(rel.split("/"))
        what = {"f": "file", "d": "dir"}.get(kind)
        if what is None or not guard.hold_at(guard.folded(comps), what):
            return False
        return keep.take(pfd, name, comps)
    return hold


def _open_in(wfd: int, comps: Sequence[str], flags: int) -> int:
    """comps below the directory wfd, never through a symlink (the agent made them)."""
    cur = os.dup(wfd)
    try:
        for c in comps[:-1]:
            nxt = os.open(c, _DIR, dir_fd=cur)
            os.close(cur)
            cur = nxt
        return os.open(comps[-1], flags | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=cur)
    finally:
        os.close(cur)


def skip_held_in_index(workdir: str, rels: Sequence[str]) -> list[str]:
    """After an exclusive run's exit check moved held paths out of the workdir:
    in the index of the repository whose working tree holds each (the nearest
    `<top>/.git` directory above it), their entries get the skip-worktree bit,
    as the broker sets it when git installs an index in the default mode, so git
    neither reports them deleted nor commits their deletion; `apply` clears it
    (unskip). The agent is gone: nothing races this, but every name is its own,
    so each is opened by descriptor, never through a symlink, and only a plain
    index file of one link is rewritten, in place. Returns what could not be
    done (one line each)."""
    by_top: dict[tuple[str, ...], set[tuple[str, ...]]] = {}
    problems: list[str] = []
    try:
        wfd = os.open(workdir, _DIR)
    except OSError as e:
        return [f"{workdir}: {e.strerror}"]
    try:
        for rel in rels:
            comps = tuple(rel.split("/"))
            for k in range(len(comps) - 1, -1, -1):
                try:
                    os.close(_open_in(wfd, comps[:k] + (".git",), _DIR))
                except OSError:
                    continue
                by_top.setdefault(comps[:k], set()).add(comps[k:])
                break
        for top, below in sorted(by_top.items()):
            where = "/".join(top + (".git", "index"))

            def held(path: bytes, below: set[tuple[str, ...]] = below) -> bool:
                c = tuple(os.fsdecode(path).split("/"))
                return any(c[:k] in below for k in range(1, len(c) + 1))
            try:
                fd = _open_in(wfd, top + (".git", "index"), os.O_RDWR | os.O_NONBLOCK)
            except FileNotFoundError:
                continue            # no index yet: nothing tracks the held paths
            except OSError as e:
                problems.append(f"{where}: {e.strerror}")
                continue
            try:
                st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1 or st.st_size > INDEX_CAP:
                    problems.append(f"{where}: not a plain index file of one link: left as it is")
                    continue
                data = b""
                while len(data) < st.st_size:
                    chunk = os.pread(fd, st.st_size - len(data), len(data))
                    if not chunk:
                        break
                    data += chunk
                new = mark_skip_worktree(data, held)
                if new is None:
                    problems.append(f"{where}: an index confine cannot rewrite safely: held "
                                    "paths show as deleted to git")
                    continue
                if new != data:
                    view, off = memoryview(new), 0
                    while off < len(new):
                        off += os.pwrite(fd, view[off:], off)
                    os.ftruncate(fd, len(new))
            except OSError as e:
                problems.append(f"{where}: {e.strerror}")
            finally:
                os.close(fd)
    finally:
        os.close(wfd)
    return problems


def _entries_rev_fd(fd: int) -> list[str]:
    return list(reversed(_entries(fd)))


def _entries_rev(pfd: int, name: str) -> list[str]:
    try:
        fd = os.open(name, _DIR, dir_fd=pfd)
    except OSError:
        return []
    try:
        return _entries_rev_fd(fd)
    finally:
        os.close(fd)


def manifest(h: Held) -> dict[str, Any]:
    return {"run": h.run_id, "workdir": h.workdir, "time": int(time.time()),
            "items": [vars(i) for i in h.items], "left": h.left}


def _write_json(dfd: int, name: str, data: dict[str, Any]) -> None:
    tmp = f".{name}.tmp"
    try:
        os.unlink(tmp, dir_fd=dfd)
    except FileNotFoundError:
        pass
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600, dir_fd=dfd)
    try:
        view = memoryview(json.dumps(data, indent=1).encode("utf-8", "surrogateescape"))
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)
    os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)


def format_held(h: Held, limit: int = LIST_LIMIT, place: str = "the workdir") -> str:
    """The `confine:` lines at exit: what was held, where, and what to run. place:
    the protected root the paths are relative to (a write grant's path)."""
    roots = h.roots
    if not roots and not h.left:
        return ""
    lines = []
    if roots:
        lines.append(f"confine: held {len(roots)} protected path(s) that arrived with content "
                     f"(files that run later); they were NOT put in {printable(place)}:")
        for r in roots[:limit]:
            what = ("directory, " + _count(h, r.path) if r.kind == "dir"
                    else f"file, {r.size} bytes")
            lines.append(f"confine:   held {printable(r.path)} ({what})")
        if len(roots) > limit:
            lines.append(f"confine:   ... and {len(roots) - limit} more "
                         f"(confine held list {h.run_id})")
    for note in h.left[:10]:
        lines.append(f"confine:   not kept: {printable(note)}")
    if len(h.left) > 10:
        lines.append(f"confine:   ... and {len(h.left) - 10} more not kept")
    if roots:
        lines.append(f"confine: review them with `confine held show {h.run_id}`, then "
                     f"`confine held apply {h.run_id}` puts them in place, or "
                     f"`confine held discard {h.run_id}`")
    return "\n".join(lines)


def _count(h: Held, root: str) -> str:
    files = [i for i in h.items if i.root == root and i.kind == "file"]
    return f"{len(files)} file(s), {sum(i.size for i in files)} bytes"


# ------------------------------------------------------------------ the person's side

class HeldError(Exception):
    """A `confine held` request that cannot be done; the message says why."""


def runs(base: str | None = None) -> list[str]:
    b = base or held_base()
    try:
        names = os.listdir(b)
    except OSError:
        return []
    return sorted(n for n in names if _RUN_ID.fullmatch(n))


def _run_dir(run_id: str | None, base: str | None) -> tuple[str, str]:
    b = base or held_base()
    if run_id is None:
        all_runs = runs(b)
        if not all_runs:
            raise HeldError(f"nothing is held (no runs in {b})")
        run_id = all_runs[-1]
    if not _RUN_ID.fullmatch(run_id):
        raise HeldError(f"{run_id!r} is not a run id (see `confine held list`)")
    return run_id, os.path.join(b, run_id)


def load(run_id: str | None = None, base: str | None = None) -> dict[str, Any]:
    """The manifest of a run (the newest if run_id is None), with "dir"."""
    run_id, d = _run_dir(run_id, base)
    try:
        fd = _open_own_dir(d, False)
    except FileNotFoundError:
        raise HeldError(f"no held files for run {run_id}") from None
    except OSError as e:
        raise HeldError(f"{d}: {e.strerror or e}") from None
    try:
        data = _read_json(fd, MANIFEST)
        if data is None:
            raise HeldError(f"{d}/{MANIFEST} is missing or unreadable")
        data["dir"] = d
        data["shown"] = _read_json(fd, SHOWN) or {}
        return data
    finally:
        os.close(fd)


def _read_json(dfd: int, name: str) -> dict[str, Any] | None:
    try:
        fd = os.open(name, _FILE, dir_fd=dfd)
    except OSError:
        return None
    try:
        raw = b""
        while len(raw) < 64 << 20:
            b = os.read(fd, 1 << 20)
            if not b:
                break
            raw += b
        got = json.loads(raw.decode("utf-8", "surrogateescape"))
        return got if isinstance(got, dict) else None
    except ValueError:
        return None
    finally:
        os.close(fd)


def select(m: dict[str, Any], paths: list[str]) -> list[dict[str, Any]]:
    """The held roots named by paths (workdir-relative or absolute; all if none)."""
    roots = [i for i in m["items"] if i["path"] == i["root"]]
    if not paths:
        return roots
    wd = m["workdir"].rstrip("/")
    out: list[dict[str, Any]] = []
    for p in paths:
        rel = p[len(wd) + 1:] if p.startswith(wd + "/") else p
        rel = os.path.normpath(rel)
        got = [r for r in roots if r["path"] == rel or rel.startswith(r["path"] + "/")]
        if not got:
            raise HeldError(f"{printable(p)} is not held in run {m['run']}")
        out.extend(g for g in got if g not in out)
    return out


def _open_below(dfd: int, comps: list[str]) -> int:
    cur = os.dup(dfd)
    try:
        for c in comps:
            nxt = os.open(c, _DIR, dir_fd=cur)
            os.close(cur)
            cur = nxt
        return cur
    except BaseException:
        os.close(cur)
        raise


def _stored(m: dict[str, Any], item: dict[str, Any]) -> tuple[bytes, str]:
    """The stored copy of a held file and its SHA-256, read by descriptor."""
    comps = item["path"].split("/")
    top = _open_own_dir(os.path.join(m["dir"], FILES), False)
    try:
        pfd = _open_below(top, comps[:-1])
    finally:
        os.close(top)
    try:
        fd = os.open(comps[-1], _FILE, dir_fd=pfd)
    finally:
        os.close(pfd)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise HeldError(f"held copy of {printable(item['path'])} is not a regular file")
        data = b""
        while len(data) <= COPY_CAP:
            b = os.read(fd, 1 << 20)
            if not b:
                break
            data += b
        return data, sha256(data).hexdigest()
    finally:
        os.close(fd)


def _dest_parent(m: dict[str, Any], rel: str) -> tuple[int, str]:
    """(descriptor of the destination's directory, name), reached from / one
    component at a time without following a symlink; HeldError if it is gone
    or a symlink is on the way."""
    full = os.path.join(m["workdir"], rel)
    comps = [c for c in full.split("/") if c]
    cur = os.open("/", _DIR)
    try:
        for c in comps[:-1]:
            try:
                nxt = os.open(c, _DIR, dir_fd=cur)
            except OSError as e:
                why = "a symlink" if e.errno in (errno.ELOOP, errno.ENOTDIR) else e.strerror
                raise HeldError(f"cannot put {printable(rel)} in place: "
                                f"{printable(c)} on the way is {why}") from None
            os.close(cur)
            cur = nxt
        return cur, comps[-1]
    except BaseException:
        os.close(cur)
        raise


def _dest_state(m: dict[str, Any], rel: str) -> dict[str, Any]:
    """What is at the destination now: its directory's identity and whether
    the name exists."""
    try:
        pfd, name = _dest_parent(m, rel)
    except HeldError as e:
        return {"error": str(e)}
    try:
        st = os.fstat(pfd)
        try:
            os.stat(name, dir_fd=pfd, follow_symlinks=False)
            exists = True
        except FileNotFoundError:
            exists = False
        return {"dir": [st.st_dev, st.st_ino], "exists": exists}
    finally:
        os.close(pfd)


def show(m: dict[str, Any], roots: list[dict[str, Any]], out: Callable[[str], None],
         content: bool = True) -> None:
    """Print each held path and its files' content (escaped: the agent wrote
    them), and record what was shown so that apply can tell."""
    shown = dict(m.get("shown") or {})
    for r in roots:
        items = [i for i in m["items"] if i["root"] == r["path"]]
        rec: dict[str, Any] = {"files": {}, "dest": _dest_state(m, r["path"])}
        out(f"== {printable(r['path'])} ({r['kind']}) -> {printable(os.path.join(m['workdir'], r['path']))}")
        for i in items:
            if i["kind"] == "dir":
                if i["path"] != r["path"]:
                    out(f"-- {printable(i['path'])}/ (directory)")
                continue
            data, digest = _stored(m, i)
            rec["files"][i["path"]] = digest
            out(f"-- {printable(i['path'])} ({len(data)} bytes, mode {i['mode']:o}, sha256 {digest})")
            if content:
                text = data.decode("utf-8", "surrogateescape")
                for line in text.splitlines() or [""]:
                    out("   " + printable(line))
        shown[r["path"]] = rec
    fd = _open_own_dir(m["dir"], False)
    try:
        _write_json(fd, SHOWN, shown)
    finally:
        os.close(fd)


def apply(m: dict[str, Any], roots: list[dict[str, Any]]) -> list[str]:
    """Put the held paths in place: only ones shown, unchanged since, whose
    destination does not exist and whose directory is the one it was when
    shown. Checks every root before writing any. Returns the paths written."""
    shown = m.get("shown") or {}
    plan = []
    for r in roots:
        rel = r["path"]
        rec = shown.get(rel)
        if rec is None:
            raise HeldError(f"{printable(rel)} was not shown yet: run `confine held show "
                            f"{m['run']}` first")
        items = [i for i in m["items"] if i["root"] == rel]
        for i in items:
            if i["kind"] == "file":
                _, digest = _stored(m, i)
                if rec["files"].get(i["path"]) != digest:
                    raise HeldError(f"held copy of {printable(i['path'])} changed since it was "
                                    "shown: show it again")
        if set(rec["files"]) != {i["path"] for i in items if i["kind"] == "file"}:
            raise HeldError(f"{printable(rel)}: the files held differ from those shown: show again")
        now = _dest_state(m, rel)
        if "error" in now:
            raise HeldError(now["error"])
        if now["exists"]:
            raise HeldError(f"{printable(os.path.join(m['workdir'], rel))} exists: not replaced "
                            "(move it away or discard the held one)")
        if now != rec.get("dest"):
            raise HeldError(f"the directory of {printable(rel)} changed since it was shown: "
                            "show it again")
        plan.append((r, items))
    done = []
    for r, items in plan:
        pfd, name = _dest_parent(m, r["path"])
        try:
            owner = os.fstat(pfd)
            base_depth = len(r["path"].split("/"))
            for i in items:
                sub = i["path"].split("/")[base_depth:]
                dfd = _open_below(pfd, ([name] + sub)[:-1]) if sub else os.dup(pfd)
                leaf = (sub[-1] if sub else name)
                try:
                    if i["kind"] == "dir":
                        os.mkdir(leaf, 0o755, dir_fd=dfd)
                        fd = os.open(leaf, _DIR, dir_fd=dfd)
                    else:
                        data, _ = _stored(m, i)
                        fd = os.open(leaf, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                                     | os.O_CLOEXEC, i["mode"] & 0o755, dir_fd=dfd)
                        view = memoryview(data)
                        while view:
                            view = view[os.write(fd, view):]
                    try:
                        if os.geteuid() == 0:
                            os.fchown(fd, owner.st_uid, owner.st_gid)
                    finally:
                        os.close(fd)
                finally:
                    os.close(dfd)
            done.append(r["path"])
        finally:
            os.close(pfd)
    return done


def unskip(m: dict[str, Any], rel: str) -> str | None:
    """Clear the skip-worktree bit the broker set on rel's index entries, in
    the nearest repository above it in the workdir (`.git` a directory), by
    git's lock-file protocol; no git is run. A note when it was not done."""
    comps = rel.split("/")
    for k in range(len(comps) - 1, -1, -1):
        try:
            pfd, _ = _dest_parent(m, "/".join(comps[:k] + [".git", "index"]))
        except HeldError:
            continue
        try:
            try:
                fd = os.open("index", _FILE, dir_fd=pfd)
            except OSError:
                continue
            try:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    return None
                data = b""
                while len(data) <= 256 << 20:
                    b = os.read(fd, 1 << 20)
                    if not b:
                        break
                    data += b
            finally:
                os.close(fd)
            sub = os.fsencode("/".join(comps[k:]))

            def below(n: bytes, s: bytes = sub) -> bool:
                return n == s or n.startswith(s + b"/")
            new = mark_skip_worktree(data, below, on=False)
            if new is None:
                return f"{rel}: the index of {'/'.join(comps[:k]) or '.'} was not changed " \
                       "(a format this does not edit): its entries may stay skip-worktree"
            if new == data:
                return None
            try:
                lk = os.open("index.lock", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                             | os.O_CLOEXEC, 0o644, dir_fd=pfd)
            except FileExistsError:
                return f"{rel}: git is busy in {'/'.join(comps[:k]) or '.'} (index.lock): " \
                       f"run `git update-index --no-skip-worktree -- {rel}` there"
            try:
                view = memoryview(new)
                while view:
                    view = view[os.write(lk, view):]
                if os.geteuid() == 0:
                    st = os.fstat(pfd)
                    os.fchown(lk, st.st_uid, st.st_gid)
            finally:
                os.close(lk)
            os.rename("index.lock", "index", src_dir_fd=pfd, dst_dir_fd=pfd)
            return None
        finally:
            os.close(pfd)
    return None


def discard(m: dict[str, Any], roots: list[dict[str, Any]],
            notes: list[str] | None = None) -> list[str]:
    """Remove held copies (and, when none is left, the run's held state), and
    clear the skip-worktree bit the broker set on their index entries: git
    then reports them deleted, as they are (notes: where that was not done)."""
    from .revert import remove_at
    for r in roots:
        try:
            n = unskip(m, r["path"])
        except OSError as e:
            n = f"{r['path']}: the index was not changed ({e.strerror or e}): its entries " \
                "may stay skip-worktree"
        if n and notes is not None:
            notes.append(n)
    gone = []
    top = _open_own_dir(os.path.join(m["dir"], FILES), False)
    try:
        for r in roots:
            comps = r["path"].split("/")
            try:
                pfd = _open_below(top, comps[:-1])
            except FileNotFoundError:
                pfd = -1
            if pfd >= 0:
                try:
                    remove_at(pfd, comps[-1])
                except FileNotFoundError:
                    pass
                finally:
                    os.close(pfd)
            gone.append(r["path"])
    finally:
        os.close(top)
    keep = [i for i in m["items"] if i["root"] not in gone]
    fd = _open_own_dir(m["dir"], False)
    try:
        if keep:
            data = {k: v for k, v in m.items() if k not in ("dir", "shown")}
            data["items"] = keep
            _write_json(fd, MANIFEST, data)
            shown = {k: v for k, v in (m.get("shown") or {}).items() if k not in gone}
            _write_json(fd, SHOWN, shown)
    finally:
        os.close(fd)
    if not keep:
        parent, name = os.path.split(m["dir"])
        pfd = _open_own_dir(parent, False)
        try:
            remove_at(pfd, name)
        finally:
            os.close(pfd)
    return gone


def iter_roots(m: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield from (i for i in m["items"] if i["path"] == i["root"])
