"""One confined run, start to finish: a context manager that owns its resources.

    with Session(Request(argv=["pytest"], workdir="/srv/repo")) as s:
        result = s.run()

Entering resolves the identity and workdir, makes the private TMPDIR, loads
the policy, reads the host once, snapshots the protected workdir paths and
compiles the plan; `run` refuses missing protections, launches, and checks
the protected paths after the agent exits; leaving removes the TMPDIR.
"""
from __future__ import annotations

import base64
import dataclasses
import os
import re
import signal
import threading
from collections.abc import Callable, Collection, Sequence
from typing import Any

from ..errors import ConfineError, default_warn, printable
from ..paths import is_under
from ..plan import HostFacts, Lsm, Plan, Protected, compile, features
from ..plan.compile import unreachable_servers
from ..plan.identity import Identity
from ..plan.identity import resolve as resolve_identity
from ..policy import load as _load
from ..policy import realpaths, workdir_mode
from ..policy.model import Policy
from ..record import dataclass, field
from . import home as _home
from .events import Events, Screen
from .workdir import check_workdir, make_tmp, private_tmp, private_tmp_dirs, remove_tree

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
    agent_status: bool = False          # keep the agent's 0 even when the exit check acted
    allow_host: Sequence[str] = ()      # --allow-host HOST[:PORT]: added to network.allow
    approver: str | None = None         # --approver CMD: answers the approval engine's questions
    approver_socket: str | None = None  # --approver-socket PATH: a decider on a unix socket (approval/)
    agent_home: bool = True             # HOME inside is the agent's own (runtime/home.py)
    exclusive: bool = False             # --exclusive-workdir (policy/workdir_mode.py)
    credential: Sequence[str] = ()      # --credential NAME=HOST,...: a placeholder inside (credentials/)


# A run whose agent exited 0 but whose exit check reported anything the person
# must look at, or could not check, exits with this (unless agent_status): CI and
# scripts that trust the status must notice. That includes what was only noted (a
# staged protected entry, a commit adding a protected name, "cannot decide"): git
# writes those on the person's next checkout. A nonzero agent status is kept as it is.
EXIT_CHECK_ACTED = 123


@dataclass
class Result:
    status: int
    agent_status: int | None = None                   # the agent's own, when status differs
    steps: list[str] = field(default_factory=list)   # the child's steps, as it began them
    report: Any = None                                # protect Report of the exit check
    timed_out: bool = False                           # killed at the caller's timeout
    held: Any = None                                  # protect.held.Held: kept at exit
    # every protected root's Held, in roots order (the first is `held`; None: not kept)
    held_roots: list[Any] = field(default_factory=list)


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


def _check_log_path(path: str, plan: Plan) -> None:
    """--log FILE is what `confine explain` reads to suggest grants: a file the
    agent can write could be forged (a refusal of ~/.bashrc's directory, a host
    to allow), so it may not lie where the agent writes."""
    real = os.path.realpath(os.path.abspath(os.path.expanduser(path)))
    pol = plan.policy
    for w in [pol.workdir, pol.tmp] + [g.path for g in pol.write]:
        if is_under(real, os.path.realpath(w)):
            raise ConfineError(f"--log {path}: inside {w}, which the agent can write (it could "
                               "forge the log confine explain reads): put it elsewhere, e.g. "
                               "--log ~/confine-run.log")


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
                                or (m.feature.startswith("mount_namespace.")
                                    and "mount_namespace" in allow_degraded))))]
    if refused:
        first = refused[0]
        more = f" (and {len(refused) - 1} more)" if len(refused) > 1 else ""
        raise ConfineError(f"cannot enforce {first.feature}: {first.detail}{more}; "
                           f"refusing to run (--degrade {first.feature} or --allow-degraded "
                           "runs without it)")
    for m in plan.missing:
        warn(f"degraded: NOT enforced: {m.feature}: {m.detail}")


def _check_approver(approver: str | None, policy: Policy, socket_path: str | None = None) -> None:
    """--approver and --approver-socket are bad input unless something will be asked,
    and unless the program exists: said before the run, not as every question denied.
    A decider's socket may come and go: absent when asked, the question is denied."""
    if approver is None and socket_path is None:
        return
    import shlex
    import shutil
    flag = "--approver" if socket_path is None else "--approver-socket"
    if approver is not None and socket_path is not None:
        raise ConfineError("--approver and --approver-socket: choose one")
    if policy.network.default != "ask" and not (
            policy.ssh_agent is not None and policy.ssh_agent.decision == "ask") and not any(
            c.decision == "ask" for c in policy.credentials) and not any(
            policy.approvals.decide(k, {})[0] == "ask" or any(r.decision == "ask" for r in s.rules)
            or s.ask_above is not None for k, s in policy.approvals.kinds):
        raise ConfineError(f"{flag} only applies where something is asked (network.default: ask, "
                           "an approvals: kind or rule that says ask, a credential or ssh_agent "
                           "with decision: ask); this profile asks nothing")
    if approver is None:
        return
    try:
        argv = shlex.split(approver)
    except ValueError as e:
        raise ConfineError(f"--approver {approver!r}: {e}") from None
    if not argv or shutil.which(argv[0]) is None:
        raise ConfineError(f"--approver {approver!r}: {argv[0] if argv else 'no command'}: "
                           "command not found")


