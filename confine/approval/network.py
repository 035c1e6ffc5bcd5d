"""The network kind (`network.default: ask`): a destination no rule decides, asked.

The gateway and DNS ask through `Asker`: the engine's rules for this kind are
network.allow/deny (the gateway's own), its approvers are the engine's
(approvers.py: one question at a time across every kind). What differs from
the other kinds is what is remembered:
- a DNS query (no port yet) waits a bounded time: while a question is pending
  the query gets no answer (the client retries); the answer, once given, is
  remembered, so the connection that follows is not asked again;
- the same (host, port) is asked once (concurrent connections wait on the same
  question), every answer but "once" remembered for the run, denials included;
  an "once" nobody waited for any more (a DNS retry) is kept ONCE_HOLD seconds.
The gateway calls the asker where `Rules.decide` finds no rule (an explicit
deny is never asked).
"""
from __future__ import annotations

import signal
import threading
import time
from typing import Any, Callable

from ..errors import ConfineError
from ..record import dataclass, field
from .approvers import choose
from .engine import Event
from .profile import ProfileWriter, _builtin_dirs

Log = Callable[[dict[str, Any]], None]
ALLOW = ("once", "run", "profile")
DECISIONS = (*ALLOW, "deny")
ONCE_HOLD = 60.0          # an "once" nobody was waiting for any more (a DNS retry) is kept this long
MAX_REMEMBERED = 4096     # answers remembered for the run (the agent chooses the hosts)
MAX_PENDING = 32          # questions waiting for the person; more are denied at once (a flood of names)


@dataclass(frozen=True)
class Question:
    host: str                       # a normalised name
    port: int | None                # None: a DNS query (no port yet)
    via: str = "proxy"              # "proxy", "transparent", "dns"
    pid: int | None = None
    exe: str | None = None
    wait: float | None = None       # how long the caller waits; then Answer("pending")

    @property
    def entry(self) -> str:
        """The allow entry this question would add to a profile."""
        return self.host if self.port in (None, 443) else f"{self.host}:{self.port}"

    def shown(self) -> str:
        return f"{self.host} (DNS lookup)" if self.port is None else f"{self.host}:{self.port}"

    @property
    def event(self) -> Event:
        """This question as the engine's network event (what the approvers are given)."""
        return Event("network", {"host": self.host, "port": self.port, "via": self.via,
                                 "entry": self.entry},
                     {k: v for k, v in (("pid", self.pid), ("exe", self.exe)) if v is not None})


@dataclass(frozen=True)
class Answer:
    decision: str                   # once, run, profile, deny, pending (nobody answered yet)
    approver: str                   # "tty", "command NAME", "remembered", "non-interactive", ...
    reason: str = ""

    @property
    def allowed(self) -> bool:
        return self.decision in ALLOW

    @property
    def rule(self) -> str:
        return f"ask {self.decision} ({self.approver})"


Backend = Callable[[Question, bool], tuple[str, str]]   # (question, profile offered) -> (decision, reason)


@dataclass
class _Pending:
    question: Question
    done: threading.Event = field(default_factory=threading.Event)
    answer: Answer | None = None
    waiters: int = 0


