"""Where the records and the record key live: the person's state, never the agent's.

    records  state_dir("runs")/RUN.jsonl    (0700 directory, 0600 files)
    key      state_dir("keys")/record.key   (0700 directory, 0600, 32 random bytes)

As root: /var/lib/confine/runs and /var/lib/confine/keys (root's runs, whatever
--user the agent runs as); otherwise under $XDG_STATE_HOME (~/.local/state)/confine.
Where that cannot be made (HOME=/nonexistent), `fallback_base()`: the runtime
directory, else /tmp/confine-state-UID (each checked to be ours).
RUN is the run id of the snapshot and the held files (protect/snapshot.py).

Threat: the agent runs as another account (root's runs with --user) or as the
person's own uid under Landlock, which grants it neither directory (its own HOME
is state_dir's sibling homes/NAME, the workdir and TMPDIR lie elsewhere). A
directory or key another account owns, or a key others may read, is refused
(fail closed: a key someone else can read signs nothing). Names are opened
without following a symlink.

Bounds across runs: `bound()` drops the oldest records past protect/keep.py's
KEEP_BYTES / KEEP_DAYS (the same knobs and overrides as the held files and the
quarantine), called by the session at the end of every run.
"""
from __future__ import annotations

import errno
import os
import re
import stat
import time
from collections.abc import Callable, Iterable

from ..errors import ConfineError
from ..paths import is_under, state_dir

SUFFIX = ".jsonl"
KEY_NAME = "record.key"
KEY_BYTES = 32
RUN = re.compile(r"\d{8}-\d{6}-\d+(\.[A-Za-z0-9_-]+)?")
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def state_base() -> str:
    """Where records and keys live: the parent of runs/ and keys/."""
    return os.path.dirname(state_dir("runs"))


def fallback_base() -> str:
    """Where they live when the state directory cannot be made (HOME=/nonexistent,
    a read-only HOME, as on CI systems): $XDG_RUNTIME_DIR/confine (the account's
    own 0700 tmpfs), else /tmp/confine-state-UID; a directory there that another account
    made is refused, never used."""
    rt = os.environ.get("XDG_RUNTIME_DIR")
    if rt and os.path.isabs(rt) and os.path.isdir(rt):
        return os.path.join(rt, "confine")
    return f"/tmp/confine-state-{os.geteuid()}"


def bases() -> list[str]:
    return list(dict.fromkeys((state_base(), fallback_base())))


def records_dir(base: str | None = None) -> str:
    return os.path.join(base or state_base(), "runs")


def key_path(base: str | None = None) -> str:
    return os.path.join(base or state_base(), "keys", KEY_NAME)


def base_of(path: str) -> str | None:
    """The base a record in the store lies in (None: a file elsewhere)."""
    d = os.path.dirname(os.path.abspath(path))
    for b in bases():
        if d == records_dir(b):
            return b
    return None


def writable_base() -> tuple[str, str]:
    """(base, note): the state directory's, or the fallback's with why."""
    why = ""
    for b in bases():
        try:
            # the base too: whoever owns it could move our directories away
            os.close(own_dir(b, True, private=False))    # the held files' too: its mode stays
            for d in (records_dir(b), os.path.dirname(key_path(b))):
                os.close(own_dir(d, True))
        except OSError as e:
            why = why or f"{os.path.dirname(records_dir(b))}: {e.strerror or e}"
            continue
        return b, (f"the run's record is kept in {b} ({why})" if b != state_base() else "")
    raise ConfineError(f"the run's record: no place to keep it ({why})")


def own_dir(path: str, create: bool, private: bool = True) -> int:
    """A directory of ours, by descriptor (made if asked); private: made 0700."""
    if create:
        os.makedirs(path, mode=0o700, exist_ok=True)
    fd = os.open(path, _DIR)
    st = os.fstat(fd)
    if st.st_uid != os.geteuid():
        os.close(fd)
        raise OSError(errno.EPERM, f"{path} belongs to another account")
    if private and stat.S_IMODE(st.st_mode) & 0o077:
        os.fchmod(fd, 0o700)
    return fd


def load_key(create: bool, base: str | None = None) -> bytes | None:
    """The person's record key (made on first use when create); None: there is none."""
    path = key_path(base)
    try:
        dfd = own_dir(os.path.dirname(path), create)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise ConfineError(f"record key {path}: {e.strerror or e}") from None
    try:
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(KEY_NAME, flags, dir_fd=dfd)
        except FileNotFoundError:
            if not create:
                return None
            fd = _make_key(dfd, path)
        try:
            st = os.fstat(fd)
            if (not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid()
                    or stat.S_IMODE(st.st_mode) & 0o077):
                raise ConfineError(f"record key {path}: not a 0600 file of this account: "
                                   "refusing it (remove it; a new one is made)")
            key = os.read(fd, 4096)
        finally:
            os.close(fd)
    except OSError as e:
        raise ConfineError(f"record key {path}: {e.strerror or e}") from None
    finally:
        os.close(dfd)
    if len(key) < KEY_BYTES:
        raise ConfineError(f"record key {path}: shorter than {KEY_BYTES} bytes: refusing it")
    return key


def _make_key(dfd: int, path: str) -> int:
    """Written under another name, then linked in: a reader never sees half a key,
    and of two runs making it at once one wins and both use its key."""
    tmp = f".{KEY_NAME}.{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600, dir_fd=dfd)
    try:
        os.write(fd, os.urandom(KEY_BYTES))
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(tmp, KEY_NAME, src_dir_fd=dfd, dst_dir_fd=dfd)
    except FileExistsError:
        pass
    finally:
        os.unlink(tmp, dir_fd=dfd)
    os.fsync(dfd)
    return os.open(KEY_NAME, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)


