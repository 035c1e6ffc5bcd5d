"""Real-kernel tests for confine.kernel.seccomp (no mocks).

Each test forks a child; the child sets no_new_privs, builds and loads the
filter, makes the forbidden system calls itself through ctypes
`libc.syscall(NR, ...)` and sends the results (return value or -errno) back
through a pipe as JSON; the assertions run in the parent. Deaths by signal
(SIGSYS for a bad architecture) are read from the wait status.

Most tests load the rules with their EPERM replaced by a marker errno
(ENOTRECOVERABLE), which no probed syscall returns on its own: as non-root the kernel
itself answers EPERM to most of these calls, so only the marker proves that the
filter, not a capability check, stopped the call. A few tests load the rules
unchanged and check the real EPERM on calls that would not fail with EPERM
unfiltered.

Every probe uses harmless arguments: if the filter let it through, the kernel
would reject it (bad magic, NULL pointers, nonexistent paths, a pipe fd for
ioctls, CLONE_THREAD without CLONE_SIGHAND, ...), or it is a no-op.
"""
from __future__ import annotations

import ctypes
import dataclasses
import errno
import json
import mmap
import os
import random
import resource
import signal
import socket
import stat
import subprocess
import sys

import pytest
from childrun import fork_json

from confine.kernel import seccomp
from confine.kernel.seccomp import DEFAULT_RULES, ArgMatch, Rule
from confine.kernel.seccomp.loader import _arch_guard_program, _load_bpf, _rejects_x32
from confine.kernel.seccomp.rules import _blocks_outside, describe_rule
from confine.kernel.seccomp.syscalls import resolve

MARK = errno.ENOTRECOVERABLE  # 131: no probed syscall returns it on its own
U32 = 0xFFFFFFFF
ARCH = seccomp.native_arch()
X86_64 = ARCH == "x86_64"
x86_64_only = pytest.mark.skipif(
    not X86_64, reason=f"i386 (int 0x80) and x32 ABIs exist only on x86_64; native ABI here is {ARCH}")

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
PR_SET_NO_NEW_PRIVS = 38

NOEXIST = b"/nonexistent-confine-seccomp-test/x"
AT_FDCWD = -100
CLONE_THREAD = 0x00010000
SOCK_NONBLOCK, SOCK_CLOEXEC = os.O_NONBLOCK, os.O_CLOEXEC
IPPROTO_SCTP, IPPROTO_MPTCP = 132, 262
ADDR_NO_RANDOMIZE, READ_IMPLIES_EXEC = 0x0040000, 0x0400000
TIOCSTI, TIOCLINUX, FIONREAD = 0x5412, 0x541C, 0x541B
DANGER = sum(seccomp.PERSONA_FLAGS)


def nr(name: str) -> int:
    n = seccomp.syscall_number(name)
    assert n is not None, f"{name} does not exist on {ARCH}"
    return n


# --- the child harness ------------------------------------------------------------

def _carg(v):
    if isinstance(v, int):
        v &= (1 << 64) - 1
        return ctypes.c_long(v - (1 << 64) if v >= 1 << 63 else v)
    if isinstance(v, bytes):
        return ctypes.c_char_p(v)
    return v  # a ctypes object (byref(...), array)


def sc(number: int, *args) -> int:
    """Raw syscall: its return value, or -errno."""
    ret = libc.syscall(ctypes.c_long(number), *[_carg(a) for a in args])
    return -ctypes.get_errno() if ret == -1 else ret


def set_nnp() -> None:
    libc.prctl.restype = ctypes.c_int
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "PR_SET_NO_NEW_PRIVS")


@dataclasses.dataclass
class Outcome:
    ok: bool
    value: object = None
    error: str = ""
    signal: int | None = None
    exit: int | None = None

    def result(self):
        assert self.signal is None, f"child killed by {signal.Signals(self.signal).name}"
        assert self.ok, f"child failed: {self.error}"
        return self.value


def run_child(fn, rules=None, *, setup=None, timeout: float = 10.0) -> Outcome:
    """fork; in the child: setsid, no core dumps, no_new_privs, build + load the
    filter for `rules` (none if None), call `setup` instead if given, then fn();
    its JSON-able result comes back through a pipe."""
    def before():
        os.setsid()  # no controlling tty: vhangup/TIOCSTI probes touch nothing
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # SIGSYS deaths leave no core
        set_nnp()
        if setup is not None:
            setup()
        elif rules is not None:
            seccomp.load(seccomp.build(rules))
    data = fork_json(fn, timeout, before)
    if "signal" in data:
        return Outcome(False, signal=data["signal"], error="killed")
    return Outcome(data["ok"], data.get("value"),
                   "" if data["ok"] else f"{data.get('type')}: {data.get('msg')}\n{data.get('tb')}",
                   exit=data["exit"])


def marked(rules) -> tuple[Rule, ...]:
    return tuple(dataclasses.replace(r, errno=MARK) if r.errno == errno.EPERM else r for r in rules)


# --- generic probes: one harmless call per rule and value variant ---------------

