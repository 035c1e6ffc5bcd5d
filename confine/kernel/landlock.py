"""Landlock: the only module that builds or enforces Landlock rulesets.

The ruleset is built in the supervisor before fork (so a bad path is reported
before anything runs) and enforced in the child with restrict_self.
"""
from __future__ import annotations

import errno
import os
from collections.abc import Iterable
from enum import Flag

import landlockpy
from landlockpy import AccessFS, AccessNet, Scope

# Test-only knob: pretend the kernel is older. It can only lower what confine
# believes is available, so it can make confine refuse, never enforce less
# without --allow-degraded.
_ABI_CAP_ENV = "CONFINE_TEST_LANDLOCK_ABI_MAX"

# The Landlock ABI that introduced each right (and scope).
FS_MIN_ABI: dict[AccessFS, int] = {
    AccessFS.EXECUTE: 1, AccessFS.WRITE_FILE: 1, AccessFS.READ_FILE: 1, AccessFS.READ_DIR: 1,
    AccessFS.REMOVE_DIR: 1, AccessFS.REMOVE_FILE: 1, AccessFS.MAKE_CHAR: 1, AccessFS.MAKE_DIR: 1,
    AccessFS.MAKE_REG: 1, AccessFS.MAKE_SOCK: 1, AccessFS.MAKE_FIFO: 1, AccessFS.MAKE_BLOCK: 1,
    AccessFS.MAKE_SYM: 1, AccessFS.REFER: 2, AccessFS.TRUNCATE: 3, AccessFS.IOCTL_DEV: 5,
    AccessFS.RESOLVE_UNIX: 9,
}
NET_MIN_ABI: dict[AccessNet, int] = {AccessNet.BIND_TCP: 4, AccessNet.CONNECT_TCP: 4,
                                     AccessNet.BIND_UDP: 10, AccessNet.CONNECT_SEND_UDP: 10}
SCOPE_MIN_ABI: dict[Scope, int] = {Scope.ABSTRACT_UNIX_SOCKET: 6, Scope.SIGNAL: 6}

READ = AccessFS.EXECUTE | AccessFS.READ_FILE | AccessFS.READ_DIR
WRITE = (READ | AccessFS.WRITE_FILE | AccessFS.REMOVE_DIR | AccessFS.REMOVE_FILE
         | AccessFS.MAKE_DIR | AccessFS.MAKE_REG | AccessFS.MAKE_SOCK | AccessFS.MAKE_FIFO
         | AccessFS.MAKE_SYM | AccessFS.REFER | AccessFS.TRUNCATE | AccessFS.RESOLVE_UNIX)
DEVICE = AccessFS.READ_FILE | AccessFS.WRITE_FILE | AccessFS.IOCTL_DEV | AccessFS.READ_DIR
# Rights the kernel accepts on a rule whose object is not a directory.
FILE_RIGHTS = (AccessFS.EXECUTE | AccessFS.WRITE_FILE | AccessFS.READ_FILE
               | AccessFS.TRUNCATE | AccessFS.IOCTL_DEV | AccessFS.RESOLVE_UNIX)


def kernel_abi() -> int:
    try:
        abi = landlockpy.abi_version()
    except OSError:
        abi = 0
    cap = os.environ.get(_ABI_CAP_ENV)
    if cap is not None and cap.isdigit():
        abi = min(abi, int(cap))
    return abi


def fs_rights(abi: int) -> AccessFS:
    out = AccessFS(0)
    for r, v in FS_MIN_ABI.items():
        if abi >= v:
            out |= r
    return out


def net_rights(abi: int) -> AccessNet:
    out = AccessNet(0)
    for r, v in NET_MIN_ABI.items():
        if abi >= v:
            out |= r
    return out


def scopes(abi: int) -> Scope:
    out = Scope(0)
    for r, v in SCOPE_MIN_ABI.items():
        if abi >= v:
            out |= r
    return out


def names(flags: Flag) -> list[str]:
    return [f.name.lower() for f in type(flags)
            if f.value and f in flags and f.name and f.name != "NONE"]


def build(handled_fs: AccessFS, handled_net: AccessNet, scoped: Scope,
          path_rules: list[tuple[str, AccessFS]],
          ports: list[tuple[int, AccessNet]]) -> landlockpy.Ruleset:
    """Create the ruleset fd (in the supervisor). Raises OSError naming the path."""
    rs = landlockpy.Ruleset(handled_fs=handled_fs, handled_net=handled_net,
                            scoped=scoped, best_effort=False)
    try:
        add_rules(rs, path_rules, ports)
    except BaseException:
        rs.close()
        raise
    return rs


def add_rules(rs: landlockpy.Ruleset, path_rules: Iterable[tuple[str, AccessFS]],
              ports: Iterable[tuple[int, AccessNet]]) -> None:
    """Add rules to a ruleset not yet enforced. Raises OSError naming the path."""
    for path, access in path_rules:
        try:
            rs.allow_path(path, access)
        except FileNotFoundError:
            # Gone since the plan listed it (a lock file in /etc, say): there
            # is nothing left to grant, and granting less is the safe side.
            continue
        except OSError as e:
            err = e.errno or errno.EIO
            raise OSError(err, f"Landlock rule for {path}: {os.strerror(err)}") from None
    for port, net_access in ports:
        rs.allow_port(port, net_access)


def add(ruleset: landlockpy.Ruleset, path: str, access: AccessFS) -> None:
    """Add a rule in the child (for mounts that exist only in its namespace)."""
    if not os.path.isdir(path):
        access &= FILE_RIGHTS
    access &= ruleset.handled_fs
    if access:
        ruleset.allow_path(path, access)


def restrict(ruleset: landlockpy.Ruleset, log_new_exec: bool = False) -> None:
    """Enforce in the calling (child) thread; no_new_privs is already set.
    log_new_exec (ABI 7): the agent's refusals after its exec go to the audit
    log too (kernel/audit.py reads them); without it only the refusals before
    exec (confine's own steps, the broker) are logged."""
    ruleset.restrict(landlockpy.RestrictFlag.LOG_NEW_EXEC_ON if log_new_exec
                     else landlockpy.RestrictFlag.NONE, no_new_privs=True)
