"""Which workdir names the agent may not create or write while it runs.

The read-only binds of the snapshot's mount plan cover protected paths that
exist at start; this covers the rest, by name, at the moment of the call: the
broker (mediation/files.py) asks the Guard before it creates, links,
renames or opens for writing, with the parent directory already pinned, so
the name it checks is the name it acts on.

Rules (patterns as in confine/policy/patterns.py):
* a protected name is never created as a file, symlink, hard link or device
  node, never the destination of a rename, and never opened for writing;
* `.git/hooks` may be made (git init does), but nothing inside except git's
  inert `*.sample` hooks;
* a name that could hold protected paths (`.git`, `.claude`, `.git/modules/x`)
  is never the destination of a rename nor a symlink: a prepared tree or a
  link elsewhere would bring its contents along unchecked; `.git` is never
  created as a file (a gitfile points git at another directory);
* `<gitdir>/config` appears only the way git writes it, by renaming a lock
  file onto it, and only when every key is on gitconfig.py's safe list
  (VET: the broker then copies the checked bytes into a fresh inode); so
  does the config of a repository that existed at start, where the entries
  the person had there may stay too (`trusted_config`);
* files recorded as protected at start (by inode) are never opened for
  writing through any other name.

HOLD: a protected name that arrives with content (a checkout, `tar x`, an
editor's save) is created elsewhere instead of refused: the broker makes it in
the run's held area (protect/held.py), outside the workdir, and the supervisor
keeps it for the person at exit. Only a new regular file or directory made by
open(O_CREAT)/mkdir in the working tree qualifies (hold_at); links, symlinks,
device nodes, renames onto a protected name, writes to an existing one, and
everything in a git directory or a path a trusted config names stay refused.
"""
from __future__ import annotations

import fnmatch
import os
import unicodedata
from typing import Iterable, Sequence

from ..policy.patterns import Pattern
from . import gitlink
from .snapshot import GIT_SKIP, Snapshot

VET = "vet"
VET_MODULES = "vet-gitmodules"     # a new .gitmodules, checked by gitlink.gitmodules_problems
_NOT = Pattern("", ("",), False, True, False)
INTERNAL = ".confine-vet-"     # the broker's temporary names


# Code points HFS+ ignores in names (git's is_hfs_dotgit list): a name with
# one inside may be the very file a case- or normalization-insensitive
# directory opens for the plain name.
_IGNORABLE = dict.fromkeys([*range(0x200C, 0x2010), *range(0x202A, 0x202F),
                            *range(0x206A, 0x2070), 0xFEFF])


def fold(name: str) -> str:
    """The key a name is compared by: case-folded (ext4/tmpfs casefold
    directories open `.ENVRC` for `.envrc`), canonically decomposed (they
    compare NFD: KELVIN SIGN is K) and without ignorable code points. Folding
    more than a filesystem does only refuses more."""
    return unicodedata.normalize(
        "NFD", unicodedata.normalize("NFD", name.translate(_IGNORABLE)).casefold())


def _folded(p: Pattern) -> Pattern:
    return Pattern(p.text, tuple(fold(c) for c in p.comps), p.tree, p.anchored, p.git)


def _literal(rel: str, tree: bool) -> Pattern:
    esc = "/".join("".join("[" + c + "]" if c in "*?[" else c for c in comp)
                   for comp in rel.split("/"))
    return Pattern(rel, tuple(esc.split("/")), tree, True, False)


