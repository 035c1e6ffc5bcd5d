"""Fork, confine the child in a fixed order, exec; the supervisor waits.

The supervisor never runs agent code. It forwards signals that were sent to
it (not those the terminal already delivered to the whole process group),
reaps, kills whatever the agent left behind, and reports the exit status.
"""
from __future__ import annotations

import errno
import resource
import os
import signal
import socket
import sys
import time
from typing import Callable

from .errors import CommandNotExecutable, CommandNotFound, ConfineError, default_warn
from .mediation import Mediator, broker_main
from .kernel import caps, hostview, landlock, lsm, namespaces, notify, seccomp

FORWARD = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT,
           signal.SIGUSR1, signal.SIGUSR2, signal.SIGWINCH)
# Python ignores these at start-up; an agent must get the defaults back.
_PY_IGNORED = (signal.SIGPIPE, signal.SIGXFSZ)
SI_USER, SI_QUEUE, SI_TKILL = 0, -1, -6


def _child(plan, ruleset, flt, status_w: int, supervisor: int, old_mask,
           med=None, protect_plan=None) -> None:
    """Runs between fork and exec. Never returns."""
    step = "start"
    try:
        step = "pdeathsig"
        caps.set_pdeathsig(signal.SIGKILL)
        if os.getppid() != supervisor:
            os._exit(125)
        for s in _PY_IGNORED + FORWARD + (signal.SIGCHLD,):
            signal.signal(s, signal.SIG_DFL)
        step = "close fds"
        keep = {status_w}
        if ruleset is not None:
            keep.add(ruleset.fileno())
        if med is not None:
            keep |= {med["sync_r"], med["broker_fd"]}
        keep = sorted(keep)
        lo = 3
        for fd in keep:
            os.closerange(lo, fd)
            lo = fd + 1
        os.closerange(lo, os.sysconf("SC_OPEN_MAX") if os.sysconf("SC_OPEN_MAX") > 0 else 65536)
        ident = plan.identity
        if plan.mount_ns:
            step = "mount namespace"
            namespaces.enter(userns=not ident.started_as_root)
            namespaces.make_private()
            step = "read-only host"
            hostview.readonly_except(plan.writable_binds)
            if protect_plan is not None:
                step = "read-only protected workdir paths"
                namespaces.apply(protect_plan)
            step = "private /dev/shm and /dev/pts"
            hostview.private_shm()
            hostview.private_pts()
        expect_parent = supervisor
        if plan.pid_ns:
            step = "pid namespace"
            _enter_pid_ns(status_w, ruleset, med)   # returns only in the new pid 1
            expect_parent = 0                       # the relay lives outside: pid 0 here
            hostview.private_proc()
            caps.set_pdeathsig(signal.SIGKILL)
        # Rules made in the supervisor name the host's /dev/shm, /dev/pts and /proc;
        # these are new mounts, so grant them again here.
        for path, access in plan.child_rules:
            if ruleset is not None and os.path.exists(path):
                landlock.add(ruleset, path, access)
        step = "chdir"
        os.chdir(plan.policy.workdir)
        step = "identity"
        if ident.switch:
            caps.switch_user(ident.uid, ident.gid)
        step = "capabilities"
        # In a new user namespace the child holds a full (namespaced) capability
        # set, so the privileged path applies: bounding set and securebits too.
        caps.drop_all(privileged=ident.started_as_root or plan.mount_ns)
        # The kernel clears the death signal when credentials change.
        caps.set_pdeathsig(signal.SIGKILL)
        if os.getppid() != expect_parent:
            os._exit(125)
        # LSM transitions at exec; must precede no_new_privs (which blocks most
        # AppArmor transitions) and Landlock.
        if plan.lsm_apparmor:
            step = "apparmor change_onexec"
            lsm.apparmor_change_onexec(plan.lsm_apparmor)
        if plan.lsm_selinux:
            step = "selinux setexeccon"
            lsm.selinux_setexeccon(plan.lsm_selinux)
        step = "core dumps"
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        step = "no_new_privs"
        caps.set_no_new_privs()
        step = "landlock"
        if ruleset is not None and plan.abi > 0:
            landlock.restrict(ruleset)
        if med is not None:
            step = "unix socket broker"
            _start_broker(flt, med, status_w, supervisor, in_pid_ns=plan.pid_ns)
        step = "seccomp"
        for f in flt:
            seccomp.load(f)
        if med is not None:
            step = "seccomp notification"
            nfd = seccomp.load_notify(med["filter"])
            os.set_inheritable(nfd, False)
            os.write(status_w, f"notify {nfd}\n".encode())
            # The supervisor copies the listener; the agent must never hold it.
            if os.read(med["sync_r"], 1) != b"g":
                os._exit(125)
            os.close(nfd)
            os.close(med["sync_r"])
        if plan.pid_ns:
            # pid 1 stays as the namespace's init: reaps, forwards signals, and
            # takes every process of the agent with it when it exits.
            step = "fork the agent"
            # pid 1 lives in the agent's own Landlock domain and, started
            # unprivileged, under its uid: without this the agent could ptrace it
            # or read its /proc/1/environ (the launcher's full environment).
            # After the listener hand-off, which needed it dumpable.
            caps.set_dumpable(False)
            agent = os.fork()
            if agent != 0:
                os.close(status_w)
                if ruleset is not None:
                    ruleset.close()
                os._exit(_wait(agent))
        step = "exec"
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
        path = _which(plan.argv[0], plan.env.get("PATH", os.defpath))
        if path is None:
            os.write(status_w, f"exec {errno.ENOENT} not found".encode())
            os._exit(127)
        try:
            os.execve(path, plan.argv, plan.env)
        except OSError as e:
            os.write(status_w, f"exec {e.errno} {e.strerror}".encode())
            os._exit(127 if e.errno == errno.ENOENT else 126)
    except BaseException as e:  # report and die: never exec half-confined
        try:
            msg = f"{type(e).__name__}: {e}" if not isinstance(e, OSError) else (
                f"{e.strerror or e}" + (f" ({e.filename})" if getattr(e, "filename", None) else ""))
            os.write(status_w, f"setup {step}: {msg}".encode()[:4000])
        finally:
            os._exit(125)
    os._exit(125)


