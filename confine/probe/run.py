"""`confine probe`, supervisor side: plant harmless targets outside the
sandbox, run the battery inside exactly the sandbox `confine exec` builds,
collect its JSON report.

The battery runs through `api.run()`, the same call `confine exec` makes, so
it gets the same policy, identity, Landlock rules, seccomp filter and
unix-socket mediation. Its stdout and stderr are captured by pointing this
process's descriptors 1 and 2 at memfds for the duration of the call (the
child keeps 0, 1, 2 and nothing else; a memfd cannot fill up and block the
agent while the supervisor waits). Stdin is /dev/null.

Targets (all removed afterwards): a directory in /tmp with files to write,
rename, truncate and read, owned by the agent's user so that only the sandbox,
not file permissions, can stop the attempts; a listening unix socket in it
(a stand-in for docker.sock) and an abstract one; a TCP listener and a UDP
socket on 127.0.0.1; a sleeping process outside the sandbox running as the
agent's user, with a canary secret in its environment; a descriptor on the
canary file left open and inheritable; a canary secret-looking variable in the
environment. Started as root, a setuid-root copy of id(1) in a root-owned
directory in the workdir (id only prints ids).

CONFINE_TEST_PROBE_UNCONFINED=1 (tests only) runs the battery with no
confinement at all, as the invoking user, to prove every class of attempt is
detectable as "possible".
"""
from __future__ import annotations

import json
import os
import secrets as _secrets
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from .. import api
from ..kernel import landlock, seccomp
from ..policy.secrets import HOME_SECRETS
from . import audit, report
from .check import read_setting

UNCONFINED_ENV = "CONFINE_TEST_PROBE_UNCONFINED"
CANARY_ENV = "CONFINE_PROBE_CANARY_TOKEN"

# Every system call the battery makes by number.
SYSCALLS = (
    "ioctl", "mount", "fsopen", "open_tree", "chroot", "unshare", "clone", "clone3", "setns",
    "finit_module", "kexec_load", "reboot", "bpf", "perf_event_open", "io_uring_setup",
    "userfaultfd", "keyctl", "personality", "syslog", "settimeofday", "swapon", "ioperm",
    "open_by_handle_at", "ptrace", "process_vm_readv", "pidfd_open", "pidfd_getfd", "mknod",
    "mknodat", "socket", "getpid", "kill",
)

# The process outside the sandbox that the battery signals, traces and reads.
TARGET_SRC = r"""
import ctypes, os, time
libc = ctypes.CDLL(None)
libc.prctl(1, 9, 0, 0, 0)                                   # PR_SET_PDEATHSIG, SIGKILL
libc.prctl(0x59616d61, ctypes.c_ulong(2**64 - 1), 0, 0, 0)  # PR_SET_PTRACER_ANY (Yama)
os.write(1, b"r")
time.sleep(60)
"""


def battery_source() -> str:
    return Path(__file__).with_name("battery.py").read_text()


def python_for_battery() -> str:
    """The system Python: readable by every user and inside every built-in profile."""
    for p in ("/usr/bin/python3",):
        if os.access(p, os.X_OK):
            return p
    return os.path.realpath(sys.executable)


def _syscall_numbers() -> dict[str, int]:
    out = {}
    for name in SYSCALLS:
        try:
            nr = seccomp.syscall_number(name)
        except Exception:  # noqa: BLE001 - libseccomp missing: the battery skips by name
            nr = None
        if nr is not None:
            out[name] = nr
    return out


def _rules(plan) -> list:
    names = set(SYSCALLS)
    rules = tuple(plan.seccomp_rules) + tuple(getattr(plan, "seccomp_extra", ()))
    return [[r.syscall, r.errno, [[a.index, a.op, a.value, a.mask] for a in r.args]]
            for r in rules if r.syscall in names]


def _credential_files(home: str, limit: int = 12) -> list[str]:
    """Existing credential files under home (files inside secret directories too)."""
    out: list[str] = []
    for entry in HOME_SECRETS:
        p = os.path.join(home, entry[2:]) if entry.startswith("~/") else entry
        if os.path.isfile(p):
            out.append(p)
        elif os.path.isdir(p):
            for dirpath, dirnames, filenames in os.walk(p):
                out += [q for q in (os.path.join(dirpath, f) for f in sorted(filenames))
                        if os.path.isfile(q)][:3]
                dirnames[:] = sorted(dirnames)[:2] if dirpath.count("/") - p.count("/") < 1 else []
        if len(out) >= limit:
            break
    return out[:limit]


