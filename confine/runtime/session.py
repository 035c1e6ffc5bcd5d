"""One confined run, start to finish: a context manager that owns its resources.

    with Session(Request(argv=["pytest"], workdir="/srv/repo")) as s:
        result = s.run()

Entering resolves the identity and workdir, makes the private TMPDIR, loads
the policy, reads the host once, snapshots the protected workdir paths and
compiles the plan; `run` refuses missing protections, launches, and checks
the protected paths after the agent exits; leaving removes the TMPDIR.
"""
from __future__ import annotations

import os
import re
import signal
import threading
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfineError, default_warn
from ..paths import is_under
from ..plan import HostFacts, Lsm, Plan, Protected, compile, features
from ..plan.compile import unreachable_servers
from ..plan.identity import resolve as resolve_identity
from ..policy import load as _load
from ..protect.report import _safe
from .events import Events
from .workdir import check_workdir, make_tmp, remove_tree

Warn = Callable[[str], None]

# Held from the start of a run until its exit check is done.
_HELD = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
# Ignored during the exit check only: while the agent runs, job control must
# stop the supervisor with it (the shell waits for the supervisor).
_STOPS = (signal.SIGTSTP, signal.SIGTTOU, signal.SIGTTIN)


class _SignalHold:
    """Record (do not act on) ordinary terminating signals until release()."""

    def __init__(self) -> None:
        self.got: list[int] = []
        self.old: dict[int, Any] = {}
        if threading.current_thread() is not threading.main_thread():
            return          # signal handlers are the main thread's: nothing to hold here
        for s in _HELD:
            self.old[s] = signal.signal(s, self._note)

    def _note(self, signo: int, _frame: object) -> None:
        self.got.append(signo)

    def also_stops(self) -> None:
        if self.old:
            for s in _STOPS:
                self.old[s] = signal.signal(s, signal.SIG_IGN)

    def release(self) -> list[str]:
        for s, h in self.old.items():
            signal.signal(s, h)
        self.old = {}
        return [signal.Signals(s).name for s in dict.fromkeys(self.got)]


@dataclass(frozen=True)
class Request:
    argv: Sequence[str]
    profile: str = "default"
    workdir: str | None = None
    read: Sequence[str] = ()
    write: Sequence[str] = ()
    env: Sequence[str] = ()
    user: str | None = None
    force_workdir: bool = False
    apparmor: str | None = None
    selinux_context: str | None = None
    log: str | None = None              # --log FILE: every decision as a JSON line (events.py)


@dataclass
class Result:
    status: int
    steps: list[str] = field(default_factory=list)   # the child's steps, as it began them
    report: Any = None                                # protect Report of the exit check


def _resolve_lsm(apparmor: str | None, selinux_context: str | None, host: HostFacts) -> Lsm:
    """Validate what can be validated before the run (a profile that is not
    loaded); leave 'not enabled' to the planner, which lists it as missing."""
    from ..kernel import lsm
    if apparmor and host.apparmor and lsm.apparmor_profile_loaded(apparmor) is False:
        raise ConfineError(f"--apparmor {apparmor}: no such profile is loaded (load it with "
                           "`apparmor_parser -r FILE`, see docs/export.md)")
    se = selinux_context
    if se and host.selinux and ":" not in se:
        se = lsm.selinux_context_with_type(se)
    return Lsm(apparmor=apparmor or None, selinux=se or None)


def refuse_missing(plan: Plan, allow_degraded: bool | Collection[str] | None,
                   warn: Warn = default_warn) -> None:
    """allow_degraded: True accepts every missing protection; a collection of
    feature names accepts exactly those. Each accepted one is named."""
    known = {m.feature for m in plan.missing}
    if allow_degraded not in (True, False, None):
        assert not isinstance(allow_degraded, bool) and allow_degraded is not None
        for name in allow_degraded:
            if name not in known and name not in features.NAMES:
                raise ConfineError(f"--degrade {name}: no such protection (known: "
                                   f"{', '.join(sorted(features.NAMES))})")
    refused = [m for m in plan.missing
               if not (allow_degraded is True
                       or (allow_degraded and not isinstance(allow_degraded, bool)
                           and (m.feature in allow_degraded
                                or ((m.feature.startswith("mount_namespace.")
                                     or m.feature == "pid_namespace")
                                    and "mount_namespace" in allow_degraded))))]
    if refused:
        first = refused[0]
        more = f" (and {len(refused) - 1} more)" if len(refused) > 1 else ""
        raise ConfineError(f"cannot enforce {first.feature}: {first.detail}{more}; "
                           f"refusing to run (--degrade {first.feature} or --allow-degraded "
                           "runs without it)")
    for m in plan.missing:
        warn(f"degraded: NOT enforced: {m.feature}: {m.detail}")


