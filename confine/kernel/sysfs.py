"""The one reader of small /proc and /sys files (kernel knobs, LSM state)."""
from __future__ import annotations

import signal

from ..record import NamedTuple


def read_text(path: str, *, strip: bool = False) -> str | None:
    """The file's text, or None if it cannot be read (absent, not permitted)."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return None
    return text.strip() if strip else text


class ProcStat(NamedTuple):
    state: str
    ppid: int
    pgrp: int
    start: int          # start time in clock ticks since boot: with the pid, one process


def proc_stat(pid: int) -> ProcStat | None:
    """Fields of /proc/PID/stat (a thread id works too), or None if it is gone.
    The command name may hold spaces and ')': the fields follow its last ')'."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    rest = data[data.rfind(b")") + 2:].split()
    try:
        return ProcStat(rest[0].decode(), int(rest[1]), int(rest[2]), int(rest[19]))
    except (IndexError, ValueError):
        return None


def kill_pending(pid: int) -> bool:
    """SIGKILL is queued for the process or thread (or it is gone): it never runs user
    code again."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith((b"ShdPnd:", b"SigPnd:")) and int(line.split()[1], 16) & (
                        1 << (signal.SIGKILL - 1)):
                    return True
    except (OSError, ValueError, IndexError):
        return True
    return False
