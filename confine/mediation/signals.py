"""Signals judged by the supervisor: Landlock's signal scoping (ABI 6) where no
pid namespace can replace it either (a container on an older kernel).

The kill family (kill, tkill, tgkill, rt_sigqueueinfo, rt_tgsigqueueinfo,
pidfd_send_signal) and fcntl(F_SETOWN/F_SETOWN_EX), which aims SIGIO/SIGURG,
are notified. The supervisor lets a process signal itself (its own threads,
its own group as SIGIO owner) by resuming the call: those arguments are
registers, and the caller is alive in the call, so its ids cannot be reused
meanwhile. Any other target must be a process of the run, and the signal is
then sent by the supervisor itself through a pidfd it opened and checked, so a
pid recycled for an outside process between the check and the send is never
signalled:

* a process of the run is a descendant of the supervisor (a child subreaper:
  orphans of the run come back to it) other than the children it had before
  the run (`spare`), as runtime/supervise.py's leftover walk counts them;
* the walk up from the target re-reads each step (the child still has that
  parent after the parent was read), so a parent that died and whose pid was
  recycled on the way is never mistaken for one of the run: when a step moves,
  the answer is "not of the run" (EPERM), never a guess.

A signal sent this way carries the supervisor's pid as its sender (si_pid),
not the agent's: a named difference. Group signals (kill(0), kill(-pgrp),
kill(-1)) are sent to each process of the run in the group, one by one.
"""
from __future__ import annotations

import ctypes
import errno
import os
import signal

from ..kernel import notify, sysfs
from ..kernel.libc import libc
from ..kernel.seccomp.loader import SIGNAL_CALLS
from ..record import NamedTuple

SYS_pidfd_send_signal = 424
SYS_rt_tgsigqueueinfo = 297 if os.uname().machine == "x86_64" else 240
_TGKILL = 234 if os.uname().machine == "x86_64" else 131
SIGINFO_SIZE = 128
MAX_DEPTH = 4096          # parents walked up from one target
MAX_SCAN = 65536          # processes looked at for a group signal
F_SETOWN_EX = 15

CALLS = SIGNAL_CALLS


stat_of = sysfs.proc_stat


