"""The child between fork and exec: runs `plan.steps`, one function per step.

Everything a step needs is imported at the top: after the Landlock step the
child may no longer read confine's own files. Nothing here decides anything:
the plan (plan/steps.py) says which steps run and in which order; each
function below applies one. Any failure reports the
step and exits 125: the command is never exec'd half-confined.
"""
from __future__ import annotations

import errno
import os
import resource
import signal
import threading
from collections.abc import Callable
from typing import Any, NoReturn

from ..kernel import caps, cgroup, hostview, keyring, landlock, lsm, mounts, namespaces, rlimits, seccomp
from ..kernel.mounts import MS_BIND, mount
from ..plan import Plan
from ..record import dataclass, field
from . import spawn, status
from .channels import MediationChannel
from .supervise import FORWARD, wait_for

# Python ignores these at start-up; an agent must get the defaults back.
_PY_IGNORED = (signal.SIGPIPE, signal.SIGXFSZ)


@dataclass
class ChildContext:
    plan: Plan
    ruleset: Any                         # landlockpy ruleset (fd) or None
    filters: list[Any]                   # deny filters, loaded in order
    status_w: int
    supervisor: int                      # pid of the supervisor (our parent)
    old_mask: Any                        # the signal mask to restore before exec
    mediation: MediationChannel | None
    cgroup: str | None = None            # the run's cgroup, made by the supervisor
    cgroup_sync: int | None = None       # one byte from the supervisor: moved there
    landlock_log: bool = False           # the supervisor reads Landlock's audit records
    rules_sync: int | None = None        # one byte from the supervisor: the ruleset is complete
    expect_parent: int = 0
    spawn_agent: bool = False            # the exec step starts the agent beside pid 1
    trace: list[str] = field(default_factory=list)

    def close_child_ends(self) -> None:
        """What only the confined process needs: the ruleset, broker and sync ends."""
        if self.ruleset is not None:
            self.ruleset.close()
        if self.mediation is not None:
            self.mediation.close_child_ends()


def _check_parent(ctx: ChildContext) -> None:
    if os.getppid() != ctx.expect_parent:
        os._exit(125)


def _pdeathsig(ctx: ChildContext) -> None:
    caps.set_pdeathsig(signal.SIGKILL)
    ctx.expect_parent = ctx.supervisor
    _check_parent(ctx)


def _signals(ctx: ChildContext) -> None:
    for s in _PY_IGNORED + FORWARD + (signal.SIGCHLD,):
        signal.signal(s, signal.SIG_DFL)


def _close_fds(ctx: ChildContext) -> None:
    keep = {ctx.status_w}
    if ctx.cgroup_sync is not None:
        keep.add(ctx.cgroup_sync)
    if ctx.rules_sync is not None:
        keep.add(ctx.rules_sync)
    if ctx.ruleset is not None:
        keep.add(ctx.ruleset.fileno())
    if ctx.mediation is not None:
        keep |= set(ctx.mediation.child_fds())
    lo = 3
    for fd in sorted(keep):
        os.closerange(lo, fd)
        lo = fd + 1
    top = os.sysconf("SC_OPEN_MAX")
    os.closerange(lo, top if top > 0 else 65536)


def _cgroup(ctx: ChildContext) -> None:
    if ctx.cgroup is None or ctx.cgroup_sync is None:
        raise OSError(errno.ENOENT, "no cgroup was made for the run")
    if os.read(ctx.cgroup_sync, 1) != b"j":
        raise OSError(errno.EIO, "the supervisor did not move this process into the run's cgroup")
    os.close(ctx.cgroup_sync)
    ctx.cgroup_sync = None
    if not cgroup.is_member(ctx.cgroup):
        raise OSError(errno.EIO, f"not in the run's cgroup {ctx.cgroup}")


