"""`confine check`: what this kernel can enforce, and whether each profile fits."""
from __future__ import annotations

import os
import tempfile
from typing import Any, Sequence

from .. import plan as _plan
from ..errors import ConfineError
from ..kernel import landlock, seccomp
from ..kernel.sysfs import read_text
from ..plan import features
from ..policy import load as _load


def read_setting(path: str) -> str | None:
    """A /proc or /sys setting, stripped; None if it cannot be read."""
    return read_text(path, strip=True)


def host() -> dict:
    abi = landlock.kernel_abi()
    try:
        import landlockpy
        errata = landlockpy.errata() if abi else 0
    except OSError:
        errata = 0
    aa = read_setting("/sys/module/apparmor/parameters/enabled")
    se = read_setting("/sys/fs/selinux/enforce")
    return {
        "kernel": os.uname().release,
        "landlock": {
            "abi": abi, "errata": errata,
            "fs_rights": landlock.names(landlock.fs_rights(abi)),
            "net_rights": landlock.names(landlock.net_rights(abi)),
            "scopes": landlock.names(landlock.scopes(abi)),
        },
        "seccomp": seccomp.status(),
        "user_namespaces": {
            "max_user_namespaces": int(read_setting("/proc/sys/user/max_user_namespaces") or 0),
            "apparmor_restrict_unprivileged_userns":
                read_setting("/proc/sys/kernel/apparmor_restrict_unprivileged_userns"),
        },
        "apparmor": {"enabled": aa == "Y"} if aa is not None else {"enabled": False},
        "selinux": {"enabled": se is not None,
                    "mode": {"1": "enforcing", "0": "permissive"}.get(se or "", "disabled")},
        "tiocsti_legacy": read_setting("/proc/sys/dev/tty/legacy_tiocsti"),
    }


def protections(mech: dict[str, str], missing: list, facts: _plan.HostFacts) -> list[dict]:
    """Each protection of the feature table with what enforces it here: "primary",
    "replacement" (another layer gives the same guarantee), "partial" (part of it,
    the rest a named difference), "refused" (nothing can: the run is refused) or
    "not needed" (this profile does not ask for it)."""
    refused = {m.feature: m.detail for m in missing}
    names = [f.name for f in features.FEATURES] + [n for n in mech if n not in features.BY_NAME]
    out = []
    for name in names:
        how = mech.get(name)
        if name in refused:
            kind, how = "refused", refused[name]
        elif how is None:
            kind, how = "not needed", "not asked for by this profile (or another rule covers it)"
        elif how.startswith("PARTIAL"):
            kind = "partial"
        elif "replaces" in how or (name in features.PID_REPLACEMENTS and not facts.namespaces):
            kind = "replacement"
        else:
            kind = "primary"
        out.append({"protection": name, "status": kind, "mechanism": how,
                    "protects": features.BY_NAME[name].protects if name in features.BY_NAME
                    else ""})
    return out


def profiles(names: Sequence[str] = ()) -> list[dict]:
    """Each built-in profile, or each of `names` (a name or a file, as `exec -p` takes
    it). A profile named by the caller that cannot be loaded is the caller's error
    (ConfineError, exit 125), not a line of the table: a typo must not read as
    "NOT fully enforceable"."""
    out = []
    facts = _plan.HostFacts.read(os.geteuid() == 0)
    with tempfile.TemporaryDirectory(prefix="confine-check-") as wd:
        for name in names or _load.builtin_names():
            try:
                pol = _load.load(name, workdir=wd, home=os.path.expanduser("~"), tmp=wd)
                missing = _plan.missing_features(pol, facts, os.geteuid() == 0)
                mech = _plan.mechanisms(pol, facts)
                out.append({"profile": name, "enforceable": not missing,
                            "network": network_posture(pol.network),
                            "mechanisms": mech,
                            "protections": protections(mech, missing, facts),
                            "missing": [{"feature": m.feature, "detail": m.detail}
                                        for m in missing]})
            except ConfineError as e:
                if names:
                    raise
                out.append({"profile": name, "enforceable": False,
                            "missing": [{"feature": "profile", "detail": str(e)}]})
    return out


def network_posture(net: Any) -> dict[str, Any]:
    """Which hosts a profile's agent can reach, and through what (issue 14 item 8).

    connect_tcp is the agent's own loopback; host entries (network.allow,
    network.include, network.default: ask) go through confine's gateway, DNS
    included; nothing else is reachable."""
    ports = [int(p) for p in getattr(net, "connect_tcp", ()) or ()]
    allow = [str(h) for h in getattr(net, "allow", ()) or ()]
    sets = [str(h) for h in getattr(net, "include", ()) or ()]
    default = str(getattr(net, "default", "deny") or "deny")
    hosts = allow + [f"set {s}" for s in sets]
    gateway = bool(hosts or default == "ask")
    out: dict[str, Any] = {"hosts": hosts, "sets": sets, "default": default,
                           "open_ports": [], "loopback_ports": ports}
    parts = []
    if gateway:
        shown = ", ".join(hosts) if hosts else "no host"
        parts.append(f"{shown} through confine's gateway (DNS too)"
                     + ("; others asked" if default == "ask" else "; nothing else"))
    if ports:
        parts.append(f"its own loopback on TCP {', '.join(map(str, ports))}")
    out["through"] = "gateway" if gateway else "none"
    out["summary"] = "; ".join(parts) or "no network"
    return out
