"""The write-back of `filesystem.copied:` files (policy/copied.py): the agent's copy
judged at exit and put at the real path, with what runs later kept as it was.

Threat: the copy is the agent's. It may hold new `mcpServers` (commands the
person's next Claude Code run starts outside confine), duplicate keys that two
parsers read differently, a value that is not JSON, a huge file, or be a symlink
or FIFO; the real file may have been changed by the person's own Claude Code
while the agent ran. So: only a regular file within SIZE_CAP is read; only JSON
without duplicate keys or NaN is written back; every protected key path is set
back to its start value (an alert names it); a real file that changed since the
start is never replaced (the agent's version is kept aside for the person); the
write is a temporary file beside the real one renamed over it (or linked, where
there was none: never clobbering one that appeared meanwhile), with the start
file's mode. Everything here runs with the agent's file-system identity (the
caller arranges it): the real file is the agent account's, and no write here can
reach what that account could not.
"""
from __future__ import annotations

import base64
import errno
import json
import os
import stat
from collections.abc import Iterator, Sequence
from hashlib import sha256
from typing import Any

__all__ = ["SIZE_CAP", "read_regular", "read_real", "judge", "write_back", "Unrestorable"]

SIZE_CAP = 64 << 20      # bytes: ~/.claude.json grows with projects, never near this
_MISSING = object()
_OPEN = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class Unrestorable(ValueError):
    """A protected key cannot be put back (a parent is no longer an object)."""


def read_regular(path: str, dir_fd: int | None = None) -> tuple[bytes | None, str | None,
                                                                   os.stat_result | None]:
    """(bytes, None, stat) of a regular file within SIZE_CAP; (None, None, None) when
    missing; (None, why, stat or None) when it is something else or too big."""
    try:
        fd = os.open(path, _OPEN, dir_fd=dir_fd)
    except FileNotFoundError:
        return None, None, None
    except OSError as e:
        if e.errno == errno.ELOOP:
            return None, "a symbolic link", None
        return None, e.strerror or str(e), None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None, "not a regular file", st
        if st.st_size > SIZE_CAP:
            return None, f"larger than {SIZE_CAP >> 20} MiB", st
        data = b""
        while len(data) <= SIZE_CAP and (chunk := os.read(fd, 1 << 20)):
            data += chunk
        if len(data) > SIZE_CAP:
            return None, f"larger than {SIZE_CAP >> 20} MiB", st
        return data, None, st
    finally:
        os.close(fd)


def fingerprint(data: bytes | None, st: os.stat_result | None) -> list[Any] | None:
    """What says "the real file did not change": content hash and inode facts."""
    if data is None or st is None:
        return None
    return [sha256(data).hexdigest(), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns]


def read_real(path: str) -> dict[str, Any]:
    """The real file at the start, as a JSON-safe record (the agent-side helper
    sends it through a pipe): data (base64), fingerprint, mode, uid; or why not."""
    data, why, st = read_regular(path)
    if why is not None:
        return {"path": path, "error": why}
    return {"path": path, "data": None if data is None else base64.b64encode(data).decode(),
            "fp": fingerprint(data, st), "mode": None if st is None else stat.S_IMODE(st.st_mode),
            "uid": None if st is None else st.st_uid}


def _strict(text: bytes) -> Any:
    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k, v in items:
            if k in out:
                # two parsers may keep different ones: the one checked must be the one read
                raise ValueError(f"duplicate key {k!r}")
            out[k] = v
        return out

    def constant(c: str) -> Any:
        raise ValueError(f"{c} is not JSON")
    return json.loads(text.decode("utf-8"), object_pairs_hook=pairs, parse_constant=constant)


