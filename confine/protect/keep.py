"""Bounds across runs on what confine keeps for the person: held files
(held.py, `held_base()`), the quarantine (revert.py, `default_quarantine_dir`)
and what `confine undo` puts back (confine/undo/, `undo_base()`); the runs' records
(journal/store.py `bound`) by the same KEEP_BYTES and KEEP_DAYS.

Each run is bounded on its own (held.COPY_CAP, revert.QUARANTINE_COPY_CAP and
their entry caps), but nothing expired the runs: an agent started again and
again (a loop in a harness, a cron job) that holds a 200 MB `.envrc` each time
fills the person's disk (or /var/lib as root) with no end. So at the end of
every run each store keeps at most KEEP_BYTES on disk and nothing older than
KEEP_DAYS; the oldest runs go first, each with a `confine:` line naming the
run, its workdir and its size. The current run is never dropped: when it alone
is over the bound, that is said, and it keeps what its per-run caps allowed.

The one place the bounds are set: KEEP_BYTES and KEEP_DAYS here, overridden by
the launching user's environment (CONFINE_KEEP_BYTES, CONFINE_KEEP_DAYS; the
agent's environment never reaches the supervisor). A bad value is refused at
the run's start (limits() raises ConfineError: exit 125), never guessed.

Threat: the stores are directories of the person's own (0700, checked by
owner), but what lies in them came from the agent's workdir; sizes are taken
by descriptor without following a symlink, counting the blocks really
allocated (a sparse file costs what it holds); removal is revert.remove_at.
"""
from __future__ import annotations

import os
import re
import stat
import time
from collections.abc import Callable

from ..errors import ConfineError, printable
from ..paths import state_dir
from ..record import dataclass
from .held import MANIFEST, _read_json
from .revert import _RUN_ID, QUARANTINE_WORKDIR, _run_time, remove_at

KEEP_BYTES = 1 << 30            # each store (held, quarantine, undo) keeps at most this on disk ...
KEEP_DAYS = 30                  # ... and no run older than this
BYTES_ENV = "CONFINE_KEEP_BYTES"
DAYS_ENV = "CONFINE_KEEP_DAYS"
SIZE_DEPTH = 512                # directory levels counted below a run (a descriptor each)
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_UNITS = re.compile(r"(\d+)\s*([KMGT]i?B?|B)?", re.IGNORECASE)


def undo_base(*, euid: int | None = None, home: str | None = None) -> str:
    """The undo store (confine/undo/store.py): /var/lib/confine/undo as root,
    else $XDG_STATE_HOME (~/.local/state)/confine/undo. A run there holds
    links to (or copies of) workdir files; a run's own bound is
    Limits.max_bytes too (no run keeps more than the store may)."""
    return state_dir("undo", euid=euid, home=home)


@dataclass
class Run:
    run: str
    workdir: str
    size: int           # bytes allocated on disk
    when: float         # the time its id names (seconds) ...
    mtime: int          # ... and, within one second, its directory's last change


@dataclass
class Limits:
    max_bytes: int
    days: float


def limits() -> Limits:
    """KEEP_BYTES and KEEP_DAYS, or the launching user's overrides
    (CONFINE_KEEP_BYTES: bytes, or with K/M/G/T (powers of 1024); CONFINE_KEEP_DAYS)."""
    raw_b, raw_d = os.environ.get(BYTES_ENV), os.environ.get(DAYS_ENV)
    max_bytes, days = KEEP_BYTES, float(KEEP_DAYS)
    if raw_b is not None:
        m = _UNITS.fullmatch(raw_b.strip())
        if m is None:
            raise ConfineError(f"{BYTES_ENV}={raw_b!r}: not a size (e.g. 1073741824, 500M, 2G)")
        unit = (m.group(2) or "B")[0].upper()
        max_bytes = int(m.group(1)) << {"B": 0, "K": 10, "M": 20, "G": 30, "T": 40}[unit]
    if raw_d is not None:
        try:
            days = float(raw_d)
        except ValueError:
            days = -1.0
        if not 0 <= days < 1e6:
            raise ConfineError(f"{DAYS_ENV}={raw_d!r}: not a number of days")
    return Limits(max_bytes, days)


def human(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.1f} {unit}"
    return f"{n} bytes"


