"""The pointer files git writes to tie a worktree or a submodule to its git
directory, judged by their content before the broker lets one appear.

Threat: a `.git` file (`gitdir: PATH`) or a worktree's `commondir` is read by
the person's git later, outside the sandbox. Pointing elsewhere, it makes that
git use a git directory the agent prepared (its config runs programs, its
hooks run) or one outside the workdir. So only what git itself writes for
`git worktree add` and `git submodule add` may appear:

* a `.git` file whose whole content is `gitdir: PATH` and a newline, PATH
  resolving (as git resolves it: relative to the file's directory, lexically)
  to a directory of the workdir below a git directory's `worktrees/NAME` or
  `modules/NAME...` (such a git directory is protected like any other: its
  hooks and config are judged by the name guard and the exit check);
* a `commondir` of `.git/worktrees/NAME` whose whole content is `../..` and a
  newline (the repository that holds it);
* in a submodule's git directory (`.git/modules/NAME`), `core.worktree` (git
  runs a checkout there) only with the relative value git writes: the
  submodule's own working tree, a directory of the workdir outside every git
  directory whose `.git` file points back to this git directory (the broker
  when git rewrites the config, the exit check for what is left);
* a new `.gitmodules` (the person's `git submodule update` clones each `url`
  and runs `update = !cmd`) only by git's lock-file rename, with nothing but
  `submodule.NAME.path`, `url` and `branch`: `path` a relative path outside
  every git directory; `url` a network URL (https, http, ssh, git, or
  `host:path`), or an absolute local path (`file://` too) outside the workdir
  that the sandbox cannot write (the person would clone what the agent
  prepared there); never `ext::`, never a relative URL (git resolves it
  against the superproject's remote, which may be the workdir), never a value
  starting with `!` or `-`.

The broker (mediation/files.py) makes such a file without a name (O_TMPFILE),
lets the agent write it, and at its next call reads what was written, judges
it here, opens the target from the workdir one component at a time without
following a symlink, and only then puts a fresh copy of the checked bytes at
the name. Nothing else is ever at that name: a pointer that does not pass
never appears.
"""
from __future__ import annotations

import os
import re
from typing import Callable, Sequence

from .gitconfig import parse_git_config

GITFILE = "gitfile"
COMMONDIR = "commondir"
MAX_BYTES = 4096
COMMONDIR_CONTENT = b"../..\n"
# Below a submodule's git directory these hold data, never a git directory
# of a worktree or a submodule.
_NOT_A_MODULE = frozenset({"objects", "refs", "logs", "lfs", "hooks", "info", "worktrees"})


def kind(folded: tuple[str, ...]) -> str | None:
    """GITFILE or COMMONDIR when the (case-folded) workdir components name a
    pointer git writes there, else None. A `.git` file never inside a git
    directory (a worktree or a submodule is a working tree)."""
    if not folded:
        return None
    if folded[-1] == ".git":
        return GITFILE if ".git" not in folded[:-1] else None
    if (folded[-1] == "commondir" and len(folded) >= 4 and folded[-4:-2] == (".git", "worktrees")
            and ".git" not in folded[:-4]):
        return COMMONDIR
    return None


def gitdir_of(data: bytes, parent: Sequence[str], roots: Sequence[str]) -> tuple[str, ...]:
    """The workdir components (raw) of the directory the `.git` file content
    `data`, in the directory `parent` (raw workdir components), points to.
    roots: the paths at which the workdir is mounted (an absolute PATH is
    taken below one of them). ValueError(reason) when it is not git's own
    format or leaves the workdir."""
    if not data.startswith(b"gitdir: ") or not data.endswith(b"\n") or data.count(b"\n") != 1:
        raise ValueError("not a single `gitdir: PATH` line")
    if b"\0" in data or b"\r" in data:
        raise ValueError("not a single `gitdir: PATH` line")
    path = os.fsdecode(data[len(b"gitdir: "):-1])
    if not path:
        raise ValueError("an empty path")
    if path.startswith("/"):
        norm = os.path.normpath(path)
        for root in roots:
            root = os.path.normpath(root)
            if norm == root:
                return ()
            if norm.startswith(root.rstrip("/") + "/"):
                return tuple(norm[len(root.rstrip("/")) + 1:].split("/"))
        raise ValueError(f"{path} is outside the workdir")
    comps: list[str] = list(parent)
    for c in path.split("/"):
        if c in ("", "."):
            continue
        if c == "..":
            if not comps:
                raise ValueError(f"{path} leads out of the workdir")
            comps.pop()
        else:
            comps.append(c)
    return tuple(comps)