def _limits(ctx: ChildContext) -> None:
    lim, how = ctx.plan.policy.limits, ctx.plan.limits

    def by_rlimit(name: str, v: int | None) -> int | None:
        return v if how.get(name, "").startswith("RLIMIT") else None
    rlimits.apply(uid=ctx.plan.identity.uid, processes=by_rlimit("processes", lim.processes),
                  memory=by_rlimit("memory", lim.memory),
                  open_files=by_rlimit("open_files", lim.open_files),
                  file_size=by_rlimit("file_size", lim.file_size))


def _mount_namespace(ctx: ChildContext) -> None:
    namespaces.enter(userns=not ctx.plan.identity.started_as_root)
    namespaces.make_private()


def _net_namespace(ctx: ChildContext) -> None:
    namespaces.unshare(namespaces.CLONE_NEWNET)


def _gateway_sockets(ctx: ChildContext) -> None:
    """Made here, in the agent's network namespace, as root of it (port 53); the
    supervisor takes them (SCM_RIGHTS) and says "go"; the agent never holds them."""
    import fcntl
    import socket
    import struct
    med = ctx.mediation
    assert med is not None
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        # SIOCSIFFLAGS: lo UP | LOOPBACK | RUNNING
        fcntl.ioctl(s, 0x8914, struct.pack("16sH22x", b"lo", 0x1 | 0x8 | 0x40))
    proxy, redirect, dns = ctx.plan.gateway_ports
    socks = []
    for port, kind in ((proxy, socket.SOCK_STREAM), (redirect, socket.SOCK_STREAM),
                       (dns, socket.SOCK_DGRAM), (dns, socket.SOCK_STREAM)):
        s = socket.socket(socket.AF_INET, kind)
        socks.append(s)
        s.bind(("127.0.0.1", port))
        if kind == socket.SOCK_STREAM:
            s.listen(512)
    med.hand_over([s.fileno() for s in socks], b"G")
    status.send(ctx.status_w, status.Sockets([s.fileno() for s in socks]))
    if os.read(med.sync_r, 1) != b"g":
        os._exit(125)
    for s in socks:
        s.close()


def _readonly_host(ctx: ChildContext) -> None:
    for src, dst in ctx.plan.private_binds:     # filesystem.private_tmp (policy/privatetmp.py)
        mounts.mount(src, dst, None, mounts.MS_BIND, None, f"bind a private directory on {dst}")
    db = ctx.plan.device_binds
    hostview.readonly_except(list(ctx.plan.writable_binds), None if db is None else list(db))


def _file_binds(ctx: ChildContext) -> None:
    for copy, path in ctx.plan.file_binds:
        mount(copy, path, None, MS_BIND, None, f"bind {copy} over {path}")


def _protected_binds(ctx: ChildContext) -> None:
    assert ctx.plan.protected is not None
    for mp in ctx.plan.protected.mount_plans:
        namespaces.apply(mp)


def _private_dev(ctx: ChildContext) -> None:
    hostview.private_shm(ctx.plan.policy.limits.shm_size)
    hostview.private_pts()


def _pid_namespace(ctx: ChildContext) -> None:
    """unshare(CLONE_NEWPID) and fork: the parent stays behind as a relay (the
    supervisor's child: forwards signals, passes on the exit status); the
    child is pid 1 of the new namespace and goes on with the steps."""
    namespaces.unshare(namespaces.CLONE_NEWPID)
    init = os.fork()
    if init != 0:
        status.send(ctx.status_w, status.InitPid(init))
        os.close(ctx.status_w)
        caps.set_dumpable(False)
        ctx.close_child_ends()
        os._exit(wait_for(init))
    ctx.expect_parent = 0          # the relay lives outside: pid 0 here
    hostview.private_proc()
    caps.set_pdeathsig(signal.SIGKILL)


def _proc_masks(ctx: ChildContext) -> None:
    keyring.mask_proc_keys()


def _landlock_new_mounts(ctx: ChildContext) -> None:
    # Rules made in the supervisor name the host's /dev/shm, /dev/pts and /proc;
    # these are new mounts, so grant them again here.
    _rules_complete(ctx)
    for path, access in ctx.plan.child_rules:
        if ctx.ruleset is not None and os.path.exists(path):
            landlock.add(ctx.ruleset, path, access)


