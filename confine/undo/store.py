"""The undo store's layout, read and written in one place.

    <base>/RUN/manifest.json   run, workdir, started, ended, not_kept (the keeper's)
    <base>/RUN/entries.jsonl   one line per path kept: the first change of it in the run
    <base>/RUN/files/NNNNNNNN  the kept inodes (links or copies), named by number

<base> is protect.keep.undo_base() (the person's state directory, 0700): the
third store bounded across runs by protect/keep.py. Names the agent chose live
only inside the JSON, never as names on disk.

Threat: a run's directory may be read by a later `confine undo` after anyone
with the person's rights changed it; it is read by descriptor, never through
a symlink, and every entry is checked for shape before it is used.
"""
from __future__ import annotations

import json
import os
from typing import Any

from ..protect import keep
from ..protect.held import MANIFEST
from ..protect.revert import _RUN_ID, _run_time
from .client import birth_ns

__all__ = ["birth_ns", "base", "read_json", "write_json", "read_entries", "run_ids", "open_run",
           "summary"]

ENTRIES = "entries.jsonl"
FILES = "files"
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
ENTRIES_CAP = 64 << 20       # bytes of entries read back
# ops: the call that changed the path (a deletion or an overwrite counts
# towards approvals.deletions; a rename away and a write in place do not)
COUNTED = frozenset({"unlink", "rename-over", "truncate"})


def base() -> str:
    return keep.undo_base()


def read_json(dfd: int, name: str) -> dict[str, Any] | None:
    try:
        fd = os.open(name, READ_FLAGS, dir_fd=dfd)
    except OSError:
        return None
    try:
        raw = os.read(fd, 16 << 20)
    finally:
        os.close(fd)
    try:
        got = json.loads(raw)
    except ValueError:
        return None
    return got if isinstance(got, dict) else None


def write_json(dfd: int, name: str, data: dict[str, Any]) -> None:
    """Written beside and renamed over: never a half manifest."""
    tmp = name + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600, dir_fd=dfd)
    try:
        os.write(fd, json.dumps(data, indent=1).encode())
    finally:
        os.close(fd)
    os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)


_KINDS = ("file", "dir", "symlink", "fifo")


def _entry_ok(e: Any) -> bool:
    return (isinstance(e, dict) and isinstance(e.get("path"), str) and e["path"]
            and not e["path"].startswith("/") and ".." not in e["path"].split("/")
            and e.get("kind") in _KINDS and isinstance(e.get("mode"), int)
            and isinstance(e.get("mtime_ns"), int) and isinstance(e.get("atime_ns"), int))


def read_entries(dfd: int) -> list[dict[str, Any]]:
    """The run's entries, first change of each path only, well-formed only."""
    try:
        fd = os.open(ENTRIES, READ_FLAGS, dir_fd=dfd)
    except OSError:
        return []
    try:
        raw = b""
        while len(raw) < ENTRIES_CAP:
            b = os.read(fd, 1 << 20)
            if not b:
                break
            raw += b
    finally:
        os.close(fd)
    out: dict[str, dict[str, Any]] = {}
    for line in raw.splitlines():
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if isinstance(e, dict) and e.get("forget") and isinstance(e.get("path"), str):
            out.pop(e["path"], None)
        elif _entry_ok(e) and e["path"] not in out:
            out[e["path"]] = e
    return list(out.values())


def run_ids(bfd: int) -> list[str]:
    """The runs in the store, oldest first."""
    out = []
    for n in os.listdir(bfd):
        m = _RUN_ID.fullmatch(n)
        if m is not None and _run_time(m.group(1)) is not None:
            out.append(n)
    return sorted(out)


def open_run(run: str | None, where: str | None = None) -> tuple[int, str]:
    """(descriptor, id) of run RUN, or of the newest run (None); FileNotFoundError."""
    b = where or base()
    bfd = os.open(b, DIR_FLAGS)
    try:
        if os.fstat(bfd).st_uid != os.geteuid():
            raise PermissionError(f"{b} is not yours")
        ids = run_ids(bfd)
        if run is None:
            if not ids:
                raise FileNotFoundError(f"no run kept anything in {b}")
            run = ids[-1]
        elif run not in ids:
            raise FileNotFoundError(f"no run {run} in {b}")
        return os.open(run, DIR_FLAGS, dir_fd=bfd), run
    finally:
        os.close(bfd)


def summary(run: str, dfd: int) -> dict[str, Any]:
    """What `confine runs` shows of one run."""
    m = read_json(dfd, MANIFEST) or {}
    entries = read_entries(dfd)
    by: dict[str, int] = {}
    for e in entries:
        by[e.get("op", "?")] = by.get(e.get("op", "?"), 0) + 1
    return {"run": run, "workdir": m.get("workdir", "?"), "started": m.get("started"),
            "ended": m.get("ended"), "changed": by, "kept": sum(
                1 for e in entries if e.get("kind") != "file" or e.get("store")),
            "not_kept": m.get("not_kept", []),
            "deletions_refused": bool(m.get("denied")),
            "paths": [{"path": e["path"], "op": e.get("op"), "kind": e["kind"],
                       "kept": e.get("how") or ("meta" if e["kind"] != "file" else None)}
                      for e in entries]}
