"""Git's own data that writes files later: staged entries, commits, replace refs, grafts.

A protected name refused in the worktree can still reach it through git: an
index entry added with `git update-index --cacheinfo` (`.envrc`,
`.vscode/tasks.json`, `.gitmodules`) is written by the person's next `git
restore .`, `checkout` or `reset --hard`; a commit whose tree adds one is
written by the next checkout of that branch; a `refs/replace/*` ref, an
`info/grafts` file or an `objects/info/alternates` file make git show one
history while another is pushed or checked out.  The snapshot records, for
every git directory, its refs, the protected entries of its index and the
hashes of those three files (`record`); at exit `check` compares and reports:

* new or changed replace refs, grafts and alternates are moved to quarantine
  (a packed replace ref is cut out of packed-refs, the old file kept there):
  git works the same without them;
* index entries and commits (the tips of refs that changed during the run)
  that add or change a protected path are alerts: they cannot be undone
  without rewriting the user's history, and where the check cannot decide (an
  object it cannot read, a split index, a reftable, a cap reached) that is an
  alert too.

No git is run on the repository: it is the agent's, and git reads the
repository's config and would start what it names (core.fsmonitor, pager,
hooks, ...) as the supervisor or the user.  Instead this module reads the
index (DIRC v2-4), loose objects and packs (idx v2, OFS/REF deltas) itself,
with every read bounded (object size, delta depth, objects per check) and
only through descriptors below the workdir (snapshot._Fs: no symlink
followed).  Commits are compared by tree with the old tip of the same ref
(a new ref: with HEAD at start), skipping unchanged subtrees, so the cost
follows what changed, not the size of the repository.
"""
from __future__ import annotations

import fnmatch
import os
import stat
import struct
import zlib
from typing import TYPE_CHECKING, Callable, Iterable

from ..digest import in_broker, sha256
from ..record import dataclass, field
from . import gitlink
from .gitconfig import parse_git_config

if TYPE_CHECKING:   # types only: snapshot.py and revert.py import this module
    from .revert import _Reverter
    from .snapshot import Snapshot, _Fs, _Scan

# directories right below a git directory whose mode matters: another account that may
# write them replaces objects, refs, hooks or info/grafts
MODE_SUBDIRS = ("objects", "refs", "info", "hooks")

__all__ = ["GitState", "record", "check", "parse_index", "CannotDecide"]

MAX_REFS = 100_000            # loose + packed refs read per git directory
INDEX_CAP = 128 << 20         # bytes of an index parsed
OBJECT_CAP = 64 << 20         # inflated bytes of one object
DELTA_DEPTH = 4096            # git's own limit for a delta chain
OBJECTS_PER_CHECK = 200_000   # objects read at exit, all repositories together
SMALL_FILES = ("info/grafts", "objects/info/alternates", "objects/info/http-alternates")


class CannotDecide(Exception):
    """The data could not be read within the limits: the check refuses."""


@dataclass
class GitState:
    refs: dict[str, str] = field(default_factory=dict)     # name -> hex or "ref: target"
    loose: set[str] = field(default_factory=set)           # names that are loose ref files
    reftable: tuple[tuple[str, int, int, int], ...] | None = None
    index_key: tuple[int, int, int, int] | None = None     # dev, ino, size, ctime_ns
    index: dict[str, tuple[int, str]] | None = None        # protected path -> (mode, hex)
    index_err: str | None = None
    refs_err: str | None = None
    files: dict[str, str] = field(default_factory=dict)    # SMALL_FILES present -> sha256


# --- reading below the workdir, by descriptor ------------------------------------------------

def _j(a: str, b: str) -> str:
    return f"{a}/{b}" if a else b


def _read(sc: _Scan, rel: str, cap: int) -> bytes | None:
    st = sc.fs.lstat(rel)
    if st is None or not stat.S_ISREG(st.st_mode) or st.st_size > cap:
        return None
    return sc._read_rel(rel, cap)


def _listdir(sc: _Scan, rel: str) -> list[tuple[str, bool]] | None:
    return sc.fs.listdir(rel)


def _open_file(sc: _Scan, rel: str) -> int | None:
    return sc.fs.open_file(rel)


