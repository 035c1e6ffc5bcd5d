"""The one reader of small /proc and /sys files (kernel knobs, LSM state)."""
from __future__ import annotations

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
