"""Policy + this host -> Plan: everything the child will do, decided up front.

The plan is what --dry-run prints and what the child executes, step by step,
in a fixed order. Anything the policy asks for that this kernel cannot enforce
is listed in `missing`; the API refuses to run while that list is non-empty,
unless the caller passed allow_degraded.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from landlockpy import AccessFS, AccessNet, Scope

from . import carve as _carve
from . import env as _env
from .identity import Identity
from .kernel import caps, landlock, seccomp
from .policy.model import Policy

STEPS = (
    "pdeathsig: SIGKILL when the supervisor dies (parent checked for the race)",
    "close every inherited file descriptor except 0, 1, 2",
    "environment: replaced by the plan's allowlisted environment",
    "identity: supplementary groups dropped, uid/gid switched (when started as root)",
    "capabilities: bounding, ambient, inheritable, permitted, effective emptied; securebits locked (root)",
    "no_new_privs",
    "landlock: restrict_self with the rules below",
    "seccomp: load the filter below (bad architecture kills the process)",
    "exec the command",
)


@dataclass(frozen=True)
class Missing:
    feature: str
    detail: str


@dataclass
class Plan:
    policy: Policy
    argv: list[str]
    identity: Identity
    env: dict[str, str]
    abi: int
    handled_fs: AccessFS
    handled_net: AccessNet
    scoped: Scope
    path_rules: list[tuple[str, AccessFS, str]]     # (path, rights, why)
    port_rules: list[tuple[int, AccessNet]]
    seccomp_rules: tuple
    seccomp_extra: tuple = ()                # loaded as a second filter (libseccomp cannot merge them)
    missing: list[Missing] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    carved: list[str] = field(default_factory=list)
    unix_mediation: bool = False            # seccomp-notify mediation of connect/send/listen
    mount_ns: bool = False                  # private mount namespace: read-only host, own shm/pts
    pid_ns: bool = False                    # own pid namespace and /proc (needs mount_ns)
    lsm_apparmor: str | None = None         # AppArmor profile to enter at exec
    lsm_selinux: str | None = None          # SELinux context to enter at exec
    writable_binds: list = field(default_factory=list)   # stay writable in it
    child_rules: list = field(default_factory=list)      # (path, rights) added after the mounts

    def unix_roots(self) -> list[str]:
        """Where pathname unix sockets may be connected: workdir, tmp, profile allows."""
        return [self.policy.workdir, self.policy.tmp] + [g.path for g in self.policy.unix_sockets]

    def to_dict(self) -> dict:
        return {
            "command": self.argv,
            "profile": self.policy.name,
            "sources": list(self.policy.sources),
            "workdir": self.policy.workdir,
            "tmpdir": self.policy.tmp,
            "steps": list(STEPS),
            "identity": self.identity.to_dict(),
            "environment": self.env,
            "landlock": {
                "abi": self.abi,
                "handled_fs": landlock.names(self.handled_fs),
                "handled_net": landlock.names(self.handled_net),
                "scoped": landlock.names(self.scoped),
                "rules": [{"path": p, "access": landlock.names(a), "why": w}
                          for p, a, w in self.path_rules],
                "tcp_ports": [{"port": p, "access": landlock.names(a)} for p, a in self.port_rules],
                "carved_out": self.carved,
                "secrets": sorted({d.path for d in self.policy.deny}),
            },
            "seccomp": seccomp.describe(self.seccomp_rules + self.seccomp_extra),
            "unix_sockets": {
                "mechanism": ("seccomp user notification (connect, sendto, sendmsg, listen mediated)"
                              if self.unix_mediation else "none")
                + (", landlock resolve_unix" if self.abi >= 9 else ""),
                "allowed_under": self.unix_roots(),
            },
            "protected_names": ("seccomp user notification: opens for writing, creat, truncate, "
                                "mkdir, mknod, symlink, link and rename are judged by the name "
                                "guard and performed by the broker" if self.unix_mediation
                                else "none (new protected paths only checked at exit)"),
            "lsm": {"apparmor": self.lsm_apparmor, "selinux": self.lsm_selinux},
            "namespaces": {
                "mount": self.mount_ns, "pid": self.pid_ns,
                "writable": [self.policy.workdir, self.policy.tmp] + [
                    p for p in self.writable_binds if p not in (self.policy.workdir,
                                                                self.policy.tmp)]
                if self.mount_ns else None,
                "private": ["/dev/shm", "/dev/pts", "/proc"] if self.mount_ns else [],
            },
            "missing": [{"feature": m.feature, "detail": m.detail} for m in self.missing],
            "notes": self.notes,
        }


_NS_CACHE: dict = {}


def namespaces_available(as_root: bool) -> bool:
    """Try, in a throw-away child, what the launcher's child will do."""
    # Test-only knob, like CONFINE_TEST_LANDLOCK_ABI_MAX: it can only take a
    # protection away (confine then refuses unless --degrade mount_namespace).
    if os.environ.get("CONFINE_TEST_NO_NAMESPACES") == "1":
        return False
    if as_root not in _NS_CACHE:
        from .kernel import hostview, namespaces
        pid = os.fork()
        if pid == 0:
            try:
                namespaces.enter(userns=not as_root)
                namespaces.make_private()
                namespaces.unshare(namespaces.CLONE_NEWPID)
                init = os.fork()
                if init == 0:
                    try:
                        hostview.private_proc()
                        os._exit(0)
                    except BaseException:
                        os._exit(1)
                os._exit(os.waitstatus_to_exitcode(os.waitpid(init, 0)[1]))
            except BaseException:
                os._exit(1)
        _NS_CACHE[as_root] = os.waitpid(pid, 0)[1] == 0
    return _NS_CACHE[as_root]


