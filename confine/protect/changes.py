"""What changed in the workdir while a run was on, as the kernel saw it (fanotify).

The exit check (revert.py) must find every name made in the workdir during the
run: by the agent through a mediated call, by a call that is not mediated (a
unix socket's bind), or by any other process (the person's editor, a second
run).  Without help it takes a stamp of every directory (index.py: one stat
each).  Where the supervisor runs as root, a fanotify group with a mark on the
workdir's whole filesystem (FAN_MARK_FILESYSTEM) is told by the kernel, for
every name created or moved in (FAN_CREATE, FAN_MOVED_TO, files and
directories alike), the directory it appeared in, by file handle.  The mark is
placed before the start's walk, so a name made at any moment after the walk
began is reported; at exit the handles become the workdir-relative paths of
those directories, and only they, and what the start's index says needs a look
every time, are listed again.

A workdir whose last index held fewer than WORTH_DIRS directories gets no mark:
its stamps cost less than the group's teardown. Nor does one with no stored index
and no directory in it at the start (snapshot.py): the stamp of its top lists every
directory made during the run, where a `tar x` made reports by the ten thousand.
Anything this cannot vouch for gives None from `changed` (the exit check then
takes a stamp of every directory as before): no mark (not root, a kernel or
filesystem without directory file handles, a btrfs subvolume), a queue that
overflowed, more directories than MAX_DIRS, an event not understood, a handle
that cannot be opened for another reason than the directory being gone, a
directory whose path cannot be confirmed from the workdir by descriptor, or a
mount point inside the workdir (a directory reached there is also reached by
another path the handle would name).
"""
from __future__ import annotations

import ctypes
import errno
import os
import struct
import weakref
from typing import Any

from ..kernel import mounts

__all__ = ["Changes", "open_changes", "MAX_DIRS", "WORTH_DIRS"]

MAX_DIRS = 100_000              # distinct directories reported before giving up
# Closing a group waits for the kernel to retire its mark (an SRCU grace period:
# 4-16 ms measured here, on every run, in the launcher's exit). A workdir whose last
# index held fewer directories than this takes every stamp at exit instead, which
# checks the same and costs less up to about 3,500 directories (measured: 3,000
# directories 143 ms with stamps vs 148 with reports, 6,000: 181 vs 160).
WORTH_DIRS = 3_000
_RESTART_READS = 256            # 16 MiB of reports read at most to empty a kept queue

_FAN_CLOEXEC, _FAN_NONBLOCK = 0x1, 0x2
_FAN_REPORT_DFID_NAME = 0x400 | 0x800          # FAN_REPORT_DIR_FID | FAN_REPORT_NAME
_FAN_MARK_ADD, _FAN_MARK_FILESYSTEM = 0x1, 0x100
_FAN_MOVED_TO, _FAN_CREATE, _FAN_Q_OVERFLOW, _FAN_ONDIR = 0x80, 0x100, 0x4000, 0x40000000
_INFO_DFID_NAME, _INFO_DFID = 2, 3
_METADATA_VERSION = 3
_META = struct.Struct("<IBBHQii")               # struct fanotify_event_metadata
_INFO = struct.Struct("<BBH")                   # struct fanotify_event_info_header
_HANDLE = struct.Struct("<Ii")                  # struct file_handle without f_handle
_O_PATH = getattr(os, "O_PATH", 0o10000000)

_libc = ctypes.CDLL(None, use_errno=True)


def _fn(name: str, res: type, *args: type) -> Any:
    f = getattr(_libc, name, None)
    if f is not None:
        f.restype, f.argtypes = res, list(args)
    return f


_init = _fn("fanotify_init", ctypes.c_int, ctypes.c_uint, ctypes.c_uint)
_mark = _fn("fanotify_mark", ctypes.c_int, ctypes.c_int, ctypes.c_uint, ctypes.c_uint64,
            ctypes.c_int, ctypes.c_char_p)
_by_handle = _fn("open_by_handle_at", ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int)


