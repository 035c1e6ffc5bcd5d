"""The seccomp rule data: the default deny table, the profile's changes to it,
the list of mediated calls, and a readable description of each rule.

Read by the loader (loader.py) and by exporters (export/oci.py); imports no
libseccomp of its own (syscall names are resolved through syscalls.py, which
imports it lazily).

The filter is a deny list on top of a default ALLOW: Landlock, dropped
capabilities and no_new_privs do the main work; seccomp closes the kernel
interfaces those do not cover (mount API, namespaces, io_uring, keyrings,
bpf, raw-disk ioctls, non-TCP sockets, ...) and shrinks kernel attack surface.

Argument comparisons: libseccomp 2.5 compares all 64 bits of an argument for
"eq"/"ne"/"lt"/... on 64-bit ABIs, but the kernel truncates int-typed arguments
(ioctl request, socket family/type/protocol, personality, clone flags, mode) to
32 bits, so a 64-bit compare is bypassed by setting high bits (CVE-2019-10063
for TIOCSTI). Every default rule therefore uses "masked_eq" with a mask of at
most 32 bits. libseccomp 2.5.4 also rejects (EINVAL) two comparisons on the
same argument in one rule, so "not in {a, b}" is written as several deny rules
that each match one aligned block of values: see `_blocks_outside()`.

Names that do not exist on the native ABI stay in DEFAULT_RULES, for
exporters that target other arches (see syscalls.py).

ioctl and flag numbers are those of x86_64 and aarch64 (asm-generic ioctl
encoding, LP64 struct sizes); powerpc, mips and sparc encode ioctls differently.
"""
from __future__ import annotations

import errno as _errno
from bisect import bisect_left
from typing import Any, Iterable, Sequence

from ...record import dataclass
from .syscalls import native_arch, syscall_number

__all__ = ["ArgMatch", "Rule", "DEFAULT_RULES", "rules_for", "udp_rules", "no_inet_rules", "describe",
           "describe_rule", "DGRAM_GROUP", "dgram_notifiable", "setflags_rules", "SOCKET_CALLS", "FILE_CALLS",
           "OPEN_CALLS", "OPEN_WRITE_BITS",
           "IOCTLS", "IOCTL_NAMES", "PERSONA_FLAGS", "META_CALLS", "META_REFUSED",
           "META_IOCTLS"]

U32 = 0xFFFFFFFF
U64 = 0xFFFFFFFFFFFFFFFF
OPS = ("masked_eq", "eq", "ne", "lt", "le", "gt", "ge")
_OP_SYMBOL = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}


# --- data model -------------------------------------------------------------

@dataclass(frozen=True)
class ArgMatch:
    """One comparison on a syscall argument.

    masked_eq: (arg & mask) == value. The other ops compare the whole 64-bit
    argument with value (mask unused); avoid them for int-typed arguments.
    """
    index: int           # 0..5
    op: str              # "masked_eq" | "eq" | "ne" | "lt" | "le" | "gt" | "ge"
    value: int
    mask: int = U32      # for masked_eq; 32-bit masks for int-typed args

    def __post_init__(self) -> None:
        if not 0 <= self.index <= 5:
            raise ValueError(f"seccomp argument index {self.index} is not in 0..5")
        if self.op not in OPS:
            raise ValueError(f"seccomp comparison {self.op!r} is not one of {', '.join(OPS)}")
        if not 0 <= self.value <= U64 or not 0 <= self.mask <= U64:
            raise ValueError("seccomp comparison values must fit in 64 unsigned bits")
        if self.op == "masked_eq" and self.value & ~self.mask:
            raise ValueError(f"masked_eq value {self.value:#x} has bits outside mask {self.mask:#x}"
                             " (the rule could never match)")

    def matches(self, args: Sequence[int]) -> bool:
        """What the generated BPF decides for these raw (64-bit) argument values."""
        a = args[self.index] & U64
        if self.op == "masked_eq":
            return a & self.mask == self.value
        return {"eq": a == self.value, "ne": a != self.value, "lt": a < self.value,
                "le": a <= self.value, "gt": a > self.value, "ge": a >= self.value}[self.op]


@dataclass(frozen=True)
class Rule:
    """Deny `syscall` with `errno` when all `args` comparisons hold (always, if none)."""
    syscall: str
    errno: int                      # errno.EPERM normally; errno.ENOSYS for clone3
    args: tuple[ArgMatch, ...] = ()  # AND of comparisons
    group: str = ""                 # e.g. "mounts", "ioctl:TIOCSTI", "socket:AF_PACKET"
    why: str = ""                   # one short human reason, printed by --dry-run

    def __post_init__(self) -> None:
        if not 0 < self.errno <= 0xFFFF:
            raise ValueError(f"errno {self.errno} out of range for SECCOMP_RET_ERRNO")
        seen = [a.index for a in self.args]
        if len(seen) != len(set(seen)):
            # libseccomp 2.5.4 rejects (EINVAL) two comparisons on one argument.
            raise ValueError(f"{self.syscall}: two comparisons on the same argument in one rule")

    def matches(self, args: Sequence[int]) -> bool:
        return all(a.matches(args) for a in self.args)


