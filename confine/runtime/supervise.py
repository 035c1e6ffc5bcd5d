"""The supervisor's waiting: reap, forward signals, kill what the agent left.

The supervisor never runs agent code. It forwards signals that were sent to
it (not those the terminal already delivered to the whole process group),
reaps, kills whatever the agent left behind, and reports the exit status.
"""
from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Mapping

from ..kernel import sysfs
from ..record import NamedTuple

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
    return wait_until(pid, None)[0]


def wait_until(pid: int, deadline: float | None) -> tuple[int, bool]:
    """wait_for, and at `deadline` (time.monotonic()) the child is killed
    (SIGKILL; the caller's leftover walk ends the rest): (status, killed)."""
    sigset = set(FORWARD) | {signal.SIGCHLD}
    killed = False
    while True:
        try:
            wpid, st = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return 125, killed
        if wpid == pid:
            return status_of(st), killed
        if deadline is not None and not killed:
            left = deadline - time.monotonic()
            got = signal.sigtimedwait(sigset, left) if left > 0 else None
            if got is None:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                killed = True
                continue
            info = got
        else:
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
                    return status_of(ost), killed
            continue
        # Terminal-generated signals (si_code > 0) already reached the agent,
        # which shares our process group; forward only those sent to us.
        if info.si_code in (SI_USER, SI_QUEUE, SI_TKILL) or info.si_code < 0:
            try:
                os.kill(pid, info.si_signo)
            except ProcessLookupError:
                pass


class Proc(NamedTuple):
    ppid: int
    start: int          # start time in clock ticks: with the pid, names one process for good
    state: str


def scan() -> dict[int, Proc]:
    """Every process on the host (thread-group leaders), from /proc."""
    out: dict[int, Proc] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            p = _stat(int(name))
            if p is not None:
                out[int(name)] = p
    return out


def _stat(pid: int) -> Proc | None:
    st = sysfs.proc_stat(pid)
    return None if st is None else Proc(ppid=st.ppid, start=st.start, state=st.state)


def descendants(root: int, table: Mapping[int, Proc]) -> list[int]:
    """Descendants of root in the table, parents before their children."""
    kids: dict[int, list[int]] = {}
    for pid, p in table.items():
        kids.setdefault(p.ppid, []).append(pid)
    out, todo = [], list(kids.get(root, ()))
    while todo:
        pid = todo.pop(0)
        out.append(pid)
        todo += kids.get(pid, ())
    return out


def children_of(pid: int) -> list[int]:
    return [c for c, p in scan().items() if p.ppid == pid]


# A /proc mounted with hidepid (systemd's ProtectProc=invisible, which confine's own
# exported unit sets) hides a process that made itself non-dumpable (one prctl) from a
# supervisor without CAP_SYS_PTRACE: its stat cannot be read, so no scan finds it or
# what it starts. Such a child is still in this process's children lists; it is
# spared as (pid, HIDDEN) when it is the embedding program's, and otherwise killed
# unseen (_hidden, _Held.hidden), never taken for gone.
HIDDEN = -1


def own_children() -> frozenset[tuple[int, int]]:
    """(pid, start) of this process's children now: an embedding program's own
    children, which kill_leftovers must spare ((pid, HIDDEN): one /proc hides)."""
    me = os.getpid()
    kids = _children_of_self()
    if kids is None:
        return frozenset((c, p.start) for c, p in scan().items() if p.ppid == me)
    out = set()
    for c in kids:
        p = _stat(c)
        if p is None:
            out.add((c, HIDDEN))
        elif p.ppid == me:
            out.add((c, p.start))
    return frozenset(out)


def _no_children(spare: frozenset[tuple[int, int]]) -> bool:
    """This process has no child now but the embedding program's own (spare),
    by the children lists, or where there are none, by one more full scan."""
    kids = _children_of_self()
    if kids is None:
        me = os.getpid()
        table = scan()
        kids = [c for c, p in table.items() if p.ppid == me]
    # a child whose stat cannot be read is there (hidden), unless it is spared as such
    return all((c, p.start) in spare if (p := _stat(c)) is not None else (c, HIDDEN) in spare
               for c in kids)


