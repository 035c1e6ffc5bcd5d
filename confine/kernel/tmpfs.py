"""A size-limited tmpfs on the run's private TMPDIR, in the host's mount namespace.

Threat: the private TMPDIR is a directory on the host's /tmp, so an agent can
fill that filesystem (often the root filesystem). Started as root, the
supervisor mounts a tmpfs of the profile's tmp_size there before the child is
forked and detaches it after every agent process is dead. It is mounted in
the host's namespace, not only in the child's, because the supervisor itself
resolves paths under TMPDIR (pathname unix sockets the agent connects to):
both must see the same files.

A supervisor killed with SIGKILL (the OOM killer, `kill -9`) cannot detach it,
and the mount would stay on the host for good, copied into every later run's
mount namespace. So each mount is recorded first in a root-only directory with
the supervisor's pid and start time, and a later mount detaches those whose
supervisor is gone (only a `confine-tmp` tmpfs still mounted at the recorded
path; the directory under it is removed only if empty).
"""
from __future__ import annotations

import ctypes
import json
import os
from hashlib import sha256

from .libc import libc, oserror
from .mounts import MS_NODEV, MS_NOSUID, mount, unescape
from .sysfs import proc_stat

__all__ = ["mount_tmp", "detach", "record", "forget", "sweep"]

STATE = "/run/confine/tmpfs"
SOURCE = "confine-tmp"

MNT_DETACH = 2
_umount2 = libc["umount2"]
_umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
_umount2.restype = ctypes.c_int


def mount_tmp(path: str, size: int, uid: int, gid: int) -> None:
    mount(SOURCE, path, "tmpfs", MS_NOSUID | MS_NODEV,
          f"size={size},mode=0700,uid={uid},gid={gid}", f"mount a {size}-byte tmpfs on {path}")


def detach(path: str) -> None:
    ctypes.set_errno(0)
    if _umount2(path.encode(), MNT_DETACH) != 0:
        raise oserror(f"tmpfs: detach {path}")


def _record_path(path: str, state: str) -> str:
    return os.path.join(state, sha256(path.encode()).hexdigest()[:32])


def record(path: str, state: str = STATE) -> None:
    """Note, before mounting, that this process owns the tmpfs at path."""
    os.makedirs(state, mode=0o700, exist_ok=True)
    st = os.lstat(state)
    if st.st_uid != os.geteuid() or st.st_mode & 0o077:
        raise OSError(f"{state} is not this user's private directory")
    me = proc_stat(os.getpid())
    data = json.dumps({"path": path, "pid": os.getpid(), "start": me.start if me else -1,
                       "pidns": _pidns()})
    tmp = _record_path(path, state) + ".new"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, data.encode())
    finally:
        os.close(fd)
    os.rename(tmp, _record_path(path, state))


def _pidns() -> str:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


def forget(path: str, state: str = STATE) -> None:
    try:
        os.unlink(_record_path(path, state))
    except FileNotFoundError:
        pass


def _ours_mounted(path: str) -> bool:
    """A tmpfs of ours is mounted at path in this mount namespace."""
    try:
        with open("/proc/self/mountinfo") as f:
            lines = f.read().splitlines()
    except OSError:
        return False
    for line in lines:
        left, _, right = line.partition(" - ")
        a, b = left.split(), right.split()
        if len(a) > 4 and len(b) > 1 and unescape(a[4]) == path and \
                b[0] == "tmpfs" and b[1] == SOURCE:
            return True
    return False


def sweep(state: str = STATE) -> list[str]:
    """Detach the tmpfs of every recorded run whose supervisor is gone; the
    paths detached. Anything unreadable or not ours is left as it is."""
    try:
        st = os.lstat(state)
        names = os.listdir(state)
    except OSError:
        return []
    if st.st_uid != os.geteuid() or st.st_mode & 0o077:
        return []
    gone = []
    for name in names:
        rec = os.path.join(state, name)
        try:
            with open(rec, "rb") as f:
                data = json.loads(f.read(4096))
            path, pid, start = data["path"], int(data["pid"]), int(data["start"])
            pidns = data["pidns"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if start < 0 or not pidns or pidns != _pidns():
            continue        # its supervisor cannot be judged from here: it may be alive
        if not isinstance(path, str) or not os.path.isabs(path) or \
                rec != _record_path(path, state):
            continue
        alive = proc_stat(pid)
        if alive is not None and alive.start == start:
            continue
        for _ in range(8):      # a mount stacked twice (a retried run) goes too
            if not _ours_mounted(path):
                break
            try:
                detach(path)
            except OSError:
                break
        if _ours_mounted(path):
            continue
        try:
            os.rmdir(path)
        except OSError:
            pass
        forget(path, state)
        gone.append(path)
    return gone