def _m(index: int, value: int, mask: int = U32) -> ArgMatch:
    return ArgMatch(index, "masked_eq", value, mask)


def _blocks_outside(allowed: Iterable[int], width: int = 32) -> list[tuple[int, int]]:
    """(value, mask) pairs whose masked_eq matches exactly the values of
    [0, 2**width) that are not in `allowed`: the complement as aligned blocks
    (like CIDR prefixes), one deny rule each."""
    allowed = sorted(set(allowed))
    full = (1 << width) - 1
    out: list[tuple[int, int]] = []

    def walk(lo: int, bits: int) -> None:  # block [lo, lo + 2**bits)
        # bisect, not a scan of `allowed` per block: the scans were a third of the
        # time the default table takes to build at import
        i = bisect_left(allowed, lo)
        if i == len(allowed) or allowed[i] >= lo + (1 << bits):
            out.append((lo, full & ~((1 << bits) - 1)))
        elif bits:
            walk(lo, bits - 1)
            walk(lo + (1 << (bits - 1)), bits - 1)

    walk(0, width)
    return out


# --- constants ----------------------------------------------------------------

EPERM, ENOSYS = _errno.EPERM, _errno.ENOSYS

AF_UNIX, AF_INET, AF_INET6, AF_NETLINK = 1, 2, 10, 16
SOCK_STREAM, SOCK_DGRAM, SOCK_RAW = 1, 2, 3
SOCK_TYPE_MASK = 0xF
IPPROTO_IP, IPPROTO_TCP = 0, 6

# linux/socket.h as of 6.18 (AF_MAX 46).
ADDRESS_FAMILIES = {
    0: "AF_UNSPEC", 1: "AF_UNIX", 2: "AF_INET", 3: "AF_AX25", 4: "AF_IPX", 5: "AF_APPLETALK",
    6: "AF_NETROM", 7: "AF_BRIDGE", 8: "AF_ATMPVC", 9: "AF_X25", 10: "AF_INET6", 11: "AF_ROSE",
    12: "AF_DECnet", 13: "AF_NETBEUI", 14: "AF_SECURITY", 15: "AF_KEY", 16: "AF_NETLINK",
    17: "AF_PACKET", 18: "AF_ASH", 19: "AF_ECONET", 20: "AF_ATMSVC", 21: "AF_RDS", 22: "AF_SNA",
    23: "AF_IRDA", 24: "AF_PPPOX", 25: "AF_WANPIPE", 26: "AF_LLC", 27: "AF_IB", 28: "AF_MPLS",
    29: "AF_CAN", 30: "AF_TIPC", 31: "AF_BLUETOOTH", 32: "AF_IUCV", 33: "AF_RXRPC", 34: "AF_ISDN",
    35: "AF_PHONET", 36: "AF_IEEE802154", 37: "AF_CAIF", 38: "AF_ALG", 39: "AF_NFC",
    40: "AF_VSOCK", 41: "AF_KCM", 42: "AF_QIPCRTR", 43: "AF_SMC", 44: "AF_XDP", 45: "AF_MCTP",
}
AF_MAX = 46
ALLOWED_FAMILIES = (AF_UNIX, AF_INET, AF_INET6, AF_NETLINK)
_FAMILY_WHY = {
    17: "AF_PACKET: raw link-layer frames, bypasses the TCP-only Landlock network rules",
    38: "AF_ALG: kernel crypto API, a long CVE history",
    40: "AF_VSOCK: talks to the hypervisor / other VMs",
    44: "AF_XDP: raw packet rings",
    41: "AF_KCM: kernel connection multiplexor, CVE history",
    21: "AF_RDS: CVE history (module autoload)",
    43: "AF_SMC: TCP-like transport Landlock does not mediate",
    30: "AF_TIPC: CVE history (module autoload)",
    29: "AF_CAN: CVE history",
    31: "AF_BLUETOOTH: radio access",
}
SOCK_TYPES = {1: "SOCK_STREAM", 2: "SOCK_DGRAM", 3: "SOCK_RAW", 4: "SOCK_RDM",
              5: "SOCK_SEQPACKET", 6: "SOCK_DCCP", 10: "SOCK_PACKET"}
IPPROTO_NAMES = {0: "IPPROTO_IP", 6: "IPPROTO_TCP", 17: "IPPROTO_UDP", 132: "IPPROTO_SCTP",
                 256: "IPPROTO_SMC", 262: "IPPROTO_MPTCP"}

CLONE_NEWTIME = 0x00000080    # for clone() this bit lies in CSIGNAL; only unshare/clone3 use it
CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
CLONE_NS_FLAGS = {
    CLONE_NEWNS: "CLONE_NEWNS", CLONE_NEWCGROUP: "CLONE_NEWCGROUP", CLONE_NEWUTS: "CLONE_NEWUTS",
    CLONE_NEWIPC: "CLONE_NEWIPC", CLONE_NEWUSER: "CLONE_NEWUSER", CLONE_NEWPID: "CLONE_NEWPID",
    CLONE_NEWNET: "CLONE_NEWNET", CLONE_NEWTIME: "CLONE_NEWTIME",
}

