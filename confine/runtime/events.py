"""The run's decisions, for the person and for machines.

One `Events` per run, owned by the session (the supervisor's side; the agent
never holds it). Every decision (a refused file call, a refused or allowed
connection, a DNS answer, an approval, the exit check's findings, the status) is
one line of the run's record through `emit`, the one entry: a hash-chained
`journal.Journal` in the person's state directory, which also writes the same
bytes to `--log FILE` (without a record, --log gets plain JSON lines); a
refusal also prints one `confine:` line the first time its key is seen
(the same path or host refused a thousand times is one line), naming what
was refused, by which layer, and the profile key or flag that would grant it;
`summary()` gives the lines printed at exit.

Bounded: at most MAX_SHOWN distinct refusal keys are remembered (the agent
chooses what it is refused, so it must not be able to grow the supervisor's
memory); past that, refusals still reach the log but no more lines are shown.
Thread-safe: the mediator, the gateway's workers and the DNS server emit
from their own threads.

`Screen` keeps confine's lines out of a full-screen program: while the terminal
confine writes to is in raw mode (an agent's UI, which also draws on the
alternate screen, which cannot be read back), a line printed there would be
drawn into the agent's screen, garbling it and reading as the agent's own text.
Such lines are held (bounded) and said when the agent is gone, before the exit
summary; refusals are in the log as always.
"""
from __future__ import annotations

import dataclasses
import json
import os
import sys
import termios
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import ConfineError, default_warn, printable
from ..journal.writer import Journal
from ..paths import is_under
from ..policy import explain, runlater

Warn = Callable[[str], None]
MAX_SHOWN = 100


