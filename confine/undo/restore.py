"""Putting kept files back (`confine undo`, and a refused deletion's put-back).

Job: every kept path (store.py entries, filtered by PATH and by op) goes back
to where it was, byte for byte, with its mode, times and (as root) owner; the
directories it needs are made, and those the run recorded get their mode and
times back last, deepest first. A path that holds what was kept already is
left alone; one changed after the run ended (its mtime later than the run's
end) is never overwritten without `force`, and is named as skipped.

Threat: the workdir is the agent's (and root may be the one restoring): every
directory is walked from the workdir by descriptor, one component at a time,
never through a symlink; a file is made under a fresh temporary name with
O_EXCL|O_NOFOLLOW, finished (owner, mode, times) on its descriptor, and only
then renamed into place, so no half-written file is ever seen and nothing
the agent swapped in is written through.
"""
from __future__ import annotations

import os
import stat
from collections.abc import Collection, Sequence
from typing import Any

from ..record import dataclass, field
from . import store

_CHUNK = 1 << 20


@dataclass
class Outcome:
    restored: int = 0
    unchanged: int = 0
    skipped: list[str] = field(default_factory=list)
    # (st_dev, st_ino) of what was put back: during the run these count as files of
    # the start (a refused deletion's put-back must not make them the run's own)
    made: list[tuple[int, int]] = field(default_factory=list)


def wanted(path: str, paths: Sequence[str]) -> bool:
    return not paths or any(p in ("", ".") or path == p or path.startswith(p.rstrip("/") + "/")
                            for p in paths)


def _walk(wfd: int, comps: list[str], create: bool) -> int:
    cur = os.dup(wfd)
    try:
        for c in comps:
            name = os.fsencode(c)
            made = False
            if create:
                try:
                    os.mkdir(name, 0o700, dir_fd=cur)
                    made = True
                except FileExistsError:
                    pass
            nxt = os.open(name, store.DIR_FLAGS, dir_fd=cur)
            if made:
                # a recorded directory gets its own owner, mode and times at the
                # end; one that was not (the run did not see it go) its parent's owner
                os.fchmod(nxt, 0o755)
                if os.geteuid() == 0:
                    up = os.fstat(cur)
                    os.fchown(nxt, up.st_uid, up.st_gid)
            os.close(cur)
            cur = nxt
        return cur
    except BaseException:
        os.close(cur)
        raise


def _same_bytes(a: int, b: int) -> bool:
    while True:
        x, y = os.read(a, _CHUNK), os.read(b, _CHUNK)
        if x != y:
            return False
        if not x:
            return True


def _unchanged(pfd: int, name: bytes, cur: os.stat_result, e: dict[str, Any], ffd: int) -> bool:
    """The path holds exactly what was kept: content, mode and mtime."""
    if stat.S_IMODE(cur.st_mode) != e["mode"] or cur.st_mtime_ns != e["mtime_ns"]:
        return False
    if e["kind"] == "symlink":
        return stat.S_ISLNK(cur.st_mode) and os.fsdecode(os.readlink(name, dir_fd=pfd)) == e.get(
            "target")
    if e["kind"] == "fifo":
        return stat.S_ISFIFO(cur.st_mode)
    if not stat.S_ISREG(cur.st_mode) or cur.st_size != e.get("size") or not e.get("store"):
        return False
    try:
        a = os.open(name, store.READ_FLAGS, dir_fd=pfd)
    except OSError:
        return False
    try:
        b = os.open(e["store"], store.READ_FLAGS, dir_fd=ffd)
    except OSError:
        os.close(a)
        return False
    try:
        return _same_bytes(a, b)
    finally:
        os.close(a)
        os.close(b)


def _finish(fd: int | None, pfd: int, tmp: bytes, e: dict[str, Any], root: bool) -> None:
    """Owner (as root), mode, then times: chown clears set-id bits, and every
    change but utime moves ctime only."""
    uid, gid = int(e.get("uid", -1)), int(e.get("gid", -1))
    times = (e["atime_ns"], e["mtime_ns"])
    if fd is not None:
        if root:
            os.fchown(fd, uid, gid)
        os.fchmod(fd, e["mode"])
        os.utime(fd, ns=times)
        return
    if root:
        os.chown(tmp, uid, gid, dir_fd=pfd, follow_symlinks=False)
    if e["kind"] != "symlink":
        os.chmod(tmp, e["mode"], dir_fd=pfd)
    os.utime(tmp, ns=times, dir_fd=pfd, follow_symlinks=False)