S_IFMT, S_IFCHR, S_IFBLK = 0o170000, 0o020000, 0o060000

# linux/personality.h flag bits that weaken exploit mitigations or change
# kernel behaviour in ways an agent never needs.
PERSONA_FLAGS = {
    0x0040000: "ADDR_NO_RANDOMIZE", 0x0080000: "FDPIC_FUNCPTRS", 0x0100000: "MMAP_PAGE_ZERO",
    0x0200000: "ADDR_COMPAT_LAYOUT", 0x0400000: "READ_IMPLIES_EXEC", 0x0800000: "ADDR_LIMIT_32BIT",
    0x1000000: "SHORT_INODE", 0x2000000: "WHOLE_SECONDS", 0x4000000: "STICKY_TIMEOUTS",
    0x8000000: "ADDR_LIMIT_3GB",
}
PERSONALITY_QUERY = 0xFFFFFFFF

# ioctl requests denied on every fd, compared on the low 32 bits. Numbers are
# for x86_64/aarch64 (asm-generic _IOC: dir<<30 | size<<16 | type<<8 | nr,
# _IOC_WRITE=1, _IOC_READ=2; sizes are LP64). Checked against the uapi headers
# with a C program on this machine. (name, number, group-suffix, why)
_TTY = "injects input into / takes over a terminal outside the sandbox"
_DISK = "raw disk or partition-table change"
IOCTLS: tuple[tuple[str, int, str], ...] = (
    # the four TIOC* from asm-generic/ioctls.h
    ("TIOCSTI", 0x5412, "push bytes into a tty's input queue: the parent shell runs them"),
    ("TIOCLINUX", 0x541C, "VT paste/selection subcommands inject keystrokes"),
    ("TIOCCONS", 0x541D, "redirects the system console to this tty"),
    ("TIOCSETD", 0x5423, "line disciplines (n_gsm, n_hdlc, ...) are kernel attack surface"),
    ("BLKROSET", 0x125D, _DISK),          # _IO(0x12, 93)
    ("BLKRRPART", 0x125F, _DISK),         # _IO(0x12, 95)
    ("BLKFLSBUF", 0x1261, _DISK),         # _IO(0x12, 97)
    ("BLKRASET", 0x1262, _DISK),          # _IO(0x12, 98)
    ("BLKFRASET", 0x1264, _DISK),         # _IO(0x12, 100)
    ("BLKPG", 0x1269, _DISK),             # _IO(0x12, 105): add/delete/resize partitions
    ("BLKBSZSET", 0x40081271, _DISK),     # _IOW(0x12, 113, size_t)
    # _IOWR(0x12, 115, struct blk_user_trace_setup[72])
    ("BLKTRACESETUP", 0xC0481273, "block tracing sees all I/O of the device"),
    ("BLKTRACESTART", 0x1274, "block tracing sees all I/O of the device"),      # _IO(0x12, 116)
    ("BLKDISCARD", 0x1277, _DISK + ": needs only a write open"),               # _IO(0x12, 119)
    ("BLKSECDISCARD", 0x127D, _DISK + ": needs only a write open"),            # _IO(0x12, 125)
    ("BLKZEROOUT", 0x127F, _DISK + ": needs only a write open"),               # _IO(0x12, 127)
    ("BLKRESETZONE", 0x40101283, _DISK),  # _IOW(0x12, 131, struct blk_zone_range[16])
    ("BLKOPENZONE", 0x40101286, _DISK),   # _IOW(0x12, 134, struct blk_zone_range[16])
    ("BLKCLOSEZONE", 0x40101287, _DISK),  # _IOW(0x12, 135, struct blk_zone_range[16])
    ("BLKFINISHZONE", 0x40101288, _DISK), # _IOW(0x12, 136, struct blk_zone_range[16])
    # _IOWR('X', 119, int)
    ("FIFREEZE", 0xC0045877, "freezes a whole filesystem"),
    # _IOWR('X', 121, struct fstrim_range[24])
    ("FITRIM", 0xC0185879, "discards free blocks of a whole filesystem"),
    # _IOW('p', 200, struct pr_registration[24])
    ("IOC_PR_REGISTER", 0x401870C8, _DISK + " (persistent reservation)"),
    # _IOW('p', 201, struct pr_reservation[16])
    ("IOC_PR_RESERVE", 0x401070C9, _DISK + " (persistent reservation)"),
    # _IOW('p', 202, struct pr_reservation[16])
    ("IOC_PR_RELEASE", 0x401070CA, _DISK + " (persistent reservation)"),
    # _IOW('p', 203, struct pr_preempt[24])
    ("IOC_PR_PREEMPT", 0x401870CB, _DISK + " (persistent reservation)"),
    # _IOW('p', 204, struct pr_preempt[24])
    ("IOC_PR_PREEMPT_ABORT", 0x401870CC, _DISK + " (persistent reservation)"),
    # _IOW('p', 205, struct pr_clear[16])
    ("IOC_PR_CLEAR", 0x401070CD, _DISK + " (persistent reservation)"),
    ("SG_SCSI_RESET", 0x2284, "raw SCSI reset"),                                 # scsi/sg.h
    ("SG_IO", 0x2285, "raw SCSI command pass-through"),                          # scsi/sg.h
    # scsi/scsi_ioctl.h
    ("SCSI_IOCTL_SEND_COMMAND", 0x0001,
     "raw SCSI command (same number as FIBMAP, which needs CAP_SYS_RAWIO)"),
    ("CDROM_SEND_PACKET", 0x5393, "raw SCSI/ATAPI packet"),                      # linux/cdrom.h
    ("HDIO_DRIVE_TASKFILE", 0x031D, "raw ATA command"),                          # linux/hdreg.h
    ("HDIO_DRIVE_TASK", 0x031E, "raw ATA command"),                              # linux/hdreg.h
    ("HDIO_DRIVE_CMD", 0x031F, "raw ATA command"),                               # linux/hdreg.h
    # _IOWR('N', 0x41, struct nvme_admin_cmd[72])
    ("NVME_IOCTL_ADMIN_CMD", 0xC0484E41, "raw NVMe command"),
    # _IOW('N', 0x42, struct nvme_user_io[48])
    ("NVME_IOCTL_SUBMIT_IO", 0x40304E42, "raw NVMe I/O"),
    # _IOWR('N', 0x43, struct nvme_passthru_cmd[72])
    ("NVME_IOCTL_IO_CMD", 0xC0484E43, "raw NVMe command"),
    ("NVME_IOCTL_RESET", 0x4E44, "resets the NVMe controller"),   # _IO('N', 0x44)
    ("NVME_IOCTL_SUBSYS_RESET", 0x4E45, "resets the NVMe subsystem"),  # _IO('N', 0x45)
    ("NVME_IOCTL_RESCAN", 0x4E46, "rescans NVMe namespaces"),     # _IO('N', 0x46)
    # _IOWR('N', 0x47, struct nvme_passthru_cmd64[80])
    ("NVME_IOCTL_ADMIN64_CMD", 0xC0504E47, "raw NVMe command"),
    # _IOWR('N', 0x48, struct nvme_passthru_cmd64[80])
    ("NVME_IOCTL_IO64_CMD", 0xC0504E48, "raw NVMe command"),
    # _IOWR('N', 0x49, struct nvme_passthru_cmd64[80])
    ("NVME_IOCTL_IO64_CMD_VEC", 0xC0504E49, "raw NVMe command"),
    ("LOOP_SET_FD", 0x4C00, "attaches a file as a block device"),       # linux/loop.h
    ("LOOP_CLR_FD", 0x4C01, "detaches a loop device"),                  # linux/loop.h
    ("LOOP_SET_STATUS", 0x4C02, "reconfigures a loop device"),          # linux/loop.h
    ("LOOP_SET_STATUS64", 0x4C04, "reconfigures a loop device"),        # linux/loop.h
    ("LOOP_CHANGE_FD", 0x4C06, "swaps a loop device's backing file"),   # linux/loop.h
    ("LOOP_SET_CAPACITY", 0x4C07, "resizes a loop device"),             # linux/loop.h
    ("LOOP_SET_DIRECT_IO", 0x4C08, "reconfigures a loop device"),       # linux/loop.h
    ("LOOP_SET_BLOCK_SIZE", 0x4C09, "reconfigures a loop device"),      # linux/loop.h
    ("LOOP_CONFIGURE", 0x4C0A, "attaches a file as a block device"),    # linux/loop.h
    ("LOOP_CTL_ADD", 0x4C80, "creates loop devices"),                   # linux/loop.h
    ("LOOP_CTL_REMOVE", 0x4C81, "removes loop devices"),                # linux/loop.h
    ("LOOP_CTL_GET_FREE", 0x4C82, "allocates a loop device"),           # linux/loop.h
    # _IOW('M', 2, struct erase_info_user[8])
    ("MEMERASE", 0x40084D02, "erases raw flash (MTD)"),
    # _IOWR('M', 3, struct mtd_oob_buf[16])
    ("MEMWRITEOOB", 0xC0104D03, "writes raw flash (MTD)"),
    # _IOW('M', 5, struct erase_info_user[8])
    ("MEMLOCK", 0x40084D05, "locks raw flash (MTD)"),
    # _IOW('M', 12, __kernel_loff_t)
    ("MEMSETBADBLOCK", 0x40084D0C, "marks flash blocks bad (MTD)"),
    # _IOR('M', 16, struct otp_info[12])
    ("OTPLOCK", 0x800C4D10, "permanently locks OTP flash (MTD)"),
    # _IOW('M', 20, struct erase_info_user64[16])
    ("MEMERASE64", 0x40104D14, "erases raw flash (MTD)"),
    # _IOWR('M', 21, struct mtd_oob_buf64[24])
    ("MEMWRITEOOB64", 0xC0184D15, "writes raw flash (MTD)"),
    # _IOWR('M', 24, struct mtd_write_req[48])
    ("MEMWRITE", 0xC0304D18, "writes raw flash (MTD)"),
    ("OTPERASE", 0x400C4D19, "erases OTP flash (MTD)"),        # _IOW('M', 25, struct otp_info[12])
)
IOCTL_NAMES = {num: name for name, num, _ in IOCTLS}
assert len(IOCTL_NAMES) == len(IOCTLS), "duplicate ioctl number"


