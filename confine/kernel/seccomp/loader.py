"""Compiling and loading the seccomp filters: the deny filter built with
libseccomp, the hand-written raw BPF guard, the notifying filter and its
loader, and the status report for `confine check`.

Architecture: only the native ABI is accepted. Any other audit arch (i386 via
`int 0x80` on x86_64, arm32 compat on aarch64) hits the bad-arch action, which
kills the whole process (SIGSYS). x32 system calls (x86_64 audit arch with
nr | 0x40000000) are rejected by libseccomp's own x86_64 program (it emits
`if nr >= 0x40000000 && nr != -1: bad-arch action`; verified by reading the
generated BPF and by tests/kernel/test_seccomp.py). `build()` re-checks the
generated program every time and, if a libseccomp ever lacks that check, stacks
a tiny hand-written classic-BPF guard (`_arch_guard_program`) at `load()`.

Rules whose syscall does not exist on the native ABI are skipped silently by
`build()` (see syscalls.py).
"""
from __future__ import annotations

import ctypes
import errno as _errno
import os
import struct
import sys
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from ...record import NamedTuple
from ..libc import libc, oserror
from .rules import (
    AF_INET,
    AF_INET6,
    FILE_CALLS,
    META_CALLS,
    META_IOCTLS,
    META_REFUSED,
    OPEN_CALLS,
    OPEN_WRITE_BITS,
    SOCK_DGRAM,
    SOCK_TYPE_MASK,
    SOCKET_CALLS,
    Rule,
    describe_rule,
)
from .syscalls import libseccomp, native_arch, resolve, syscall_number

if TYPE_CHECKING:  # pragma: no cover
    import pyseccomp

__all__ = ["build", "compiled", "Program", "load", "export_bpf", "status", "build_notify",
           "notify_program", "load_notify", "BPF_LD_W_ABS"]

AUDIT_ARCH_X86_64 = 0xC000003E

_LIB_OPS = {"masked_eq": "MASKED_EQ", "eq": "EQ", "ne": "NE", "lt": "LT", "le": "LE",
            "gt": "GT", "ge": "GE"}


def build(rules: Iterable[Rule]) -> "pyseccomp.SyscallFilter":
    """A libseccomp filter: default ALLOW, each rule -> ERRNO(rule.errno), only
    the native ABI (any other arch, and x32, kills the process). Rules whose
    syscall does not exist on this ABI are skipped. Does not load anything."""
    flt = _build(rules)
    if native_arch() == "x86_64" and not _rejects_x32(flt):
        flt._confine_arch_guard = True
    return flt


def _build(rules: Iterable[Rule]) -> "pyseccomp.SyscallFilter":
    sc = libseccomp()
    flt = sc.SyscallFilter(sc.ALLOW)
    try:
        flt.set_attr(sc.Attr.ACT_BADARCH, sc.KILL_PROCESS)
    except OSError:  # kernel < 4.14 has no KILL_PROCESS; the child is single-threaded
        flt.set_attr(sc.Attr.ACT_BADARCH, sc.KILL_THREAD)
    for attr, value in ((sc.Attr.CTL_TSYNC, 1),      # all threads, if there are any
                        (sc.Attr.CTL_OPTIMIZE, 2)):  # binary search on syscall numbers
        try:
            flt.set_attr(attr, value)
        except OSError:
            pass
    for rule in rules:
        nr, known = resolve(rule.syscall)
        if nr is None:
            if known:
                continue  # e.g. iopl on aarch64: nothing to filter
            raise ValueError(f"seccomp: unknown system call {rule.syscall!r}")
        args = []
        for a in rule.args:
            if a.op == "masked_eq":
                args.append(sc.Arg(a.index, sc.MASKED_EQ, a.mask, a.value))
            else:
                args.append(sc.Arg(a.index, getattr(sc, _LIB_OPS[a.op]), a.value))
        try:
            flt.add_rule(sc.ERRNO(rule.errno), nr, *args)
        except OSError as e:
            raise ValueError(f"libseccomp rejected the rule {describe_rule(rule)}: "
                             f"{os.strerror(e.errno or _errno.EINVAL)}") from None
    return flt


class Program(NamedTuple):
    """libseccomp's generated program for one rule set, as raw instructions:
    what `flt.load()` would install, without regenerating it in every process
    that loads it (the broker and the agent, on every run)."""
    insns: tuple[tuple[int, int, int, int], ...]
    arch_guard: bool