def _hidden(spare: frozenset[tuple[int, int]]) -> list[int]:
    """This process's children that /proc does not show (HIDDEN), but the
    embedding program's: they can be neither watched nor frozen, only killed."""
    kids = _children_of_self()
    out: list[int] = []
    for c in kids or ():
        if (c, HIDDEN) in spare or _stat(c) is not None:
            continue
        try:
            if os.waitpid(c, os.WNOHANG)[0] == c:
                continue            # dead, and reaped here: a zombie stays hidden too
        except ChildProcessError:
            continue
        out.append(c)
    return out


def _one_thread() -> bool:
    try:
        return len(os.listdir("/proc/self/task")) == 1
    except OSError:
        return False


def _children_of_self() -> list[int] | None:
    """This process's children from /proc/self/task/*/children (each thread's own:
    a child belongs to the thread that forked it), without reading every process
    of the host; None where the kernel has no such file (CONFIG_PROC_CHILDREN)."""
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return None
    out: list[int] = []
    seen_file = False
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/children", "rb") as f:
                out += [int(x) for x in f.read().split()]
            seen_file = True
        except FileNotFoundError:
            continue            # that thread ended meanwhile, or no such file at all
        except (OSError, ValueError):
            return None
    return out if seen_file else None


class _Held:
    """pidfds of the processes being stopped and killed. A pid is only signalled
    through a pidfd opened while /proc still showed the same parent and start
    time as the scan: a pid recycled for another process in between (as root:
    any process of the host) is never signalled."""

    def __init__(self) -> None:
        self.fds: dict[int, tuple[int, int]] = {}     # pid -> (pidfd, start)

    def get(self, pid: int, seen: Proc) -> int | None:
        have = self.fds.get(pid)
        if have is not None:
            if have[1] == seen.start:
                return have[0]
            os.close(have[0])                          # that process is gone; a new one
            del self.fds[pid]
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            return None
        now = _stat(pid)
        if now is None or (now.ppid, now.start) != (seen.ppid, seen.start):
            os.close(fd)
            return None
        self.fds[pid] = (fd, seen.start)
        return fd

    def signal(self, pid: int, seen: Proc, sig: int) -> None:
        fd = self.get(pid, seen)
        if fd is not None:
            try:
                signal.pidfd_send_signal(fd, sig)
            except OSError:
                pass

    @staticmethod
    def hidden(pid: int, sig: int) -> None:
        """Signal a child /proc does not show (_hidden): through a pidfd opened
        while the pid was still among this process's children (only this thread
        reaps them), so a recycled pid is never signalled."""
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            return
        try:
            if pid in (_children_of_self() or ()):
                signal.pidfd_send_signal(fd, sig)
        except OSError:
            pass
        finally:
            os.close(fd)

    def close(self) -> None:
        for fd, _ in self.fds.values():
            os.close(fd)
        self.fds.clear()


def _reap(spare: frozenset[int]) -> None:
    """Reap this process's dead children, except the embedding program's own."""
    _reap_from(scan(), spare)


def _reap_from(table: Mapping[int, Proc], spare: frozenset[int]) -> bool:
    """_reap over a scan already made; whether it reaped any."""
    me, reaped = os.getpid(), False
    for pid, p in table.items():
        if p.ppid == me and p.state in ("Z", "X") and pid not in spare:
            try:
                reaped = os.waitpid(pid, os.WNOHANG)[0] == pid or reaped
            except ChildProcessError:
                pass
    return reaped


FREEZE_SECONDS = 2.0   # then kill anyway: a process in state D cannot stop
STUCK_SECONDS = 10.0   # then give up on processes in the kernel with SIGKILL queued


