"""`filesystem.private_tmp:`: names in /tmp that an agent uses whatever TMPDIR says,
each given to the run as a private, empty directory.

Threat and need: some agents keep a per-user directory at a fixed place in /tmp
(Codex's UI: /tmp/codex-daemon-UID, the lock files of its app server, found by
every Codex process of the account whatever its TMPDIR), so the run's private
TMPDIR does not cover it and the read-only host refuses it (the UI then stops).
Granting the host's directory would share it with the person's own Codex outside:
the agent could leave a symlink where the person's Codex opens its lock file for
writing. So in the mount namespace a directory of the run's TMPDIR is bound over
the name: the agent has a private one, the host's is never written. The host needs
a directory there to bind over: the run makes an empty one owned by the agent's
account if missing (what the agent would make outside), and refuses a run where the
name is anything else (another owner, a symlink). Without a mount namespace nothing
is granted: creates there stay refused.

A name is one component in /tmp; `{uid}` is the agent's uid.
"""
from __future__ import annotations

import re

__all__ = ["name_error", "expand"]

_NAME = r"^(?:[A-Za-z0-9._-]|\{uid\})+$"


def name_error(v: object) -> str | None:
    """Why `v` is not a private_tmp entry, or None."""
    if not isinstance(v, str) or not re.match(_NAME, v) or v in (".", "..") \
            or re.sub(r"\{uid\}", "", v) in (".", ".."):
        return (f"{v!r} is not a name in /tmp (one component of letters, digits, '.', '_', "
                "'-', and {uid} for the agent's uid)")
    return None


def expand(name: str, uid: int) -> str:
    return "/tmp/" + name.replace("{uid}", str(uid))
