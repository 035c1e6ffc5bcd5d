"""seccomp: the only package in confine that touches seccomp.

rules.py holds the data (the default deny table, the profile's changes to it,
the one list of mediated calls, describe); loader.py compiles and loads it
(libseccomp build, the raw BPF guard, the notifying filter and its loader,
status); syscalls.py resolves syscall names to native numbers for both.

The names importers use are re-exported here, so `confine.kernel.seccomp.build`,
`.rules_for`, `.FILE_CALLS`, ... stay where they were before the split.
"""
from __future__ import annotations

from .loader import (
                     BPF_LD_W_ABS,
                     Program,
                     available,
                     build,
                     build_notify,
                     compiled,
                     export_bpf,
                     listener_busy,
                     load,
                     load_notify,
                     notify_program,
                     status,
)
from .rules import (
                     DEFAULT_RULES,
                     DGRAM_GROUP,
                     FILE_CALLS,
                     IOCTL_NAMES,
                     IOCTLS,
                     META_CALLS,
                     META_IOCTLS,
                     META_REFUSED,
                     OPEN_CALLS,
                     PERSONA_FLAGS,
                     SOCKET_CALLS,
                     ArgMatch,
                     Rule,
                     describe,
                     dgram_notifiable,
                     no_inet_rules,
                     rules_for,
                     setflags_rules,
)
from .syscalls import native_arch, syscall_number

__all__ = [
    "Program", "compiled",
    "ArgMatch", "Rule", "DEFAULT_RULES", "IOCTLS", "IOCTL_NAMES", "PERSONA_FLAGS",
    "rules_for", "no_inet_rules", "setflags_rules", "describe", "DGRAM_GROUP", "dgram_notifiable",
    "SOCKET_CALLS", "FILE_CALLS", "OPEN_CALLS", "META_CALLS", "META_REFUSED", "META_IOCTLS",
    "available",
    "build", "load", "export_bpf", "BPF_LD_W_ABS", "status",
    "build_notify", "notify_program", "load_notify", "listener_busy",
    "native_arch", "syscall_number",
]