def _rules_complete(ctx: ChildContext) -> None:
    """The supervisor adds the plan's rules to the ruleset while the first steps
    run (launch.py); it is used only once they are all in."""
    if ctx.rules_sync is None:
        return
    got = os.read(ctx.rules_sync, 1)
    os.close(ctx.rules_sync)
    ctx.rules_sync = None
    if got != b"r":
        raise OSError(errno.EIO, "the supervisor did not complete the Landlock ruleset")


def _chdir(ctx: ChildContext) -> None:
    os.chdir(ctx.plan.policy.workdir)


def _identity(ctx: ChildContext) -> None:
    caps.switch_user(ctx.plan.identity.uid, ctx.plan.identity.gid)


def _capabilities(ctx: ChildContext) -> None:
    # In a new user namespace the child holds a full (namespaced) capability
    # set, so the privileged path applies: bounding set and securebits too.
    caps.drop_all(privileged=ctx.plan.identity.started_as_root or ctx.plan.mount_ns)
    # The kernel clears the death signal when credentials change.
    caps.set_pdeathsig(signal.SIGKILL)
    _check_parent(ctx)


def _session_keyring(ctx: ChildContext) -> None:
    keyring.join_fresh_session()


def _apparmor(ctx: ChildContext) -> None:
    assert ctx.plan.lsm.apparmor is not None
    lsm.apparmor_change_onexec(ctx.plan.lsm.apparmor)


def _selinux(ctx: ChildContext) -> None:
    assert ctx.plan.lsm.selinux is not None
    lsm.selinux_setexeccon(ctx.plan.lsm.selinux)


def _no_core_dumps(ctx: ChildContext) -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _no_new_privs(ctx: ChildContext) -> None:
    caps.set_no_new_privs()


def _landlock(ctx: ChildContext) -> None:
    if ctx.ruleset is None:
        raise OSError(errno.EINVAL, "no Landlock ruleset was built")
    _rules_complete(ctx)
    landlock.restrict(ctx.ruleset, log_new_exec=ctx.landlock_log)


def _broker(ctx: ChildContext) -> None:
    assert ctx.mediation is not None
    ctx.mediation.start_broker(ctx.filters, ctx.status_w, ctx.supervisor,
                               in_pid_ns=ctx.plan.pid_ns)


def _seccomp(ctx: ChildContext) -> None:
    for f in ctx.filters:
        seccomp.load(f)


def _seccomp_notify(ctx: ChildContext) -> None:
    med = ctx.mediation
    assert med is not None
    # The listener goes to the supervisor as SCM_RIGHTS (channels.py: pidfd_getfd
    # would need ptrace rights over this process, now of the agent's uid). The
    # filter would hold this very sendmsg for the supervisor that waits for the
    # listener, so a thread started before it is loaded sends it: seccomp filters
    # are per thread (no TSYNC), the descriptor table is shared.
    # (The thread takes a pid: in a pid namespace the agent is then pid 4, not 3.)
    got: list[int] = []
    failed: list[OSError] = []
    ready = threading.Event()

    def hand() -> None:
        ready.wait()
        if got:
            try:
                med.hand_over(got, b"L")
            except OSError as e:
                failed.append(e)
    helper = threading.Thread(target=hand, daemon=True)
    helper.start()
    try:
        nfd = seccomp.load_notify(med.notify_program)
        got.append(nfd)
    finally:
        ready.set()
        helper.join()
    if failed:
        raise failed[0]     # never exec under a filter no one answers; the supervisor says why
    os.set_inheritable(nfd, False)
    status.send(ctx.status_w, status.Listener(nfd))
    _await_go(med, nfd)


def _await_go(med: MediationChannel, nfd: int) -> None:
    # The supervisor copies the listener; the agent must never hold it.
    if os.read(med.sync_r, 1) != b"g":
        os._exit(125)
    os.close(nfd)
    med.close_sync()


