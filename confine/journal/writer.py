"""`Journal`: one run's record, appended line by line by the supervisor.

Each line is written at once (a crash of confine loses nothing written; the
person's `tail -f` sees it) and made durable by a syncer thread that fsyncs at
most every SYNC_EVERY seconds: a flood of refusals (the agent decides how many)
costs one fsync per interval, not one per refusal, and never blocks the mediator
on the disk. The end line is fsynced before close() returns; the lines before
the agent's child is forked (`start()`) by the syncer once it runs (a disk's
latency is not added to every start).

Threat: the agent decides how many lines there are. At most `lines` per run
(LINES, or CONFINE_RECORD_LINES of the launching user); past that, lines are
counted by event and said in one "dropped" line before the end. Once the agent is
gone (`ended()`) RESERVE more lines are allowed, so the exit check's findings
and the final status are never crowded out by the agent's flood. A write that
fails (disk full) is said once and ends the record there: verify then says
"not closed", never "ok".
"""
from __future__ import annotations

import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping

from ..errors import ConfineError
from . import chain, store

LINES = 20000               # lines per run while the agent runs (~10 MB at most) ...
RESERVE = 2000              # ... and these after it is gone: the exit check, the status
LINES_ENV = "CONFINE_RECORD_LINES"
SYNC_EVERY = 0.05           # seconds between fsyncs of a busy record

Warn = Callable[[str], None]


def line_cap() -> int:
    """LINES, or the launching user's CONFINE_RECORD_LINES (a bad value: ConfineError,
    at the run's start)."""
    raw = os.environ.get(LINES_ENV)
    if raw is None:
        return LINES
    try:
        n = int(raw)
    except ValueError:
        n = -1
    if not 10 <= n <= 10_000_000:
        raise ConfineError(f"{LINES_ENV}={raw!r}: not a number of lines from 10 to 10000000")
    return n


class Journal:
    def __init__(self, fd: int, path: str, run: str, key: bytes, *, lines: int = LINES,
                 mirror: int | None = None, mirror_name: str = "", warn: Warn | None = None):
        self.fd: int | None = fd
        self.path = path
        self.run = run
        self.base = os.path.dirname(os.path.dirname(path))
        self.key = key
        self.mirror = mirror                # --log FILE: the same bytes
        self.mirror_name = mirror_name
        self.warn = warn
        self.limit = lines
        self.lines = 0                      # written, the start line included
        self.prev = ""
        self.dropped: Counter[str] = Counter()
        self.closed = False
        self._lock = threading.Lock()
        self._cv = threading.Condition(self._lock)
        self._dirty = False
        self._stop = False
        self._syncer: threading.Thread | None = None

    @classmethod
    def open(cls, run: str, info: Mapping[str, object], *, mirror: int | None = None,
             mirror_name: str = "", warn: Warn | None = None,
             base: str | None = None) -> Journal:
        """The record of `run` in the person's store (base: store.writable_base()'s),
        its start line written; `info` (argv, workdir, ...) goes into the start line."""
        lines = line_cap()
        key = store.load_key(True, base)
        assert key is not None
        fd, path, rid = store.create(run, base)
        j = cls(fd, path, rid, key, lines=lines, mirror=mirror, mirror_name=mirror_name,
                warn=warn)
        nonce = os.urandom(32).hex()
        j.prev = nonce
        j._write(chain.encode(0, nonce, {"time": round(time.time(), 3), "event": "start",
                                         "run": rid, "version": chain.VERSION,
                                         "nonce": nonce, "key": chain.key_id(key), **info}))
        if j.fd is None:
            raise ConfineError(f"the run's record {path}: cannot be written")
        j._dirty = True             # fsynced by the syncer: a disk's latency is not the start's
        return j

    def start(self) -> None:
        """The syncer thread, from now on: called once the agent's child is forked.
        Not before: a launcher with one thread forks the child straight into the
        run's cgroup (kernel/cgroup.py fork_into), and nothing of a thread is
        copied into the child. Until then lines are written, not fsynced."""
        with self._lock:
            if self._syncer is None and not self.closed and self.fd is not None:
                self._syncer = threading.Thread(target=self._sync, name="confine-record",
                                                args=(os.dup(self.fd),), daemon=True)
                self._syncer.start()

    def append(self, fields: Mapping[str, object]) -> None:
        """One decision (fields carry "event" and "time")."""
        with self._lock:
            if self.closed or self.fd is None:
                return
            if self.lines > self.limit:
                self.dropped[str(fields.get("event") or "other")] += 1
                return
            try:
                line = chain.encode(self.lines, self.prev, fields)
            except (TypeError, ValueError) as e:    # never the caller's (the mediator's) failure
                line = chain.encode(self.lines, self.prev, {
                    "time": fields.get("time"), "event": str(fields.get("event") or "other"),
                    "error": f"not recordable: {type(e).__name__}: {e}"})
            self._write(line)
            if not self._dirty:
                self._dirty = True
                self._cv.notify()

    def ended(self) -> None:
        """The agent is gone: what is left to say (the exit check, the status) fits."""
        with self._lock:
            self.limit = max(self.limit, self.lines) + RESERVE

    def close(self, fields: Mapping[str, object] | None = None) -> None:
        """The dropped count, if any, and the end line with its HMAC; fsynced."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            self._stop = True
            self._cv.notify()
            syncer = self._syncer
        if syncer is not None:
            syncer.join()
        if self.fd is not None:
            now = round(time.time(), 3)
            if self.dropped:
                self._write(chain.encode(self.lines, self.prev, {
                    "time": now, "event": "dropped", "count": sum(self.dropped.values()),
                    "by_event": dict(self.dropped.most_common()), "limit": self.limit}))
            end = {"time": now, "event": "end", "run": self.run, "lines": self.lines,
                   "dropped": sum(self.dropped.values()), **(fields or {})}
            self._write(chain.seal(self.key, self.lines, self.prev, end))
        for attr in ("fd", "mirror"):
            fd = getattr(self, attr)
            if fd is None:
                continue
            setattr(self, attr, None)
            try:
                os.fsync(fd)
            except OSError:
                pass
            os.close(fd)

    def _write(self, line: bytes) -> None:
        assert self.fd is not None
        try:
            os.write(self.fd, line)
        except OSError as e:
            fd, self.fd = self.fd, None
            os.close(fd)
            self._say(f"the run's record {self.path}: cannot write ({e.strerror}): it ends at "
                      f"line {self.lines} (`confine log verify` says 'not closed')")
            return
        if self.mirror is not None:
            try:
                os.write(self.mirror, line)
            except OSError as e:
                fd, self.mirror = self.mirror, None
                os.close(fd)
                self._say(f"--log {self.mirror_name}: cannot write ({e.strerror}): logging "
                          f"stopped (the run's record {self.path} goes on)")
        self.prev = chain.digest(line)
        self.lines += 1

    def _say(self, msg: str) -> None:
        if self.warn is not None:
            try:
                self.warn(msg)
            except Exception:  # noqa: BLE001 - the record's trouble must not stop the run
                pass

    def _sync(self, fd: int) -> None:
        """fsync what was written, at most every SYNC_EVERY (its own descriptor:
        close() never closes one under it)."""
        try:
            while True:
                with self._lock:
                    while not self._dirty and not self._stop:
                        self._cv.wait()
                    if self._stop:
                        return
                    # gather the lines of one interval into one fsync
                    self._cv.wait(SYNC_EVERY)
                    self._dirty = False
                    if self._stop:
                        return
                try:
                    os.fsync(fd)
                except OSError:
                    return
        finally:
            os.close(fd)
