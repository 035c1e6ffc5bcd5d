"""The supervisor's waiting: reap, forward signals, kill what the agent left.

The supervisor never runs agent code. It forwards signals that were sent to
it (not those the terminal already delivered to the whole process group),
reaps, kills whatever the agent left behind, and reports the exit status.
"""
from __future__ import annotations

import os
import signal

FORWARD = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT,
           signal.SIGUSR1, signal.SIGUSR2, signal.SIGWINCH)

SI_USER, SI_QUEUE, SI_TKILL = 0, -1, -6


def status_of(st: int) -> int:
    if os.WIFSIGNALED(st):
        return 128 + os.WTERMSIG(st)
    return os.WEXITSTATUS(st)


def wait_for(pid: int) -> int:
    """Wait for pid (our child) while reaping re-parented orphans and forwarding
    signals sent to us; returns its status (128+N for signal N)."""
    sigset = set(FORWARD) | {signal.SIGCHLD}
    while True:
        try:
            wpid, st = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return 125
        if wpid == pid:
            return status_of(st)
        info = signal.sigwaitinfo(sigset)
        if info.si_signo == signal.SIGCHLD:
            while True:
                try:
                    other, ost = os.waitpid(-1, os.WNOHANG)
                except ChildProcessError:
                    break
                if other == 0:
                    break
                if other == pid:
                    return status_of(ost)
            continue
        # Terminal-generated signals (si_code > 0) already reached the agent,
        # which shares our process group; forward only those sent to us.
        if info.si_code in (SI_USER, SI_QUEUE, SI_TKILL) or info.si_code < 0:
            try:
                os.kill(pid, info.si_signo)
            except ProcessLookupError:
                pass


def children_of(pid: int) -> list[int]:
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                data = f.read()
        except OSError:
            continue
        rest = data[data.rfind(b")") + 2:].split()
        if len(rest) > 1 and int(rest[1]) == pid:
            out.append(int(name))
    return out


def kill_leftovers() -> None:
    """Orphans of the agent were re-parented to us (subreaper): kill and reap them."""
    me = os.getpid()
    for _ in range(100):
        kids = children_of(me)
        if not kids:
            break
        for k in kids:
            try:
                os.kill(k, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for k in kids:
            try:
                os.waitpid(k, 0)
            except ChildProcessError:
                pass
