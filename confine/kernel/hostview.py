"""The agent's view of the host, in its private mount namespace.

Landlock cannot restrict chmod, chown, utime or setxattr, and it grants
/dev/shm and /dev/pts as whole shared directories. So, after
namespaces.enter() and make_private(), the child:

* binds each writable path (workdir, private tmp, profile `write`) onto
  itself, then remounts every other mount read-only: attribute changes
  outside the writable paths fail with EROFS (below Landlock ABI 5, nodev too,
  but for the device grants: Landlock cannot restrict ioctls on devices there);
* mounts a private tmpfs on /dev/shm (POSIX shared memory and semaphores of
  the agent only);
* mounts a new devpts instance on /dev/pts (and its ptmx on /dev/ptmx): the
  agent can open pseudo-terminals it creates, never another terminal of the
  user. Its own terminal stays reachable through the inherited fds and
  /dev/tty.

Runs in the forked child between fork and exec, single-threaded.
"""
from __future__ import annotations

import errno
import os

from ..paths import is_under
from .libc import oserror
from .mounts import (
    MOUNT_ATTR_NODEV,
    MOUNT_ATTR_RDONLY,
    MS_BIND,
    MS_NOATIME,
    MS_NODEV,
    MS_NODIRATIME,
    MS_NOEXEC,
    MS_NOSUID,
    MS_RDONLY,
    MS_REC,
    MS_RELATIME,
    MS_REMOUNT,
    MS_STRICTATIME,
    ST_NOATIME,
    ST_NODEV,
    ST_NODIRATIME,
    ST_NOEXEC,
    ST_NOSUID,
    ST_RDONLY,
    ST_RELATIME,
    mount,
    mount_setattr,
    move_mount,
    open_tree,
    unescape,
)

# statvfs f_flag bit -> the mount flag a remount must repeat
ST = {ST_RDONLY: MS_RDONLY, ST_NOSUID: MS_NOSUID, ST_NODEV: MS_NODEV,
      ST_NOEXEC: MS_NOEXEC, ST_NOATIME: MS_NOATIME, ST_NODIRATIME: MS_NODIRATIME,
      ST_RELATIME: MS_RELATIME}


def _keep_flags(path: str) -> int:
    """The per-mount flags a remount must keep (a user namespace locks them)."""
    f = os.statvfs(path).f_flag
    out = 0
    for st, ms in ST.items():
        if f & st:
            out |= ms
    if not f & (ST_NOATIME | ST_RELATIME):
        out |= MS_STRICTATIME
    return out & ~MS_RDONLY


# Kernel interfaces rather than places files live; a remount refusal there is
# not a way to change the user's files.
PSEUDO = {"proc", "sysfs", "cgroup", "cgroup2", "bpf", "tracefs", "debugfs", "securityfs",
          "pstore", "configfs", "fusectl", "mqueue", "hugetlbfs", "binfmt_misc", "autofs",
          "efivarfs", "nsfs", "devpts", "rpc_pipefs", "selinuxfs"}


def _mounts() -> list[tuple[str, str]]:
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            out.append((unescape(left.split()[4]), right.split()[0]))
    return out


def readonly_except(writable: list[str], devices: list[str] | None = None) -> None:
    """Bind each writable path onto itself, then remount every other mount read-only.

    With `devices` (Landlock below ABI 5, which cannot restrict device ioctls), every
    mount is made nodev as well except binds of those device grants: a device node
    anywhere else (a copied root filesystem in the workdir, a node under a read
    grant) cannot be opened at all, so no ioctl can reach its driver."""
    if not _readonly_by_tree(writable, devices):
        _readonly_by_mount(writable, devices)
    nodev = devices is not None
    root = os.statvfs("/").f_flag
    if not root & ST_RDONLY or (nodev and not root & ST_NODEV):
        raise oserror("namespaces: / is still writable after making the host read-only",
                      errno.EIO)
    for w in writable:
        if os.statvfs(w).f_flag & ST_RDONLY:
            raise oserror(f"namespaces: {w} became read-only", errno.EIO)


