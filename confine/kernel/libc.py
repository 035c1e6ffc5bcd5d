"""The one handle on the C library and the one way a failed call becomes OSError.

Every module that calls libc through ctypes imports `libc` from here, so the
library is opened once (no `ctypes.util.find_library`, which spawns
`ldconfig -p`) and errno is always read with use_errno semantics.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os

libc = ctypes.CDLL(None, use_errno=True)

# ctypes.util.find_library runs `ldconfig -p` (a fork and exec, ~4 ms) on every
# call, and pyseccomp and landlockpy call it three times per start. For exactly
# the libraries they ask for (libc, libseccomp) answer from the usual library
# directories; any other name, or one not found there, takes the original path,
# so a program embedding confine sees find_library unchanged.
_LIB_DIRS = ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu",
             "/usr/lib/aarch64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib")
_original_find_library = ctypes.util.find_library
_found: dict[str, str | None] = {}


_FAST = ("c", "seccomp")
_SONAME = {"seccomp": "libseccomp.so.2"}


def find_library(name: str) -> str | None:
    if name not in _FAST:
        return _original_find_library(name)
    if name not in _found:
        hit = None
        if name == "c" and os.path.exists("/lib/x86_64-linux-gnu/libc.so.6") \
                or name == "c" and os.path.exists("/lib/aarch64-linux-gnu/libc.so.6"):
            hit = "libc.so.6"
        else:
            for d in _LIB_DIRS:
                # libseccomp 2's soname by name: the glob lists the whole directory (~1 ms)
                if os.path.exists(os.path.join(d, _SONAME[name])):
                    hit = _SONAME[name]
                    break
                import glob
                cands = sorted(glob.glob(os.path.join(d, f"lib{glob.escape(name)}.so.[0-9]*")))
                if cands:
                    hit = os.path.basename(cands[0])
                    break
        _found[name] = hit if hit is not None else _original_find_library(name)
    return _found[name]


ctypes.util.find_library = find_library
libc.syscall.restype = ctypes.c_long


def oserror(what: str | None = None, err: int | None = None) -> OSError:
    """OSError for the errno the last ctypes call left (or `err`); `what` names the step."""
    err = ctypes.get_errno() if err is None else err
    msg = os.strerror(err)
    return OSError(err, f"{what}: {msg}" if what else msg)


def check(ret: int, what: str | None = None) -> int:
    """Return ret, or raise oserror(what) when a libc call reported failure (< 0)."""
    if ret < 0:
        raise oserror(what)
    return ret