def create(run: str, where: str | None = None) -> tuple[int, str, str]:
    """A new record for `run`: (fd for appending, its path, the run id it is under:
    RUN, or RUN.N when RUN is taken, two runs in one second of one process)."""
    base = records_dir(where)
    try:
        dfd = own_dir(base, True)
    except OSError as e:
        raise ConfineError(f"the run's record in {base}: {e.strerror or e}") from None
    try:
        for n in range(100):
            name = run if n == 0 else f"{run}.{n}"
            try:
                fd = os.open(name + SUFFIX, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL
                             | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dfd)
            except FileExistsError:
                continue
            except OSError as e:
                raise ConfineError(f"the run's record in {base}: {e.strerror or e}") from None
            return fd, os.path.join(base, name + SUFFIX), name
    finally:
        os.close(dfd)
    raise ConfineError(f"the run's record in {base}: {run}: 100 records of that id exist")


def _records() -> list[tuple[str, int, str, str]]:
    """(stamp, mtime, run, path) of every record in every base, oldest first."""
    got: list[tuple[str, int, str, str]] = []
    for b in bases():
        base = records_dir(b)
        try:
            names = os.listdir(base)
        except OSError:
            continue
        for n in names:
            if not n.endswith(SUFFIX) or not RUN.fullmatch(n[:-len(SUFFIX)]):
                continue
            p = os.path.join(base, n)
            try:
                st = os.stat(p, follow_symlinks=False)
            except OSError:
                continue
            got.append((n[:15], st.st_mtime_ns, n[:-len(SUFFIX)], p))
    return sorted(got)


def runs() -> list[str]:
    """The run ids with a record, oldest first."""
    return [r[2] for r in _records()]


def locate(run: str | None) -> str:
    """The record of `run` (None: the newest); a path (with a '/') is taken as it
    is: a --log FILE, or a copy."""
    if run is not None and ("/" in run or (not RUN.fullmatch(run.removesuffix(SUFFIX))
                                            and os.path.isfile(run))):
        return run
    every = _records()
    if run is None:
        if not every:
            raise ConfineError(f"no run has a record in {records_dir()} yet")
        return every[-1][3]
    run = run.removesuffix(SUFFIX)
    if not RUN.fullmatch(run):
        raise ConfineError(f"{run!r} is not a run id (like 20261206-081500-1234) or a path "
                           "(`confine log show --last` shows the newest)")
    for r in every:
        if r[2] == run:
            return r[3]
    raise ConfineError(f"no record of run {run} in {records_dir()}")


def read(path: str) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        raise ConfineError(f"{path}: cannot read ({e.strerror or e})") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ConfineError(f"{path}: not a regular file")
        chunks = []
        while True:
            b = os.read(fd, 1 << 20)
            if not b:
                break
            chunks.append(b)
        return b"".join(chunks)
    finally:
        os.close(fd)


def bound(max_bytes: int, days: float, keep: str, say: Callable[[str], None],
          now: float | None = None, where: str | None = None) -> int:
    """The records across runs: at most max_bytes on disk and none older than `days`
    (protect/keep.py's KEEP_BYTES and KEEP_DAYS, and their overrides); the oldest go
    first, each said; `keep` (this run's, RUN or RUN.N) stays. One stat per record:
    a record is one file, so this runs at the end of every run without a size cache.
    Returns how many were dropped."""
    base = records_dir(where)
    try:
        dfd = own_dir(base, False)
    except OSError:
        return 0
    dropped = 0
    try:
        got: list[tuple[float, int, str, int]] = []
        with os.scandir(dfd) as it:
            for e in it:
                n = e.name
                if not n.endswith(SUFFIX) or not RUN.fullmatch(n[:-len(SUFFIX)]):
                    continue
                try:
                    st = e.stat(follow_symlinks=False)
                except OSError:
                    continue
                got.append((st.st_mtime, st.st_mtime_ns, n, st.st_blocks * 512))
        got.sort()
        total = sum(g[3] for g in got)
        oldest = (time.time() if now is None else now) - days * 86400
        for mtime, _, n, size in got:
            run = n[:-len(SUFFIX)]
            if run == keep or run.startswith(keep + "."):
                continue
            if mtime < oldest:
                why = f"older than {days:g} days"
            elif total > max_bytes:
                why = f"over the {max_bytes} bytes kept across runs"
            else:
                break
            try:
                os.unlink(n, dir_fd=dfd)
            except OSError as e:
                say(f"could not drop the record of run {run} ({why}): {e.strerror or e}")
                continue
            total -= size
            dropped += 1
            say(f"dropped the record of run {run} ({size} bytes): {why}")
    finally:
        os.close(dfd)
    return dropped


def exposed(writable: Iterable[str], readable: Iterable[str],
            denied: Iterable[str] = (), base: str | None = None) -> str | None:
    """Why the agent could reach the records or the key of this account (a state
    directory set inside the workdir, a grant of ~/.local/state), or None. A record
    the agent can write proves nothing, nor does a key it can read."""
    runs_dir = os.path.realpath(records_dir(base))
    keys_dir = os.path.realpath(os.path.dirname(key_path(base)))
    for w in writable:
        w = os.path.realpath(w)
        for what, p in (("the records", runs_dir), ("the record key", keys_dir)):
            if is_under(p, w) or is_under(w, p):
                return f"{what} ({p}) lie where the agent can write ({w})"
    deny = [os.path.realpath(d) for d in denied]
    for r in readable:
        r = os.path.realpath(r)
        if is_under(keys_dir, r) and not any(is_under(keys_dir, d) for d in deny):
            return f"the record key ({keys_dir}) lies where the agent can read ({r})"
    return None
