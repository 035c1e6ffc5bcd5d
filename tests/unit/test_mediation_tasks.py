"""The supervisor's per-thread cache of /proc/TID/status facts (supervisor.Tasks):
the umask is read afresh on every call, a thread that is gone is never answered
from the cache, and the cache's descriptors stay bounded."""
from __future__ import annotations

import os
import threading
import time

import pytest

from confine.mediation import supervisor


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_facts_match_the_full_parse_and_the_umask_is_never_cached():
    tasks = supervisor.Tasks()
    me = threading.get_native_id()
    old = os.umask(0o027)
    try:
        umask, tgid, tid, pidfd = tasks.facts(me)
        assert (umask, tgid, tid) == supervisor._task_facts(me)
        assert umask == 0o027 and pidfd >= 0
        os.umask(0o077)
        assert tasks.facts(me)[0] == 0o077          # the cached entry, a fresh umask
        assert tasks.facts(me)[1:3] == (tgid, tid)
        # a call that needs none gets a umask that would grant nothing
        assert tasks.facts(me, umask=False) == (0o777, tgid, tid, pidfd)
    finally:
        os.umask(old)


@pytest.mark.parametrize("umask", [True, False])
def test_a_thread_that_is_gone_is_not_answered_from_the_cache(umask):
    """umask: proved by the read through the status file; else by the thread's
    pidfd (readable once the thread is gone)."""
    tasks = supervisor.Tasks()
    got: dict[str, object] = {}
    go = threading.Event()

    def body() -> None:
        tid = threading.get_native_id()
        got["tid"] = tid
        got["facts"] = tasks.facts(tid)
        go.wait(10)

    t = threading.Thread(target=body)
    t.start()
    while "facts" not in got:
        pass
    tid = got["tid"]
    assert isinstance(tid, int) and tid in tasks.by_tid
    assert tasks.facts(tid, umask)[1:3] == got["facts"][1:3]     # alive: from the cache
    go.set()
    t.join()
    while os.path.exists(f"/proc/self/task/{tid}"):   # join returns before the thread is gone
        time.sleep(0.001)
    # the status file kept open reads ESRCH, the pidfd polls readable: no
    # answer from the cache
    with pytest.raises(OSError):
        tasks.facts(tid, umask)
    assert tid not in tasks.by_tid


def test_the_cache_is_bounded_and_closes_what_it_drops():
    tasks = supervisor.Tasks()
    before = _open_fds()
    ready = threading.Barrier(supervisor.Tasks.CAP + 11)
    done = threading.Event()

    def body() -> None:
        ready.wait(10)
        done.wait(10)

    ts = [threading.Thread(target=body) for _ in range(supervisor.Tasks.CAP + 10)]
    for t in ts:
        t.start()
    ready.wait(10)
    try:
        for t in ts:
            assert t.native_id is not None
            tasks.facts(t.native_id)
        assert len(tasks.by_tid) == supervisor.Tasks.CAP
        assert _open_fds() - before <= 2 * supervisor.Tasks.CAP
    finally:
        done.set()
        for t in ts:
            t.join()
    held = [fd for e in tasks.by_tid.values() for fd in e[:2]]
    assert len(held) == 2 * supervisor.Tasks.CAP
    tasks.clear()                   # what the mediator does when its run ends
    assert not tasks.by_tid
    for fd in held:                 # nothing else opened a descriptor meanwhile
        with pytest.raises(OSError):
            os.fstat(fd)


def test_status_parsing():
    raw = (b"Name:\tx\nUmask:\t0002\nState:\tS\nTgid:\t10\nNStgid:\t10\t3\nPid:\t11\n"
           b"NSpid:\t11\t4\n")
    assert supervisor._status_umask(raw) == 0o002
    assert supervisor._status_ids(raw, 11) == (3, 4)
    assert supervisor._status_umask(b"Name:\tx\n") == 0o022       # as _task_facts: absent
    assert supervisor._status_ids(b"Name:\tx\n", 11) == (11, 11)


def test_pidfd_pids_names_the_pidfds_thread_and_never_a_gone_one():
    """supervisor.PidfdPids: the pid behind a forwarded call's pidfd, cached by
    the pidfd's inode (its struct pid). Another thread's pidfd names that
    thread, not a cached one; a thread gone since it was cached gives 0 (its
    pid may be reused), as fdinfo would; a new pidfd of the same thread is
    the same entry (the cache is not keyed by the descriptor)."""
    from confine.kernel import notify
    pids = supervisor.PidfdPids()
    me = threading.get_native_id()
    mine = notify.pidfd_open(me, notify.PIDFD_THREAD)
    go, tid = threading.Event(), []
    t = threading.Thread(target=lambda: (tid.append(threading.get_native_id()), go.wait()))
    t.start()
    while not tid:
        time.sleep(0.001)
    theirs = notify.pidfd_open(tid[0], notify.PIDFD_THREAD)
    again = notify.pidfd_open(me, notify.PIDFD_THREAD)
    try:
        assert pids.pid(mine) == me and pids.pid(mine) == me          # read, then cached
        assert pids.pid(theirs) == tid[0] != me
        assert pids.pid(again) == me and len(pids.by_ino) == 2
        go.set()
        t.join()
        for _ in range(1000):       # reaped a moment after join() returns
            if supervisor._pidfd_pid(theirs) <= 0:
                break
            time.sleep(0.001)
        assert supervisor._pidfd_pid(theirs) <= 0
        assert pids.pid(theirs) == 0 and pids.pid(mine) == me
    finally:
        go.set()
        for fd in (mine, theirs, again):
            os.close(fd)