def _common(sc: _Scan, gd: str) -> str | None:
    """Workdir-relative common directory of a git directory (itself unless it has
    a `commondir` file); None if it lies outside the workdir."""
    data = _read(sc, _j(gd, "commondir"), 4096)
    if data is None:
        return gd
    return sc._inside(data.decode("utf-8", "surrogateescape").strip(), gd)


def _hashlen(sc: _Scan, common: str) -> int:
    data = _read(sc, _j(common, "config"), 1 << 20)
    if data:
        for it in parse_git_config(data)[0]:
            if it.name.lower() == "extensions.objectformat" and (it.value or "").lower() == "sha256":
                return 32
    return 20


# --- refs -------------------------------------------------------------------------------

def _refs(sc: _Scan, gd: str, st: GitState) -> None:
    head = _read(sc, _j(gd, "HEAD"), 4096)
    if head is not None:
        st.refs["HEAD"] = head.decode("utf-8", "surrogateescape").strip()
    stack = [("refs", 0)]
    while stack:
        rel, depth = stack.pop()
        ents = _listdir(sc, _j(gd, rel))
        if ents is None or depth > 64:
            continue
        for name, isdir in ents:
            if len(st.refs) >= MAX_REFS:
                raise CannotDecide(f"more than {MAX_REFS} refs in {gd}")
            if isdir:
                stack.append((_j(rel, name), depth + 1))
            elif not name.endswith(".lock"):
                data = _read(sc, _j(gd, _j(rel, name)), 4096)
                if data is not None:
                    st.refs[_j(rel, name)] = data.decode("utf-8", "surrogateescape").strip()
                    st.loose.add(_j(rel, name))
    packed = _read(sc, _j(gd, "packed-refs"), 256 << 20)
    for line in (packed or b"").decode("utf-8", "surrogateescape").splitlines():
        if not line or line[0] in "#^":
            continue
        sha, _, name = line.partition(" ")
        if name and name not in st.refs:
            if len(st.refs) >= MAX_REFS:
                raise CannotDecide(f"more than {MAX_REFS} refs in {gd}")
            st.refs[name] = sha.strip()
    ents = _listdir(sc, _j(gd, "reftable"))
    if ents is not None:
        fp = []
        for name, _isdir in sorted(ents):
            s = sc.fs.lstat(_j(gd, _j("reftable", name)))
            if s is not None:
                fp.append((name, s.st_ino, s.st_size, s.st_mtime_ns))
        st.reftable = tuple(fp)


def _resolve(refs: dict[str, str], name: str) -> str | None:
    for _ in range(8):
        v = refs.get(name)
        if v is None:
            return None
        if not v.startswith("ref:"):
            return v.lower() if _is_hex(v) else None
        name = v[4:].strip()
    return None


def _is_hex(v: str) -> bool:
    return len(v) in (40, 64) and all(c in "0123456789abcdefABCDEF" for c in v)


# --- the index --------------------------------------------------------------------------

def parse_index(data: bytes, hashlen: int = 20) -> tuple[list[tuple[str, int, str]], bool]:
    """(entries as (path, mode, hex), has a split-index link) of an index file.
    Versions 2, 3 and 4 (path prefix compression).  Raises CannotDecide for
    anything git itself would refuse or this parser does not know."""
    if len(data) < 12 or data[:4] != b"DIRC":
        raise CannotDecide("not an index file")
    ver, count = struct.unpack(">II", data[4:12])
    if ver not in (2, 3, 4):
        raise CannotDecide(f"index version {ver}")
    fixed = 40 + hashlen + 2
    out: list[tuple[str, int, str]] = []
    pos, prev = 12, b""
    end = len(data) - hashlen
    for _ in range(count):
        if pos + fixed > end:
            raise CannotDecide("index truncated")
        mode = struct.unpack(">I", data[pos + 24:pos + 28])[0]
        sha = data[pos + 40:pos + 40 + hashlen].hex()
        flags = struct.unpack(">H", data[pos + 40 + hashlen:pos + fixed])[0]
        npos = pos + fixed
        if flags & 0x4000:
            if ver < 3:
                raise CannotDecide("extended flags in a version 2 index")
            npos += 2
        if ver == 4:
            strip, shift = 0, npos
            c = data[shift]
            strip = c & 0x7F
            while c & 0x80:
                shift += 1
                if shift >= end:
                    raise CannotDecide("index truncated")
                c = data[shift]
                strip = ((strip + 1) << 7) | (c & 0x7F)
            shift += 1
            nul = data.find(b"\0", shift, end)
            if nul < 0 or strip > len(prev):
                raise CannotDecide("bad path in index")
            name = prev[:len(prev) - strip] + data[shift:nul]
            pos = nul + 1
        else:
            nlen = flags & 0xFFF
            if nlen == 0xFFF:
                nul = data.find(b"\0", npos, end)
            else:
                nul = npos + nlen
            if nul < 0 or nul > end:
                raise CannotDecide("bad path in index")
            name = data[npos:nul]
            pos += ((npos - pos) + (nul - npos) + 8) & ~7
        prev = name
        out.append((name.decode("utf-8", "surrogateescape"), mode, sha))
    link = False
    while pos + 8 <= end:
        sig = data[pos:pos + 4]
        size = struct.unpack(">I", data[pos + 4:pos + 8])[0]
        if sig == b"link":
            link = True
        pos += 8 + size
    return out, link


