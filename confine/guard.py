"""Which workdir names the agent may not create or write while it runs.

The read-only binds of protect.py cover protected paths that exist at start;
this covers the rest, by name, at the moment of the call: the broker
(fsbroker.py) asks the Guard before it creates, links, renames or opens for
writing, with the parent directory already pinned, so the name it checks is
the name it acts on.

Rules (patterns as in protect.py):
* a protected name is never created as a file, symlink, hard link or device
  node, never the destination of a rename, and never opened for writing;
* `.git/hooks` may be made (git init does), but nothing inside except git's
  inert `*.sample` hooks;
* a name that could hold protected paths (`.git`, `.claude`, `.git/modules/x`)
  is never the destination of a rename nor a symlink: a prepared tree or a
  link elsewhere would bring its contents along unchecked; `.git` is never
  created as a file (a gitfile points git at another directory);
* `<gitdir>/config` appears only the way git writes it, by renaming a lock
  file onto it, and only when every key is on protect.py's safe list
  (VET: the broker then copies the checked bytes into a fresh inode);
* files recorded as protected at start (by inode) are never opened for
  writing through any other name.
"""
from __future__ import annotations

import fnmatch
import os
from typing import Iterable, Sequence

from .protect import GIT_SKIP, Pattern

VET = "vet"
INTERNAL = ".confine-vet-"     # the broker's temporary names


def _literal(rel: str, tree: bool) -> Pattern:
    esc = "/".join("".join("[" + c + "]" if c in "*?[" else c for c in comp)
                   for comp in rel.split("/"))
    return Pattern(rel, tuple(esc.split("/")), tree, True, False)


class Guard:
    def __init__(self, workdir: str, patterns: Sequence[Pattern],
                 extra: Iterable[tuple[str, bool]] = (), global_hooks: Iterable[str] = (),
                 inodes: Iterable[tuple[int, int]] = ()):
        self.workdir = os.path.normpath(workdir)
        pats = list(patterns)
        pats += [_literal(rel, tree) for rel, tree in extra if rel]
        for hp in global_hooks:      # relative core.hooksPath: below every worktree
            p = _literal(os.path.normpath(hp), True)
            pats.append(Pattern(p.text, p.comps, True, False, False))
        self.patterns = tuple(pats)
        self.inodes = frozenset(inodes)

    # -- paths

    def rel(self, path: str) -> tuple[str, ...] | None:
        """Components below the workdir, () for the workdir, None if outside."""
        path = os.path.normpath(path)
        if path == self.workdir:
            return ()
        top = self.workdir.rstrip("/") + "/"
        if not path.startswith(top):
            return None
        return tuple(path[len(top):].split("/"))

    def _places(self, comps: tuple[str, ...], p: Pattern):
        """Every tail of comps where p could start matching."""
        if not p.git:
            if p.anchored:
                yield comps
            else:
                for i in range(len(comps)):
                    yield comps[i:]
            return
        for i, c in enumerate(comps):
            if c != ".git":
                continue
            below = comps[i + 1:]
            yield below
            # submodule and worktree git directories: .git/modules/<name...>/
            if below and below[0] in ("modules", "worktrees"):
                for j in range(2, len(below) + 1):
                    if GIT_SKIP.intersection(below[:j]):
                        break
                    yield below[j:]

    @staticmethod
    def _prefix(r: tuple[str, ...], p: Pattern, n: int) -> bool:
        return all(fnmatch.fnmatchcase(r[k], p.comps[k]) for k in range(n))

    def match(self, comps: tuple[str, ...]):
        """(pattern, tail) of the first pattern protecting comps, else None."""
        for p in self.patterns:
            n = len(p.comps)
            for r in self._places(comps, p):
                if (len(r) == n or (p.tree and len(r) > n)) and self._prefix(r, p, n):
                    return p, r
        return None

    def ancestor(self, comps: tuple[str, ...]) -> Pattern | None:
        """A pattern that could protect something below comps."""
        for p in self.patterns:
            n = len(p.comps)
            for r in self._places(comps, p):
                if (len(r) < n and (r or p.git)) and self._prefix(r, p, len(r)):
                    return p
        return None

    # -- verdicts: None (allowed), VET, or the reason for refusing

    def create(self, path: str, kind: str) -> str | None:
        """kind: file, dir, symlink, link, node."""
        comps = self.rel(path)
        if comps is None or not comps:
            return None
        name = comps[-1]
        if name.startswith(INTERNAL):
            return "a temporary name of confine's"
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
                return f"protected path ({p.text}): git writes it by renaming config.lock"
            return f"protected path ({p.text})"
        if kind == "symlink":
            a = self.ancestor(comps)
            if a is not None:
                return f"a link here would bring a tree protected by {a.text} along"
        return None

    def rename_to(self, path: str) -> str | None:
        comps = self.rel(path)
        if comps is None or not comps:
            return None
        name = comps[-1]
        if name.startswith(INTERNAL):
            return "a temporary name of confine's"
        m = self.match(comps)
        if m is not None:
            p, r = m
            if p.git and p.comps == ("config",) and len(r) == 1:
                return VET
            return f"protected path ({p.text})"
        a = self.ancestor(comps)
        if a is not None:
            return f"a tree renamed here would bring paths protected by {a.text} along unchecked"
        return None

    def write(self, path: str | None, dev: int, ino: int) -> str | None:
        if (dev, ino) in self.inodes:
            return "a file protected at start (another name of it)"
        if path is None:
            return None
        comps = self.rel(path)
        if not comps:
            return None
        if comps[-1].startswith(INTERNAL):
            return "a temporary name of confine's"
        m = self.match(comps)
        return f"protected path ({m[0].text})" if m is not None else None