# --- the default deny list ----------------------------------------------------

def _deny(group: str, why: str, *syscalls: str, errno: int = EPERM) -> list[Rule]:
    return [Rule(s, errno, (), group, why) for s in syscalls]


def _default_rules() -> tuple[Rule, ...]:
    r: list[Rule] = []
    r += _deny("mounts",
               "mount API: changes what paths mean (Landlock denies most of it, this is the rest)",
               "mount", "umount", "umount2", "pivot_root", "move_mount", "open_tree",
               "open_tree_attr", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
               "chroot")
    r += _deny("swap", "swap devices are system state", "swapon", "swapoff")
    r += _deny("boot", "reboot / load a new kernel", "reboot", "kexec_load", "kexec_file_load")
    r += _deny("modules", "loads or unloads kernel code",
               "init_module", "finit_module", "delete_module")
    r += _deny("bpf", "eBPF: kernel attack surface, tracing", "bpf")
    r += _deny("perf", "perf events: side channels, kernel attack surface", "perf_event_open")
    r += _deny("keyring", "kernel keyrings are not namespaced: the user's keys live there",
               "keyctl", "add_key", "request_key")
    r += _deny("userfaultfd", "widens kernel race windows for exploits", "userfaultfd")
    r += _deny("io_uring", "io_uring operations bypass seccomp; large CVE history",
               "io_uring_setup", "io_uring_enter", "io_uring_register")
    # A Landlock domain a program adds inside the run would hold only for the calls
    # the kernel performs for it: the broker performs its mediated ones (opens for
    # writing, creates, renames, connects) in the run's own domain. Refused, so the
    # program knows its sandbox is not in place instead of trusting half of one.
    r += _deny("landlock_nested", "a program's own Landlock domain would not hold for the "
               "calls confine's broker performs for it", "landlock_restrict_self")
    r += _deny("namespaces",
               "new namespaces (user ns gives CAP_SYS_ADMIN over a big kernel surface)",
               "unshare", "setns")
    for flag, name in sorted(CLONE_NS_FLAGS.items()):
        r.append(Rule("clone", EPERM, (_m(0, flag, flag),), "namespaces",
                      f"clone() with {name} creates a namespace"))
    r.append(Rule("clone3", ENOSYS, (), "namespaces",
                  "clone3 flags are in memory seccomp cannot read: "
                  "ENOSYS makes libc fall back to clone"))
    r += _deny("file-handles", "open_by_handle_at bypasses path checks (the 'shocker' breakout)",
               "open_by_handle_at", "name_to_handle_at")
    r += _deny("acct", "process accounting is system state", "acct")
    r += _deny("quota", "disk quotas are system state", "quotactl", "quotactl_fd")
    r += _deny("clock", "the system clock is shared", "settimeofday", "clock_settime", "adjtimex",
               "clock_adjtime")
    r += _deny("syslog", "kernel log: addresses and other users' activity", "syslog")
    r += _deny("raw-io", "raw I/O port access", "iopl", "ioperm")
    r += _deny("hostname", "host identity is shared", "sethostname", "setdomainname")
    r += _deny("vhangup", "hangs up the controlling terminal", "vhangup")
    r += _deny("obsolete", "obsolete interfaces with a CVE history", "lookup_dcookie", "nfsservctl",
               "uselib", "_sysctl", "sysfs", "ustat")

    # personality: deny every value with a dangerous flag bit, except the query
    # value 0xffffffff. One rule per bit Y of the 32: "Y is 0 and danger bit
    # D(Y) is 1", where D maps each danger bit to the next one (a cycle over the
    # 10 danger bits) and every other bit to the first danger bit. No rule
    # matches 0xffffffff (each needs a 0 bit) nor any value without danger bits
    # (each needs a danger bit), and every other value is matched: if no rule
    # matches v, then for each 0 bit Y of v, D(Y) is 0 too; v != 0xffffffff has
    # a 0 bit, following D from it reaches the cycle, so all danger bits are 0.
    # 32 rules is the minimum: the 32 values "0xffffffff minus one bit" must be
    # denied and no single masked_eq rule can match two of them.
    # (A libseccomp rule cannot say "v & DANGER != 0 && v != 0xffffffff":
    # two comparisons on one argument are rejected, and a 64-bit "!=" is
    # bypassed by high bits because the kernel reads an unsigned int.)
    danger = sorted(PERSONA_FLAGS)
    for y in range(32):
        bit = 1 << y
        d = danger[(danger.index(bit) + 1) % len(danger)] if bit in danger else danger[0]
        r.append(Rule("personality", EPERM, (_m(0, d, d | bit),), "personality",
                      "persona flags such as ADDR_NO_RANDOMIZE and READ_IMPLIES_EXEC weaken "
                      "exploit mitigations (0, PER_LINUX32, UNAME26 and the 0xffffffff query "
                      "stay allowed)"))

    for syscall, idx in (("mknod", 1), ("mknodat", 2)):
        for kind, name in ((S_IFCHR, "character"), (S_IFBLK, "block")):
            r.append(Rule(syscall, EPERM, (_m(idx, kind, S_IFMT),), "device-nodes",
                          f"creates a {name} device node (FIFOs, sockets and files stay allowed)"))

    # socket(): family allow list {AF_UNIX, AF_INET, AF_INET6, AF_NETLINK}.
    for fam in range(AF_MAX):
        if fam not in ALLOWED_FAMILIES:
            name = ADDRESS_FAMILIES[fam]
            r.append(Rule("socket", EPERM, (_m(0, fam),), f"socket:{name}",
                          _FAMILY_WHY.get(fam, f"{name} is not on the family allow list "
                                                "(kernel attack surface, module autoload)")))
    for value, mask in _blocks_outside(range(AF_MAX)):
        r.append(Rule("socket", EPERM, (_m(0, value, mask),), "socket:AF_unknown",
                      "address family numbers this kernel does not define"))
    # AF_INET/AF_INET6: Landlock here mediates only TCP, so only TCP may exist.
    for fam in (AF_INET, AF_INET6):
        fname = ADDRESS_FAMILIES[fam]
        r.append(Rule("socket", EPERM, (_m(0, fam), _m(1, SOCK_DGRAM, SOCK_TYPE_MASK)),
                      "socket:inet-dgram",
                      f"{fname} datagram (UDP, ICMP): not mediated by Landlock"))
        r.append(Rule("socket", EPERM, (_m(0, fam), _m(1, SOCK_RAW, SOCK_TYPE_MASK)),
                      "socket:inet-raw", f"{fname} raw sockets: not mediated by Landlock"))
        for value, mask in _blocks_outside((SOCK_STREAM, SOCK_DGRAM, SOCK_RAW), width=4):
            r.append(Rule("socket", EPERM, (_m(0, fam), _m(1, value, mask)),
                          "socket:inet-other-types",
                          f"{fname} types other than stream/datagram/raw "
                          "(SEQPACKET, RDM, DCCP, PACKET)"))
        for value, mask in _blocks_outside((IPPROTO_IP, IPPROTO_TCP)):
            r.append(Rule("socket", EPERM,
                          (_m(0, fam), _m(1, SOCK_STREAM, SOCK_TYPE_MASK), _m(2, value, mask)),
                          "socket:inet-stream-non-tcp",
                          f"{fname} stream protocols other than TCP (MPTCP, SCTP, SMC): "
                          "not mediated by Landlock"))
    for value, mask in _blocks_outside((AF_UNIX,)):
        r.append(Rule("socketpair", EPERM, (_m(0, value, mask),), "socketpair:non-unix",
                      "socketpair() only makes sense for AF_UNIX; "
                      "other families are attack surface"))
    # TCP Fast Open connects inside sendto/sendmsg, where Landlock's
    # CONNECT_TCP check does not run (seen on 6.18, ABI 7).
    MSG_FASTOPEN = 0x20000000
    r.append(Rule("sendto", EPERM, (_m(3, MSG_FASTOPEN, MSG_FASTOPEN),), "tcp-fastopen",
                  "MSG_FASTOPEN connects without Landlock's TCP connect check"))
    r.append(Rule("sendmsg", EPERM, (_m(2, MSG_FASTOPEN, MSG_FASTOPEN),), "tcp-fastopen",
                  "MSG_FASTOPEN connects without Landlock's TCP connect check"))

    for name, num, why in IOCTLS:
        r.append(Rule("ioctl", EPERM, (_m(1, num),), f"ioctl:{name}", why))
    return tuple(r)


