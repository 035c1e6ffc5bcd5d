"""Fork the child that runs the plan's steps; supervise it until it exits.

Kernel objects the child applies (the Landlock ruleset, the seccomp filters,
the notifying filter) are built here, in the supervisor: a bad rule is
reported before anything runs, and the child needs no library that could fail
half-way. The ruleset is made before the fork and its rules are added after
it, while the child runs its first steps: the child's descriptor names the
same kernel object, and the child uses it only once the supervisor says every
rule is in (a domain is a copy of the ruleset when it is enforced: nothing
added later could widen it).
"""
from __future__ import annotations

import errno
import os
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

from ..errors import CommandNotExecutable, CommandNotFound, ConfineError, default_warn
from ..kernel import audit, caps, cgroup, landlock, seccomp, tmpfs
from ..kernel.seccomp import ioctls as seccomp_ioctls
from ..mediation import Mediator
from ..mediation import signals as signal_judge
from ..plan import Plan
from ..record import dataclass, field
from . import child, status
from .channels import MediationChannel
from .supervise import FORWARD, Terminal, kill_leftovers, own_children, wait_until


@dataclass
class Outcome:
    status: int
    steps: list[str] = field(default_factory=list)   # the steps the child began, in order
    timed_out: bool = False


# The agent's standard input, output and error instead of the supervisor's own
# (None: inherit that one); the Python API's capture.
Stdio = tuple[int | None, int | None, int | None]


def _ruleset(plan: Plan) -> Any:
    """The plan's ruleset with all its rules (a nested run's, delegate_server.py)."""
    rs = _empty_ruleset(plan)
    if rs is not None:
        try:
            _add_rules(rs, plan)
        except BaseException:
            rs.close()
            raise
    return rs


def _empty_ruleset(plan: Plan) -> Any:
    """The ruleset, still without its rules (_add_rules)."""
    if plan.abi == 0:
        return None
    return landlock.build(plan.handled_fs, plan.handled_net, plan.scoped, [], [])


def _add_rules(ruleset: Any, plan: Plan) -> None:
    """The plan's rules into the ruleset (a path gone since the plan listed it
    grants nothing; any other failure names the path)."""
    landlock.add_rules(ruleset, ((p, a) for p, a, _ in plan.path_rules), plan.port_rules)


def _filter_count(plan: Plan) -> int:
    """len(_filters(plan)), without looking the compiled programs up (each lookup
    hashes every rule)."""
    if any(m.feature == "seccomp" for m in plan.missing):
        return 0
    return sum(1 for r in (plan.seccomp_rules, plan.seccomp_extra) if r) + bool(
        plan.ioctl_allowlist)


def _filters(plan: Plan, dgram_notified: bool = False) -> list[Any]:
    """The deny filters; dgram_notified: the notifying filter refuses UDP sockets
    (plan.dgram_notify, loaded by this launch), so the deny filter leaves them."""
    if any(m.feature == "seccomp" for m in plan.missing):
        return []
    deny = plan.seccomp_rules
    if dgram_notified:         # refused by the notifying filter instead, which says so
        deny = tuple(r for r in deny if r.group != seccomp.DGRAM_GROUP)
    out = [seccomp.compiled(r) for r in (deny, plan.seccomp_extra) if r]
    if plan.ioctl_allowlist:
        # loaded first, so evaluated last: the deny filter's own answer (EPERM for
        # TIOCSTI, the disk ioctls) wins over the allowlist's EACCES
        out.insert(0, seccomp_ioctls.program())
    return out