def _missing(policy: Policy, abi: int, sc_status: dict, as_root: bool = True) -> list[Missing]:
    out = []
    if not namespaces_available(as_root):
        out.append(Missing("mount_namespace", "private mount and pid namespaces (read-only host: chmod, "
                           "chown and utime outside the workdir; private /dev/shm, /dev/pts and "
                           "/proc; read-only protected workdir paths; every agent process ends "
                           "with the run) could not be created "
                           + ("" if as_root else "(unprivileged user namespaces are disabled "
                              "or restricted, e.g. by AppArmor)")))
    need = [
        (1, "landlock", "Landlock filesystem rules (writes only under the workdir, secrets unreadable)"),
        (3, "landlock.truncate", "Landlock TRUNCATE: truncating files outside the workdir"),
        (4, "landlock.net_tcp", "Landlock TCP rights: outbound and listening TCP"),
        (5, "landlock.ioctl_dev", "Landlock IOCTL_DEV: ioctls on devices"),
    ]
    if policy.scope.signals:
        need.append((6, "landlock.scope_signal", "Landlock signal scoping: kill() of processes outside the sandbox"))
    if policy.scope.abstract_unix:
        need.append((6, "landlock.scope_abstract_unix", "Landlock abstract unix socket scoping"))
    if not (policy.network.connect_tcp or policy.network.bind_tcp):
        # no port granted: seccomp refuses IPv4/IPv6 sockets instead (no_inet_rules)
        need = [n for n in need if n[1] != "landlock.net_tcp"]
    for min_abi, feature, what in need:
        if abi < min_abi:
            have = f"ABI {abi}" if abi else "no Landlock"
            out.append(Missing(feature, f"{what} needs Landlock ABI {min_abi}; this kernel has {have}"))
    if not sc_status.get("filter"):
        out.append(Missing("seccomp", "seccomp filters are not available on this kernel"))
    elif not sc_status.get("user_notif"):
        out.append(Missing("seccomp_notify", "seccomp user notification (refuses new protected "
                           "workdir names while the agent runs; mediates listen() on "
                           "unbound TCP sockets" + (" and pathname unix sockets, as Landlock "
                           f"ABI {abi} < 9 cannot)" if abi < 9 else ")")
                           + " is not available on this kernel"))
    return out


def _drop_covered(rules):
    """A rule beneath another rule that already grants all its rights adds nothing."""
    from .paths import is_under
    out = []
    for i, (p, r, w) in enumerate(rules):
        if any(j != i and is_under(p, q) and (r & ~r2) == 0 and (p != q or j < i)
               for j, (q, r2, _) in enumerate(rules)):
            continue
        out.append((p, r, w))
    return out