def _paths(doc: Any, parts: Sequence[str], prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    if not parts:
        yield prefix
        return
    if not isinstance(doc, dict):
        return
    head, rest = parts[0], parts[1:]
    for k in (list(doc) if head == "*" else [head] if head in doc else []):
        yield from _paths(doc[k], rest, prefix + (k,))


def _get(doc: Any, path: tuple[str, ...]) -> Any:
    for k in path:
        if not isinstance(doc, dict) or k not in doc:
            return _MISSING
        doc = doc[k]
    return doc


def _empty(v: Any) -> bool:
    return v is _MISSING or v is None or v is False or v in ({}, [], "")


def _same(a: Any, b: Any) -> bool:
    if _empty(a) or _empty(b):
        # an agent's CLI writes every key of a new project with its default (no
        # servers, no tools, not trusted): the same as no key, nothing that runs later
        return _empty(a) and _empty(b)
    # json's own spelling: True == 1 in Python, not in the file
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def restore_keys(start: Any, new: Any, keys: Sequence[str]) -> list[str]:
    """Set each protected key path of `new` (changed in place) back to its value in
    `start`, dropping it where start had none; returns the paths that differed."""
    changed: list[str] = []
    for key in keys:
        parts = key.split(".")
        found = dict.fromkeys(list(_paths(start, parts)) + list(_paths(new, parts)))
        for path in sorted(found, key=len):
            was, now = _get(start, path), _get(new, path)
            if _same(was, now):
                continue
            changed.append(".".join(path))
            node = new
            for k in path[:-1]:
                if not isinstance(node, dict):
                    raise Unrestorable(".".join(path))
                if k not in node:
                    if was is _MISSING:
                        break
                    node[k] = {}
                node = node[k]
            else:
                if not isinstance(node, dict):
                    raise Unrestorable(".".join(path))
                if was is _MISSING:
                    node.pop(path[-1], None)
                else:
                    node[path[-1]] = json.loads(json.dumps(was))
    return changed


def judge(start: dict[str, Any], copy: bytes, keys: Sequence[str]) -> tuple[bytes | None, str, list[str]]:
    """(bytes to write back or None, why not / what was done, reverted key paths)."""
    try:
        doc = _strict(copy)
    except (ValueError, UnicodeDecodeError) as e:
        return None, f"not valid JSON ({e})", []
    start_doc: Any = {}
    if start.get("data"):
        try:
            start_doc = _strict(base64.b64decode(start["data"]))
        except (ValueError, UnicodeDecodeError):
            start_doc = {}    # the person's file was no JSON: no key of it to keep
    try:
        reverted = restore_keys(start_doc, doc, keys)
    except Unrestorable as e:
        return None, f"{e} cannot be put back to its start value (a parent is no longer " \
            "an object)", []
    if not reverted:
        return copy, "", []
    return json.dumps(doc, indent=2, ensure_ascii=False).encode(), "", reverted


def write_back(real: str, data: bytes, start: dict[str, Any], uid: int) -> str | None:
    """Put `data` at `real` atomically if the real file is still what it was at the
    start; None when written, else why not (the caller keeps the data aside)."""
    now_data, why, st = read_regular(real)
    if why is not None:
        return f"the real file is now {why}"
    if fingerprint(now_data, st) != start.get("fp"):
        return "the real file changed during the run (outside the sandbox)"
    if start.get("uid") is not None and start["uid"] != uid:
        return f"the real file is owned by uid {start['uid']}, not the agent's account ({uid})"
    parent, base = os.path.split(real)
    dfd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    tmp = f".{base}.confine-{os.getpid()}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600, dir_fd=dfd)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                os.fchmod(f.fileno(), start.get("mode") or 0o600)
                f.flush()
                os.fsync(f.fileno())
            if start.get("fp") is None:
                try:
                    # no file at the start: one that appeared meanwhile is never replaced
                    os.link(tmp, base, src_dir_fd=dfd, dst_dir_fd=dfd, follow_symlinks=False)
                except FileExistsError:
                    return "the real file appeared during the run (outside the sandbox)"
            else:
                os.rename(tmp, base, src_dir_fd=dfd, dst_dir_fd=dfd)
            os.fsync(dfd)
            return None
        finally:
            try:
                os.unlink(tmp, dir_fd=dfd)
            except FileNotFoundError:
                pass
    except OSError as e:
        return f"cannot write it: {e.strerror or e}"
    finally:
        os.close(dfd)