def launch(plan: Plan, *, guard: Any = None,
           warn: Callable[[str], None] | None = None, stdio: Stdio | None = None,
           timeout: float | None = None, inet: Any = None,
           on_sockets: Callable[[list[int]], None] | None = None,
           events: Any = None, in_tmp: Callable[[], None] | None = None,
           after_fork: Callable[[], None] | None = None,
           before_walk: Callable[[], None] | None = None, undo: Any = None) -> Outcome:
    """Run the plan. Returns the command's status (128+N if killed by signal N);
    raises CommandNotFound/CommandNotExecutable/ConfineError for failures before exec.
    inet: the egress gateway's routes (mediation.InetRoutes), required when it runs;
    on_sockets: starts it on the sockets the child made in the agent's network namespace;
    events: the run's runtime.events.Events (every refusal goes there);
    in_tmp: called once the TMPDIR is what the agent will see (its tmpfs mounted);
    after_fork: called once the child is forked and holds the only copies of its ends
    of the pipes and sockets (the supervisor still single-threaded), while it runs;
    before_walk: called once the agent has exited, before the leftover walk (it
    ends the caller's own helpers of the run, which the walk would else freeze);
    undo: the run's undo keeper (confine/undo/keeper.py), served while file calls
    are mediated."""
    if plan.egress and plan.unix_mediation and inet is None:
        raise ConfineError("the egress gateway is not running: refusing to run")
    if plan.gateway_ports and on_sockets is None:
        raise ConfineError("nothing takes the egress gateway's sockets: refusing to run")
    tmp = _mount_tmp(plan)
    if in_tmp is not None:
        in_tmp()
    cg = None
    try:
        if plan.cgroup:
            lim = plan.policy.limits
            try:
                cg = cgroup.create(plan.cgroup, pids=lim.processes
                                   if plan.limits.get("processes", "").startswith("cgroup")
                                   else None, memory=lim.memory
                                   if plan.limits.get("memory", "").startswith("cgroup")
                                   else None)
            except OSError as e:
                raise ConfineError(f"cannot make the run's cgroup under {plan.cgroup}: "
                                   f"{e.strerror or e}") from None
        return _launch(plan, guard, warn, cg, stdio=stdio, timeout=timeout, inet=inet,
                       on_sockets=on_sockets, events=events, after_fork=after_fork,
                       before_walk=before_walk, undo=undo)
    finally:
        if cg is not None:
            try:
                cgroup.remove(cg)
            except OSError as e:
                (warn or default_warn)(f"cannot remove the run's cgroup {cg}: {e}")
        if tmp is not None:
            try:
                tmpfs.detach(tmp)
                tmpfs.forget(tmp)
            except OSError as e:
                (warn or default_warn)(f"cannot detach the TMPDIR tmpfs {tmp}: {e}")


def _mount_tmp(plan: Plan) -> str | None:
    """The TMPDIR's size limit, before the Landlock rules name its directory (they
    must name the tmpfs). Refuses to run if the plan said it would be enforced."""
    size = plan.policy.limits.tmp_size
    if size is None or not plan.limits.get("tmp_size", "").startswith("size of a tmpfs"):
        return None
    tmpfs.sweep()       # what supervisors killed with SIGKILL left mounted
    try:
        tmpfs.record(plan.policy.tmp)
        tmpfs.mount_tmp(plan.policy.tmp, size, plan.identity.uid, plan.identity.gid)
    except OSError as e:
        tmpfs.forget(plan.policy.tmp)
        raise ConfineError(f"limits: tmp_size: {e.strerror or e}") from None
    return plan.policy.tmp


def _landlock_watch(plan: Plan, events: Any) -> audit.LandlockWatch | None:
    """Landlock's own refusals for this run, where the kernel lets us read them
    (kernel/audit.py); else events learns why not (the log has it, the summary
    says it beside any other refusal)."""
    if events is None or plan.abi == 0:
        return None
    gap = ""
    if plan.abi < 7:
        gap = f"since Landlock ABI {plan.abi} cannot report them (ABI 7, Linux 6.15, can)"
    elif os.geteuid() != 0:
        gap = ("since only a run started as root can read the kernel's audit records, "
               "where Landlock reports them")
    else:
        on = audit.enabled()
        if not on:
            gap = ("since the kernel's audit is off on this host (`auditctl -e 1` turns it "
                   "on; confine does not)" if on == 0
                   else "since this kernel's audit cannot be read here")
    if gap:
        events.unexplained(gap)
        return None
    try:
        watch = audit.LandlockWatch.open(events.landlock)
    except OSError as e:
        events.unexplained(f"cannot read the kernel's audit records: {e.strerror or e}")
        return None
    events.landlock_seen = True
    return watch


