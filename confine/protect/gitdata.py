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

Where this reader and git disagree, an agent can hide a branch (the check
sees it as deleted, the person's `git checkout` writes its files), so refs
and objects are read as git's files backend reads them, and what cannot be
read that way is "cannot decide", never "deleted":

* loose refs as parse_loose_ref_contents (an id followed by the end or git's
  whitespace, `ref:` and a target; anything else broken); a symlinked ref is a
  symref when its target is a ref name, else read through, followed only inside
  the workdir; a symlinked directory of refs is entered; packed-refs as the
  packed backend (a file git refuses, or a name twice, is cannot decide), a
  loose ref over a packed one; symref chains to git's depth of 5;
* every ref a person names: HEAD, the pseudorefs (FETCH_HEAD line by line,
  ORIG_HEAD, MERGE_HEAD, ...), per-worktree refs and linked worktrees' HEADs,
  refs/stash with its index and untracked-files parents and its reflog
  (stash@{n}), and reflog entries added during the run (`reset --hard
  HEAD@{1}`); refs/notes are read like any ref (git never checks out a notes
  tree; a protected name there is reported all the same);
* objects: git takes a pack's copy before a loose one, in an order of its own,
  so every copy is read and hashed, and one that does not match its id is
  cannot decide; a pack index git reads and this reader does not (version 1),
  a symlinked pack or object is cannot decide; `.promisor` packs are read like
  others (a missing object, which a partial clone would fetch, is cannot
  decide);
* commit-graph and multi-pack-index, caches git trusts instead of the objects:
  a new or changed one, or a multi-pack-index over a pack replaced during the
  run, is quarantined (git works without them), listed in REPORT.txt but no
  alert: `git gc` writes a commit-graph in ordinary work;
* reftable (not read) and a rebase/am/cherry-pick left in progress (its
  --continue/--abort writes what the todo list names) are cannot decide when
  made or changed during the run.
"""
from __future__ import annotations

import fnmatch
import os
import stat
import struct
import zlib
from hashlib import new as _new_hash
from hashlib import sha256
from typing import TYPE_CHECKING, Callable, Iterable

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
# caches git trusts instead of the objects: the commit-graph gives a commit's tree and
# parents, the multi-pack-index an object's pack and offset.  A new or changed one is
# moved to quarantine like grafts (git works the same without them, only slower), so
# what git reads is the objects themselves, which the check verifies by hash.
CACHES = ("objects/info/commit-graph", "objects/info/commit-graphs",
          "objects/pack/multi-pack-index", "objects/pack/multi-pack-index.d")
# an operation left in progress: `git rebase/am/cherry-pick --continue` (or --abort, a
# reset to the orig-head named there) writes commits and patches listed in these
OPERATIONS = ("rebase-merge", "rebase-apply", "sequencer")
REFLOG_CAP = 16 << 20         # bytes of reflog entries added during a run that are read


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
    caches: dict[str, str] = field(default_factory=dict)   # CACHES present -> _stamp
    packs: dict[str, str] = field(default_factory=dict)    # objects/pack/*.{pack,idx} -> _stamp
    logs: dict[str, tuple[int, int]] = field(default_factory=dict)  # reflog rel -> (ino, size)
    ops: dict[str, str] = field(default_factory=dict)      # OPERATIONS present -> _stamp


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
#
# GitState.refs maps a ref name to what git's files backend reads for it: a lowercase
# object id, "ref: <target>" (a symref), BROKEN + why (git may read something this check
# cannot judge) or ALWAYS + why (cannot be judged even when unchanged: a symlink out of
# the workdir, whose target the agent may have rewritten).

BROKEN, ALWAYS = "?", "!"
SYMREF_MAXDEPTH = 5          # refs.h: git reads at most this many refs to resolve one name
# names git reads from the top of a git directory (refs.c: pseudorefs and HEAD); a person
# runs `git merge FETCH_HEAD`, `git reset --hard ORIG_HEAD`
PSEUDO_REFS = ("HEAD", "ORIG_HEAD", "FETCH_HEAD", "MERGE_HEAD", "CHERRY_PICK_HEAD",
               "REVERT_HEAD", "REBASE_HEAD", "BISECT_HEAD", "AUTO_MERGE")
MULTI_LINE = ("FETCH_HEAD", "MERGE_HEAD")    # one object per line, each merged by git merge
PER_WORKTREE = ("refs/bisect/", "refs/worktree/", "refs/rewritten/")
_SPACE = " \t\n\r"           # git's isspace (ctype.c): no \v, no \f
_HEX = frozenset("0123456789abcdefABCDEF")
_BAD_REF_CHARS = frozenset(" ~^:?*[\\\x7f") | frozenset(chr(c) for c in range(32))


def _refname_ok(name: str) -> bool:
    """git's check_refname_format(name, 0)."""
    if name == "@" or name.endswith((".", "/")) or "@{" in name or "/" not in name:
        return False
    for comp in name.split("/"):
        if not comp or comp.startswith(".") or comp.endswith(".lock") or ".." in comp \
                or any(c in _BAD_REF_CHARS for c in comp):
            return False
    return True


def _parse_ref(data: bytes, hexlen: int) -> str:
    """git's parse_loose_ref_contents on the rtrimmed file: `ref:` and a target, or an
    object id followed by the end or a space (FETCH_HEAD's tail); anything else is broken."""
    s = data.decode("utf-8", "surrogateescape").rstrip(_SPACE)
    if s.startswith("ref:"):
        return "ref: " + s[4:].lstrip(_SPACE)
    h = s[:hexlen]
    if len(h) == hexlen and _HEX.issuperset(h) and (len(s) == hexlen or s[hexlen] in _SPACE):
        return h.lower()
    return BROKEN + "its content is neither an object id nor `ref:`"


def _loose_ref(sc: _Scan, rel: str, hexlen: int) -> str | tuple[str] | None:
    """What git's read_ref_internal finds in the loose ref file rel: a value, None (no
    loose ref: git looks in packed-refs), or (real path,) of a directory it leads to.
    A symlink whose target is a ref name is a symref; any other git reads through, so
    it is followed here only inside the workdir, by descriptor."""
    st = sc.fs.lstat(rel)
    if st is None:
        return None
    if stat.S_ISLNK(st.st_mode):
        target = sc.fs.readlink(rel)
        if target is None:
            return ALWAYS + "a symlink this check cannot read"
        if target.startswith("refs/") and _refname_ok(target):
            return "ref: " + target
        real = sc._resolve(rel)
        st = sc.fs.lstat(real) if real is not None else None
        if real is None or st is None:
            return ALWAYS + "a symlink leading outside the workdir or to nothing (git reads " \
                "through it)"
        rel = real
    if stat.S_ISDIR(st.st_mode):
        return (rel,)
    if not stat.S_ISREG(st.st_mode):
        return BROKEN + "not a regular file"
    data = _read(sc, rel, 4096)
    if data is None:
        return BROKEN + "unreadable or larger than 4096 bytes"
    return _parse_ref(data, hexlen)


def _scan_dir(sc: _Scan, rel: str, read_small: bool
              ) -> list[tuple[str, os.stat_result, bytes | None]] | None:
    """(name, lstat, content) of the entries of the directory rel, reached without
    following a symlink; content of regular files up to 4096 bytes when read_small
    (None: larger or unreadable).  One descriptor for the directory: a git directory
    holds hundreds of ref and reflog files."""
    fd = sc.fs.open_dir(rel)
    if fd is None:
        return None
    try:
        out = []
        for e in os.scandir(fd):
            try:
                est = e.stat(follow_symlinks=False)
            except OSError:
                continue
            data = sc.fs.read_file(fd, e.name, est, 4096) \
                if read_small and stat.S_ISREG(est.st_mode) else None
            out.append((e.name, est, data))
        return out
    except OSError:
        return None
    finally:
        os.close(fd)


def _walk_refs(sc: _Scan, fsrel: str, prefix: str, hexlen: int, st: GitState,
               skip: tuple[str, ...] = ()) -> None:
    """Loose refs below the directory fsrel, named prefix/...: git's loose_fill_ref_dir
    (dot names and *.lock skipped, symlinks to directories entered)."""
    stack = [(fsrel, prefix, 0)]
    while stack:
        rel, name, depth = stack.pop()
        ents = _scan_dir(sc, rel, True)
        if ents is None:
            est = sc.fs.lstat(rel)
            if est is None:
                continue        # none there (a missing parent included: git finds none)
            if stat.S_ISLNK(est.st_mode):
                real = sc._resolve(rel)         # git follows it: here only inside the workdir
                rst = sc.fs.lstat(real) if real is not None else None
                if real is not None and rst is not None and stat.S_ISDIR(rst.st_mode):
                    stack.append((real, name, depth + 1))
                    continue
            if stat.S_ISDIR(est.st_mode) or stat.S_ISLNK(est.st_mode):
                raise CannotDecide(f"{rel}: a directory of refs this check cannot read")
            continue
        if depth > 64:
            raise CannotDecide(f"refs nested deeper than 64 levels in {fsrel}")
        for ent, est, data in ents:
            ref = _j(name, ent)
            if ent.startswith(".") or ent.endswith(".lock") or (ref + "/").startswith(skip):
                continue
            if len(st.refs) >= MAX_REFS:
                raise CannotDecide(f"more than {MAX_REFS} refs in {fsrel}")
            if stat.S_ISDIR(est.st_mode):
                stack.append((_j(rel, ent), ref, depth + 1))
                continue
            if stat.S_ISREG(est.st_mode):
                v: str | tuple[str] | None = _parse_ref(data, hexlen) if data is not None \
                    else BROKEN + "unreadable or larger than 4096 bytes"
            else:
                v = _loose_ref(sc, _j(rel, ent), hexlen)
            if isinstance(v, tuple):
                stack.append((v[0], ref, depth + 1))
            elif v is not None:
                st.refs[ref] = v
                st.loose.add(ref)


def _packed_refs(sc: _Scan, rel: str, hexlen: int) -> dict[str, str]:
    """packed-refs as git's packed backend reads it; anything it would die on, or that
    could make its binary search and this reader disagree (a name twice), is CannotDecide."""
    st = sc.fs.lstat(rel)
    if st is None:
        return {}
    if not stat.S_ISREG(st.st_mode):
        raise CannotDecide("packed-refs is not a regular file (git reads through a symlink)")
    data = _read(sc, rel, 256 << 20)
    if data is None:
        raise CannotDecide("packed-refs unreadable or larger than 256 MiB")
    out: dict[str, str] = {}
    if not data:
        return out
    if not data.endswith(b"\n"):
        raise CannotDecide("packed-refs: last line unterminated (git refuses the file)")
    lines = data[:-1].decode("utf-8", "surrogateescape").split("\n")
    if lines[0].startswith("#"):
        if not lines[0].startswith("# pack-refs with: "):
            raise CannotDecide("packed-refs: unknown header (git refuses the file)")
        lines = lines[1:]
    prev = None
    for n, line in enumerate(lines, 2):
        if line.startswith("^"):
            if prev is None or len(line) != hexlen + 1 or not _HEX.issuperset(line[1:]):
                raise CannotDecide(f"packed-refs: bad peeled line {n} (git refuses the file)")
            prev = None
            continue
        h, name = line[:hexlen], line[hexlen + 1:]
        if len(h) != hexlen or not _HEX.issuperset(h) or line[hexlen:hexlen + 1] not in \
                tuple(_SPACE) or not name:
            raise CannotDecide(f"packed-refs: bad line {n} (git refuses the file)")
        if name in out:
            raise CannotDecide(f"packed-refs: {name} listed twice")
        if len(out) >= MAX_REFS:
            raise CannotDecide(f"more than {MAX_REFS} refs in packed-refs")
        out[name] = h.lower()
        prev = name
    return out


def _top_refs(sc: _Scan, gd: str, prefix: str, hexlen: int, st: GitState) -> None:
    """HEAD and the pseudorefs of one worktree's git directory, named prefix + name."""
    for name in PSEUDO_REFS:
        v = _loose_ref(sc, _j(gd, name), hexlen)
        if v is None or isinstance(v, tuple):
            continue            # a directory named HEAD: git finds no ref there either
        st.refs[prefix + name] = v
        if name in MULTI_LINE and not v.startswith((BROKEN, ALWAYS)):
            real = sc._resolve(_j(gd, name))    # read through a symlink as _loose_ref did
            data = (_read(sc, real, 1 << 20) if real is not None else None) or b""
            for i, line in enumerate(data.split(b"\n")[1:], 2):
                # git merge skips lines marked not-for-merge; rev-parse reads only line 1
                if line.strip(_SPACE.encode()) and b"\tnot-for-merge\t" not in line:
                    st.refs[f"{prefix}{name}@line{i}"] = _parse_ref(line, hexlen)


def _worktree_refs(sc: _Scan, gd: str, prefix: str, hexlen: int, st: GitState) -> None:
    """refs/bisect, refs/worktree, refs/rewritten: kept in each worktree's git directory."""
    for sub in PER_WORKTREE:
        _walk_refs(sc, _j(gd, sub.rstrip("/")), prefix + sub.rstrip("/"), hexlen, st)


def _stash_log(sc: _Scan, common: str, hexlen: int, st: GitState) -> None:
    """Older stash entries (stash@{1}, ...) live only in the reflog of refs/stash;
    `git stash pop stash@{1}` writes their files."""
    data = _read(sc, _j(common, "logs/refs/stash"), 16 << 20)
    lines = [ln for ln in (data or b"").split(b"\n") if ln.strip()]
    for n, line in enumerate(reversed(lines[:-1]), 1):
        new = line[hexlen + 1:2 * hexlen + 1]
        st.refs[f"refs/stash@{{{n}}}"] = _parse_ref(new, hexlen) if len(new) == hexlen \
            else BROKEN + "malformed stash reflog line"


def _refs(sc: _Scan, gd: str, common: str, hexlen: int, st: GitState) -> None:
    """Every ref git can read in the repository of the git directory gd (common: its
    common directory): pseudorefs and per-worktree refs of gd, shared loose refs over
    packed-refs in common, and for a main git directory the HEADs and per-worktree refs
    of its linked worktrees as git names them (worktrees/<id>/HEAD)."""
    _top_refs(sc, gd, "", hexlen, st)
    _walk_refs(sc, _j(common, "refs"), "refs", hexlen, st,
               skip=PER_WORKTREE if gd != common else ())
    if gd != common:
        _worktree_refs(sc, gd, "", hexlen, st)
    for name, v in _packed_refs(sc, _j(common, "packed-refs"), hexlen).items():
        if name not in st.refs and not name.startswith(PER_WORKTREE if gd != common else ()):
            if len(st.refs) >= MAX_REFS:
                raise CannotDecide(f"more than {MAX_REFS} refs in {gd}")
            st.refs[name] = v
    _stash_log(sc, common, hexlen, st)
    if gd == common:
        for wid, isdir in sorted(_listdir(sc, _j(gd, "worktrees")) or []):
            wgd = _j(gd, "worktrees/" + wid)
            if isdir and wgd not in sc.gitdirs:     # one inside the workdir is checked itself
                _top_refs(sc, wgd, f"worktrees/{wid}/", hexlen, st)
                _worktree_refs(sc, wgd, f"worktrees/{wid}/", hexlen, st)
    ents = _listdir(sc, _j(common, "reftable"))
    if ents is not None:
        fp = []
        for name, _isdir in sorted(ents):
            s = sc.fs.lstat(_j(common, _j("reftable", name)))
            if s is not None:
                fp.append((name, s.st_ino, s.st_size, s.st_ctime_ns))
        st.reftable = tuple(fp)


def _resolve(refs: dict[str, str], name: str) -> str | None:
    """What git's refs_resolve_ref_unsafe gives for name: an object id, None (no such
    ref, or a symref chain git gives up on), or a BROKEN/ALWAYS value."""
    wt = name[:name.index("/", 10) + 1] if name.startswith("worktrees/") and "/" in name[10:] \
        else ""
    for _ in range(SYMREF_MAXDEPTH):
        v = refs.get(name)
        if v is None or v.startswith((BROKEN, ALWAYS)) or not v.startswith("ref:"):
            return v
        name = v[4:].strip()
        if wt and (name in PSEUDO_REFS or name.startswith(PER_WORKTREE)):
            name = wt + name        # a linked worktree's own HEAD/bisect refs
    return None


def _is_hex(v: str) -> bool:
    return len(v) in (40, 64) and _HEX.issuperset(v)


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
        if not self.wild and self.first.keys().isdisjoint(comps):
            return None         # no pattern starts at any of its names (most paths)
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
            # git still reads version 1 indexes: skipping one would miss what git reads
            raise CannotDecide("pack index is not version 2")
        self.fan = struct.unpack(">256I", head[8:])
        if any(a > b for a, b in zip(self.fan, self.fan[1:], strict=False)):
            raise CannotDecide("pack index with a non-monotonic fan-out table")
        self.n = self.fan[255]
        self.buckets: dict[int, tuple[int, bytes]] = {}

    def _id_at(self, lo: int, hi: int, mid: int) -> bytes:
        """The id at position mid of the fan-out bucket lo..hi: the bucket is read
        once (one pread, not one per step of each search), unless it is too large
        to hold, as only a crafted index's is."""
        got = self.buckets.get(lo)
        if got is None and (hi - lo) * self.hl <= _BUCKET_CAP:
            got = self.buckets[lo] = (hi, os.pread(self.idx, (hi - lo) * self.hl,
                                                   8 + 1024 + lo * self.hl))
        if got is None or got[0] != hi:
            return os.pread(self.idx, self.hl, 8 + 1024 + mid * self.hl)
        i = (mid - lo) * self.hl
        return got[1][i:i + self.hl]     # short (as a pread past the end) where the file is

    def find(self, sha: bytes) -> int | None:
        lo = self.fan[sha[0] - 1] if sha[0] else 0
        hi = self.fan[sha[0]]
        base = 8 + 1024
        bucket = lo, hi
        while lo < hi:
            mid = (lo + hi) // 2
            cur = self._id_at(*bucket, mid)
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
_BUCKET_CAP = 1 << 20          # bytes of ids of one fan-out bucket held in memory


def _inflate_fd(fd: int, off: int, cap: int) -> bytes:
    d = zlib.decompressobj()
    out = []
    total = 0
    size = 1 << 12      # most objects (trees, commits, deltas) are small: grow only as needed
    while not d.eof:
        chunk = os.pread(fd, size, off)
        size = min(size * 4, 1 << 16)
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
    """Read-only object store of one repository: loose objects and packs.

    git takes an object from the first pack that has it (in an order of its own:
    multi-pack-index, then most recently used), and from the loose store only when no
    pack has it.  A pack and a loose file, or two packs, may hold different content
    under one id; so every copy git could take is read and its hash checked, and any
    copy that does not hash to its id is CannotDecide: what is judged is then what git
    reads, whichever copy it picks."""

    def __init__(self, sc: _Scan, objdir: str, hashlen: int, budget: list[int]):
        self.sc, self.dir, self.hl, self.budget = sc, objdir, hashlen, budget
        self.packs: list[_Pack] | None = None
        self.depth = 0
        self.listed = False
        self.top: set[str] | None = None
        self.fans: dict[str, set[str] | None] = {}

    def _maybe_loose(self, hexsha: str) -> bool:
        """False only where the listings show no loose copy of hexsha (no name like it in
        its fan-out directory, or no such directory): a fresh clone keeps every object
        in packs, and three path walks per object were most of this check's time. The
        names are compared casefolded (a casefold directory opens `AB` as `ab`); where a
        listing cannot be had, or a name is like it, the caller looks it up as ever."""
        if not self.listed:
            self.listed = True
            got = _listdir(self.sc, self.dir)
            self.top = None if got is None else {n.casefold() for n, _ in got}
        if self.top is None:
            return True
        fan = hexsha[:2]
        if fan not in self.top:
            return False
        if fan not in self.fans:
            got = _listdir(self.sc, _j(self.dir, fan))
            self.fans[fan] = None if got is None else {n.casefold() for n, _ in got}
        names = self.fans[fan]
        return names is None or hexsha[2:] in names

    def _not_followed(self, rel: str, want: int) -> None:
        """CannotDecide if rel exists but is not of type `want` (a symlink git would
        follow and this reader does not)."""
        st = self.sc.fs.lstat(rel)
        if st is not None and stat.S_IFMT(st.st_mode) != want:
            raise CannotDecide(f"{rel} is a symlink or special file (git follows it, this "
                               "check does not)")

    def _load_packs(self) -> list[_Pack]:
        if self.packs is None:
            self.packs = []
            pdir = _j(self.dir, "pack")
            self._not_followed(self.dir, stat.S_IFDIR)
            self._not_followed(pdir, stat.S_IFDIR)
            for name, isdir in sorted(_listdir(self.sc, pdir) or []):
                if isdir or not name.endswith((".idx", ".pack")):
                    continue
                self._not_followed(_j(pdir, name), stat.S_IFREG)
                if not name.endswith(".idx") or self.sc.fs.lstat(
                        _j(pdir, name[:-4] + ".pack")) is None:
                    continue        # git uses a pack only with both files
                ifd = _open_file(self.sc, _j(pdir, name))
                pfd = _open_file(self.sc, _j(pdir, name[:-4] + ".pack"))
                try:
                    if ifd is None or pfd is None:
                        raise CannotDecide(f"pack {name[:-4]} unreadable")
                    self.packs.append(_Pack(ifd, pfd, self.hl))
                except (CannotDecide, OSError, struct.error) as e:
                    for fd in (ifd, pfd):
                        if fd is not None:
                            os.close(fd)
                    raise CannotDecide(f"pack {name[:-4]}: {e}") from None
        return self.packs

    def close(self) -> None:
        for p in self.packs or ():
            p.close()

    def _verify(self, hexsha: str, kind: str, body: bytes, where: str) -> None:
        h = _new_hash("sha1" if self.hl == 20 else "sha256", f"{kind} {len(body)}\0".encode())
        h.update(body)
        if h.hexdigest() != hexsha:
            raise CannotDecide(f"object {hexsha} {where} does not hash to its id (git may "
                               "read this content under it)")

    def read(self, hexsha: str) -> tuple[str, bytes]:
        hexsha = hexsha.lower()
        if len(hexsha) != 2 * self.hl or not _HEX.issuperset(hexsha):
            raise CannotDecide(f"{hexsha[:80]!r} is not an object id")
        self.budget[0] -= 1
        if self.budget[0] < 0:
            raise CannotDecide(f"more than {OBJECTS_PER_CHECK} objects to read")
        found: tuple[str, bytes] | None = None
        sha = bytes.fromhex(hexsha)
        for p in self._load_packs():
            off = p.find(sha)
            if off is None:
                continue
            try:
                kind, body = self._unpack(p, off)
            except (zlib.error, struct.error, IndexError, OSError):
                raise CannotDecide(f"object {hexsha} in a pack is corrupt") from None
            self._verify(hexsha, kind, body, "in a pack")
            found = found or (kind, body)
        if self._maybe_loose(hexsha):
            fan = _j(self.dir, hexsha[:2])
            rel = _j(fan, hexsha[2:])
            fd = _open_file(self.sc, rel)
            if fd is None:
                self._not_followed(fan, stat.S_IFDIR)
                self._not_followed(rel, stat.S_IFREG)
            else:
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
                self._verify(hexsha, kind, body, "in the loose store")
                found = found or (kind, body)
        if found is None:
            raise CannotDecide(f"object {hexsha} not found (alternates, a partial clone or a "
                               "pack this check does not read)")
        return found

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

    def parents(self, commit: str) -> list[str]:
        kind, body = self.read(commit)
        if kind != "commit":
            return []
        head = body.split(b"\n\n", 1)[0].decode("latin-1").split("\n")
        return [ln[7:] for ln in head if ln.startswith("parent ")]

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
    blob = _new_hash("sha1" if hashlen == 20 else "sha256", b"blob %d\0" % len(data) + data)
    if blob.hexdigest() != sha:
        return False
    wd = cur.workdir.rstrip("/") + "/"
    return not gitlink.gitmodules_problems(
        data, lambda p: "inside the workdir" if (p + "/").startswith(wd) else None)


# --- record (snapshot) and check (exit) ----------------------------------------------------

def _stamp(sc: _Scan, rel: str) -> str | None:
    """What changes when the file or directory rel (and the files in it) is replaced or
    written: ctime, which only the kernel sets."""
    st = sc.fs.lstat(rel)
    if st is None:
        return None
    out = f"{st.st_mode:o}:{st.st_ino}:{st.st_size}:{st.st_ctime_ns}"
    if stat.S_ISDIR(st.st_mode):
        ents = _listdir(sc, rel)
        if ents is None:
            return out + ":?"
        for name, _isdir in sorted(ents)[:4096]:
            out += f"|{name}={_stamp_one(sc, _j(rel, name))}"
    return out


def _stamp_one(sc: _Scan, rel: str) -> str:
    st = sc.fs.lstat(rel)
    return "-" if st is None else f"{st.st_mode:o}:{st.st_ino}:{st.st_size}:{st.st_ctime_ns}"


def _reflogs(sc: _Scan, gd: str, common: str) -> list[tuple[str, str, os.stat_result]]:
    """(git's name of the ref, workdir-relative reflog file, its lstat) of every regular
    reflog file but the stash's (read whole by _stash_log)."""
    out = []
    head = sc.fs.lstat(_j(gd, "logs/HEAD"))
    if head is not None and stat.S_ISREG(head.st_mode):
        out.append(("HEAD", _j(gd, "logs/HEAD"), head))
    stack = [(_j(common, "logs/refs"), "refs", 0)]
    if gd != common:
        stack += [(_j(gd, "logs/" + p.rstrip("/")), p.rstrip("/"), 1) for p in PER_WORKTREE]
    while stack and len(out) < MAX_REFS:
        rel, name, depth = stack.pop()
        for ent, est, _data in _scan_dir(sc, rel, False) or []:
            ref = _j(name, ent)
            if ref == "refs/stash" or depth > 64 or (gd != common and depth == 0
                                                     and (ref + "/").startswith(PER_WORKTREE)):
                continue
            if stat.S_ISDIR(est.st_mode):
                stack.append((_j(rel, ent), ref, depth + 1))
            elif stat.S_ISREG(est.st_mode):
                out.append((ref, _j(rel, ent), est))
    return out


def _log_stamps(sc: _Scan, gd: str, common: str, st: GitState) -> None:
    for _ref, rel, s in _reflogs(sc, gd, common):
        st.logs[rel] = (s.st_ino, s.st_size)


def _new_log_entries(sc: _Scan, gd: str, common: str, before: GitState, hexlen: int
                     ) -> dict[str, str]:
    """Reflog entries added during the run, as `ref@{n}` -> the object id they record:
    `git reset --hard HEAD@{1}` checks out a commit that may be no ref's tip any more."""
    out: dict[str, str] = {}
    budget = REFLOG_CAP
    for ref, rel, s in _reflogs(sc, gd, common):
        if before.logs.get(rel) == (s.st_ino, s.st_size):
            continue
        ino, size = before.logs.get(rel, (-1, 0))
        start = size if ino == s.st_ino and s.st_size >= size else 0
        if s.st_size - start > budget:
            raise CannotDecide(f"more than {REFLOG_CAP} bytes of reflog entries added")
        fd = _open_file(sc, rel)
        if fd is None:
            raise CannotDecide(f"reflog {rel} unreadable")
        try:
            data = os.pread(fd, s.st_size - start, start)
        finally:
            os.close(fd)
        budget -= len(data)
        lines = [ln for ln in data.split(b"\n") if ln.strip()]
        for n, line in enumerate(reversed(lines)):
            new = line[hexlen + 1:2 * hexlen + 1]
            out[f"{ref}@{{{n}}}"] = _parse_ref(new, hexlen) if len(new) == hexlen \
                else BROKEN + "malformed reflog line"
    return out


def _state(sc: _Scan, gd: str, common: str, hashlen: int, names: _Names,
           before: GitState | None = None) -> GitState:
    st = GitState()
    try:
        _refs(sc, gd, common, 2 * hashlen, st)
    except CannotDecide as e:
        st.refs_err = str(e)
    for rel in SMALL_FILES:
        data = _read(sc, _j(gd, rel), 16 << 20)
        if data is not None or sc.fs.lstat(_j(gd, rel)) is not None:
            st.files[rel] = sha256(data).hexdigest() if data is not None else "?"
    for rel in OPERATIONS:
        s = _stamp(sc, _j(gd, rel))
        if s is not None:
            st.ops[rel] = s
    _log_stamps(sc, gd, common, st)
    if gd == common:            # a linked worktree shares these with its main git directory
        for rel in CACHES:
            s = _stamp(sc, _j(gd, rel))
            if s is not None:
                st.caches[rel] = s
        pdir = _j(gd, "objects/pack")
        for name, _isdir in _listdir(sc, pdir) or []:
            if name.endswith((".pack", ".idx")):
                st.packs[name] = _stamp_one(sc, _j(pdir, name))
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
            out[gd] = _state(sc, gd, common, _hashlen(sc, common), _Names(sc, g.worktree))
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


MAX_REF_ALERTS = 50            # per repository; past it the repository is one "cannot decide"


def _check_one(cur: _Scan, rv: _Reverter, quarantine: Quarantine, gd: str, worktree: str | None,
               before: GitState, new_repo: bool, budget: list[int]) -> None:
    common = _common(cur, gd)
    hashlen = _hashlen(cur, common or gd)
    names = _Names(cur, worktree)
    now = _state(cur, gd, common or gd, hashlen, names, before)
    # 1. replace refs, grafts, alternates, commit-graph and multi-pack-index: move them away
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
    # an unchanged multi-pack-index still names packs by file name: a pack replaced
    # under it makes its offsets point at other objects
    packs_replaced = any(now.packs.get(n) != v for n, v in before.packs.items())
    for rel in CACHES:
        if rel in now.caches and (before.caches.get(rel) != now.caches[rel] or (
                packs_replaced and rel.startswith("objects/pack/"))):
            # not an alert: `git gc` writes one in ordinary work, and without it git reads
            # the objects this check judges; REPORT.txt still lists it
            q = quarantine(rv, _j(gd, rel), "git-data", set(), report=False)
            if q is not None:
                rv.add("git-data", _j(gd, rel), "quarantined", "made or changed during the run "
                       "(git takes commits' trees or objects' places from it without reading "
                       "the objects; a cache, git works without it)", quarantine=q, alert=False)
    for rel in OPERATIONS:
        if rel in now.ops and before.ops.get(rel) != now.ops[rel]:
            rv.add("git-data", _j(gd, rel), "noted", "cannot decide (a git operation left in "
                   "progress or changed during the run: its --continue or --abort writes "
                   "commits and patches this check does not judge): inspect it before "
                   "running git in this repository")
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
    # 3. commits: the tips of refs that changed, against the old tip (or HEAD at start).
    # A linked worktree whose main git directory is checked too reports only its own refs.
    shared_elsewhere = common is not None and common != gd and common in cur.gitdirs
    now.refs.update(_new_log_entries(cur, gd, common or gd, before, 2 * hashlen))
    changed = [r for r in now.refs if not r.startswith("refs/replace/")
               and (now.refs[r].startswith(ALWAYS)
                    or _resolve(now.refs, r) != _resolve(before.refs, r))
               and not (shared_elsewhere and r.startswith("refs/")
                        and not r.startswith(PER_WORKTREE))]
    if not changed:
        return
    if common is None:
        raise CannotDecide("refs changed, and its object store is outside the workdir")
    objs = _Objects(cur, _j(common, "objects"), hashlen, budget)
    alerts = 0
    try:
        base_head = _resolve(before.refs, "HEAD")
        found_for: dict[tuple[str | None, str, bool], list[str]] = {}
        checked: set[str] = set()
        # refs first, then FETCH_HEAD's further lines and reflog entries (names with
        # "@"), which are left out when they hold a commit a ref already stands for
        for ref in sorted(changed, key=lambda r: ("@" in r, r)):
            if alerts >= MAX_REF_ALERTS:
                raise CannotDecide(f"more than {MAX_REF_ALERTS} refs to report")
            where = _j(common if ref.startswith("refs/") and not ref.startswith(PER_WORKTREE)
                       else gd, ref)
            tip = _resolve(now.refs, ref)
            plain = ref.split("@{")[0].split("@line")[0]
            if tip is None or (plain != ref and tip in checked):
                continue            # deleted, a symref to nothing, or judged under a ref
            checked.add(tip)
            if tip.startswith((BROKEN, ALWAYS)):
                alerts += 1
                rv.add("git-data", where, "noted", f"cannot decide ({tip[1:]}): git may read "
                       "this ref as a commit; inspect it before checking it out")
                continue
            base = _resolve(before.refs, plain)
            if base is None or base.startswith((BROKEN, ALWAYS)):
                base = None if new_repo or base_head is None or base_head.startswith(
                    (BROKEN, ALWAYS)) else base_head
            stash = ref.startswith("refs/stash")
            key = (base, tip, stash)
            try:
                if key not in found_for:
                    found_for[key] = _commit_changes(
                        objs, names, base, tip, stash,
                        same=lambda p, b: _as_kept(cur, worktree, hashlen, p, b))
            except CannotDecide as e:
                alerts += 1
                rv.add("git-data", where, "noted", f"cannot decide ({e}): inspect this ref "
                       "before checking it out")
                if str(e).startswith("more than"):
                    raise
                continue
            found = found_for[key]
            if found:
                alerts += 1
                rv.add("git-data", where, "noted",
                       f"commit {tip[:12]} adds or changes protected paths (a checkout would "
                       f"write them): {', '.join(found[:20])}")
    finally:
        objs.close()


def _commit_changes(objs: _Objects, names: _Names, base: str | None, tip: str,
                    stash: bool, same: Callable[[str, str], bool] | None = None) -> list[str]:
    """Protected paths the commit tip adds against base; for a stash also those of its
    index and untracked-files parents, which `git stash pop` writes as well. same: see
    _tree_changes (a checked `.gitmodules` as it is in the working tree)."""
    old_tree = objs.tree_of(base) if base else None
    found = _tree_changes(objs, names, old_tree, objs.tree_of(tip), same=same)
    if stash:
        for p in objs.parents(tip)[1:3]:
            found += [f for f in _tree_changes(objs, names, old_tree, objs.tree_of(p),
                                               same=same)
                      if f not in found]
    return found


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