def _fork_agent(ctx: ChildContext) -> None:
    # pid 1 lives in the agent's own Landlock domain and, started unprivileged,
    # under its uid: without this the agent could ptrace it or read its
    # /proc/1/environ (the launcher's full environment). After the listener
    # hand-off, which needed it dumpable.
    caps.set_dumpable(False)
    if spawn.AVAILABLE:
        ctx.spawn_agent = True      # the exec step starts it from here (runtime/spawn.py)
        return
    agent = os.fork()
    if agent != 0:
        _init_until(ctx, agent)


def _init_until(ctx: ChildContext, agent: int) -> NoReturn:
    """pid 1 from here on: reaps, forwards signals, passes the agent's status on."""
    os.close(ctx.status_w)
    if ctx.ruleset is not None:
        ctx.ruleset.close()
    os._exit(wait_for(agent))


def _exec(ctx: ChildContext) -> None:
    plan = ctx.plan
    path = which(plan.argv[0], plan.env.get("PATH", os.defpath))
    if path is None:
        status.send(ctx.status_w, status.ExecFailed(errno.ENOENT, "not found"))
        os._exit(127)
    try:
        if ctx.spawn_agent:
            agent = spawn.spawn(path, plan.argv, plan.env, ctx.old_mask)
        else:
            signal.pthread_sigmask(signal.SIG_SETMASK, ctx.old_mask)
            os.execve(path, list(plan.argv), dict(plan.env))
    except OSError as e:
        status.send(ctx.status_w, status.ExecFailed(e.errno or errno.EIO,
                                                    e.strerror or str(e)))
        os._exit(127 if e.errno == errno.ENOENT else 126)
    _init_until(ctx, agent)


RUNNERS: dict[str, Callable[[ChildContext], None]] = {
    "pdeathsig": _pdeathsig, "cgroup": _cgroup, "signals": _signals, "close_fds": _close_fds, "limits": _limits,
    "mount_namespace": _mount_namespace, "net_namespace": _net_namespace,
    "gateway_sockets": _gateway_sockets,
    "readonly_host": _readonly_host,
    "protected_binds": _protected_binds, "file_binds": _file_binds, "private_dev": _private_dev,
    "pid_namespace": _pid_namespace, "proc_masks": _proc_masks, "landlock_new_mounts": _landlock_new_mounts,
    "chdir": _chdir, "identity": _identity, "capabilities": _capabilities,
    "session_keyring": _session_keyring, "apparmor": _apparmor, "selinux": _selinux, "no_core_dumps": _no_core_dumps,
    "no_new_privs": _no_new_privs, "landlock": _landlock, "broker": _broker,
    "seccomp": _seccomp, "seccomp_notify": _seccomp_notify, "fork_agent": _fork_agent,
    "exec": _exec,
}


def run(ctx: ChildContext) -> None:
    """Runs between fork and exec. Never returns."""
    name = "start"
    try:
        for step in ctx.plan.steps:
            name = step.name
            status.send(ctx.status_w, status.Begin(name))
            RUNNERS[name](ctx)
    except BaseException as e:  # report and die: never exec half-confined
        try:
            msg = f"{type(e).__name__}: {e}" if not isinstance(e, OSError) else (
                f"{e.strerror or e}" + (f" ({e.filename})" if getattr(e, "filename", None)
                                        else ""))
            status.send(ctx.status_w, status.SetupFailed(name, msg))
        finally:
            os._exit(125)
    os._exit(125)


def which(cmd: str, path: str) -> str | None:
    """Like the shell: the first existing file on PATH, so an unreadable PATH
    entry yields "not found" (127) and a found-but-forbidden file yields 126."""
    if "/" in cmd:
        return cmd if os.path.lexists(cmd) else None
    for d in path.split(":"):
        cand = os.path.join(d or ".", cmd)
        if os.path.isfile(cand):
            return cand
    return None