def _block_devices(limit: int = 64) -> list[str]:
    try:
        names = os.listdir("/sys/class/block")
    except OSError:
        return []
    names.sort(key=lambda n: (n.startswith(("loop", "ram", "zram")), n))
    out = []
    for n in names:
        p = "/dev/" + n
        try:
            if stat.S_ISBLK(os.stat(p).st_mode):
                out.append(p)
        except OSError:
            continue
        if len(out) >= limit:
            break
    return out


def own_address() -> str | None:
    """This host's own non-loopback IPv4 address (the source of its default route): the
    probe's "outside" target, so that no attempt ever sends a packet off the machine.
    A UDP connect sends nothing."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.connect(("192.0.2.1", 9))
        a = str(s.getsockname()[0])
    except OSError:
        return None
    finally:
        s.close()
    return None if a.startswith("127.") or a == "0.0.0.0" else a


CANARY_ANSWER = "192.0.2.53"   # what the probe's own DNS server answers (TEST-NET-1)


def _dns_responder(sock: socket.socket) -> None:
    """Answer every query on `sock` with one A record (CANARY_ANSWER): a resolver outside
    confine that the agent must not reach."""
    while True:
        try:
            data, peer = sock.recvfrom(512)
        except OSError:
            return
        if len(data) < 12:
            continue
        end = data.find(b"\0", 12)
        if end < 0 or len(data) < end + 5:
            continue
        question = data[12:end + 5]
        answer = b"\xc0\x0c" + bytes([0, 1, 0, 1, 0, 0, 0, 60, 0, 4]) + socket.inet_aton(CANARY_ANSWER)
        reply = data[:2] + b"\x81\x80\x00\x01\x00\x01\x00\x00\x00\x00" + question + answer
        try:
            sock.sendto(reply, peer)
        except OSError:
            pass


def _greeter(sock: socket.socket, banner: bytes) -> None:
    """Greet every connection to the probe's "outside" TCP service with `banner`: how
    the battery knows a connection the gateway took reached this listener (relayed),
    not the gateway alone (which sends nothing first)."""
    while True:
        try:
            c, _ = sock.accept()
        except OSError:
            return
        try:
            c.settimeout(1.0)
            c.sendall(banner)
        except OSError:
            pass
        finally:
            c.close()


def _resolver() -> str | None:
    try:
        with open("/etc/resolv.conf") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 2 and parts[0] == "nameserver" and parts[1].count(".") == 3:
                    return parts[1]
    except OSError:
        pass
    return None


def _real_sockets(uid: int, home: str) -> dict[str, list[str]]:
    found = audit.sockets_by_category(uid, home)
    return {"runtime": found.get("runtime", []), "ssh_agent": found.get("ssh", []),
            "dbus": found.get("dbus", []), "multiplexer": found.get("multiplexer", [])}


class Targets:
    """Harmless things to attack, outside the sandbox; removed by cleanup()."""

    def __init__(self, uid: int, gid: int, chown: bool, workdir: str, suid: bool):
        self.uid, self.gid, self.chown = uid, gid, chown
        self.workdir = workdir
        self.want_suid = suid
        self.rand = _secrets.token_hex(4)
        self.canary = "confine-probe-canary-" + _secrets.token_hex(8)
        self.dir: str | None = None
        self.socks: list[socket.socket] = []
        self.proc: subprocess.Popen | None = None
        self.inherit_fd: int | None = None
        self.suid_dir: str | None = None
        self.shm: str | None = None
        self.scratch = f".confine-probe-{self.rand}"
        self.abstract = f"confine-probe-{self.rand}"

    def _own(self, path: str) -> None:
        if self.chown:
            os.lchown(path, self.uid, self.gid)

    def setup(self) -> dict:
        self.dir = tempfile.mkdtemp(prefix="confine-probe-", dir="/tmp")
        os.chmod(self.dir, 0o700)
        self._own(self.dir)
        files = {}
        for key, name, text in (("file", "target.txt", "confine probe target\n"),
                                ("victim", "victim.txt", "confine probe rename target\n"),
                                ("trunc", "trunc.txt", "confine probe truncate target\n"),
                                ("secret", "canary-secret.txt", self.canary + "\n")):
            p = os.path.join(self.dir, name)
            with open(p, "w") as f:
                f.write(text)
            os.chmod(p, 0o600)
            self._own(p)
            files[key] = p
        files["dir"] = self.dir

        fake = os.path.join(self.dir, "docker.sock")
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(fake)
        s.listen(64)
        os.chmod(fake, 0o666)
        self._own(fake)
        self.socks.append(s)
        a = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        a.bind(b"\0" + self.abstract.encode())
        a.listen(64)
        self.socks.append(a)
        t = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        t.bind(("127.0.0.1", 0))
        t.listen(64)
        self.socks.append(t)
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        u.bind(("127.0.0.1", 0))
        self.socks.append(u)
        # "Outside" stand-ins on this host's own address: a TCP service and a DNS server
        outside: dict[str, object] = {}
        own = own_address()
        if own is not None:
            ot = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            ot.bind((own, 0))
            ot.listen(64)
            self.socks.append(ot)
            banner = f"confine-probe-outside-{self.rand}\n"
            threading.Thread(target=_greeter, args=(ot, banner.encode()), daemon=True).start()
            od = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            od.bind((own, 0))
            self.socks.append(od)
            threading.Thread(target=_dns_responder, args=(od,), daemon=True).start()
            outside = {"address": own, "tcp_port": ot.getsockname()[1], "dns_port": od.getsockname()[1],
                       "dns_answer": CANARY_ANSWER, "banner": banner}

        if os.path.isdir("/dev/shm"):
            shm = f"/dev/shm/confine-probe-{self.rand}"
            fd = os.open(shm, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            os.close(fd)
            self.shm = shm
            self._own(shm)
            files["shm"] = shm

        self.inherit_fd = os.open(files["secret"], os.O_RDONLY)
        os.set_inheritable(self.inherit_fd, True)

        kw = {}
        if self.chown:
            kw = {"user": self.uid, "group": self.gid, "extra_groups": []}
        self.proc = subprocess.Popen(
            [python_for_battery(), "-I", "-S", "-c", TARGET_SRC, "confine-probe-target",
             f"--token={self.canary}"], stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd="/", close_fds=True,
            env={CANARY_ENV: self.canary, "PATH": "/usr/bin:/bin"}, **kw)
        self.proc.stdout.read(1)  # ready: ptracer set
        self.proc.stdout.close()

        suid = self._plant_suid() if self.want_suid else None
        return {
            "outside": files, "canary": self.canary, "canary_env": CANARY_ENV,
            "inherit_fd": self.inherit_fd, "sockets": {"fake": [fake]},
            "abstract_socket": self.abstract, "tcp_port": t.getsockname()[1],
            "udp_port": u.getsockname()[1], "target_pid": self.proc.pid, "outside_net": outside,
            "suid_target": suid, "scratch": self.scratch, "rand": self.rand,
        }

    def _plant_suid(self) -> str | None:
        """A setuid-root id(1) in a root-owned directory in the workdir (the agent
        can execute it there, and cannot move it out of a directory it cannot write)."""
        src = shutil.which("id", path="/usr/bin:/bin")
        if not src:
            return None
        d = os.path.join(self.workdir, self.scratch + "-suid")
        try:
            os.mkdir(d, 0o755)
        except OSError:
            return None
        self.suid_dir = d
        os.chmod(d, 0o755)
        dst = os.path.join(d, "id")
        shutil.copyfile(src, dst)
        os.chmod(dst, 0o4755)
        return dst

    def cleanup(self) -> None:
        if self.proc is not None:
            try:
                self.proc.kill()
            except OSError:
                pass
            try:
                self.proc.wait(timeout=5)
            except (subprocess.TimeoutExpired, ChildProcessError):
                pass
        for s in self.socks:
            try:
                s.shutdown(socket.SHUT_RDWR)    # wakes the thread that serves it
            except OSError:
                pass
            s.close()
        if self.inherit_fd is not None:
            os.close(self.inherit_fd)
        if self.shm:
            try:
                os.unlink(self.shm)
            except OSError:
                pass
        for d in (self.dir, self.suid_dir, os.path.join(self.workdir, self.scratch)):
            if d and os.path.lexists(d):
                api.remove_tree(d)


def _slurp(fd: int) -> str:
    try:
        size = os.lseek(fd, 0, os.SEEK_END)
        return os.pread(fd, size, 0).decode(errors="replace")
    finally:
        os.close(fd)


def _run_confined(argv, opts: dict, canary: str, warnings: list) -> tuple[int, str, str]:
    out_fd = os.memfd_create("confine-probe-stdout")
    err_fd = os.memfd_create("confine-probe-stderr")
    null = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = {}
    old_canary = os.environ.get(CANARY_ENV)
    os.environ[CANARY_ENV] = canary  # must be stripped by the environment allowlist
    try:
        for fd, new in ((0, null), (1, out_fd), (2, err_fd)):
            try:
                saved[fd] = os.dup(fd)
            except OSError:
                saved[fd] = None
            os.dup2(new, fd)
        status = api.run(argv, warn=warnings.append, **opts)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, old in saved.items():
            if old is None:
                os.close(fd)
            else:
                os.dup2(old, fd)
                os.close(old)
        os.close(null)
        if old_canary is None:
            os.environ.pop(CANARY_ENV, None)
        else:
            os.environ[CANARY_ENV] = old_canary
    err = _slurp(err_fd)
    _discard_held(err, quarantine=bool(opts.get("exclusive")))
    return status, _slurp(out_fd), err


def _discard_held(err: str, quarantine: bool = False) -> None:
    """The battery's own plants that the name guard or an exclusive workdir's exit
    check held (protect/held.py) or quarantined are not the person's to review:
    their run's held state and quarantine go."""
    import re

    from ..protect import held
    for rid in set(re.findall(r"confine held discard (\S+)`", err)):
        try:
            m = held.load(rid)
            held.discard(m, list(held.iter_roots(m)))
        except (held.HeldError, OSError):
            pass
    if not quarantine:
        return
    # an exclusive workdir: what its exit check moved away (the battery's hooks) too
    from ..protect import revert
    base = os.path.dirname(revert.default_quarantine_dir("x"))
    for line in re.findall(r"^confine: quarantine: (.+)$", err, re.M):
        for d in line.split(", "):
            if os.path.dirname(d) == base and os.path.isdir(d) and not os.path.islink(d):
                api.remove_tree(d)