_COMPILED: dict[tuple[Rule, ...], Program] = {}
_COMPILED_MAX = 16      # distinct rule sets kept by a long-lived caller (the Python API)


def compiled(rules: Iterable[Rule]) -> Program:
    """build(rules), exported once per rule set and process (rules are frozen
    values, so the same rules always give the same program)."""
    key = tuple(rules)
    got = _COMPILED.get(key)
    if got is None:
        # exported once: the x32 check reads the same program that is loaded
        insns = tuple(export_bpf(_build(key)))
        got = Program(insns, native_arch() == "x86_64" and not _rejects_x32(insns))
        if len(_COMPILED) >= _COMPILED_MAX:
            _PACKED.pop(_COMPILED.pop(next(iter(_COMPILED))).insns, None)
        _COMPILED[key] = got
        _PACKED[insns] = _pack(insns)
    return got


# Programs as the kernel reads them, made in the supervisor: the child and the
# broker load them without a Python loop over hundreds of instructions.
_PACKED: dict[tuple[tuple[int, int, int, int], ...], Any] = {}


def load(flt: "pyseccomp.SyscallFilter | Program") -> None:
    """Load the filter into the calling process (the forked child, right before
    exec; no_new_privs already set). Irreversible. A Program is installed as it
    is, with TSYNC as libseccomp does (CTL_TSYNC is set in build())."""
    if isinstance(flt, Program):
        _load_bpf(flt.insns)
        guard = flt.arch_guard
    else:
        flt.load()
        guard = bool(getattr(flt, "_confine_arch_guard", False))
    if guard:
        _load_bpf(_arch_guard_program())


# --- classic BPF: inspecting libseccomp's program, and the fallback guard --------

BPF_LD_W_ABS = 0x20   # BPF_LD | BPF_W | BPF_ABS
BPF_JEQ_K = 0x15      # BPF_JMP | BPF_JEQ | BPF_K
BPF_JGE_K = 0x35      # BPF_JMP | BPF_JGE | BPF_K
BPF_RET_K = 0x06      # BPF_RET | BPF_K
SECCOMP_RET_KILL_PROCESS = 0x80000000
SECCOMP_RET_ALLOW = 0x7FFF0000
X32_SYSCALL_BIT = 0x40000000
SECCOMP_SET_MODE_FILTER = 1
SECCOMP_GET_ACTION_AVAIL = 2
SECCOMP_FILTER_FLAG_TSYNC = 1
SECCOMP_FILTER_FLAG_NEW_LISTENER = 1 << 3
SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV = 1 << 5
_SECCOMP_NR = {"x86_64": 317, "aarch64": 277, "riscv64": 277}  # when libseccomp is absent


def export_bpf(flt: "pyseccomp.SyscallFilter") -> list[tuple[int, int, int, int]]:
    """libseccomp's generated program as (code, jt, jf, k) tuples."""
    fd = os.memfd_create("confine-seccomp-bpf")
    try:
        with os.fdopen(os.dup(fd), "rb") as f:
            flt.export_bpf(f)
        size = os.lseek(fd, 0, os.SEEK_END)
        data = os.pread(fd, size, 0)
    finally:
        os.close(fd)
    fmt = "<HBBI" if sys.byteorder == "little" else ">HBBI"
    return [struct.unpack_from(fmt, data, i) for i in range(0, len(data), 8)]


def _rejects_x32(prog: "Sequence[tuple[int, int, int, int]] | pyseccomp.SyscallFilter") -> bool:
    """Whether the program (or a filter's exported program) checks nr >=
    0x40000000 right after loading nr."""
    if hasattr(prog, "export_bpf"):
        prog = export_bpf(prog)
    return any(a[0] == BPF_LD_W_ABS and a[3] == 0 and b[0] == BPF_JGE_K and b[3] == X32_SYSCALL_BIT
               for a, b in zip(prog, prog[1:], strict=False))


