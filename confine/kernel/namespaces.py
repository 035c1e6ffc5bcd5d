"""The protected workdir paths: read-only binds in the child's private mount namespace.

Most of this module is that one layer: the bind mounts that keep the agent
from changing git hooks, git configs and the other protected paths, and the
supervisor-side search for every path the workdir is reachable through
(`reachable_paths`). It also creates the namespaces themselves (`enter`,
`make_private`, `unshare`: the only calls of unshare() in confine); every
mount goes through kernel/mounts.py.

What to mount is decided in the supervisor (confine/protect/snapshot.py builds a
`Plan` from its snapshot of the workdir); this module executes that plan in
the forked child, between fork and exec, while the child is single-threaded.
Nothing here imports at call time: every binding is made when the module is
imported.

Steps the child runs (the launcher calls enter, make_private, then apply;
hostview.py makes the host read-only in between):
  1. unshare(CLONE_NEWNS) when started as root, or
     unshare(CLONE_NEWUSER|CLONE_NEWNS) when started unprivileged, then
     /proc/self/setgroups = "deny" and uid_map/gid_map mapping the caller's
     own uid and gid to themselves (never to 0: the agent is not root in the
     new user namespace, so execve() cannot grant it capabilities there).
  2. mount("/", MS_REC|MS_PRIVATE): nothing done here ever propagates to the
     host, and host mounts stop propagating in.
  3. for every planned path, parents first: open it component by component
     below the workdir with O_PATH|O_NOFOLLOW (a symlink anywhere fails the
     step), check it is the inode the plan recorded, bind it onto itself
     through /proc/self/fd, then, for read-only entries, re-open it (now the
     new mount) and remount MS_BIND|MS_REMOUNT|MS_RDONLY|MS_NOSUID|MS_NODEV,
     keeping the atime/noexec flags the mount already has (a user namespace
     locks them).  Every mount is verified (new mount id; ST_RDONLY).
     "pin" entries (git directories, the parents inside a pattern such as
     `.claude` of `.claude/commands`) get a read-write bind: they stay
     writable, but being mount points they cannot be renamed, replaced or
     removed (EBUSY), so a prepared directory cannot be swapped in.
  4. the same for every other path the workdir is reachable through (a second
     mount of the same filesystem, found in /proc/self/mountinfo by the
     supervisor), so the read-only binds cannot be sidestepped.

Effects for the agent: writing, truncating or chmod-ing a protected file or
creating anything in a protected directory fails with EROFS; renaming over,
renaming away or deleting a protected path fails with EBUSY.

Everything raises OSError whose message names the step and the path; the
launcher reports it and refuses to exec (fail closed).  Afterwards the
launcher's own steps drop capabilities (which also removes the full
capability set the new user namespace gave the child), set no_new_privs, and
load seccomp, which denies mount, umount2, unshare, setns and the new mount
API, so the agent can neither undo nor layer these mounts.
"""
from __future__ import annotations

import ctypes
import errno
import os
import stat

from ..record import NamedTuple
from . import caps
from .libc import check, libc, oserror
from .mounts import (
    MS_BIND,
    MS_NOATIME,
    MS_NODEV,
    MS_NODIRATIME,
    MS_NOEXEC,
    MS_NOSUID,
    MS_PRIVATE,
    MS_RDONLY,
    MS_REC,
    MS_RELATIME,
    MS_REMOUNT,
    MS_STRICTATIME,
    ST_NOATIME,
    ST_NODIRATIME,
    ST_NOEXEC,
    ST_RDONLY,
    ST_RELATIME,
    mount,
    unescape,
)

__all__ = [
    "CLONE_NEWNET", "CLONE_NEWNS", "CLONE_NEWUSER", "CLONE_NEWPID", "Mount", "Base", "Plan",
    "unshare", "enter", "make_private", "apply", "mount_id", "reachable_paths",
]

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

_O_PATH = getattr(os, "O_PATH", 0o10000000)
_OPEN_DIR = _O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_OPEN_ANY = _O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC

# Own function object: the prototype stays private to this module.
_unshare = libc["unshare"]
_unshare.argtypes = [ctypes.c_int]
_unshare.restype = ctypes.c_int


class Mount(NamedTuple):
    """One bind, relative to each base.  `rel` holds the path components
    below the workdir; (dev, ino) is what the supervisor saw there."""
    rel: tuple[str, ...]
    readonly: bool          # False: a read-write "pin" (only to make it a mount point)
    dev: int
    ino: int
    is_dir: bool


class Base(NamedTuple):
    """A path the workdir is reachable through (the workdir itself first)."""
    path: str
    dev: int
    ino: int