# --- protected names in worktree paths ------------------------------------------------------

class _Names:
    """Which worktree paths are protected: the scan's patterns (case-folded, as the
    name guard judges), the paths trusted configs point to and a relative global
    core.hooksPath, relative to the repository's worktree."""

    def __init__(self, sc: _Scan, worktree: str | None):
        self.first: dict[str, list[tuple[tuple[str, ...], bool, bool, str]]] = {}
        self.wild: list[tuple[tuple[str, ...], bool, bool, str]] = []
        for p in sc.pats:
            comps = tuple(c.casefold() for c in p.comps)
            item = (comps, p.tree, p.anchored, p.text)
            if p.wild(0):
                self.wild.append(item)
            else:
                self.first.setdefault(comps[0], []).append(item)
        for hp in sc.global_hooks:
            comps = tuple(c.casefold() for c in os.path.normpath(hp).split("/") if c)
            if comps and comps[0] != "..":
                self.first.setdefault(comps[0], []).append((comps, True, True, hp))
        self.fixed: list[tuple[tuple[str, ...], bool, str]] = []
        if worktree is not None:
            wt = tuple(c.casefold() for c in worktree.split("/") if c)
            for rel, tree, _why in sc.extra:
                comps = tuple(c.casefold() for c in rel.split("/") if c)
                if comps[:len(wt)] == wt and len(comps) > len(wt):
                    self.fixed.append((comps[len(wt):], tree, rel))

    def match(self, path: str) -> str | None:
        comps = tuple(c.casefold() for c in path.split("/"))
        for fc, tree, rel in self.fixed:
            n = len(fc)
            if comps[:n] == fc and (len(comps) == n or tree):
                return rel
        for i, c in enumerate(comps):
            for pc, tree, anchored, text in self.first.get(c, []) + self.wild:
                if anchored and i:
                    continue
                r = comps[i:]
                n = len(pc)
                if (len(r) == n or (tree and len(r) > n)) and all(
                        r[k] == pc[k] or fnmatch.fnmatchcase(r[k], pc[k]) for k in range(n)):
                    return text
        return None


# --- objects ----------------------------------------------------------------------------

class _Pack:
    def __init__(self, idx: int, pack: int, hashlen: int):
        self.idx, self.pack, self.hl = idx, pack, hashlen
        head = os.pread(idx, 8 + 256 * 4, 0)
        if len(head) < 8 + 1024 or head[:8] != b"\xfftOc\x00\x00\x00\x02":
            raise CannotDecide("pack index is not version 2")
        self.fan = struct.unpack(">256I", head[8:])
        self.n = self.fan[255]

    def find(self, sha: bytes) -> int | None:
        lo = self.fan[sha[0] - 1] if sha[0] else 0
        hi = self.fan[sha[0]]
        base = 8 + 1024
        while lo < hi:
            mid = (lo + hi) // 2
            cur = os.pread(self.idx, self.hl, base + mid * self.hl)
            if cur == sha:
                off_at = base + self.n * (self.hl + 4) + mid * 4
                off = struct.unpack(">I", os.pread(self.idx, 4, off_at))[0]
                if off & 0x80000000:
                    big = base + self.n * (self.hl + 8) + (off & 0x7FFFFFFF) * 8
                    off = struct.unpack(">Q", os.pread(self.idx, 8, big))[0]
                return off
            if cur < sha:
                lo = mid + 1
            else:
                hi = mid
        return None

    def close(self) -> None:
        os.close(self.idx)
        os.close(self.pack)


