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
    "ST_RELATIME", "mount", "unescape",
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