# Arguments that make each call harmless if it reached the kernel. Placeholders:
# "PIPE" (a pipe fd, for ioctls), "SV" (an int[2] for socketpair).
HARMLESS: dict[str, list] = {
    "mount": [0, 0, 0, 0, 0], "umount": [NOEXIST], "umount2": [NOEXIST, 0],
    "pivot_root": [0, 0], "move_mount": [-1, 0, -1, 0, 0], "open_tree": [-1, 0, 0],
    "open_tree_attr": [-1, 0, 0, 0, 0], "fsopen": [0, 0], "fsconfig": [-1, 0, 0, 0, 0],
    "fsmount": [-1, 0, 0], "fspick": [-1, 0, 0], "mount_setattr": [-1, 0, 0, 0, 0],
    "chroot": [NOEXIST], "swapon": [NOEXIST, 0], "swapoff": [NOEXIST],
    "reboot": [0, 0, 0, 0],                      # bad magic -> EINVAL
    "kexec_load": [0, 1000, 0, 0],               # too many segments -> EINVAL
    "kexec_file_load": [-1, -1, 0, 0, U32],      # bad flags -> EINVAL
    "init_module": [0, 0, 0],                    # empty image -> ENOEXEC
    "finit_module": [-1, b"", 0],
    "delete_module": [b"confine_no_such_module", os.O_NONBLOCK],
    "bpf": [1000, 0, 0], "perf_event_open": [0, 0, -1, -1, 0],
    "keyctl": [0xFFFF, 0, 0, 0, 0], "add_key": [0, 0, 0, 0, 0], "request_key": [0, 0, 0, 0],
    "userfaultfd": [U32],
    "io_uring_setup": [0, 0], "io_uring_enter": [-1, 0, 0, 0, 0, 0], "io_uring_register": [-1, 0, 0, 0],
    "landlock_restrict_self": [-1, 0],
    "unshare": [0], "setns": [-1, 0],
    "clone": [CLONE_THREAD, 0, 0, 0, 0],         # CLONE_THREAD without CLONE_SIGHAND -> EINVAL
    "clone3": [0, 0],
    "open_by_handle_at": [-1, 0, 0], "name_to_handle_at": [-1, 0, 0, 0, 0],
    "acct": [NOEXIST], "quotactl": [0, 0, 0, 0], "quotactl_fd": [-1, 0, 0, 0],
    "settimeofday": [0, 0], "clock_settime": [0, 0], "adjtimex": [0], "clock_adjtime": [0, 0],
    "syslog": [10, 0, 0],                        # SYSLOG_ACTION_SIZE_BUFFER
    "iopl": [0], "ioperm": [0, 0, 0],
    "sethostname": [0, -1], "setdomainname": [0, -1],
    "vhangup": [],                               # after setsid(): no tty to hang up
    "lookup_dcookie": [0, 0, 0], "nfsservctl": [0, 0, 0], "uselib": [0], "_sysctl": [0],
    "sysfs": [0xFFFF, 0, 0], "ustat": [0, 0],
    "personality": [0],
    "mknod": [NOEXIST, 0o600, 0x103], "mknodat": [AT_FDCWD, NOEXIST, 0o600, 0x103],
    "socket": [socket.AF_UNIX, socket.SOCK_STREAM, 0],
    "socketpair": [socket.AF_UNIX, socket.SOCK_STREAM, 0, "SV"],
    "sendto": [-1, 0, 0, 0, 0, 0], "sendmsg": [-1, 0, 0],
    "ioctl": ["PIPE", 0, 0],
}


def arg_value(base, a: ArgMatch, variant: str) -> int:
    """A value that satisfies comparison `a`; "low" keeps the harmless bits of
    `base` outside the mask, "high" sets every other low-32 bit, "hibits"
    also sets bits 32..63 (the kernel truncates int arguments)."""
    assert a.op == "masked_eq", "default rules only use masked_eq"
    base = base if isinstance(base, int) else 0
    low = (base & ~a.mask & U32) | a.value
    if variant == "low":
        return low
    if variant == "high":
        return (low | (~a.mask & U32)) if a.mask <= U32 else low
    return low | (0xDEAD << 32)


def probes_for(rule: Rule) -> list[tuple[str, int, list]]:
    n = seccomp.syscall_number(rule.syscall)
    if n is None:
        return []
    out = []
    for variant in (("low", "high", "hibits") if rule.args else ("low",)):
        args = list(HARMLESS[rule.syscall])
        for a in rule.args:
            args[a.index] = arg_value(args[a.index], a, variant)
        out.append((f"{describe_rule(rule)} [{variant}]", n, args))
    return out


def run_probes(probes) -> list:
    rfd, wfd = os.pipe()
    results = []
    for label, number, args in probes:
        sv = (ctypes.c_int * 2)()
        real = [rfd if a == "PIPE" else ctypes.byref(sv) if a == "SV" else a for a in args]
        ret = sc(number, *real)
        if ret == 0 and number == seccomp.syscall_number("clone"):
            os._exit(0)  # only if a clone probe got through: never run test code twice
        results.append([label, ret])
    return results


