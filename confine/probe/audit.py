"""`confine audit`: what on this host an agent could reach, seen from outside
as the launching user, and whether the chosen profile blocks each finding.

Read-only and silent on the network: it stats files and sockets, reads
sysctls and tries one unshare(CLONE_NEWUSER) in a forked child. It never
connects to a unix socket, never reads a credential file's contents, and sends
no traffic unless asked: an audit run on a host whose traffic is watched must
not look like a probe of the cloud metadata service. The active checks
(ACTIVE: one TCP connect to the metadata address, short timeout, unreachable
is not an error) run only with connect=True (`--connect`); otherwise the
report names each one skipped and how to run it.

Findings: id, category, severity (high, medium, low, info), title, detail,
blocked (true: the profile stops it; false: it does not; null: not a
question of the profile, e.g. the host's LSM mode), by (the mechanism) and
fix. Exit 1 when any finding is not blocked.

Test and site overrides: CONFINE_AUDIT_HOME (or --home) is the HOME to
inspect; CONFINE_AUDIT_SOCKET_DIRS (colon-separated, or --socket-dir) replaces
the directories searched for daemon sockets (/run, /var/run, /run/user/UID,
/tmp); CONFINE_AUDIT_METADATA=HOST:PORT replaces 169.254.169.254:80.
"""
from __future__ import annotations

import glob
import grp
import ipaddress
import os
import pwd
import socket
import stat
import tempfile
import threading

from .. import api
from .. import plan as _plan
from ..errors import ConfineError
from ..kernel import landlock
from ..kernel.libc import libc
from ..paths import is_under
from ..plan import env as _env
from ..plan.identity import Identity
from ..plan.identity import resolve as resolve_identity
from ..policy import load as _load
from ..policy.secrets import HOME_SECRETS
from . import check as _check
from .check import read_setting

HOME_ENV = "CONFINE_AUDIT_HOME"
SOCKET_DIRS_ENV = "CONFINE_AUDIT_SOCKET_DIRS"
METADATA_ENV = "CONFINE_AUDIT_METADATA"
METADATA = ("169.254.169.254", 80)
# The checks that send traffic (id -> what it does), run only with --connect.
ACTIVE = {"metadata": "one TCP connect to the cloud metadata address {addr}"}
CONNECT_FLAG = "--connect"

# (category, kind, pattern relative to a socket directory; {uid} is the agent's uid)
SOCKETS = (
    ("runtime", "docker", "docker.sock"),
    ("runtime", "containerd", "containerd/containerd.sock"),
    ("runtime", "containerd", "containerd.sock"),
    ("runtime", "podman", "podman/podman.sock"),
    ("runtime", "podman", "podman.sock"),
    ("runtime", "cri-o", "crio/crio.sock"),
    ("runtime", "cri-o", "crio.sock"),
    ("runtime", "cri-dockerd", "cri-dockerd.sock"),
    ("runtime", "k3s containerd", "k3s/containerd/containerd.sock"),
    ("runtime", "buildkit", "buildkit/buildkitd.sock"),
    ("runtime", "lxd", "lxd/unix.socket"),
    ("runtime", "incus", "incus/unix.socket"),
    ("runtime", "libvirt", "libvirt/libvirt-sock"),
    ("ssh", "ssh-agent", "ssh-*/agent.*"),
    ("ssh", "ssh-agent", "ssh-agent.socket"),
    ("ssh", "ssh-agent", "openssh_agent"),
    ("ssh", "gpg-agent (ssh)", "gnupg/S.gpg-agent.ssh"),
    ("ssh", "gnome-keyring (ssh)", "keyring/ssh"),
    ("ssh", "gcr (ssh)", "gcr/ssh"),
    ("dbus", "D-Bus system bus", "dbus/system_bus_socket"),
    ("dbus", "D-Bus system bus", "system_bus_socket"),
    ("dbus", "D-Bus session bus", "bus"),
    ("dbus", "D-Bus session bus", "user/{uid}/bus"),
    ("dbus", "systemd user manager", "systemd/private"),
    ("dbus", "systemd user manager", "user/{uid}/systemd/private"),
    ("multiplexer", "tmux", "tmux-{uid}/*"),
    ("multiplexer", "screen", "screen/S-*/*"),
)
# Outside the usual directories (default mode only).
EXTRA_RUNTIME = ("/var/snap/lxd/common/lxd/unix.socket", "/var/lib/lxd/unix.socket",
                 "~/.docker/run/docker.sock", "~/.docker/desktop/docker.sock",
                 "~/.colima/default/docker.sock", "~/.rd/docker.sock",
                 "~/.local/share/containers/podman/machine/podman.sock")