def _enter_pid_ns(status_w: int, ruleset, med) -> None:
    """unshare(CLONE_NEWPID) and fork: the parent stays behind as a relay (the
    supervisor's child: forwards signals, passes on the exit status); the
    child is pid 1 of the new namespace and returns."""
    namespaces.unshare(namespaces.CLONE_NEWPID)
    init = os.fork()
    if init == 0:
        return
    os.write(status_w, f"initpid {init}\n".encode())
    os.close(status_w)
    caps.set_dumpable(False)
    _close_child_ends(ruleset, med)
    os._exit(_wait(init))


def _close_child_ends(ruleset, med) -> None:
    """What only the confined child (or pid 1) needs: the ruleset and the
    broker/sync descriptors."""
    if ruleset is not None:
        ruleset.close()
    if med is not None:
        os.close(med["sync_r"])
        os.close(med["broker_fd"])


def _start_broker(flt, med, status_w: int, supervisor: int, in_pid_ns: bool = False) -> None:
    """Fork the broker inside the agent's Landlock domain (see mediation/broker.py). A
    double fork re-parents it to the supervisor, a child subreaper; in a pid
    namespace it stays the child of the namespace's init."""
    first = os.fork()
    if first == 0:
        try:
            if in_pid_ns:
                supervisor = 1
            elif os.fork() != 0:
                os._exit(0)
            os.close(status_w)
            os.close(med["sync_r"])
            for _ in range(2000):
                if os.getppid() == supervisor:
                    break
                time.sleep(0.0005)
            caps.set_pdeathsig(signal.SIGKILL)
            if os.getppid() != supervisor:
                os._exit(0)
            caps.set_dumpable(False)
            for f in flt:
                seccomp.load(f)
            broker_main(socket.socket(fileno=med["broker_fd"]), med.get("guard"))
        finally:
            os._exit(0)
    if not in_pid_ns:
        os.waitpid(first, 0)
    os.close(med["broker_fd"])


def _which(cmd: str, path: str) -> str | None:
    """Like the shell: the first existing file on PATH, so an unreadable PATH
    entry yields "not found" (127) and a found-but-forbidden file yields 126."""
    if "/" in cmd:
        return cmd if os.path.lexists(cmd) else None
    for d in path.split(":"):
        cand = os.path.join(d or ".", cmd)
        if os.path.isfile(cand):
            return cand
    return None


def _children_of(pid: int) -> list[int]:
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                data = f.read()
        except OSError:
            continue
        rest = data[data.rfind(b")") + 2:].split()
        if len(rest) > 1 and int(rest[1]) == pid:
            out.append(int(name))
    return out


