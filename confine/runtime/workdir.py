"""The agent's writable places: the workdir (checked) and a private TMPDIR."""
from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence

from ..errors import ConfineError
from ..paths import is_under

# one list for the workdir and for write grants
from ..policy import runlater
from ..policy.runlater import SYSTEM_DIRS, SYSTEM_ROOTS
from ..protect.revert import remove_at


def check_workdir(workdir: str, homes: Sequence[str], force: bool) -> str:
    """The workdir's real path, or ConfineError if handing it over would hand over
    the system or a home directory (unless force)."""
    if not os.path.exists(workdir):
        raise ConfineError(f"workdir {workdir} does not exist")
    real = os.path.realpath(workdir)
    if not os.path.isdir(real):
        raise ConfineError(f"workdir {workdir} is not a directory")
    if force:
        return real
    why = None
    if real == "/":
        why = "is the root directory"
    elif real in SYSTEM_ROOTS:
        why = "is a system directory"
    elif any(is_under(real, d) for d in SYSTEM_DIRS):
        why = "is a system directory"
    for h in homes if why is None else ():
        h = os.path.realpath(h)
        if real == h:
            why = "is your home directory itself"
        elif is_under(h, real):
            why = f"contains your home directory {h}"
    if why:
        raise ConfineError(f"refusing workdir {real}: it {why}, so the agent could write "
                           "everything there; use a project directory (or --force-workdir)")
    # The workdir's protected names are workdir-relative (.claude/settings.json): a
    # workdir that is ~/.claude, ~/.config or ~/.local/bin would hand over files in HOME
    # that run later (confine's own profiles among them), as a write grant would.
    for h in homes:
        h = os.path.realpath(h)
        entries = runlater.never_writable(h) + [(p, w) for p, _, w in
                                                runlater.read_only_entries(h)]
        for p, what in entries:
            if is_under(real, p) or is_under(p, real):
                how = "lies inside" if is_under(real, p) else "contains"
                raise ConfineError(f"refusing workdir {real}: it {how} {p} ({what}), which "
                                   "runs as you later; use a project directory (or "
                                   "--force-workdir)")
    return real


def make_tmp(uid: int, gid: int) -> str:
    """A private TMPDIR for the run, owned by the agent."""
    tmp = tempfile.mkdtemp(prefix="confine-", dir="/tmp")
    os.chmod(tmp, 0o700)
    if os.geteuid() == 0:
        os.chown(tmp, uid, gid)
    return tmp


def remove_tree(path: str) -> bool:
    """Remove a tree the agent wrote, even where it took permissions away or
    nested it thousands of levels deep: iterative and by descriptor, never
    through a symlink it planted (protect.revert.remove_at).  True if the
    path is gone."""
    parent, name = os.path.split(os.path.normpath(path))
    try:
        pfd = os.open(parent or "/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return not os.path.lexists(path)
    try:
        remove_at(pfd, name)
    except FileNotFoundError:
        pass
    except OSError:
        return False
    finally:
        os.close(pfd)
    return not os.path.lexists(path)