class Session:
    def __init__(self, req: Request, *, warn: Warn = default_warn, protect: bool = True,
                 host: HostFacts | None = None, parent_env: dict[str, str] | None = None,
                 create_state: bool = False):
        self.req = req
        self.create_state = create_state   # make the profile's missing `state:` (a run)
        self.warn = warn
        self.tmp: str | None = None
        self._hold: _SignalHold | None = None
        self.snapshot: Any = None
        self.guard: Any = None
        self.events: Events = Events(None, warn)
        self.plan: Plan = self._prepare(protect, host,
                                        dict(os.environ) if parent_env is None else parent_env)

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        try:
            self.events.close()
            if self.tmp is not None:
                if not remove_tree(self.tmp):
                    self.warn(f"could not remove the run's TMPDIR {_safe(self.tmp)}: remove it "
                              "by hand")
                self.tmp = None
        finally:
            # held through the removal of the TMPDIR too: it is the agent's
            if self._hold is not None:
                for name in self._hold.release():
                    self.warn(f"{name} received: held until the exit check and the cleanup "
                              "were done")
                self._hold = None

    def _prepare(self, protect: bool, host: HostFacts | None,
                 parent_env: dict[str, str]) -> Plan:
        req = self.req
        if not req.argv:
            raise ConfineError("no command given (usage: confine exec [OPTIONS] -- CMD [ARGS...])")
        for item in req.env:
            name = item.split("=", 1)[0]
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                raise ConfineError(f"--env {item!r}: invalid variable name")
            if "=" not in item and name not in parent_env:
                raise ConfineError(f"--env {name}: not set in this environment, so there is "
                                   f"nothing to pass (set it with --env {name}=VALUE)")
        wd = os.path.abspath(req.workdir or os.getcwd())
        check_workdir(wd, [os.path.expanduser("~")], req.force_workdir)
        ident = resolve_identity(os.path.realpath(wd), req.user)
        homes = {ident.home, os.path.expanduser("~")}
        wd = check_workdir(wd, sorted(homes), req.force_workdir)
        for p in list(req.read) + list(req.write):
            if not os.path.exists(os.path.expanduser(p)):
                raise ConfineError(f"{p} does not exist (from --read/--write)")
        self.tmp = make_tmp(ident.uid, ident.gid)
        try:
            policy = _load.load(req.profile, workdir=wd, home=os.path.realpath(ident.home),
                                create_state=self.create_state,
                                tmp=self.tmp, extra_read=req.read, extra_write=req.write)
            for d in policy.deny:
                if is_under(wd, d.path):
                    raise ConfineError(f"refusing workdir {wd}: it lies inside the protected "
                                       f"secret {d.path}")
            facts = host if host is not None else HostFacts.read(ident.started_as_root)
            lsm = _resolve_lsm(req.apparmor, req.selinux_context, facts)
            protected = self._snapshot(policy, ident.home, facts) if protect else None
            return compile(policy, req.argv, ident, facts, parent_env=parent_env,
                           cli_env=req.env, lsm=lsm, protected=protected)
        except BaseException:
            self.close()
            raise

    def _snapshot(self, policy: Any, home: str, facts: HostFacts) -> Protected:
        from .. import protect
        try:
            snap = protect.snapshot(policy.workdir, protect.effective(policy), home=home)
        except (OSError, ValueError) as e:
            raise ConfineError(f"cannot snapshot the protected workdir paths: {e}") from None
        self.snapshot = snap
        guard = facts.seccomp_user_notif and bool(snap.patterns)
        if guard:
            self.guard = protect.Guard.from_snapshot(snap)
        return Protected(mount_plan=snap.mount_plan, description=snap.describe(), guard=guard)

    def run(self, allow_degraded: bool | Collection[str] | None = False) -> Result:
        from .launch import launch
        plan, say = self.plan, self.warn
        if self.snapshot is None:
            raise ConfineError("this session was prepared without the protected-path snapshot")
        refuse_missing(plan, allow_degraded, say)
        if self.req.log is not None:
            self.events = Events(self.req.log, say)
        for port in unreachable_servers(plan.policy):
            say(f"network.bind_tcp lets the agent listen on port {port}, but not connect to it "
                f"(add {port} to network.connect_tcp to reach its own server)")
        guarded = self.guard is not None
        if not plan.mount_ns:
            say("protected workdir paths (.git/hooks, .git/config, .envrc, ...) are NOT "
                "read-only for this run (no mount namespace): "
                + ("writes and new names are refused by name, but deleting them or renaming "
                   "them away is only reverted when the agent exits" if guarded
                   else "changes are only reverted when the agent exits"))
        for path, why in self.snapshot.guard_only:
            say(f"protected path {_safe(path)} has no read-only bind ({why}): "
                + ("writes to it are refused by name and inode; other changes are reverted at exit"
                   if guarded else "it is only checked at exit"))
        result = Result(status=125)
        # From here until the exit check is done, ordinary signals do not end
        # confine: a Ctrl-C or SIGTERM during the check would leave the agent's
        # plants in place with nothing said.  While the agent runs, launch()
        # blocks and forwards them as before; the child resets the handlers.
        hold = self._hold = _SignalHold()
        try:
            outcome = launch(plan, guard=self.guard, warn=say)
            result.status, result.steps = outcome.status, outcome.steps
        except OSError as e:
            raise ConfineError(f"setup failed: {e.strerror or e}") from None
        finally:
            hold.also_stops()
            result.report = self._exit_check(plan.mount_ns, say)
        return result

    def _exit_check(self, mount_ns: bool, say: Warn) -> Any:
        """verify_and_revert and its report.  A failure of the check is said
        loudly and never replaces the agent's exit status."""
        import sys

        from .. import protect
        try:
            report = protect.verify_and_revert(self.snapshot, trust_mounts=mount_ns)
        except Exception as e:  # noqa: BLE001 - never silently: the check did not happen
            say(f"PROTECTED PATHS NOT CHECKED after the run (the check failed: "
                f"{_safe(f'{type(e).__name__}: {e}')}): inspect .git/hooks, "
                ".git/config, .envrc, .vscode and the other protected paths before running "
                "git or opening the editor in the workdir")
            return None
        if report.alerts or report.failed:
            try:
                print(protect.format_report(report), file=sys.stderr, flush=True)
            except (OSError, ValueError):
                pass    # stderr is gone: the report stays in result.report and REPORT.txt
        return report