class Plan(NamedTuple):
    bases: tuple[Base, ...]
    mounts: tuple[Mount, ...]   # parents before children
    complete: bool              # False: could not prove `bases` lists every way in


def _sys_mount(src: str | None, tgt: str, flags: int, step: str) -> None:
    mount(src, tgt, None, flags, None, step)


def unshare(flags: int) -> None:
    ctypes.set_errno(0)
    check(_unshare(flags), f"namespaces: unshare({flags:#x})")


def _write_proc(name: str, data: bytes) -> None:
    try:
        fd = os.open(f"/proc/self/{name}", os.O_WRONLY | os.O_CLOEXEC)
    except OSError as e:
        raise oserror(f"namespaces: open /proc/self/{name}", e.errno) from None
    try:
        if os.write(fd, data) != len(data):
            raise oserror(f"namespaces: write /proc/self/{name}", errno.EIO)
    except OSError as e:
        if isinstance(e.strerror, str) and e.strerror.startswith("namespaces:"):
            raise
        raise oserror(f"namespaces: write {data.strip().decode()!r} to /proc/self/{name}",
                      e.errno) from None
    finally:
        os.close(fd)


def enter(userns: bool) -> None:
    """Step 1: a new mount namespace; with userns, also a new user namespace
    in which the caller's own uid/gid map to themselves."""
    if not userns:
        unshare(CLONE_NEWNS)
        return
    uid, gid = os.geteuid(), os.getegid()  # read before: unmapped until the maps exist
    # A process that changed its uid is not dumpable, and then /proc/self/*
    # belongs to root: the map files could not be written.  execve() resets
    # the flag anyway, so making the child dumpable for this step costs nothing.
    was_dumpable = caps.get_dumpable()
    if not was_dumpable:
        caps.set_dumpable(True)
    unshare(CLONE_NEWUSER | CLONE_NEWNS)
    _write_proc("setgroups", b"deny")
    _write_proc("uid_map", b"%d %d 1\n" % (uid, uid))
    _write_proc("gid_map", b"%d %d 1\n" % (gid, gid))
    if not was_dumpable:
        caps.set_dumpable(False)
    if os.geteuid() != uid or os.getegid() != gid:
        raise oserror(f"namespaces: identity after the user namespace is "
                      f"{os.geteuid()}/{os.getegid()}, wanted {uid}/{gid}", errno.EPERM)


def make_private() -> None:
    """Step 2: no propagation to or from the host, recursively."""
    _sys_mount(None, "/", MS_REC | MS_PRIVATE, "make / recursively private")


def mount_id(fd: int) -> int:
    """Mount id of an open fd (from /proc/self/fdinfo)."""
    rfd = os.open(f"/proc/self/fdinfo/{fd}", os.O_RDONLY | os.O_CLOEXEC)
    try:
        data = os.read(rfd, 4096)
    finally:
        os.close(rfd)
    for line in data.split(b"\n"):
        if line.startswith(b"mnt_id:"):
            return int(line.split(b":", 1)[1])
    raise oserror(f"namespaces: no mnt_id in /proc/self/fdinfo/{fd}", errno.EIO)


def _remount_flags(fd: int) -> int:
    """MS_RDONLY|MS_NOSUID|MS_NODEV plus the noexec/atime flags the mount has:
    a remount inside a user namespace must keep locked atime flags."""
    f = os.fstatvfs(fd).f_flag
    flags = MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV
    if f & ST_NOEXEC:
        flags |= MS_NOEXEC
    if f & ST_NOATIME:
        flags |= MS_NOATIME
    if f & ST_NODIRATIME:
        flags |= MS_NODIRATIME
    if f & ST_RELATIME:
        flags |= MS_RELATIME
    if not f & (ST_NOATIME | ST_RELATIME):
        flags |= MS_STRICTATIME
    return flags


def _open_below(base_fd: int, rel: tuple[str, ...], shown: str) -> tuple[int, int]:
    """(parent fd, target fd) for rel below base_fd, never following a symlink."""
    cur = os.dup(base_fd)
    try:
        for comp in rel[:-1]:
            try:
                nxt = os.open(comp, _OPEN_DIR, dir_fd=cur)
            except OSError as e:
                raise oserror(f"namespaces: open {shown} (at {comp!r})", e.errno) from None
            os.close(cur)
            cur = nxt
        try:
            fd = os.open(rel[-1], _OPEN_ANY, dir_fd=cur)
        except OSError as e:
            raise oserror(f"namespaces: open {shown}", e.errno) from None
        return cur, fd
    except BaseException:
        os.close(cur)
        raise