def _arch_guard_program() -> list[tuple[int, int, int, int]]:
    """x86_64 only: kill unless arch is x86_64 and nr is not an x32 number
    (nr == -1, which tracers use to skip a syscall, is let through)."""
    return [
        (BPF_LD_W_ABS, 0, 0, 4),                          # 0: A = seccomp_data.arch
        (BPF_JEQ_K, 0, 3, AUDIT_ARCH_X86_64),             # 1: arch != x86_64 -> 5
        (BPF_LD_W_ABS, 0, 0, 0),                          # 2: A = seccomp_data.nr
        (BPF_JGE_K, 0, 2, X32_SYSCALL_BIT),               # 3: nr < 0x40000000 -> 6
        (BPF_JEQ_K, 1, 0, 0xFFFFFFFF),                    # 4: nr == -1 -> 6, else 5
        (BPF_RET_K, 0, 0, SECCOMP_RET_KILL_PROCESS),      # 5
        (BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW),             # 6
    ]


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8),
                ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


def _seccomp_nr() -> int | None:
    try:
        return syscall_number("seccomp")
    except (ImportError, RuntimeError, OSError):
        return _SECCOMP_NR.get(os.uname().machine)


def _load_bpf(program: Sequence[tuple[int, int, int, int]]) -> None:
    """Install a classic-BPF seccomp program with seccomp(2) (stacked on any
    filter already installed)."""
    insns = _PACKED.get(program) if isinstance(program, tuple) else None
    if insns is None:
        insns = _pack(program)
    prog = _SockFprog(len(program), insns)
    nr = _seccomp_nr()
    if nr is None:
        raise OSError(_errno.ENOSYS, "seccomp(2) number unknown on this architecture")
    if libc.syscall(ctypes.c_long(nr), ctypes.c_long(SECCOMP_SET_MODE_FILTER),
                     ctypes.c_long(SECCOMP_FILTER_FLAG_TSYNC), ctypes.byref(prog)) != 0:
        raise oserror("seccomp(SET_MODE_FILTER)")


def _pack(program: Sequence[tuple[int, int, int, int]]) -> Any:
    return (_SockFilter * len(program))(*[_SockFilter(*i) for i in program])


# --- status -------------------------------------------------------------------------

def _action_avail(action: int) -> bool | None:
    """seccomp(SECCOMP_GET_ACTION_AVAIL); None when the kernel cannot say (< 4.14)."""
    nr = _seccomp_nr()
    if nr is None:
        return None
    val = ctypes.c_uint32(action)
    if libc.syscall(ctypes.c_long(nr), ctypes.c_long(SECCOMP_GET_ACTION_AVAIL),
                     ctypes.c_long(0), ctypes.byref(val)) == 0:
        return True
    return False if ctypes.get_errno() == _errno.EOPNOTSUPP else None


def _filter_mode_available() -> bool:
    ok = _action_avail(SECCOMP_RET_ALLOW)
    if ok is not None:
        return ok
    PR_GET_SECCOMP, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 21, 22, 2
    if libc.prctl(PR_GET_SECCOMP, 0, 0, 0, 0) < 0:
        return False
    # A NULL program: EFAULT means filter mode exists, EINVAL means it does not.
    libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, None, 0, 0)
    return ctypes.get_errno() in (_errno.EFAULT, _errno.EACCES)


def _current_mode() -> str | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Seccomp:"):
                    return {0: "disabled", 1: "strict", 2: "filter"}.get(int(line.split()[1]))
    except (OSError, ValueError):
        pass
    return None


class _ScmpVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint), ("minor", ctypes.c_uint), ("micro", ctypes.c_uint)]


def available() -> tuple[bool, bool]:
    """(filter mode, user notification): what the planner needs, without the
    library probes of status() (which build a filter)."""
    notif = bool(_action_avail(0x7FC00000)) and not listener_busy()
    return _filter_mode_available(), notif


_BUSY: list[bool] = []


def listener_busy() -> bool:
    """True if a filter this process inherited already has a listener: the kernel
    allows one per filter chain (EBUSY), so inside another confine run, or under
    any runtime that mediates with seccomp user notification, confine cannot
    have its own. Tried in a throw-away child (the filter stays with it)."""
    if _BUSY:
        return _BUSY[0]
    nr = _seccomp_nr()
    busy = False
    if nr is not None and _current_mode() == "filter":
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                libc.prctl(38, 1, 0, 0, 0)                 # PR_SET_NO_NEW_PRIVS
                prog = (_SockFilter * 1)(_SockFilter(BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW))
                fprog = _SockFprog(1, prog)
                fd = libc.syscall(ctypes.c_long(nr), ctypes.c_long(SECCOMP_SET_MODE_FILTER),
                                  ctypes.c_long(SECCOMP_FILTER_FLAG_NEW_LISTENER),
                                  ctypes.byref(fprog))
                code = 1 if fd < 0 and ctypes.get_errno() == _errno.EBUSY else 0
            finally:
                os._exit(code)
        busy = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 1
    _BUSY.append(busy)
    return busy