SEVERITY = {"runtime": "high", "ssh": "high", "dbus": "high", "multiplexer": "high"}
SOCKET_WHY = {
    "runtime": "a container runtime socket is root on the host (a privileged container "
               "mounts /)",
    "ssh": "an ssh-agent signs with the user's keys for anyone who connects",
    "dbus": "the session bus and systemd's user manager start processes outside the sandbox "
            "(systemd-run --user); the system bus reaches system services",
    "multiplexer": "a tmux/screen socket types into the user's other terminals",
}
# Supplementary groups that are root, or nearly.
ROOT_GROUPS = {
    "root": "is root's group", "sudo": "may become root (sudo)", "wheel": "may become root",
    "admin": "may become root", "docker": "docker.sock is root", "podman": "rootful podman is root",
    "lxd": "lxd can mount / in a container", "incus": "incus can mount / in a container",
    "incus-admin": "incus can mount / in a container", "libvirt": "VMs with host disks",
    "disk": "raw disks: every file", "kmem": "kernel memory", "shadow": "password hashes",
}
LOG_GROUPS = {"adm": "reads system logs", "systemd-journal": "reads the journal"}
SETUID_DIRS = ("/usr/bin", "/usr/sbin", "/bin", "/sbin", "/usr/local/bin", "/usr/local/sbin",
               "/usr/lib", "/usr/libexec", "/usr/lib64")


def default_socket_dirs(uid: int) -> list[str]:
    return ["/run", "/var/run", f"/run/user/{uid}", "/tmp"]


def socket_dirs(uid: int, override=None) -> list[str]:
    if override:
        return list(override)
    env = os.environ.get(SOCKET_DIRS_ENV)
    if env:
        return [d for d in env.split(":") if d]
    return default_socket_dirs(uid)


def find_sockets(uid: int, home: str, dirs=None) -> list[tuple[str, str, str]]:
    """(category, kind, path) of daemon sockets that exist, deduplicated by real path."""
    override = bool(dirs) or bool(os.environ.get(SOCKET_DIRS_ENV))
    dirs = socket_dirs(uid, dirs)
    found: dict[str, tuple[str, str, str]] = {}

    def add(cat, kind, path):
        try:
            if not stat.S_ISSOCK(os.stat(path).st_mode):
                return
        except OSError:
            return
        found.setdefault(os.path.realpath(path), (cat, kind, path))

    for d in dirs:
        for cat, kind, pat in SOCKETS:
            for p in sorted(glob.glob(os.path.join(d, pat.format(uid=uid)))):
                add(cat, kind, p)
    if not override:
        for p in EXTRA_RUNTIME:
            add("runtime", os.path.basename(p), os.path.join(home, p[2:]) if p[:2] == "~/" else p)
    ssh = os.environ.get("SSH_AUTH_SOCK")
    if ssh:
        add("ssh", "ssh-agent ($SSH_AUTH_SOCK)", ssh)
    bus = _bus_from_env()
    if bus:
        add("dbus", "D-Bus session bus ($DBUS_SESSION_BUS_ADDRESS)", bus)
    return sorted(found.values(), key=lambda t: (t[0], t[2]))


def _bus_from_env() -> str | None:
    addr = os.environ.get("DBUS_SESSION_BUS_ADDRESS", "")
    for part in addr.split(";"):
        if part.startswith("unix:"):
            for kv in part[5:].split(","):
                if kv.startswith("path="):
                    return kv[5:]
    return None


def sockets_by_category(uid: int, home: str) -> dict[str, list[str]]:
    """Existing daemon sockets by category (runtime, ssh, dbus, multiplexer), for the probe."""
    out: dict[str, list[str]] = {}
    for cat, _kind, path in find_sockets(uid, home):
        out.setdefault(cat, []).append(path)
    return out


# ----------------------------------------------------------- helpers

