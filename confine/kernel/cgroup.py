"""A cgroup (v2) per run: kill everything in it at once, and limit it.

Threat: processes the agent leaves behind outlive the run; the supervisor's
walk of its descendants (runtime/supervise.py) finds every one, but a cgroup
makes the kill atomic (cgroup.kill: the kernel kills every member and stops
new forks into it) and, where the pids and memory controllers are available,
bounds the whole run rather than each process (pids.max, memory.max).

Where a run cgroup can be made (`parent_for_run`):
  * started as root: under the cgroup2 root, where controllers can be enabled
    (the root cgroup is exempt from the no-internal-processes rule);
  * started unprivileged: under the launcher's own cgroup when it is
    delegated to the user (systemd's user@.service: the directory and its
    cgroup.procs writable by the caller); controllers cannot be enabled there
    (the launcher's own cgroup holds processes), so it is used for the kill.
Nothing here decides policy; launch.py creates, fills and removes the cgroup,
the child joins it as its first step.
"""
from __future__ import annotations

import _signal  # type: ignore[import-not-found]
import ctypes
import errno
import os
import signal
import sys
import time

from .libc import oserror
from .mounts import unescape

__all__ = ["v2_mount", "parent_for_run", "controllers", "create", "join", "kill", "remove",
           "fork_into"]

# The C functions under signal.pthread_sigmask and signal.valid_signals: those turn
# each number of a whole mask into an enum member, ~0.25 ms on the way of every run.
_sigmask = _signal.pthread_sigmask
_all_signals = _signal.valid_signals()

# Holds the GIL through the call, unlike the libc handle of libc.py (fork_into).
_clone3 = ctypes.PyDLL(None, use_errno=True).syscall
_clone3.restype = ctypes.c_long


def v2_mount(mountinfo: str = "/proc/self/mountinfo") -> str | None:
    try:
        with open(mountinfo) as f:
            for line in f:
                left, _, right = line.partition(" - ")
                if right.split(" ", 1)[0] == "cgroup2":
                    return unescape(left.split()[4])
    except OSError:
        pass
    return None


def _own(root: str) -> str | None:
    try:
        with open("/proc/self/cgroup") as f:
            for line in f:
                if line.startswith("0::"):
                    rel = line[3:].strip().lstrip("/")
                    return os.path.join(root, rel) if rel else root
    except OSError:
        pass
    return None


def parent_for_run(as_root: bool) -> str | None:
    """The directory a run's cgroup can be made in, or None."""
    root = v2_mount()
    if root is None:
        return None
    if as_root:
        return root if os.access(root, os.W_OK) else None
    own = _own(root)
    if own and own != root and os.access(own, os.W_OK) \
            and os.access(os.path.join(own, "cgroup.procs"), os.W_OK):
        return own
    return None


def controllers(parent: str) -> tuple[str, ...]:
    """Controllers a child of parent can use: in parent's cgroup.controllers and
    (as root, at the cgroup2 root) enabled in its subtree_control."""
    try:
        with open(os.path.join(parent, "cgroup.controllers")) as f:
            have = f.read().split()
        with open(os.path.join(parent, "cgroup.subtree_control")) as f:
            on = f.read().split()
    except OSError:
        return ()
    return tuple(c for c in ("pids", "memory") if c in have and (c in on or parent == v2_mount()))


def create(parent: str, *, pids: int | None, memory: int | None) -> str:
    """A new cgroup under parent with the limits its controllers allow;
    raises OSError (the run is then refused: the plan promised it)."""
    want = [c for c, v in (("pids", pids), ("memory", memory)) if v is not None]
    usable = controllers(parent)
    if want and parent == v2_mount():
        enable = " ".join("+" + c for c in want if c in usable)
        if enable:
            _write(os.path.join(parent, "cgroup.subtree_control"), enable)
    path = os.path.join(parent, f"confine-{os.getpid()}-{os.urandom(4).hex()}")
    os.mkdir(path, 0o755)
    try:
        if pids is not None and "pids" in usable:
            _write(os.path.join(path, "pids.max"), str(pids))
        if memory is not None and "memory" in usable:
            _write(os.path.join(path, "memory.max"), str(memory))
            _write(os.path.join(path, "memory.swap.max"), "0", missing_ok=True)
    except BaseException:
        os.rmdir(path)
        raise
    return path