def status() -> dict[str, Any]:
    """For `confine check`: flat key -> scalar."""
    out: dict[str, Any] = {
        "filter": _filter_mode_available(),
        "user_notif": bool(_action_avail(0x7FC00000)),      # SECCOMP_RET_USER_NOTIF
        "kill_process": bool(_action_avail(SECCOMP_RET_KILL_PROCESS)),
        "libseccomp": None,
        "api_level": None,
        "arch": native_arch(),
        "current_mode": _current_mode(),
        "x32": "not applicable",
    }
    try:
        sc = libseccomp()
        fn = sc._libseccomp.seccomp_version
        fn.restype = ctypes.POINTER(_ScmpVersion)
        v = fn().contents
        out["libseccomp"] = f"{v.major}.{v.minor}.{v.micro}"
        try:
            out["api_level"] = sc.get_api()
        except NotImplementedError:
            pass
        if out["arch"] == "x86_64":
            out["x32"] = ("killed (libseccomp filter)" if _rejects_x32(build(()))
                          else "killed (confine guard filter)")
    except (ImportError, RuntimeError, OSError, AttributeError) as e:
        out["libseccomp_error"] = str(e)
    return out


# --- the unix-socket notifier (Landlock ABI < 9) ---------------------------------

# The calls that send a signal to a process named by number or pidfd (Landlock's
# signal scoping), and the fcntl/ioctl requests that aim SIGIO/SIGURG at one.
SIGNAL_CALLS = ("kill", "tkill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo",
                "pidfd_send_signal")
F_SETOWN, F_SETOWN_EX = 8, 15
FIOSETOWN, SIOCSPGRP = 0x8901, 0x8902


def build_notify(files: bool = False, meta: bool = False, bind: bool = False,
                 signals: bool = False, dgram: bool = False,
                 exec_: bool = False) -> "pyseccomp.SyscallFilter":
    """The notifying filter, loaded after the deny filter. The kernel runs every
    filter and the most restrictive answer wins, so a denial is never turned
    into a notification. See confine/mediation/ for who answers.
    files: mediate FILE_CALLS and writing opens; openat2 (its flags sit in a
    struct seccomp cannot read) answers ENOSYS, and callers fall back to openat.
    meta: mediate META_CALLS, refuse META_REFUSED and META_IOCTLS (no mount
    namespace: nothing else stops them outside the writable paths).
    signals: mediate the kill family and fcntl F_SETOWN(_EX), refuse the ioctls
    that aim SIGIO/SIGURG (no pid namespace, Landlock below ABI 6).
    dgram: IPv4/IPv6 datagram sockets (the deny table's DGRAM_GROUP, left out of
    the deny filter): the supervisor refuses each and says why once.
    exec_: execve and execveat, judged by the approval engine and resumed with
    CONTINUE (a guardrail: the path can change after the check)."""
    sc = libseccomp()
    flt = sc.SyscallFilter(sc.ALLOW)
    flt.set_attr(sc.Attr.ACT_BADARCH, sc.KILL_PROCESS)
    if meta:
        for name in META_CALLS:
            if syscall_number(name) is not None:
                flt.add_rule(sc.NOTIFY, syscall_number(name))
        for name in META_REFUSED:
            if syscall_number(name) is not None:
                flt.add_rule(sc.ERRNO(_errno.EPERM), syscall_number(name))
        for _, num in META_IOCTLS:
            flt.add_rule(sc.ERRNO(_errno.EPERM), "ioctl", sc.Arg(1, sc.MASKED_EQ, 0xFFFFFFFF, num))
    if signals:
        for name in SIGNAL_CALLS:
            if syscall_number(name) is not None:
                flt.add_rule(sc.NOTIFY, name)
        for cmd in (F_SETOWN, F_SETOWN_EX):
            flt.add_rule(sc.NOTIFY, "fcntl", sc.Arg(1, sc.MASKED_EQ, 0xFFFFFFFF, cmd))
        for num in (FIOSETOWN, SIOCSPGRP):
            flt.add_rule(sc.ERRNO(_errno.EPERM), "ioctl", sc.Arg(1, sc.MASKED_EQ, 0xFFFFFFFF, num))
    if files:
        for name in FILE_CALLS:
            if syscall_number(name) is not None:
                flt.add_rule(sc.NOTIFY, name)
        for name, arg in OPEN_CALLS.items():
            if syscall_number(name) is None:
                continue
            for bit in OPEN_WRITE_BITS:
                flt.add_rule(sc.NOTIFY, name, sc.Arg(arg, sc.MASKED_EQ, bit, bit))
        flt.add_rule(sc.ERRNO(_errno.ENOSYS), "openat2")
    if exec_:
        for name in ("execve", "execveat"):
            if syscall_number(name) is not None:
                flt.add_rule(sc.NOTIFY, name)
    if dgram:
        for fam in (AF_INET, AF_INET6):
            flt.add_rule(sc.NOTIFY, "socket", sc.Arg(0, sc.MASKED_EQ, 0xFFFFFFFF, fam),
                         sc.Arg(1, sc.MASKED_EQ, SOCK_TYPE_MASK, SOCK_DGRAM))
    for name in SOCKET_CALLS:
        if name == "sendto":
            flt.add_rule(sc.NOTIFY, name, sc.Arg(4, sc.NE, 0))
        else:
            flt.add_rule(sc.NOTIFY, name)
    # sendmmsg is among SOCKET_CALLS: each message may carry an address, so the
    # supervisor performs only those without one (mediation/supervisor.py).
    if bind:
        # no pidfd_getfd: a bound socket must be one the supervisor made
        # (mediation/sockfd.py), or its name could not follow it to a new one
        flt.add_rule(sc.NOTIFY, "bind")
        for level, opt in NOFD_SOCKOPTS:     # ... and so must the options a bind reads
            flt.add_rule(sc.NOTIFY, "setsockopt", sc.Arg(1, sc.MASKED_EQ, 0xFFFFFFFF, level),
                         sc.Arg(2, sc.MASKED_EQ, 0xFFFFFFFF, opt))
    return flt


