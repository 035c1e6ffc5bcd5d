"""System call names -> native numbers, as libseccomp resolves them.

Shared by the rule data (rules.py: `rules_for` checks the names a profile
adds, `describe` shows the numbers) and the loader (loader.py). libseccomp is
imported lazily, so the rule data works without it.

Names that libseccomp knows but that do not exist on the native ABI (iopl on
aarch64, umount on x86_64, ...) resolve to None; the deny list keeps them,
for exporters that target other arches, and the loader skips them. Names
newer than the installed libseccomp (open_tree_attr with libseccomp 2.5.4)
are resolved from `_UNIFIED_NUMBERS` (syscalls >= 424 share one number on
every arch except alpha, ia64 and mips).
"""
from __future__ import annotations

import os
from typing import Any

__all__ = ["libseccomp", "native_arch", "resolve", "syscall_number"]

# Syscalls numbered >= 424 share one number on x86_64, aarch64, riscv64,
# ppc64, s390x (not alpha/ia64/mips). Used only for names the installed
# libseccomp does not know (2.5.4 stops at futex_wake).
_UNIFIED_NUMBERS = {
    "futex_wait": 455, "futex_requeue": 456, "statmount": 457, "listmount": 458,
    "lsm_get_self_attr": 459, "lsm_set_self_attr": 460, "lsm_list_modules": 461, "mseal": 462,
    "setxattrat": 463, "getxattrat": 464, "listxattrat": 465, "removexattrat": 466,
    "open_tree_attr": 467, "file_getattr": 468, "file_setattr": 469,
}
_UNIFIED_ARCHES = ("x86_64", "aarch64", "riscv64", "ppc64", "ppc64le", "s390x")


def libseccomp() -> Any:
    """pyseccomp, imported lazily so that DEFAULT_RULES/describe work without libseccomp."""
    import pyseccomp
    return pyseccomp


_ARCH_NAMES = {
    "X86": "x86", "X86_64": "x86_64", "X32": "x32", "ARM": "arm", "AARCH64": "aarch64",
    "PPC64LE": "ppc64le", "PPC64": "ppc64", "PPC": "ppc", "S390X": "s390x", "S390": "s390",
    "RISCV64": "riscv64",
}


def native_arch() -> str:
    """Native ABI name (x86_64, aarch64, ...) as libseccomp sees it."""
    try:
        sc = libseccomp()
        token = sc.system_arch()
        for attr, name in _ARCH_NAMES.items():
            if getattr(sc.Arch, attr, None) == token:
                return name
    except (ImportError, RuntimeError, OSError, AttributeError):
        pass
    return os.uname().machine          # what platform.machine() says, without importing it


def resolve(name: str) -> tuple[int | None, bool]:
    """(native number or None, whether any arch knows the name)."""
    sc = libseccomp()
    nr = sc.resolve_syscall(sc.Arch.NATIVE, name)
    if nr >= 0:
        return nr, True
    if nr == -1:  # __NR_SCMP_ERROR: libseccomp does not know the name at all
        if name in _UNIFIED_NUMBERS and native_arch() in _UNIFIED_ARCHES:
            return _UNIFIED_NUMBERS[name], True
        return None, name in _UNIFIED_NUMBERS
    return None, True  # a pseudo-syscall number: known, but not on this ABI


def syscall_number(name: str) -> int | None:
    """The native syscall number for name, or None if it does not exist here."""
    return resolve(name)[0]