GROUPS = sorted({r.group for r in DEFAULT_RULES})


@pytest.mark.parametrize("group", GROUPS)
def test_every_rule_of_group_is_enforced(group):
    rules = [r for r in DEFAULT_RULES if r.group == group]
    probes = [p for r in rules for p in probes_for(r)]
    if not probes:
        pytest.skip(f"no syscall of group {group} exists on {ARCH}")
    expected = {p[0]: -(MARK if r.errno == errno.EPERM else r.errno) for r in rules for p in probes_for(r)}
    got = dict(run_child(lambda: run_probes(probes), marked(DEFAULT_RULES)).result())
    wrong = {k: v for k, v in got.items() if v != expected[k]}
    assert not wrong, f"not denied by the filter (value = return or -errno): {wrong}"
    assert len(got) == len(probes)


# --- the rule set as data -----------------------------------------------------------

REQUIRED = """mount umount2 pivot_root move_mount open_tree fsopen fsconfig fsmount fspick
mount_setattr chroot swapon swapoff reboot kexec_load kexec_file_load init_module finit_module
delete_module bpf perf_event_open keyctl add_key request_key userfaultfd io_uring_setup
io_uring_enter io_uring_register unshare setns open_by_handle_at name_to_handle_at acct
quotactl quotactl_fd settimeofday clock_settime adjtimex clock_adjtime syslog iopl ioperm
sethostname setdomainname vhangup lookup_dcookie nfsservctl uselib _sysctl sysfs ustat""".split()


def test_default_rules_shape():
    unconditional = {r.syscall for r in DEFAULT_RULES if not r.args}
    assert set(REQUIRED) <= unconditional
    for r in DEFAULT_RULES:
        assert r.errno == (errno.ENOSYS if r.syscall == "clone3" else errno.EPERM), r
        assert r.group and r.why, r
        assert r.syscall in HARMLESS, f"no harmless probe for {r.syscall}: add one to HARMLESS"
        for a in r.args:  # int-typed arguments: compare at most the low 32 bits
            assert a.op == "masked_eq" and a.mask <= U32, r
    assert {r.syscall for r in DEFAULT_RULES if r.errno == errno.ENOSYS} == {"clone3"}
    # A group named like a syscall holds only that syscall: unsafe_allow=[name] is unambiguous.
    for g in GROUPS:
        if g in {r.syscall for r in DEFAULT_RULES}:
            assert {r.syscall for r in DEFAULT_RULES if r.group == g} == {g}, g
    assert len(set(DEFAULT_RULES)) == len(DEFAULT_RULES)
    # Every name is known to libseccomp (on some arch) or to the fallback table.
    for name in {r.syscall for r in DEFAULT_RULES}:
        assert resolve(name)[1], name


def test_clone_rules_cover_each_namespace_flag():
    flags = {r.args[0].value for r in DEFAULT_RULES if r.syscall == "clone"}
    assert flags == {0x20000, 0x2000000, 0x4000000, 0x8000000, 0x10000000, 0x20000000, 0x40000000, 0x80}
    for r in DEFAULT_RULES:
        if r.syscall == "clone":
            assert r.args[0].mask == r.args[0].value and r.args[0].index == 0


def test_ioctl_numbers_match_the_ioc_macros():
    def ioc(d, t, n, size):
        return (d << 30) | (size << 16) | (t << 8) | n
    W, R = 1, 2
    want = {
        "BLKPG": ioc(0, 0x12, 105, 0), "BLKRRPART": ioc(0, 0x12, 95, 0), "BLKDISCARD": ioc(0, 0x12, 119, 0),
        "BLKSECDISCARD": ioc(0, 0x12, 125, 0), "BLKZEROOUT": ioc(0, 0x12, 127, 0),
        "BLKBSZSET": ioc(W, 0x12, 113, 8), "BLKTRACESETUP": ioc(R | W, 0x12, 115, 72),
        "BLKRESETZONE": ioc(W, 0x12, 131, 16), "BLKFINISHZONE": ioc(W, 0x12, 136, 16),
        "NVME_IOCTL_ADMIN_CMD": ioc(R | W, ord("N"), 0x41, 72), "NVME_IOCTL_SUBMIT_IO": ioc(W, ord("N"), 0x42, 48),
        "NVME_IOCTL_ADMIN64_CMD": ioc(R | W, ord("N"), 0x47, 80), "NVME_IOCTL_RESET": ioc(0, ord("N"), 0x44, 0),
        "FIFREEZE": ioc(R | W, ord("X"), 119, 4), "IOC_PR_REGISTER": ioc(W, ord("p"), 200, 24),
        "MEMERASE": ioc(W, ord("M"), 2, 8), "MEMWRITE": ioc(R | W, ord("M"), 24, 48),
    }
    have = {name: num for name, num, _ in seccomp.IOCTLS}
    for name, num in want.items():
        assert have[name] == num, f"{name}: {have[name]:#x} != {num:#x}"
    must = """TIOCSTI TIOCLINUX TIOCCONS BLKPG BLKRRPART BLKDISCARD BLKSECDISCARD BLKZEROOUT BLKFLSBUF
    BLKROSET BLKBSZSET BLKRASET BLKFRASET BLKTRACESETUP BLKRESETZONE BLKOPENZONE BLKCLOSEZONE
    BLKFINISHZONE SG_IO SCSI_IOCTL_SEND_COMMAND CDROM_SEND_PACKET HDIO_DRIVE_CMD HDIO_DRIVE_TASK
    HDIO_DRIVE_TASKFILE NVME_IOCTL_ADMIN_CMD NVME_IOCTL_IO_CMD NVME_IOCTL_SUBMIT_IO
    NVME_IOCTL_ADMIN64_CMD NVME_IOCTL_IO64_CMD NVME_IOCTL_RESET NVME_IOCTL_SUBSYS_RESET
    NVME_IOCTL_RESCAN LOOP_SET_FD LOOP_CONFIGURE LOOP_CTL_ADD""".split()
    assert set(must) <= set(have)
    assert have["TIOCSTI"] == 0x5412 and have["TIOCLINUX"] == 0x541C and have["SG_IO"] == 0x2285