def _launch(plan: Plan, guard: Any, warn: Callable[[str], None] | None,
            cg: str | None, stdio: Stdio | None = None,
            timeout: float | None = None, inet: Any = None,
            on_sockets: Callable[[list[int]], None] | None = None,
            events: Any = None, after_fork: Callable[[], None] | None = None,
            before_walk: Callable[[], None] | None = None, undo: Any = None) -> Outcome:
    _check_mediate_as(plan)
    ruleset = _empty_ruleset(plan)
    rules_r, rules_w = os.pipe2(os.O_CLOEXEC) if ruleset is not None else (None, None)
    status_r, status_w = os.pipe2(os.O_CLOEXEC)
    med = (MediationChannel.open(guard, files=plan.file_mediation, meta=plan.meta_mediation,
                                 bind=not plan.pidfd_getfd, signals=plan.signal_mediation,
                                 dgram=plan.dgram_notify, exec_=plan.exec_notify,
                                 undo=undo.started_ns if undo is not None
                                 and plan.file_mediation else 0)
           if plan.unix_mediation else None)
    filters = _filters(plan, dgram_notified=med is not None and plan.dgram_notify)
    sigset = set(FORWARD) | {signal.SIGCHLD}
    # SIGCHLD is ignored by default, which could discard it before sigwaitinfo.
    old_chld = signal.signal(signal.SIGCHLD, lambda *_: None)
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, sigset)
    caps.set_child_subreaper()
    supervisor = os.getpid()
    spare = own_children()
    terminal = Terminal()
    sys.stdout.flush()
    sys.stderr.flush()
    deadline = None if timeout is None else time.monotonic() + timeout
    # Opened before the fork (records queue in its socket from the first one),
    # its thread started after (nothing of it is copied into the child).
    watch = _landlock_watch(plan, events)
    cg_r, cg_w = os.pipe2(os.O_CLOEXEC) if cg is not None else (None, None)
    ns_fds: list[int] = []
    born = cgroup.fork_into(cg) if cg is not None else None    # in the run's cgroup already
    pid = os.fork() if born is None else born
    if pid == 0:
        try:
            os.close(status_r)
            if cg_w is not None:
                os.close(cg_w)
            if rules_w is not None:
                os.close(rules_w)
            for target, fd in enumerate(stdio or ()):
                if fd is not None and fd != target:
                    os.dup2(fd, target)     # inheritable; the fd step closes the originals
            if med is not None:
                med.close_supervisor_ends_in_child()
            child.run(child.ChildContext(plan=plan, ruleset=ruleset, filters=filters,
                                         status_w=status_w, supervisor=supervisor,
                                         old_mask=old_mask, mediation=med, cgroup=cg,
                                         cgroup_sync=cg_r, rules_sync=rules_r,
                                         landlock_log=watch is not None))
        finally:
            os._exit(125)
    # a spared child /proc hid (HIDDEN) that died meanwhile may have left the agent its pid
    spare = frozenset(c for c in spare if c[0] != pid)
    try:
        cg_failure = _move_to_cgroup(cg, pid, cg_r, cg_w, moved=born is not None)
        os.close(status_w)
        if med is not None:
            med.close_child_ends()
        rules_failure = _complete_rules(ruleset, plan, pid, rules_r, rules_w)
        if after_fork is not None:
            after_fork()
        if med is not None and med.undo_sup is not None:
            undo.serve(med.undo_sup)     # after after_fork: that may fork, single-threaded
        if watch is not None:
            watch.add_pid(pid)
            watch.start()
        outcome, failure = _read_status(status_r, pid, plan, med, warn, inet, on_sockets,
                                        events, watch.add_pid if watch is not None else None,
                                        ns_fds)
        os.close(status_r)
        if failure is None:
            # else the child's own failure came first: it says why
            failure = cg_failure or rules_failure
        if med is not None:
            os.close(med.sync_w)
            med.hand_sup.close()      # all the child passes has arrived
        outcome.status, outcome.timed_out = wait_until(pid, deadline)
    finally:
        # Whatever happened above: nothing the agent started outlives this
        # point (the exit check runs next), and none of it keeps the terminal.
        try:
            terminal.take_back()
            if before_walk is not None:
                before_walk()
            stuck = kill_leftovers(spare, (lambda: _cgroup_kill(cg)) if cg else None)
            if stuck:
                (warn or default_warn)(
                    f"{len(stuck)} agent processes are stuck in the kernel with SIGKILL "
                    f"pending (pids {', '.join(map(str, stuck[:10]))}): they will not run "
                    "again, but still hold what they have open")
            terminal.take_back()
        finally:
            terminal.close()
            signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
            signal.signal(signal.SIGCHLD, old_chld)
            if watch is not None:
                watch.stop()        # every agent process is gone: drain what they caused
            for fd in ns_fds:
                os.close(fd)        # the namespace's teardown, now nothing is in it
    if failure is not None:
        raise _error(failure, plan)
    return outcome