def _readonly_by_tree(writable: list[str], devices: list[str] | None) -> bool:
    """readonly_except in a few calls whatever the number of mounts (a host with
    hundreds pays one remount each otherwise): detached copies of the writable
    trees and device binds (open_tree) are taken first, then every mount of the
    tree, covered ones included, is made read-only (and nodev) at once
    (mount_setattr: all or none), then the copies are attached where they were,
    as the binds of the mount-by-mount way are. False, with nothing changed,
    where the kernel (or a container's filter) refuses the new mount API."""
    nodev = devices is not None
    trees: list[tuple[str, int, bool]] = []        # (path, detached copy, is a device)
    try:
        try:
            for w in writable:
                trees.append((w, open_tree(w, f"copy {w}"), False))
            for d in devices or ():
                if os.path.exists(d):
                    trees.append((d, open_tree(d, f"copy device {d}"), True))
            mount_setattr("/", MOUNT_ATTR_RDONLY | (MOUNT_ATTR_NODEV if nodev else 0),
                          "make every mount read-only")
        except OSError:
            return False        # nothing attached or changed yet: the other way decides
        for path, fd, device in trees:
            if device:
                if not any(is_under(path, w) for w in writable):
                    mount_setattr(fd, MOUNT_ATTR_RDONLY, f"device {path} read-only")
            elif nodev:
                mount_setattr(fd, MOUNT_ATTR_NODEV, f"{path} nodev")
        for path, fd, device in trees:
            move_mount(fd, path, f"bind {'device ' if device else ''}{path}"
                       + ("" if device else " read-write"))
    finally:
        for _, fd, _ in trees:
            os.close(fd)
    return True


def _readonly_by_mount(writable: list[str], devices: list[str] | None) -> None:
    """The same with mount(2): a bind per writable path, a remount per mount."""
    for w in writable:
        mount(w, w, None, MS_BIND | MS_REC, None, f"bind {w} read-write")
    kept: list[str] = []
    for d in devices or ():
        if os.path.exists(d):
            mount(d, d, None, MS_BIND | MS_REC, None, f"bind device {d}")
            kept.append(d)
    for mp, fstype in sorted(set(_mounts()), key=lambda m: len(m[0])):
        rw = any(is_under(mp, w) for w in writable)
        try:
            have = os.statvfs(mp).f_flag
            flags = _keep_flags(mp)
        except OSError:
            continue  # hidden under another mount or gone: not reachable
        add = 0
        if not rw and not have & ST_RDONLY:
            add |= MS_RDONLY
        if devices is not None and not have & ST_NODEV and not any(is_under(mp, d) for d in kept):
            add |= MS_NODEV
        if not add:
            continue
        if have & ST_RDONLY:
            flags |= MS_RDONLY
        try:
            mount(None, mp, None, MS_REMOUNT | MS_BIND | flags | add, None,
                  f"remount {mp} {'nodev' if rw else 'read-only'}")
        except OSError:
            if fstype in PSEUDO:
                continue
            now = os.statvfs(mp).f_flag
            if (add & MS_RDONLY and not now & ST_RDONLY) or (add & MS_NODEV
                                                            and not now & ST_NODEV):
                raise


def private_shm(size: int | None = None) -> bool:
    if not os.path.isdir("/dev/shm"):
        return False
    mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV,
          f"mode=1777,size={'50%' if size is None else size}",
          "mount a private tmpfs on /dev/shm")
    return True


def private_pts() -> bool:
    if not os.path.isdir("/dev/pts"):
        return False
    mount("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC,
          "newinstance,ptmxmode=0666,mode=0620", "mount a private devpts on /dev/pts")
    if os.path.exists("/dev/ptmx"):
        mount("/dev/pts/ptmx", "/dev/ptmx", None, MS_BIND, None,
              "bind /dev/pts/ptmx on /dev/ptmx")
    return True


def private_proc() -> None:
    """A procfs of the new pid namespace: the agent sees its own processes only
    (no command lines of the user's other programs)."""
    mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None,
          "mount /proc of the new pid namespace")
