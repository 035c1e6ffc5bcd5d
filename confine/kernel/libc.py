"""The one handle on the C library and the one way a failed call becomes OSError.

Every module that calls libc through ctypes imports `libc` from here, so the
library is opened once (no `ctypes.util.find_library`, which spawns
`ldconfig -p`) and errno is always read with use_errno semantics.
"""
from __future__ import annotations

import ctypes
import os

libc = ctypes.CDLL(None, use_errno=True)
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