def test_blocks_outside_is_an_exact_complement():
    for allowed, width in (((1, 2, 10, 16), 8), ((0, 6), 10), ((1, 2, 3), 4), ((1,), 6)):
        blocks = _blocks_outside(allowed, width)
        for v in range(1 << width):
            hits = sum(v & m == val for val, m in blocks)
            assert hits == (0 if v in allowed else 1), (allowed, v, hits)
    assert len(_blocks_outside((0, 6))) == 33


def denied_by(rules, syscall, *args) -> bool:
    padded = list(args) + [0] * (6 - len(args))
    return any(r.syscall == syscall and r.args and r.matches(padded) for r in rules)


def test_personality_rules_deny_exactly_the_dangerous_values():
    """The 32 rules, evaluated as the BPF evaluates them, against the intended
    predicate: deny iff some danger bit is set and the value is not 0xffffffff."""
    rules = [r for r in DEFAULT_RULES if r.syscall == "personality"]
    assert len(rules) == 32
    rng = random.Random(1234)
    values = {0, 8, 0x20000, 0x20008, U32, DANGER, U32 ^ DANGER}
    values |= {1 << i for i in range(32)} | {U32 ^ (1 << i) for i in range(32)}
    values |= {(1 << i) | (1 << j) for i in range(32) for j in range(32)}
    values |= {U32 ^ ((1 << i) | (1 << j)) for i in range(32) for j in range(32)}
    values |= {rng.getrandbits(32) for _ in range(20000)}
    values |= {rng.getrandbits(32) & rng.getrandbits(32) & rng.getrandbits(32) for _ in range(20000)}
    for v in values:
        want = bool(v & DANGER) and v != U32
        for high in (0, 0xFFFFFFFF << 32):  # the kernel reads an unsigned int
            assert denied_by(rules, "personality", v | high) == want, hex(v | high)


def test_socket_rules_as_data():
    R = DEFAULT_RULES
    AF_PACKET, AF_VSOCK, AF_ALG = 17, 40, 38
    for fam in (socket.AF_UNIX, socket.AF_NETLINK):
        for typ in (1, 2, 3, 5):
            assert not denied_by(R, "socket", fam, typ, 0)
    for fam in (socket.AF_INET, socket.AF_INET6):
        for typ in (1, 1 | SOCK_NONBLOCK | SOCK_CLOEXEC):
            for proto in (0, 6):
                assert not denied_by(R, "socket", fam, typ, proto)
            for proto in (1, 17, IPPROTO_SCTP, 256, IPPROTO_MPTCP, U32, 6 | (1 << 32)):
                assert denied_by(R, "socket", fam, typ, proto) == (proto >> 32 == 0 or proto & U32 != 6), proto
        for typ in (2, 3, 4, 5, 6, 10, 2 | SOCK_CLOEXEC, 3 | SOCK_NONBLOCK):
            assert denied_by(R, "socket", fam, typ, 0)
    for fam in list(range(0, 64)) + [1 << 31, U32, 100000]:
        want = fam not in (1, 2, 10, 16)
        assert denied_by(R, "socket", fam, 1, 0) == want
        assert denied_by(R, "socket", fam | (7 << 32), 1, 0) == want  # high bits change nothing
    for fam in (AF_PACKET, AF_VSOCK, AF_ALG):
        assert denied_by(R, "socket", fam, 1, 0)
    for fam in range(0, 200):
        assert denied_by(R, "socketpair", fam, 1, 0) == (fam != 1)


# --- the filter as the kernel applies it ----------------------------------------------

