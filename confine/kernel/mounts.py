"""mount(2), its flags, and reading /proc/self/mountinfo.

The one mount(2) wrapper of confine: namespaces.py (read-only binds over the
protected workdir paths) and hostview.py (read-only host, private /dev/shm,
/dev/pts, /proc) both mount through it, in the forked child between fork and
exec. A failed mount raises OSError naming the step, and the child refuses to
exec (fail closed).
"""
from __future__ import annotations

import ctypes
import os

from .libc import libc, oserror

__all__ = [
    "MS_RDONLY", "MS_NOSUID", "MS_NODEV", "MS_NOEXEC", "MS_REMOUNT", "MS_NOATIME",
    "MS_NODIRATIME", "MS_BIND", "MS_REC", "MS_PRIVATE", "MS_RELATIME", "MS_STRICTATIME",
    "ST_RDONLY", "ST_NOSUID", "ST_NODEV", "ST_NOEXEC", "ST_NOATIME", "ST_NODIRATIME",
    "ST_RELATIME", "mount", "unescape", "MOUNT_ATTR_RDONLY", "MOUNT_ATTR_NODEV", "open_tree",
    "move_mount", "mount_setattr", "casefolded",
]

# <linux/mount.h>: mount(2) flags.
MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_NOATIME = 1024
MS_NODIRATIME = 2048
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MS_RELATIME = 1 << 21
MS_STRICTATIME = 1 << 24

# statvfs(3) f_flag bits: what a mount already has (a remount must repeat them).
ST_RDONLY = 1
ST_NOSUID = 2
ST_NODEV = 4
ST_NOEXEC = 8
ST_NOATIME = 1024
ST_NODIRATIME = 2048
ST_RELATIME = 4096

# Own function object: the prototype stays private to this module.
_mount = libc["mount"]
_mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong,
                   ctypes.c_void_p]
_mount.restype = ctypes.c_int


def _enc(v: str | None) -> bytes | None:
    return None if v is None else os.fsencode(v)


def mount(src: str | None, tgt: str, fstype: str | None, flags: int, data: str | None,
          step: str) -> None:
    """mount(2); raises OSError naming `step`."""
    ctypes.set_errno(0)
    if _mount(_enc(src), _enc(tgt), _enc(fstype), flags, _enc(data)) != 0:
        raise oserror(f"namespaces: {step}")


# The new mount API (Linux 5.2; mount_setattr 5.12): one call changes a whole
# tree. x86_64 and aarch64 share these numbers (the unified syscall table).
_SYS_OPEN_TREE, _SYS_MOVE_MOUNT, _SYS_MOUNT_SETATTR = 428, 429, 442
OPEN_TREE_CLONE = 1
AT_EMPTY_PATH = 0x1000
AT_RECURSIVE = 0x8000
MOVE_MOUNT_F_EMPTY_PATH = 0x4
MOUNT_ATTR_RDONLY = 0x1
MOUNT_ATTR_NODEV = 0x4


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


def open_tree(path: str, step: str) -> int:
    """A detached copy of the mount tree at path, submounts included (a recursive
    bind not yet attached anywhere); its fd. Raises OSError naming `step`."""
    ctypes.set_errno(0)
    fd = libc.syscall(ctypes.c_long(_SYS_OPEN_TREE), ctypes.c_int(-100), os.fsencode(path),
                      ctypes.c_uint(OPEN_TREE_CLONE | os.O_CLOEXEC | AT_RECURSIVE))
    if fd < 0:
        raise oserror(f"namespaces: {step}")
    return int(fd)


def move_mount(fd: int, path: str, step: str) -> None:
    """Attach the detached tree fd at path."""
    ctypes.set_errno(0)
    if libc.syscall(ctypes.c_long(_SYS_MOVE_MOUNT), ctypes.c_int(fd), b"", ctypes.c_int(-100),
                    os.fsencode(path), ctypes.c_uint(MOVE_MOUNT_F_EMPTY_PATH)) != 0:
        raise oserror(f"namespaces: {step}")


def mount_setattr(path: str | int, attr_set: int, step: str) -> None:
    """Set attributes on every mount of the tree at path (or fd) at once; the
    kernel changes all of them or none."""
    attr = _MountAttr(attr_set, 0, 0, 0)
    dfd, name, flags = (-100, os.fsencode(path), AT_RECURSIVE) if isinstance(path, str) \
        else (path, b"", AT_RECURSIVE | AT_EMPTY_PATH)
    ctypes.set_errno(0)
    if libc.syscall(ctypes.c_long(_SYS_MOUNT_SETATTR), ctypes.c_int(dfd), name,
                    ctypes.c_uint(flags), ctypes.byref(attr),
                    ctypes.c_size_t(ctypes.sizeof(attr))) != 0:
        raise oserror(f"namespaces: {step}")


def unescape(s: str) -> str:
    """A mountinfo field with the kernel's octal escapes (\\040 for a space, ...) undone."""
    out, i = [], 0
    while i < len(s):
        if s[i] == "\\" and i + 3 < len(s) and s[i + 1:i + 4].isdigit():
            out.append(chr(int(s[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(s[i])
            i += 1
    return "".join(out)


FS_IOC_GETFLAGS = 0x80086601
FS_CASEFOLD_FL = 0x40000000


def casefolded(path: str) -> bool:
    """Whether the directory compares names without case (ext4, f2fs, tmpfs casefold:
    `.ENVRC` opens `.envrc`). Raises OSError where it cannot be told (the caller
    decides); a filesystem without inode flags (ENOTTY) has no such directory."""
    import errno
    import fcntl
    import struct
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        buf = fcntl.ioctl(fd, FS_IOC_GETFLAGS, b"\0" * 8)
    except OSError as e:
        if e.errno in (errno.ENOTTY, errno.EOPNOTSUPP, errno.EINVAL):
            return False
        raise
    finally:
        os.close(fd)
    return bool(struct.unpack("=i", buf[:4])[0] & FS_CASEFOLD_FL)