def _check_mediate_as(plan: Plan) -> None:
    """Refuse a run whose mediator would take the agent's real uid (Plan.mediate_as)
    where the agent could then signal it: the same uid may kill it, unless signals
    out of the sandbox are refused (Landlock ABI 6, the mediated kill family) or a
    pid namespace hides it."""
    if plan.mediate_as is None or plan.pid_ns:
        return
    if plan.policy.scope.signals and (plan.abi >= 6 or plan.signal_mediation):
        return
    raise ConfineError(
        "started as root without CAP_SYS_PTRACE (a container's default), confine reads the "
        "agent's calls as the agent's uid, so the agent must not signal out of the sandbox: "
        "keep scope.signals in the profile, or give the container CAP_SYS_PTRACE "
        "(--cap-add SYS_PTRACE), or start the entrypoint as the agent's user")


def _complete_rules(ruleset: Any, plan: Plan, pid: int, rules_r: int | None,
                    rules_w: int | None) -> status.SetupFailed | None:
    """The plan's rules into the ruleset the child holds, then the byte that lets
    it use them; a rule that cannot be added kills the child (it never uses a
    ruleset that is not complete) and is the run's failure."""
    if ruleset is None or rules_r is None or rules_w is None:
        return None
    os.close(rules_r)
    try:
        _add_rules(ruleset, plan)
    except OSError as e:
        os.kill(pid, signal.SIGKILL)
        return status.SetupFailed("landlock", e.strerror or str(e))
    else:
        os.write(rules_w, b"r")
    finally:
        os.close(rules_w)
        ruleset.close()
    return None


def _move_to_cgroup(cg: str | None, pid: int, cg_r: int | None,
                    cg_w: int | None, moved: bool = False) -> status.SetupFailed | None:
    """The child into the run's cgroup, while it runs its first steps; its cgroup
    step waits for the byte that says it is done (none: it stops there). moved:
    it was born there (cgroup.fork_into); its step checks that as ever."""
    if cg is None or cg_r is None or cg_w is None:
        return None
    os.close(cg_r)
    try:
        if not moved:
            cgroup.move(cg, pid)
    except OSError as e:
        os.kill(pid, signal.SIGKILL)
        return status.SetupFailed("cgroup", f"cannot move the child into the run's cgroup: "
                                  f"{e.strerror or e}")
    else:
        os.write(cg_w, b"j")
    finally:
        os.close(cg_w)
    return None


def _cgroup_kill(path: str) -> None:
    try:
        cgroup.kill(path)
    except OSError:
        pass        # the descendant walk that follows kills them one by one