# (level, option) of setsockopt notified where pidfd_getfd is refused: what a bind()
# performed on a new socket must know (SO_REUSEADDR, SO_REUSEPORT, IPV6_V6ONLY)
NOFD_SOCKOPTS = ((1, 2), (1, 15), (41, 26))


def notify_program(flt: "pyseccomp.SyscallFilter") -> bytes:
    """The notifying filter as raw BPF, exported before the fork (so the child
    needs neither a file nor libseccomp's loader for it)."""
    r, w = os.pipe()
    try:
        with os.fdopen(w, "wb", closefd=False) as f:
            flt.export_bpf(f)
        os.close(w)
        w = -1
        out = b""
        while True:
            chunk = os.read(r, 65536)
            if not chunk:
                return out
            out += chunk
    finally:
        os.close(r)
        if w >= 0:
            os.close(w)


def load_notify(prog: bytes) -> int:
    """Load in the child (no_new_privs already set); returns the listener fd.

    WAIT_KILLABLE_RECV (Linux 5.19): once the supervisor has taken a
    notification, only a fatal signal interrupts the waiting call. Without it a
    signal arriving while the broker performs a mkdir or an O_EXCL create
    restarts the call after it took effect (a spurious EEXIST), and a timer
    faster than a mediated call starves it with endless restarts. Older
    kernels: loaded without it."""
    insns = (_SockFilter * (len(prog) // 8)).from_buffer_copy(prog)
    fprog = _SockFprog(len(insns), insns)
    nr = _seccomp_nr()
    if nr is None:
        raise OSError(_errno.ENOSYS, "seccomp(2) number unknown on this architecture")
    err = _errno.EINVAL
    for flags in (SECCOMP_FILTER_FLAG_NEW_LISTENER | SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV,
                  SECCOMP_FILTER_FLAG_NEW_LISTENER):
        fd = libc.syscall(ctypes.c_long(nr), ctypes.c_long(SECCOMP_SET_MODE_FILTER),
                           ctypes.c_long(flags), ctypes.byref(fprog))
        if fd >= 0:
            return int(fd)
        err = ctypes.get_errno()
        if err != _errno.EINVAL:
            break
    raise oserror("seccomp(SET_MODE_FILTER, NEW_LISTENER)", err)
