"""A fresh, empty session keyring for the agent.

A forked process keeps the launching shell's session keyring: its keys'
names (Kerberos caches, ecryptfs and fscrypt keys, tokens that tools stash
there) show in /proc/keys, and where keyctl is not filtered the keys
themselves can be read. Joining a new anonymous session keyring in the child,
after the identity switch (so the agent's own uid owns it) and before exec,
leaves the agent possessing nothing of the launcher's. Runs in the forked
child between fork and exec.
"""
from __future__ import annotations

import ctypes
import errno
import os

from .libc import libc, oserror
from .mounts import MS_BIND, MS_NOEXEC, MS_NOSUID, MS_RDONLY, MS_REMOUNT, mount

__all__ = ["KEYCTL_JOIN_SESSION_KEYRING", "join_fresh_session", "mask_proc_keys"]

KEYCTL_JOIN_SESSION_KEYRING = 1

# keyctl(2) by number: glibc has no wrapper (libkeyutils does).
_NR_KEYCTL = {"x86_64": 250, "aarch64": 219, "riscv64": 219, "i386": 288, "i686": 288,
              "armv7l": 311, "armv6l": 311, "ppc64le": 271, "ppc64": 271, "s390x": 280}


def join_fresh_session() -> int:
    """keyctl(KEYCTL_JOIN_SESSION_KEYRING, NULL): a new anonymous session keyring.
    Returns its serial; raises OSError (the child then refuses to exec)."""
    nr = _NR_KEYCTL.get(os.uname().machine)
    if nr is None:
        raise oserror(f"session_keyring: keyctl number unknown on {os.uname().machine}",
                      errno.ENOSYS)
    ctypes.set_errno(0)
    ret = libc.syscall(ctypes.c_long(nr), ctypes.c_long(KEYCTL_JOIN_SESSION_KEYRING),
                       ctypes.c_void_p(None))
    if ret < 0:
        raise oserror("session_keyring: keyctl(KEYCTL_JOIN_SESSION_KEYRING)")
    return int(ret)


def mask_proc_keys(proc: str = "/proc") -> bool:
    """Cover <proc>/keys with /dev/null, read-only, in the child's own /proc.

    /proc/keys lists every key the reader may view, and the owner may view
    its own keys without possessing them: an agent running as the launching
    user would still see the names in the user's session keyring after
    join_fresh_session(). Needs the private mount namespace (and the private
    /proc of the pid namespace); False when there is no /proc/keys."""
    target = os.path.join(proc, "keys")
    if not os.path.exists(target):
        return False
    mount("/dev/null", target, None, MS_BIND, None, f"bind /dev/null over {target}")
    mount(None, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NOEXEC,
          None, f"remount {target} read-only")
    return True
