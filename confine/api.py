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
import os
import threading
from collections.abc import Collection, Sequence
from typing import Any

from .errors import CommandNotExecutable, CommandNotFound, default_warn
from .plan import HostFacts, Plan
from .record import dataclass, field
from .runtime.session import Request, Result, Session, Warn, refuse_missing
from .runtime.workdir import check_workdir, remove_tree

__all__ = ["Completed", "Sandbox", "check_workdir", "prepare", "refuse_missing", "remove_tree",
           "run", "run_result"]

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
    A command that is not found or not executable is status 127 or 126, as `confine
    exec` exits, with its one line said through `warn`. Raises ConfineError (status 125)
    for confine's own failures."""
    say = warn or default_warn
    with Session(_request(argv, options), warn=say, create_state=True) as s:
        return _started(s, allow_degraded, say)


def _started(s: Session, allow_degraded: bool | Collection[str], say: Warn,
             **kw: Any) -> Result:
    """Session.run, with a command that could not be started as its status (126/127),
    like a shell and `confine exec`, instead of an exception."""
    try:
        return s.run(allow_degraded, **kw)
    except (CommandNotFound, CommandNotExecutable) as e:
        say(str(e))
        return Result(status=e.status)


def run(argv: Sequence[str], *, allow_degraded: bool | Collection[str] = False,
        warn: Warn | None = None, **options: Any) -> int:
    """Run argv confined; returns its exit status (128+N if killed by signal N; 126 and
    127 as a shell: not executable, not found). Raises ConfineError (status 125) for
    confine's own failures."""
    return run_result(argv, allow_degraded=allow_degraded, warn=warn, **options).status


@dataclass
class Completed:
    """One Sandbox.run: like subprocess.CompletedProcess, plus what confine saw."""
    argv: list[str]
    status: int                      # as `confine exec` exits (123, 125-127 included)
    stdout: bytes | None = None      # with capture=True
    stderr: bytes | None = None      # the agent's stderr
    timed_out: bool = False
    # confine's own lines of this run (refusals, the exit check, "command not found"); with
    # capture=True and no warn= given they go only here, never to this process's stderr
    messages: list[str] = field(default_factory=list)
    report: Any = None               # the exit check's protect Report
    steps: list[str] = field(default_factory=list)


class Sandbox:
    """A prepared sandbox for many runs (an agent harness's tool calls):

        with confine.Sandbox(profile="default", workdir="/srv/agent/repo") as sb:
            r = sb.run(["pytest", "-q"], capture=True, timeout=120)
            r.status, r.stdout, r.stderr, r.timed_out

    What cannot change between runs is read once (the host's facts, the
    options' validity); everything the agent can change is judged again on
    every run (its workdir's protected paths: snapshot, guard and exit check;
    the profile files: a changed profile applies to the next run). Each run
    gets a fresh private TMPDIR, and nothing it started outlives it. Options:
    the fields of Request, as for run(). `exclusive=True` (a scratch checkout
    nothing else uses while a run lasts): the workdir's file calls run at native
    speed and new protected names are held at the end of each run instead
    (policy/workdir_mode.py, docs/exclusive.md)."""

    def __init__(self, *, allow_degraded: bool | Collection[str] = False,
                 warn: Warn | None = None, **options: Any):
        self.options = options
        self.allow_degraded = allow_degraded
        self.warn = warn or default_warn
        self.own_warn = warn is not None
        _request(["true"], dict(options))             # unknown options fail here
        self.host: HostFacts | None = None
        # The last run's fanotify group (protect/changes.py), restarted for the next:
        # closing one costs each run a wait for the kernel (4-16 ms).
        self._changes: Any = None
        self._pid = os.getpid()
        self._lock = threading.Lock()

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close what is kept between runs (the workdir's change reports)."""
        self._keep(None)

    def _keep(self, changes: Any) -> None:
        with self._lock:
            old, self._changes, self._pid = self._changes, changes, os.getpid()
        if old is not None and old is not changes:
            old.close()

    def run(self, argv: Sequence[str], *, input: bytes | None = None, capture: bool = False,
            timeout: float | None = None) -> Completed:
        """Run argv confined. input: bytes for its stdin (else /dev/null when
        capturing, else this process's stdin); capture: its stdout and stderr
        as bytes, and confine's own lines in `messages` only (unless the Sandbox was
        given warn=); timeout: seconds, then it and all it started are killed
        (timed_out, status 137)."""
        fds: list[int] = []
        messages: list[str] = []
        quiet = capture and not self.own_warn

        def say(msg: str) -> None:
            messages.append(msg)
            if not quiet:
                self.warn(msg)
        try:
            stdin = out = err = None
            if input is not None:
                stdin = os.memfd_create("confine-stdin", os.MFD_CLOEXEC)
                fds.append(stdin)
                os.write(stdin, input)
                os.lseek(stdin, 0, os.SEEK_SET)
            elif capture:
                stdin = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
                fds.append(stdin)
            if capture:
                out = os.memfd_create("confine-stdout", os.MFD_CLOEXEC)
                err = os.memfd_create("confine-stderr", os.MFD_CLOEXEC)
                fds += [out, err]
            req = _request(argv, dict(self.options))
            with self._lock:                 # a group serves one run at a time
                kept, self._changes = self._changes, None
                if kept is not None and self._pid != os.getpid():
                    # a forked copy of this Sandbox: the group's queue is shared with
                    # the parent, whose reads would take this run's reports
                    kept.close()
                    kept = None
            used = None
            try:
                with Session(req, warn=say, create_state=True, host=self.host,
                             changes=kept) as s:
                    if self.host is None:
                        self.host = s.host
                    try:
                        r = _started(s, self.allow_degraded, say, stdio=(stdin, out, err),
                                     timeout=timeout)
                    finally:
                        used = getattr(s.snapshot, "changes", None)
            finally:
                if kept is not None and kept is not used:
                    kept.close()
                self._keep(used)
            return Completed(argv=list(argv), status=r.status, timed_out=r.timed_out,
                             report=r.report, steps=r.steps, messages=messages,
                             stdout=_read_all(out) if out is not None else None,
                             stderr=_read_all(err) if err is not None else None)
        finally:
            for fd in fds:
                os.close(fd)


def _read_all(fd: int) -> bytes:
    size = os.lseek(fd, 0, os.SEEK_END)
    return os.pread(fd, size, 0) if size else b""