_TYPES = {1: "commit", 2: "tree", 3: "blob", 4: "tag"}


def _inflate_fd(fd: int, off: int, cap: int) -> bytes:
    d = zlib.decompressobj()
    out = []
    total = 0
    while not d.eof:
        chunk = os.pread(fd, 1 << 16, off)
        if not chunk:
            raise CannotDecide("object truncated")
        off += len(chunk)
        b = d.decompress(chunk, cap + 1 - total)
        total += len(b)
        out.append(b)
        if total > cap:
            raise CannotDecide(f"object larger than {cap} bytes")
        while d.unconsumed_tail and not d.eof:
            b = d.decompress(d.unconsumed_tail, cap + 1 - total)
            total += len(b)
            out.append(b)
            if total > cap or not b:
                raise CannotDecide(f"object larger than {cap} bytes")
    return b"".join(out)


def _apply_delta(base: bytes, delta: bytes) -> bytes:
    def varint(i: int) -> tuple[int, int]:
        v = shift = 0
        while True:
            if i >= len(delta):
                raise CannotDecide("bad delta")
            c = delta[i]
            i += 1
            v |= (c & 0x7F) << shift
            shift += 7
            if not c & 0x80:
                return v, i
    src, i = varint(0)
    dst, i = varint(i)
    if src != len(base) or dst > OBJECT_CAP:
        raise CannotDecide("bad delta")
    out = bytearray()
    while i < len(delta):
        op = delta[i]
        i += 1
        if op & 0x80:
            off = size = 0
            for k in range(4):
                if op & (1 << k):
                    off |= delta[i] << (8 * k)
                    i += 1
            for k in range(3):
                if op & (0x10 << k):
                    size |= delta[i] << (8 * k)
                    i += 1
            size = size or 0x10000
            if off + size > len(base):
                raise CannotDecide("bad delta")
            out += base[off:off + size]
        elif op:
            out += delta[i:i + op]
            i += op
        else:
            raise CannotDecide("bad delta")
        if len(out) > dst:
            raise CannotDecide("bad delta")
    if len(out) != dst:
        raise CannotDecide("bad delta")
    return bytes(out)