DEFAULT_RULES: tuple[Rule, ...] = _default_rules()


# --- the profile's changes ---------------------------------------------------

IPPROTO_UDP = 17


def udp_rules() -> tuple[Rule, ...]:
    """What replaces the socket:inet-dgram denial while the egress gateway runs:
    UDP datagram sockets may exist (every destination of theirs is mediated and
    only DNS goes out, rewritten to confine's resolver); ICMP, UDP-Lite and
    every other datagram protocol stay refused."""
    out = []
    for fam in (AF_INET, AF_INET6):
        fname = ADDRESS_FAMILIES[fam]
        for value, mask in _blocks_outside((IPPROTO_IP, IPPROTO_UDP)):
            out.append(Rule("socket", EPERM,
                            (_m(0, fam), _m(1, SOCK_DGRAM, SOCK_TYPE_MASK), _m(2, value, mask)),
                            "socket:inet-dgram-non-udp",
                            f"{fname} datagram protocols other than UDP (ICMP, UDP-Lite): "
                            "not mediated"))
    return tuple(out)


def rules_for(extra_deny: Iterable[str] = (), unsafe_allow: Iterable[str] = (),
              udp: bool = False) -> tuple[Rule, ...]:
    """DEFAULT_RULES minus the named opt-outs, plus extra syscalls to deny (EPERM).
    udp: the egress gateway mediates UDP (udp_rules replace socket:inet-dgram).

    unsafe_allow: syscall names or group names from DEFAULT_RULES; each removes
    every rule with that syscall or group. extra_deny: syscall names of the
    native ABI. Anything that names nothing raises ValueError."""
    if isinstance(extra_deny, str) or isinstance(unsafe_allow, str):
        raise TypeError("extra_deny and unsafe_allow are lists of names, not a string")
    extra = list(dict.fromkeys(extra_deny))
    allow = list(dict.fromkeys(unsafe_allow))
    known = {r.syscall for r in DEFAULT_RULES} | {r.group for r in DEFAULT_RULES}
    bad = [n for n in allow if n not in known]
    if bad:
        groups = sorted({r.group for r in DEFAULT_RULES if ":" not in r.group})
        raise ValueError("seccomp unsafe_allow: no default rule has the syscall or group "
                         + ", ".join(repr(n) for n in bad) + " (groups: " + ", ".join(groups)
                         + ", ioctl:NAME, socket:AF_NAME, socket:inet-dgram, ...)")
    drop = set(allow)
    rules = [r for r in DEFAULT_RULES if r.syscall not in drop and r.group not in drop
             and not (udp and r.group == "socket:inet-dgram")]
    if udp:
        rules += udp_rules()
    bad = [n for n in extra if not isinstance(n, str) or syscall_number(n) is None]
    if bad:
        raise ValueError("seccomp deny: unknown system call on " + native_arch() + ": "
                         + ", ".join(repr(n) for n in bad))
    for name in extra:
        if any(r.syscall == name and not r.args for r in rules):
            continue  # already denied unconditionally
        rules.append(Rule(name, EPERM, (), "profile", "denied by the profile"))
    return tuple(rules)