class Events:
    def __init__(self, path: str | None = None, warn: Warn = default_warn,
                 journal: Journal | None = None):
        self.warn = warn
        self.journal = journal
        # What grant() needs to never suggest a secret or a run-later path (set
        # by the session once the policy is known).
        self.home = os.path.expanduser("~")
        self.deny: tuple[str, ...] = ()
        self._never: list[tuple[str, str]] | None = None
        # Whether Landlock's own refusals reach this run (kernel/audit.py): None
        # until the launch says; a reason string when they cannot.
        self.landlock_seen: bool | None = None
        # The run's approval engine (confine/approval/), set by the session: the
        # mediator asks through it (unix sockets, protected writes).
        self.approval: Any = None
        self.landlock_gap = ""
        # Workdir paths bound read-only for the run (outside git directories):
        # rm or mv of one fails with EBUSY, which no layer sees as a refusal.
        self.read_only: dict[str, str] = {}     # workdir-relative path -> its pattern
        self.workdir = ""
        # Where the policy lets the agent write, and connect: a broker's EACCES
        # elsewhere is Landlock's (write_refused, connect_refused).
        self.writable: tuple[str, ...] = ()
        self.connect_ports: frozenset[int] = frozenset()
        # (the agent home's link, the granted path it leads to) (runtime/home.py)
        self.links: tuple[tuple[str, str], ...] = ()
        self._lock = threading.Lock()
        self._fd: int | None = None
        self.path = path
        self.shown: set[str] = set()
        self.refusals: Counter[str] = Counter()    # by layer: "landlock", "gateway", ...
        self.hidden = 0
        if path is not None and journal is None:
            self._fd = open_log(path)
        elif journal is not None and path is None:
            self.path = f"the run's record (confine log show {journal.run})"

    def emit(self, event: Mapping[str, object]) -> None:
        """One decision: a line of the run's record (and of --log FILE). Its type is
        "event" (or "kind" where that is all it has)."""
        if self.journal is not None:
            self.journal.append({**event, "time": round(time.time(), 3),
                                 "event": event.get("event") or event.get("kind") or "other"})
            return
        if self._fd is None:
            return
        rec = {"time": round(time.time(), 3), **event}
        line = (json.dumps(rec, default=str, separators=(",", ":")) + "\n").encode()
        with self._lock:
            try:
                os.write(self._fd, line)
            except OSError as e:
                fd, self._fd = self._fd, None
                os.close(fd)
                self.warn(f"--log {self.path}: cannot write ({e.strerror}): logging stopped")

    def refused(self, key: str, line: str, event: Mapping[str, object],
                layer: str = "") -> None:
        """A refusal: logged always; `line` shown once per key (bounded)."""
        self.emit({"event": "refusal", "layer": layer, **event})
        show: str | None = None
        with self._lock:
            self.refusals[layer or "other"] += 1
            if key in self.shown:
                return
            if len(self.shown) < MAX_SHOWN:
                self.shown.add(key)
                # the agent chooses the names in it: no escape reaches the terminal
                show = printable(line)
            else:
                self.hidden += 1
                if self.hidden == 1:
                    show = (f"more than {MAX_SHOWN} different denials: no more are shown"
                            + (f" (all are in {self.path})" if self.path
                               else " (--log FILE records every one)"))
        if show is not None:
            self.warn(show)

    def forked(self) -> None:
        """The agent's child is forked: the record's syncer thread may start."""
        if self.journal is not None:
            self.journal.start()

    def ended(self) -> None:
        """The agent is gone: the record keeps room for the exit check and the status."""
        if self.journal is not None:
            self.journal.ended()

    def context(self, home: str, deny: tuple[str, ...] = ()) -> None:
        """The agent's home and the profile's secrets, for the suggestions."""
        self.home, self.deny, self._never = home, deny, None

    def explained(self, r: explain.Refusal) -> None:
        """A refusal of any layer: said once with what would grant it, logged always."""
        if self._never is None:
            self._never = runlater.never_writable(self.home, "")
        r = self._through_links(r)
        g = explain.grant(r, self.home, self.deny, self._never)
        self.refused(explain.key(r, g), explain.line(r, g), explain.event(r, g), r.layer)

    def _through_links(self, r: explain.Refusal) -> explain.Refusal:
        """The refusal with a path through the agent home's link to a grant named by
        the granted path itself: a grant on the link can never work (it lies in
        confine's own state), one on the real path can."""
        for link, real in self.links:
            if is_under(r.subject, link) or link + "/" in r.what or r.what.endswith(link):
                subject = real + r.subject[len(link):] if is_under(r.subject, link) \
                    else r.subject
                what = r.what.replace(link + "/", real + "/")
                what = what[:-len(link)] + real if what.endswith(link) else what
                return dataclasses.replace(r, subject=subject, what=what)
        return r

    def mediated(self, reason: str) -> None:
        """A refusal of the mediator or the name guard (its reason string)."""
        self.explained(explain.from_reason(reason))

    def write_refused(self, path: str, creates: bool, rofs: bool = False) -> None:
        """The broker (in the agent's Landlock domain) got EACCES writing or
        creating `path` for the agent, and the guard did not refuse it: said
        here when Landlock's own records do not reach this run, and only for
        paths outside every write grant (inside one, EACCES is the file's
        permissions or a carved entry, which no grant changes). rofs: EROFS,
        the read-only view of the host, said in every run (nothing else sees it)."""
        if any(is_under(path, w) for w in self.writable):
            return
        if not rofs and self.landlock_seen is not False:
            return
        where = os.path.dirname(path) if creates else path
        self.explained(explain.Refusal("write", explain.READ_ONLY_HOST if rofs
                                       else explain.LANDLOCK, where,
                                       f"{'create' if creates else 'write'} {path}"))

    def busy(self, path: str) -> None:
        """A rename of `path` failed with EBUSY: said when it is a protected
        path bound read-only for the run."""
        if not self.workdir or not is_under(path, self.workdir):
            return
        rel = os.path.relpath(path, self.workdir)
        if rel not in self.read_only:
            return
        self.explained(explain.Refusal("protected", explain.READ_ONLY, path,
                                       f"rename {path}: a protected path, bound read-only "
                                       "for the run", self.read_only[rel]))

    def connect_refused(self, port: int, addr: str = "") -> None:
        """The broker's connect() to TCP `port` of `addr` got EACCES (as write_refused)."""
        if self.landlock_seen is not False or port in self.connect_ports:
            return
        self.explained(explain.connect_refusal(explain.LANDLOCK, str(port), addr))

    def landlock(self, fields: Mapping[str, str]) -> None:
        """A Landlock audit record of this run's domain (kernel/audit.py)."""
        r = explain.from_landlock(fields)
        if r is not None:
            self.explained(r)

    def unexplained(self, why: str) -> None:
        """Landlock's own refusals cannot reach this run (kernel/audit.py): why."""
        self.landlock_seen, self.landlock_gap = False, why
        self.emit({"event": "notice", "what": "landlock refusals not shown", "why": why})

    def summary(self, status: int = 0) -> list[str]:
        """The lines said at exit: how many refusals, by layer; for a run that
        failed, that Landlock's own refusals were not among them when they could
        not be seen, and the paths bound read-only.

        Nothing an unprivileged process can read reports a read Landlock refused
        (its records reach only the audit stream, kernel/audit.py), so the gap is
        said instead, once, and only where it may be the cause: the agent exited
        with a failure of its own (not 129-192, 128 + a signal: the person's doing,
        or a crash that no refused read explains; not 125, a nested confine's own
        failure, whose line already says why). A run
        that succeeded is not told about reads it did without."""
        out: list[str] = []
        if self.refusals:
            by = ", ".join(f"{n} by {layer}" for layer, n in self.refusals.most_common())
            out.append(f"{sum(self.refusals.values())} refused during the run ({by})"
                       + (f"; every one is in {self.path}" if self.path
                          else "; --log FILE records each, `confine explain FILE` says "
                               "what to add to a profile"))
        if self.landlock_gap and status not in (0, 125) and not 128 < status <= 128 + 64:
            out.append(f"exit status {status}: a 'Permission denied', 'No such file or "
                       "directory' or 'command not found' above may be Landlock refusing a "
                       "read or an execute outside the grants (--read PATH grants one); "
                       "not shown: Landlock's own refusals, " + self.landlock_gap)
        if status != 0 and self.read_only:
            names = sorted(self.read_only)
            shown = ", ".join(names[:5]) + (
                f" and {len(names) - 5} more" if len(names) > 5 else "")
            pats = sorted({p for p in self.read_only.values() if p})
            lift = (", ".join(f"'!{p}'" for p in pats[:5]) if pats else "'!PATTERN'")
            out.append(f"protected paths bound read-only in this run: {shown} [read-only bind]: "
                       "removing or renaming one fails with 'Device or resource busy'; "
                       f"a profile's protected: [{lift}] lifts them")
        return out

    def close(self, fields: Mapping[str, object] | None = None) -> None:
        """The record's end line (fields added to it) and the log closed."""
        if self.journal is not None:
            self.journal.close(fields)
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


