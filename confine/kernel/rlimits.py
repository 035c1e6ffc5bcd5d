"""Resource limits of the agent where no cgroup of the run sets them: setrlimit(2).

Threat: without limits an agent can start processes up to the host's limit,
allocate memory until the host swaps, keep descriptors without bound, and
write one file until the disk is full. An rlimit is per process (memory,
descriptors, file size) or, for processes, per user: RLIMIT_NPROC counts
every task of the real uid, so the run's allowance is added to the tasks that
uid already has when the run starts. Limits are only ever lowered (never
above the hard limit the launcher has). Runs in the forked child before the
namespaces and the identity switch, so the count is the host's.
"""
from __future__ import annotations

import os
import resource

__all__ = ["tasks_of", "lower", "apply"]


def tasks_of(uid: int, proc: str = "/proc") -> int:
    """Tasks (threads) whose real uid is uid, as RLIMIT_NPROC counts them. Each
    status is read with one read(2) and searched as bytes: this runs in the
    child, on the way of every run, once per process of the host."""
    n = 0
    for name in os.listdir(proc):
        if name.isdigit():
            n += _real_uid_threads(f"{proc}/{name}", uid)
    return n


def _real_uid_threads(path: str, uid: int) -> int:
    """The thread count of the process at path if its real uid is uid, else 0
    (and 0 for one gone meanwhile)."""
    try:
        fd = os.open(f"{path}/status", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return 0
    try:
        data = os.read(fd, 8192)
        while b"\nSigQ:" not in data:     # past Threads: (a long Groups: line before it)
            more = os.read(fd, 65536)
            if not more:
                break
            data += more
    except OSError:
        return 0
    finally:
        os.close(fd)
    try:
        i = data.index(b"\nUid:") + 5
        real = int(data[i:data.index(b"\n", i)].split()[0])
        if real != uid:
            return 0
        j = data.index(b"\nThreads:") + 9
        return int(data[j:data.index(b"\n", j)])
    except (ValueError, IndexError):
        return 0


def lower(which: int, value: int) -> int:
    """Soft and hard limit set to value, or to the hard limit if that is lower."""
    _, hard = resource.getrlimit(which)
    v = value if hard == resource.RLIM_INFINITY else min(value, hard)
    resource.setrlimit(which, (v, v))
    return v


def apply(*, uid: int, processes: int | None, memory: int | None, open_files: int | None,
          file_size: int | None) -> dict[str, int]:
    """Every limit that is set; returns the values applied, by rlimit name."""
    out = {}
    if processes is not None:
        out["RLIMIT_NPROC"] = lower(resource.RLIMIT_NPROC, tasks_of(uid) + processes)
    if memory is not None:
        out["RLIMIT_DATA"] = lower(resource.RLIMIT_DATA, memory)
    if open_files is not None:
        out["RLIMIT_NOFILE"] = lower(resource.RLIMIT_NOFILE, open_files)
    if file_size is not None:
        out["RLIMIT_FSIZE"] = lower(resource.RLIMIT_FSIZE, file_size)
    return out