def test_build_is_native_only_and_kills_bad_arch():
    import pyseccomp
    flt = seccomp.build(DEFAULT_RULES)
    assert flt.get_attr(pyseccomp.Attr.ACT_BADARCH) == pyseccomp.KILL_PROCESS
    assert flt.exist_arch(pyseccomp.Arch.NATIVE)
    for other in (pyseccomp.Arch.X86, pyseccomp.Arch.X32, pyseccomp.Arch.ARM, pyseccomp.Arch.AARCH64,
                  pyseccomp.Arch.X86_64):
        if other != pyseccomp.system_arch():
            assert not flt.exist_arch(other)
    prog = seccomp.export_bpf(flt)
    assert len(prog) < 4096  # BPF_MAXINSNS
    assert prog[0] == (seccomp.BPF_LD_W_ABS, 0, 0, 4)  # the first thing it reads is the arch


@x86_64_only
def test_libseccomp_program_rejects_x32_itself():
    """libseccomp's x86_64 program kills nr >= 0x40000000 (except -1) after the
    arch check, so the fallback guard is not stacked with this libseccomp."""
    flt = seccomp.build(DEFAULT_RULES)
    assert _rejects_x32(flt)
    assert not getattr(flt, "_confine_arch_guard", False)


def test_real_errno_is_eperm(tmp_path):
    """The unmodified defaults answer EPERM where the kernel itself would not."""
    def body():
        r, _ = os.pipe()
        return {
            "tiocsti": sc(nr("ioctl"), r, TIOCSTI, 0),
            "udp": sc(nr("socket"), socket.AF_INET, socket.SOCK_DGRAM, 0),
            "personality": sc(nr("personality"), ADDR_NO_RANDOMIZE),
            "mknodat_chr": sc(nr("mknodat"), AT_FDCWD, NOEXIST, stat.S_IFCHR | 0o600, 0x103),
            "bpf": sc(nr("bpf"), 1000, 0, 0),
            "clone3": sc(nr("clone3"), 0, 0),
        }
    control = run_child(body).result()
    assert control["tiocsti"] == -errno.ENOTTY and control["udp"] >= 0
    assert control["mknodat_chr"] == -errno.ENOENT and control["clone3"] == -errno.EINVAL
    got = run_child(body, DEFAULT_RULES).result()
    assert got == {"tiocsti": -errno.EPERM, "udp": -errno.EPERM, "personality": -errno.EPERM,
                   "mknodat_chr": -errno.EPERM, "bpf": -errno.EPERM, "clone3": -errno.ENOSYS}


def test_ioctl_high_bits_do_not_bypass():
    def body():
        r, _ = os.pipe()
        n = nr("ioctl")
        return [sc(n, r, TIOCSTI | (1 << 32), 0), sc(n, r, TIOCSTI | (0xFFFFFFFF << 32), 0),
                sc(n, r, TIOCLINUX | (1 << 63), 0), sc(n, r, FIONREAD, ctypes.byref(ctypes.c_int()))]
    assert run_child(body).result()[:3] == [-errno.ENOTTY] * 3  # the kernel ignores the high bits
    assert run_child(body, DEFAULT_RULES).result() == [-errno.EPERM] * 3 + [0]


def test_sockets():
    def body():
        n = nr("socket")
        out = {}
        for label, args in {
            "packet_hibits": (17 | (1 << 32), socket.SOCK_RAW, 0),
            "packet": (17, socket.SOCK_DGRAM, 0),
            "vsock": (40, socket.SOCK_STREAM, 0),
            "alg": (38, 5, 0),
            "udp_cloexec": (socket.AF_INET, socket.SOCK_DGRAM | SOCK_CLOEXEC, 0),
            "udp6_nonblock": (socket.AF_INET6, socket.SOCK_DGRAM | SOCK_NONBLOCK, 0),
            "raw_icmp": (socket.AF_INET, socket.SOCK_RAW, 1),
            "sctp": (socket.AF_INET, socket.SOCK_STREAM, IPPROTO_SCTP),
            "mptcp": (socket.AF_INET6, socket.SOCK_STREAM | SOCK_CLOEXEC, IPPROTO_MPTCP),
            "mptcp_hibits": (socket.AF_INET, socket.SOCK_STREAM, IPPROTO_MPTCP | (1 << 40)),
            "seqpacket": (socket.AF_INET, socket.SOCK_SEQPACKET, 0),
            "tcp": (socket.AF_INET, socket.SOCK_STREAM, 0),
            "tcp_explicit": (socket.AF_INET, socket.SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 6),
            "tcp6": (socket.AF_INET6, socket.SOCK_STREAM, 0),
            "unix_dgram": (socket.AF_UNIX, socket.SOCK_DGRAM, 0),
            "unix_seqpacket": (socket.AF_UNIX, socket.SOCK_SEQPACKET, 0),
            "netlink_route": (socket.AF_NETLINK, socket.SOCK_RAW | SOCK_CLOEXEC, 0),
        }.items():
            fd = sc(n, *args)
            out[label] = "ok" if fd >= 0 else errno.errorcode[-fd]
        sv = (ctypes.c_int * 2)()
        out["socketpair_unix"] = sc(nr("socketpair"), socket.AF_UNIX, socket.SOCK_STREAM, 0, ctypes.byref(sv))
        out["socketpair_inet"] = sc(nr("socketpair"), socket.AF_INET, socket.SOCK_STREAM, 0, ctypes.byref(sv))
        # the Python API on top works too
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind(("127.0.0.1", 0))
        s.listen()
        c = socket.create_connection(s.getsockname())
        c.sendall(b"x")
        conn, _ = s.accept()
        out["tcp_roundtrip"] = conn.recv(1).decode()
        return out
    got = run_child(body, DEFAULT_RULES).result()
    for label in ("packet_hibits", "packet", "vsock", "alg", "udp_cloexec", "udp6_nonblock", "raw_icmp",
                  "sctp", "mptcp", "mptcp_hibits", "seqpacket"):
        assert got[label] == "EPERM", (label, got[label])
    for label in ("tcp", "tcp_explicit", "tcp6", "unix_dgram", "unix_seqpacket", "netlink_route"):
        assert got[label] == "ok", (label, got[label])
    assert got["socketpair_unix"] == 0 and got["socketpair_inet"] == -errno.EPERM
    assert got["tcp_roundtrip"] == "x"


