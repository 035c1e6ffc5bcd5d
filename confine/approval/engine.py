"""The engine: one decision (allow, deny, ask) for every kind of action outside the bounds.

Job: an `Event` (a kind, what it is about, which process) gets a `Verdict`:
the profile's first matching rule or the kind's default (policy/approvals.py);
"ask" is put to the run's approver (approvers.py) and its answer applied.

The threats, and the answer to each:
- an unclear answer allows: only an explicit once/run/profile allows; no
  approver, a timeout, a dead decider, an approver that fails, a question the
  queue cannot take: deny, with the reason;
- an agent flooding the person: one question at a time, of every kind (a
  single worker thread: the gateway's, the credential swap's, the
  ssh-agent's and the mediator's questions share one worker), the same
  question asked once while it waits (concurrent callers share the answer),
  at most MAX_PENDING waiting (more are denied at once);
- a flood of one kind starving the others (endless DNS names while a
  credential's use waits): at most MAX_PENDING_KIND of the waiting are of one
  kind, and the kinds take turns (each kind's own questions in the order
  asked), so a question of another kind is next, not 31st; every
  answer but "once" remembered for the run, denials included, by the same
  rule for every kind (Event.key), and what is remembered bounded
  (MAX_REMEMBERED);
- an answer about one kind taken for another: what is remembered is keyed by
  the kind first, so a "run" for a host never answers a credential's use or
  a signature toward it;
- the agent answering its own question: the approvers never read the agent's
  stdin (see approvers.py);
- a caller left waiting: `decide` takes a wait; `submit` never blocks (the
  mediator's single thread must go on answering other calls), its callback
  runs on the engine's thread once the answer is in. A caller that gave up
  waiting (a DNS query, which the client retries) finds an "once" answer
  kept ONCE_HOLD seconds.

Every verdict goes to the run's event stream (one dict, kind "approval").
"""
from __future__ import annotations

import os
import signal
import threading
import time
from collections import deque
from typing import Any, Callable, Mapping

from ..errors import ConfineError, printable
from ..policy.approvals import DEFAULTS, FIELD, Approvals
from ..record import dataclass, field

KINDS = tuple(DEFAULTS)
# Kinds whose only policy is the caller's own (the ssh_agent section decides
# allow, deny or ask): never ruled by `approvals:`, submitted with ask=True.
ASK_ONLY = ("ssh_agent",)
ALLOW = ("once", "run", "profile")
ANSWERS = (*ALLOW, "deny")
MAX_REMEMBERED = 4096     # answers remembered for the run (the agent chooses the subjects)
MAX_PENDING = 32          # questions waiting for the person; more are denied at once
MAX_PENDING_KIND = 16     # ... of which of one kind: the rest stays open to the others
ONCE_HOLD = 60.0          # an "once" nobody was waiting for any more (a DNS retry) is kept this long
# What an answer is remembered by, beyond the field rules match (policy FIELD):
# a destination is a host and a port, a credential's use its name and host, a
# signature its key and what it is for.
_KEY = {"network": ("host", "port"), "credential": ("name", "host"),
        "ssh_agent": ("key", "host", "port", "namespace")}
Key = tuple[Any, ...]

Log = Callable[[dict[str, Any]], None]


