"""The redo log of a login file's in-place write (logins.py `Refresher._store`): the
complete new text is kept in a record of confine's own before the real file is
overwritten, and a record left by a run that died is applied at the next start of a
run that binds that login.

Why: the real file is rewritten in place (a rename would end the bind of the agent's
copy over it), the new text over the old, then cut to its length. A supervisor killed
(kill -9, a power cut) between the two leaves the new text followed by the old tail:
not JSON. With refresh-token rotation the old refresh token is already spent at the
server by then, so the new values are the only ones that work: losing them means the
person signs in again.

The threats:
- the record holds the real tokens: it lives with the pending-revoke records
  (pending.py: the launching person's private state directory, out of the agent's
  reach), 0600, created exclusively, never through a link;
- a record someone else placed would choose the tokens the person's login carries:
  one that is not a private file of ours, not a record confine can read, or that
  names another file, is refused and left (never applied); the login file it would
  write must pass the checks of the in-place write (a regular file of the expected
  owner, one link, no link followed);
- a record older than the file (the person signed in again since): applied only
  where the file is still what the run read before its write, or is no longer JSON
  (the write was cut); a file already equal to the record only loses the record.
"""
from __future__ import annotations

import hashlib
import json
import os
import stat
import time
from collections.abc import Callable, Iterable
from typing import Any

from ..errors import ConfineError, printable
from . import pending

SUFFIX = ".login-redo"
Warn = Callable[[str], None]
Emit = Callable[[dict[str, object]], None]
MAX_RECORD = 1 << 20


def _prefix(file: str) -> str:
    # the file's path as a name of one component: its records are found without
    # reading the others
    return "login-" + hashlib.sha256(file.encode("utf-8", "surrogateescape")).hexdigest()[:32]


def open_login(path: str, owners: tuple[int, ...], error: type[Exception]) -> int:
    """The login file opened for writing in place: below its directory's descriptor,
    no link followed, a regular file of one of `owners` with one link (else `error`)."""
    d, name = os.path.split(path)
    try:
        dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            fd = os.open(name, os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                         dir_fd=dfd)
        finally:
            os.close(dfd)
    except OSError as e:
        raise error(f"{printable(path)}: {e.strerror}") from None
    st = os.fstat(fd)
    if st.st_uid not in owners or not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
        os.close(fd)
        raise error(f"{printable(path)} is no longer the login's file (owner, type, links)")
    return fd


def write_in_place(fd: int, data: bytes) -> None:
    # the new text over the old, then cut to its length: a reader between the two
    # sees a longer file, never an empty one
    os.pwrite(fd, data, 0)
    os.ftruncate(fd, len(data))
    os.fsync(fd)


def private_dir() -> str:
    """The records' directory (pending.py's), made and checked: ConfineError if it is
    not a private directory of the person's."""
    return pending._private_dir(pending.directory(), "login recovery records",
                                "refusing to bind a login that refreshes")


def check(login: str, grants: Iterable[tuple[str, str]], denied: Iterable[str]) -> None:
    """Before a run whose refresh may write a record: the directory is private and out
    of the agent's reach (a grant of the profile covering it would show the agent the
    real tokens a record holds): ConfineError otherwise."""
    private_dir()
    why = pending.exposed_by(grants, denied)
    if why is not None:
        raise ConfineError(f"login {login}: a refresh keeps the new tokens in "
                           f"{pending.directory()} until they are written, readable by the "
                           f"agent through {why}: refusing (narrow that grant)")