def tree_size(pfd: int, name: str, *, close: bool = False) -> int:
    """Bytes allocated under pfd/name: by descriptor, never through a symlink,
    never into another filesystem; levels below SIZE_DEPTH are not counted.
    close: pfd is closed when done."""
    try:
        return _tree_size(pfd, name)
    finally:
        if close:
            os.close(pfd)


def _tree_size(pfd: int, name: str) -> int:
    st = os.stat(name, dir_fd=pfd, follow_symlinks=False)
    total = st.st_blocks * 512
    if not stat.S_ISDIR(st.st_mode):
        return total
    stack = [os.open(name, _DIR, dir_fd=pfd)]
    try:
        while stack:
            fd = stack.pop()
            try:
                with os.scandir(fd) as it:
                    entries = list(it)
                for e in entries:
                    try:
                        est = e.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    total += est.st_blocks * 512
                    if (stat.S_ISDIR(est.st_mode) and est.st_dev == st.st_dev
                            and len(stack) < SIZE_DEPTH):
                        try:
                            stack.append(os.open(e.name, _DIR, dir_fd=fd))
                        except OSError:
                            pass
            finally:
                os.close(fd)
    finally:
        for fd in stack:
            os.close(fd)
    return total


def _workdir(bfd: int, name: str) -> str:
    """The run's workdir: a held run's manifest, a quarantine run's note."""
    try:
        dfd = os.open(name, _DIR, dir_fd=bfd)
    except OSError:
        return "?"
    try:
        m = _read_json(dfd, MANIFEST)
        if m is not None and isinstance(m.get("workdir"), str):
            return str(m["workdir"])
        try:
            fd = os.open(QUARANTINE_WORKDIR, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
        except OSError:
            return "?"
        try:
            return os.read(fd, 8192).decode("utf-8", "surrogateescape").strip() or "?"
        finally:
            os.close(fd)
    finally:
        os.close(dfd)


# A run's size, measured once, kept beside the runs in one index file of the store
# (INDEX, never inside a run: a run's top level holds what was taken from the agent's
# workdir, under the names the agent chose). Walking every kept run's tree at the end of
# every run cost about 0.4 s per run with a full quarantine (100 runs, 90k entries); then
# one record file per run still cost an open, a read and a close per kept run (~25 ms at
# the end of every run with 940 quarantined runs), hence one file for the store. A
# finished run only shrinks (held apply/discard), so the recorded size never counts less
# than is there: the bound holds, at worst a little early. The index is trusted as the
# store is: a regular file of ours that nobody else may write; anything else is ignored
# and every run measured again. The directory's mtime (the order within one second) is
# the one recorded with the size: no stat per kept run either.
INDEX = ".confine-index"
SIZE_DIR = ".confine-sizes"     # the per-run records before INDEX: read once, to migrate


def _read_index(bfd: int) -> dict[str, tuple[int, int]]:
    """run -> (size, mtime_ns) as recorded; {} where there is no index we can trust."""
    try:
        fd = os.open(INDEX, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK,
                     dir_fd=bfd)   # non-blocking: a FIFO planted there must not hang the exit
    except OSError:
        return {}
    try:
        st = os.fstat(fd)
        if (not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid()
                or st.st_mode & 0o022):
            return {}
        chunks = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
    finally:
        os.close(fd)
    out = {}
    for line in b"".join(chunks).decode("utf-8", "surrogateescape").splitlines():
        name, _, nums = line.rpartition("\t")
        size, _, mtime = nums.partition(" ")
        if name and size.isdigit() and mtime.isdigit():
            out[name] = (int(size), int(mtime))
    return out


def _write_index(bfd: int, got: dict[str, tuple[int, int]]) -> None:
    """Replace the index at once (a rename): a run that ends at the same time loses its
    entries at worst, which are then measured again."""
    tmp = f"{INDEX}.{os.getpid()}"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600, dir_fd=bfd)
    except OSError:
        return                      # measured again next time
    try:
        try:
            os.write(fd, "".join(f"{n}\t{s} {m}\n" for n, (s, m) in got.items())
                     .encode("utf-8", "surrogateescape"))
        finally:
            os.close(fd)
        os.rename(tmp, INDEX, src_dir_fd=bfd, dst_dir_fd=bfd)
    except OSError:
        try:
            os.unlink(tmp, dir_fd=bfd)
        except OSError:
            pass


