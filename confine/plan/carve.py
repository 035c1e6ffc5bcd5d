"""Carve-outs: turn "grant P except D1, D2..." into an allowlist Landlock can hold.

Landlock cannot subtract, so a grant on P that contains a denied path is
replaced by grants on the siblings along the way down to each denied path.
Directories on that way are not granted themselves: files created there later
stay unreachable, which is the safe side. Symlinks are never granted (a rule
on a symlink would grant its target); their targets need rules of their own.
"""
from __future__ import annotations

import os
import stat

from ..paths import is_under


def carve(path: str, denied: list[str]) -> tuple[list[str], list[str]]:
    """Returns (paths to grant, carved directories)."""
    inner = [d for d in denied if is_under(d, path)]
    if not inner:
        return [path], []
    if any(d == path for d in inner):
        return [], []
    grants: list[str] = []
    carved = [path]
    try:
        names = sorted(os.listdir(path))
    except OSError:
        return [], carved  # cannot see inside: grant nothing rather than everything
    # The denied paths below each entry, by the entry's name (one pass, not one
    # per entry: /etc has hundreds).
    cut = len(path.rstrip("/")) + 1
    below: dict[str, list[str]] = {}
    for d in inner:
        below.setdefault(d[cut:].split("/", 1)[0], []).append(d)
    for name in names:
        child = os.path.join(path, name)
        hits = below.get(name, [])
        try:
            st = os.lstat(child)
        except OSError:
            continue
        if stat.S_ISLNK(st.st_mode):
            continue
        if not hits:
            grants.append(child)
        elif child in hits:
            continue
        elif stat.S_ISDIR(st.st_mode):
            g, c = carve(child, hits)
            grants += g
            carved += c
    return grants, carved


def carve_write(path: str, denied: list[str], read_only: list[str]
                ) -> tuple[list[str], list[str], list[str]]:
    """A write grant on `path` whose `read_only` entries (files that run later,
    policy/runlater.py) must stay unwritable: (paths to grant writing, paths to
    grant reading, carved directories).

    Reading: what a read grant on `path` gives (secrets carved out). Writing:
    the siblings along the way down to each read-only entry and each secret.
    The directories on that way get no write right of their own (no MAKE_*,
    REMOVE_*, REFER), so an entry cannot be created, deleted or renamed over,
    whether it exists or not."""
    inner = [r for r in read_only if is_under(r, path)]
    if not inner:
        w, c = carve(path, denied)
        return w, [], c
    if any(is_under(path, r) for r in inner):
        r, c = carve(path, denied)
        return [], r, c
    w, c = carve(path, denied + inner)
    r, c2 = carve(path, denied)
    return w, r, c + c2
