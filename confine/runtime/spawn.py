"""pid 1 starts the agent with posix_spawn(3): a vfork and an exec.

A fork of pid 1 (a copy of the launcher's Python, tens of megabytes) copies its
page tables, and the exec that follows throws the copy away: about 3 ms of each
run. posix_spawn shares pid 1's memory until the exec instead, and the agent
starts as an exec from pid 1 would leave it: every handled signal back to its
default, ignored ones still ignored, the launcher's signal mask, every
descriptor without close-on-exec. One thing more is needed: the C library's
spawn sets its two internal signals (glibc's SIGCANCEL and SIGSETXID, 32 and
33) to SIG_IGN in the new process, which an exec would not, and which the new
program would keep; they are asked back to SIG_DFL (POSIX_SPAWN_SETSIGDEF).
Python's os.posix_spawn cannot name them (sigaddset refuses them), so the
call is made here through ctypes, resolved at import: after the Landlock step
the child can open none of confine's files.
"""
from __future__ import annotations

import ctypes
import os
import signal
from collections.abc import Iterable, Mapping, Sequence

from ..kernel.libc import libc

_SETSIGDEF, _SETSIGMASK = 0x04, 0x08          # <spawn.h>, glibc and musl alike
_INTERNAL = (32, 33)                           # glibc's SIGCANCEL, SIGSETXID
_WORDS = 1024 // (8 * ctypes.sizeof(ctypes.c_ulong))
_Sigset = ctypes.c_ulong * _WORDS              # sigset_t: a bit per signal, bit N-1 for N
_ATTR_SIZE = 1024                              # more than any posix_spawnattr_t (glibc: 336)

try:
    _init = libc.posix_spawnattr_init
    _destroy = libc.posix_spawnattr_destroy
    _setflags = libc.posix_spawnattr_setflags
    _setsigmask = libc.posix_spawnattr_setsigmask
    _setsigdefault = libc.posix_spawnattr_setsigdefault
    _spawn = libc.posix_spawn
    _setflags.argtypes = [ctypes.c_void_p, ctypes.c_short]
    AVAILABLE = True
except AttributeError:
    AVAILABLE = False


def _sigset(signals: Iterable[int]) -> ctypes.Array[ctypes.c_ulong]:
    s = _Sigset()
    bits = 8 * ctypes.sizeof(ctypes.c_ulong)
    for n in signals:
        s[(n - 1) // bits] |= 1 << ((n - 1) % bits)
    return s


def spawn(path: str, argv: Sequence[str], env: Mapping[str, str],
          mask: Iterable[signal.Signals | int]) -> int:
    """The new process's pid; OSError (the exec's own errno) if it could not start."""
    attr = ctypes.create_string_buffer(_ATTR_SIZE)
    rc = _init(attr)
    if rc:
        raise OSError(rc, os.strerror(rc))
    try:
        for rc in (_setflags(attr, _SETSIGDEF | _SETSIGMASK),
                   _setsigmask(attr, ctypes.byref(_sigset(int(s) for s in mask))),
                   _setsigdefault(attr, ctypes.byref(_sigset(_INTERNAL)))):
            if rc:
                raise OSError(rc, os.strerror(rc))
        args = (ctypes.c_char_p * (len(argv) + 1))(*[_c(a) for a in argv], None)
        envp = (ctypes.c_char_p * (len(env) + 1))(
            *[_c(_name(k)) + b"=" + _c(v) for k, v in env.items()], None)
        pid = ctypes.c_int()
        rc = _spawn(ctypes.byref(pid), _c(path), None, attr, args, envp)
        if rc:
            raise OSError(rc, os.strerror(rc), path)
        return pid.value
    finally:
        _destroy(attr)


def _c(text: str) -> bytes:
    """As os.execve takes it: a string with a NUL byte is refused (ValueError), never
    cut short there as a C string would be (another command than the one asked)."""
    b = os.fsencode(text)
    if b"\0" in b:
        raise ValueError("embedded null byte")
    return b


def _name(key: str) -> str:
    if not key or "=" in key[1:]:          # os.execve's rule
        raise ValueError("illegal environment variable name")
    return key
