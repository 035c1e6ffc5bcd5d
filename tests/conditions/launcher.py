"""Reproduce a host condition for one command, then exec it (the test harness of
issue 12 item 4).

    python launcher.py [--no-userns] [--abi N] [--refuse CALL]... -- CMD [ARGS...]

--no-userns installs a PARENT seccomp filter like Docker's default profile for a
process without capabilities (moby profiles/seccomp/default.json: what it grants
only with CAP_SYS_ADMIN or CAP_SYS_PTRACE): unshare, setns, clone with any
namespace flag and the mount family get EPERM, clone3 ENOSYS (so libc falls back
to clone, whose flags seccomp can read), and pidfd_getfd, process_madvise, kcmp,
the keyring calls, bpf and perf_event_open get EPERM. Everything confine does
afterwards runs under it, as it would in a container. --abi N sets
CONFINE_TEST_LANDLOCK_ABI_MAX=N (confine then believes the kernel is older).
--refuse CALL adds CALL to the parent filter's EPERM calls (a stricter profile).

Runs under the test virtualenv's python (it has pyseccomp); no_new_privs is set
only when the caller lacks CAP_SYS_ADMIN (the kernel requires one of the two;
Docker sets neither by default, its runtime holds the capability).
"""
from __future__ import annotations

import ctypes
import errno
import os
import sys

import pyseccomp as sc

CLONE_NS_FLAGS = {
    "CLONE_NEWNS": 0x00020000, "CLONE_NEWCGROUP": 0x02000000, "CLONE_NEWUTS": 0x04000000,
    "CLONE_NEWIPC": 0x08000000, "CLONE_NEWUSER": 0x10000000, "CLONE_NEWPID": 0x20000000,
    "CLONE_NEWNET": 0x40000000,
}
EPERM_CALLS = (
    "unshare", "setns",
    "mount", "umount2", "pivot_root", "move_mount", "open_tree", "fsopen", "fsconfig",
    "fsmount", "fspick", "mount_setattr",
    "pidfd_getfd", "process_madvise", "kcmp",
    "keyctl", "add_key", "request_key", "bpf", "perf_event_open", "fanotify_init",
)


def no_userns_filter(refuse: list[str] | None = None) -> sc.SyscallFilter:
    f = sc.SyscallFilter(defaction=sc.ALLOW)
    for name in (*EPERM_CALLS, *(refuse or ())):
        try:
            f.add_rule(sc.ERRNO(errno.EPERM), name)
        except (RuntimeError, ValueError):
            pass                                 # not on this architecture / libseccomp
    for flag in CLONE_NS_FLAGS.values():
        f.add_rule(sc.ERRNO(errno.EPERM), "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
    f.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
    return f


def has_cap_sys_admin() -> bool:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("CapEff:"):
                return bool(int(line.split()[1], 16) & (1 << 21))
    return False


def main(argv: list[str]) -> None:
    args = list(argv)
    no_userns, abi, refuse = False, None, []
    while args and args[0] != "--":
        opt = args.pop(0)
        if opt == "--no-userns":
            no_userns = True
        elif opt == "--abi":
            abi = int(args.pop(0))
        elif opt == "--refuse":
            refuse.append(args.pop(0))
            no_userns = True
        else:
            sys.exit(f"launcher: unknown option {opt}")
    if not args or len(args) < 2:
        sys.exit("usage: launcher.py [--no-userns] [--abi N] [--refuse CALL]... -- CMD [ARGS...]")
    cmd = args[1:]
    if abi is not None:
        os.environ["CONFINE_TEST_LANDLOCK_ABI_MAX"] = str(abi)
    if no_userns:
        flt = no_userns_filter(refuse)
        if not has_cap_sys_admin():
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.prctl(38, 1, 0, 0, 0) != 0:          # PR_SET_NO_NEW_PRIVS
                sys.exit("launcher: PR_SET_NO_NEW_PRIVS failed")
            flt.set_attr(sc.Attr.CTL_NNP, 0)             # already set: do not set it again
        else:
            flt.set_attr(sc.Attr.CTL_NNP, 0)             # like Docker: setuid still works
        flt.load()
    os.execvp(cmd[0], cmd)


if __name__ == "__main__":
    main(sys.argv[1:])