# The deny table's group refusing UDP sockets. Where the notifying filter is loaded
# and the run has no gateway, it refuses them instead (build_notify(dgram=True)): the
# same refusal, but the supervisor sees it and says once that DNS needs a host rule.
DGRAM_GROUP = "socket:inet-dgram"


def dgram_notifiable(rules: Iterable[Rule]) -> bool:
    """Do `rules` refuse UDP sockets with the default group (not opted out)?"""
    return any(r.group == DGRAM_GROUP for r in rules)


def setflags_rules() -> tuple[Rule, ...]:
    """An exclusive workdir (policy/workdir_mode.py): nothing judges a name at the
    call, and the exit check compares names as spelled, so no directory may turn
    case-insensitive during the run (FS_IOC_SETFLAGS with FS_CASEFOLD_FL on an empty
    directory of the agent's: `.ENVRC` there is the `.envrc` direnv opens). The
    ioctls that set inode flags are refused (EPERM), as without a mount namespace."""
    return tuple(Rule("ioctl", _errno.EPERM, (ArgMatch(1, "masked_eq", num),),
                      group=f"ioctl:{name}", why="inode flags (a case-insensitive directory "
                      "would hide protected names from the exit check of an exclusive workdir)")
                 for name, num in META_IOCTLS if "SETFLAGS" in name or "FSSETXATTR" in name)


