"""The engine: one decision (allow, deny, ask) for every kind of action outside the bounds.

Job: an `Event` (a kind, what it is about, which process) gets a `Verdict`:
the profile's first matching rule or the kind's default (policy/approvals.py);
"ask" is put to the run's approver (approvers.py) and its answer applied.

The threats, and the answer to each:
- an unclear answer allows: only an explicit once/run/profile allows; no
  approver, a timeout, a dead decider, an approver that fails, a question the
  queue cannot take: deny, with the reason;
- an agent flooding the person: one question at a time (a single worker
  thread), the same question asked once while it waits (concurrent callers
  share the answer), at most MAX_PENDING waiting (more are denied at once),
  every answer but "once" remembered for the run, denials included, and what
  is remembered bounded (MAX_REMEMBERED);
- the agent answering its own question: the approvers never read the agent's
  stdin (see approvers.py);
- a caller left waiting: `decide` takes a wait; `submit` never blocks (the
  mediator's single thread must go on answering other calls), its callback
  runs on the engine's thread once the answer is in.

Every verdict goes to the run's event stream (one dict, kind "approval").
"""
from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any, Callable, Mapping

from ..errors import ConfineError, printable
from ..policy.approvals import DEFAULTS, FIELD, Approvals
from ..record import dataclass, field

KINDS = tuple(DEFAULTS)
ALLOW = ("once", "run", "profile")
ANSWERS = (*ALLOW, "deny")
MAX_REMEMBERED = 4096     # answers remembered for the run (the agent chooses the subjects)
MAX_PENDING = 32          # questions waiting for the person; more are denied at once

Log = Callable[[dict[str, Any]], None]


@dataclass(frozen=True)
class Event:
    """An action to decide. subject, by kind (docs/approvals.md):
    network {host, port, via}; unix_socket {path}; protected_write {path (workdir-relative)};
    deletions {count, path}; credential {name, use}; exec {path}.
    process: {pid, exe} of the agent's process, where known."""
    kind: str
    subject: Mapping[str, Any]
    process: Mapping[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, str]:
        """What an answer is remembered by: the subject's field rules match."""
        if self.kind == "deletions":
            return ("deletions", "")      # a run's deletions are one question, not one per file
        name, _ = FIELD[self.kind]
        return (self.kind, str(self.subject.get(name, "")))

    def shown(self) -> str:
        s = self.subject
        if self.kind == "network":
            port = s.get("port")
            return f"{s.get('host')} (DNS lookup)" if port is None else f"{s.get('host')}:{port}"
        if self.kind == "unix_socket":
            return f"connect to unix socket {printable(str(s.get('path')))}"
        if self.kind == "protected_write":
            return f"write {printable(str(s.get('path')))} (runs later)"
        if self.kind == "deletions":
            return f"delete {printable(str(s.get('path', '?')))} ({s.get('count')} deleted this run)"
        if self.kind == "credential":
            return f"use credential {printable(str(s.get('name')))}" + (
                f" ({printable(str(s['use']))})" if s.get("use") else "")
        return f"run {printable(str(s.get('path')))}"

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "subject": dict(self.subject), "process": dict(self.process)}


@dataclass(frozen=True)
class Verdict:
    decision: str                 # "allow" or "deny" ("pending": nobody answered within the wait)
    reason: str = ""
    by: str = ""                  # the rule, "tty", "command NAME", "socket PATH", "remembered", ...
    answer: str = ""              # when asked: once, run, profile, deny

    @property
    def allowed(self) -> bool:
        return self.decision == "allow"


# (event, answers offered) -> (answer, reason); raising denies
Approver = Callable[[Event, tuple[str, ...]], tuple[str, str]]


@dataclass
class _Pending:
    event: Event
    done: threading.Event = field(default_factory=threading.Event)
    verdict: Verdict | None = None
    callbacks: list[Callable[[Verdict], None]] = field(default_factory=list)
    asked_at: float = 0.0


