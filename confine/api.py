"""The one entry point the CLI and agent frameworks share.

    import confine
    status = confine.run(["pytest", "-q"], profile="default", workdir="/srv/agent/repo")

For more than the status (the child's steps, the exit check's report), use
`confine.runtime.session.Session` directly.
"""
from __future__ import annotations

from collections.abc import Collection, Sequence

from .errors import default_warn
from .plan import Plan
from .runtime.session import Request, Result, Session, Warn, refuse_missing
from .runtime.workdir import check_workdir, remove_tree

__all__ = ["check_workdir", "prepare", "refuse_missing", "remove_tree", "run", "run_result"]


def _request(argv: Sequence[str], profile: str, workdir: str | None, read: Sequence[str],
             write: Sequence[str], env: Sequence[str], user: str | None, force_workdir: bool,
             apparmor: str | None, selinux_context: str | None) -> Request:
    return Request(argv=list(argv), profile=profile, workdir=workdir, read=tuple(read),
                   write=tuple(write), env=tuple(env), user=user, force_workdir=force_workdir,
                   apparmor=apparmor, selinux_context=selinux_context)


def prepare(argv: Sequence[str], *, profile: str = "default", workdir: str | None = None,
            read: Sequence[str] = (), write: Sequence[str] = (), env: Sequence[str] = (),
            user: str | None = None, force_workdir: bool = False, apparmor: str | None = None,
            selinux_context: str | None = None, protect: bool = True) -> Plan:
    """The plan a run would execute (what --dry-run prints); nothing is left behind."""
    with Session(_request(argv, profile, workdir, read, write, env, user, force_workdir,
                          apparmor, selinux_context), protect=protect) as s:
        return s.plan


def run_result(argv: Sequence[str], *, profile: str = "default", workdir: str | None = None,
               read: Sequence[str] = (), write: Sequence[str] = (), env: Sequence[str] = (),
               user: str | None = None, allow_degraded: bool | Collection[str] = False,
               force_workdir: bool = False, warn: Warn | None = None,
               apparmor: str | None = None, selinux_context: str | None = None) -> Result:
    """Run argv confined; returns its status, the child's steps and the exit-check report.
    Raises ConfineError (status 125/126/127) for confine's own failures."""
    with Session(_request(argv, profile, workdir, read, write, env, user, force_workdir,
                          apparmor, selinux_context), warn=warn or default_warn,
                 create_state=True) as s:
        return s.run(allow_degraded)


def run(argv: Sequence[str], *, profile: str = "default", workdir: str | None = None,
        read: Sequence[str] = (), write: Sequence[str] = (), env: Sequence[str] = (),
        user: str | None = None, allow_degraded: bool | Collection[str] = False,
        force_workdir: bool = False, warn: Warn | None = None, apparmor: str | None = None,
        selinux_context: str | None = None) -> int:
    """Run argv confined; returns its exit status (128+N if killed by signal N).
    Raises ConfineError (status 125/126/127) for confine's own failures."""
    return run_result(argv, profile=profile, workdir=workdir, read=read, write=write, env=env,
                      user=user, allow_degraded=allow_degraded, force_workdir=force_workdir,
                      warn=warn, apparmor=apparmor, selinux_context=selinux_context).status
