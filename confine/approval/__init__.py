"""The approval engine (issue 25): one decision, allow, deny or ask, for every kind of
action outside the pre-bounded space, and the approvers that answer "ask".

Public API (other packages call only this):
    Event(kind, subject, process)       what is to be decided (engine.Event documents subjects)
    Verdict(decision, reason, by, answer)
    Engine.decide(event, wait=None, ask=False) -> Verdict   blocking, thread-safe
    Engine.submit(event, done, ask=False)                   non-blocking: done(verdict) later
      (ask=True: the caller's own policy decided "ask": the gateway's host rules,
      a credential binding's or the ssh_agent section's decision)
    Engine.asks(kind) -> bool                       may anything of this kind be allowed/asked
    build(policy, ...) -> Engine                    the run's engine
Kinds: network, unix_socket, protected_write, deletions, credential, exec
(docs/approvals.md), and ssh_agent (asked only: its policy is the ssh_agent
section). Every question of a run, of every kind, goes through its one Engine:
one queue, one approver, one memory, one event per decision. `exec` is a guardrail, never a boundary: a program can
always be reached another way (an interpreter, a copy).

Threat: see engine.py (flooding, unclear answers) and approvers.py (the agent
answering its own question). Layering: imports policy (the rules), errors,
record, gateway.rules (profile entries), gateway.approve (the gateway's
question and answer shapes, network.py adapts them); runtime wires it in, the gateway and
the mediator are handed callables and never import the runtime.
"""
from __future__ import annotations

from typing import Any, Callable

from .approvers import CommandApprover, SocketApprover, TtyApprover, choose, frame, read_frame
from .engine import ANSWERS, KINDS, Approver, Engine, Event, Verdict, process_of
from .profile import ProfileWriter, _builtin_dirs


def build(policy: Any, *, command: str | None = None, socket_path: str | None = None,
          events: Callable[[dict[str, Any]], None] | None = None, run: str = "",
          validate: Callable[[str], None] | None = None, tty: str = "/dev/tty",
          timeout: float | None = None) -> Engine:
    """The run's engine: the profile's approvals, the approver the flags chose (the
    one every kind asks through: network, credential uses, ssh-agent signatures, ...)."""
    approver, name = choose(command, socket_path, tty=tty, timeout=timeout, run=run,
                            workdir=policy.workdir)
    writer = ProfileWriter(policy.sources[0] if policy.sources else None,
                           builtin_dirs=_builtin_dirs(), validate=validate)
    return Engine(policy.approvals, approver, name, profile=writer, events=events)


__all__ = ["ANSWERS", "KINDS", "Approver", "CommandApprover", "Engine", "Event", "ProfileWriter",
           "SocketApprover", "TtyApprover", "Verdict", "build", "choose", "frame", "process_of",
           "read_frame"]
