"""Real-kernel tests for confine.kernel.rlimits.tasks_of: the count RLIMIT_NPROC
is raised by. An overcount would hand the agent more processes than the profile
allows; each case below is a real process of an unused uid, counted or not."""
from __future__ import annotations

import os
import signal
import time

import pytest

from confine.kernel.rlimits import tasks_of

UID = 54321             # no process of the host has it
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: setresuid to another uid")


def _spawn(ruid: int, euid: int, groups: list[int] | None = None, threads: int = 0) -> int:
    """A process with those ids (and `threads` more threads), stopped until killed."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            if groups is not None:
                os.setgroups(groups)
            os.setresuid(ruid, euid, 0 if euid == 0 else euid)
            import threading
            for _ in range(threads):
                threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
            os.write(w, b"x")
            time.sleep(60)
        finally:
            os._exit(0)
    os.close(w)
    assert os.read(r, 1) == b"x"
    os.close(r)
    return pid


@root_only
def test_counts_real_uid_threads_only():
    pids = []
    try:
        assert tasks_of(UID) == 0
        pids.append(_spawn(UID, UID, threads=2))        # 3 tasks
        pids.append(_spawn(UID, 0))                      # real uid counts, not effective: 1
        pids.append(_spawn(0, UID))                      # effective only: not counted
        # a Groups: line longer than one read of the status file comes before Threads:
        pids.append(_spawn(UID, UID, groups=list(range(100000, 103000)), threads=1))   # 2
        assert tasks_of(UID) == 6
    finally:
        for p in pids:
            os.kill(p, signal.SIGKILL)
            os.waitpid(p, 0)
    assert tasks_of(UID) == 0
