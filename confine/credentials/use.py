"""Per-use decisions: may this request carry the real value of this credential?

The gateway (through runtime/egress.py, which builds a `Judge`) asks before every
swap: the binding, the request's host, port, method and path, and the process
that sent it. The threats, and the answers:
- the value sent where the profile did not bind it: `matches` (host, port,
  method, path prefix) decides first; no match is a refusal, never an ask;
- a use the person wanted to see: `decision: ask` puts each use to the person
  (the terminal or --approver, the machinery of `network.default: ask`, through
  the one adapter `_ask` below) with the credential's name, host, method, path,
  process and command line; only an explicit allow allows, an approver that
  fails or times out denies; "run" is remembered for that credential and host
  for the rest of the run, "once" is this use only;
- a record of the use: one event per use (name, host, port, method, path,
  decision, process), never the value.

The matching (host, port, method, path prefix) is `Target.matches` (binding.py), the
same the swap uses: a path with dot segments or escapes is under no prefix.
"""
from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable
from typing import Any

from .binding import Binding

Emit = Callable[[dict[str, object]], None]
MAX_REMEMBERED = 1024


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
    """One per run: decides each use and logs it. `approver` as --approver (None:
    the terminal)."""

    def __init__(self, emit: Emit, approver: str | None = None,
                 ask: Callable[[dict[str, Any]], tuple[bool, str]] | None = None) -> None:
        self.emit = emit
        self.approver = approver
        self._ask = ask if ask is not None else self._ask_default
        self._lock = threading.Lock()
        self._serial = threading.Lock()       # one question at a time
        self._run: set[tuple[str, str]] = set()
        self._backend: Any = None

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
            key = (binding.name, use["host"])
            with self._lock:
                remembered = key in self._run
            if remembered:
                decision, reason = "allow", "allowed for the run earlier"
            else:
                with self._serial:
                    ok, answer = self._ask(use)
                decision, reason = ("allow" if ok else "deny"), answer
                if ok and answer.startswith("run"):
                    with self._lock:
                        if len(self._run) < MAX_REMEMBERED:
                            self._run.add(key)
        ev = {"event": "credential_use", **{k: v for k, v in use.items() if v not in (None, "")},
              "decision": decision}
        if reason:
            ev["reason"] = reason
        try:
            self.emit(ev)
        except Exception:  # noqa: BLE001 - a failing log sink must not decide the use
            pass
        return decision == "allow"

    def _ask_default(self, use: dict[str, Any]) -> tuple[bool, str]:
        return ask(use, self.approver, self)


def ask(use: dict[str, Any], approver: str | None, holder: Any = None) -> tuple[bool, str]:
    """THE adapter to the approval machinery (gateway/approve.py today; the
    approval engine once it moves): (allowed, "once"/"run"/"deny: reason")."""
    from ..gateway import approve
    backend = getattr(holder, "_backend", None)
    if backend is None:
        backend = (approve.CommandBackend(approver) if approver is not None
                   else approve.TtyBackend())
        if holder is not None:
            holder._backend = backend
    q = _question(approve, use)
    try:
        decision, reason = backend(q, False)
    except Exception as e:  # noqa: BLE001 - an approver that fails denies
        return False, f"deny: approver failed: {type(e).__name__}"
    if decision in ("once", "run", "profile"):
        return True, "run" if decision in ("run", "profile") else "once"
    return False, f"deny{': ' + reason if reason else ''}"


def _question(approve: Any, use: dict[str, Any]) -> Any:
    """A Question that shows the use: the terminal shows `shown()`, an approver gets
    host, port, pid, exe, via "credential" and `entry` (name, method, URL, command)."""
    port = use["port"] or 443
    entry = (f"credential {use['name']}: {use['method']} https://{use['host']}"
             f"{'' if port == 443 else ':' + str(port)}{use['path']} "
             f"by {use['cmdline'] or use['exe']}")
    shown = f"to send {use['name']} with {use['method']} {use['host']}{use['path']}"
    q = _question_class(approve)(host=use["host"], port=port, via="credential",
                                 pid=use["pid"], exe=use["exe"])
    object.__setattr__(q, "_entry", entry)
    object.__setattr__(q, "_shown", shown)
    return q


@functools.cache
def _question_class(approve: Any) -> Any:
    class CredentialQuestion(approve.Question):  # type: ignore[misc]
        @property
        def entry(self) -> str:
            return str(self.__dict__["_entry"])

        def shown(self) -> str:
            return str(self.__dict__["_shown"])
    return CredentialQuestion
