"""The broker's side of the undo keeper: one request per file, answered
before the call that changes it is made.

Threat: the broker runs in the agent's Landlock domain and cannot write the
undo area, so it sends the file itself (an O_PATH descriptor) and its
directory to the supervisor, which keeps it (keeper.py). A keeper that is
gone refuses: what cannot be kept is not removed unseen (fail closed).
Imported before the broker's fork (nothing here reads confine's files later).
"""
from __future__ import annotations

import ctypes
import json
import socket
import struct
import threading

from ..kernel.libc import libc

REPLY_MAX = 4096
_STATX_BTIME = 0x800
_AT_EMPTY_PATH = 0x1000


class _Buf(threading.local):
    def __init__(self) -> None:
        self.buf = ctypes.create_string_buffer(256)


_statx = _Buf()


def birth_ns(fd: int) -> int | None:
    """The file's birth time (statx STATX_BTIME, nanoseconds), None where the
    file system does not keep one (then a file counts as old: kept)."""
    try:
        fn = libc.statx
    except AttributeError:
        return None
    buf = _statx.buf
    if fn(ctypes.c_int(fd), b"", ctypes.c_int(_AT_EMPTY_PATH), ctypes.c_uint(_STATX_BTIME),
          buf) != 0:
        return None
    if not struct.unpack_from("<I", buf, 0)[0] & _STATX_BTIME:
        return None
    sec, nsec = struct.unpack_from("<qI", buf, 80)
    return int(sec * 1_000_000_000 + nsec)
GONE = "the supervisor's undo keeper is gone: refused (nothing could be kept)"


class KeepClient:
    """One request at a time (the keeper answers in order)."""

    def __init__(self, sock: socket.socket, started_ns: int = 0):
        self.sock = sock
        self.lock = threading.Lock()
        # the keeper's start: a file born after it is the run's own, not asked about
        # (the keeper judges it the same way; this spares the round trip)
        self.started_ns = started_ns

    def _ask(self, msg: dict[str, str], fds: list[int]) -> tuple[str | None, bool]:
        data = json.dumps(msg).encode()
        with self.lock:
            try:
                socket.send_fds(self.sock, [data], fds)
                rep = self.sock.recv(REPLY_MAX)
            except OSError:
                return GONE, False
        if rep in (b"ok", b"kept"):
            return None, rep == b"kept"
        if not rep.startswith(b"deny:"):
            return GONE, False
        # once refused, every file is asked about: what a refusal put back is
        # newly born but the start's (the keeper knows which)
        self.started_ns = 0
        return rep[5:].decode("utf-8", "replace") or GONE, False

    def keep(self, op: str, rel: str, victim: int, parent: int) -> tuple[str | None, bool]:
        """(None, kept now) to go on; (why, False) when the call is refused.
        Kept now: this call's change is the path's first (forget it if the
        call then fails). The caller asks made_in_run first."""
        return self._ask({"op": op, "path": rel}, [victim, parent])

    def made_in_run(self, fd: int) -> bool:
        """The file was born after the keeper started: the run's own, not kept
        (the keeper judges it the same way; this spares the round trip)."""
        if not self.started_ns:
            return False
        born = birth_ns(fd)
        return born is not None and born >= self.started_ns

    def forget(self, rel: str) -> None:
        """The call failed after its file was kept."""
        self._ask({"op": "forget", "path": rel}, [])