class Session:
    def __init__(self, req: Request, *, warn: Warn = default_warn, protect: bool = True,
                 host: HostFacts | None = None, parent_env: dict[str, str] | None = None,
                 create_state: bool = False, changes: Any = None):
        self.req = req
        self.kept_changes = changes        # a Sandbox's fanotify group from its last run
        self.create_state = create_state   # make the profile's missing `state:` (a run)
        self.warn = warn
        self.tmp: str | None = None
        self.tmp_home: str | None = None   # the agent home of this run alone (home.py)
        self.copies: list[dict[str, Any]] = []   # filesystem.copied: each file at the start
        self._hold: _SignalHold | None = None
        self.snapshot: Any = None          # the first protected root's (the workdir's)
        self.snapshots: list[Any] = []     # every protected root's, in roots order
        self.roots: tuple[Any, ...] = ()   # protect.roots.Root
        self.guard: Any = None
        self.exclusive = False             # nothing outside uses the workdir (workdir_mode.py)
        self.events: Events = Events(None, warn)
        self._status_said = False          # the run's record has its status line
        self._error: BaseException | None = None   # what ended a run without one
        self.host: HostFacts | None = None
        self.egress: Any = None             # the running egress gateway (runtime/egress.py)
        self.ssh_agent: Any = None          # the run's ssh-agent proxy (runtime/sshagent.py)
        self._server: tuple[int, int] | None = None   # the nested-run endpoint's (pid, pidfd)
        self._unbind: Callable[[], None] = lambda: None  # its socket, if never served
        self.creds: Any = None              # the run's credentials (credentials/run.py)
        self._login_copies: list[Any] = []   # agents' login files' copies (credentials/logins.py)
        self._login_ident: Any = None
        self._env_without_creds: dict[str, str | None] = {}   # what env.pass, --env gave them
        self.parent_env = dict(os.environ) if parent_env is None else parent_env
        self.plan: Plan = self._prepare(protect, host, self.parent_env)

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close(exc[1] if len(exc) > 1 else None)

    def close(self, exc: object = None) -> None:
        try:
            self._stop_server()
            self._stop_egress()
            self._finish_credentials(self.warn)
            exc = exc or self._error
            if self.events.journal is not None and not self._status_said:
                # the run ended by confine's own error (a command not found, a setup failure)
                self.events.emit({"event": "status", "status": getattr(exc, "status", 125),
                                  "error": printable(f"{type(exc).__name__}: {exc}")
                                  if exc is not None else "confine failed"})
            self.events.close()
            if self.tmp is not None:
                if not remove_tree(self.tmp):
                    self.warn(f"could not remove the run's TMPDIR {printable(self.tmp)}: remove it "
                              "by hand")
                self.tmp = None
            if self.tmp_home is not None:
                if not remove_tree(self.tmp_home):
                    self.warn(f"could not remove the run's HOME {printable(self.tmp_home)}: "
                              "remove it by hand")
                self.tmp_home = None
        finally:
            # held through the removal of the TMPDIR too: it is the agent's
            if self._hold is not None:
                for name in self._hold.release():
                    self.warn(f"{name} received: held until the exit check and the cleanup "
                              "were done")
                self._hold = None

    def _prepare(self, protect: bool, host: HostFacts | None,
                 parent_env: dict[str, str]) -> Plan:
        with realpaths.one_view():
            return self._prepare_in_view(protect, host, parent_env)

    def _prepare_in_view(self, protect: bool, host: HostFacts | None,
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
        mine = os.path.expanduser("~")
        real = check_workdir(wd, [mine], req.force_workdir)
        ident = resolve_identity(realpaths.realpath(wd), req.user)
        # the agent's home too, when it is another (each home costs its run-later list)
        wd = check_workdir(wd, [ident.home], req.force_workdir) if ident.home != mine else real
        for p in list(req.read) + list(req.write):
            if not os.path.exists(os.path.expanduser(p)):
                raise ConfineError(f"{p} does not exist (from --read/--write)")
        self.tmp = make_tmp(ident.uid, ident.gid, parent_env.get("TMPDIR"))
        try:
            policy = _load.load(req.profile, workdir=wd, home=realpaths.realpath(ident.home),
                                create_state=self.create_state,
                                tmp=self.tmp, extra_read=req.read, extra_write=req.write,
                                extra_allow=req.allow_host, extra_credentials=req.credential)
            if req.exclusive:
                policy = dataclasses.replace(policy, workdir_mode=workdir_mode.EXCLUSIVE)
            self.exclusive = policy.workdir_mode == workdir_mode.EXCLUSIVE
            for d in policy.deny:
                if is_under(wd, d.path):
                    raise ConfineError(f"refusing workdir {wd}: it lies inside the protected "
                                       f"secret {d.path}")
                if is_under(self.tmp, d.path):
                    raise ConfineError(f"refusing TMPDIR {self.tmp}: it lies inside the "
                                       f"protected secret {d.path}; set TMPDIR elsewhere")
            _check_approver(req.approver, policy, req.approver_socket)
            facts = host if host is not None else HostFacts.read(ident.started_as_root)
            self.host = facts
            lsm = _resolve_lsm(req.apparmor, req.selinux_context, facts)
            protected = self._snapshot(policy, ident.home, facts) if protect else None
            home, home_notes = self._agent_home(policy, ident, parent_env)
            if policy.private_tmp and self.create_state and facts.namespaces:
                policy = dataclasses.replace(policy, private_tmp=private_tmp(
                    policy.private_tmp, self.tmp, ident.uid, ident.gid, self.warn))
            plan = compile(policy, req.argv, ident, facts, parent_env=parent_env,
                           cli_env=req.env, lsm=lsm, protected=protected, agent_home=home)
            plan = dataclasses.replace(plan, notes=plan.notes + tuple(home_notes))
            if policy.ssh_agent is not None:
                from . import sshagent
                plan, self.ssh_agent = sshagent.prepare(plan, self.tmp, parent_env, self.warn)
            if policy.credentials:
                from ..credentials import run as _credrun
                self._env_without_creds = {c.name: plan.env.get(c.name)
                                           for c in policy.credentials}
                plan = self._with_placeholders(plan, _credrun.dry_run(policy.credentials))
            return self._with_endpoint(plan)
        except BaseException:
            self.close()
            raise

    def _agent_home(self, policy: Policy, ident: Identity,
                    parent_env: dict[str, str]) -> tuple[str | None, list[str]]:
        """The agent's own HOME: located always, made and checked for a run only
        (--dry-run changes nothing). What a run had to note is said on stderr: it is
        rare (something the agent left in its home, a race with another run)."""
        if not self.req.agent_home:
            return None, (["agent home: off (--no-agent-home): HOME is the account's own, "
                           "where only the profile's grants are reachable"]
                          + [f"filesystem.copied {c.path}: not given (its copy lives in the agent home)"
                             for c in policy.copied])
        path = _home.locate(ident, self.req.profile, policy.workdir, parent_env)
        why = _home.refusal(path, policy)
        if why:
            raise ConfineError(f"agent home {path}: {why}; refusing to run")
        if not self.create_state:
            return path, []
        links = _home.links_for(policy, ident.home, path)
        # a refusal names the granted path, never the agent home's link to it
        self.events.links = tuple((os.path.join(path, rel), real) for rel, real in links)
        try:
            notes = _home.prepare(path, ident, links, policy.workdir)
        except _home.Unavailable as e:
            # no place for a persistent one (HOME missing or read-only): a fresh home
            # for this run alone, never the account's own HOME
            self.tmp_home, notes = _home.prepare_temporary(ident, links)
            self.warn(f"{e}; this run's HOME is a fresh one ({self.tmp_home}), removed "
                      "afterwards (--no-agent-home keeps the account's own)")
            path = self.tmp_home
        if policy.copied:
            self.copies = _home.place_copies(path, ident, policy.copied)
            notes = notes + [f"filesystem.copied {c['path']}: {c['error']}; not given"
                             for c in self.copies if "error" in c]
        for n in notes:
            self.warn(printable(n))
        return path, notes

    def _snapshot(self, policy: Any, home: str, facts: HostFacts) -> Protected:
        """Every protected root (protect/roots.py: the workdir and each directory
        write grant) by the same steps: its snapshot, its binds, its guard."""
        from .. import protect
        from ..protect import index
        from ..protect.roots import roots_of
        self.roots = roots_of(policy)
        if self.exclusive and len(self.roots) > 1:
            # only the workdir is declared unused from outside: new names in another
            # root must be judged at the call, and the seccomp filter sees no paths, so
            # it cannot mediate that root's calls and leave the workdir's unmediated
            r = self.roots[1]
            state = any(r.path == sr.path for sr in policy.state_roots)
            raise ConfineError(f"exclusive workdir ({workdir_mode.FLAG}): the "
                               + ("state root" if state else "write grant")
                               + f" {printable(r.path)} ({r.source}) is a protected root others "
                               + ("(your own agent's CLI) " if state else "")
                               + "may use while the agent runs, which only mediated file calls "
                               "keep free of new protected names: refusing to run (drop the "
                               "grant, or run without exclusive mode; docs/exclusive.md)")
        if self.exclusive:
            from ..kernel.mounts import casefolded
            try:
                why = "compares names without case (casefold)" if casefolded(policy.workdir) \
                    else None
            except OSError as e:
                why = f"may compare names without case (its flags cannot be read: {e.strerror})"
            if why is not None:
                # the exit check compares names as spelled; `.ENVRC` opens `.envrc` there
                raise ConfineError(f"exclusive workdir ({workdir_mode.FLAG}): the workdir {why}, "
                                   "and the exit check compares names as spelled: refusing to run")
        # exclusive: no name guard at the call, so git's configs keep their binds too
        mediated = facts.seccomp_user_notif and not self.exclusive
        index_dir = index.dir_for(policy)[0]
        snaps: list[Any] = []
        for i, r in enumerate(self.roots):
            try:
                snaps.append(protect.snapshot(
                    r.path, r.patterns, home=home, guarded=mediated,
                    index_dir=index_dir, changes=self.kept_changes if i == 0 else None,
                    # each root's quarantine and held files under a run id of its own
                    run_id=f"{snaps[0].run_id}.root{i}" if i else None))
            except (OSError, ValueError) as e:
                what = ("the protected workdir paths" if r.workdir
                        else f"the protected paths of the write grant {r.path}")
                raise ConfineError(f"cannot snapshot {what}: {e}") from None
        self.snapshots, self.snapshot = snaps, snaps[0]
        guard = mediated and any(s.patterns for s in snaps)
        # exclusive: the guard's verdicts still decide what is held at exit
        if guard or (self.exclusive and any(s.patterns for s in snaps)):
            self.guard = protect.Roots([protect.Guard.from_snapshot(s) for s in snaps])
        desc = dict(snaps[0].describe())
        desc["roots"] = [{"path": r.path, "source": r.source, "holds_workdir": r.workdir,
                          **{k: d[k] for k in ("patterns", "git_directories", "protected",
                                               "read_only_binds", "pinned", "guard_only",
                                               "notes", "seconds")}}
                         for r, d in ((r, s.describe()) for r, s in zip(self.roots, snaps,
                                                                        strict=True))]
        return Protected(mount_plan=snaps[0].mount_plan, description=desc, guard=guard,
                         other_plans=tuple(s.mount_plan for s in snaps[1:]))

    def run(self, allow_degraded: bool | Collection[str] | None = False, *,
            stdio: tuple[int | None, int | None, int | None] | None = None,
            timeout: float | None = None) -> Result:
        """stdio: the agent's fds 0, 1, 2 (None: this process's own); timeout:
        seconds until the agent (and all it started) is killed (Result.timed_out)."""
        from .launch import launch
        plan, say = self.plan, self.warn
        # confine's own stderr: while the agent's UI holds that terminal in raw mode
        # its lines wait for the end (a caller's own warn is not a terminal's)
        screen = Screen(say) if say is default_warn else None
        if screen is not None:
            say = screen
            self.events.warn = say
        if self.snapshot is None:
            raise ConfineError("this session was prepared without the protected-path snapshot")
        refuse_missing(plan, allow_degraded, say)
        from ..protect import keep
        keep_limits = keep.limits()      # a bad override stops the run here, not at its end
        if self.req.log is not None:
            _check_log_path(self.req.log, plan)
        links = self.events.links      # the agent home's links, known before the run (refusal lines)
        self.events = Events(self.req.log, say, journal=self._open_record(plan, say))
        self.events.links = links
        self.events.context(os.path.realpath(plan.identity.home),
                            tuple(d.path for d in plan.policy.deny))
        pol = plan.policy
        self._start_approval(pol)
        if plan.abi >= 9 and pol.approvals.asks("unix_socket"):
            # the broker connects inside the agent's Landlock domain, which handles RESOLVE_UNIX
            say(f"approvals.unix_sockets: Landlock ABI {plan.abi} refuses a connect outside "
                "unix_sockets.allow itself, so an approved one still fails (EACCES): list the "
                "socket in unix_sockets.allow")
        self.events.writable = tuple([pol.workdir, pol.tmp] + [w.path for w in pol.write])
        self.events.connect_ports = frozenset(pol.network.connect_tcp)
        self.events.workdir = pol.workdir
        if plan.mount_ns:
            self.events.read_only = {
                "/".join(m.rel): self._pattern_of(m.rel) for m in self.snapshot.mount_plan.mounts
                if m.readonly and ".git" not in m.rel}
        self._warn_enclosing_repo(plan, say)
        for port in unreachable_servers(plan.policy):
            say(f"network.bind_tcp lets the agent listen on port {port}, but not connect to it "
                f"(add {port} to network.connect_tcp to reach its own server)")
        guarded = self.guard is not None and not self.exclusive
        if self.exclusive:
            self.events.emit({"event": "workdir_mode", "mode": workdir_mode.EXCLUSIVE,
                              "what": workdir_mode.GIVES_UP})
        if not plan.mount_ns:
            say("protected workdir paths (.git/hooks, .git/config, .envrc, ...) are NOT "
                "read-only for this run (no mount namespace): "
                + ("writes and new names are refused by name, but deleting them or renaming "
                   "them away is only reverted when the agent exits" if guarded
                   else "changes are only reverted when the agent exits"))
        for i, snap in enumerate(self.snapshots):
            for path, why in snap.guard_only:
                shown = path if i == 0 else os.path.join(snap.workdir, path)
                say(f"protected path {printable(shown)} has no read-only bind ({why}): "
                    + ("writes to it are refused by name and inode; other changes are reverted "
                       "at exit" if guarded else "it is only checked at exit"))
        result = Result(status=125)
        # From here until the exit check is done, ordinary signals do not end
        # confine: a Ctrl-C or SIGTERM during the check would leave the agent's
        # plants in place with nothing said.  While the agent runs, launch()
        # blocks and forwards them as before; the child resets the handlers.
        hold = self._hold = _SignalHold()
        held_fd: list[int] = []
        ran = False
        keeper: Any = None
        try:
            plan = self._start_credentials(plan, say)
            plan = self._start_egress(plan)
            plan, offer, serve = self._delegation(plan)
            eg = self.egress
            keeper = self._undo_keeper(plan, keep_limits, say)
            # exclusive: nothing is mediated for the guard to judge (its verdicts serve the exit)
            outcome = launch(plan, guard=None if self.exclusive else self.guard, warn=say,
                             stdio=stdio, timeout=timeout,
                             inet=eg.routes if eg is not None else None,
                             on_sockets=eg.start_on if eg is not None and plan.gateway_ports
                             else None, events=self.events,
                             in_tmp=lambda: self._in_tmp(held_fd, offer),
                             after_fork=lambda: self._forked(serve),
                             before_walk=self._stop_server, undo=keeper)
            result.status, result.steps = outcome.status, outcome.steps
            result.timed_out = outcome.timed_out
            ran = True
        except OSError as e:
            self._error = ConfineError(f"setup failed: {e.strerror or e}")
            raise self._error from None
        except BaseException as e:
            self._error = e
            raise
        finally:
            # the agent and its leftovers are gone (launch killed them): nothing
            # can use the gateway any more
            self._stop_egress()
            if self.ssh_agent is not None:
                self.ssh_agent.stop()
            self._finish_credentials(say)
            self.events.ended()
            if screen is not None:
                screen.release()
            hold.also_stops()
            keep = self._exclusive_keeper(say)
            result.report = self._exit_check(plan.mount_ns, say, keep)
            if keeper is not None:
                keeper.finish(say)
            result.held_roots = (self._exclusive_held(keep, say) if keep is not None
                                 else self._collect_held(held_fd[0] if held_fd else None, say))
            result.held = result.held_roots[0] if result.held_roots else None
            self._bound_stores(keep_limits, say)
            # a command that never ran (not found, setup failed) failed before the
            # agent did anything: its error is the one line, said after these
            for line in self.events.summary(result.status if ran else 0):
                say(line)
        rep = result.report
        if (rep is None or rep.alerts) and result.status == 0 and not self.req.agent_status:
            result.agent_status, result.status = 0, EXIT_CHECK_ACTED
            say(f"exit status {EXIT_CHECK_ACTED}: the agent exited 0, but the exit check "
                + ("could not run" if rep is None else "reported protected paths (above)")
                + " (--agent-status keeps the agent's own status)")
        self.events.emit({"event": "status", "status": result.status,
                          "agent_status": result.agent_status, "timed_out": result.timed_out,
                          "refusals": dict(self.events.refusals)})
        self._status_said = True
        return result

    def _open_record(self, plan: Plan, say: Warn) -> Any:
        """The run's record (journal/), in the person's state, with --log FILE
        getting the same lines; a record that cannot be kept stops the run."""
        from ..journal import store
        from ..journal.writer import Journal
        from .events import open_log
        pol = plan.policy
        base, note = store.writable_base()
        why = store.exposed([pol.workdir, pol.tmp, *(w.path for w in pol.write),
                             *([plan.agent_home] if plan.agent_home else [])],
                            [r.path for r in pol.read], [d.path for d in pol.deny], base)
        if why:
            raise ConfineError(f"the run's record: {why}: refusing to run (drop the grant"
                               + (")" if os.geteuid() == 0 else
                                  ", or set XDG_STATE_HOME elsewhere)"))
        if note:
            say(note)
        mirror = open_log(self.req.log) if self.req.log is not None else None
        ident = plan.identity
        try:
            return Journal.open(self.snapshot.run_id, {
                "argv": list(plan.argv), "workdir": plan.policy.workdir,
                "profile": self.req.profile, "user": ident.user, "uid": ident.uid,
                "started_by": os.geteuid(), "pid": os.getpid(), "log": self.req.log},
                mirror=mirror, mirror_name=self.req.log or "", warn=say, base=base)
        except BaseException:
            if mirror is not None:
                os.close(mirror)
            raise

    def _forked(self, serve: Callable[[], None]) -> None:
        serve()
        self.events.forked()       # threads only now (kernel/cgroup.py fork_into)

    def _undo_keeper(self, plan: Plan, lim: Any, say: Warn) -> Any:
        """The run's undo keeper (confine/undo/), where the broker performs the
        workdir's file calls (the name guard is on); None elsewhere."""
        if not plan.file_mediation or self.guard is None or self.snapshot is None:
            return None
        from ..approval import Event
        from ..undo import keeper
        approvals = plan.policy.approvals
        above = approvals.spec("deletions").ask_above
        engine = self.events.approval

        def judge(count: int, rel: str) -> str:
            # the profile's approvals.deletions: a rule on the path, the threshold, the default
            return approvals.decide("deletions", {"count": count, "path": rel})[0]

        def ask(count: int, sample: list[str]) -> bool:
            # the run's approval engine: the same approver (terminal, --approver,
            # --approver-socket), one question at a time with every other kind
            if engine is None:
                return False
            v = engine.decide(Event("deletions", {"count": count,
                                                  "path": sample[-1] if sample else "?"}))
            return bool(v.decision == "allow")
        try:
            return keeper.Keeper(self.snapshot.run_id, plan.policy.workdir, limit=lim.max_bytes,
                                 ask_above=above, ask=ask,
                                 judge=judge if approvals.judges("deletions") else None,
                                 events=self.events, warn=say)
        except OSError as e:
            raise ConfineError(f"undo: cannot open the workdir for its keeper: "
                               f"{e.strerror or e}") from None

    def _in_tmp(self, held_fd: list[int], offer: Callable[[], None]) -> None:
        held_fd.extend(self._prepare_held())
        if self.egress is not None and self.tmp is not None:
            self.egress.in_tmp(self.tmp)     # the run CA's bundle (a run with credentials)
        # in the TMPDIR the agent sees (a tmpfs may be mounted on it by now)
        private_tmp_dirs(self.plan.private_binds, self.plan.identity.uid,
                         self.plan.identity.gid)
        if self._login_copies:
            from ..credentials import logins as _logins
            ident = self._login_ident
            _logins.write(self._login_copies, ident.uid, ident.gid)
        offer()
        if self.ssh_agent is not None:
            self.ssh_agent.start(self.events, self.req.approver)

    def _with_endpoint(self, plan: Plan) -> Plan:
        """confine inside confine (runtime/delegate_server.py): the endpoint the
        agent's own `confine exec` hands its run to, in its environment."""
        from . import delegate
        path = delegate.offered(plan, self.tmp)
        return plan if path is None else delegate.with_endpoint(plan, path)

    def _delegation(self, plan: Plan) -> tuple[Plan, Callable[[], None], Callable[[], None]]:
        """What binds the endpoint once the TMPDIR is what the agent sees, and what
        forks its server once the child is forked (off the way to the agent's exec)."""
        from . import delegate, delegate_server
        path = delegate.endpoint_of(plan)
        if path is None:
            return plan, lambda: None, lambda: None
        bound: list[delegate_server.Endpoint] = []

        def offer() -> None:
            try:
                bound.append(delegate_server.bind(plan, path))
            except ConfineError as e:     # the inner confine then refuses: fail closed
                self.warn(f"{e}: confine inside this run will refuse")

        def serve() -> None:
            if not bound:
                return
            try:
                pid = delegate_server.fork_server(bound.pop())
            except ConfineError as e:     # the socket is closed: a connect is refused
                self.warn(f"{e}: confine inside this run will refuse")
            else:
                # our unreaped child: the pid cannot name another process yet
                self._server = (pid, os.pidfd_open(pid))

        def unbound() -> None:
            while bound:                  # never forked (the run failed before its child)
                bound.pop().lsock.close()
        self._unbind = unbound
        return plan, offer, serve

    def _stop_server(self) -> None:
        """The endpoint's server ends with the agent. Killed and reaped here, before
        the leftover walk: that walk then finds nothing of ours to freeze first, and
        whatever the server started (nested runs) is re-parented to this subreaper
        and found by the walk as before. One that does not go within a second
        (stuck in the kernel) is left to the walk."""
        import select
        self._unbind()
        srv, self._server = self._server, None
        if srv is None:
            return
        pid, fd = srv
        try:
            signal.pidfd_send_signal(fd, signal.SIGKILL)
            poll = select.poll()
            poll.register(fd, select.POLLIN)
            if poll.poll(1000):
                os.waitpid(pid, os.WNOHANG)
        except (OSError, ChildProcessError):
            pass
        finally:
            os.close(fd)

    def _with_placeholders(self, plan: Plan, placeholders: dict[str, str],
                           values: tuple[str, ...] = ()) -> Plan:
        from ..plan import env as _env
        env, notes = _env.with_credentials(plan.env, placeholders, values)
        return dataclasses.replace(plan, env=env, notes=plan.notes + tuple(notes))

    def _start_credentials(self, plan: Plan, say: Warn) -> Plan:
        """Revokes left by runs that died, then this run's values (credentials/run.py),
        all before the fork: the agent's variables get the placeholders."""
        from ..paths import state_dir
        creds = plan.policy.credentials
        if plan.policy.logins:
            plan = self._start_logins(plan, say)
        if not creds:
            try:
                idle = not os.listdir(state_dir("credentials"))
            except OSError:
                idle = True
            if idle:
                return plan     # no revoke left pending here: no import, no look
        from ..credentials import run as _credrun
        _credrun.recover(say, self.events.emit)
        if not creds:
            return plan
        pol = plan.policy
        _credrun.check_exposure(creds, [(g.path, g.source) for g in pol.read + pol.write],
                                tuple(d.path for d in pol.deny))
        for line in _credrun.unreachable(creds, pol.network):
            say(line)
        logins = self.creds.logins if self.creds is not None else ()
        self.creds = _credrun.start(creds, self.parent_env, warn=say, emit=self.events.emit)
        self.creds.logins = logins
        from ..plan import env as _env
        env, notes = _env.with_credentials(plan.env, self.creds.placeholders, self.creds.values,
                                           before=self._env_without_creds)
        for n in notes:
            say(n)
        return dataclasses.replace(plan, env=env)

    def _start_logins(self, plan: Plan, say: Warn) -> Plan:
        """The agents' login files: placeholder copies in the TMPDIR, bound over the
        real files in the agent's mount namespace (credentials/logins.py)."""
        from landlockpy import AccessFS

        from ..credentials import logins as _logins
        from ..credentials import run as _credrun
        from ..plan.steps import child_steps
        assert self.tmp is not None
        ident = plan.identity
        copies = _logins.start(plan.policy.logins, uid=ident.uid, gid=ident.gid, tmp=self.tmp,
                               mount_ns=plan.mount_ns, warn=say, emit=self.events.emit,
                               grants=[(g.path, g.source) for g in plan.policy.read
                                       + plan.policy.write],
                               denied=[d.path for d in plan.policy.deny])
        self.creds = _credrun.RunCredentials(logins=tuple(b for c in copies for b in c.bindings))
        self._login_copies, self._login_ident = copies, ident
        if not copies:
            return plan
        out = dataclasses.replace(
            plan, file_binds=plan.file_binds + tuple((c.path, c.target) for c in copies),
            child_rules=plan.child_rules + tuple(
                (c.target, (AccessFS.READ_FILE | AccessFS.WRITE_FILE | AccessFS.TRUNCATE)
                 & plan.handled_fs)
                for c in copies))
        return dataclasses.replace(out, steps=tuple(child_steps(out)))

    def _finish_credentials(self, say: Warn) -> None:
        if self.creds is not None:
            from ..credentials import run as _credrun
            _credrun.finish(self.creds, warn=say, emit=self.events.emit)

    def _start_egress(self, plan: Plan) -> Plan:
        if not plan.egress:
            return plan
        from . import egress
        bindings = self.creds.bindings + self.creds.logins if self.creds is not None else ()
        if plan.gateway_ports:   # started on the child's sockets, in the agent's namespace
            self.egress = egress.build(plan.policy, self.events, ports=plan.gateway_ports,
                                       approver=self.req.approver, engine=self.events.approval,
                                       credentials=bindings)
        else:
            self.egress = egress.start(plan.policy, self.events, approver=self.req.approver,
                                       engine=self.events.approval, credentials=bindings)
        return egress.bind_plan(plan, self.egress)

    def _start_approval(self, pol: Policy) -> None:
        """The run's approval engine (confine/approval/): the gateway and the
        mediator ask through it, its verdicts go to the run's events."""
        from .. import approval
        assert self.snapshot is not None

        def validate(path: str) -> None:
            # imported when asked: runtime/egress.py brings the gateway, which a run
            # without network (most exclusive CI runs) never starts
            from .egress import _validate_profile
            _validate_profile(path, pol)
        self.events.approval = approval.build(
            pol, command=self.req.approver, socket_path=self.req.approver_socket,
            events=self.events.emit, run=self.snapshot.run_id, validate=validate)

    def _stop_egress(self) -> None:
        eg, self.egress = self.egress, None
        if eg is not None:
            eg.stop()

    def _pattern_of(self, rel: tuple[str, ...]) -> str:
        """The protected pattern that names a workdir path ("" if unknown)."""
        if self.guard is None:
            return ""
        m = self.guard.match(self.guard.folded(rel))
        return m[0].text if m is not None else ""

    def _warn_enclosing_repo(self, plan: Plan, say: Warn) -> None:
        """A workdir below a repository's root: git inside finds no repository
        ("fatal: not a git repository") unless it can read the root's .git."""
        from ..policy.explain import enclosing_repo
        top = enclosing_repo(plan.policy.workdir)
        if top is None:
            return
        gitdir = os.path.join(top, ".git")
        if any(is_under(gitdir, p) for p, _, _ in plan.path_rules):
            return
        say(f"the workdir lies inside the git repository {printable(top)}, whose .git is not "
            "readable here: git inside will say 'not a git repository'; run with "
            f"-w {printable(top)} to work in the repository, or --read {printable(gitdir)} to let "
            "git read it")

    def _prepare_held(self) -> list[int]:
        """The held area (protect/held.py) in the TMPDIR, when the name guard
        runs: its descriptor, kept for the collection at exit (it also keeps
        a TMPDIR tmpfs readable after launch detached it)."""
        from ..protect import held
        if self.guard is None or self.tmp is None or self.exclusive:
            return []
        got = held.prepare(self.tmp, [r.path for r in self.roots], self.plan.identity.uid,
                           self.plan.identity.gid)
        if got is None:
            return []
        path, fd = got
        st = os.fstat(fd)
        self.guard.held, self.guard.held_ident = path, (st.st_dev, st.st_ino)
        return [fd]

    def _collect_held(self, fd: int | None, say: Warn) -> list[Any]:
        """Keep what was held in the run's state and list it (after the exit
        check, before the TMPDIR goes): each protected root's part of the held
        area, judged by its own guard, kept under its own run id."""
        import sys

        from ..protect import held
        from ..protect.report import held_event
        if fd is None:
            return []
        out: list[Any] = []
        try:
            for i, (g, snap) in enumerate(zip(self.guard.guards, self.snapshots, strict=True)):
                rfd: int | None = None
                try:
                    rfd = held.open_root(fd, i)
                    got = (held.Held(snap.run_id, snap.workdir, None) if rfd is None
                           else held.collect(rfd, g, snap.run_id))
                except Exception as e:  # noqa: BLE001 - said, never silently lost
                    say(f"the held files of this run in {printable(snap.workdir)} could not be "
                        f"kept ({printable(f'{type(e).__name__}: {e}')}): they were not put "
                        "there and are gone")
                    out.append(None)        # the list stays in roots order
                    continue
                finally:
                    if rfd is not None:
                        os.close(rfd)
                out.append(got)
                if got.items or got.left:
                    self.events.emit(held_event(got))
                text = held.format_held(got, place="the workdir" if snap.workdir == os.path.realpath(
                    self.plan.policy.workdir) else snap.workdir)
                if text:
                    try:
                        print(text, file=sys.stderr, flush=True)
                    except (OSError, ValueError):
                        pass
        finally:
            os.close(fd)
        return out

    def _bound_stores(self, lim: Any, say: Warn) -> None:
        """Bounds across runs (protect/keep.py) on the held files and the
        quarantine, once this run's are kept: the oldest go first, this one stays."""
        from ..journal import store
        from ..protect import held, keep, revert
        run = self.snapshot.run_id
        # bytes and days only: a count of runs would drop one at the end of every run
        # once reached, each with its line, where nothing is short of room
        for base, what in ((held.held_base(), "held files"),
                           (os.path.dirname(revert.default_quarantine_dir(run)), "quarantine"),
                           (keep.undo_base(), "undo")):
            try:
                keep.bound(base, what, run, say, lim=lim)
            except Exception as e:  # noqa: BLE001 - housekeeping must not cost the report
                say(f"could not bound the {what} kept across runs in {printable(base)}: "
                    f"{printable(f'{type(e).__name__}: {e}')}")
        if self.events.journal is not None:
            j = self.events.journal
            store.bound(lim.max_bytes, lim.days, j.run, say, where=j.base)

    def _exclusive_keeper(self, say: Warn) -> Any:
        """An exclusive workdir's held state (protect/held.py Keeper), which the
        exit check fills with the new protected names; None in the default mode,
        or where none can be made (then they are quarantined, as without a guard)."""
        if not self.exclusive or self.guard is None:
            return None
        from ..protect import held
        try:
            keep = held.Keeper(self.snapshot.workdir, self.snapshot.run_id)
        except (OSError, ValueError) as e:
            say(f"no held files for this run ({printable(str(e))}): new protected names in the "
                "workdir are quarantined instead")
            return None
        self.guard.held = keep.dest
        return keep

    def _exclusive_held(self, keep: Any, say: Warn) -> list[Any]:
        """What an exclusive run's exit check held: kept, listed, recorded, and
        marked skip-worktree in git's index (the broker's part in the default mode)."""
        import sys

        from ..protect import held
        try:
            got = keep.finish()
        except Exception as e:  # noqa: BLE001 - said, never silently lost
            say("the held files of this run could not be kept "
                f"({printable(f'{type(e).__name__}: {e}')})")
            return [None]
        for r in got.roots:
            self.events.emit({"event": "held", "what": r.path, "mode": workdir_mode.EXCLUSIVE,
                              "why": "new protected name found at exit"})
        for line in held.skip_held_in_index(self.snapshot.workdir, [r.path for r in got.roots]):
            say(f"git index not marked for the held files: {printable(line)}")
        text = held.format_held(got)
        if text:
            try:
                print(text, file=sys.stderr, flush=True)
            except (OSError, ValueError):
                pass
        return [got]

    def _write_back_copies(self, say: Warn) -> list[Any]:
        """filesystem.copied: each copy judged and written back (home.finish_copies);
        what is not written back is kept aside in the person's state. One Change each
        that did anything (an alert for a run-later key or a copy that is no JSON)."""
        from .. import protect
        from ..paths import state_dir
        pol, home = self.plan.policy, self.plan.agent_home
        if not self.copies or home is None:
            return []
        try:
            results = _home.finish_copies(home, self.plan.identity, pol.copied, self.copies)
        except Exception as e:  # noqa: BLE001 - said as a failed change: never silently
            return [protect.Change("modified", c.path, "failed",
                                   f"not written back ({type(e).__name__}: {e})")
                    for c in pol.copied]
        out = []
        for r in results:
            if r["action"] == "unchanged":
                continue
            detail = r["detail"]
            if r.get("aside"):
                where = os.path.join(state_dir("copied"), self.snapshot.run_id,
                                     os.path.basename(r["path"]))
                try:
                    os.makedirs(os.path.dirname(where), 0o700, exist_ok=True)
                    fd = os.open(where, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                                 | os.O_CLOEXEC, 0o600)
                    with os.fdopen(fd, "wb") as f:
                        f.write(base64.b64decode(r["aside"]))
                    detail += f"; the agent's version is kept at {where}"
                except OSError as e:
                    detail += (f"; the agent's version stays in the agent home only "
                               f"(cannot keep it aside: {e.strerror})")
            change = protect.Change("created" if r["action"] == "created" else "modified",
                                    r["path"], r["action"], detail, alert=bool(r["alert"]))
            if not change.alert and r.get("aside"):
                say(f"{printable(r['path'])}: {printable(detail)}")
            out.append(change)
        return out

    def _exit_check(self, mount_ns: bool, say: Warn, keep: Any = None) -> Any:
        """verify_and_revert and its report.  A failure of the check is said
        loudly and never replaces the agent's exit status. keep: an exclusive
        workdir's held state (_exclusive_keeper), where new protected names go."""
        import sys

        from .. import protect
        from ..protect import held
        from ..protect.report import report_events
        try:
            pol = self.plan.policy
            engine = self.events.approval
            report = protect.verify_and_revert(
                self.snapshot, trust_mounts=mount_ns,
                writable=[pol.tmp, *(w.path for w in pol.write),
                          *(p for p in (self.tmp, self.plan.agent_home) if p)],
                approved=dict(engine.writes) if engine is not None else None,
                hold=held.hold_at_exit(keep, self.guard) if keep is not None else None)
        except Exception as e:  # noqa: BLE001 - never silently: the check did not happen
            self.events.emit({"event": "exit_check", "what": "unchecked", "action": "failed",
                              "detail": f"{type(e).__name__}: {e}"})
            say(f"PROTECTED PATHS NOT CHECKED after the run (the check failed: "
                f"{printable(f'{type(e).__name__}: {e}')}): inspect .git/hooks, "
                ".git/config, .envrc, .vscode and the other protected paths before running "
                "git or opening the editor in the workdir")
            # the copies are judged on their own: unjudged, the next start would drop them
            copies = protect.Report(changes=self._write_back_copies(say))
            for ev in report_events(copies)[:-1]:
                self.events.emit(ev)
            if copies.alerts:
                say(protect.format_report(copies))
            return None
        first_q = any(c.quarantine for c in report.changes)
        for snap in self.snapshots[1:]:
            # the other roots, by the same check; their changes named by full path
            try:
                more = protect.verify_and_revert(snap, trust_mounts=mount_ns)
            except Exception as e:  # noqa: BLE001 - a failure of one is said as its change
                report.changes.append(protect.Change(
                    "unchecked", snap.workdir, "failed", "the check of this write grant failed "
                    f"({type(e).__name__}: {e}): its protected paths are NOT checked"))
                continue
            for c in more.changes:
                c.path = os.path.join(snap.workdir, c.path) if c.path else snap.workdir
            report.changes.extend(more.changes)
            report.specials.extend(more.specials)
            report.seconds += more.seconds
            if more.quarantine_dir and any(c.quarantine for c in more.changes):
                report.other_quarantine.append(more.quarantine_dir)
        report.changes.extend(self._write_back_copies(say))
        if not first_q and report.other_quarantine:
            # the quarantine named first is one that holds something
            report.quarantine_dir = report.other_quarantine.pop(0)
        for ev in report_events(report):
            self.events.emit(ev)
        if report.alerts or report.failed:
            try:
                print(protect.format_report(report), file=sys.stderr, flush=True)
            except (OSError, ValueError):
                pass    # stderr is gone: the report stays in result.report and REPORT.txt
        return report