def no_inet_rules() -> tuple[Rule, ...]:
    """Without Landlock TCP rights (ABI < 4) a profile that grants no port is
    still enforceable: refuse IPv4/IPv6 sockets altogether."""
    return tuple(Rule("socket", _errno.EACCES, (ArgMatch(0, "masked_eq", fam),),
                      group="network:no-landlock",
                      why="no TCP port is granted and this kernel's Landlock cannot filter TCP")
                 for fam in (AF_INET, AF_INET6))


# --- describe ---------------------------------------------------------------------

# (syscall, arg index) -> (value names, mask that selects one whole value;
# None for flag arguments, where a name is shown for any mask).
_VALUE_NAMES: dict[tuple[str, int], tuple[dict[int, str], int | None]] = {
    ("ioctl", 1): (IOCTL_NAMES, U32),
    ("socket", 0): (ADDRESS_FAMILIES, U32),
    ("socketpair", 0): (ADDRESS_FAMILIES, U32),
    ("socket", 1): (SOCK_TYPES, SOCK_TYPE_MASK),
    ("socket", 2): (IPPROTO_NAMES, U32),
    ("clone", 0): (CLONE_NS_FLAGS, None),
    ("mknod", 1): ({S_IFCHR: "S_IFCHR", S_IFBLK: "S_IFBLK"}, S_IFMT),
    ("mknodat", 2): ({S_IFCHR: "S_IFCHR", S_IFBLK: "S_IFBLK"}, S_IFMT),
    ("personality", 0): (PERSONA_FLAGS, None),
}