def _read_status(status_r: int, pid: int, plan: Plan, med: MediationChannel | None,
                 warn: Callable[[str], None] | None, inet: Any = None,
                 on_sockets: Callable[[list[int]], None] | None = None,
                 events: Any = None, on_init: Callable[[int], None] | None = None,
                 ns_fds: list[int] | None = None) -> tuple[Outcome, status.Message | None]:
    outcome = Outcome(status=125)
    failure: status.Message | None = None
    holder: int | None = None if plan.pid_ns else pid   # who holds the seccomp listener
    listener: int | None = None
    for msg in status.receive(status_r):
        if isinstance(msg, status.Begin):
            outcome.steps.append(msg.step)
        elif isinstance(msg, status.InitPid):
            holder = msg.pid
            if plan.mount_ns and ns_fds is not None:
                ns_fds.extend(_hold_mount_ns(pid))
            if on_init is not None:
                on_init(msg.pid)      # pid 1 of the agent's namespace restricts itself
        elif isinstance(msg, status.Listener) and med is not None:
            listener = msg.fd
        elif isinstance(msg, status.Sockets) and med is not None and on_sockets is not None:
            try:
                _take_sockets(med, on_sockets)
            except (OSError, ConfineError) as e:
                os.kill(pid, signal.SIGKILL)
                failure = status.SetupFailed(
                    "gateway_sockets", f"cannot take over the gateway's sockets: {e}")
            else:
                os.write(med.sync_w, b"g")
        elif failure is None:
            failure = msg
        if listener is not None and holder is not None:
            assert med is not None
            try:
                _start_mediator(holder, med, plan, warn, inet, events)
            except OSError as e:
                os.kill(pid, signal.SIGKILL)
                failure = status.SetupFailed(
                    "seccomp_notify", f"cannot take over the seccomp listener: {e}")
            else:
                os.write(med.sync_w, b"g")
            listener = None
    return outcome, failure


def _hold_mount_ns(pid: int) -> list[int]:
    """A reference to the child's mount namespace, so that its teardown (a copy of
    every host mount, undone) is not done by the last of the run's processes on
    its way out, which the supervisor waits for, but at the close after it. Done
    only for the time (the child's processes are gone when it is closed); where
    it cannot be had (another identity), the exit does it as before."""
    try:
        return [os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)]
    except OSError:
        return []


def _take_sockets(med: MediationChannel, on_sockets: Callable[[list[int]], None]) -> None:
    """The gateway's four sockets the child passed (SCM_RIGHTS: channels.py);
    start the gateway on them."""
    on_sockets(med.take(b"G", 4))


def _start_mediator(pid: int, med: MediationChannel, plan: Plan,
                    warn: Callable[[str], None] | None, inet: Any = None,
                    events: Any = None) -> None:
    nfd = med.take_listener()
    m = Mediator(nfd, med.broker_sup, plan.unix_roots(), plan.identity.uid,
                 warn=warn or default_warn, files=plan.file_mediation, inet_routes=inet,
                 events=events, meta=plan.meta_roots() if plan.meta_mediation else None,
                 real_ids=plan.mediate_as)
    m.refuse_abstract = plan.refuse_abstract
    if plan.exec_notify:
        from .child import which
        m.first_exec = which(plan.argv[0], plan.env.get("PATH", os.defpath)) or plan.argv[0]
    if plan.dgram_notify:
        m.refuse_dgram()
    if plan.signal_mediation:
        # the supervisor's children now but the agent's: an embedding program's own
        # (and the broker, re-parented here), never targets (mediation/signals.py)
        spare = frozenset(c for c in own_children() if c[0] != pid)
        m.mediate_signals(signal_judge.Judge(signal_judge.Members(os.getpid(), spare)))
    m.start()


def _error(msg: status.Message, plan: Plan) -> ConfineError:
    if isinstance(msg, status.ExecFailed):
        cmd = plan.argv[0]
        if msg.errno == errno.ENOENT:
            return CommandNotFound(f"{cmd}: command not found (searched PATH inside the sandbox)")
        hint = ""
        if msg.errno in (errno.EACCES, errno.EPERM):
            hint = " (not executable, or not readable inside the sandbox: grant it with --read)"
        return CommandNotExecutable(f"{cmd}: cannot execute: {msg.message}{hint}")
    if isinstance(msg, status.SetupFailed):
        if msg.step == "seccomp_notify" and msg.message.startswith("cannot take over"):
            return ConfineError(msg.message)
        return ConfineError(f"setup {msg.step}: {msg.message}")
    return ConfineError(f"unexpected status from the child: {msg}")