class _Objects:
    """Read-only object store of one repository: loose objects and packs."""

    def __init__(self, sc: _Scan, objdir: str, hashlen: int, budget: list[int]):
        self.sc, self.dir, self.hl, self.budget = sc, objdir, hashlen, budget
        self.packs: list[_Pack] | None = None
        self.depth = 0

    def _load_packs(self) -> list[_Pack]:
        if self.packs is None:
            self.packs = []
            for name, isdir in sorted(_listdir(self.sc, _j(self.dir, "pack")) or []):
                if isdir or not name.endswith(".idx"):
                    continue
                ifd = _open_file(self.sc, _j(self.dir, "pack/" + name))
                pfd = _open_file(self.sc, _j(self.dir, "pack/" + name[:-4] + ".pack"))
                if ifd is None or pfd is None:
                    for fd in (ifd, pfd):
                        if fd is not None:
                            os.close(fd)
                    continue
                try:
                    self.packs.append(_Pack(ifd, pfd, self.hl))
                except (CannotDecide, OSError, struct.error):
                    os.close(ifd)
                    os.close(pfd)
        return self.packs

    def close(self) -> None:
        for p in self.packs or ():
            p.close()

    def read(self, hexsha: str) -> tuple[str, bytes]:
        self.budget[0] -= 1
        if self.budget[0] < 0:
            raise CannotDecide(f"more than {OBJECTS_PER_CHECK} objects to read")
        rel = _j(self.dir, f"{hexsha[:2]}/{hexsha[2:]}")
        fd = _open_file(self.sc, rel) if _is_hex(hexsha) else None
        if fd is not None:
            try:
                raw = _inflate_fd(fd, 0, OBJECT_CAP + 64)
            except zlib.error:
                raise CannotDecide(f"object {hexsha} is corrupt") from None
            finally:
                os.close(fd)
            head, _, body = raw.partition(b"\0")
            kind, _, size = head.decode("latin-1").partition(" ")
            if not size.isdigit() or int(size) != len(body):
                raise CannotDecide(f"object {hexsha} is corrupt")
            return kind, body
        sha = bytes.fromhex(hexsha) if _is_hex(hexsha) else b""
        for p in self._load_packs():
            off = p.find(sha)
            if off is not None:
                try:
                    return self._unpack(p, off)
                except (zlib.error, struct.error, IndexError, OSError):
                    raise CannotDecide(f"object {hexsha} in a pack is corrupt") from None
        raise CannotDecide(f"object {hexsha} not found (alternates, a partial clone or a "
                           "pack this check does not read)")

    def _unpack(self, p: _Pack, off: int) -> tuple[str, bytes]:
        chain: list[bytes] = []
        for _ in range(DELTA_DEPTH):
            head = os.pread(p.pack, 32 + p.hl, off)
            c = head[0]
            t = (c >> 4) & 7
            i = 1
            while c & 0x80:
                c = head[i]
                i += 1
            if t in _TYPES:
                body = _inflate_fd(p.pack, off + i, OBJECT_CAP)
                for d in reversed(chain):
                    body = _apply_delta(body, d)
                return _TYPES[t], body
            if t == 6:                  # OFS_DELTA: base at a negative offset
                c = head[i]
                i += 1
                rel = c & 0x7F
                while c & 0x80:
                    c = head[i]
                    i += 1
                    rel = ((rel + 1) << 7) | (c & 0x7F)
                chain.append(_inflate_fd(p.pack, off + i, OBJECT_CAP))
                if rel <= 0 or rel > off:
                    raise CannotDecide("bad delta base")
                off -= rel
            elif t == 7:                # REF_DELTA: base by name
                base = head[i:i + p.hl]
                chain.append(_inflate_fd(p.pack, off + i + p.hl, OBJECT_CAP))
                self.depth += 1         # bases by name may form a cycle: bound the recursion
                if self.depth > 64:
                    raise CannotDecide("delta bases by name nested too deep")
                try:
                    kind, body = self.read(base.hex())
                finally:
                    self.depth -= 1
                for d in reversed(chain):
                    body = _apply_delta(body, d)
                return kind, body
            else:
                raise CannotDecide("bad pack entry")
            self.budget[0] -= 1
            if self.budget[0] < 0:
                raise CannotDecide(f"more than {OBJECTS_PER_CHECK} objects to read")
        raise CannotDecide("delta chain too deep")

    def tree_of(self, commit: str) -> str:
        for _ in range(16):             # a tag may point at a tag
            kind, body = self.read(commit)
            if kind == "tree":
                return commit
            if kind not in ("commit", "tag"):
                raise CannotDecide(f"{commit} is a {kind}")
            first = body.split(b"\n", 1)[0].decode("latin-1").split(" ")
            if kind == "commit" and first[0] == "tree" and len(first) == 2:
                return first[1]
            if kind == "tag" and first[0] == "object" and len(first) == 2:
                commit = first[1]
                continue
            raise CannotDecide(f"{commit}: malformed {kind}")
        raise CannotDecide("tag chain too long")

    def entries(self, tree: str) -> dict[bytes, tuple[int, str]]:
        kind, body = self.read(tree)
        if kind != "tree":
            raise CannotDecide(f"{tree} is a {kind}, not a tree")
        out: dict[bytes, tuple[int, str]] = {}
        i = 0
        while i < len(body):
            sp = body.find(b" ", i)
            nul = body.find(b"\0", sp + 1)
            if sp < 0 or nul < 0 or nul + 1 + self.hl > len(body):
                raise CannotDecide(f"tree {tree} is malformed")
            try:
                mode = int(body[i:sp], 8)
            except ValueError:
                raise CannotDecide(f"tree {tree} is malformed") from None
            out[body[sp + 1:nul]] = (mode, body[nul + 1:nul + 1 + self.hl].hex())
            i = nul + 1 + self.hl
        return out


