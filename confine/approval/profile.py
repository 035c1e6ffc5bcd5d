"""An answer "add to the profile": the entry written into the run's profile file, safely.

Threat: a profile broken by the edit. The new text is validated (YAML round
trip: only SECTION.allow changed, the entry parses; then the caller's
`validate`, the policy loader), written to a temporary file beside it and
renamed over it (atomic), under a lock file against concurrent runs, and only
if nobody changed it since it was read. A built-in profile or one that is not
writable is never edited ("profile" is then not offered).
"""
from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import threading
import time
from typing import Any, Callable

from ..errors import ConfineError
from ..gateway.rules import RuleError, parse_rule

LOCK_WAIT = 5.0
# the event kinds an answer can be written for -> the profile section it goes to
SECTIONS = {"network": "network", "unix_socket": "unix_sockets"}


# --- adding to the profile ---
def _builtin_dirs() -> tuple[str, ...]:
    """Where the shipped profiles live: confine/profiles installed (a plain package
    beside confine/approval, pyproject's package-dir), profiles/ in a source checkout.
    Found from this file rather than importlib.resources, whose import (zipfile, its
    readers) cost every run ~4 ms plus the lookup."""
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return (os.path.join(os.path.dirname(pkg), "profiles"), os.path.join(pkg, "profiles"))


_TOP = re.compile(r"^[^\s#]")
_ALLOW_BLOCK = re.compile(r"^(\s+)allow:\s*(#.*)?$")
_ALLOW_FLOW = re.compile(r"^(\s+)allow:\s*\[(.*)\]\s*(#.*)?$")
_ITEM = re.compile(r"^(\s+)-\s")


class ProfileWriter:
    """Adds an entry to `network.allow` or `unix_sockets.allow` of one profile file,
    safely (see the module docstring)."""

    def __init__(self, path: str | None, *, builtin_dirs: tuple[str, ...] = (),
                 validate: Callable[[str], None] | None = None) -> None:
        self.path = os.path.realpath(path) if path else None
        self.builtin_dirs = tuple(os.path.realpath(d) for d in builtin_dirs)
        self.validate = validate

    def why_not(self) -> str | None:
        """Why this profile cannot be edited, or None."""
        if self.path is None:
            return "the profile is a built-in"
        if any(self.path.startswith(d.rstrip("/") + "/") for d in self.builtin_dirs):
            return "the profile is a built-in"
        if not os.path.isfile(self.path):
            return "the profile is not a file"
        if not os.access(self.path, os.W_OK) or not os.access(os.path.dirname(self.path), os.W_OK):
            return "the profile is not writable"
        return None

    @staticmethod
    def offers(kind: str) -> bool:
        """An answer about this kind can be written as a profile entry."""
        return kind in SECTIONS

    def add_for(self, ev: Any) -> bool:
        """Add the entry answering the engine's event `ev` (network or unix_socket)."""
        if ev.kind == "network":
            port = ev.subject.get("port")
            host = str(ev.subject.get("host"))
            return self.add(host if port in (None, 443) else f"{host}:{port}")
        if ev.kind == "unix_socket":
            path = str(ev.subject.get("path", ""))
            if not path.startswith("/") or "\n" in path or "#" in path or path != path.strip():
                raise ConfineError(f"{path!r} cannot be written as a profile entry")
            return self.add(json.dumps(path), "unix_socket")
        raise ConfineError(f"a {ev.kind} answer is not a profile entry")

    def add(self, entry: str, kind: str = "network") -> bool:
        """Add `entry` (as YAML text: a unix socket's path is quoted); False if it is
        there already. ConfineError if it cannot be done."""
        why = self.why_not()
        if why is not None:
            raise ConfineError(why)
        assert self.path is not None
        if kind == "network":
            try:
                parse_rule(entry)
            except RuleError as e:
                raise ConfineError(str(e)) from None
        lock = os.open(self.path + ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            end = time.monotonic() + LOCK_WAIT
            while True:
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except OSError as e:
                    if e.errno not in (errno.EAGAIN, errno.EACCES) or time.monotonic() > end:
                        raise ConfineError(f"{self.path}: locked by another run") from None
                    time.sleep(0.02)
            return self._add_locked(entry, SECTIONS[kind])
        finally:
            os.close(lock)   # releases the lock

    def _add_locked(self, entry: str, section: str) -> bool:
        import yaml  # type: ignore[import-untyped]
        assert self.path is not None
        for _ in range(3):
            st = os.stat(self.path)
            with open(self.path, encoding="utf-8") as f:
                old = f.read()
            try:
                before = yaml.safe_load(old) or {}
            except yaml.YAMLError as e:
                raise ConfineError(f"{self.path}: not valid YAML ({e})") from None
            if not isinstance(before, dict):
                raise ConfineError(f"{self.path}: not a mapping")
            net = before.get(section) or {}
            have = net.get("allow") if isinstance(net, dict) else None
            value = yaml.safe_load(entry)
            if isinstance(have, list) and value in have:
                return False
            new = insert_allow(old, entry, section)
            try:
                after = yaml.safe_load(new)
            except yaml.YAMLError as e:
                raise ConfineError(f"{self.path}: the edit would not be valid YAML ({e})") from None
            want = dict(before)
            want_net = dict(net) if isinstance(net, dict) else {}
            want_net["allow"] = [*(have or []), value]
            want[section] = want_net
            if after != want:
                raise ConfineError(f"{self.path}: cannot add {entry} without changing something else "
                                   f"(add it to {section}.allow by hand)")
            d = os.path.dirname(self.path)
            tmp = os.path.join(d, f".{os.path.basename(self.path)}.confine-{os.getpid()}-{threading.get_ident()}")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, st.st_mode & 0o7777)
            try:
                try:
                    os.write(fd, new.encode("utf-8"))
                    if os.geteuid() == 0:
                        os.fchown(fd, st.st_uid, st.st_gid)
                    os.fsync(fd)
                finally:
                    os.close(fd)
                if self.validate is not None:
                    try:
                        self.validate(tmp)
                    except ConfineError as e:
                        raise ConfineError(f"{self.path}: the edit does not load ({e})") from None
                now = os.stat(self.path)
                if (now.st_ino, now.st_mtime_ns, now.st_size) != (st.st_ino, st.st_mtime_ns, st.st_size):
                    continue   # changed by someone not holding the lock (an editor): read it again
                os.replace(tmp, self.path)
                tmp = ""
            finally:
                if tmp:
                    try:
                        os.unlink(tmp)
                    except OSError:
                        pass
            dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
            return True
        raise ConfineError(f"{self.path}: keeps changing while confine writes it")