def _write(path: str, text: str, missing_ok: bool = False) -> None:
    try:
        with open(path, "w") as f:
            f.write(text)
    except FileNotFoundError:
        if not missing_ok:
            raise
    except OSError as e:
        raise oserror(f"cgroup: write {text!r} to {path}", e.errno) from None


def join(path: str) -> None:
    """Move the calling process into the cgroup."""
    _write(os.path.join(path, "cgroup.procs"), "0")


def move(path: str, pid: int) -> None:
    """Move process pid (the supervisor's child) into the cgroup. The first
    migration after a quiet spell waits for an RCU grace period (about 10 ms):
    the supervisor does it while the child runs its first steps."""
    _write(os.path.join(path, "cgroup.procs"), str(pid))


# clone3(2) (x86_64 and aarch64 share the number) and CLONE_INTO_CGROUP (Linux 5.7).
_SYS_CLONE3 = 435
CLONE_INTO_CGROUP = 0x200000000


class _CloneArgs(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in (
        "flags", "pidfd", "child_tid", "parent_tid", "exit_signal", "stack", "stack_size",
        "tls", "set_tid", "set_tid_size", "cgroup")]


def fork_into(path: str) -> int | None:
    """os.fork() with the child born in the cgroup at path (clone3 with
    CLONE_INTO_CGROUP): no migration, so not the wait of move() (an RCU grace
    period, 5-15 ms on a busy host, which the child's cgroup step waits out).
    Returns 0 in the child, its pid in the parent, or None, with nothing done,
    where it cannot be had: the caller then forks and moves.

    Only in a process with one thread: a raw clone skips the C library's fork
    handlers, which exist for locks (malloc's, stdio's) another thread could hold
    at the fork; with no other thread none can be held. Python's own fork work is
    done as os.fork does it (the audit event, PyOS_BeforeFork, PyOS_AfterFork_*),
    with the GIL held throughout (a PyDLL call never releases it)."""
    try:
        if len(os.listdir("/proc/self/task")) != 1:
            return None
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
    # Every signal blocked from before to after: os.fork runs no Python code between
    # the two halves, and neither may this one (a handler that raised there could
    # leave the import lock taken, or a child running on as the parent). A signal
    # that comes meanwhile is delivered at the restore, as after os.fork.
    mask = _sigmask(signal.SIG_BLOCK, _all_signals)
    try:
        args = _CloneArgs(flags=CLONE_INTO_CGROUP, exit_signal=signal.SIGCHLD, cgroup=fd)
        sys.audit("os.fork")
        api = ctypes.pythonapi
        api.PyOS_BeforeFork()
        try:
            pid = _clone3(ctypes.c_long(_SYS_CLONE3), ctypes.byref(args),
                          ctypes.c_size_t(ctypes.sizeof(args)))
        except BaseException:
            api.PyOS_AfterFork_Parent()
            raise
        if pid == 0:
            api.PyOS_AfterFork_Child()
        else:
            api.PyOS_AfterFork_Parent()
    finally:
        _sigmask(signal.SIG_SETMASK, mask)
        os.close(fd)
    return int(pid) if pid >= 0 else None


def is_member(path: str, proc_cgroup: str = "/proc/self/cgroup") -> bool:
    """Whether the calling process is in the cgroup at path (its v2 line names it;
    compared by its last component, the run's own unique name)."""
    name = os.path.basename(path.rstrip("/"))
    try:
        with open(proc_cgroup) as f:
            lines = f.read().splitlines()
    except OSError:
        return False
    return any(line.startswith("0::") and os.path.basename(line[3:].rstrip("/")) == name
               for line in lines)


def kill(path: str) -> bool:
    """cgroup.kill (Linux 5.14): every member killed, new forks refused. False
    when the kernel has no cgroup.kill (the descendant walk still runs)."""
    try:
        _write(os.path.join(path, "cgroup.kill"), "1")
    except FileNotFoundError:
        return False
    return True


def populated(path: str) -> bool:
    try:
        with open(os.path.join(path, "cgroup.events")) as f:
            for line in f:
                if line.startswith("populated "):
                    return line.split()[1] != "0"
    except OSError:
        return False
    return False


def remove(path: str, timeout: float = 5.0) -> None:
    """rmdir once empty (members exit asynchronously after the kill)."""
    end = time.monotonic() + timeout
    while True:
        try:
            os.rmdir(path)
            return
        except OSError as e:
            if e.errno != errno.EBUSY or time.monotonic() > end:
                raise oserror(f"cgroup: remove {path}", e.errno) from None
        time.sleep(0.01)