def _granted(plan, path: str, right, partial: bool = False) -> bool:
    """Whether the plan's Landlock rules give `right` on path (partial: or on
    anything beneath it, since a directory is exposed if part of it is)."""
    if plan.abi == 0:
        return True
    real = os.path.realpath(path)
    for q, rights, _ in plan.path_rules:
        if rights & right and (is_under(real, q) or (partial and is_under(q, real))):
            return True
    return False


def _seccomp_denies(plan, syscall: str) -> bool:
    return any(r.syscall == syscall and not r.args for r in plan.seccomp_rules)


def _group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _members(gid: int) -> list[str]:
    try:
        names = set(grp.getgrgid(gid).gr_mem)
    except KeyError:
        names = set()
    try:
        names |= {p.pw_name for p in pwd.getpwall() if p.pw_gid == gid}
    except OSError:
        pass
    return sorted(names)


def _dac_writable(st, uid: int, gids: set[int]) -> bool:
    if uid == 0:
        return True
    if st.st_uid == uid:
        return bool(st.st_mode & 0o200)
    if st.st_gid in gids:
        return bool(st.st_mode & 0o020)
    return bool(st.st_mode & 0o002)




def _finding(fid, category, severity, title, detail="", blocked=None, by=None, fix=None):
    return {"id": fid, "category": category, "severity": severity, "title": title,
            "detail": detail, "blocked": blocked, "by": by, "fix": fix}


def _unix_verdict(plan, path: str):
    real = os.path.realpath(path)
    for root in plan.unix_roots():
        if is_under(real, os.path.realpath(root)):
            return False, f"allowed: under {root} (workdir, tmp or unix_sockets.allow)"
    if plan.abi >= 9:
        return True, "Landlock resolve_unix"
    if plan.unix_mediation:
        return True, "unix-socket mediation (seccomp user notification)"
    return False, "not mediated on this kernel (Landlock ABI < 9, no seccomp user notification)"


# ----------------------------------------------------------- checks

def _sockets(plan, me_uid: int, agent_uid: int, home: str, dirs) -> list[dict]:
    out = []
    for cat, kind, path in find_sockets(agent_uid, home, dirs):
        try:
            st = os.stat(path)
        except OSError:
            continue
        owner, group = _user_name(st.st_uid), _group_name(st.st_gid)
        mode = stat.S_IMODE(st.st_mode)
        reach = me_uid == 0 or os.access(path, os.W_OK)
        who = [f"owner {owner}"]
        if mode & 0o020:
            members = _members(st.st_gid)
            who.append(f"group {group}" + (f" ({', '.join(members)})" if members else ""))
        if mode & 0o002:
            who.append("everyone")
        blocked, by = _unix_verdict(plan, path)
        out.append(_finding(
            f"socket:{path}", "host daemons", SEVERITY[cat], f"{kind} socket {path}",
            f"{owner}:{group} {mode:04o}; reachable by you: {'yes' if reach else 'no'}; "
            f"can connect: {', '.join(who)}. {SOCKET_WHY[cat]}",
            blocked, by, None if blocked else
            "refuse it: do not allow it in unix_sockets.allow; needs Landlock ABI 9 or "
            "seccomp user notification"))
    return out


def _credentials(plan, home: str) -> list[dict]:
    out = []
    for entry in HOME_SECRETS:
        p = os.path.join(home, entry[2:])
        if not os.path.lexists(p):
            continue
        exposed = []
        try:
            st = os.stat(p)
            cands = [(p, st)]
            if stat.S_ISDIR(st.st_mode):
                for n in sorted(os.listdir(p))[:50]:
                    q = os.path.join(p, n)
                    try:
                        cands.append((q, os.stat(q)))
                    except OSError:
                        pass
            for q, s in cands:
                if stat.S_ISREG(s.st_mode) and s.st_mode & 0o044:
                    exposed.append(f"{q} {stat.S_IMODE(s.st_mode):04o}")
        except OSError:
            pass
        readable = _granted(plan, p, landlock.AccessFS.READ_FILE, partial=True)
        detail = "never readable by the agent unless a grant covers it"
        if exposed:
            detail += "; readable by other local users: " + ", ".join(exposed[:5])
        out.append(_finding(
            f"credential:{entry}", "credentials", "high", f"credential file {entry} ({p})",
            detail, not readable, "Landlock (carved out of every grant)" if not readable else
            "a read grant covers it", None if not readable else
            f"remove the grant that covers {p}"))
    return out