def _recorded(bfd: int, name: str) -> int | None:
    """A size recorded in SIZE_DIR by a confine from before INDEX."""
    try:
        fd = os.open(f"{SIZE_DIR}/{name}", os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC,
                     dir_fd=bfd)
    except OSError:
        return None
    try:
        raw = os.read(fd, 32).strip()
    finally:
        os.close(fd)
    return int(raw) if raw.isdigit() else None


def runs(bfd: int, fresh: str | None = None, workdirs: bool = True) -> list[Run]:
    """The runs in a store (names like a run id only), oldest first. A run's size is
    measured once and recorded (INDEX); `fresh` (the run just ended, and its write
    grants' RUN.rootN) is measured again. workdirs=False: each Run's workdir is ""
    (reading every run's manifest at the end of every run cost more than the rest)."""
    out = []
    index = _read_index(bfd)
    got: dict[str, tuple[int, int]] = {}
    migrate = None
    for n in os.listdir(bfd):
        m = _RUN_ID.fullmatch(n)
        t = _run_time(m.group(1)) if m else None
        if t is None:
            continue
        mine = fresh is not None and (n == fresh or n.startswith(fresh + "."))
        known = None if mine else index.get(n)
        if known is None:
            try:
                mtime = os.stat(n, dir_fd=bfd, follow_symlinks=False).st_mtime_ns
                if migrate is None:
                    migrate = os.path.isdir(f"/proc/self/fd/{bfd}/{SIZE_DIR}")
                size = None if mine or not migrate else _recorded(bfd, n)
                known = (tree_size(bfd, n) if size is None else size, mtime)
            except OSError:
                continue
        got[n] = known
        out.append(Run(n, _workdir(bfd, n) if workdirs else "", known[0], t, known[1]))
    if got != index:
        _write_index(bfd, got)
    out.sort(key=lambda r: (r.when, r.mtime, r.run))
    return out


def bound(base: str, what: str, keep: str | None, say: Callable[[str], None], *,
          lim: Limits | None = None, max_runs: int | None = None,
          now: float | None = None) -> list[Run]:
    """Drop the oldest runs of the store `base` (a directory of ours; `what`
    names it in the lines) until it holds at most lim.max_bytes, no run older
    than lim.days and at most max_runs; `keep` (the current run) stays.
    Each dropped run gets a line; returns them."""
    lim = lim or limits()
    try:
        bfd = os.open(base, _DIR)
    except OSError:
        return []
    dropped: list[Run] = []
    try:
        if os.fstat(bfd).st_uid != os.geteuid():
            return []
        every = runs(bfd, fresh=keep, workdirs=False)   # read for the lines of dropped ones
        total = sum(r.size for r in every)
        oldest = (time.time() if now is None else now) - lim.days * 86400
        def current(r: Run) -> bool:
            # the run's own, its write grants' included (RUN.rootN: runtime/session.py)
            return keep is not None and (r.run == keep or r.run.startswith(keep + "."))

        count = sum(1 for r in every if not current(r))
        for r in every:
            if current(r):
                continue
            if r.when < oldest:
                why = f"older than {lim.days:g} days"
            elif total > lim.max_bytes:
                why = f"over the {human(lim.max_bytes)} bound on {what} across runs"
            elif max_runs is not None and count > max_runs:
                why = f"over the {max_runs} runs kept"
            else:
                continue
            r.workdir = _workdir(bfd, r.run)
            try:
                remove_at(bfd, r.run)
            except OSError as e:
                say(f"could not drop {what} run {r.run} ({why}): {e.strerror or e}")
                continue
            total -= r.size
            count -= 1
            dropped.append(r)
            say(f"dropped {what} run {r.run} (workdir {printable(r.workdir)}, {human(r.size)}): "
                + why)
        mine = [r for r in every if current(r)]
        cur = sum(r.size for r in mine)
        if mine and cur > lim.max_bytes:
            say(f"{what} run {keep} alone holds {human(cur)}, over the "
                f"{human(lim.max_bytes)} bound ({BYTES_ENV}): kept, within its own per-run "
                f"caps; the next run drops it first")
    finally:
        os.close(bfd)
    return dropped