def allowed_target(folded: tuple[str, ...]) -> str | None:
    """None when the (case-folded) workdir components are a worktree's or a
    submodule's git directory of a repository in the workdir
    (`.../.git/worktrees/NAME`, `.../.git/modules/NAME...`), else the reason."""
    if ".git" in folded:
        i = folded.index(".git")
        below = folded[i + 1:]
        if len(below) == 2 and below[0] == "worktrees":
            return None
        if len(below) >= 2 and below[0] == "modules" and not _NOT_A_MODULE.intersection(below[1:]):
            return None
    return ("not a worktree's or submodule's git directory of this repository "
            "(.git/worktrees/NAME or .git/modules/NAME)")


def worktree_of(gitdir: Sequence[str], value: str,
                fold: Callable[[str], str]) -> tuple[str, ...]:
    """The working tree (raw workdir components) that `core.worktree = value`
    names in the git directory `gitdir` (raw components), resolved as git does
    (relative to the git directory); fold: the name guard's (guard.fold).
    ValueError unless gitdir is a submodule's and value a relative path to a
    place outside every git directory of the workdir."""
    folded = tuple(fold(c) for c in gitdir)
    if allowed_target(folded) is not None or folded[folded.index(".git") + 1] != "modules":
        raise ValueError("not a submodule's git directory")
    if not value or value.startswith("/") or "\0" in value:
        raise ValueError("not a relative path")
    comps = list(gitdir)
    for c in value.split("/"):
        if c in ("", "."):
            continue
        if c == "..":
            if not comps:
                raise ValueError("leads out of the workdir")
            comps.pop()
        else:
            comps.append(c)
    if not comps or ".git" in (fold(c) for c in comps):
        raise ValueError("not a working tree")
    return tuple(comps)


_NETWORK = re.compile(r"(?i)^(https?|ssh|git|git\+ssh|ssh\+git)://[^-/]")
_SCP = re.compile(r"^[A-Za-z0-9_.@-]*[A-Za-z0-9_]:[^/]?")


def url_problem(url: str, local: Callable[[str], str | None]) -> str | None:
    """Why a submodule url may not be written, None if it may. local(path):
    the same for an absolute local path (the broker knows what it may write)."""
    if not url or url[0] in "!-" or any(c in url for c in "\0\n\r"):
        return "not a URL"
    low = url.lower()
    if low.startswith("file://"):
        path = url[len("file://"):]
        return local(os.path.normpath(path)) if path.startswith("/") else "not an absolute path"
    if url.startswith("/"):
        return local(os.path.normpath(url))
    if "::" in url.split("/")[0]:
        return "a remote helper (`ext::` runs a command)"
    if _NETWORK.match(url):
        return None
    if url.startswith(("./", "../")):
        return ("a relative URL (git resolves it against the superproject's remote or "
                "directory): give the repository's absolute path or URL")
    if "://" not in url and _SCP.match(url) and "/" not in url.split(":")[0]:
        return None
    return "not a network URL or an absolute path"


def gitmodules_problems(data: bytes, local: Callable[[str], str | None]) -> list[str]:
    """What may not stay in a `.gitmodules` the agent wrote (empty: it may)."""
    if b"\0" in data:
        return ["a NUL byte"]
    items, err = parse_git_config(data)
    if err is not None:
        return [f"syntax error ({err})"]
    out = []
    for it in items:
        if it.section != "submodule" or it.sub is None or it.key not in ("path", "url", "branch"):
            out.append(f"{it.name}: only submodule.NAME.path, url and branch are allowed")
            continue
        v = it.value or ""
        if it.key == "url":
            why = url_problem(v, local)
        elif it.key == "path":
            comps = v.split("/")
            why = None if v and v[0] not in "/!-" and ".." not in comps and ".git" not in (
                c.lower() for c in comps) else "not a relative path outside every git directory"
        else:
            why = None if v and v[0] not in "!-" else "not a branch name"
        if why is not None:
            out.append(f"{it.name} = {v}: {why}")
    return out
