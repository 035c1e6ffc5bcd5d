"""The notifications the broker holds, in memory shared with the supervisor.

Where the broker receives the agent's notifications itself (broker.py), each
one it took from the kernel is in the kernel's "sent" state: only an answer
ends the agent's wait for it. If the broker dies (killed, a bug), nothing in
the kernel answers those calls, and the supervisor, which still holds the
listener, cannot list them. So the broker writes every notification id it
holds into a slot of this table (a memfd the supervisor made and sent with
the listener, mapped by both: a store, no system call, per call) and clears
the slot once the call is answered or handed on; a high-water mark keeps the
newest id it received. When the broker's socket hangs up, the supervisor
answers every id still in a slot, and the ids just above the mark (the kernel
numbers a filter's notifications one after another, so a call received but
not yet written down is among them), with an error: the agent's call fails,
it never hangs and never proceeds unjudged.

Threat: the broker is confine's own process (not dumpable, in the agent's
Landlock domain) and already holds the listener, so nothing it writes here
gives it more than it has; a wrong id only makes the supervisor answer a call
that was not waiting (refused by the kernel) or fail one with an error.
"""
from __future__ import annotations

import ctypes
import errno
import mmap
import os
import threading

SLOTS = 256         # calls the broker holds at once; past it, it hands calls on
AHEAD = 64          # ids above the high-water mark checked at the broker's death
# slot 0 the mark, 1..SLOTS the ids, then per slot the errno its call gets (0: EIO)
_SIZE = 8 * (2 * SLOTS + 1)


def create() -> int:
    """The table's descriptor, zeroed (for the supervisor to map and send)."""
    fd = os.memfd_create("confine-inflight", os.MFD_CLOEXEC)
    try:
        os.ftruncate(fd, _SIZE)
    except OSError:
        os.close(fd)
        raise
    return fd


class Table:
    """One mapping of the table: slot 0 is the high-water mark, the rest ids
    (0: free)."""

    def __init__(self, fd: int) -> None:
        self.map = mmap.mmap(fd, _SIZE)
        self.words = (ctypes.c_uint64 * (2 * SLOTS + 1)).from_buffer(self.map)
        self.free = list(range(SLOTS, 0, -1))
        self.lock = threading.Lock()

    # -- the broker's side

    def hold(self, nid: int) -> int:
        """Write nid down; its slot, or 0 if none is free (the caller hands the
        call on at once and then forgets it)."""
        words = self.words
        words[0] = nid
        with self.lock:
            if not self.free:
                return 0
            slot = self.free.pop()
        words[slot] = nid
        return slot

    def lose_as(self, slot: int, err: int) -> None:
        """The errno the call in `slot` gets should the broker die (a unix
        connect waiting for an accept: ECONNREFUSED, as the supervisor's own
        requests give; every other call EIO)."""
        if slot:
            self.words[SLOTS + slot] = err

    def drop(self, slot: int) -> None:
        """The call in `slot` was answered (or handed on)."""
        if slot:
            self.words[slot] = 0
            self.words[SLOTS + slot] = 0
            with self.lock:
                self.free.append(slot)

    # -- the supervisor's side

    def held(self) -> dict[int, int]:
        """Every id the broker may hold, with the errno its call gets: the
        slots, and the ids just above the mark (EIO). Only ECONNREFUSED is
        taken from the broker's side, anything else is EIO."""
        words = self.words
        ids: dict[int, int] = {}
        mark = words[0]
        if mark:
            ids.update(((mark + k) & 0xFFFFFFFFFFFFFFFF, errno.EIO) for k in range(AHEAD + 1))
        for i in range(1, SLOTS + 1):
            if words[i]:
                ids[words[i]] = errno.ECONNREFUSED if words[SLOTS + i] == errno.ECONNREFUSED \
                    else errno.EIO
        return ids
