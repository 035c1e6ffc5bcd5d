"""The agent's writable places: the workdir (checked) and a private TMPDIR."""
from __future__ import annotations

import functools
import os
import stat
import tempfile
from collections.abc import Callable, Sequence

from ..errors import ConfineError
from ..kernel import caps
from ..kernel.sysfs import read_text
from ..paths import is_under

# one list for the workdir and for write grants
from ..policy import privatetmp, realpaths, runlater
from ..policy.runlater import SYSTEM_DIRS, SYSTEM_ROOTS
from ..protect.revert import remove_at


def check_workdir(workdir: str, homes: Sequence[str], force: bool) -> str:
    """The workdir's real path, or ConfineError if handing it over would hand over
    the system or a home directory (unless force)."""
    if not os.path.exists(workdir):
        raise ConfineError(f"workdir {workdir} does not exist")
    real = realpaths.realpath(workdir)
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
        h = realpaths.realpath(h)
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
        h = realpaths.realpath(h)
        entries = runlater.never_writable(h) + [(p, w) for p, _, w in
                                                runlater.read_only_entries(h)]
        for p, what in entries:
            if is_under(real, p) or is_under(p, real):
                how = "lies inside" if is_under(real, p) else "contains"
                raise ConfineError(f"refusing workdir {real}: it {how} {p} ({what}), which "
                                   "runs as you later; use a project directory (or "
                                   "--force-workdir)")
    return real


def make_tmp(uid: int, gid: int, base: str | None = None) -> str:
    """A private TMPDIR for the run, owned by the agent, made in `base` ($TMPDIR
    of the launcher, else /tmp). Inside another confine run /tmp is read-only
    and $TMPDIR is the outer run's private one, so that is where it must go."""
    parent = tmp_base(base, uid, gid)
    try:
        tmp = tempfile.mkdtemp(prefix="confine-", dir=parent)
    except OSError as e:
        raise ConfineError(f"cannot make the run's TMPDIR in {parent}: {e.strerror}"
                           + ("" if base else " (set TMPDIR to a directory of yours)")) from None
    os.chmod(tmp, 0o700)
    if os.geteuid() == 0:
        os.chown(tmp, uid, gid)
    return tmp


def private_tmp(names: tuple[str, ...], tmp: str, uid: int, gid: int,
                warn: Callable[[str], None]) -> tuple[str, ...]:
    """filesystem.private_tmp (policy/privatetmp.py): for each name, the run's own
    directory in TMPDIR and the host's directory it is bound over (made empty and
    owned by the agent if missing, as the agent would outside). The names made;
    one that cannot be made is left out (creates there stay refused), said by `warn`.
    A host name that is another's directory, or not a directory, refuses the run:
    someone prepared it for the agent's tool."""
    kept = []
    for name in names:
        dst = privatetmp.expand(name, uid)
        try:
            try:
                st = os.lstat(dst)
            except FileNotFoundError:
                if os.geteuid() == 0 and uid != 0:
                    caps.in_fs_identity(uid, gid, functools.partial(_mkdir_once, dst))
                else:
                    _mkdir_once(dst)
                st = os.lstat(dst)
        except OSError as e:
            warn(f"filesystem.private_tmp {dst}: cannot make it ({e.strerror}): not given "
                 "to the agent, its creates there are refused")
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != uid:
            what = "a directory" if stat.S_ISDIR(st.st_mode) else "not a directory"
            raise ConfineError(f"filesystem.private_tmp: {dst} is {what} owned by uid "
                               f"{st.st_uid}, not a directory of the agent's (uid {uid}); "
                               "refusing to run (remove it if it is not yours)")
        kept.append(name)
    return tuple(kept)


def private_tmp_dirs(binds: Sequence[tuple[str, str]], uid: int, gid: int) -> None:
    """The run's own directories of filesystem.private_tmp, in its TMPDIR once that is
    what the agent will see (the plan's private_binds name them), owned by the agent."""
    for src, _ in binds:
        for d in (os.path.dirname(src), src):
            if not os.path.isdir(d):
                os.mkdir(d, 0o700)
            if os.geteuid() == 0:
                os.chown(d, uid, gid)


def _mkdir_once(path: str) -> None:
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass


def tmp_base(base: str | None, uid: int, gid: int) -> str:
    """The directory the run's TMPDIR is made in: `base` if it is safe, else
    ConfineError. Safe: an absolute path whose every component (symlinks
    resolved) is a directory owned by root or by us, and writable by nobody
    else unless sticky, so nobody else can rename our directory away and put
    another in its place (its path becomes a Landlock write grant); for an
    agent of another uid, every component must let that uid in."""
    if not base:
        return "/tmp"
    if not os.path.isabs(base):
        raise ConfineError(f"TMPDIR={base!r} is not an absolute path; unset it or give one")
    real = os.path.realpath(base)
    me = os.geteuid()
    trusted = {0, me} | _unmapped_owner()
    parts = [c for c in real.split("/") if c]
    for i in range(len(parts) + 1):
        path = "/" + "/".join(parts[:i])
        try:
            st = os.stat(path)
        except OSError as e:
            raise ConfineError(f"TMPDIR={base}: {path}: {e.strerror}") from None
        if not os.path.isdir(path):
            raise ConfineError(f"TMPDIR={base}: {path} is not a directory")
        if st.st_uid not in trusted:
            raise ConfineError(f"TMPDIR={base}: {path} belongs to uid {st.st_uid}, who could "
                               "replace the run's TMPDIR; unset TMPDIR or use a directory of "
                               "yours")
        if st.st_mode & 0o022 and not st.st_mode & 0o1000:
            raise ConfineError(f"TMPDIR={base}: {path} is writable by others and not sticky, "
                               "so they could replace the run's TMPDIR; unset TMPDIR or use a "
                               "directory of yours")
        if uid != me and not _searchable(st, uid, gid):
            raise ConfineError(f"TMPDIR={base}: {path} cannot be entered by the agent's uid "
                               f"{uid}; unset TMPDIR or use a directory it can reach")
    if not os.access(real, os.W_OK | os.X_OK):
        raise ConfineError(f"TMPDIR={base}: {real} is not writable")
    return real


def _unmapped_owner() -> set[int]:
    """Inside a user namespace (another confine run started unprivileged) root's
    files show as the overflow uid: that one too, then. It stands for every
    owner outside the namespace, a limit the README names."""
    uid_map = (read_text("/proc/self/uid_map", strip=True) or "").split()
    if uid_map[:3] == ["0", "0", "4294967295"]:
        return set()
    overflow = read_text("/proc/sys/kernel/overflowuid", strip=True) or "65534"
    return {int(overflow)} if overflow.isdigit() else set()


def _searchable(st: os.stat_result, uid: int, gid: int) -> bool:
    if st.st_uid == uid:
        return bool(st.st_mode & 0o100)
    if st.st_gid == gid:
        return bool(st.st_mode & 0o010)
    return bool(st.st_mode & 0o001)


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