def _environment(plan) -> list[dict]:
    out = []
    for name in sorted(os.environ):
        if not _env.holds_secret(name):
            continue
        passed = name in plan.env
        out.append(_finding(
            f"env:{name}", "environment", "medium", f"secret-looking variable {name}",
            f"set in this environment ({len(os.environ[name])} characters; value not shown)",
            not passed, "environment allowlist" if not passed else
            "passed to the agent (profile env.pass or --env)", None if not passed else
            f"do not pass {name} unless the agent needs it"))
    return out


def _ancestors(plan, ident, gids: set[int]) -> list[dict]:
    out = []
    wd = plan.policy.workdir
    d = os.path.dirname(wd)
    while True:
        try:
            st = os.stat(d)
        except OSError:
            st = None
        if st is not None and _dac_writable(st, ident.uid, gids):
            granted = _granted(plan, d, landlock.AccessFS.MAKE_REG | landlock.AccessFS.WRITE_FILE)
            other = bool(st.st_mode & 0o002) and not st.st_mode & stat.S_ISVTX
            out.append(_finding(
                f"writable-parent:{d}", "filesystem", "high" if other else "medium",
                f"{d} (above the workdir) is writable by the agent's user {ident.user}",
                "a directory above the workdir can hold files that tools pick up "
                "(.git, .envrc, rc files) or replace the workdir itself"
                + ("; it is also writable by everyone, without the sticky bit" if other else ""),
                not granted, "Landlock (no write grant there)" if not granted else
                "a write grant covers it", None if not granted else
                f"remove the write grant on {d}"))
        if d == "/":
            break
        d = os.path.dirname(d)
    return out


def _setuid() -> list[dict]:
    found, seen = [], set()
    for top in SETUID_DIRS:
        for dirpath, dirnames, filenames in os.walk(top):
            depth = dirpath[len(top):].count("/")
            if depth >= 2:
                dirnames[:] = []
            for n in filenames:
                p = os.path.join(dirpath, n)
                try:
                    st = os.lstat(p)
                except OSError:
                    continue
                if stat.S_ISREG(st.st_mode) and st.st_mode & (stat.S_ISUID | stat.S_ISGID):
                    real = os.path.realpath(p)
                    if real not in seen:
                        seen.add(real)
                        kind = "setuid " + _user_name(st.st_uid) if st.st_mode & stat.S_ISUID \
                            else "setgid " + _group_name(st.st_gid)
                        found.append(f"{p} ({kind})")
    if not found:
        return []
    return [_finding("setuid", "privilege", "medium",
                     f"{len(found)} setuid/setgid programs",
                     ", ".join(found[:40]) + (" ..." if len(found) > 40 else ""),
                     True, "no_new_privs (execve ignores setuid bits and file capabilities)")]


def _groups(plan, ident, launch_root: bool) -> list[dict]:
    out = []
    if launch_root:
        try:
            gids = set(os.getgrouplist(ident.user, ident.gid))
        except (KeyError, OSError):
            gids = set()
    else:
        gids = set(os.getgroups()) | {os.getegid()}
    mediated = plan.abi >= 9 or plan.unix_mediation
    block_devs = []
    try:
        block_devs = ["/dev/" + n for n in os.listdir("/sys/class/block")]
    except OSError:
        pass
    for gid in sorted(gids):
        name = _group_name(gid)
        why = ROOT_GROUPS.get(name) or LOG_GROUPS.get(name)
        if not why or (gid == ident.gid and name == "root" and ident.uid == 0):
            continue
        if launch_root and gid != ident.gid:
            blocked, by = True, "supplementary groups dropped (confine started as root)"
        elif name in ("docker", "podman", "lxd", "incus", "incus-admin", "libvirt"):
            blocked = mediated
            by = "unix-socket mediation" if mediated else "pathname sockets not mediated here"
        elif name in ("disk", "kmem"):
            blocked = not any(_granted(plan, d, landlock.AccessFS.READ_FILE
                                       | landlock.AccessFS.WRITE_FILE) for d in block_devs)
            by = "Landlock (no device grant)" if blocked else "a device grant covers a disk"
        elif name == "shadow":
            blocked = not _granted(plan, "/etc/shadow", landlock.AccessFS.READ_FILE)
            by = "Landlock (carved out)"
        elif name in LOG_GROUPS:
            blocked = not _granted(plan, "/var/log", landlock.AccessFS.READ_FILE, partial=True)
            by = "Landlock (/var/log not granted)" if blocked else "/var/log is granted"
        else:
            blocked, by = True, "no_new_privs (sudo/su cannot raise privileges)"
        sev = "high" if name in ROOT_GROUPS else "low"
        out.append(_finding(
            f"group:{name}", "privilege", sev, f"member of group {name} ({why})",
            "the agent keeps this group" if not launch_root else
            f"{ident.user} is a member; confine drops supplementary groups when started as root",
            blocked, by, None if blocked else
            "start confine as root with --user so supplementary groups are dropped"))
    return out