def _tree_changes(objs: _Objects, names: _Names, old: str | None, new: str,
                  limit: int = 50, same: Callable[[str, str], bool] | None = None) -> list[str]:
    """Protected paths that the tree `new` adds or changes against `old`
    (but those same(path, blob) says a checkout would write as they are)."""
    out: list[str] = []
    stack: list[tuple[str | None, str, str]] = [(old, new, "")]
    seen: set[tuple[str | None, str]] = set()
    while stack and len(out) < limit:
        o, n, prefix = stack.pop()
        if (o, n) in seen or o == n:
            continue
        seen.add((o, n))
        before = objs.entries(o) if o else {}
        for raw, (mode, sha) in objs.entries(n).items():
            if before.get(raw) == (mode, sha):
                continue
            path = prefix + raw.decode("utf-8", "surrogateescape")
            if stat.S_ISDIR(mode):
                ob = before.get(raw)
                stack.append((ob[1] if ob and stat.S_ISDIR(ob[0]) else None, sha, path + "/"))
            elif names.match(path) is not None and not (same is not None and same(path, sha)):
                out.append(path)
    return out


def _as_kept(cur: _Scan, worktree: str | None, hashlen: int, path: str, sha: str) -> bool:
    """A staged or committed `.gitmodules` whose blob is the very file in the
    working tree, and that file passes the rules a new one is kept by
    (protect/gitlink.py): a checkout would write what is already there."""
    if worktree is None or path.rsplit("/", 1)[-1] != ".gitmodules":
        return False
    data = _read(cur, _j(worktree, path), 1 << 20)
    if data is None:
        return False
    blob = in_broker("sha1" if hashlen == 20 else "sha256", b"blob %d\0" % len(data) + data)
    if blob.hexdigest() != sha:
        return False
    wd = cur.workdir.rstrip("/") + "/"
    return not gitlink.gitmodules_problems(
        data, lambda p: "inside the workdir" if (p + "/").startswith(wd) else None)


# --- record (snapshot) and check (exit) ----------------------------------------------------

def _state(sc: _Scan, gd: str, hashlen: int, names: _Names,
           before: GitState | None = None) -> GitState:
    st = GitState()
    try:
        _refs(sc, gd, st)
    except CannotDecide as e:
        st.refs_err = str(e)
    for rel in SMALL_FILES:
        data = _read(sc, _j(gd, rel), 16 << 20)
        if data is not None or sc.fs.lstat(_j(gd, rel)) is not None:
            st.files[rel] = sha256(data).hexdigest() if data is not None else "?"
    ist = sc.fs.lstat(_j(gd, "index"))
    if ist is not None:
        # ctime, not mtime: utime() can put an mtime back, only the kernel sets ctime
        st.index_key = (ist.st_dev, ist.st_ino, ist.st_size, ist.st_ctime_ns)
        if before is not None and before.index_key == st.index_key:
            st.index, st.index_err = before.index, before.index_err   # git renames a new one
            return st
        data = _read(sc, _j(gd, "index"), INDEX_CAP)
        try:
            if data is None:
                raise CannotDecide(f"index unreadable or larger than {INDEX_CAP} bytes")
            ents, link = parse_index(data, hashlen)
            if link:
                raise CannotDecide("split index (its shared part is not read)")
            st.index = {p: (m, s) for p, m, s in ents if names.match(p) is not None}
        except (CannotDecide, IndexError, struct.error) as e:
            st.index_err = f"index: {e}"
    return st


def record(sc: _Scan) -> dict[str, GitState]:
    """GitState of every git directory the walk found (snapshot time)."""
    out: dict[str, GitState] = {}
    for gd, g in sc.gitdirs.items():
        common = _common(sc, gd) or gd
        try:
            out[gd] = _state(sc, gd, _hashlen(sc, common), _Names(sc, g.worktree))
        except Exception as e:  # noqa: BLE001 - never stop a run from starting; exit decides
            out[gd] = GitState(refs_err=f"{type(e).__name__}: {e}",
                               index_err=f"{type(e).__name__}: {e}")
    return out