def test_personality():
    def body():
        n = nr("personality")
        out = {"query": sc(n, U32), "addr_no_randomize": sc(n, ADDR_NO_RANDOMIZE),
               "read_implies_exec": sc(n, READ_IMPLIES_EXEC | 8),
               "all_but_one_bit": sc(n, U32 ^ 1), "danger_hibits": sc(n, ADDR_NO_RANDOMIZE | (1 << 32)),
               "after_denials": sc(n, U32)}
        out["safe"] = [sc(n, v) for v in (0, 8, 0x20000, 0x20008, 0)]
        out["final"] = sc(n, U32)
        return out
    got = run_child(body, DEFAULT_RULES).result()
    assert got["query"] == 0 and got["after_denials"] == 0  # nothing changed
    for k in ("addr_no_randomize", "read_implies_exec", "all_but_one_bit", "danger_hibits"):
        assert got[k] == -errno.EPERM, k
    # setting a safe persona returns the previous one
    assert got["safe"] == [0, 0, 8, 0x20000, 0x20008]
    assert got["final"] == 0


def test_mknod(tmp_path):
    d = str(tmp_path).encode()

    def body():
        out = {}
        for name, call in (("mknod", lambda p, m: sc(nr("mknod"), p, m, 0x103)),
                           ("mknodat", lambda p, m: sc(nr("mknodat"), AT_FDCWD, p, m, 0x103))):
            if seccomp.syscall_number(name) is None:
                continue  # aarch64 has only mknodat
            out[f"{name}_fifo"] = call(d + b"/fifo-" + name.encode(), stat.S_IFIFO | 0o600)
            out[f"{name}_reg"] = call(d + b"/reg-" + name.encode(), stat.S_IFREG | 0o600)
            out[f"{name}_chr"] = call(d + b"/chr-" + name.encode(), stat.S_IFCHR | 0o600)
            out[f"{name}_blk"] = call(d + b"/blk-" + name.encode(), stat.S_IFBLK | 0o600)
            out[f"{name}_chr_hibits"] = call(d + b"/chr2-" + name.encode(), stat.S_IFCHR | 0o600 | (1 << 40))
        return out
    got = run_child(body, DEFAULT_RULES).result()
    assert got, "neither mknod nor mknodat exists?"
    for k, v in got.items():
        assert v == (0 if k.endswith(("_fifo", "_reg")) else -errno.EPERM), (k, v)
    names = sorted(os.listdir(tmp_path))
    assert all(n.startswith(("fifo-", "reg-")) for n in names) and names
    assert all(stat.S_ISFIFO(os.stat(tmp_path / n).st_mode) for n in names if n.startswith("fifo-"))


def test_namespaces_clone_and_fork():
    def body():
        out = {}
        n = nr("clone")
        for flag in (0x10000000, 0x40000000, 0x20000 | 0x10000000):  # NEWUSER, NEWNET, NEWNS|NEWUSER
            ret = sc(n, flag | signal.SIGCHLD, 0, 0, 0, 0)
            if ret == 0:
                os._exit(0)  # the filter failed and we are the new process
            if ret > 0:
                os.waitpid(ret, 0)
            out[f"clone_{flag:#x}"] = ret
        out["unshare_user"] = sc(nr("unshare"), 0x10000000)
        out["unshare_none"] = sc(nr("unshare"), 0)
        out["setns"] = sc(nr("setns"), -1, 0)
        out["clone3"] = sc(nr("clone3"), 0, 0)
        pid = os.fork()  # glibc fork() is clone(SIGCHLD|CHILD_SETTID|CHILD_CLEARTID)
        if pid == 0:
            os._exit(7)
        out["fork"] = os.WEXITSTATUS(os.waitpid(pid, 0)[1])
        # pthread_create tries clone3 first and falls back to clone on ENOSYS
        import threading
        box = []
        t = threading.Thread(target=lambda: box.append(os.getpid()))
        t.start()
        t.join()
        out["thread"] = box == [os.getpid()]
        out["subprocess"] = subprocess.run(["/bin/sh", "-c", "exit 3"]).returncode
        return out
    got = run_child(body, DEFAULT_RULES).result()
    for k in ("clone_0x10000000", "clone_0x40000000", "clone_0x10020000", "unshare_user", "unshare_none", "setns"):
        assert got[k] == -errno.EPERM, (k, got[k])
    assert got["clone3"] == -errno.ENOSYS
    assert got["fork"] == 7 and got["thread"] is True and got["subprocess"] == 3


