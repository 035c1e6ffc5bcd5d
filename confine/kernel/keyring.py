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
KEYCTL_GET_KEYRING_ID = 0
KEY_SPEC_SESSION_KEYRING = -3

# keyctl(2) by number: glibc has no wrapper (libkeyutils does).
_NR_KEYCTL = {"x86_64": 250, "aarch64": 219, "riscv64": 219, "i386": 288, "i686": 288,
              "armv7l": 311, "armv6l": 311, "ppc64le": 271, "ppc64": 271, "s390x": 280}


def join_fresh_session() -> int:
    """keyctl(KEYCTL_JOIN_SESSION_KEYRING, NULL): a new anonymous session keyring.
    Returns its serial, 0 when keyctl is refused to this process altogether (by
    an inherited seccomp filter); raises OSError (the child then refuses to exec)."""
    nr = _NR_KEYCTL.get(os.uname().machine)
    if nr is None:
        raise oserror(f"session_keyring: keyctl number unknown on {os.uname().machine}",
                      errno.ENOSYS)
    ctypes.set_errno(0)
    ret = libc.syscall(ctypes.c_long(nr), ctypes.c_long(KEYCTL_JOIN_SESSION_KEYRING),
                       ctypes.c_void_p(None))
    if ret < 0:
        err = oserror("session_keyring: keyctl(KEYCTL_JOIN_SESSION_KEYRING)")
        if err.errno == errno.EPERM and keyctl_refused(nr):
            # A seccomp filter confine inherited (Docker's default profile, an
            # outer confine run) refuses keyctl outright: the agent inherits
            # that filter, so it can neither read nor use any key it possesses.
            return 0
        raise err
    return int(ret)


def keyctl_refused(nr: int) -> bool:
    """keyctl(2) refused whatever its arguments: a harmless query fails with EPERM
    too (KEYCTL_GET_KEYRING_ID of the session keyring, never creating it)."""
    ctypes.set_errno(0)
    ret = libc.syscall(ctypes.c_long(nr), ctypes.c_long(KEYCTL_GET_KEYRING_ID),
                       ctypes.c_long(KEY_SPEC_SESSION_KEYRING), ctypes.c_long(0))
    return ret < 0 and ctypes.get_errno() == errno.EPERM


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