def _apply_one(base_fd: int, base_path: str, m: Mount) -> None:
    shown = base_path.rstrip("/") + "/" + "/".join(m.rel)
    parent, fd = _open_below(base_fd, m.rel, shown)
    fd2 = -1
    try:
        st = os.fstat(fd)
        if stat.S_ISLNK(st.st_mode):
            raise oserror(f"namespaces: {shown} is a symlink", errno.ELOOP)
        if (st.st_dev, st.st_ino) != (m.dev, m.ino) or stat.S_ISDIR(st.st_mode) != m.is_dir:
            raise oserror(f"namespaces: {shown} changed since the supervisor looked at it",
                          errno.ESTALE)
        under = mount_id(parent)
        proc = f"/proc/self/fd/{fd}"
        _sys_mount(proc, proc, MS_BIND | (0 if m.readonly else MS_REC), f"bind {shown}")
        # The fd still names the covered inode; re-open by name to reach the new mount.
        try:
            fd2 = os.open(m.rel[-1], _OPEN_ANY, dir_fd=parent)
        except OSError as e:
            raise oserror(f"namespaces: re-open {shown}", e.errno) from None
        st2 = os.fstat(fd2)
        if (st2.st_dev, st2.st_ino) != (m.dev, m.ino) or mount_id(fd2) == under:
            raise oserror(f"namespaces: bind {shown}: the new mount is not where it should be",
                          errno.EIO)
        if m.readonly:
            proc2 = f"/proc/self/fd/{fd2}"
            _sys_mount(None, proc2, _remount_flags(fd2), f"remount {shown} read-only")
            if not os.fstatvfs(fd2).f_flag & ST_RDONLY:
                raise oserror(f"namespaces: {shown} is still writable after the remount",
                              errno.EIO)
    finally:
        os.close(fd)
        os.close(parent)
        if fd2 >= 0:
            os.close(fd2)


def apply(plan: Plan) -> int:
    """Step 3 and 4: every planned bind at every base. Returns the count."""
    n = 0
    for b in plan.bases:
        try:
            bfd = os.open(b.path, _O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as e:
            raise oserror(f"namespaces: open {b.path}", e.errno) from None
        try:
            st = os.fstat(bfd)
            if (st.st_dev, st.st_ino) != (b.dev, b.ino):
                raise oserror(f"namespaces: {b.path} is no longer the workdir", errno.ESTALE)
            for m in plan.mounts:
                _apply_one(bfd, b.path, m)
                n += 1
        finally:
            os.close(bfd)
    return n


# --- supervisor side: every path the workdir can be reached through ---------

def reachable_paths(workdir: str,
                    mountinfo: str = "/proc/self/mountinfo") -> tuple[tuple[str, ...], bool]:
    """(paths, complete): absolute paths at which the workdir's directory is
    visible in this mount namespace, the workdir itself first.

    Another mount of the same filesystem (a bind mount of a parent, a second
    mount of the device) exposes the same inodes under another path, where a
    read-only bind at the workdir path would not apply; the plan repeats its
    binds there.  complete=False when the mount holding the workdir cannot be
    identified (then the caller must not rely on the binds being the only way
    to the protected files).
    """
    workdir = os.path.realpath(workdir)
    st = os.stat(workdir)
    try:
        with open(mountinfo, encoding="utf-8", errors="surrogateescape") as f:
            lines = f.read().splitlines()
    except OSError:
        return (workdir,), False
    mounts = []
    for line in lines:
        parts = line.split(" ")
        try:
            sep = parts.index("-")
        except ValueError:
            continue
        if sep < 5:
            continue
        mounts.append((parts[2], unescape(parts[3]), unescape(parts[4])))  # dev, root, mountpoint
    best = None
    for dev, root, mp in mounts:
        if workdir == mp or workdir.startswith(mp.rstrip("/") + "/"):
            if best is None or len(mp) >= len(best[2]):
                best = (dev, root, mp)  # the last (topmost) of equal mount points wins
    if best is None:
        return (workdir,), False
    dev, root, mp = best
    inner = workdir[len(mp.rstrip("/")):] or "/"
    fsrel = os.path.normpath(root.rstrip("/") + "/" + inner.lstrip("/"))
    out, complete = [workdir], True
    for d2, root2, mp2 in mounts:
        if d2 != dev or (root2, mp2) == (root, mp):
            continue
        r2 = root2.rstrip("/")
        if fsrel != root2 and not fsrel.startswith(r2 + "/") and root2 != "/":
            continue
        cand = os.path.normpath(mp2.rstrip("/") + "/" + fsrel[len(r2):].lstrip("/"))
        try:
            cand = os.path.realpath(cand)
            cst = os.stat(cand)
        except OSError:
            continue  # covered by another mount, or gone: not reachable there
        if (cst.st_dev, cst.st_ino) == (st.st_dev, st.st_ino) and cand not in out:
            out.append(cand)
    return tuple(out), complete
