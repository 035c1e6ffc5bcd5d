"""OCI seccomp: the profile's seccomp filter as a Docker/containerd/CRI-O JSON profile.

The same deny list `confine exec` loads (rules_for()), in the format the
runtimes share: default allow, each rule SCMP_ACT_ERRNO with its errno, its
argument comparisons as SCMP_CMP_* (masked_eq becomes SCMP_CMP_MASKED_EQ with
value = mask and valueTwo = the masked value, libseccomp's order).

Architectures: confine accepts only the native ABI, so each archMap entry has
no sub-architectures: i386 system calls on an x86_64 host and x32 calls hit
the bad-architecture action, as under confine. The ioctl numbers in the rules
are those of x86_64 and aarch64, so only those two are mapped.

Not expressible here: the seccomp user-notification filter confine uses to
mediate unix-socket connects (a runtime would need a listener agent), and the
Landlock half of the policy (filesystem, TCP ports, scopes).
"""
from __future__ import annotations

import json

from ..errors import ConfineError
from ..kernel import seccomp
from ..policy.model import Policy

ARCH_MAP = (("SCMP_ARCH_X86_64", "x86_64"), ("SCMP_ARCH_AARCH64", "aarch64"))
OPS = {"masked_eq": "SCMP_CMP_MASKED_EQ", "eq": "SCMP_CMP_EQ", "ne": "SCMP_CMP_NE",
       "lt": "SCMP_CMP_LT", "le": "SCMP_CMP_LE", "gt": "SCMP_CMP_GT", "ge": "SCMP_CMP_GE"}


def rules(policy: Policy) -> tuple:
    try:
        return seccomp.rules_for(policy.seccomp.deny, policy.seccomp.unsafe_allow)
    except ValueError as e:
        raise ConfineError(f"profile {policy.name}: {e}") from None


def _arg(a) -> dict:
    if a.op == "masked_eq":
        return {"index": a.index, "value": a.mask, "valueTwo": a.value, "op": OPS[a.op]}
    return {"index": a.index, "value": a.value, "valueTwo": 0, "op": OPS[a.op]}


def profile(policy: Policy) -> dict:
    entries: list[dict] = []
    plain: dict[tuple[str, int], dict] = {}  # one entry per group for argument-free rules
    for r in rules(policy):
        if not r.args:
            key = (r.group, r.errno)
            if key not in plain:
                plain[key] = {"names": [], "action": "SCMP_ACT_ERRNO", "errnoRet": r.errno,
                              "comment": f"{r.group}: {r.why}"}
                entries.append(plain[key])
            if r.syscall not in plain[key]["names"]:
                plain[key]["names"].append(r.syscall)
            continue
        entries.append({"names": [r.syscall], "action": "SCMP_ACT_ERRNO", "errnoRet": r.errno,
                        "args": [_arg(a) for a in r.args], "comment": f"{r.group}: {r.why}"})
    return {
        "comment": f"confine profile {policy.name!r}: the seccomp deny list of `confine exec` "
                   "(generated; do not edit)",
        "defaultAction": "SCMP_ACT_ALLOW",
        "archMap": [{"architecture": a, "subArchitectures": []} for a, _ in ARCH_MAP],
        "syscalls": entries,
    }


def render(policy: Policy) -> str:
    return json.dumps(profile(policy), indent=2) + "\n"