def test_filtered_child_can_exec_true_and_python():
    def exec_true():
        os.execv("/bin/true", ["/bin/true"])
    out = run_child(exec_true, DEFAULT_RULES)
    assert out.signal is None and out.exit == 0 and out.value is None

    r, w = os.pipe()
    code = ("import socket, subprocess, threading, json, sys\n"
            "s = socket.socket(); s.close()\n"
            "t = threading.Thread(target=lambda: None); t.start(); t.join()\n"
            "print(json.dumps([subprocess.run(['/bin/true']).returncode, sys.version_info[0]]))\n")

    def exec_python():
        os.dup2(w, 1)
        os.execv(sys.executable, [sys.executable, "-c", code])
    out = run_child(exec_python, DEFAULT_RULES)
    os.close(w)
    with os.fdopen(r) as f:
        printed = f.read()
    assert out.signal is None and out.exit == 0, out
    assert json.loads(printed) == [0, 3]


def test_unsafe_allow_removes_exactly_the_named_rule():
    rules = seccomp.rules_for(unsafe_allow=["ioctl:TIOCSTI"])
    assert rules == tuple(r for r in DEFAULT_RULES if r.group != "ioctl:TIOCSTI")
    assert len(rules) == len(DEFAULT_RULES) - 1

    def body():
        r, _ = os.pipe()
        return [sc(nr("ioctl"), r, TIOCSTI, 0), sc(nr("ioctl"), r, TIOCLINUX, 0)]
    assert run_child(body, rules).result() == [-errno.ENOTTY, -errno.EPERM]
    assert run_child(body, DEFAULT_RULES).result() == [-errno.EPERM, -errno.EPERM]

    # a syscall name and a group name
    no_bpf = seccomp.rules_for(unsafe_allow=["bpf"])
    assert set(DEFAULT_RULES) - set(no_bpf) == {r for r in DEFAULT_RULES if r.syscall == "bpf"}
    no_ns = seccomp.rules_for(unsafe_allow=["namespaces"])
    assert {r.syscall for r in set(DEFAULT_RULES) - set(no_ns)} == {"unshare", "setns", "clone", "clone3"}
    just_unshare = seccomp.rules_for(unsafe_allow=["unshare"])
    assert set(DEFAULT_RULES) - set(just_unshare) == {r for r in DEFAULT_RULES if r.syscall == "unshare"}
    assert run_child(lambda: sc(nr("unshare"), 0), just_unshare).result() == 0
    assert seccomp.rules_for() == DEFAULT_RULES


def test_extra_deny():
    rules = seccomp.rules_for(extra_deny=["getppid", "getppid", "mount", "ioctl"])
    added = rules[len(DEFAULT_RULES):]
    assert [(r.syscall, r.errno, r.args) for r in added] == [("getppid", errno.EPERM, ()),
                                                           ("ioctl", errno.EPERM, ())]

    def body():
        r, _ = os.pipe()
        return [sc(nr("getppid")), sc(nr("ioctl"), r, FIONREAD, ctypes.byref(ctypes.c_int())), sc(nr("getpid"))]
    got = run_child(body, rules).result()
    assert got[:2] == [-errno.EPERM, -errno.EPERM] and got[2] > 0
    # unsafe_allow and extra_deny together: the explicit deny wins
    both = seccomp.rules_for(extra_deny=["bpf"], unsafe_allow=["bpf"])
    assert [r for r in both if r.syscall == "bpf"] == [Rule("bpf", errno.EPERM, (), "profile", "denied by the profile")]


def test_unknown_names_raise_value_error():
    with pytest.raises(ValueError, match="no_such_syscall_xyz"):
        seccomp.rules_for(extra_deny=["no_such_syscall_xyz"])
    with pytest.raises(ValueError, match="no-such-group"):
        seccomp.rules_for(unsafe_allow=["no-such-group"])
    with pytest.raises(ValueError, match="socket:AF_INET'"):
        seccomp.rules_for(unsafe_allow=["socket:AF_INET"])  # allowed already: names no rule
    with pytest.raises(TypeError):
        seccomp.rules_for(extra_deny="mount")
    if X86_64:
        with pytest.raises(ValueError, match="vm86"):
            seccomp.rules_for(extra_deny=["vm86"])  # i386 only
    with pytest.raises(ValueError):
        ArgMatch(6, "eq", 0)
    with pytest.raises(ValueError):
        ArgMatch(0, "masked_ne", 0)
    with pytest.raises(ValueError):
        Rule("socket", errno.EPERM, (ArgMatch(0, "eq", 1), ArgMatch(0, "eq", 2)))
    with pytest.raises(ValueError, match="frobnicate"):
        seccomp.build([Rule("frobnicate", errno.EPERM)])