def _arg_text(syscall: str, a: ArgMatch) -> str:
    names, whole = _VALUE_NAMES.get((syscall, a.index), ({}, U32))
    shows_value = whole is None or a.mask & whole == whole or a.op != "masked_eq"
    name = names.get(a.value) if shows_value else None
    val = f"{name}({a.value:#x})" if name else f"{a.value:#x}"
    if a.op != "masked_eq":
        return f"arg{a.index} {_OP_SYMBOL[a.op]} {val}"
    text = f"arg{a.index} & {a.mask:#x} == {val}"
    low = ~a.mask & U32
    if a.mask <= U32 and low and (low + 1) & low == 0:  # a prefix mask: an aligned range
        text += f" ({a.value:#x}..{a.value | low:#x})"
    return text


def describe_rule(rule: Rule) -> str:
    args = " && ".join(_arg_text(rule.syscall, a) for a in rule.args)
    return f"{rule.syscall}({args})" if args else rule.syscall


def describe(rules: Iterable[Rule]) -> list[dict[str, Any]]:
    """JSON-able view for --dry-run: one dict per rule. "nr" is the native
    syscall number, or None when the syscall does not exist here (skipped)."""
    out = []
    for r in rules:
        try:
            nr = syscall_number(r.syscall)
        except (ImportError, RuntimeError, OSError):
            nr = None
        out.append({
            "syscall": r.syscall,
            "errno": _errno.errorcode.get(r.errno, str(r.errno)),
            "args": [_arg_text(r.syscall, a) for a in r.args],
            "group": r.group,
            "why": r.why,
            "nr": nr,
        })
    return out


# --- the mediated calls (seccomp user notification) --------------------------------

# The one list of mediated calls: the filter below notifies exactly these, and
# the supervisor decodes exactly these.
# sendmmsg: performed only for IPv4/IPv6 messages without an address (the glibc
# resolver's A+AAAA queries while the egress gateway runs), refused otherwise.
SOCKET_CALLS = ("connect", "sendto", "sendmsg", "listen", "sendmmsg")   # sendto only with an address
# Calls that can make a name appear (or write a file) in the workdir: the broker
# performs them after the guard judged the name (mediation/files.py, protect/guard.py).
# unlink/unlinkat/rmdir: a file the workdir held at the start is kept for `confine undo`
# before it goes (confine/undo/); each costs a round trip through the broker.
FILE_CALLS = ("creat", "truncate", "mkdir", "mkdirat", "mknod", "mknodat", "symlink",
              "symlinkat", "link", "linkat", "rename", "renameat", "renameat2",
              "unlink", "unlinkat", "rmdir")
# open/openat: only with one of these flags (argument OPEN_CALLS[name]); read-only
# opens run at full speed.
OPEN_CALLS = {"open": 1, "openat": 2}
OPEN_WRITE_BITS = (0o1, 0o2, 0o100, 0o1000, 0o20000000)   # WRONLY RDWR CREAT TRUNC __O_TMPFILE

# Calls that change a file's metadata (mode, owner, times, extended attributes),
# which Landlock does not restrict. With a mount namespace the read-only host
# view refuses them outside the writable paths; without one they are notified
# and the broker judges the very file and performs them (mediation/files.py).
META_CALLS = ("chmod", "fchmod", "fchmodat", "fchmodat2", "chown", "fchown", "lchown",
              "fchownat", "utime", "utimes", "utimensat", "futimesat", "setxattr", "lsetxattr",
              "fsetxattr", "removexattr", "lremovexattr", "fremovexattr", "setxattrat",
              "removexattrat")
# ... and the ones refused outright there (EPERM): file_setattr sets inode flags
# and project ids, which nothing an agent builds needs.
META_REFUSED = ("file_setattr",)
# ioctls that change a file's attributes with only a read-only descriptor and
# ownership (chattr; fs-verity makes a file immutable for good): refused (EPERM)
# without a mount namespace, where the host's mounts are writable.
META_IOCTLS: tuple[tuple[str, int], ...] = (
    ("FS_IOC_SETFLAGS", 0x40086602), ("FS_IOC32_SETFLAGS", 0x40046602),
    ("FS_IOC_SETVERSION", 0x40087602), ("FS_IOC32_SETVERSION", 0x40047602),
    ("FS_IOC_FSSETXATTR", 0x401C5820), ("FS_IOC_ENABLE_VERITY", 0x40806685),
    ("FS_IOC_SET_ENCRYPTION_POLICY", 0x800C6613),
    ("EXT4_IOC_SETVERSION", 0x40086604), ("EXT4_IOC32_SETVERSION", 0x40046604),
    ("BTRFS_IOC_SUBVOL_SETFLAGS", 0x4008941A),     # a subvolume read-only, by its owner
)
