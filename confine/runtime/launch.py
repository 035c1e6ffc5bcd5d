"""Fork the child that runs the plan's steps; supervise it until it exits.

Kernel objects the child applies (the Landlock ruleset, the seccomp filters,
the notifying filter) are built here, in the supervisor, before the fork: a
bad rule is reported before anything runs, and the child needs no library
that could fail half-way.
"""
from __future__ import annotations

import errno
import os
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import CommandNotExecutable, CommandNotFound, ConfineError, default_warn
from ..kernel import caps, cgroup, landlock, notify, seccomp, tmpfs
from ..mediation import Mediator
from ..plan import Plan
from . import child, status
from .channels import MediationChannel
from .supervise import FORWARD, Terminal, kill_leftovers, own_children, wait_for


@dataclass
class Outcome:
    status: int
    steps: list[str] = field(default_factory=list)   # the steps the child began, in order


def _ruleset(plan: Plan) -> Any:
    if plan.abi == 0:
        return None
    return landlock.build(plan.handled_fs, plan.handled_net, plan.scoped,
                          [(p, a) for p, a, _ in plan.path_rules], list(plan.port_rules))


def _filters(plan: Plan) -> list[Any]:
    if any(m.feature == "seccomp" for m in plan.missing):
        return []
    return [seccomp.build(r) for r in (plan.seccomp_rules, plan.seccomp_extra) if r]


def launch(plan: Plan, *, guard: Any = None,
           warn: Callable[[str], None] | None = None) -> Outcome:
    """Run the plan. Returns the command's status (128+N if killed by signal N);
    raises CommandNotFound/CommandNotExecutable/ConfineError for failures before exec."""
    tmp = _mount_tmp(plan)
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
        return _launch(plan, guard, warn, cg)
    finally:
        if cg is not None:
            try:
                cgroup.remove(cg)
            except OSError as e:
                (warn or default_warn)(f"cannot remove the run's cgroup {cg}: {e}")
        if tmp is not None:
            try:
                tmpfs.detach(tmp)
            except OSError as e:
                (warn or default_warn)(f"cannot detach the TMPDIR tmpfs {tmp}: {e}")


def _mount_tmp(plan: Plan) -> str | None:
    """The TMPDIR's size limit, before the Landlock rules name its directory (they
    must name the tmpfs). Refuses to run if the plan said it would be enforced."""
    size = plan.policy.limits.tmp_size
    if size is None or not plan.limits.get("tmp_size", "").startswith("size of a tmpfs"):
        return None
    try:
        tmpfs.mount_tmp(plan.policy.tmp, size, plan.identity.uid, plan.identity.gid)
    except OSError as e:
        raise ConfineError(f"limits: tmp_size: {e.strerror or e}") from None
    return plan.policy.tmp


def _launch(plan: Plan, guard: Any, warn: Callable[[str], None] | None,
            cg: str | None) -> Outcome:
    ruleset = _ruleset(plan)
    filters = _filters(plan)
    status_r, status_w = os.pipe2(os.O_CLOEXEC)
    med = (MediationChannel.open(guard, files=plan.file_mediation, meta=plan.meta_mediation,
                                 handoff=not plan.pidfd_getfd)
           if plan.unix_mediation else None)
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
    pid = os.fork()
    if pid == 0:
        try:
            os.close(status_r)
            if med is not None:
                med.close_supervisor_ends_in_child()
            child.run(child.ChildContext(plan=plan, ruleset=ruleset, filters=filters,
                                         status_w=status_w, supervisor=supervisor,
                                         old_mask=old_mask, mediation=med, cgroup=cg))
        finally:
            os._exit(125)
    try:
        os.close(status_w)
        if ruleset is not None:
            ruleset.close()
        if med is not None:
            med.close_child_ends()
        outcome, failure = _read_status(status_r, pid, plan, med, warn)
        os.close(status_r)
        if med is not None:
            os.close(med.sync_w)
        outcome.status = wait_for(pid)
    finally:
        # Whatever happened above: nothing the agent started outlives this
        # point (the exit check runs next), and none of it keeps the terminal.
        try:
            terminal.take_back()
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
    if failure is not None:
        raise _error(failure, plan)
    return outcome


def _cgroup_kill(path: str) -> None:
    try:
        cgroup.kill(path)
    except OSError:
        pass        # the descendant walk that follows kills them one by one


def _read_status(status_r: int, pid: int, plan: Plan, med: MediationChannel | None,
                 warn: Callable[[str], None] | None
                 ) -> tuple[Outcome, status.Message | None]:
    outcome = Outcome(status=125)
    failure: status.Message | None = None
    holder: int | None = None if plan.pid_ns else pid   # who holds the seccomp listener
    listener: int | None = None
    buf = b""
    while True:
        try:
            chunk = os.read(status_r, 4096)
        except InterruptedError:
            continue
        if not chunk:
            break
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            msg = status.parse(line)
            if isinstance(msg, status.Begin):
                outcome.steps.append(msg.step)
            elif isinstance(msg, status.InitPid):
                holder = msg.pid
            elif isinstance(msg, status.Listener) and med is not None:
                listener = msg.fd
            elif failure is None:
                failure = msg
            if listener is not None and holder is not None:
                assert med is not None
                try:
                    _start_mediator(holder, listener, med, plan, warn)
                except OSError as e:
                    os.kill(pid, signal.SIGKILL)
                    failure = status.SetupFailed(
                        "seccomp_notify", f"cannot take over the seccomp listener: {e}")
                else:
                    os.write(med.sync_w, b"g")
                listener = None
    if buf and failure is None:
        failure = status.parse(buf)
    return outcome, failure


def _start_mediator(pid: int, child_fd: int, med: MediationChannel, plan: Plan,
                    warn: Callable[[str], None] | None) -> None:
    if med.handoff:
        nfd = med.take_listener()
    else:
        pidfd = notify.pidfd_open(pid)
        try:
            nfd = notify.pidfd_getfd(pidfd, child_fd)
        finally:
            os.close(pidfd)
    Mediator(nfd, med.broker_sup, plan.unix_roots(), plan.identity.uid,
             warn=warn or default_warn, files=plan.file_mediation,
             meta=plan.meta_roots() if plan.meta_mediation else None).start()


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
