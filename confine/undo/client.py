"""The broker's side of the undo keeper: one request per file, answered
before the call that changes it is made.

Threat: the broker runs in the agent's Landlock domain and cannot write the
undo area, so it sends the file itself (an O_PATH descriptor) and its
directory to the supervisor, which keeps it (keeper.py). A keeper that is
gone refuses: what cannot be kept is not removed unseen (fail closed).
Imported before the broker's fork (nothing here reads confine's files later).
"""
from __future__ import annotations

import json
import socket
import threading

REPLY_MAX = 4096
GONE = "the supervisor's undo keeper is gone: refused (nothing could be kept)"


class KeepClient:
    """One request at a time (the keeper answers in order)."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.lock = threading.Lock()

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
        return rep[5:].decode("utf-8", "replace") or GONE, False

    def keep(self, op: str, rel: str, victim: int, parent: int) -> tuple[str | None, bool]:
        """(None, kept now) to go on; (why, False) when the call is refused.
        Kept now: this call's change is the path's first (forget it if the
        call then fails)."""
        return self._ask({"op": op, "path": rel}, [victim, parent])

    def forget(self, rel: str) -> None:
        """The call failed after its file was kept."""
        self._ask({"op": "forget", "path": rel}, [])
