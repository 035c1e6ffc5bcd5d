"""Per-use decisions: may this request carry the real value of this credential?

The gateway (through runtime/egress.py, which builds a `Judge`) asks before every
swap: the binding, the request's host, port, method and path, and the process
that sent it. The threats, and the answers:
- the value sent where the profile did not bind it: `matches` (host, port,
  method, path prefix) decides first; no match is a refusal, never an ask;
- a use the person wanted to see: `decision: ask` puts each use to the run's
  approval engine (kind "credential": its one queue, approver and memory, the
  same as every other question of the run) with the credential's name, host,
  method, path, process and command line; only an explicit allow allows, an
  approver that fails or times out denies; "run" (and a deny) is remembered
  for that credential and host for the rest of the run, "once" is this use only;
- a record of the use: one event per use (name, host, port, method, path,
  decision, process), never the value.

The matching (host, port, method, path prefix) is `Target.matches` (binding.py), the
same the swap uses: a path with dot segments or escapes is under no prefix.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from .binding import Binding

Emit = Callable[[dict[str, object]], None]


def matches(b: Binding, host: str, port: int | None, method: str, path: str) -> bool:
    return any(t.matches(host, port, method, path) for t in b.targets)


def describe(process: int | str | None) -> tuple[int | None, str, str]:
    """(pid, executable, command line) of the process that sent the request."""
    if not isinstance(process, int):
        return None, str(process or "?"), ""
    try:
        exe = os.readlink(f"/proc/{process}/exe")
    except OSError:
        exe = "?"
    try:
        with open(f"/proc/{process}/cmdline", "rb") as f:
            cmd = f.read(4096).replace(b"\0", b" ").decode("utf-8", "replace").strip()
    except OSError:
        cmd = ""
    return process, exe, cmd


class Judge:
    """One per run: decides each use and logs it. engine: the run's approval engine
    (confine/approval/), which asks; without one (a Judge on its own), one is made
    for it with `approver` as --approver (None: the terminal). ask: replaces the
    engine (tests)."""

    def __init__(self, emit: Emit, approver: str | None = None,
                 ask: Callable[[dict[str, Any]], tuple[bool, str]] | None = None, *,
                 engine: Any = None) -> None:
        self.emit = emit
        self.approver = approver
        self.engine = engine
        self._ask = ask if ask is not None else self._ask_engine

    def decide_use(self, binding: Binding, host: str, method: str, path: str,
                   process: int | str | None = None, *, port: int | None = None) -> bool:
        pid, exe, cmd = describe(process)
        use: dict[str, Any] = {"name": binding.name, "host": host.lower().rstrip("."),
                               "port": port, "method": method.upper(),
                               "path": path.split("?", 1)[0][:300], "pid": pid, "exe": exe,
                               "cmdline": cmd[:300]}
        if not matches(binding, host, port, method, path):
            decision, reason = "deny", "not a bound host, method or path"
        elif binding.decision == "deny":
            decision, reason = "deny", "decision: deny"
        elif binding.decision == "allow":
            decision, reason = "allow", ""
        else:
            ok, reason = self._ask(use)
            decision = "allow" if ok else "deny"
        ev = {"event": "credential_use", **{k: v for k, v in use.items() if v not in (None, "")},
              "decision": decision}
        if reason:
            ev["reason"] = reason
        try:
            self.emit(ev)
        except Exception:  # noqa: BLE001 - a failing log sink must not decide the use
            pass
        return decision == "allow"

    def _ask_engine(self, use: dict[str, Any]) -> tuple[bool, str]:
        """(allowed, "once"/"run"/"deny: reason") from the run's engine."""
        from ..approval import Engine, Event, choose
        from ..policy.approvals import Approvals
        if self.engine is None:
            approver, name = choose(self.approver, None)
            self.engine = Engine(Approvals(), approver, name)
        port = use["port"] or 443
        where = f"https://{use['host']}{'' if port == 443 else ':' + str(port)}{use['path']}"
        subject = {"name": use["name"], "use": f"{use['method']} {where}", "host": use["host"],
                   "port": use["port"], "method": use["method"], "path": use["path"]}
        process = {k: v for k, v in (("pid", use["pid"]), ("exe", use["exe"]),
                                     ("cmdline", use["cmdline"])) if v not in (None, "")}
        # the binding's `decision: ask` decided: the profile's approvals rules are not asked again
        v = self.engine.decide(Event("credential", subject, process), ask=True)
        if v.allowed:
            return True, "once" if v.answer == "once" else "run"
        return False, f"deny{': ' + v.reason if v.reason else ''}"