def metadata_address() -> tuple[str, int]:
    """The cloud metadata endpoint to try (CONFINE_AUDIT_METADATA=HOST:PORT replaces it)."""
    spec = os.environ.get(METADATA_ENV)
    if spec and ":" in spec:
        host, _, p = spec.rpartition(":")
        return host, int(p)
    return METADATA


def _metadata_probe(result: dict) -> None:
    host, port = metadata_address()
    result["addr"] = (host, port)
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(0.3)
    try:
        s.connect((host, port))
        result["reachable"] = True
    except OSError as e:
        result["reachable"] = False
        result["error"] = type(e).__name__ if isinstance(e, socket.timeout) else (
            os.strerror(e.errno) if e.errno else str(e))
    finally:
        s.close()


def _metadata(plan, res: dict) -> list[dict]:
    host, port = res.get("addr", METADATA)
    if not res.get("reachable"):
        return [_finding("metadata", "network", "info",
                         f"cloud metadata {host}:{port} not reachable from this host",
                         res.get("error", "no answer in time"), None)]
    # connect_tcp is the agent's own loopback (the host's, when it lists ports): with
    # the supervisor's connect mediation any other address goes to the gateway, which
    # never dials metadata; without it Landlock alone lets the port through anywhere
    try:
        loop = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loop = False
    granted = plan.abi < 4 or (port in plan.policy.network.connect_tcp
                               and (loop or not plan.unix_mediation))
    return [_finding("metadata", "network", "high",
                     f"cloud metadata {host}:{port} is reachable from this host",
                     "instance credentials are served there to any local process",
                     not granted, f"Landlock TCP (port {port} not granted)" if not granted else
                     f"the profile's connect_tcp port {port} reaches it"
                     + ("" if loop else " (no connect mediation here: Landlock filters ports, "
                                        "not addresses)"),
                     None if not granted else
                     f"drop port {port} from network.connect_tcp, or block {host} on the host")]


def _userns_allowed() -> bool:
    pid = os.fork()
    if pid == 0:
        try:
            os._exit(0 if libc.unshare(0x10000000) == 0 else 1)
        finally:
            os._exit(1)
    _, st = os.waitpid(pid, 0)
    return os.WIFEXITED(st) and os.WEXITSTATUS(st) == 0