def test_names_missing_on_this_arch_are_skipped_by_build():
    missing = [r for r in DEFAULT_RULES if seccomp.syscall_number(r.syscall) is None]
    if X86_64:
        assert {r.syscall for r in missing} == {"umount"}
    seccomp.build(missing)  # nothing to add, no error
    # names newer than this libseccomp resolve through the unified table
    assert seccomp.syscall_number("open_tree_attr") == 467


# --- architectures ------------------------------------------------------------------

I386_GETPID = bytes([0xB8, 20, 0, 0, 0,   # mov eax, 20  (getpid on i386)
                     0xCD, 0x80,          # int 0x80
                     0xC3])               # ret


def call_i386_getpid() -> int:
    m = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    m.write(I386_GETPID)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
    return ctypes.CFUNCTYPE(ctypes.c_int)(addr)()


@x86_64_only
def test_i386_int80_kills_the_process():
    control = run_child(lambda: [call_i386_getpid(), os.getpid()])
    if control.signal is not None or not control.ok:
        pytest.skip(f"int 0x80 does not work here without a filter (IA32 emulation off?): {control}")
    pid_i386, pid = control.value
    assert pid_i386 == pid  # the control really made an i386 system call
    out = run_child(call_i386_getpid, DEFAULT_RULES)
    assert out.signal == signal.SIGSYS, out


@x86_64_only
def test_x32_syscall_kills_the_process():
    x32_getpid = 0x40000000 | 39
    control = run_child(lambda: sc(x32_getpid)).result()
    # -ENOSYS when the kernel has no x32 ABI (CONFIG_X86_X32_ABI off, as here); a pid otherwise
    assert control == -errno.ENOSYS or control > 0
    out = run_child(lambda: sc(x32_getpid), DEFAULT_RULES)
    assert out.signal == signal.SIGSYS, out
    # syscall -1 (used by tracers to skip a call) is not an x32 call: ENOSYS, no kill
    assert run_child(lambda: sc(-1), DEFAULT_RULES).result() == -errno.ENOSYS


@x86_64_only
def test_fallback_arch_guard_alone():
    """The hand-written cBPF guard that load() stacks if libseccomp ever stops
    rejecting x32: loaded alone, it kills x32 and i386 calls and allows the rest."""
    def setup():
        _load_bpf(_arch_guard_program())
    assert run_child(lambda: sc(nr("getpid")) == os.getpid(), setup=setup).result() is True
    assert run_child(lambda: sc(0x40000000 | 39), setup=setup).signal == signal.SIGSYS
    assert run_child(call_i386_getpid, setup=setup).signal == signal.SIGSYS
    assert run_child(lambda: sc(-1), setup=setup).result() == -errno.ENOSYS

    # and load() stacks it when the flag says so
    def setup_flagged():
        flt = seccomp.build(DEFAULT_RULES)
        flt._confine_arch_guard = True
        seccomp.load(flt)
    def filters():
        with open("/proc/self/status") as f:
            return [int(line.split()[1]) for line in f if line.startswith("Seccomp_filters:")]
    assert run_child(filters, setup=setup_flagged).result() == [2]
    assert run_child(filters, DEFAULT_RULES).result() == [1]


# --- describe / status ------------------------------------------------------------------

def test_describe():
    d = seccomp.describe(DEFAULT_RULES)
    json.dumps(d)
    assert len(d) == len(DEFAULT_RULES)
    tiocsti = [x for x in d if x["group"] == "ioctl:TIOCSTI"]
    assert tiocsti == [{"syscall": "ioctl", "errno": "EPERM", "args": ["arg1 & 0xffffffff == TIOCSTI(0x5412)"],
                        "group": "ioctl:TIOCSTI", "why": tiocsti[0]["why"], "nr": nr("ioctl")}]
    assert tiocsti[0]["why"]
    clone3 = [x for x in d if x["syscall"] == "clone3"]
    assert clone3[0]["errno"] == "ENOSYS" and clone3[0]["args"] == []
    assert "arg0 & 0x10000000 == CLONE_NEWUSER(0x10000000)" in {a for x in d for a in x["args"]}
    assert "arg0 & 0xffffffff == AF_PACKET(0x11)" in {a for x in d for a in x["args"]}
    assert "arg2 & 0xf000 == S_IFCHR(0x2000)" in {a for x in d for a in x["args"]}


def test_status():
    st = seccomp.status()
    json.dumps(st)
    assert {"filter", "user_notif", "libseccomp", "arch"} <= set(st)
    assert all(not isinstance(v, (dict, list)) for v in st.values())
    assert st["arch"] == ARCH
    assert st["libseccomp"] and st["libseccomp"].count(".") == 2
    with open("/proc/sys/kernel/seccomp/actions_avail") as f:
        avail = f.read().split()
    assert st["filter"] is True  # this test file needs it anyway
    assert st["user_notif"] is ("user_notif" in avail)
    assert st["kill_process"] is ("kill_process" in avail)
    if X86_64:
        assert st["x32"] == "killed (libseccomp filter)"