def terminal_raw(fd: int) -> bool:
    """fd is a terminal with line editing or echo off: a full-screen program holds it.
    Not a terminal (or not readable) is False: a line there draws into no screen."""
    try:
        lflag = termios.tcgetattr(fd)[3]
    except (termios.error, OSError, ValueError):
        return False
    return not (lflag & termios.ICANON and lflag & termios.ECHO)


class Screen:
    """A warn that holds confine's lines while the terminal on `fd` is raw, and says
    them at `release()` (the run's end). Asked at each line: a program switches
    raw mode on and off as it goes (an editor, a pager) and lines between are shown."""

    def __init__(self, warn: Warn = default_warn, fd: int | None = None):
        self.warn = warn
        if fd is None:
            try:
                fd = sys.stderr.fileno()
            except (OSError, ValueError):   # replaced or closed: no terminal to guard
                fd = -1
        self.fd = fd
        self.held: list[str] = []
        self.dropped = 0
        self.released = False
        self._lock = threading.Lock()

    def __call__(self, msg: str) -> None:
        if not self.released and terminal_raw(self.fd):
            with self._lock:
                if not self.released:
                    # bounded: the agent chooses what is refused (see MAX_SHOWN)
                    if len(self.held) < MAX_SHOWN + 10:
                        self.held.append(msg)
                    else:
                        self.dropped += 1
                    return
        self.warn(msg)

    def release(self) -> None:
        """The agent is gone: say what was held, and from now on say lines at once."""
        with self._lock:
            self.released = True
            held, self.held = self.held, []
        if not held:
            return
        self.warn(f"{len(held) + self.dropped} line(s) held while the agent's full-screen "
                  "program had the terminal (raw mode):")
        for line in held:
            self.warn(line)
        if self.dropped:
            self.warn(f"... and {self.dropped} more not kept")


def open_log(path: str) -> int:
    """Open --log FILE for appending, as the person who started confine, before
    the agent exists: never a symlink, never a FIFO or device, mode 0600 when new."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
                     | os.O_NOFOLLOW | os.O_NONBLOCK, 0o600)
    except OSError as e:
        raise ConfineError(f"--log {path}: cannot open ({e.strerror})") from None
    import stat
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ConfineError(f"--log {path}: not a regular file")
    os.set_blocking(fd, True)
    return fd