class Record:
    """One in-place write's redo record, written and synced before the write; `done`
    once the write is synced. Its lock is held until then, so a start that looks
    meanwhile leaves it to this run."""

    def __init__(self, login: str, file: str, text: bytes, before: bytes) -> None:
        d = private_dir()
        rec = {"version": 1, "login": login, "file": file, "text": text.decode("utf-8"),
               "before": hashlib.sha256(before).hexdigest(), "pid": os.getpid(),
               "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        # the time first: the newest of several records of one file is found first
        self.path, self.fd = pending.create(
            d, f"{_prefix(file)}-{time.time_ns():020d}-{os.getpid()}{SUFFIX}",
            json.dumps(rec).encode())

    def done(self) -> None:
        pending.remove(self.path)
        self.close()

    def close(self) -> None:
        """The lock released; the record stays unless `done` removed it (a write that
        failed is redone at the next start)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def recover(login: str, file: str, owners: tuple[int, ...], warn: Warn, emit: Emit) -> None:
    """Apply what runs that died left for `file` (before it is read for this run): the
    newest record of ours that applies; older ones of ours it supersedes are removed."""
    d = pending.directory()
    pre = _prefix(file)
    try:
        names = sorted((n for n in os.listdir(d) if n.startswith(pre) and n.endswith(SUFFIX)),
                       reverse=True)
    except OSError:
        return                                    # no run ever wrote a record here
    done = False
    for n in names:
        path = os.path.join(d, n)
        fd = pending.open_record(path, warn, f"login {login}: recovery record", "not applied",
                                 emit, {"event": "login", "action": "recovery_refused",
                                        "name": login, "file": file, "record": path})
        if fd is None:
            continue
        try:
            done = _apply(fd, path, login, file, owners, warn, emit, superseded=done) or done
        finally:
            os.close(fd)


class _Refused(Exception):
    pass


def _apply(fd: int, path: str, login: str, file: str, owners: tuple[int, ...], warn: Warn,
           emit: Emit, superseded: bool) -> bool:
    """Did the file get (or already have) the record's text? `superseded`: a newer
    record was applied, so this one (once known to be ours) is only removed."""
    where = f"login {login}: recovery record {printable(path)}"
    ev: dict[str, object] = {"event": "login", "name": login, "file": file, "record": path}
    try:
        rec = _read(fd, where, file)
        if superseded:
            pending.remove(path)
            emit({**ev, "action": "superseded", "written": rec.get("written")})
            return False
        wrote = _redo(file, owners, rec["text"].encode("utf-8"), rec["before"], where)
    except _Refused as e:
        emit({**ev, "action": "recovery_refused", "reason": str(e)})
        warn(f"{e}: not applied, left")
        return False
    pending.remove(path)
    emit({**ev, "action": "recovered", "applied": wrote, "pid": rec.get("pid"),
          "written": rec.get("written")})
    if wrote:
        warn(f"login {login}: {printable(file)} restored from the tokens a refresh got at "
             f"{printable(str(rec.get('written')))} (run pid {rec.get('pid')}, which ended "
             "before it finished writing them)")
    return True


def _read(fd: int, where: str, file: str) -> dict[str, Any]:
    """The record, if confine wrote it for this file (else _Refused)."""
    try:
        rec = json.loads(os.read(fd, MAX_RECORD + 1))
        if not (isinstance(rec, dict) and rec.get("version") == 1
                and isinstance(rec.get("text"), str) and isinstance(rec.get("before"), str)
                and isinstance(json.loads(rec["text"]), dict)):
            raise ValueError
    except (ValueError, OSError):
        raise _Refused(f"{where}: not a record confine can read") from None
    if rec.get("file") != file:
        raise _Refused(f"{where}: names another file ({printable(str(rec.get('file')))})")
    return rec


def _redo(file: str, owners: tuple[int, ...], new: bytes, before: str, where: str) -> bool:
    """The login file given `new` in place, where it is still what the dead run read
    (`before`, its digest) or no longer JSON; False if it already was `new`."""
    try:
        fd = open_login(file, owners, _Refused)
    except _Refused as e:
        raise _Refused(f"{where}: the login file {e}") from None
    try:
        now = os.read(fd, MAX_RECORD + 1)
        if now == new:
            return False
        try:
            json.loads(now)
        except ValueError:
            pass                                  # the write was cut: the record's to mend
        else:
            if hashlib.sha256(now).hexdigest() != before:
                raise _Refused(f"{where}: {printable(file)} changed since that run read it "
                               "(signed in again?); remove the record if the login works")
        write_in_place(fd, new)
        return True
    except OSError as e:
        raise _Refused(f"{where}: cannot rewrite {printable(file)} ({e.strerror})") from None
    finally:
        os.close(fd)