def tgid_of(tid: int) -> int | None:
    try:
        with open(f"/proc/{tid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"Tgid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


class Members:
    """Who belongs to the run: descendants of `root` (the supervisor) but the
    children it had before (`spare`: (pid, start))."""

    def __init__(self, root: int, spare: frozenset[tuple[int, int]]) -> None:
        self.root = root
        self.spare = spare

    def contains(self, pid: int) -> bool:
        cur, st = pid, stat_of(pid)
        if st is None:
            return False
        for _ in range(MAX_DEPTH):
            if (cur, st.start) in self.spare:
                return False
            if st.ppid == self.root:
                return True
            if st.ppid <= 1:
                return False
            up = stat_of(st.ppid)
            again = stat_of(cur)
            if up is None or again is None or (again.ppid, again.start) != (st.ppid, st.start):
                return False      # a step moved while it was read: not judged, not of the run
            cur, st = st.ppid, up
        return False

    def pidfd(self, pid: int) -> int | None:
        """A pidfd of process `pid` if it is of the run (checked after it was
        opened, so it names the process judged), else None."""
        if pid <= 0 or pid == self.root:
            return None
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            return None
        try:
            before = stat_of(pid)
            if before is None or not self.contains(pid):
                raise LookupError
            signal.pidfd_send_signal(fd, 0)           # still the process opened
            now = stat_of(pid)
            if now is None or now.start != before.start:
                raise LookupError
        except (LookupError, OSError):
            os.close(fd)
            return None
        return fd

    def in_group(self, pgrp: int | None) -> tuple[list[int], bool]:
        """Processes of the run in group pgrp (all of the run for None), and
        whether any process outside the run was met in it."""
        mine, other = [], False
        names = [n for n in os.listdir("/proc") if n.isdigit()][:MAX_SCAN]
        for name in names:
            pid = int(name)
            st = stat_of(pid)
            if st is None or (pgrp is not None and st.pgrp != pgrp):
                continue
            if pid != self.root and self.contains(pid):
                mine.append(pid)
            else:
                other = True
        return mine, other


def _i32(v: int) -> int:
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v & 0x80000000 else v


def _send(fd: int, sig: int, info: bytes | None) -> int:
    """0 or an errno: the signal through our own pidfd (info: a siginfo copied
    from the agent, whose si_code the kernel checks as for any sender)."""
    buf = ctypes.create_string_buffer(info, SIGINFO_SIZE) if info is not None else None
    r = libc.syscall(ctypes.c_long(SYS_pidfd_send_signal), ctypes.c_int(fd), ctypes.c_int(sig),
                     buf, ctypes.c_uint(0))
    return ctypes.get_errno() if r != 0 else 0


class Verdict(NamedTuple):
    cont: bool = False        # resume the call: the caller signals itself
    error: int = 0            # else the answer (0: performed)
    refused: str = ""         # what to tell the person, if refused


class Judge:
    """Answers one notified signal call (the mediator's handler)."""

    def __init__(self, members: Members) -> None:
        self.members = members

    def decide(self, name: str, args: list[int], tid: int) -> Verdict:
        caller = tgid_of(tid)
        if caller is None:
            return Verdict(error=errno.ESRCH)
        if name == "fcntl":
            return self._owner(args, tid, caller)
        if name == "kill":
            pid, sig = _i32(args[0]), _i32(args[1])
            if pid == caller:
                return Verdict(cont=True)
            if pid > 0:
                return self._one(pid, sig, None)
            st = stat_of(tid)
            if pid == 0:
                return self._group(st.pgrp if st is not None else None, sig, tid, None)
            if pid == -1:
                return self._group(None, sig, tid, caller)
            return self._group(-pid, sig, tid, None)
        if name in ("tkill", "tgkill"):
            if name == "tkill":
                target, sig = _i32(args[0]), _i32(args[1])
                tgid = tgid_of(target) if target > 0 else None
            else:
                tgid, target, sig = _i32(args[0]), _i32(args[1]), _i32(args[2])
            if tgid is None or tgid <= 0 or target <= 0:
                return Verdict(error=errno.EINVAL if target <= 0 else errno.ESRCH)
            if tgid == caller and name == "tgkill":
                return Verdict(cont=True)     # the kernel checks target is one of its threads
            # tkill names a thread alone: sent as tgkill by the supervisor, so a
            # thread id recycled meanwhile is refused by the kernel's own check
            return self._thread(tgid, target, sig, None, name)
        if name == "rt_sigqueueinfo":
            pid, sig = _i32(args[0]), _i32(args[1])
            if pid == caller:
                return Verdict(cont=True)
            return self._one(pid, sig, notify.read_mem(tid, args[2], SIGINFO_SIZE))
        if name == "rt_tgsigqueueinfo":
            tgid, target, sig = _i32(args[0]), _i32(args[1]), _i32(args[2])
            if tgid == caller:
                return Verdict(cont=True)
            return self._thread(tgid, target, sig, notify.read_mem(tid, args[3], SIGINFO_SIZE),
                                name)
        if name == "pidfd_send_signal":
            return self._by_pidfd(args, tid)
        return Verdict(error=errno.ENOSYS)

    def _refused(self, what: str) -> Verdict:
        return Verdict(error=errno.EPERM, refused=f"{what}: refused (not a process of this run; "
                       "no pid namespace, and Landlock below ABI 6 cannot scope signals)")

    def _one(self, pid: int, sig: int, info: bytes | None) -> Verdict:
        fd = self.members.pidfd(pid)
        if fd is None:
            if stat_of(pid) is None:
                return Verdict(error=errno.ESRCH)
            return self._refused(f"signal {sig} to pid {pid}")
        try:
            return Verdict(error=_send(fd, sig, info))
        finally:
            os.close(fd)

    def _thread(self, tgid: int, tid: int, sig: int, info: bytes | None, name: str) -> Verdict:
        fd = self.members.pidfd(tgid)
        if fd is None:
            if stat_of(tgid) is None:
                return Verdict(error=errno.ESRCH)
            return self._refused(f"signal {sig} to thread {tid} of pid {tgid}")
        try:
            # the kernel checks that tid is a thread of tgid; tgid is held by our
            # pidfd (checked just before), so it is the process judged
            buf = ctypes.create_string_buffer(info, SIGINFO_SIZE) if info is not None else None
            if info is None:
                r = libc.syscall(ctypes.c_long(_TGKILL), ctypes.c_int(tgid), ctypes.c_int(tid),
                                 ctypes.c_int(sig))
            else:
                r = libc.syscall(ctypes.c_long(SYS_rt_tgsigqueueinfo), ctypes.c_int(tgid),
                                 ctypes.c_int(tid), ctypes.c_int(sig), buf)
            return Verdict(error=ctypes.get_errno() if r != 0 else 0)
        finally:
            os.close(fd)

    def _group(self, pgrp: int | None, sig: int, tid: int, skip: int | None) -> Verdict:
        mine, other = self.members.in_group(pgrp)
        sent = 0
        for pid in mine:
            if pid == skip:
                continue
            fd = self.members.pidfd(pid)
            if fd is None:
                continue
            try:
                if _send(fd, sig, None) == 0:
                    sent += 1
            finally:
                os.close(fd)
        if sent:
            return Verdict()
        if other:
            shown = "every process" if pgrp is None else f"process group {pgrp}"
            return self._refused(f"signal {sig} to {shown}")
        return Verdict(error=errno.ESRCH)

    def _by_pidfd(self, args: list[int], tid: int) -> Verdict:
        fd, sig, flags = _i32(args[0]), _i32(args[1]), args[3] & 0xFFFFFFFF
        if flags:
            return Verdict(error=errno.EPERM, refused="pidfd_send_signal with flags: refused "
                           "(no pid namespace, and Landlock below ABI 6 cannot scope signals)")
        pid = None
        try:
            with open(f"/proc/{tid}/fdinfo/{fd}", "rb") as f:
                for line in f:
                    if line.startswith(b"Pid:"):
                        pid = int(line.split()[1])
        except (OSError, ValueError, IndexError):
            return Verdict(error=errno.EBADF)
        if pid is None:
            return Verdict(error=errno.EBADF)          # not a pidfd
        if pid <= 0:
            return Verdict(error=errno.ESRCH)
        info = notify.read_mem(tid, args[2], SIGINFO_SIZE) if args[2] else None
        if pid == tgid_of(tid):
            # the caller itself: sent through our own pidfd too, since the
            # agent's descriptor may be swapped before a resumed call reads it
            try:
                own = os.pidfd_open(pid)
            except OSError:
                return Verdict(error=errno.ESRCH)
            try:
                return Verdict(error=_send(own, sig, info))
            finally:
                os.close(own)
        return self._one(pid, sig, info)

    def _owner(self, args: list[int], tid: int, caller: int) -> Verdict:
        """fcntl F_SETOWN: the caller itself, one of its threads' ids it holds, or
        its own process group (registers; the caller is alive in the call)."""
        cmd = args[1] & 0xFFFFFFFF
        if cmd == F_SETOWN_EX:
            return Verdict(error=errno.EPERM, refused="fcntl F_SETOWN_EX: refused (no pid "
                           "namespace, and Landlock below ABI 6 cannot scope SIGIO; F_SETOWN "
                           "with the caller's own pid works)")
        owner = _i32(args[2])
        st = stat_of(tid)
        if owner in (0, caller, tid) or (owner < 0 and st is not None and -owner == st.pgrp):
            return Verdict(cont=True)
        return Verdict(error=errno.EPERM, refused=f"fcntl F_SETOWN {owner}: refused (SIGIO only "
                       "to the caller or its own process group: no pid namespace, and Landlock "
                       "below ABI 6 cannot scope signals)")