def kill_leftovers(spare: frozenset[tuple[int, int]] = frozenset(),
                   cgroup_kill: Callable[[], None] | None = None) -> list[int]:
    """Kill every descendant of this process except `spare` (own_children() taken
    before the agent was forked), and return only when a full scan finds none.

    The supervisor is a child subreaper: an agent process whose parent dies is
    re-parented to it (setsid or a new process group changes nothing there), so
    every process the agent started is a descendant until it is dead. First,
    the cgroup of the run (if there is one) is killed as a whole; then the tree
    is frozen with SIGSTOP until two scans in a row find every descendant
    stopped (a stopped process can neither fork nor SIGCONT another), then
    everything is killed, and the walk repeats, with no round limit, until a
    scan finds no descendant at all. Returns the pids still there after
    STUCK_SECONDS that all have SIGKILL queued (stuck in the kernel), else []."""
    me = os.getpid()
    spare_pids = frozenset(p for p, _ in spare)

    def tree() -> tuple[dict[int, Proc], list[int]]:
        table = scan()
        keep = {p for p, s in spare if p in table and table[p].start == s}
        return table, [d for d in descendants(me, {k: v for k, v in table.items()
                                                   if k not in keep})]

    if cgroup_kill is not None:
        cgroup_kill()
    if _one_thread() and _no_children(spare):
        # Every descendant has an ancestor among this process's children (orphans
        # come back to this subreaper, or to a pid namespace's init, a descendant
        # too), and with a single thread they are all in one children list, read
        # at once: none now, none later. With more threads a child could move from
        # a list not yet read to one already read (its thread exits), so the walk
        # below decides, as it always did.
        return []
    held = _Held()
    try:
        quiet, end = 0, time.monotonic() + FREEZE_SECONDS
        while quiet < 2 and time.monotonic() < end:     # freeze
            table, found = tree()
            hidden = _hidden(spare)
            for h in hidden:
                held.hidden(h, signal.SIGKILL)          # cannot be seen stopping: killed now
            if not found and not hidden and _no_children(spare):
                # A full scan found no descendant, not even a zombie child, and then
                # this process had no child at all (every descendant has an ancestor
                # among them): none can appear any more.
                return []
            if not found:
                time.sleep(0.001)           # something raced the scan: look again
                continue
            moving = [d for d in found if table[d].state not in ("T", "t", "Z", "X")]
            for d in moving:
                held.signal(d, table[d], signal.SIGSTOP)
            quiet = quiet + 1 if not moving else 0
            time.sleep(0.001)
        end = time.monotonic() + STUCK_SECONDS
        while True:                                     # kill, until none is left
            table, found = tree()
            if _reap_from(table, spare_pids):
                table, found = tree()
            hidden = _hidden(spare)
            if not found and not hidden:
                return []
            for d in found:
                held.signal(d, table[d], signal.SIGKILL)
            for h in hidden:
                held.hidden(h, signal.SIGKILL)
            if time.monotonic() > end and all(sysfs.kill_pending(d) for d in found):
                # In the kernel (state D) with SIGKILL queued: they never run
                # user code again, but may take as long as their I/O does (a
                # hidden one, killed again and again for as long, likewise).
                return found + hidden
            time.sleep(0.001)
    finally:
        held.close()


class Terminal:
    """The controlling terminal, when the run started in its foreground.

    An agent can make its own process group the terminal's foreground (an
    interactive shell does); when the run ends that group is gone or, worse,
    a leftover's, and the user's next keystrokes would go there. take_back()
    gives the foreground to the supervisor's group again (the launching shell
    then takes it as usual)."""

    def __init__(self) -> None:
        self.fd = -1
        try:
            fd = os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC)
        except OSError:
            return                                  # no controlling terminal
        try:
            ours = os.tcgetpgrp(fd) == os.getpgrp()
        except OSError:
            ours = False
        if ours:
            self.fd = fd
        else:
            os.close(fd)                            # started in the background: not ours

    def take_back(self) -> None:
        if self.fd < 0:
            return
        # Not in the foreground any more, tcsetpgrp would stop us with SIGTTOU.
        old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTTOU})
        try:
            if os.tcgetpgrp(self.fd) != os.getpgrp():
                os.tcsetpgrp(self.fd, os.getpgrp())
        except OSError:
            pass
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