def insert_allow(text: str, entry: str, section: str = "network") -> str:
    """`text` with `entry` appended to its top-level SECTION.allow list, comments and layout
    kept. ConfineError where the layout is not one this edits (flow mappings and the like)."""
    note = "  # added by confine (ask)"
    _NET = re.compile(rf"^{section}:\s*(#.*)?$")
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    net = next((i for i, ln in enumerate(lines) if _NET.match(ln.rstrip("\n"))), None)
    if net is None:
        if any(ln.startswith(f"{section}:") for ln in lines):
            raise ConfineError(f"{section}: is not a block mapping (add the entry by hand)")
        return "".join(lines) + f"{section}:\n  allow:\n    - {entry}{note}\n"
    end = next((i for i in range(net + 1, len(lines)) if _TOP.match(lines[i])), len(lines))
    body = range(net + 1, end)
    indent = next((re.match(r"^(\s+)", lines[i]).group(1) for i in body  # type: ignore[union-attr]
                   if lines[i].strip() and not lines[i].lstrip().startswith("#")), "  ")
    for i in body:
        ln = lines[i].rstrip("\n")
        m = _ALLOW_FLOW.match(ln)
        if m and m.group(1) == indent:
            items = [x.strip() for x in m.group(2).split(",") if x.strip()]
            tail = f"  {m.group(3)}" if m.group(3) else ""
            lines[i] = f"{indent}allow: [{', '.join([*items, entry])}]{tail}\n"
            return "".join(lines)
        m = _ALLOW_BLOCK.match(ln)
        if m and m.group(1) == indent:
            last, item_indent = i, indent + "  "
            for j in range(i + 1, end):
                s = lines[j]
                if not s.strip() or s.lstrip().startswith("#"):
                    continue
                im = _ITEM.match(s)
                lead = len(s) - len(s.lstrip())
                if im and lead >= len(indent):
                    last, item_indent = j, im.group(1)
                    continue
                if lead > len(indent) + 2 and last != i:
                    continue   # a continuation of the last item
                break
            lines.insert(last + 1, f"{item_indent}- {entry}{note}\n")
            return "".join(lines)
    ins = net + 1
    lines.insert(ins, f"{indent}allow:\n{indent}  - {entry}{note}\n")
    return "".join(lines)
