"""Capabilities, securebits and the small prctl() knobs of the child process.

This is the only module in confine that calls prctl() or capset().  Everything
is plain ctypes over libc, so no C compiler or libcap is needed.

The launcher calls these functions in the forked child, between fork and
exec, while it is single-threaded (see design.md, "Child order of
operations", steps 1, 5, 6 and 7).  Every failure raises OSError carrying the
errno and a message that names the step, so the launcher can report it and
refuse to exec (fail closed).

Background (capabilities(7)):
  * Five per-thread sets: inheritable, permitted, effective, bounding, ambient.
  * Bounding set: an upper limit on what execve() can add to permitted.
    Dropping from it needs CAP_SETPCAP and cannot be undone.
  * On execve() a process whose (e)uid is 0 is treated as if every file had
    all capabilities, unless SECBIT_NOROOT is set.
  * When a process changes all of its uids away from 0 the kernel clears
    permitted/effective/ambient ("setuid fixup"), unless SECBIT_NO_SETUID_FIXUP
    is set.  switch_user() sets that bit on purpose, so the capabilities stay
    until drop_all() removes them in one verified step.
"""

from __future__ import annotations

import ctypes
import errno
import os
from collections.abc import Callable
from typing import Any, TypeVar

from .libc import check, libc, oserror

__all__ = [
    "SECBIT_NOROOT", "SECBIT_NOROOT_LOCKED",
    "SECBIT_NO_SETUID_FIXUP", "SECBIT_NO_SETUID_FIXUP_LOCKED",
    "SECBIT_KEEP_CAPS", "SECBIT_KEEP_CAPS_LOCKED",
    "SECBIT_NO_CAP_AMBIENT_RAISE", "SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED",
    "LOCKED_SECUREBITS", "BOUNDING_SET_NOTE",
    "last_cap", "set_pdeathsig", "get_pdeathsig",
    "set_no_new_privs", "get_no_new_privs",
    "set_dumpable", "get_dumpable", "set_child_subreaper",
    "get_securebits", "set_securebits",
    "drop_bounding_set", "clear_ambient", "capget", "capset", "clear_caps",
    "status", "verify_dropped", "switch_user", "drop_all",
]

# --- constants from <linux/prctl.h> and <linux/securebits.h> -----------------

PR_SET_PDEATHSIG = 1
PR_GET_PDEATHSIG = 2
PR_GET_DUMPABLE = 3
PR_SET_DUMPABLE = 4
PR_CAPBSET_READ = 23
PR_CAPBSET_DROP = 24
PR_GET_SECUREBITS = 27
PR_SET_SECUREBITS = 28
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38
PR_GET_NO_NEW_PRIVS = 39
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_IS_SET = 1
PR_CAP_AMBIENT_RAISE = 2
PR_CAP_AMBIENT_LOWER = 3
PR_CAP_AMBIENT_CLEAR_ALL = 4

SECBIT_NOROOT = 1 << 0
SECBIT_NOROOT_LOCKED = 1 << 1
SECBIT_NO_SETUID_FIXUP = 1 << 2
SECBIT_NO_SETUID_FIXUP_LOCKED = 1 << 3
SECBIT_KEEP_CAPS = 1 << 4
SECBIT_KEEP_CAPS_LOCKED = 1 << 5
SECBIT_NO_CAP_AMBIENT_RAISE = 1 << 6
SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED = 1 << 7

# What drop_all(privileged=True) locks in (0xef):
#   NOROOT               execve() never grants capabilities just because uid is 0
#   NO_SETUID_FIXUP      setuid() never *re-grants* caps when moving back to uid 0
#   KEEP_CAPS (off)      locked off, so nobody can turn it on later
#   NO_CAP_AMBIENT_RAISE the ambient set can never be raised again
# Each with its _LOCKED bit, so neither this process nor its descendants can
# undo them (securebits are inherited across fork and exec).
LOCKED_SECUREBITS = (
    SECBIT_NOROOT | SECBIT_NOROOT_LOCKED
    | SECBIT_NO_SETUID_FIXUP | SECBIT_NO_SETUID_FIXUP_LOCKED
    | SECBIT_KEEP_CAPS_LOCKED
    | SECBIT_NO_CAP_AMBIENT_RAISE | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED
)

# <linux/capability.h>: version 3 uses two 32-bit words per set (caps 0..63).
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
CAP_SETPCAP = 8

BOUNDING_SET_NOTE = (
    "bounding set left as is: dropping it needs CAP_SETPCAP; no_new_privs stops "
    "file capabilities and setuid from granting anything"
)

_CAP_FIELDS = ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")


# --- libc bindings ----------------------------------------------------------