class Guard:
    def __init__(self, workdir: str, patterns: Sequence[Pattern],
                 extra: Iterable[tuple[str, bool]] = (), global_hooks: Iterable[str] = (),
                 inodes: Iterable[tuple[int, int]] = (), aliases: Iterable[str] = (),
                 configs: Iterable[tuple[str, bytes]] = (), files: Iterable[str] = ()):
        """aliases: other paths at which the workdir's directory is mounted
        (namespaces.reachable_paths); names are judged there too. configs:
        (workdir path, content at start) of existing repository configs that
        git may rewrite through the check (Snapshot.checked_configs). files:
        workdir paths of the `inodes` at start, for the broker to hold them open
        (an inode number names a file only while it lives)."""
        self.workdir = os.path.normpath(workdir)
        self.roots = tuple(dict.fromkeys([self.workdir] + [os.path.normpath(a) for a in aliases]))
        # Names are compared case-folded: on a case-insensitive directory (ext4
        # casefold, which the owner may switch on for an empty directory) `.ENVRC`
        # is the `.envrc` direnv opens.
        pats = [_folded(p) for p in patterns]
        # exact workdir paths (protected at start, symlink and gitdir targets,
        # hooksPath of trusted configs): looked up by prefix, not pattern by pattern
        self.fixed: dict[tuple[str, ...], Pattern] = {}
        self.fixed_above: set[tuple[str, ...]] = set()
        for rel, tree in extra:
            comps = tuple(fold(c) for c in os.path.normpath(rel).split("/") if c)
            if not comps or comps[0] == "..":
                continue
            self.fixed[comps] = _literal("/".join(comps), tree or self.fixed.get(comps, _NOT).tree)
            self.fixed_above.update(comps[:k] for k in range(1, len(comps)))
        for hp in global_hooks:      # relative core.hooksPath: below every worktree
            p = _folded(_literal(os.path.normpath(hp), True))
            pats.append(Pattern(p.text, p.comps, True, False, False))
        self.patterns = tuple(pats)
        self.inodes = frozenset(inodes)
        # by position, not by inode: what was trusted at this place at start
        configs = list(configs)
        self.configs = {tuple(fold(c) for c in os.path.normpath(rel).split("/")): data
                        for rel, data in configs}
        self.files = tuple(dict.fromkeys([rel for rel, _ in configs] + list(files)))
        self._index()

        # The run's held area (protect/held.py): set by the launcher when one
        # could be made outside the workdir; None: nothing is held, all refused.
        self.held: str | None = None
        self.held_ident: tuple[int, int] | None = None

    @classmethod
    def from_snapshot(cls, snap: Snapshot) -> Guard:
        """The Guard for a run whose protected paths `snap` recorded: its
        patterns, every root it found (and the paths trusted git configs point
        to), the global hooksPath, the inodes of protected files (so another
        name of one is refused too) and every path at which the workdir is
        mounted."""
        # A bare repository's git directory has no `.git` component for the git
        # patterns to start at: the literal ones are fixed below every git directory
        # found, so a hooks/ missing at start is refused too, not only undone at exit.
        lit = [p for p in snap.patterns
               if p.git and not any(p.wild(i) for i in range(len(p.comps)))]
        below_git = [("/".join(filter(None, (g, *p.comps))), p.tree)
                     for g in snap.gitdirs if ".git" not in g.split("/") for p in lit]
        return cls(snap.workdir, snap.patterns,
                   [(rel, tree) for rel, tree, _ in snap.extra]
                   + [(r.rel, r.tree) for r in snap.roots.values()] + below_git,
                   snap.global_hooks,
                   {(e.dev, e.ino) for e in snap.entries.values() if e.kind == "f"},
                   aliases=[b.path for b in snap.mount_plan.bases],
                   configs=[(rel, snap.entries[rel].data or b"") for rel in snap.checked_configs],
                   files=[e.rel for e in snap.entries.values() if e.kind == "f"])

    # -- paths

    def rel(self, path: str) -> tuple[str, ...] | None:
        """Components below the workdir (case-folded), () for the workdir, None
        if outside."""
        path = os.path.normpath(path)
        for root in self.roots:
            if path == root:
                return ()
            top = root.rstrip("/") + "/"
            if path.startswith(top):
                return tuple(fold(c) for c in path[len(top):].split("/"))
        return None

    def prefix(self, root: str) -> tuple[str, ...]:
        """What a position below `root` starts with: nothing, there is one root
        (Roots has more)."""
        return ()

    def show(self, comps: Sequence[str]) -> str:
        """The workdir path of raw components, for messages."""
        return os.path.join(self.workdir, *comps)

    @staticmethod
    def folded(comps: Sequence[str] | None) -> tuple[str, ...] | None:
        """Raw components below the workdir (the broker finds them by
        descriptor, not by path) as the verdicts compare them."""
        return None if comps is None else tuple(fold(c) for c in comps)

    def _git_tails(self, comps: tuple[str, ...], i: int):
        """Tails below the git directory comps[i] == ".git": the directory itself
        and submodule/worktree git directories (.git/modules/<name...>/)."""
        below = comps[i + 1:]
        yield below
        if len(below) == 1 and below[0] in ("modules", "worktrees"):
            yield ()     # .git/modules itself: everything renamed in is a git directory
        if below and below[0] in ("modules", "worktrees"):
            # a worktree's name is one component (git's own, sanitized); a
            # submodule's may be a path
            last = 2 if below[0] == "worktrees" else len(below)
            for j in range(2, min(len(below), last) + 1):
                if GIT_SKIP.intersection(below[:j]):
                    break
                yield below[j:]

    def _tails(self, comps: tuple[str, ...]):
        """(pattern, tail of comps where it could start matching), cheaply: a
        pattern whose first component is literal is only tried where it occurs."""
        for i, c in enumerate(comps):
            for p in self._by_first.get(c, ()):
                if not (p.anchored and i):
                    yield p, comps[i:]
            for p in self._wild_first:
                if not (p.anchored and i):
                    yield p, comps[i:]
            if c == ".git":
                for r in self._git_tails(comps, i):
                    for p in self._git:
                        yield p, r

    def _index(self) -> None:
        self._by_first: dict[str, list[Pattern]] = {}
        self._wild_first: list[Pattern] = []
        self._git = [p for p in self.patterns if p.git]
        for p in self.patterns:
            if p.git:
                continue
            if p.wild(0):
                self._wild_first.append(p)
            else:
                self._by_first.setdefault(p.comps[0], []).append(p)

    @staticmethod
    def _prefix(r: tuple[str, ...], p: Pattern, n: int) -> bool:
        for k in range(n):
            pc = p.comps[k]
            if not (r[k] == pc or (p.wild(k) and fnmatch.fnmatchcase(r[k], pc))):
                return False
        return True

    def match(self, comps: tuple[str, ...]):
        """(pattern, tail) of a pattern protecting comps, else None."""
        for k in range(1, len(comps) + 1):
            p = self.fixed.get(comps[:k])
            if p is not None and (k == len(comps) or p.tree):
                return p, comps[k - 1:]
        for p, r in self._tails(comps):
            n = len(p.comps)
            if (len(r) == n or (p.tree and len(r) > n)) and self._prefix(r, p, n):
                return p, r
        return None

    def ancestor(self, comps: tuple[str, ...]) -> Pattern | None:
        """A pattern that could protect something below comps."""
        if comps in self.fixed_above:
            return next(p for c, p in self.fixed.items() if c[:len(comps)] == comps)
        for p, r in self._tails(comps):
            if len(r) < len(p.comps) and self._prefix(r, p, len(r)):
                return p
        return None

    # -- verdicts: None (allowed), VET, or the reason for refusing

    @staticmethod
    def _internal(comps: tuple[str, ...] | None) -> str | None:
        """The refusal every verdict shares."""
        if comps and comps[-1].startswith(INTERNAL):
            return "a temporary name of confine's"
        return None

    def create(self, path: str, kind: str) -> str | None:
        """kind: file, dir, symlink, link, node."""
        return self.create_at(self.rel(path), kind)

    def rename_to(self, path: str) -> str | None:
        return self.rename_to_at(self.rel(path))

    def write(self, path: str | None, dev: int, ino: int) -> str | None:
        return self.write_at(None if path is None else self.rel(path), dev, ino)

    # The *_at forms take folded components below the workdir (None: outside).

    def create_at(self, comps: tuple[str, ...] | None, kind: str) -> str | None:
        why = self._internal(comps)
        if not comps or why:
            return why
        name = comps[-1]
        if name == ".git" and kind != "dir":
            return "a .git file or link would point git at another directory"
        m = self.match(comps)
        if m is not None:
            p, r = m
            if kind == "dir" and p.git and p.tree and len(r) == len(p.comps):
                return None          # git init makes .git/hooks (empty but for *.sample)
            if (kind == "file" and p.git and p.comps == ("hooks",) and len(r) == 2
                    and name.endswith(".sample")):
                return None          # git never runs *.sample hooks
            if p.git and p.comps == ("config",) and kind == "file":
                # cp -a, rsync: a config written in place cannot be checked
                return (f"protected path ({p.text}): git writes it by renaming config.lock; "
                        "to copy a repository use `git clone` (cp -a and rsync cannot "
                        "write its config)")
            return f"protected path ({p.text})"
        if kind == "symlink":
            a = self.ancestor(comps)
            if a is not None:
                return f"a link here would bring a tree protected by {a.text} along"
        return None

    def hold_at(self, comps: tuple[str, ...] | None, kind: str) -> bool:
        """Whether a creation create_at refuses may be held instead: a new
        regular file or directory (kind file/dir) at a protected name of the
        working tree, matched by a pattern (not a path a trusted config or the
        snapshot named), nowhere inside a git directory and not a `.git`."""
        if self.held is None or not comps or kind not in ("file", "dir"):
            return False
        if ".git" in comps or self._internal(comps) is not None:
            return False
        if any(comps[:k] in self.fixed for k in range(1, len(comps) + 1)):
            return False
        m = self.match(comps)
        return m is not None and not m[0].git and self.create_at(comps, kind) is not None

    def pointer_at(self, comps: tuple[str, ...] | None) -> str | None:
        """gitlink.GITFILE or COMMONDIR when comps (folded) is a pointer file git
        writes for a new worktree or submodule, which the broker makes only once
        its content is checked (protect/gitlink.py); None for any other name,
        and for one protected at start or by a pattern other than git's own."""
        if not comps or self._internal(comps) is not None:
            return None
        if any(comps[:k] in self.fixed for k in range(1, len(comps) + 1)):
            return None
        k = gitlink.kind(comps)
        m = self.match(comps) if k is not None else None
        if k == gitlink.GITFILE:
            return k if m is None else None
        if k == gitlink.COMMONDIR and m is not None and m[0].git and m[0].comps == ("commondir",):
            return k
        return None

    def rename_to_at(self, comps: tuple[str, ...] | None, tree: bool = True) -> str | None:
        """tree: what is renamed may bring names along (a directory, a
        symlink); a regular file brings none (git's `HEAD.lock` onto
        `.git/modules/a/HEAD`, where a nested submodule `a/HEAD` could be)."""
        why = self._internal(comps)
        if not comps or why:
            return why
        m = self.match(comps)
        if m is not None:
            p, r = m
            if len(r) == 1 and ((p.git and p.comps == ("config",)) or comps in self.configs):
                return VET
            if (p.text == ".gitmodules" and r == (".gitmodules",)
                    and not any(comps[:k] in self.fixed for k in range(1, len(comps) + 1))):
                return VET_MODULES
            return f"protected path ({p.text})"
        if not tree and comps[-1] == ".git":
            # a .git file only as git writes it, its content checked (gitlink.py)
            return "a .git file or link would point git at another directory"
        a = self.ancestor(comps) if tree else None
        if a is not None:
            return f"a tree renamed here would bring paths protected by {a.text} along unchecked"
        return None

    def trusted_config(self, comps: tuple[str, ...] | None) -> bytes | None:
        """The config that was at (folded) comps at start, if git may rewrite it
        through the check; None for a repository made during the run."""
        return None if comps is None else self.configs.get(comps)

    def write_at(self, comps: tuple[str, ...] | None, dev: int, ino: int) -> str | None:
        if (dev, ino) in self.inodes:
            return "a file protected at start (another name of it)"
        why = self._internal(comps)
        if not comps or why:
            return why
        m = self.match(comps)
        return f"protected path ({m[0].text})" if m is not None else None