def _kill_leftovers() -> None:
    """Orphans of the agent were re-parented to us (subreaper): kill and reap them."""
    me = os.getpid()
    for _ in range(100):
        kids = _children_of(me)
        if not kids:
            break
        for k in kids:
            try:
                os.kill(k, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for k in kids:
            try:
                os.waitpid(k, 0)
            except ChildProcessError:
                pass


def run_plan(plan, *, build_ruleset, build_filter, mediation_roots=None,
             protect_plan=None, guard=None) -> int:
    ruleset = build_ruleset()
    flt = build_filter()  # list of deny filters, loaded in order
    status_r, status_w = os.pipe2(os.O_CLOEXEC)
    med = None
    if mediation_roots is not None:
        broker_sup, broker_child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        sync_r, sync_w = os.pipe2(os.O_CLOEXEC)
        med = {"sync_r": sync_r, "broker_fd": broker_child.detach(), "guard": guard,
               "filter": seccomp.notify_program(seccomp.build_notify(files=guard is not None))}
    sigset = set(FORWARD) | {signal.SIGCHLD}
    # SIGCHLD is ignored by default, which could discard it before sigwaitinfo.
    old_chld = signal.signal(signal.SIGCHLD, lambda *_: None)
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, sigset)
    caps.set_child_subreaper()
    supervisor = os.getpid()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(status_r)
            if med is not None:
                broker_sup.close()
                os.close(sync_w)
            _child(plan, ruleset, flt, status_w, supervisor, old_mask, med, protect_plan)
        finally:
            os._exit(125)
    try:
        os.close(status_w)
        _close_child_ends(ruleset, med)
        report = b""
        holder = pid      # the process that holds the seccomp listener
        while True:
            try:
                chunk = os.read(status_r, 4096)
            except InterruptedError:
                continue
            if not chunk:
                break
            report += chunk
            while report.startswith(b"initpid ") and b"\n" in report:
                line, report = report.split(b"\n", 1)
                holder = int(line.split()[1])
            if med is not None and report.startswith(b"notify ") and b"\n" in report:
                line, report = report.split(b"\n", 1)
                try:
                    _start_mediator(holder, int(line.split()[1]), broker_sup, mediation_roots,
                                    plan, files=guard is not None)
                except OSError as e:
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                    raise ConfineError(f"cannot take over the seccomp listener: {e}") from None
                os.write(sync_w, b"g")
        os.close(status_r)
        if med is not None:
            os.close(sync_w)
        status = _wait(pid)
        _kill_leftovers()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
        signal.signal(signal.SIGCHLD, old_chld)
    if report:
        text = report.decode(errors="replace")
        if text.startswith("exec "):
            _, num, msg = text.split(" ", 2)
            err = int(num)
            cmd = plan.argv[0]
            if err == errno.ENOENT:
                raise CommandNotFound(f"{cmd}: command not found (searched PATH inside the sandbox)")
            hint = ""
            if err in (errno.EACCES, errno.EPERM):
                hint = " (not executable, or not readable inside the sandbox: grant it with --read)"
            raise CommandNotExecutable(f"{cmd}: cannot execute: {msg}{hint}")
        raise ConfineError(text)
    return status


def _start_mediator(pid: int, child_fd: int, broker: socket.socket, roots: list[str], plan,
                    files: bool = False, warn: Callable[[str], None] = default_warn) -> None:
    """Take the agent's notify listener from `pid` and answer it; denials go to warn."""
    pidfd = notify.pidfd_open(pid)
    try:
        nfd = notify.pidfd_getfd(pidfd, child_fd)
    finally:
        os.close(pidfd)
    Mediator(nfd, broker, roots, plan.identity.uid, warn=warn, files=files).start()


def _wait(pid: int) -> int:
    sigset = set(FORWARD) | {signal.SIGCHLD}
    while True:
        try:
            wpid, st = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return 125
        if wpid == pid:
            if os.WIFSIGNALED(st):
                return 128 + os.WTERMSIG(st)
            return os.WEXITSTATUS(st)
        info = signal.sigwaitinfo(sigset)
        if info.si_signo == signal.SIGCHLD:
            # reap orphans that were re-parented to us, keep waiting for the agent
            while True:
                try:
                    other, _ = os.waitpid(-1, os.WNOHANG)
                except ChildProcessError:
                    break
                if other == 0:
                    break
                if other == pid:
                    # already reaped above by waitpid(-1): recover its status
                    return _status_of(_)
            continue
        # Terminal-generated signals (si_code > 0) already reached the agent,
        # which shares our process group; forward only those sent to us.
        if info.si_code in (SI_USER, SI_QUEUE, SI_TKILL) or info.si_code < 0:
            try:
                os.kill(pid, info.si_signo)
            except ProcessLookupError:
                pass


def _status_of(st: int) -> int:
    if os.WIFSIGNALED(st):
        return 128 + os.WTERMSIG(st)
    return os.WEXITSTATUS(st)