class Asker:
    """Remembers answers for the run and puts new questions, one at a time, to a backend."""

    def __init__(self, backend: Backend, approver: str, *, profile: ProfileWriter | None = None,
                 events: Log | None = None) -> None:
        self._backend = backend
        self.approver = approver
        self.profile = profile
        self._events = events
        self._lock = threading.Lock()
        self._allowed: set[tuple[str, int | None]] = set()      # run and profile answers
        self._denied: set[tuple[str, int | None]] = set()
        self._once: dict[tuple[str, int | None], float] = {}    # host, port -> until (monotonic)
        self._pending: dict[tuple[str, int | None], _Pending] = {}
        self._queue: list[_Pending] = []
        self._wake = threading.Condition(self._lock)
        self._worker: threading.Thread | None = None

    # --- what is remembered ---
    def _remembered(self, key: tuple[str, int | None]) -> Answer | None:
        host, port = key
        now = time.monotonic()
        if (host, None) in self._denied or key in self._denied:
            return Answer("deny", "remembered", "denied earlier in this run")
        if port is None:
            if any(h == host for h, _ in self._allowed):
                return Answer("run", "remembered")
        elif key in self._allowed:
            return Answer("run", "remembered")
        until = self._once.pop(key, None)
        if until is not None and until >= now:
            return Answer("once", "remembered", "allowed once")
        return None

    def _remember(self, key: tuple[str, int | None], a: Answer, waiters: int) -> None:
        host, port = key
        if len(self._allowed) + len(self._denied) + len(self._once) >= MAX_REMEMBERED:
            return   # bounded: later questions are asked again (and denied if nobody answers)
        if a.decision == "deny":
            self._denied.add(key)
        elif a.decision in ("run", "profile"):
            self._allowed.add((host, 443 if port is None else port))
        elif a.decision == "once":
            until = time.monotonic() + ONCE_HOLD
            if port is None:
                # a lookup allowed once: the connection that follows it is the same request
                self._once[(host, 443)] = until
            if waiters == 0:
                self._once[key] = until   # the waiter gave up (a DNS retry will come)

    # --- asking ---
    def __call__(self, q: Question) -> Answer:
        key = (q.host, q.port)
        with self._lock:
            hit = self._remembered(key)
            if hit is not None:
                self._log(q, hit)
                return hit
            p = self._pending.get(key)
            if p is None and len(self._pending) >= MAX_PENDING:
                full = Answer("deny", self.approver, f"{MAX_PENDING} questions are already waiting")
                self._log(q, full)
                return full
            if p is None:
                p = _Pending(q)
                self._pending[key] = p
                self._queue.append(p)
                self._start_worker()
                self._wake.notify()
            p.waiters += 1
        p.done.wait(q.wait)
        with self._lock:
            p.waiters -= 1
            a = p.answer
        if a is None:
            return Answer("pending", self.approver, "the question is not answered yet")
        return a

    def _start_worker(self) -> None:
        if self._worker is None:
            self._worker = threading.Thread(target=self._work, daemon=True, name="confine-ask")
            self._worker.start()

    def _work(self) -> None:
        # the terminal is ours to read only in the foreground; never stop the supervisor for it
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTTIN, signal.SIGTTOU})
        while True:
            with self._lock:
                while not self._queue:
                    self._wake.wait()
                p = self._queue.pop(0)
            a = self._decide(p.question)
            with self._lock:
                p.answer = a
                self._pending.pop((p.question.host, p.question.port), None)
                self._remember((p.question.host, p.question.port), a, p.waiters)
                p.done.set()
            self._log(p.question, a)

    def _decide(self, q: Question) -> Answer:
        offered = self.profile is not None and self.profile.why_not() is None
        try:
            decision, reason = self._backend(q, offered)
        except Exception as e:  # noqa: BLE001 - an approver that fails denies
            decision, reason = "deny", f"approver failed: {type(e).__name__}: {e}"
        if decision not in DECISIONS:
            decision, reason = "deny", f"not an answer: {decision[:80]!r}"
        if decision == "profile":
            if not offered or self.profile is None:
                why = self.profile.why_not() if self.profile is not None else "no profile file"
                return Answer("run", self.approver, f"not added to the profile ({why}): allowed for this run")
            try:
                self.profile.add(q.entry)
            except ConfineError as e:
                return Answer("run", self.approver, f"not added to the profile ({e}): allowed for this run")
            return Answer("profile", self.approver, f"added {q.entry} to {self.profile.path}")
        return Answer(decision, self.approver, reason)

    def _log(self, q: Question, a: Answer) -> None:
        if self._events is None:
            return
        ev: dict[str, Any] = {"event": "ask", "host": q.host, "port": q.port, "via": q.via,
                              "decision": a.decision, "approver": a.approver}
        if q.pid is not None:
            ev["pid"] = q.pid
        if q.exe:
            ev["exe"] = q.exe
        if a.reason:
            ev["reason"] = a.reason
        try:
            self._events(ev)
        except Exception:  # noqa: BLE001 - a failing log sink must not stop the answer
            pass


def make_asker(default: str, approver: str | None, profile_path: str | None, events: Log | None, *,
               tty: str = "/dev/tty", timeout: float | None = None, builtin_dirs: tuple[str, ...] = (),
               validate: Callable[[str], None] | None = None,
               backend: tuple[Backend, str] | None = None) -> Callable[[Question], Answer] | None:
    """The asker for a run: None when `default` is "deny" (nothing is asked). `approver`
    (--approver CMD) replaces the terminal; without a terminal every question is denied.
    `profile_path`: the profile file the run loaded (None for a built-in, which is
    never edited); `validate(path)` loads a candidate profile (the policy loader) and
    raises ConfineError if it does not load; backend: (approver, its name) shared with
    the run's engine (approvers.choose), instead of one chosen here."""
    if default == "deny":
        return None
    if default != "ask":
        raise ConfineError(f"network.default: {default!r} is not deny or ask")
    writer = ProfileWriter(profile_path, builtin_dirs=builtin_dirs or _builtin_dirs(), validate=validate)
    if backend is None:
        backend = choose(approver, None, tty=tty, timeout=timeout)
    return Asker(backend[0], backend[1], profile=writer, events=events)