def root_key(comps: Sequence[str] | None) -> str:
    """Which root a position lies in: "" for the first root, "/N" for the Nth other
    (a component holding "/" is never a name, so it cannot be confused with one)."""
    return comps[0] if comps and comps[0].startswith("/") else ""


class Roots:
    """The name guard of every protected root (roots.py), one `Guard` each, asked
    as one. The broker places a name below the root it finds by descriptor; below
    the first root a position is its components as before, below another it is
    ("/N",) + its components there, and each verdict is that root's own."""

    def __init__(self, guards: Sequence[Guard]):
        self.first, self.others = guards[0], tuple(guards[1:])
        self.workdir = self.first.workdir
        self.roots = tuple(dict.fromkeys(r for g in guards for r in g.roots))
        self.inodes = frozenset().union(*(g.inodes for g in guards))
        self.files = tuple(self.first.files) + tuple(
            os.path.join(g.workdir, f) for g in self.others for f in g.files)
        self._held: str | None = None
        self.held_ident: tuple[int, int] | None = None

    @property
    def held(self) -> str | None:
        return self._held

    @held.setter
    def held(self, path: str | None) -> None:
        # the area is one; the broker files each root's names under its own key there
        self._held = path
        for g in self.guards:
            g.held = path

    @property
    def guards(self) -> tuple[Guard, ...]:
        return (self.first, *self.others)

    def prefix(self, root: str) -> tuple[str, ...]:
        """The components a position below `root` (one of self.roots) starts with."""
        root = os.path.normpath(root)
        for i, g in enumerate(self.others, 1):
            if root in g.roots:
                return (f"/{i}",)
        return ()

    def _pick(self, comps: Sequence[str] | None) -> tuple[Guard, tuple[str, ...] | None]:
        if comps is None:
            return self.first, None
        key = root_key(comps)
        if not key:
            return self.first, tuple(comps)
        return self.others[int(key[1:]) - 1], tuple(comps[1:])

    folded = staticmethod(Guard.folded)

    def rel(self, path: str) -> tuple[str, ...] | None:
        for g in self.guards:
            comps = g.rel(path)
            if comps is not None:
                return (self.prefix(g.workdir) + comps) if g is not self.first else comps
        return None

    def show(self, comps: Sequence[str]) -> str:
        g, tail = self._pick(comps)
        return g.show(tail or ())

    def match(self, comps: tuple[str, ...]):
        g, tail = self._pick(comps)
        return None if tail is None else g.match(tail)

    def create_at(self, comps: tuple[str, ...] | None, kind: str) -> str | None:
        g, tail = self._pick(comps)
        return g.create_at(tail, kind)

    def hold_at(self, comps: tuple[str, ...] | None, kind: str) -> bool:
        g, tail = self._pick(comps)
        return g.hold_at(tail, kind)

    def rename_to_at(self, comps: tuple[str, ...] | None, tree: bool = True) -> str | None:
        g, tail = self._pick(comps)
        return g.rename_to_at(tail, tree)

    def pointer_at(self, comps: tuple[str, ...] | None) -> str | None:
        """Pointer files are vetted in the first root (the workdir) only: below another
        root a `.git` file is refused as any other name would be (gitlink.py places
        targets relative to the workdir)."""
        g, tail = self._pick(comps)
        return g.pointer_at(tail) if g is self.first else None

    def trusted_config(self, comps: tuple[str, ...] | None) -> bytes | None:
        g, tail = self._pick(comps)
        return g.trusted_config(tail)

    def write_at(self, comps: tuple[str, ...] | None, dev: int, ino: int) -> str | None:
        if (dev, ino) in self.inodes:
            return "a file protected at start (another name of it)"
        g, tail = self._pick(comps)
        return g.write_at(tail, dev, ino)
