"""Minted credentials waiting for their revoke: one record per value, written before
the agent starts and removed once `revoke:` succeeded, so a run that died (kill -9
of the supervisor, a power cut) leaves what the next start needs to revoke it.

What a record holds: the credential's name, the revoke command, the minted value
(revoke needs it on stdin: there is no revoking without it), its expiry if the
mint printed one, and the supervisor's pid, start time and boot id (a record
whose run is still going is left alone). That is a secret at rest, so:
- it lives in the launching person's own state directory
  (`paths.state_dir("credentials")`: /var/lib/confine/credentials for root,
  ~/.local/state/confine/credentials otherwise), made 0700 and checked to be
  theirs and closed to others before anything is written; each record is 0600,
  created exclusively, never followed through a link;
- the agent must not read it: for root with --user the agent is another uid; for
  a person confining themselves it is the same uid, so the run refuses to mint
  when a read or write grant of the profile covers this directory (session.py
  checks `exposed_by`) and Landlock keeps it out of reach otherwise;
- a record that is not the person's own file, or not 0600, is not run (someone
  else could have placed a command there): it is reported and left.

The same directory, and `create` / `open_record`, keep the redo records of a login's
in-place write (redo.py): one place and one set of checks for what a dead run left.
"""
from __future__ import annotations

import errno
import fcntl
import json
import os
import secrets
import stat
import time
from collections.abc import Callable, Iterable

from ..errors import ConfineError, printable
from ..kernel import sysfs
from ..paths import is_under, state_dir

Warn = Callable[[str], None]
SUFFIX = ".pending"


def directory() -> str:
    return state_dir("credentials")


def _private_dir(path: str, purpose: str = "pending revokes",
                 refusing: str = "refusing to mint credentials") -> str:
    """The directory, made if missing (0700), and refused unless it is ours and closed."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        st = os.lstat(path)
    except OSError as e:
        raise ConfineError(f"cannot make {path} for {purpose}: {e.strerror}") from None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
        raise ConfineError(f"{path} ({purpose}) is not a private directory of yours "
                           f"(it must be yours, mode 0700): {refusing}")
    return path


def exposed_by(grants: Iterable[tuple[str, str]], denied: Iterable[str] = ()) -> str | None:
    """The first grant (path, source) that covers the records' directory, if any
    (none where `denied`, paths carved out of every grant, covers it)."""
    d = os.path.realpath(directory())
    if any(is_under(d, p) for p in denied):
        return None
    for path, source in grants:
        if is_under(d, path):
            return f"{path} ({source})"
    return None


def _boot_id() -> str:
    return sysfs.read_text("/proc/sys/kernel/random/boot_id", strip=True) or ""


def write(name: str, revoke: tuple[str, ...], value: str, expires: str | None) -> str:
    """The record's path; written and synced before this returns."""
    d = _private_dir(directory())
    me = sysfs.proc_stat(os.getpid())
    rec = {"version": 1, "name": name, "revoke": list(revoke), "value": value,
           "expires": expires, "minted": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "pid": os.getpid(), "start": me.start if me else None, "boot": _boot_id()}
    path, fd = create(d, f"{os.getpid()}-{name}-{secrets.token_hex(4)}{SUFFIX}",
                      json.dumps(rec).encode())
    os.close(fd)
    return path


def create(d: str, name: str, data: bytes) -> tuple[str, int]:
    """A record NAME in the private directory D: created exclusively (0600, no link
    followed), locked, written, synced with its directory; (its path, the locked
    descriptor: the record's lock is held until the caller closes it)."""
    path = os.path.join(d, name)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600)
    try:
        # held while the record is in use, so `open_record` of another start leaves it
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, data)
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        remove(path)
        raise
    try:
        dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass
    return path, fd


def remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _alive(rec: dict[str, object]) -> bool:
    """Is the run that wrote the record still going?"""
    if rec.get("boot") != _boot_id():
        return False
    pid = rec.get("pid")
    if not isinstance(pid, int):
        return False
    st = sysfs.proc_stat(pid)
    return st is not None and st.state not in ("Z", "X") and st.start == rec.get("start")


def recover(revoke: Callable[[str, tuple[str, ...], str], None], warn: Warn,
            emit: Callable[[dict[str, object]], None]) -> None:
    """Revoke what runs that died left. `revoke(name, argv, value)` raises
    ConfineError when it fails (the record is then kept for the next start)."""
    d = directory()
    try:
        names = sorted(n for n in os.listdir(d) if n.endswith(SUFFIX))
    except OSError:
        return                                    # nothing was ever minted here
    for n in names:
        path = os.path.join(d, n)
        fd = open_record(path, warn, "pending revoke", "not run", emit,
                         {"event": "credential", "action": "revoke_refused", "record": path})
        if fd is None:
            continue
        try:
            _recover_one(fd, path, revoke, warn, emit)
        finally:
            os.close(fd)                          # releases the lock


def open_record(path: str, warn: Warn, what: str, refused: str,
                emit: Callable[[dict[str, object]], None], event: dict[str, object]
                ) -> int | None:
    """A record left in the directory, opened (no link followed) and locked, if it is
    a private file of ours that no other start is working on and none has finished
    (the caller closes it, which releases the lock); None otherwise. A record that is
    not ours is said (`what`, `refused`: how its refusal reads; `event` with its
    reason) and left: someone else could have placed it there."""
    def refuse(why: str) -> None:
        emit({**event, "reason": why})
        warn(f"{what} {printable(path)}{why}: {refused}, left (remove it once you have "
             "looked at it)")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as e:
        if e.errno != errno.ENOENT:
            refuse(f": cannot open ({e.strerror})")
        return None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
        os.close(fd)
        refuse(" is not a private file of yours")
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)   # another start (or its run) has it
    except OSError:
        os.close(fd)
        return None
    if os.fstat(fd).st_nlink == 0:
        os.close(fd)
        return None                               # that other start finished it
    return fd


def _recover_one(fd: int, path: str, revoke: Callable[[str, tuple[str, ...], str], None],
                 warn: Warn, emit: Callable[[dict[str, object]], None]) -> None:
    try:
        rec = json.loads(os.read(fd, 1 << 20))
        name, argv, value = rec["name"], tuple(rec["revoke"]), rec["value"]
        if not (isinstance(name, str) and isinstance(value, str) and argv
                and all(isinstance(a, str) for a in argv)):
            raise ValueError
    except (ValueError, KeyError, TypeError, OSError):
        warn(f"pending revoke {printable(path)}: not a record confine can read: left")
        return
    if _alive(rec):
        return
    minted = printable(str(rec.get("minted")))
    try:
        revoke(name, argv, value)
    except ConfineError as e:
        warn(f"credential {name} (minted {minted} by a run that ended without revoking it): "
             f"revoke failed again ({e}); kept for the next start")
        return
    remove(path)
    emit({"event": "credential", "action": "revoke", "name": name, "recovered": True,
          "minted": rec.get("minted"), "pid": rec.get("pid")})
    warn(f"credential {name}: revoked now; it was minted {minted} by a run (pid "
         f"{rec.get('pid')}) that ended without revoking it")