def _kernel(plan, host: dict) -> list[dict]:
    out = []
    try:
        allowed = _userns_allowed()
    except OSError:
        allowed = False
    um = host["user_namespaces"]
    detail = f"user.max_user_namespaces={um['max_user_namespaces']}"
    if um.get("apparmor_restrict_unprivileged_userns") is not None:
        detail += f", apparmor_restrict_unprivileged_userns={um['apparmor_restrict_unprivileged_userns']}"
    if allowed:
        d = _seccomp_denies(plan, "unshare")
        out.append(_finding("userns", "kernel", "medium", "user namespaces can be created here",
                            detail + "; a user namespace gives CAP_SYS_ADMIN over a large kernel "
                            "surface", d, "seccomp (unshare, clone with CLONE_NEW*)" if d else
                            "not filtered", None if d else "keep the seccomp namespaces group"))
    else:
        out.append(_finding("userns", "kernel", "info", "user namespaces are not available to you",
                            detail, None))
    abi = plan.abi
    ll_detail = ("pathname unix sockets are not covered by Landlock below ABI 9"
                 + ("; confine mediates them with seccomp user notification"
                    if plan.unix_mediation else "") if abi < 9 else "covers pathname unix sockets")
    out.append(_finding("landlock", "kernel", "high" if abi == 0 else "info",
                        f"Landlock ABI {abi}" if abi else "Landlock is not available",
                        ll_detail, None if abi else False, None,
                        None if abi else "boot with lsm=...,landlock (Linux >= 5.13)"))
    for m in plan.missing:
        out.append(_finding(f"missing:{m.feature}", "kernel", "high",
                            f"the profile needs {m.feature}", m.detail, False,
                            "not enforceable on this kernel", "use a newer kernel or another profile"))
    aa = "enabled" if host["apparmor"]["enabled"] else "not enabled"
    out.append(_finding("lsm", "kernel", "info",
                        f"AppArmor {aa}, SELinux {host['selinux']['mode']}",
                        "confine does not rely on them; exporters can generate policies", None))
    knobs = (
        ("tiocsti", "/proc/sys/dev/tty/legacy_tiocsti", lambda v: v == "1",
         "dev.tty.legacy_tiocsti=1: TIOCSTI can inject keystrokes into a terminal",
         any(r.group == "ioctl:TIOCSTI" for r in plan.seccomp_rules), "seccomp (ioctl:TIOCSTI)"),
        ("ptrace", "/proc/sys/kernel/yama/ptrace_scope", lambda v: v in (None, "0"),
         "Yama ptrace_scope is off or absent: same-user processes can be traced",
         abi >= 1, "Landlock (ptrace rule)"),
        ("bpf", "/proc/sys/kernel/unprivileged_bpf_disabled", lambda v: v == "0",
         "unprivileged eBPF is enabled", _seccomp_denies(plan, "bpf"), "seccomp (bpf)"),
        ("io_uring", "/proc/sys/kernel/io_uring_disabled", lambda v: v == "0",
         "io_uring is enabled for everyone", _seccomp_denies(plan, "io_uring_setup"),
         "seccomp (io_uring)"),
        ("userfaultfd", "/proc/sys/vm/unprivileged_userfaultfd", lambda v: v == "1",
         "unprivileged userfaultfd is enabled", _seccomp_denies(plan, "userfaultfd"),
         "seccomp (userfaultfd)"),
        ("perf", "/proc/sys/kernel/perf_event_paranoid", lambda v: v is not None and int(v) < 2,
         "perf_event_paranoid < 2: kernel profiling for everyone",
         _seccomp_denies(plan, "perf_event_open"), "seccomp (perf)"),
    )
    for kid, path, weak, title, blocked, by in knobs:
        v = read_setting(path)
        try:
            bad = weak(v)
        except ValueError:
            bad = False
        if bad:
            out.append(_finding(f"sysctl:{kid}", "kernel", "low", title,
                                f"{path} = {v if v is not None else 'absent'}", blocked,
                                by if blocked else "not filtered", None if blocked else
                                "keep the default seccomp denials"))
    return out


# ----------------------------------------------------------- main

def _identity(wd: str, user: str | None) -> Identity:
    try:
        return resolve_identity(wd, user)
    except ConfineError:
        if user is None and os.geteuid() == 0:
            pw = pwd.getpwuid(0)
            return Identity(uid=0, gid=0, user=pw.pw_name, home=pw.pw_dir, switch=False,
                            started_as_root=True,
                            notes=("the workdir is owned by root: confine exec needs --user",))
        raise


def _skipped() -> list[dict[str, str]]:
    host, port = metadata_address()
    return [{"id": cid, "check": what.format(addr=f"{host}:{port}"),
             "run": f"confine audit {CONNECT_FLAG}"} for cid, what in ACTIVE.items()]


