"""Path containment, spelled once (pure string logic: callers pass real paths),
and where confine keeps its own state for the person.

Threat for the state directories: root's (/var/lib/confine) hold what root-started
runs kept; an unprivileged confine must never name them (it cannot read them, and a
test or tool that followed it would fail on a host where root ran confine)."""
from __future__ import annotations

import os


def is_under(path: str, root: str) -> bool:
    """path is root or lies below it (absolute, already-resolved paths)."""
    return path == root or path.startswith(root.rstrip("/") + "/")


def rel_under(rel: str, top: str) -> bool:
    """The same for workdir-relative paths, where "" is the workdir itself."""
    return top == "" or rel == top or rel.startswith(top + "/")


def state_dir(name: str, *, euid: int | None = None, home: str | None = None) -> str:
    """confine's state NAME (held, quarantine, index): /var/lib/confine/NAME when
    started as root, else $XDG_STATE_HOME (absolute; default ~/.local/state)/confine/NAME
    (home given: HOME/.local/state/confine/NAME, the environment not read)."""
    if (os.geteuid() if euid is None else euid) == 0:
        return os.path.join("/var/lib/confine", name)
    base = os.environ.get("XDG_STATE_HOME") if home is None else None
    if not base or not os.path.isabs(base):
        base = os.path.join(home or os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "confine", name)
