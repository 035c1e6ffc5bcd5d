"""The network kind (`network.default: ask`): a destination no host rule decides,
put to the run's engine.

The gateway and its DNS server call an `Asker` (the callable `Question ->
Answer` of gateway/approve.py); it is only an adapter: the question becomes
the engine's network `Event` and goes into the run's one queue, to the run's
one approver, and its answer into the run's one memory (engine.py). What is
particular to destinations is said by the event's keys there: a lookup (no
port yet) denied denies every port, a "run" answers the lookup and the
connection alike, an "once" for a lookup covers the connection that follows
it, and a DNS query waits a bounded time (`Question.wait`: its client
retries) and finds the answer kept on the retry.
The gateway asks only where `Rules.decide` finds no rule (an explicit deny is
never asked).
"""
from __future__ import annotations

from typing import Any, Callable

from ..errors import ConfineError
from ..gateway.approve import Answer, Question
from ..policy.approvals import Approvals
from .approvers import choose
from .engine import Engine, Event, Verdict
from .profile import ProfileWriter, _builtin_dirs

Log = Callable[[dict[str, Any]], None]


def event_of(q: Question) -> Event:
    """The gateway's question as the engine's network event (what the approvers get)."""
    return Event("network", {"host": q.host, "port": q.port, "via": q.via, "entry": q.entry},
                 {k: v for k, v in (("pid", q.pid), ("exe", q.exe)) if v is not None})


def answer_of(v: Verdict) -> Answer:
    if v.decision == "pending":
        return Answer("pending", v.by, v.reason)
    if not v.allowed:
        return Answer("deny", v.by, v.reason)
    return Answer(v.answer or "run", v.by, v.reason)


class Asker:
    """The gateway's `ask`: every question through the run's engine."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.approver = engine.name

    def __call__(self, q: Question) -> Answer:
        # the gateway's host rules decided "ask": the engine's approvals rules are not asked again
        return answer_of(self.engine.decide(event_of(q), q.wait, ask=True))


def make_asker(default: str, approver: str | None, profile_path: str | None, events: Log | None, *,
               tty: str = "/dev/tty", timeout: float | None = None, builtin_dirs: tuple[str, ...] = (),
               validate: Callable[[str], None] | None = None,
               engine: Engine | None = None) -> Callable[[Question], Answer] | None:
    """The gateway's asker for a run: None when `default` is "deny" (nothing is asked).
    engine: the run's (what a run passes: its approver, queue, memory, events and
    profile writer); without one (a gateway on its own), an engine of its own is
    made here: `approver` (--approver CMD) replaces the terminal, without a
    terminal every question is denied; `profile_path` the file "profile" answers
    edit (None: a built-in, never edited), `validate(path)` loads a candidate."""
    if default == "deny":
        return None
    if default != "ask":
        raise ConfineError(f"network.default: {default!r} is not deny or ask")
    if engine is None:
        writer = ProfileWriter(profile_path, builtin_dirs=builtin_dirs or _builtin_dirs(),
                               validate=validate)
        chosen, name = choose(approver, None, tty=tty, timeout=timeout)
        engine = Engine(Approvals(), chosen, name, profile=writer, events=events)
    return Asker(engine)