Quarantine = Callable[..., "str | None"]


def check(snap: Snapshot, cur: _Scan, rv: _Reverter, quarantine: Quarantine) -> None:
    """Compare every git directory now with the snapshot's GitState; revert what
    can be reverted safely, report the rest as alerts (see the module docstring)."""
    budget = [OBJECTS_PER_CHECK]
    by_ino = {(g.dev, g.ino): rel for rel, g in snap.gitdirs.items()}
    for gd, g in sorted(cur.gitdirs.items()):
        old_rel = gd if gd in snap.git_state else by_ino.get((g.dev, g.ino))
        before = snap.git_state.get(old_rel) if old_rel is not None else None
        try:
            _check_one(cur, rv, quarantine, gd, g.worktree, before or GitState(),
                       before is None, budget)
        except CannotDecide as e:
            rv.add("git-data", gd, "noted", f"cannot decide ({e}): inspect this repository "
                   "before running git in it")
        except Exception as e:  # noqa: BLE001 - a parser failure must not end the exit check
            why = e.strerror if isinstance(e, OSError) and e.strerror else f"{type(e).__name__}: {e}"
            rv.add("git-data", gd, "noted", f"cannot decide ({why}): inspect this repository "
                   "before running git in it")


def _check_one(cur: _Scan, rv: _Reverter, quarantine: Quarantine, gd: str, worktree: str | None,
               before: GitState, new_repo: bool, budget: list[int]) -> None:
    common = _common(cur, gd)
    hashlen = _hashlen(cur, common or gd)
    names = _Names(cur, worktree)
    now = _state(cur, gd, hashlen, names, before)
    # 1. replace refs, grafts, alternates: move them away
    for ref in sorted(r for r in now.refs if r.startswith("refs/replace/")):
        if before.refs.get(ref) == now.refs[ref]:
            continue
        if ref in now.loose:
            quarantine(rv, _j(gd, ref), "git-data", set(), detail="replace ref made during the "
                        "run (git would show another object than the one it uses)")
        else:
            _cut_packed(rv, gd, ref)
    for rel in SMALL_FILES:
        if rel in now.files and before.files.get(rel) != now.files[rel]:
            quarantine(rv, _j(gd, rel), "git-data", set(), detail="made or changed during the "
                        "run (it changes which history git shows or where it reads objects)")
    if now.reftable is not None and now.reftable != before.reftable:
        raise CannotDecide("refs in the reftable format changed (not read by this check)")
    if now.refs_err is not None:
        raise CannotDecide(now.refs_err)
    if now.index_err is not None and now.index_key != before.index_key:
        raise CannotDecide(now.index_err)
    # 2. staged entries that add or change a protected path
    if now.index is not None and now.index_key != before.index_key:
        old = before.index or {}
        added = sorted(p for p, v in now.index.items() if old.get(p) != v
                       and not _as_kept(cur, worktree, hashlen, p, v[1]))
        if added:
            rv.add("git-data", _j(gd, "index"), "noted",
                   "staged entries for protected paths (git restore/checkout/reset would write "
                   f"them into the worktree): {', '.join(added[:20])}"
                   + (f" and {len(added) - 20} more" if len(added) > 20 else ""))
    # 3. commits: the tips of refs that changed, against the old tip (or HEAD at start)
    changed = [r for r in now.refs if not r.startswith("refs/replace/")
               and _resolve(now.refs, r) != _resolve(before.refs, r)]
    if not changed:
        return
    if common is None:
        raise CannotDecide("refs changed, and its object store is outside the workdir")
    objs = _Objects(cur, _j(common, "objects"), hashlen, budget)
    try:
        base_head = _resolve(before.refs, "HEAD")
        done: set[tuple[str | None, str]] = set()
        for ref in sorted(changed):
            tip = _resolve(now.refs, ref)
            if tip is None:
                continue            # deleted, or a symref to nothing: nothing to check out
            base = _resolve(before.refs, ref) or (None if new_repo else base_head)
            if (base, tip) in done:
                continue
            done.add((base, tip))
            old_tree = objs.tree_of(base) if base else None
            found = _tree_changes(objs, names, old_tree, objs.tree_of(tip), same=lambda p, b:
                                  _as_kept(cur, worktree, hashlen, p, b))
            if found:
                rv.add("git-data", _j(gd, ref), "noted",
                       f"commit {tip[:12]} adds or changes protected paths (a checkout would "
                       f"write them): {', '.join(found[:20])}")
    finally:
        objs.close()


