"""The ioctl allowlist: device ioctls where neither Landlock IOCTL_DEV (ABI 5)
nor a mount namespace (the nodev host view) is there to restrict them.

Without both, a device node the agent can open through a read or write grant
would let any ioctl reach its driver. seccomp cannot see which file a
descriptor names, so this filter lets through only requests that are generic
(descriptor flags, sizes, file clones), terminal settings, socket and interface
queries, and refuses every other request on every descriptor with EACCES,
Landlock's own answer. Requests that send signals (SIOCSPGRP, FIOSETOWN,
TIOCSIG) and those that need privileges or drive hardware lines (modem and
serial control, TIOCVHANGUP, TIOCSLCKTRMIOS) are not on the list; the default
deny filter refuses TIOCSTI, TIOCLINUX, TIOCCONS and TIOCSETD before this one
is consulted.

Numbers are those of x86_64 and aarch64 (asm-generic), from the uapi headers
of this machine (compiled with a C program), compared on the low 32 bits as
the kernel does.
"""
from __future__ import annotations

import errno
import sys

from .loader import AUDIT_ARCH_X86_64, BPF_JEQ_K, BPF_LD_W_ABS, BPF_RET_K, SECCOMP_RET_ALLOW, Program
from .syscalls import native_arch, syscall_number

AUDIT_ARCH_AARCH64 = 0xC00000B7
SECCOMP_RET_ERRNO = 0x00050000

ALLOWED: tuple[tuple[str, int], ...] = (
    # descriptor and file generic (the requests Landlock ABI 5 always allows too)
    ("FIOCLEX", 0x5451), ("FIONCLEX", 0x5450), ("FIONBIO", 0x5421), ("FIOASYNC", 0x5452),
    ("FIONREAD", 0x541B), ("FIOQSIZE", 0x5460), ("FIGETBSZ", 0x2),
    ("FS_IOC_FIEMAP", 0xC020660B), ("FICLONE", 0x40049409), ("FICLONERANGE", 0x4020940D),
    ("FIDEDUPERANGE", 0xC0189436), ("FS_IOC_GETFLAGS", 0x80086601),
    ("FS_IOC32_GETFLAGS", 0x80046601), ("FS_IOC_GETVERSION", 0x80087601),
    ("FS_IOC32_GETVERSION", 0x80047601), ("FS_IOC_FSGETXATTR", 0x801C581F),
    ("FS_IOC_GETFSLABEL", 0x81009431), ("FS_IOC_GET_ENCRYPTION_POLICY", 0x400C6615),
    ("FS_IOC_GET_ENCRYPTION_POLICY_EX", 0xC0096616),
    # terminals: termios (tcgetattr/tcsetattr/tcdrain/tcflow/tcflush), window size,
    # job control, pseudo-terminal allocation
    ("TCGETS", 0x5401), ("TCSETS", 0x5402), ("TCSETSW", 0x5403), ("TCSETSF", 0x5404),
    ("TCGETA", 0x5405), ("TCSETA", 0x5406), ("TCSETAW", 0x5407), ("TCSETAF", 0x5408),
    ("TCSBRK", 0x5409), ("TCXONC", 0x540A), ("TCFLSH", 0x540B),
    ("TCGETS2", 0x802C542A), ("TCSETS2", 0x402C542B), ("TCSETSW2", 0x402C542C),
    ("TCSETSF2", 0x402C542D),
    ("TIOCEXCL", 0x540C), ("TIOCNXCL", 0x540D), ("TIOCGEXCL", 0x80045440),
    ("TIOCSCTTY", 0x540E), ("TIOCNOTTY", 0x5422), ("TIOCGPGRP", 0x540F),
    ("TIOCSPGRP", 0x5410), ("TIOCGSID", 0x5429), ("TIOCOUTQ", 0x5411),
    ("TIOCGWINSZ", 0x5413), ("TIOCSWINSZ", 0x5414), ("TIOCGETD", 0x5424),
    ("TIOCPKT", 0x5420), ("TIOCGPKT", 0x80045438), ("TIOCGLCKTRMIOS", 0x5456),
    ("TIOCGPTN", 0x80045430), ("TIOCSPTLCK", 0x40045431), ("TIOCGPTLCK", 0x80045439),
    ("TIOCGPTPEER", 0x5441), ("TIOCGDEV", 0x80045432),
    # sockets: interface and queue queries (never SIOCS*: they need CAP_NET_ADMIN)
    ("SIOCGIFNAME", 0x8910), ("SIOCGIFCONF", 0x8912), ("SIOCGIFFLAGS", 0x8913),
    ("SIOCGIFADDR", 0x8915), ("SIOCGIFDSTADDR", 0x8917), ("SIOCGIFBRDADDR", 0x8919),
    ("SIOCGIFNETMASK", 0x891B), ("SIOCGIFMETRIC", 0x891D), ("SIOCGIFMTU", 0x8921),
    ("SIOCGIFHWADDR", 0x8927), ("SIOCGIFINDEX", 0x8933), ("SIOCGIFTXQLEN", 0x8942),
    ("SIOCATMARK", 0x8905), ("SIOCGSTAMP", 0x8906), ("SIOCGSTAMPNS", 0x8907),
    ("SIOCOUTQNSD", 0x894B), ("SIOCGPGRP", 0x8904), ("FIOGETOWN", 0x8903),
    # /dev/random, /dev/urandom
    ("RNDGETENTCNT", 0x80045200),
    # the seccomp listener, which the broker holds and answers file calls on
    # (mediation/broker.py); they act on nothing but a listener's own descriptor
    ("SECCOMP_IOCTL_NOTIF_RECV", 0xC0502100), ("SECCOMP_IOCTL_NOTIF_SEND", 0xC0182101),
    ("SECCOMP_IOCTL_NOTIF_ID_VALID", 0x40082102), ("SECCOMP_IOCTL_NOTIF_ID_VALID_OLD", 0x80082102),
    ("SECCOMP_IOCTL_NOTIF_ADDFD", 0x40182103), ("SECCOMP_IOCTL_NOTIF_SET_FLAGS", 0x40082104),
)
ALLOWED_NUMBERS: frozenset[int] = frozenset(n for _, n in ALLOWED)
assert len(ALLOWED_NUMBERS) == len(ALLOWED), "duplicate ioctl number"

