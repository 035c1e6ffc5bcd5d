"""The one entry point the CLI and agent frameworks share.

    import confine
    status = confine.run(["pytest", "-q"], profile="default", workdir="/srv/agent/repo")

The keyword options are the fields of `confine.runtime.session.Request`
(profile, workdir, read, write, env, user, force_workdir, apparmor,
selinux_context, log, ...); an unknown one is a TypeError naming it.
For more than the status (the child's steps, the exit check's report), use
`run_result` or `confine.runtime.session.Session` directly.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Collection, Sequence
from typing import Any

from .errors import default_warn
from .plan import Plan
from .runtime.session import Request, Result, Session, Warn, refuse_missing
from .runtime.workdir import check_workdir, remove_tree

__all__ = ["check_workdir", "prepare", "refuse_missing", "remove_tree", "run", "run_result"]

_FIELDS = frozenset(f.name for f in dataclasses.fields(Request)) - {"argv"}


def _request(argv: Sequence[str], options: dict[str, Any]) -> Request:
    unknown = sorted(set(options) - _FIELDS)
    if unknown:
        raise TypeError(f"confine: unknown option(s) {', '.join(unknown)} (known: "
                        f"{', '.join(sorted(_FIELDS))})")
    for k in ("read", "write", "env", "allow_host"):
        if k in options:
            options[k] = tuple(options[k])
    return Request(argv=list(argv), **options)


def prepare(argv: Sequence[str], *, protect: bool = True, **options: Any) -> Plan:
    """The plan a run would execute (what --dry-run prints); nothing is left behind."""
    with Session(_request(argv, options), protect=protect) as s:
        return s.plan


def run_result(argv: Sequence[str], *, allow_degraded: bool | Collection[str] = False,
               warn: Warn | None = None, **options: Any) -> Result:
    """Run argv confined; returns its status, the child's steps and the exit-check report.
    Raises ConfineError (status 125/126/127) for confine's own failures."""
    with Session(_request(argv, options), warn=warn or default_warn, create_state=True) as s:
        return s.run(allow_degraded)


def run(argv: Sequence[str], *, allow_degraded: bool | Collection[str] = False,
        warn: Warn | None = None, **options: Any) -> int:
    """Run argv confined; returns its exit status (128+N if killed by signal N).
    Raises ConfineError (status 125/126/127) for confine's own failures."""
    return run_result(argv, allow_degraded=allow_degraded, warn=warn, **options).status