def _cut_packed(rv: _Reverter, gd: str, ref: str) -> None:
    """Remove one ref from packed-refs (and its peeled line); the old file is kept."""
    rel = _j(gd, "packed-refs")
    data = _read(rv.cur, rel, 256 << 20)
    if data is None:
        raise CannotDecide("packed-refs unreadable")
    lines = data.split(b"\n")
    out: list[bytes] = []
    skip = False
    for line in lines:
        if skip and line.startswith(b"^"):
            continue
        skip = line.split(b" ", 1)[-1] == ref.encode("utf-8", "surrogateescape") \
            and not line.startswith((b"#", b"^"))
        if not skip:
            out.append(line)
    e = rv.fs.lstat(rel)
    assert e is not None
    try:
        qpath = rv.keep_copy(rel, data)
        rv.write_file(rel, b"\n".join(out), stat.S_IMODE(e.st_mode), e.st_uid, e.st_gid)
    except OSError as ex:
        rv.add("git-data", _j(gd, ref), "failed", f"cannot remove the packed replace ref: "
               f"{ex.strerror or ex}")
        return
    rv.add("git-data", _j(gd, ref), "restored", "packed replace ref made during the run "
           "removed from packed-refs (the old file kept)", quarantine=qpath)


# --- modes of the workdir and its git directories -------------------------------------------

def dir_modes(fs: _Fs, gitdirs: Iterable[str]) -> dict[str, tuple[int, int, int]]:
    """(dev, ino, mode) of the workdir, every git directory, the directories between
    each one and the workdir, and their objects/refs/info/hooks: recorded by the
    snapshot, put back by check_modes."""
    rels = {""}
    for g in gitdirs:
        parts = g.split("/") if g else []
        for i in range(1, len(parts) + 1):
            rels.add("/".join(parts[:i]))
        for sub in MODE_SUBDIRS:
            rels.add(_j(g, sub))
    out: dict[str, tuple[int, int, int]] = {}
    for rel in sorted(rels):
        st = fs.lstat(rel)
        if st is not None and stat.S_ISDIR(st.st_mode):
            out[rel] = (st.st_dev, st.st_ino, stat.S_IMODE(st.st_mode))
    return out


def check_modes(snap: Snapshot, cur: _Scan, rv: _Reverter) -> None:
    """Put back the modes dir_modes recorded (the workdir, every git directory and
    the directories up to it); a git directory made during the run, and the
    directories above it, lose write permission for others.  A world-writable
    `.git` lets another local account replace .git/config after the run."""
    for rel, (dev, ino, mode) in sorted(snap.dir_modes.items()):
        st = cur.fs.lstat(rel)
        if st is None or not stat.S_ISDIR(st.st_mode) or (st.st_dev, st.st_ino) != (dev, ino):
            continue            # gone or replaced: the entries below are checked by name
        now = stat.S_IMODE(st.st_mode)
        if now == mode:
            continue
        try:
            cur.fs.chmod_dir(rel, mode, (dev, ino))
            rv.add("mode", rel or ".", "restored", f"mode {now:o} -> {mode:o}")
        except OSError as ex:
            rv.add("mode", rel or ".", "failed", f"cannot restore mode {mode:o}: "
                   f"{ex.strerror or ex}")
    new = [g for g in cur.gitdirs if g not in snap.dir_modes]
    for rel, (dev, ino, mode) in sorted(dir_modes(cur.fs, new).items()):
        if rel in snap.dir_modes or not mode & 0o002:
            continue
        try:
            cur.fs.chmod_dir(rel, mode & ~0o002, (dev, ino))
            rv.add("mode", rel or ".", "restored", f"mode {mode:o} -> {mode & ~0o002:o} (writable "
                   "by every account, above or in a git directory made during the run)")
        except OSError as ex:
            rv.add("mode", rel or ".", "failed", f"cannot remove write permission for others: "
                   f"{ex.strerror or ex}")