def _make(pfd: int, tmp: bytes, e: dict[str, Any], ffd: int, root: bool) -> None:
    if e["kind"] == "file":
        src = os.open(e["store"], store.READ_FLAGS, dir_fd=ffd)
        try:
            out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                          | os.O_CLOEXEC, 0o600, dir_fd=pfd)
            try:
                while os.sendfile(out, src, None, _CHUNK):
                    pass
                _finish(out, pfd, tmp, e, root)
            finally:
                os.close(out)
        finally:
            os.close(src)
    elif e["kind"] == "symlink":
        os.symlink(os.fsencode(e.get("target", "")), tmp, dir_fd=pfd)
        _finish(None, pfd, tmp, e, root)
    else:
        os.mkfifo(tmp, 0o600, dir_fd=pfd)
        _finish(None, pfd, tmp, e, root)


def _put(pfd: int, e: dict[str, Any], ffd: int, ended_ns: int, force: bool, root: bool,
         out: Outcome) -> None:
    name = os.fsencode(e["path"].rsplit("/", 1)[-1])
    shown = e["path"]
    try:
        cur: os.stat_result | None = os.lstat(name, dir_fd=pfd)
    except FileNotFoundError:
        cur = None
    if cur is not None:
        if _unchanged(pfd, name, cur, e, ffd):
            out.unchanged += 1
            return
        if stat.S_ISDIR(cur.st_mode):
            out.skipped.append(f"{shown}: a directory is there now")
            return
        if cur.st_mtime_ns > ended_ns and not force:
            out.skipped.append(f"{shown}: changed after the run (--force puts it back over it)")
            return
    if e["kind"] == "file" and not e.get("store"):
        out.skipped.append(f"{shown}: not kept")
        return
    tmp = b".confine-undo-" + os.urandom(6).hex().encode()
    try:
        _make(pfd, tmp, e, ffd, root)
        os.rename(tmp, name, src_dir_fd=pfd, dst_dir_fd=pfd)
        st = os.lstat(name, dir_fd=pfd)
        out.made.append((st.st_dev, st.st_ino))
    except OSError as err:
        try:
            os.unlink(tmp, dir_fd=pfd)
        except OSError:
            pass
        out.skipped.append(f"{shown}: {err.strerror or err}")
        return
    out.restored += 1


def restore(dfd: int, entries: list[dict[str, Any]], workdir: str, *, ended_ns: int,
            paths: Sequence[str] = (), ops: Collection[str] | None = None,
            force: bool = False) -> Outcome:
    """Put the chosen entries back into `workdir` (the run's store dfd)."""
    out = Outcome()
    root = os.geteuid() == 0
    chosen = [e for e in entries if wanted(e["path"], paths)
              and (ops is None or e["op"] in ops or e["kind"] == "dir")]
    dirs = sorted((e for e in chosen if e["kind"] == "dir"), key=lambda e: e["path"].count("/"))
    ffd = os.open(store.FILES, store.DIR_FLAGS, dir_fd=dfd)
    try:
        wfd = os.open(workdir, store.DIR_FLAGS)
    except OSError as err:
        os.close(ffd)
        out.skipped.append(f"{workdir}: {err.strerror or err}")
        return out
    made: set[str] = set()
    try:
        for e in dirs:
            comps = e["path"].split("/")
            try:
                if not _exists(wfd, comps):
                    os.close(_walk(wfd, comps, create=True))
                    made.add(e["path"])
            except OSError as err:
                out.skipped.append(f"{e['path']}/: {err.strerror or err}")
        for e in chosen:
            if e["kind"] == "dir":
                continue
            comps = e["path"].split("/")
            try:
                pfd = _walk(wfd, comps[:-1], create=True)
            except OSError as err:
                out.skipped.append(f"{e['path']}: {err.strerror or err} (its directory)")
                continue
            try:
                n = out.restored
                _put(pfd, e, ffd, ended_ns, force, root, out)
                if out.restored > n:
                    made.add(e["path"].rpartition("/")[0])     # its mtime is ours now
            finally:
                os.close(pfd)
        for e in reversed(dirs):
            try:
                fd = _walk(wfd, e["path"].split("/"), create=False)
            except OSError:
                continue
            try:
                if e["op"] != "parent" or e["path"] in made or os.fstat(fd).st_mtime_ns <= ended_ns \
                        or force:
                    _finish(fd, fd, b"", e, root)
            except OSError as err:
                out.skipped.append(f"{e['path']}/: {err.strerror or err} (mode or times)")
            finally:
                os.close(fd)
    finally:
        os.close(wfd)
        os.close(ffd)
    return out


def _exists(wfd: int, comps: list[str]) -> bool:
    try:
        os.close(_walk(wfd, comps, create=False))
        return True
    except OSError:
        return False
