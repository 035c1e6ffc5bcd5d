"""What this machine can enforce, read once per run and handed to the planner.

The planner is pure: everything it needs to know about the kernel comes in as
a frozen HostFacts, so it can be unit-tested with any host one cares to
describe. `HostFacts.read` is the only place that asks the kernel.

Test-only knobs (they can only take a protection away, so confine then refuses
unless the caller accepts the loss by name):
  CONFINE_TEST_LANDLOCK_ABI_MAX=N   believe the kernel has Landlock ABI <= N
                                    (read in kernel/landlock.py)
  CONFINE_TEST_NO_NAMESPACES=1      believe mount/pid namespaces are unavailable
"""
from __future__ import annotations

import os
from dataclasses import dataclass

NO_NAMESPACES_ENV = "CONFINE_TEST_NO_NAMESPACES"


@dataclass(frozen=True)
class HostFacts:
    landlock_abi: int
    seccomp_filter: bool
    seccomp_user_notif: bool
    namespaces: bool          # private mount + pid namespaces work for this caller
    net_namespace: bool = False   # ... and a private network namespace inside them
    apparmor: bool = False    # AppArmor enabled
    selinux: bool = False     # SELinux enabled
    cgroup: str | None = None                 # where a run's cgroup (v2) can be made
    cgroup_controllers: tuple[str, ...] = ()  # of pids, memory: usable by that cgroup
    seccomp_listener_busy: bool = False       # an inherited filter holds the one listener
    root_mounts: bool = True                  # started as root, confine may mount (tmp_size)
    pidfd_getfd: bool = True  # the supervisor may take a child's descriptors (container
                              # runtimes refuse it without CAP_SYS_PTRACE)

    @classmethod
    def read(cls, as_root: bool) -> HostFacts:
        from ..kernel import cgroup, landlock, lsm, seccomp
        sc_filter, sc_notif = seccomp.available()
        cg = cgroup.parent_for_run(as_root)
        return cls(landlock_abi=landlock.kernel_abi(),
                   seccomp_filter=sc_filter, seccomp_user_notif=sc_notif,
                   namespaces=namespaces_available(as_root),
                   net_namespace=net_namespace_available(as_root),
                   apparmor=lsm.apparmor_enabled(), selinux=lsm.selinux_enabled(),
                   cgroup=cg, cgroup_controllers=cgroup.controllers(cg) if cg else (),
                   seccomp_listener_busy=seccomp.listener_busy(),
                   # a root that could make the mount namespace may mount: no second fork
                   root_mounts=as_root and (namespaces_available(as_root)
                                            or root_mounts_available()),
                   pidfd_getfd=pidfd_getfd_available())


_NS_CACHE: dict[bool, tuple[bool, bool]] = {}


def root_mounts_available() -> bool:
    """Root may make a mount namespace here (and so mount): not inside a container
    without CAP_SYS_ADMIN, whose seccomp profile refuses unshare and mount. Not
    affected by CONFINE_TEST_NO_NAMESPACES (which takes only the agent's away)."""
    from ..kernel import namespaces
    pid = os.fork()
    if pid == 0:
        try:
            namespaces.unshare(namespaces.CLONE_NEWNS)
            os._exit(0)
        except BaseException:
            os._exit(1)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0


def namespaces_available(as_root: bool) -> bool:
    """Try, in a throw-away child, what the launcher's child will do."""
    return _probe(as_root)[0]


def net_namespace_available(as_root: bool) -> bool:
    """A private network namespace as well (tried in the same child)."""
    return _probe(as_root)[1]


def _probe(as_root: bool) -> tuple[bool, bool]:
    if os.environ.get(NO_NAMESPACES_ENV) == "1":
        return (False, False)
    if as_root not in _NS_CACHE:
        from ..kernel import hostview, namespaces
        pid = os.fork()
        if pid == 0:
            try:
                namespaces.enter(userns=not as_root)
                namespaces.make_private()
                try:
                    namespaces.unshare(namespaces.CLONE_NEWNET)
                    net = 0
                except OSError:
                    net = 2                  # everything else may still work
                namespaces.unshare(namespaces.CLONE_NEWPID)
                init = os.fork()
                if init == 0:
                    try:
                        hostview.private_proc()
                        os._exit(0)
                    except BaseException:
                        os._exit(1)
                code = os.waitstatus_to_exitcode(os.waitpid(init, 0)[1])
                os._exit(code if code else net)
            except BaseException:
                os._exit(1)
        code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        _NS_CACHE[as_root] = (code in (0, 2), code == 0)
    return _NS_CACHE[as_root]


def pidfd_getfd_available() -> bool:
    """Whether this process may take a descriptor of its own child with
    pidfd_getfd (a seccomp filter above us, Yama or an LSM may refuse it).
    Asked of this process itself first (no fork on the start-up path): that
    answers for a seccomp filter, the usual refuser (Docker's profile). Only
    where Yama restricts ptrace beyond descendants (ptrace_scope >= 2), which
    a self-probe cannot see, is a child tried. An LSM refusal the probe missed
    fails the run at the listener's hand-off, with its reason (never a pass)."""
    from ..kernel import notify
    try:
        me = notify.pidfd_open(os.getpid())
        try:
            os.close(notify.pidfd_getfd(me, me))
        finally:
            os.close(me)
    except OSError:
        return False
    if _yama_scope() < 2:
        return True
    r, w = os.pipe2(os.O_CLOEXEC)
    pid = os.fork()
    if pid == 0:
        try:
            os.close(w)
            os.read(r, 1)
        finally:
            os._exit(0)
    try:
        pidfd = notify.pidfd_open(pid)
        try:
            os.close(notify.pidfd_getfd(pidfd, r))
            return True
        finally:
            os.close(pidfd)
    except OSError:
        return False
    finally:
        os.close(w)
        os.close(r)
        os.waitpid(pid, 0)


def _yama_scope() -> int:
    try:
        with open("/proc/sys/kernel/yama/ptrace_scope") as f:
            return int(f.read().strip() or 0)
    except (OSError, ValueError):
        return 0
