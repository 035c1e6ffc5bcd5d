"""Asking the person about deletions (approvals.deletions.ask_above).

Job: ONE function, ask_deletions, puts "the agent is about to delete or
overwrite its Nth file that existed at the start" to the run's approver and
answers allowed or not. It reuses the gateway's backends (gateway/approve.py:
the supervisor's /dev/tty, or `--approver CMD` with one JSON question in and
one answer out) until the approval engine (confine/approval/) takes them:
then this is the one place to rewire.

Threat: as for every question: only an explicit allow ("once" or "run")
allows; no terminal, a timeout, an approver that fails or says anything
else: refused. The paths are the agent's names: escaped when shown.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Sequence
from typing import Any, cast

from ..errors import printable
from ..gateway.approve import APPROVER_TIMEOUT, TTY_TIMEOUT, CommandBackend, TtyBackend


class _Question:
    """What TtyBackend shows (its `shown()`), for a deletion."""
    pid = None
    exe = None

    def __init__(self, count: int, sample: Sequence[str]):
        self.count, self.sample = count, list(sample)

    def shown(self) -> str:
        last = printable(self.sample[-1], backslash=False)[:60] if self.sample else "?"
        return f"to delete or overwrite {self.count} files that existed at the start ({last}...)"


def ask_deletions(count: int, sample_paths: Sequence[str], *, approver: str | None = None,
                  tty: str = "/dev/tty", timeout: float | None = None) -> bool:
    """True only for an explicit allow (once or run) of the run's approver."""
    if approver:
        cmd = CommandBackend(approver, timeout=APPROVER_TIMEOUT if timeout is None else timeout)
        event = {"event": "ask", "version": 1, "kind": "deletions", "count": count,
                 "paths": list(sample_paths)[:20], "choices": ["once", "run", "deny"]}
        try:
            p = subprocess.Popen(cmd.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 env=cmd.env, start_new_session=True, close_fds=True)
        except OSError:
            return False
        try:
            out, status = cmd._talk(p, (json.dumps(event) + "\n").encode())
        finally:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except OSError:
                pass
            p.wait()
        if out is None or status != 0:
            return False
        try:
            ans = json.loads(out.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            return False
        return isinstance(ans, dict) and ans.get("decision") in ("once", "run")
    backend = TtyBackend(tty, TTY_TIMEOUT if timeout is None else timeout)
    decision, _ = backend(cast(Any, _Question(count, sample_paths)), False)
    return decision in ("once", "run")