def compile(policy: Policy, argv: list[str], identity: Identity, cli_env=(),
            parent_env: dict | None = None) -> Plan:
    abi = landlock.kernel_abi()
    sc_status = seccomp.status()
    handled_fs = landlock.fs_rights(abi)
    handled_net = landlock.net_rights(abi) & (AccessNet.BIND_TCP | AccessNet.CONNECT_TCP
                                              | AccessNet.BIND_UDP | AccessNet.CONNECT_SEND_UDP)
    scoped = landlock.scopes(abi)
    if not policy.scope.signals:
        scoped &= ~Scope.SIGNAL
    if not policy.scope.abstract_unix:
        scoped &= ~Scope.ABSTRACT_UNIX_SOCKET

    denied = sorted({d.path for d in policy.deny})
    rules: list[tuple[str, AccessFS, str]] = []
    carved: list[str] = []
    for grants, rights, kind in ((policy.read, landlock.READ, "read"),
                                 (policy.write, landlock.WRITE, "write"),
                                 (policy.devices, landlock.DEVICE, "device"),
                                 (tuple(g for g in policy.unix_sockets if os.path.exists(g.path)),
                                  AccessFS.RESOLVE_UNIX, "unix socket")):
        for g in grants:
            paths, c = _carve.carve(g.path, denied)
            carved += c
            for p in paths:
                r = rights & handled_fs
                if not os.path.isdir(p):
                    r &= landlock.FILE_RIGHTS
                if r:
                    rules.append((p, r, f"{kind} ({g.source})"))
    rules = _drop_covered(rules)
    ports = [(p, AccessNet.CONNECT_TCP) for p in policy.network.connect_tcp]
    ports += [(p, AccessNet.BIND_TCP) for p in policy.network.bind_tcp]
    ports = [(p, a & handled_net) for p, a in ports if a & handled_net]

    fixed = {"HOME": identity.home, "TMPDIR": policy.tmp, "USER": identity.user,
             "LOGNAME": identity.user}
    env, env_notes = _env.build(parent_env if parent_env is not None else dict(os.environ),
                                passthrough=policy.env.passthrough,
                                profile_set=policy.env.set, cli=cli_env, fixed=fixed)
    notes = list(env_notes) + list(identity.notes)
    if not identity.started_as_root:
        notes.append(caps.BOUNDING_SET_NOTE)
    if abi < 9:
        notes.append("pathname unix sockets: connect/sendto/sendmsg are mediated by the supervisor "
                     f"(Landlock ABI {abi} < 9 has no RESOLVE_UNIX); sendmmsg is refused")
    notes.append("listen() on a TCP socket without a bound port is refused (it would pick a "
                 "port without Landlock's BIND_TCP check)")
    if policy.network.connect_tcp:
        notes.append("outbound TCP allowed to ANY host on ports "
                     + ", ".join(map(str, policy.network.connect_tcp))
                     + " (Landlock filters ports, not addresses)")
    if policy.seccomp.unsafe_allow:
        notes.append("default seccomp denials removed by the profile: "
                     + ", ".join(policy.seccomp.unsafe_allow))
    mount_ns = namespaces_available(identity.started_as_root)
    shm = [g.path for g in policy.write if g.path == "/dev/shm"]
    binds = [g.path for g in policy.write if g.path != "/dev/shm" and os.path.exists(g.path)]
    child_rules = [("/dev/shm", landlock.WRITE & handled_fs)] if shm else []
    for g in policy.devices:
        if g.path in ("/dev/pts", "/dev/ptmx"):
            child_rules.append((g.path, landlock.DEVICE & handled_fs))
    for g in policy.read:
        if g.path == "/proc" or g.path.startswith("/proc/"):
            child_rules.append((g.path, landlock.READ & handled_fs))
    sc_rules = seccomp.rules_for(policy.seccomp.deny, policy.seccomp.unsafe_allow)
    sc_extra: tuple = ()
    if abi < 4 and not (policy.network.connect_tcp or policy.network.bind_tcp):
        sc_extra = seccomp.no_inet_rules()
        notes.append(f"Landlock ABI {abi} cannot filter TCP: IPv4/IPv6 sockets refused by seccomp")
    return Plan(policy=policy, argv=list(argv), identity=identity, env=env, abi=abi,
                handled_fs=handled_fs, handled_net=handled_net, scoped=scoped,
                path_rules=rules, port_rules=ports, seccomp_rules=sc_rules,
                seccomp_extra=sc_extra,
                missing=_missing(policy, abi, sc_status, identity.started_as_root), notes=notes,
                carved=sorted(set(carved)),
                unix_mediation=bool(sc_status.get("user_notif")),
                mount_ns=mount_ns, pid_ns=mount_ns, writable_binds=binds,
                child_rules=child_rules)