class Changes:
    """One fanotify group marked on the workdir's filesystem.  `changed`
    collects what the kernel queued so far (cumulative: callable more than
    once); the descriptor closes with the object."""

    def __init__(self, fd: int, dev: int = -1):
        self.fd = fd
        self.dev = dev                     # st_dev of the filesystem marked
        self.handles: set[bytes] = set()   # packed struct file_handle of each directory
        self.lost = ""                     # why the reports are not complete ("": they are)
        self._close = weakref.finalize(self, os.close, fd)

    def close(self) -> None:
        self._close()

    def restart(self, wfd: int) -> bool:
        """Make this group serve a new run whose workdir is `wfd` (a Sandbox keeps
        one between runs, so that each run does not pay the teardown): everything
        queued so far is read and forgotten, so that what is reported from here on
        is what happened after this call, as for a new group. False (the caller
        makes a new one): closed, another filesystem, or the queue could not be
        emptied."""
        if not self._close.alive or os.fstat(wfd).st_dev != self.dev:
            return False
        for _ in range(_RESTART_READS):
            try:
                if not os.read(self.fd, 1 << 16):
                    break
            except BlockingIOError:
                self.handles, self.lost = set(), ""
                return True
            except OSError:
                return False
        return False

    def _drain(self) -> None:
        while not self.lost:
            try:
                buf = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                return
            except OSError as e:
                self.lost = f"reading the reports failed ({os.strerror(e.errno or 0)})"
                return
            if not buf:
                return
            self._parse(buf)

    def _parse(self, buf: bytes) -> None:
        off = 0
        while off + _META.size <= len(buf):
            ln, vers, _, mlen, mask, _, _ = _META.unpack_from(buf, off)
            if vers != _METADATA_VERSION or ln < mlen or off + ln > len(buf):
                self.lost = "a report not understood"
                return
            if mask & _FAN_Q_OVERFLOW:
                self.lost = "the kernel's queue overflowed"
                return
            got, i, end = False, off + mlen, off + ln
            while i + _INFO.size <= end:
                kind, _, ilen = _INFO.unpack_from(buf, i)
                if ilen < _INFO.size + 8 + _HANDLE.size or i + ilen > end:
                    break
                if kind in (_INFO_DFID_NAME, _INFO_DFID):
                    h = i + _INFO.size + 8                      # past the fsid
                    nbytes, _ = _HANDLE.unpack_from(buf, h)
                    if h + _HANDLE.size + nbytes > i + ilen:
                        break
                    self.handles.add(buf[h:h + _HANDLE.size + nbytes])
                    got = True
                i += ilen
            if not got:
                self.lost = "a report without its directory"
                return
            if len(self.handles) > MAX_DIRS:
                self.lost = f"more than {MAX_DIRS} directories changed"
                return
            off += ln

    def changed(self, wfd: int, workdir: str) -> tuple[set[str] | None, str]:
        """(the workdir-relative paths of the directories where a name appeared
        since the mark, or None, and why not).  `wfd`: the workdir's descriptor."""
        self._drain()
        if self.lost:
            return None, self.lost
        why = _mounts_below(workdir)
        if why:
            return None, why
        wst = os.fstat(wfd)
        top = workdir.rstrip("/") + "/"
        out: set[str] = set()
        for h in self.handles:
            fd = _by_handle(wfd, h, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | _O_PATH)
            if fd < 0:
                e = ctypes.get_errno()
                if e in (errno.ESTALE, errno.ENOENT):
                    continue            # the directory is gone, and all it held
                return None, f"a reported directory cannot be opened ({os.strerror(e)})"
            try:
                st = os.fstat(fd)
                path = os.readlink(f"/proc/self/fd/{fd}")
            finally:
                os.close(fd)
            if (st.st_dev, st.st_ino) == (wst.st_dev, wst.st_ino):
                out.add("")
                continue
            if not path.startswith(top):
                if st.st_dev == wst.st_dev and path.startswith("/") and " (deleted)" not in path:
                    continue            # elsewhere on the filesystem, not below the workdir
                return None, f"a reported directory cannot be placed ({path!r})"
            rel = path[len(top):]
            if _ident_at(wfd, rel) != (st.st_dev, st.st_ino):
                return None, f"a reported directory is not where its path says ({rel!r})"
            out.add(rel)
        return out, ""


def _ident_at(wfd: int, rel: str) -> tuple[int, int] | None:
    """(dev, ino) of the directory rel below wfd, reached without following a symlink."""
    cur = os.dup(wfd)
    try:
        for c in rel.split("/"):
            try:
                nxt = os.open(c, _O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                              dir_fd=cur)
            except OSError:
                return None
            os.close(cur)
            cur = nxt
        st = os.fstat(cur)
        return st.st_dev, st.st_ino
    finally:
        os.close(cur)


def _mounts_below(workdir: str) -> str:
    top = workdir.rstrip("/") + "/"
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
            for ln in f:
                parts = ln.split()
                if len(parts) > 4 and mounts.unescape(parts[4]).startswith(top):
                    return f"a mount point inside the workdir ({mounts.unescape(parts[4])})"
    except OSError as e:
        return f"cannot read the mount table ({e.strerror})"
    return ""


def open_changes(wfd: int) -> tuple[Changes | None, str]:
    """A group marked on the filesystem of the directory `wfd`, or None and why not."""
    if _init is None or _mark is None or _by_handle is None:
        return None, "no fanotify in this C library"
    if os.geteuid() != 0:
        return None, "not root (a filesystem mark needs CAP_SYS_ADMIN)"
    fd = _init(_FAN_CLOEXEC | _FAN_NONBLOCK | _FAN_REPORT_DFID_NAME,
               os.O_RDONLY | os.O_CLOEXEC)
    if fd < 0:
        return None, f"fanotify_init: {os.strerror(ctypes.get_errno())}"
    if _mark(fd, _FAN_MARK_ADD | _FAN_MARK_FILESYSTEM,
             _FAN_CREATE | _FAN_MOVED_TO | _FAN_ONDIR, wfd, None) < 0:
        e = ctypes.get_errno()
        os.close(fd)
        return None, f"fanotify_mark: {os.strerror(e)}"
    return Changes(fd, os.fstat(wfd).st_dev), ""