# Own function objects (libc["name"], not libc.name): the prototypes set here
# stay private to this module instead of changing the shared handle's.
_prctl = libc["prctl"]
# prctl is variadic in the header; the kernel reads five unsigned longs.
_prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
_prctl.restype = ctypes.c_int


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


_CapDataV3 = _CapData * 2

# glibc and musl both export thin capget/capset wrappers, which saves us a
# per-architecture table of syscall numbers.
_capget = libc["capget"]
_capget.argtypes = [ctypes.POINTER(_CapHeader), ctypes.POINTER(_CapData)]
_capget.restype = ctypes.c_int
_capset = libc["capset"]
_capset.argtypes = [ctypes.POINTER(_CapHeader), ctypes.POINTER(_CapData)]
_capset.restype = ctypes.c_int


def _prctl_call(step: str, option: int, a2: int = 0, a3: int = 0, a4: int = 0, a5: int = 0) -> int:
    ctypes.set_errno(0)
    return check(_prctl(option, a2, a3, a4, a5), f"capabilities: {step}")


# --- small prctl knobs ------------------------------------------------------

def last_cap() -> int:
    """Highest capability number this kernel knows (CAP_LAST_CAP)."""
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            return int(f.read().strip())
    except OSError:
        pass
    # No /proc (e.g. inside a fresh mount namespace): probe the bounding set,
    # PR_CAPBSET_READ fails with EINVAL for the first unknown capability.
    cap = 0
    while _prctl(PR_CAPBSET_READ, cap + 1, 0, 0, 0) >= 0:
        cap += 1
    return cap


def set_pdeathsig(sig: int) -> None:
    """Deliver `sig` to this process when its parent thread exits.

    The kernel resets it to 0 whenever euid/egid/fsuid/fsgid change or
    permitted caps grow, and on exec of a setuid/setgid/file-caps binary; the
    caller must re-check getppid() afterwards (the parent may already be gone).
    """
    _prctl_call("PR_SET_PDEATHSIG", PR_SET_PDEATHSIG, sig)


def get_pdeathsig() -> int:
    sig = ctypes.c_int(0)  # the kernel writes the signal through arg2
    _prctl_call("PR_GET_PDEATHSIG", PR_GET_PDEATHSIG, ctypes.addressof(sig))
    return sig.value


def set_no_new_privs() -> None:
    """execve() can no longer grant privileges (setuid bits, file caps). Irreversible."""
    _prctl_call("PR_SET_NO_NEW_PRIVS", PR_SET_NO_NEW_PRIVS, 1)


def get_no_new_privs() -> bool:
    return bool(_prctl_call("PR_GET_NO_NEW_PRIVS", PR_GET_NO_NEW_PRIVS))


def set_dumpable(flag: bool) -> None:
    """Non-dumpable: no core dumps, no same-uid ptrace, /proc/PID files owned by root."""
    _prctl_call("PR_SET_DUMPABLE", PR_SET_DUMPABLE, 1 if flag else 0)


def get_dumpable() -> bool:
    return bool(_prctl_call("PR_GET_DUMPABLE", PR_GET_DUMPABLE))


def set_child_subreaper() -> None:
    """Orphaned descendants are reparented to this process instead of init."""
    _prctl_call("PR_SET_CHILD_SUBREAPER", PR_SET_CHILD_SUBREAPER, 1)


def get_securebits() -> int:
    return _prctl_call("PR_GET_SECUREBITS", PR_GET_SECUREBITS)


def set_securebits(bits: int) -> None:
    """Needs CAP_SETPCAP; locked bits can never change again (EPERM)."""
    _prctl_call(f"PR_SET_SECUREBITS({bits:#x})", PR_SET_SECUREBITS, bits)


# --- capability sets --------------------------------------------------------

def drop_bounding_set() -> None:
    """Remove every capability from the bounding set. Needs CAP_SETPCAP."""
    for cap in range(last_cap() + 1):
        _prctl_call(f"PR_CAPBSET_DROP({cap})", PR_CAPBSET_DROP, cap)


def clear_ambient() -> None:
    """Empty the ambient set (always allowed)."""
    _prctl_call("PR_CAP_AMBIENT_CLEAR_ALL", PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)


def capget() -> tuple[int, int, int]:
    """(effective, permitted, inheritable) of this thread, as 64-bit masks."""
    hdr = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
    data = _CapDataV3()
    ctypes.set_errno(0)
    check(_capget(ctypes.byref(hdr), data), "capabilities: capget")
    return (
        data[0].effective | (data[1].effective << 32),
        data[0].permitted | (data[1].permitted << 32),
        data[0].inheritable | (data[1].inheritable << 32),
    )