def _run_unconfined(argv, workdir: str, canary: str, inherit_fd: int) -> tuple[int, str, str]:
    env = dict(os.environ)
    env[CANARY_ENV] = canary
    p = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, env=env,
                       cwd=workdir, pass_fds=(inherit_fd,), timeout=60)
    return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")


def _parse(out: str) -> dict | None:
    for line in reversed(out.splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                return None
    return None


def _present(path: str, content: str | None = None) -> bool:
    """Whether path names anything (content: a file holding exactly that), never
    following a symlink, one component at a time (a path deeper than PATH_MAX reads
    as missing to lstat)."""
    comps = [c for c in path.split("/") if c]
    try:
        fd = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return True
    try:
        for i, c in enumerate(comps):
            last = i == len(comps) - 1
            try:
                nfd = os.open(c, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
                              | (0 if last else os.O_DIRECTORY), dir_fd=fd)
            except FileNotFoundError:
                return False
            except OSError:
                return True         # cannot tell: it counts as there
            os.close(fd)
            fd = nfd
        if content is None:
            return True
        try:
            with open(f"/proc/self/fd/{fd}", "rb") as f:
                return f.read(len(content) + 1) == content.encode()
        except OSError:
            return False        # not a file it can read: not the plant as written
    finally:
        os.close(fd)


_AT_EXIT = "exit check (exclusive workdir: new protected names held or quarantined at exit)"


def _settle_exit_checks(out: str) -> str:
    """An exclusive workdir: the attempts the battery left for the exit check
    (battery._at_exit) are blocked where none of their paths is in the workdir
    after the run, still possible where one is. Looked at before the targets go."""
    data = _parse(out)
    if data is None:
        return out
    for a in data.get("attempts", []):
        paths = a.pop("exit_check", None)
        if a.get("result") != "possible" or not paths:
            continue
        there = [p for p, text in paths if _present(p, text)]
        if there:
            a["detail"] += "; still in the workdir after the exit check: " + ", ".join(there)
        else:
            a.update(result="blocked", seen="moved at exit", mechanism=_AT_EXIT,
                     detail=a["detail"] + "; gone from the workdir after the run")
    return json.dumps(data)


def probe(*, profile="default", workdir=None, read=(), write=(), env=(), user=None,
          allow_degraded=False, force_workdir=False, only=(), exclusive=False) -> dict:
    """Run the battery; returns the report (report.build). Raises ConfineError
    for confine's own errors (bad profile, refused workdir, unenforceable policy).
    exclusive: in an exclusive workdir (--exclusive-workdir)."""
    t0 = time.monotonic()
    unconfined = os.environ.get(UNCONFINED_ENV) == "1"
    python = python_for_battery()
    opts = dict(profile=profile, workdir=workdir, read=read, write=write, env=env, user=user,
                force_workdir=force_workdir, exclusive=exclusive)
    # The same preparation `confine exec` makes, for the facts the battery and
    # the report need (identity, rules, ABI); the run below prepares again.
    plan = api.prepare([python], protect=False, **opts)
    warnings: list[str] = []
    if not unconfined:
        api.refuse_missing(plan, allow_degraded, warn=lambda m: None)
    ident = plan.identity
    wd = plan.policy.workdir
    chown = os.geteuid() == 0 and ident.uid != 0
    targets = Targets(ident.uid, ident.gid, chown, wd,
                      suid=chown and ident.switch and not unconfined)
    try:
        cfg = targets.setup()
        sockets = _real_sockets(ident.uid, ident.home)
        sockets.update(cfg["sockets"])
        cfg.update({
            "confined": not unconfined,
            "landlock_abi": plan.abi,
            "scoped": landlock.names(plan.scoped),
            "unix_mediation": plan.unix_mediation,
            "meta_mediation": plan.meta_mediation and not unconfined,
            "exclusive": plan.exclusive and not unconfined,
            "net_namespace": plan.net_ns and not unconfined,
            # the supervisor rewrites the agent's INET destinations (mediation/inet.py)
            "inet_routed": plan.egress and plan.unix_mediation and not unconfined,
            "seccomp": _rules(plan),
            "nr": _syscall_numbers(),
            "arch": seccomp.native_arch(),
            "kernel": os.uname().release,
            "workdir": wd,
            "home": ident.home,
            "sockets": sockets,
            "credential_files": _credential_files(ident.home),
            "block_devices": _block_devices(),
            "resolver": _resolver(),
            "metadata": list(audit.metadata_address()),
            "connect_tcp": list(plan.policy.network.connect_tcp),
            "legacy_tiocsti": read_setting("/proc/sys/dev/tty/legacy_tiocsti"),
            "only": list(only),
            "limits": plan.policy.limits.to_dict(),
            "limit_mechanisms": dict(plan.limits),
        })
        argv = [python, "-I", "-S", "-c", battery_source(), json.dumps(cfg)]
        if unconfined:
            status, out, err = _run_unconfined(argv, wd, targets.canary, targets.inherit_fd)
        else:
            status, out, err = _run_confined(argv, dict(opts, allow_degraded=allow_degraded),
                                             targets.canary, warnings)
            if plan.exclusive:
                out = _settle_exit_checks(out)
            if status in (126, 127) and not out:
                # The sandbox cannot even start the battery: not usable, so not a pass.
                err = f"the battery could not start: {warnings[-1] if warnings else status}"
    finally:
        targets.cleanup()
    data = _parse(out)
    meta = {
        "profile": plan.policy.name,
        "profile_sources": list(plan.policy.sources),
        "workdir": wd,
        "agent": {"user": ident.user, "uid": ident.uid, "gid": ident.gid,
                  "started_as_root": ident.started_as_root},
        "confined": not unconfined,
        "kernel": os.uname().release,
        "landlock_abi": plan.abi,
        "unix_sockets": ("landlock resolve_unix" if plan.abi >= 9 else
                         "seccomp user notification" if plan.unix_mediation else "not mediated"),
        "protected_names": ("held or quarantined at exit (exclusive workdir)"
                            if plan.exclusive and not unconfined else
                            "refused while running (seccomp user notification)"
                            if plan.unix_mediation else "checked at exit only"),
        "workdir_mode": plan.policy.workdir_mode,
        "limits": {k: {"value": v, "mechanism": plan.limits.get(k, "unlimited")}
                   for k, v in plan.policy.limits.to_dict().items()},
        "degraded": [f"{m.feature}: {m.detail}" for m in plan.missing] if not unconfined else [],
        "mechanisms": dict(plan.mechanisms) if not unconfined else {},
        "warnings": warnings,
        "python": python,
        "targets": {"outside_dir": targets.dir, "target_pid": targets.proc.pid if targets.proc
                    else None, "scratch": os.path.join(wd, targets.scratch),
                    "setuid_copy": targets.suid_dir},
    }
    return report.build(meta, data, status, err, time.monotonic() - t0)



__all__ = ["probe", "battery_source", "UNCONFINED_ENV"]