@dataclass(frozen=True)
class Event:
    """An action to decide. subject, by kind (docs/approvals.md):
    network {host, port, via, entry}; unix_socket {path}; protected_write {path
    (workdir-relative)}; deletions {count, path}; credential {name, use, host, port,
    method, path}; ssh_agent {key, use, host, port, namespace}; exec {path}.
    process: {pid, exe, cmdline} of the agent's process, where known."""
    kind: str
    subject: Mapping[str, Any]
    process: Mapping[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> Key:
        """What an answer is remembered by: the kind, then the subject's field rules
        match (_KEY where that is not all of it)."""
        if self.kind == "deletions":
            return ("deletions", "")      # a run's deletions are one question, not one per file
        names = _KEY.get(self.kind) or (FIELD[self.kind][0],)
        return (self.kind, *(_hashable(self.subject.get(n)) for n in names))

    @property
    def wider(self) -> Key | None:
        """A key whose denial denies this event too: a lookup denied denies every port."""
        if self.kind == "network" and self.subject.get("port") is not None:
            return ("network", _hashable(self.subject.get("host")), None)
        return None

    def related(self) -> tuple[Key, ...]:
        """Keys a "run" for this event allows too: a destination allowed for the run
        answers its lookup, and a lookup allowed is the name on 443 (what an entry
        without a port means)."""
        if self.kind != "network":
            return ()
        host, port = self.key[1:]
        return (("network", host, 443 if port is None else None),)

    def follows(self) -> tuple[Key, ...]:
        """Keys an "once" for this event answers too: the connection that follows a
        lookup is the same request."""
        if self.kind == "network" and self.subject.get("port") is None:
            return (("network", self.key[1], 443),)
        return ()

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
            if s.get("method") and s.get("host"):
                return (f"to send {printable(str(s.get('name')))} with {printable(str(s['method']))} "
                        f"{printable(str(s['host']))}{printable(str(s.get('path') or ''))}")
            return f"use credential {printable(str(s.get('name')))}" + (
                f" ({printable(str(s['use']))})" if s.get("use") else "")
        if self.kind == "ssh_agent":
            if s.get("use") == "file":
                return (f"ssh-agent to sign a file with {printable(str(s.get('key')))} for "
                        f"sshsig:{printable(str(s.get('namespace')))}")
            port = s.get("port")
            return (f"ssh-agent to sign with {printable(str(s.get('key')))} for "
                    f"{printable(str(s.get('host')))}" + (f":{port}" if port not in (None, 22) else ""))
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


def _hashable(v: Any) -> Any:
    return v if v is None or isinstance(v, (str, int)) else str(v)


@dataclass
class _Pending:
    event: Event
    callbacks: list[Callable[[Verdict], None]] = field(default_factory=list)
    asked_at: float = 0.0
    waiting: int = 0              # callers still waiting (decide's wait not run out)


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
        self._allowed: set[Key] = set()
        self._denied: set[Key] = set()
        self._once: dict[Key, float] = {}      # key -> until (monotonic): an "once" held
        self._pending: dict[Key, _Pending] = {}
        self._queues: dict[str, deque[_Pending]] = {}   # kind -> its questions, in order
        self._turns: deque[str] = deque()                # kinds with a question, next first
        self._asking: str | None = None                  # the kind being asked: back in line after
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
    def decide(self, ev: Event, wait: float | None = None, *, ask: bool = False) -> Verdict:
        """The verdict, waiting at most `wait` seconds for an answer (None: until
        the approver's own timeout); Verdict("pending") if it is not in yet.
        ask: the caller's own policy decided "ask" (the gateway's host rules, a
        binding's or the ssh_agent section's decision): the profile's
        `approvals:` rules are not consulted again."""
        box: list[Verdict] = []
        got = threading.Event()

        def done(v: Verdict) -> None:
            box.append(v)
            got.set()
        p = self._submit(ev, done, ask)
        if not got.wait(wait) and p is not None:
            with self._lock:
                if not got.is_set():
                    p.waiting -= 1       # gave up: an "once" is then held for the retry
        return box[0] if box else Verdict("pending", "the question is not answered yet", self.name)

    def submit(self, ev: Event, done: Callable[[Verdict], None], *, ask: bool = False) -> None:
        """Decide without blocking: `done(verdict)` runs here when no question is
        needed, else on the engine's thread once answered."""
        self._submit(ev, done, ask)

    def _submit(self, ev: Event, done: Callable[[Verdict], None], ask: bool) -> _Pending | None:
        if ev.kind in ASK_ONLY and ask:
            decision, rule = "ask", ""
        elif ev.kind not in DEFAULTS:
            self._finish(ev, Verdict("deny", f"unknown kind {ev.kind!r}", "engine"), [done])
            return None
        elif ask:
            decision, rule = "ask", ""
        else:
            decision, rule = self.approvals.decide(ev.kind, dict(ev.subject))
        if decision != "ask":
            self._finish(ev, Verdict(decision, "", rule), [done])
            return None
        key = ev.key
        with self._lock:
            hit = self._remembered(ev)
            if hit is None:
                p = self._pending.get(key)
                if p is None and len(self._pending) >= MAX_PENDING:
                    hit = Verdict("deny", f"{MAX_PENDING} questions are already waiting", self.name)
                elif p is None and sum(q.event.kind == ev.kind for q in self._pending.values()) \
                        >= MAX_PENDING_KIND:
                    hit = Verdict("deny", f"{MAX_PENDING_KIND} questions of kind {ev.kind} are "
                                  "already waiting", self.name)
                elif p is None:
                    p = _Pending(ev, asked_at=time.monotonic())
                    self._pending[key] = p
                    q = self._queues.setdefault(ev.kind, deque())
                    if not q and ev.kind != self._asking:
                        self._turns.append(ev.kind)
                    q.append(p)
                    self._start_worker()
                    self._wake.notify()
                if p is not None:
                    p.callbacks.append(done)
                    p.waiting += 1
                    return p
        assert hit is not None
        self._finish(ev, hit, [done])
        return None

    def submit_for(self, kind: str, subject: Mapping[str, Any], pid: int | None,
                   done: Callable[[Verdict], None]) -> None:
        """submit() for a caller that knows the agent's process only by its pid
        (the mediator: it imports nothing of the engine)."""
        self.submit(Event(kind, dict(subject), process_of(pid)), done)

    def _remembered(self, ev: Event) -> Verdict | None:
        key, wider = ev.key, ev.wider
        if key in self._denied or (wider is not None and wider in self._denied):
            return Verdict("deny", "denied earlier in this run", "remembered", "deny")
        if key in self._allowed:
            return Verdict("allow", "allowed earlier in this run", "remembered", "run")
        until = self._once.pop(key, None)
        if until is not None and until >= time.monotonic():
            return Verdict("allow", "allowed once", "remembered", "once")
        return None

    def _remember(self, ev: Event, v: Verdict, waiting: int) -> None:
        """The same for every kind: a deny and a run (or profile) answer for the
        rest of the run, an once for the caller that asked (and held a while for
        one that gave up waiting)."""
        if len(self._allowed) + len(self._denied) + len(self._once) >= MAX_REMEMBERED:
            return   # bounded: later questions are asked again
        key = ev.key
        if v.answer == "deny":
            self._denied.add(key)
        elif v.answer in ("run", "profile"):
            self._allowed.add(key)
            self._allowed.update(ev.related())
        elif v.answer == "once":
            until = time.monotonic() + ONCE_HOLD
            for k in ev.follows():
                self._once[k] = until
            if waiting <= 0:
                self._once[key] = until

    def _start_worker(self) -> None:
        if self._worker is None:
            self._worker = threading.Thread(target=self._work, daemon=True, name="confine-approval")
            self._worker.start()

    def _work(self) -> None:
        # the terminal is ours to read only in the foreground; never stop the supervisor for it
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTTIN, signal.SIGTTOU})
        while True:
            with self._lock:
                while not self._turns:
                    self._wake.wait()
                kind = self._asking = self._turns.popleft()
                p = self._queues[kind].popleft()
            v = self._ask(p.event)
            with self._lock:
                # its next question after those of the kinds that waited meanwhile
                self._asking = None
                if self._queues[kind]:
                    self._turns.append(kind)
                self._pending.pop(p.event.key, None)
                self._remember(p.event, v, p.waiting)
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


def process_of(pid: int | None, exe: str | None = None, cmdline: str = "") -> dict[str, Any]:
    """{pid, exe, cmdline} of an agent's process, for the question (shown, never
    trusted); exe read from /proc where the caller does not know it."""
    if not pid:
        return {}
    out: dict[str, Any] = {"pid": pid}
    if exe is None:
        try:
            exe = os.readlink(f"/proc/{pid}/exe")
        except OSError:
            pass
    if exe:
        out["exe"] = exe
    if cmdline:
        out["cmdline"] = cmdline
    return out
