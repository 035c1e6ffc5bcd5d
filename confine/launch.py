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
import sys

from .errors import CommandNotExecutable, CommandNotFound, ConfineError
from .kernel import caps, landlock, seccomp

FORWARD = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT,
           signal.SIGUSR1, signal.SIGUSR2, signal.SIGWINCH)
# Python ignores these at start-up; an agent must get the defaults back.
_PY_IGNORED = (signal.SIGPIPE, signal.SIGXFSZ)
SI_USER, SI_QUEUE, SI_TKILL = 0, -1, -6


def _child(plan, ruleset, flt, status_w: int, supervisor: int, old_mask) -> None:
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
        keep = sorted({status_w, ruleset.fileno()})
        lo = 3
        for fd in keep:
            os.closerange(lo, fd)
            lo = fd + 1
        os.closerange(lo, os.sysconf("SC_OPEN_MAX") if os.sysconf("SC_OPEN_MAX") > 0 else 65536)
        step = "chdir"
        os.chdir(plan.policy.workdir)
        step = "identity"
        ident = plan.identity
        if ident.switch:
            caps.switch_user(ident.uid, ident.gid)
        step = "capabilities"
        caps.drop_all(privileged=ident.started_as_root)
        # The kernel clears the death signal when credentials change.
        caps.set_pdeathsig(signal.SIGKILL)
        if os.getppid() != supervisor:
            os._exit(125)
        step = "core dumps"
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        step = "no_new_privs"
        caps.set_no_new_privs()
        step = "landlock"
        if ruleset is not None and plan.abi > 0:
            landlock.restrict(ruleset)
        step = "seccomp"
        if flt is not None:
            seccomp.load(flt)
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


def run_plan(plan, *, build_ruleset, build_filter) -> int:
    ruleset = build_ruleset()
    flt = build_filter()
    status_r, status_w = os.pipe2(os.O_CLOEXEC)
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
            _child(plan, ruleset, flt, status_w, supervisor, old_mask)
        finally:
            os._exit(125)
    try:
        os.close(status_w)
        if ruleset is not None:
            ruleset.close()
        report = b""
        while True:
            try:
                chunk = os.read(status_r, 4096)
            except InterruptedError:
                continue
            if not chunk:
                break
            report += chunk
        os.close(status_r)
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
