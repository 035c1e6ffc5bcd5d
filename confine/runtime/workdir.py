"""The agent's writable places: the workdir (checked) and a private TMPDIR."""
from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence

from ..errors import ConfineError
from ..paths import is_under
from ..protect.revert import remove_at

# A workdir at or above any of these would hand the agent the system.
SYSTEM_DIRS = ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32",
               "/proc", "/run", "/sbin", "/sys", "/usr", "/snap", "/var/run")
# ...and exactly these (a project below them is fine).
SYSTEM_ROOTS = ("/", "/home", "/var", "/var/lib", "/var/log", "/var/cache", "/var/spool",
                "/var/mail", "/tmp", "/var/tmp", "/opt", "/srv", "/mnt", "/media", "/root")


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