def capset(effective: int, permitted: int, inheritable: int) -> None:
    """Set this thread's three capset(2) sets. Lowering is always allowed."""
    hdr = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)  # pid 0 = this thread
    data = _CapDataV3()
    for i in (0, 1):
        shift = 32 * i
        data[i].effective = (effective >> shift) & 0xFFFFFFFF
        data[i].permitted = (permitted >> shift) & 0xFFFFFFFF
        data[i].inheritable = (inheritable >> shift) & 0xFFFFFFFF
    ctypes.set_errno(0)
    check(_capset(ctypes.byref(hdr), data),
          f"capabilities: capset(eff={effective:#x}, prm={permitted:#x}, inh={inheritable:#x})")


def clear_caps() -> None:
    """Effective, permitted and inheritable all empty."""
    capset(0, 0, 0)


def status() -> dict[str, int]:
    """Capability state as the kernel reports it in /proc/self/status.

    Keys: CapInh, CapPrm, CapEff, CapBnd, CapAmb (ints), NoNewPrivs (0/1),
    Seccomp (0 off, 1 strict, 2 filter).  Raises OSError if /proc is missing,
    which makes drop_all() fail closed rather than skip the check.
    """
    out: dict[str, int] = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in _CAP_FIELDS:
                out[key] = int(value.strip(), 16)
            elif key in ("NoNewPrivs", "Seccomp"):
                out[key] = int(value.strip())
    missing = [k for k in _CAP_FIELDS if k not in out]
    if missing:
        raise OSError(errno.EIO, f"capabilities: /proc/self/status lacks {', '.join(missing)}")
    return out


def verify_dropped(st: dict[str, int], fields: tuple[str, ...] = _CAP_FIELDS) -> None:
    """Raise OSError(EPERM) unless every capability set named in `fields` is 0."""
    left = [f"{k}={st[k]:#x}" for k in fields if st.get(k, 1) != 0]
    if left:
        raise OSError(
            errno.EPERM,
            "capabilities: verify: still set after dropping: " + ", ".join(left),
        )


# setresuid/setresgid/setfsuid/setfsgid by number: glibc's wrappers change every
# thread of the process (its setxid broadcast); the kernel's calls change only
# the caller's.
_SETRESUID, _SETRESGID, _SETFSUID, _SETFSGID = (
    (117, 119, 122, 123) if os.uname().machine == "x86_64" else (147, 149, 151, 152))
CAP_SYS_PTRACE = 19


def has_effective(cap: int) -> bool:
    """cap is in this process's effective set (/proc/self/status)."""
    return bool(status()["CapEff"] >> cap & 1)


def thread_as(uid: int, gid: int) -> None:
    """This thread's real and filesystem uid and gid become uid/gid (its effective
    and saved ids stay 0, so it keeps its other capabilities; the kernel takes the
    file ones away while the fsuid is not 0). The kernel lets a thread whose real
    ids are the target's read its memory and take its descriptors, and one whose
    filesystem ids are open its /proc/PID/{cwd,fd} (ptrace's same-user rule),
    without CAP_SYS_PTRACE. Only this thread: the process stays root."""
    check(libc.syscall(_SETRESGID, gid, -1, -1), f"setresgid({gid}) for this thread")
    check(libc.syscall(_SETRESUID, uid, -1, -1), f"setresuid({uid}) for this thread")
    libc.syscall(_SETFSGID, gid)
    libc.syscall(_SETFSUID, uid)
    # setfs*id answer with the previous id, never an error: asked again to verify
    if libc.syscall(_SETFSUID, -1) != uid or libc.syscall(_SETFSGID, -1) != gid:
        raise OSError(errno.EPERM, f"setfsuid({uid})/setfsgid({gid}) for this thread")


# --- identity and the full capability step ----------------------------------

def switch_user(uid: int, gid: int) -> None:
    """Become uid/gid in all three slots with no supplementary groups (root only).

    SECBIT_NO_SETUID_FIXUP is set (not locked) first, so the kernel does not
    silently clear our capabilities at setresuid(): drop_all() still needs
    CAP_SETPCAP to empty the bounding set and lock securebits, and it then
    removes everything in one verified step.  Call drop_all() right after.

    A changed euid makes the kernel reset the parent-death signal (and the
    dumpable flag); the death signal is put back here if one was set, but the
    caller must still check getppid() for a parent that died in between.
    """
    if os.geteuid() != 0:
        raise OSError(errno.EPERM, "capabilities: switch_user: needs root")
    pdeathsig = get_pdeathsig()
    set_securebits(get_securebits() | SECBIT_NO_SETUID_FIXUP)
    try:
        os.setgroups([])
    except OSError as e:
        raise oserror("capabilities: setgroups([])", e.errno) from None
    try:
        os.setresgid(gid, gid, gid)
    except OSError as e:
        raise oserror(f"capabilities: setresgid({gid})", e.errno) from None
    try:
        os.setresuid(uid, uid, uid)
    except OSError as e:
        raise oserror(f"capabilities: setresuid({uid})", e.errno) from None
    # setres*id() is all-or-nothing in the kernel, but check anyway: running
    # the agent with the wrong identity is the failure we cannot afford.
    if os.getresuid() != (uid,) * 3 or os.getresgid() != (gid,) * 3 or os.getgroups():
        raise OSError(
            errno.EPERM,
            f"capabilities: switch_user: identity is uid={os.getresuid()} "
            f"gid={os.getresgid()} groups={os.getgroups()}, wanted {uid}/{gid}",
        )
    if pdeathsig:
        set_pdeathsig(pdeathsig)


