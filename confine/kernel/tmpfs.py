"""A size-limited tmpfs on the run's private TMPDIR, in the host's mount namespace.

Threat: the private TMPDIR is a directory on the host's /tmp, so an agent can
fill that filesystem (often the root filesystem). Started as root, the
supervisor mounts a tmpfs of the profile's tmp_size there before the child is
forked and detaches it after every agent process is dead. It is mounted in
the host's namespace, not only in the child's, because the supervisor itself
resolves paths under TMPDIR (pathname unix sockets the agent connects to):
both must see the same files.
"""
from __future__ import annotations

import ctypes

from .libc import libc, oserror
from .mounts import MS_NODEV, MS_NOSUID, mount

__all__ = ["mount_tmp", "detach"]

MNT_DETACH = 2
_umount2 = libc["umount2"]
_umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
_umount2.restype = ctypes.c_int


def mount_tmp(path: str, size: int, uid: int, gid: int) -> None:
    mount("confine-tmp", path, "tmpfs", MS_NOSUID | MS_NODEV,
          f"size={size},mode=0700,uid={uid},gid={gid}", f"mount a {size}-byte tmpfs on {path}")


def detach(path: str) -> None:
    ctypes.set_errno(0)
    if _umount2(path.encode(), MNT_DETACH) != 0:
        raise oserror(f"tmpfs: detach {path}")