def audit(*, profile="default", workdir=None, home=None, socket_dirs_=None, user=None,
          connect: bool = False) -> dict:
    meta_res: dict = {}
    t = None
    if connect:
        t = threading.Thread(target=_metadata_probe, args=(meta_res,), daemon=True)
        t.start()
    notes = []
    if workdir is None:
        try:
            wd = api.check_workdir(os.getcwd(), [os.path.expanduser("~")], False)
            tmpwd = None
        except ConfineError as e:
            tmpwd = tempfile.mkdtemp(prefix="confine-audit-wd-")
            wd = tmpwd
            notes.append(f"the current directory cannot be a workdir ({e}); the profile was "
                         f"evaluated for a fresh directory {tmpwd}")
    else:
        wd = api.check_workdir(workdir, [os.path.expanduser("~")], False)
        tmpwd = None
    tmp = tempfile.mkdtemp(prefix="confine-audit-")
    try:
        ident = _identity(wd, user)
        home = os.path.realpath(home or os.environ.get(HOME_ENV) or ident.home)
        policy = _load.load(profile, workdir=wd, home=home, tmp=tmp)
        plan = _plan.compile(policy, ["true"], ident, _plan.HostFacts.read(os.geteuid() == 0),
                             parent_env=dict(os.environ))
        launch_root = os.geteuid() == 0
        gids = {ident.gid} if ident.switch else set(os.getgroups()) | {os.getegid()}
        host = _check.host()
        findings = []
        findings += _sockets(plan, os.geteuid(), ident.uid, home, socket_dirs_)
        findings += _credentials(plan, home)
        findings += _environment(plan)
        findings += _ancestors(plan, ident, gids)
        findings += _setuid()
        findings += _groups(plan, ident, launch_root)
        findings += _kernel(plan, host)
        if t is not None:
            t.join(1.0)
            findings += _metadata(plan, meta_res)
    finally:
        api.remove_tree(tmp)
        if tmpwd:
            api.remove_tree(tmpwd)
    open_ = [f for f in findings if f["blocked"] is False]
    counts = {"findings": len(findings), "not_blocked": len(open_),
              "blocked": sum(1 for f in findings if f["blocked"] is True),
              "info": sum(1 for f in findings if f["blocked"] is None)}
    summary = (f"{len(open_)} of {counts['findings']} findings not blocked by profile "
               f"{policy.name}" if open_ else
               f"every finding that matters is blocked by profile {policy.name} "
               f"({counts['blocked']} blocked, {counts['info']} informational)")
    return {
        "verdict": "fail" if open_ else "pass",
        "summary": summary,
        "exit_status": 1 if open_ else 0,
        "profile": policy.name,
        "workdir": wd if not tmpwd else None,
        "home": home,
        "launching_user": {"user": _user_name(os.geteuid()), "uid": os.geteuid()},
        "agent": {"user": ident.user, "uid": ident.uid},
        "kernel": host["kernel"],
        "landlock_abi": plan.abi,
        "socket_dirs": socket_dirs(ident.uid, socket_dirs_),
        "notes": notes + list(ident.notes),
        "counts": counts,
        "findings": findings,
        "skipped": [] if connect else _skipped(),
    }


CATEGORIES = ("host daemons", "credentials", "environment", "filesystem", "privilege",
              "network", "kernel")


def render(r: dict) -> str:
    lines = [f"confine audit: {'PASS' if r['verdict'] == 'pass' else 'FAIL'} - {r['summary']}",
             f"  launching user {r['launching_user']['user']}, agent {r['agent']['user']} "
             f"(uid {r['agent']['uid']}), HOME {r['home']}, workdir {r['workdir'] or '(temporary)'}, "
             f"kernel {r['kernel']}, Landlock ABI {r['landlock_abi']}"]
    for n in r["notes"]:
        lines.append(f"  note: {n}")
    for cat in CATEGORIES:
        mine = [f for f in r["findings"] if f["category"] == cat]
        if not mine:
            continue
        lines.append("")
        lines.append(cat)
        for f in mine:
            state = {True: "blocked", False: "NOT BLOCKED", None: "info"}[f["blocked"]]
            lines.append(f"  {f['severity']:<7} {state:<12} {f['title']}")
            if f.get("by") and f["blocked"] is not None:
                lines.append(f"{'':23}by: {f['by']}")
            if f.get("detail") and (f["blocked"] is not True or f["severity"] == "high"):
                lines.append(f"{'':23}{f['detail']}")
            if f.get("fix"):
                lines.append(f"{'':23}fix: {f['fix']}")
    if r.get("skipped"):
        lines.append("")
        lines.append("skipped (they send traffic)")
        for sk in r["skipped"]:
            lines.append(f"  {sk['id']}: {sk['check']}; run: {sk['run']}")
    return "\n".join(lines)