def drop_all(privileged: bool) -> list[str]:
    """Drop every capability for good, verify, and return notes on anything skipped.

    privileged=True (the launcher started as root; possibly already moved to
    another uid by switch_user): empty the bounding set, lock securebits to
    LOCKED_SECUREBITS, clear ambient, clear effective/permitted/inheritable,
    then require all five sets to read 0 in /proc/self/status.  Any failure
    raises OSError.  The order matters: the bounding set and securebits need
    CAP_SETPCAP, so they go before capset() throws it away.

    privileged=False (started unprivileged): the bounding set can only be
    emptied with CAP_SETPCAP, which such a process normally lacks; it is
    attempted first anyway (a process that is root in a fresh user namespace
    does hold it) and EPERM becomes a note.  Then ambient and the three
    capset sets are cleared and verified to be 0.
    """
    notes: list[str] = []
    if privileged:
        drop_bounding_set()
        # Keep any bits we do not know about (newer kernels add more, and a
        # locked one could not be cleared anyway); KEEP_CAPS must end up off.
        set_securebits((get_securebits() & ~SECBIT_KEEP_CAPS) | LOCKED_SECUREBITS)
        bits = get_securebits()
        if bits & (LOCKED_SECUREBITS | SECBIT_KEEP_CAPS) != LOCKED_SECUREBITS:
            raise OSError(errno.EPERM, f"capabilities: verify: securebits are {bits:#x}, "
                          f"wanted {LOCKED_SECUREBITS:#x} set and KEEP_CAPS off")
        clear_ambient()
        clear_caps()
        verify_dropped(status())
        return notes

    bounding_dropped = True
    try:
        drop_bounding_set()
    except OSError as e:
        if e.errno != errno.EPERM:
            raise
        bounding_dropped = False
        notes.append(BOUNDING_SET_NOTE)
    clear_ambient()
    clear_caps()
    fields = _CAP_FIELDS if bounding_dropped else ("CapInh", "CapPrm", "CapEff", "CapAmb")
    verify_dropped(status(), fields)
    return notes


T = TypeVar("T")

# setgroups(2) by number: glibc's setgroups() changes every thread of the process.
_SYS_SETGROUPS = {"x86_64": 116, "aarch64": 159, "riscv64": 159}


def fs_identity_supported() -> bool:
    """Whether in_fs_identity can work here (the architecture's setgroups number)."""
    return os.uname().machine in _SYS_SETGROUPS


def in_fs_identity(uid: int, gid: int, fn: Callable[[], T]) -> T:
    """fn() in a new thread whose file-system identity is uid:gid with no
    supplementary groups (setfsuid, setfsgid and setgroups are per thread in the
    kernel); the thread ends with fn, so these credentials never reach another
    thread or outlive it. Leaving fsuid 0 clears that thread's file capabilities
    (DAC_OVERRIDE, FOWNER, ...): every path it touches is judged as uid would be.
    The process's own ids stay 0: the account cannot signal or trace the thread.
    Raises OSError if the switch cannot be verified (fn does not run)."""
    import threading
    nr = _SYS_SETGROUPS[os.uname().machine]
    out: list[Any] = []

    def body() -> None:
        try:
            if libc.syscall(ctypes.c_long(nr), ctypes.c_long(0), None) != 0:
                raise oserror("setgroups")
            libc.setfsgid(gid)
            libc.setfsuid(uid)
            # an invalid id changes nothing and returns the current one
            if libc.setfsgid(-1) != gid or libc.setfsuid(-1) != uid:
                raise OSError(errno.EPERM, f"setfsuid/setfsgid to {uid}:{gid} did not take")
            if os.getgroups():
                raise OSError(errno.EPERM, "supplementary groups were not dropped")
            out.append((True, fn()))
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller
            out.append((False, e))
    t = threading.Thread(target=body, name="confine-fs-identity")
    t.start()
    t.join()
    ok, value = out[0]
    if not ok:
        raise value
    result: T = value
    return result