_ARCH = {"x86_64": AUDIT_ARCH_X86_64, "aarch64": AUDIT_ARCH_AARCH64}
# seccomp_data: nr (4), arch (4), instruction_pointer (8), args[6] (8 each)
_ARG1_LOW = 24 if sys.byteorder == "little" else 28


def available() -> bool:
    return native_arch() in _ARCH and syscall_number("ioctl") is not None


def program() -> Program:
    """ioctl with a request not in ALLOWED -> EACCES; every other call (and other
    architectures, which the deny filter kills) passes on to the other filters."""
    arch, nr = _ARCH[native_arch()], syscall_number("ioctl")
    assert nr is not None
    allowed = sorted(ALLOWED_NUMBERS)
    n = len(allowed)
    # layout: 0-4 header, 5..5+n-1 one jeq each, then ERRNO, then ALLOW
    allow = 6 + n
    insns = [
        (BPF_LD_W_ABS, 0, 0, 4),                         # arch
        (BPF_JEQ_K, 0, allow - 2, arch),
        (BPF_LD_W_ABS, 0, 0, 0),                         # nr
        (BPF_JEQ_K, 0, allow - 4, nr),
        (BPF_LD_W_ABS, 0, 0, _ARG1_LOW),                 # request, low 32 bits
    ]
    for i, v in enumerate(allowed):
        here = 5 + i
        insns.append((BPF_JEQ_K, allow - here - 1, 0, v))
    insns.append((BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | errno.EACCES))
    insns.append((BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW))
    assert len(insns) == allow + 1 and all(jt < 256 and jf < 256 for _, jt, jf, _ in insns)
    return Program(tuple(insns), False)
