"""The profile's `ssh_agent:` section: which of the person's ssh keys the agent
may list and use, toward which hosts, and whether each use is asked.

The threat: a confined agent that reaches the person's real ssh-agent signs with
every key it holds, for any host, for any purpose (a login elsewhere, a signed
commit). This section names the keys by fingerprint (what `ssh-add -l` shows),
the hosts a login signature may be for, the `ssh-keygen -Y sign` namespaces a
file signature may be for (`git` for commit signing), and the decision for each
use. Without the section the agent gets no agent socket at all.

Checked here (errors name the line and key): a key that is not a SHA256
fingerprint, a host that is not a host name or address (optionally `:port`), a
namespace that is not a plain name, a decision that is not allow, ask or deny.
"""
from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

from ..errors import ProfileError
from ..record import dataclass

# key -> kind: the loader's schema entry for the section (the ssh* kinds are checked
# per element by element_error, "paths" and "str" by the loader as elsewhere)
SCHEMA: dict[str, str] = {"keys": "sshkeys", "hosts": "sshhosts", "namespaces": "sshnamespaces",
                          "decision": "str", "known_hosts": "paths"}
DECISIONS = ("allow", "ask", "deny")
# read outside, before the start: the launching person's own, then the system's
DEFAULT_KNOWN_HOSTS = ("~/.ssh/known_hosts", "/etc/ssh/ssh_known_hosts")
DEFAULT_SSH_PORT = 22

_FINGERPRINT = r"^SHA256:[A-Za-z0-9+/]{43}$"
_HOST = r"^(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$"
_NAMESPACE = r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$"


@dataclass(frozen=True)
class SshAgent:
    """keys: SHA256 fingerprints of the only keys listed and used; hosts: (name,
    port) a login signature may be for; namespaces: `ssh-keygen -Y sign`
    namespaces a file signature may be for; known_hosts: absolute files read by
    the supervisor to learn each host's keys; source: where the section is."""
    keys: tuple[str, ...] = ()
    hosts: tuple[tuple[str, int], ...] = ()
    namespaces: tuple[str, ...] = ()
    decision: str = "allow"
    known_hosts: tuple[str, ...] = ()
    source: str = ""

    def to_dict(self) -> dict[str, object]:
        return {"keys": list(self.keys),
                "hosts": [h if p == DEFAULT_SSH_PORT else f"{h}:{p}" for h, p in self.hosts],
                "namespaces": list(self.namespaces), "decision": self.decision,
                "known_hosts": list(self.known_hosts)}


def fingerprint_error(v: object) -> str | None:
    import base64
    import binascii
    if not isinstance(v, str) or not re.match(_FINGERPRINT, v):
        return (f"{v!r} is not a SHA256 key fingerprint (SHA256: and 43 base64 characters, "
                "as `ssh-add -l` or `ssh-keygen -lf KEY.pub` shows)")
    try:
        raw = base64.b64decode(v[7:] + "=", validate=True)
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != 32 or base64.b64encode(raw).decode().rstrip("=") != v[7:]:
        return f"{v!r} is not a SHA256 key fingerprint (its base64 does not decode to 32 bytes)"
    return None


def split_host(v: str) -> tuple[str, int] | None:
    """`name`, `name:port`, `1.2.3.4:port`, `[::1]:port` -> (host lower case, port)."""
    import ipaddress
    host, port = v, DEFAULT_SSH_PORT
    if v.startswith("["):
        end = v.find("]")
        if end < 0 or v[end + 1:end + 2] != ":":
            return None
        host, rest = v[1:end], v[end + 2:]
        if not rest.isdigit():
            return None
        port = int(rest)
    elif v.count(":") == 1:
        host, rest = v.split(":")
        if not rest.isdigit():
            return None
        port = int(rest)
    if not 0 < port <= 65535:
        return None
    try:
        return str(ipaddress.ip_address(host)), port
    except ValueError:
        pass
    if len(host) > 253 or not re.match(_HOST, host):
        return None
    return host.lower().rstrip("."), port


def element_error(kind: str, v: object) -> str | None:
    """Why one list entry of the section is wrong (None: it is right)."""
    if kind == "sshkeys":
        return fingerprint_error(v)
    if kind == "sshhosts":
        if not isinstance(v, str) or split_host(v) is None:
            return (f"{v!r} is not a host name or address, optionally with :port "
                    "(github.com, forge.example:2222, [::1]:2222)")
        return None
    if kind == "sshnamespaces":
        if not isinstance(v, str) or not re.match(_NAMESPACE, v):
            return f"{v!r} is not a signature namespace (a plain name such as git or file)"
        return None
    return f"unknown kind {kind}"


def build(raw: Mapping[str, Any] | None, expand: Any) -> SshAgent | None:
    """The section from the loader's raw mapping (Items), or None when absent.
    expand(template) -> absolute path (the loader's {home}, {workdir} expansion);
    `~` in known_hosts is the launching person's home, whose keys these are."""
    if raw is None:
        return None
    dec = raw.get("decision")
    decision = "allow" if dec is None else dec.value
    if dec is not None and decision not in DECISIONS:
        raise ProfileError(f"{dec.where}: ssh_agent.decision: {decision!r} is not one of "
                           f"{', '.join(DECISIONS)}")
    keys = tuple(dict.fromkeys(str(i.value) for i in raw.get("keys", [])))
    hosts = tuple(dict.fromkeys(h for h in (split_host(str(i.value))
                                            for i in raw.get("hosts", [])) if h is not None))
    known = raw.get("known_hosts")
    files = ([str(i.value).lstrip("?") for i in known] if known is not None
             else list(DEFAULT_KNOWN_HOSTS))
    first = next((v for v in raw.values() if hasattr(v, "where")), None)
    if first is None:
        first = next((v[0] for v in raw.values() if isinstance(v, list) and v), None)
    return SshAgent(keys=keys, hosts=hosts,
                    namespaces=tuple(dict.fromkeys(str(i.value) for i in raw.get("namespaces", []))),
                    decision=decision,
                    known_hosts=tuple(dict.fromkeys(
                        # ~ is the launching person's home (the agent's may be another)
                        os.path.expanduser(f) if f == "~" or f.startswith("~/") else expand(f)
                        for f in files)),
                    source=first.where if first is not None else "")