class Engine:
    """One per run. approver: None is a non-interactive run (every ask is denied);
    name: who answers, for the record; profile: adds "profile" answers
    (profile.ProfileWriter), None: "profile" is never offered."""

    def __init__(self, approvals: Approvals, approver: Approver | None, name: str = "non-interactive", *,
                 profile: Any = None, events: Log | None = None) -> None:
        self.approvals = approvals
        self.approver = approver
        self.name = name if approver is not None else "non-interactive"
        self.profile = profile
        self._events = events
        self._lock = threading.Lock()
        self._allowed: set[tuple[str, str]] = set()
        self._denied: set[tuple[str, str]] = set()
        self._pending: dict[tuple[str, str], _Pending] = {}
        self._queue: list[_Pending] = []
        self._wake = threading.Condition(self._lock)
        self._worker: threading.Thread | None = None
        # protected writes the engine allowed, as made: workdir-relative path ->
        # (st_dev, st_ino) of the file (the exit check accepts exactly that file)
        self.writes: dict[str, tuple[int, int]] = {}
        self._granted: set[str] = set()     # protected writes this engine allowed

    def landed(self, rel: str, dev: int, ino: int) -> None:
        """An approved protected write made its file (the mediator says so); a
        path this engine never allowed is not taken."""
        with self._lock:
            if rel not in self._granted:
                return
            if len(self.writes) < MAX_REMEMBERED or rel in self.writes:
                self.writes[rel] = (dev, ino)
        if self._events is not None:
            try:
                self._events({"kind": "approved_write", "event": "approved_write", "path": rel,
                              "dev": dev, "ino": ino})
            except Exception:  # noqa: BLE001 - a failing log sink must not stop the mediator
                pass

    def asks(self, kind: str) -> bool:
        """Something of this kind may be allowed beyond confine's fixed refusal."""
        return self.approvals.asks(kind)

    # --- deciding ---
    def decide(self, ev: Event, wait: float | None = None) -> Verdict:
        """The verdict, waiting at most `wait` seconds for an answer (None: until
        the approver's own timeout); Verdict("pending") if it is not in yet."""
        box: list[Verdict] = []
        got = threading.Event()

        def done(v: Verdict) -> None:
            box.append(v)
            got.set()
        self.submit(ev, done)
        got.wait(wait)
        return box[0] if box else Verdict("pending", "the question is not answered yet", self.name)

    def submit(self, ev: Event, done: Callable[[Verdict], None]) -> None:
        """Decide without blocking: `done(verdict)` runs here when no question is
        needed, else on the engine's thread once answered."""
        if ev.kind not in DEFAULTS:
            return self._finish(ev, Verdict("deny", f"unknown kind {ev.kind!r}", "engine"), [done])
        decision, rule = self.approvals.decide(ev.kind, dict(ev.subject))
        if decision != "ask":
            return self._finish(ev, Verdict(decision, "", rule), [done])
        key = ev.key
        with self._lock:
            hit = self._remembered(key)
            if hit is None:
                p = self._pending.get(key)
                if p is None and len(self._pending) >= MAX_PENDING:
                    hit = Verdict("deny", f"{MAX_PENDING} questions are already waiting", self.name)
                elif p is None:
                    p = _Pending(ev, asked_at=time.monotonic())
                    self._pending[key] = p
                    self._queue.append(p)
                    self._start_worker()
                    self._wake.notify()
                if p is not None:
                    p.callbacks.append(done)
                    return None
        assert hit is not None
        return self._finish(ev, hit, [done])

    def submit_for(self, kind: str, subject: Mapping[str, Any], pid: int | None,
                   done: Callable[[Verdict], None]) -> None:
        """submit() for a caller that knows the agent's process only by its pid
        (the mediator: it imports nothing of the engine)."""
        self.submit(Event(kind, dict(subject), process_of(pid)), done)

    def _remembered(self, key: tuple[str, str]) -> Verdict | None:
        if key in self._denied:
            return Verdict("deny", "denied earlier in this run", "remembered", "deny")
        if key in self._allowed:
            return Verdict("allow", "allowed earlier in this run", "remembered", "run")
        return None

    def _remember(self, key: tuple[str, str], v: Verdict) -> None:
        if len(self._allowed) + len(self._denied) >= MAX_REMEMBERED:
            return   # bounded: later questions are asked again
        if v.answer == "deny":
            self._denied.add(key)
        elif v.answer in ("run", "profile"):
            self._allowed.add(key)

    def _start_worker(self) -> None:
        if self._worker is None:
            self._worker = threading.Thread(target=self._work, daemon=True, name="confine-approval")
            self._worker.start()

    def _work(self) -> None:
        # the terminal is ours to read only in the foreground; never stop the supervisor for it
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTTIN, signal.SIGTTOU})
        while True:
            with self._lock:
                while not self._queue:
                    self._wake.wait()
                p = self._queue.pop(0)
            v = self._ask(p.event)
            with self._lock:
                self._pending.pop(p.event.key, None)
                self._remember(p.event.key, v)
                callbacks = list(p.callbacks)
            self._finish(p.event, v, callbacks, time.monotonic() - p.asked_at)

    def _offered(self, ev: Event) -> tuple[str, ...]:
        ok = self.profile is not None and self.profile.offers(ev.kind) and self.profile.why_not() is None
        return ANSWERS if ok else ("once", "run", "deny")

    def _ask(self, ev: Event) -> Verdict:
        if self.approver is None:
            return Verdict("deny", "non-interactive (no terminal, no approver)", self.name, "deny")
        offered = self._offered(ev)
        try:
            answer, reason = self.approver(ev, offered)
        except Exception as e:  # noqa: BLE001 - an approver that fails denies
            answer, reason = "deny", f"approver failed: {type(e).__name__}: {e}"
        if answer not in offered:
            answer, reason = "deny", f"not an answer: {str(answer)[:80]!r}"
        if answer == "deny":
            return Verdict("deny", reason or "denied", self.name, "deny")
        if answer == "profile":
            try:
                self.profile.add_for(ev)
            except ConfineError as e:
                return Verdict("allow", f"not added to the profile ({e}): allowed for this run",
                               self.name, "run")
            return Verdict("allow", f"added to {self.profile.path}", self.name, "profile")
        return Verdict("allow", reason, self.name, answer)

    def _finish(self, ev: Event, v: Verdict, callbacks: list[Callable[[Verdict], None]],
                latency: float | None = None) -> None:
        if ev.kind == "protected_write" and v.allowed:
            with self._lock:
                if len(self._granted) < MAX_REMEMBERED:
                    self._granted.add(str(ev.subject.get("path", "")))
        if self._events is not None:
            rec: dict[str, Any] = {"kind": "approval", "event": "approval", "of": ev.kind,
                                   "subject": dict(ev.subject), "decision": v.decision, "by": v.by}
            if ev.process:
                rec["process"] = dict(ev.process)
            if v.answer:
                rec["answer"] = v.answer
            if v.reason:
                rec["reason"] = v.reason
            if latency is not None:
                rec["latency_ms"] = round(latency * 1000, 2)
            try:
                self._events(rec)
            except Exception:  # noqa: BLE001 - a failing log sink must not stop the answer
                pass
        for cb in callbacks:
            try:
                cb(v)
            except Exception:  # noqa: BLE001 - one caller's failure is not another's
                pass


def process_of(pid: int | None) -> dict[str, Any]:
    """{pid, exe} of an agent's process, for the question (the exe is shown, never trusted)."""
    if not pid:
        return {}
    out: dict[str, Any] = {"pid": pid}
    try:
        out["exe"] = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        pass
    return out
