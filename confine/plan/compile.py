"""Policy + identity + host facts -> Plan: everything the child will do, decided up front.

`compile` is pure in the sense that matters for a security tool: it reads no
environment variable and probes no kernel feature (both arrive as arguments:
`parent_env`, `HostFacts`), forks nothing and changes nothing; it only stats
the paths the policy names (carve-outs and file-vs-directory rules need that).

The plan's `steps` is the list the child executes, in order (runtime/child.py
has one function per step name) and the list `--dry-run` prints. Anything the
policy asks for that this host cannot enforce is listed in `missing`; the
runtime refuses to run while that list is non-empty, unless the caller
accepted the missing features by name.
"""
from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from landlockpy import AccessFS, AccessNet, Scope

from ..errors import ConfineError
from ..kernel import caps, landlock, seccomp
from ..kernel.seccomp import ioctls as seccomp_ioctls
from ..paths import is_under
from ..policy import privatetmp, workdir_mode
from ..policy.model import Policy
from ..record import dataclass, field
from . import carve as _carve
from . import env as _env
from . import features
from .host import HostFacts
from .identity import Identity
from .steps import Step, child_steps


@dataclass(frozen=True)
class Missing:
    feature: str
    detail: str


@dataclass(frozen=True)
class Protected:
    """What the protected-paths snapshot contributes to the plan (runtime input)."""
    mount_plan: Any                      # kernel.namespaces.Plan: binds made in the child
    description: Mapping[str, Any]       # Snapshot.describe(), for --dry-run
    guard: bool                          # the name guard judges new names while the agent runs
    other_plans: tuple[Any, ...] = ()    # the binds of the other protected roots (protect/roots.py)

    @property
    def mount_plans(self) -> tuple[Any, ...]:
        """Every protected root's binds, the first root's first."""
        return (self.mount_plan, *self.other_plans)


@dataclass(frozen=True)
class Lsm:
    apparmor: str | None = None          # AppArmor profile to enter at exec (validated by caller)
    selinux: str | None = None           # full SELinux context to enter at exec


@dataclass(frozen=True)
class Plan:
    policy: Policy
    argv: tuple[str, ...]
    identity: Identity
    env: Mapping[str, str]
    abi: int
    handled_fs: AccessFS
    handled_net: AccessNet
    scoped: Scope
    path_rules: tuple[tuple[str, AccessFS, str], ...]     # (path, rights, why)
    port_rules: tuple[tuple[int, AccessNet], ...]
    seccomp_rules: tuple[Any, ...]
    seccomp_extra: tuple[Any, ...]       # a second filter (libseccomp cannot merge them)
    missing: tuple[Missing, ...]
    notes: tuple[str, ...]
    carved: tuple[str, ...]
    unix_mediation: bool                 # seccomp-notify mediation of connect/send/listen
    file_mediation: bool                 # ... and of file calls that can make protected names
    mount_ns: bool                       # private mount namespace: read-only host, own shm/pts
    meta_mediation: bool                 # no mount namespace: chmod/chown/utime/xattr by the broker
    pidfd_getfd: bool                    # the supervisor may take the child's descriptors
    pid_ns: bool                         # own pid namespace and /proc (needs mount_ns)
    net_ns: bool                         # own network namespace (profiles with no TCP port)
    lsm: Lsm
    writable_binds: tuple[str, ...]      # stay writable in the read-only host view
    child_rules: tuple[tuple[str, AccessFS], ...]   # Landlock rules added after the mounts
    protected: Protected | None
    mechanisms: Mapping[str, str] = field(default_factory=dict)   # feature -> what enforces it
    limits: Mapping[str, str] = field(default_factory=dict)   # limit -> how it is enforced
    cgroup: str | None = None            # parent of the run's cgroup (v2), made by launch
    steps: tuple[Step, ...] = ()
    # the egress gateway decides every TCP connection beyond the agent's loopback
    # (runtime/egress.py starts it and adds its ports and the proxy variables)
    egress: bool = False
    # (proxy, redirect, DNS) ports of the gateway's sockets in the agent's own network
    # namespace (the child makes them, the supervisor takes them); () without it
    gateway_ports: tuple[int, ...] = ()
    agent_home: str | None = None        # HOME inside: the agent's own (runtime/home.py)
    # (directory in TMPDIR, the name in /tmp it is bound over): filesystem.private_tmp
    private_binds: tuple[tuple[str, str], ...] = ()
    # Below Landlock ABI 5 (no IOCTL_DEV) with a mount namespace: the device grants
    # that stay openable; every other mount of the agent's view is nodev. None: no pass.
    device_binds: tuple[str, ...] | None = None
    # Below ABI 5 without a mount namespace: seccomp's ioctl allowlist (kernel/seccomp/ioctls.py)
    ioctl_allowlist: bool = False
    # Below ABI 6 without a network namespace: abstract unix addresses refused by the mediator
    refuse_abstract: bool = False
    # Below ABI 6 without a pid namespace: the kill family judged by the mediator
    signal_mediation: bool = False
    # (uid, gid) the mediator's thread takes as its real ids, so that it may read
    # the agent's memory and take its descriptors as the agent's own user would:
    # started as root without CAP_SYS_PTRACE (a container), the agent of another
    # uid. None: the supervisor's own ids suffice.
    mediate_as: tuple[int, int] | None = None
    # No gateway: UDP sockets (a DNS lookup) are refused by the notifying filter
    # rather than the deny filter, so the refusal is said (seccomp.DGRAM_GROUP)
    dgram_notify: bool = False
    # approvals.exec refuses or asks: execve/execveat are notified and judged by the
    # approval engine (a guardrail, never a boundary: docs/approvals.md)
    exec_notify: bool = False
    # (copy, path): a file bound over a path in the agent's mount namespace (an agent's
    # login file replaced by its placeholder copy: credentials/logins.py)
    file_binds: tuple[tuple[str, str], ...] = ()

    @property
    def lsm_apparmor(self) -> str | None:
        return self.lsm.apparmor

    @property
    def lsm_selinux(self) -> str | None:
        return self.lsm.selinux

    def unix_roots(self) -> list[str]:
        """Where pathname unix sockets may be connected: workdir, tmp, the agent home
        (servers the agent starts there: gpg-agent in ~/.gnupg, ...; a link in it to a
        socket elsewhere resolves outside and stays refused), profile allows."""
        home = [self.agent_home] if self.agent_home else []
        # a private_tmp directory holds only the run's own servers (Codex's app server)
        return ([self.policy.workdir, self.policy.tmp] + home
                + [g.path for g in self.policy.unix_sockets]
                + [src for src, _ in self.private_binds])

    def writable_paths(self) -> list[str]:
        """What stays writable in the read-only host view, as shown to people."""
        first = [self.policy.workdir, self.policy.tmp]
        return first + [p for p in self.writable_binds if p not in first]

    def meta_roots(self) -> tuple[list[str], list[str]]:
        """Where the broker lets chmod, chown, utime and xattr calls act without a
        mount namespace: the writable paths, and below them the read-only entries
        and secrets that stay refused (judged by identity, mediation/files.py)."""
        roots = self.writable_paths()
        holes = sorted({g.path for g in self.policy.read_only} | {d.path for d in self.policy.deny})
        return roots, [h for h in holes if any(is_under(h, r) for r in roots)]

    @property
    def exclusive(self) -> bool:
        """Nothing outside uses the workdir while the agent runs (policy/workdir_mode.py)."""
        return self.policy.workdir_mode == workdir_mode.EXCLUSIVE

    def step_names(self) -> list[str]:
        return [s.name for s in self.steps]

    def to_dict(self) -> dict[str, Any]:
        return {
            "command": list(self.argv),
            "profile": self.policy.name,
            "sources": list(self.policy.sources),
            "workdir": self.policy.workdir,
            "tmpdir": self.policy.tmp,
            "agent_home": self.agent_home,
            "steps": [s.to_dict() for s in self.steps],
            "identity": self.identity.to_dict(),
            "environment": dict(self.env),
            "landlock": {
                "abi": self.abi,
                "handled_fs": landlock.names(self.handled_fs),
                "handled_net": landlock.names(self.handled_net),
                "scoped": landlock.names(self.scoped),
                "rules": [{"path": p, "access": landlock.names(a), "why": w}
                          for p, a, w in self.path_rules],
                "tcp_ports": [{"port": p, "access": landlock.names(a)} for p, a in self.port_rules],
                "carved_out": list(self.carved),
                "read_only_in_write": sorted({g.path for g in self.policy.read_only
                                              if any(is_under(g.path, w.path)
                                                     for w in self.policy.write)}),
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
                                "guard and performed by the broker" if self.file_mediation
                                else "none: exclusive workdir, new protected names are held or "
                                "quarantined at exit" if self.exclusive
                                else "none (new protected paths only checked at exit)"),
            "workdir_mode": {"mode": self.policy.workdir_mode,
                             "gives_up": workdir_mode.GIVES_UP if self.exclusive else None},
            "protected_paths": (dict(self.protected.description)
                                if self.protected is not None else None),
            "lsm": {"apparmor": self.lsm.apparmor, "selinux": self.lsm.selinux},
            "namespaces": {
                "mount": self.mount_ns, "pid": self.pid_ns, "network": self.net_ns,
                "writable": self.writable_paths() if self.mount_ns else None,
                "private": ["/dev/shm", "/dev/pts", "/proc"] if self.mount_ns else [],
            },
            "credentials": [c.to_dict() for c in self.policy.credentials],
            "network": {**self.policy.network.to_dict(),
                        "gateway": (("egress gateway: proxy variables, every other TCP connect "
                                     "redirected, DNS answered by confine"
                                     if self.unix_mediation else "egress gateway: proxy "
                                     "variables only (no seccomp user notification)")
                                    if self.egress else None)},
            "mechanisms": dict(self.mechanisms),
            "cgroup": ({"parent": self.cgroup, "kill": "cgroup.kill, then the descendant walk"}
                       if self.cgroup else None),
            "limits": {k: {"value": v, "mechanism": self.limits.get(k, "unlimited")}
                       for k, v in self.policy.limits.to_dict().items()},
            "missing": [{"feature": m.feature, "detail": m.detail} for m in self.missing],
            "notes": list(self.notes),
        }


def _replacement(name: str, policy: Policy, host: HostFacts) -> str | None:
    """The mechanism that gives feature `name` where its primary is missing, if
    one does here (features.REPLACEMENTS)."""
    if name in features.MOUNT_PARTS:
        if name.endswith((".read_only_host", ".protected_paths")) \
                and not (host.seccomp_filter and host.seccomp_user_notif):
            return None        # the broker is reached through user notification only
        if host.landlock_abi < 1:
            return None
        return features.REPLACEMENTS[name][0]
    if host.namespaces and name in features.REPLACEMENTS:
        mechanism = features.REPLACEMENTS[name][0]
        if name == "landlock.truncate":
            # a secret inside a writable bind: only Landlock could refuse its truncation
            # (the broker judges truncation only where there is no mount namespace)
            return None if any(is_under(d.path, w.path) for d in policy.deny
                               for w in policy.write) else mechanism
        if name == "landlock.net_tcp":
            # the gateway routes every connect; without it Landlock alone filters ports
            routed = (policy.network.egress and host.seccomp_user_notif
                      and uses_net_namespace(policy, host))
            return mechanism if routed else None
        if name != "landlock.scope_abstract_unix" or uses_net_namespace(policy, host):
            return mechanism
    return _by_seccomp(name, host)


def _by_seccomp(name: str, host: HostFacts) -> str | None:
    """The replacement of a Landlock right by seccomp (and the broker) where no
    namespace gives it (features.NO_NS_REPLACEMENTS)."""
    if name not in features.NO_NS_REPLACEMENTS or not host.seccomp_filter:
        return None
    if name == "landlock.ioctl_dev":
        return features.NO_NS_REPLACEMENTS[name][0] if seccomp_ioctls.available() else None
    if not host.seccomp_user_notif:
        return None
    return features.NO_NS_REPLACEMENTS[name][0]


def unreachable_servers(policy: Policy) -> list[int]:
    """Ports the agent may listen on but not connect to: its own server would be
    unreachable from inside, which looks like a bug in the server."""
    return sorted(set(policy.network.bind_tcp) - set(policy.network.connect_tcp))


def uses_net_namespace(policy: Policy, host: HostFacts) -> bool:
    """A profile that grants no TCP port needs nothing of the host's network: the
    agent gets a network namespace of its own (no host /proc/net, no host abstract
    sockets; TCP and UDP stay refused by Landlock and seccomp as well)."""
    return (host.namespaces and host.net_namespace
            and not (policy.network.connect_tcp or policy.network.bind_tcp)
            # the gateway's sockets are handed over like the seccomp listener
            and (not policy.network.egress or host.seccomp_user_notif))


def mechanisms(policy: Policy, host: HostFacts) -> dict[str, str]:
    """feature -> the mechanism that enforces it on this host (primary or replacement);
    features with neither are absent (they are in missing_features)."""
    out: dict[str, str] = {}
    abi = host.landlock_abi
    for f in features.FEATURES:
        if f.min_abi is not None:
            if abi >= f.min_abi:
                out[f.name] = f"Landlock ABI {abi}"
            else:
                rep = _replacement(f.name, policy, host)
                if rep is not None:
                    out[f.name] = f"{rep} (replaces Landlock ABI {f.min_abi})"
    if host.seccomp_filter:
        out["seccomp"] = "seccomp filter"
    if host.seccomp_user_notif:
        out["seccomp_notify"] = "seccomp user notification" + (
            "" if host.pidfd_getfd else " (pidfd_getfd refused here: the agent's directories "
            "are taken through /proc; a mediated socket call is performed on a new socket of "
            "the same kind, which replaces the agent's: SECCOMP_ADDFD_FLAG_SETFD)")
    if host.namespaces:
        out["mount_namespace"] = "mount and pid namespaces"
    out.update(pid_mechanisms(host))
    for name in features.MOUNT_PARTS:
        if host.namespaces:
            out[name] = "mount namespace"
        elif (rep := _replacement(name, policy, host)) is not None:
            out[name] = f"{rep} (replaces the mount namespace)"
    if not host.namespaces and all(n in out for n in features.MOUNT_PARTS):
        out["mount_namespace"] = "each part by its replacement (replaces the mount namespace)"
    if uses_net_namespace(policy, host):
        out["network_namespace"] = "network namespace (no host network, sockets or tables)"
    return out


def pid_mechanisms(host: HostFacts) -> dict[str, str]:
    """The pid namespace's guarantees and what gives each here (never missing: see
    features.PID_REPLACEMENTS)."""
    if host.namespaces:
        return {"pid_namespace.lifetime": "pid namespace (its init's death kills every "
                "process in it), then the descendant walk",
                "pid_namespace.visibility": "pid namespace and its own /proc"}
    life = features.PID_REPLACEMENTS["pid_namespace.lifetime"][0]
    if host.cgroup:
        life = "cgroup.kill of the run's cgroup, then the " + life
    return {"pid_namespace.lifetime": life,
            "pid_namespace.visibility": features.PID_REPLACEMENTS["pid_namespace.visibility"][0]
            + ": environment, memory and descriptors of outside processes refused; their "
            "pids and command lines stay visible"}


def missing_features(policy: Policy, host: HostFacts, as_root: bool = True) -> list[Missing]:
    """Every protection the policy needs that this host lacks (features.FEATURES),
    minus those another layer replaces here (features.REPLACEMENTS)."""
    out = []
    if not host.namespaces:
        why = ("" if as_root else " (unprivileged user namespaces are disabled or restricted, "
               "e.g. by AppArmor)")
        for name in features.MOUNT_PARTS:
            if _replacement(name, policy, host) is None:
                out.append(Missing(name, features.get(name).protects + ": no mount namespace"
                                   + why + ", and its replacement ("
                                   + features.REPLACEMENTS[name][0] + ") needs "
                                   + ("seccomp user notification" if name.endswith(
                                       (".read_only_host", ".protected_paths")) else "Landlock")))
    needed = ["landlock", "landlock.truncate", "landlock.ioctl_dev"]
    if policy.network.connect_tcp or policy.network.bind_tcp or policy.network.egress:
        # no port granted: seccomp refuses IPv4/IPv6 sockets instead (no_inet_rules);
        # with the gateway, Landlock keeps the broker's connects on its ports
        needed.append("landlock.net_tcp")
    if policy.scope.signals:
        needed.append("landlock.scope_signal")
    if policy.scope.abstract_unix:
        needed.append("landlock.scope_abstract_unix")
    abi = host.landlock_abi
    for f in sorted((features.get(n) for n in needed), key=lambda f: (f.min_abi or 0, f.name)):
        if f.min_abi is not None and abi < f.min_abi and _replacement(f.name, policy, host) is None:
            have = f"ABI {abi}" if abi else "no Landlock"
            out.append(Missing(f.name, f"{f.protects} needs Landlock ABI {f.min_abi}; "
                               f"this kernel has {have}"))
    if host.seccomp_listener_busy:
        out.append(Missing("outer_mediator", "an inherited seccomp filter already has a "
                           "listener (another confine run, or a runtime that mediates with "
                           "seccomp): calls it mediates are performed outside this run's "
                           "Landlock domain, so writes this profile does not grant could "
                           "succeed"))
    if not host.seccomp_filter:
        out.append(Missing("seccomp", "seccomp filters are not available on this kernel"))
    elif not host.seccomp_user_notif:
        out.append(Missing("seccomp_notify", "seccomp user notification (refuses new protected "
                           "workdir names while the agent runs; mediates listen() on "
                           "unbound TCP sockets" + (" and pathname unix sockets, as Landlock "
                           f"ABI {abi} < 9 cannot)" if abi < 9 else ")")
                           + (" cannot be had: a seccomp filter this process inherited already "
                              "has a listener (inside another confine run, or a runtime that "
                              "mediates with seccomp), and the kernel allows one per process"
                              if host.seccomp_listener_busy
                              else " is not available on this kernel")))
    return out


def limit_mechanisms(policy: Policy, identity: Identity, mount_ns: bool,
                     cgroup_controllers: Sequence[str] = (),
                     root_mounts: bool = True) -> dict[str, str]:
    """How each limit the policy sets is enforced on this host ("NOT enforced: why")."""
    lim, out = policy.limits, {}
    if lim.processes is not None and "pids" in cgroup_controllers:
        out["processes"] = "cgroup pids.max: every task of the run, threads included"
    elif lim.processes is not None:
        out["processes"] = ("RLIMIT_NPROC: the tasks the agent's uid has when the run starts, "
                            "plus this many" + ("; NOT enforced for uid 0 (the kernel exempts "
                                                "root)" if identity.uid == 0 else ""))
    if lim.memory is not None and "memory" in cgroup_controllers:
        out["memory"] = "cgroup memory.max (and no swap): all memory of the run, tmpfs included"
    elif lim.memory is not None:
        out["memory"] = ("RLIMIT_DATA: private writable memory of each process (shared memory "
                         "and tmpfs files are not counted)")
    if lim.open_files is not None:
        out["open_files"] = "RLIMIT_NOFILE: descriptors of each process"
    if lim.file_size is not None:
        out["file_size"] = "RLIMIT_FSIZE: a larger write fails with EFBIG (or SIGXFSZ)"
    if lim.shm_size is not None:
        out["shm_size"] = ("size of the private /dev/shm tmpfs" if mount_ns else
                           "NOT enforced: no mount namespace, /dev/shm is the host's")
    if lim.tmp_size is not None:
        out["tmp_size"] = ("size of a tmpfs the supervisor mounts on the private TMPDIR"
                           if identity.started_as_root and root_mounts else "NOT enforced: "
                           + ("started unprivileged" if not identity.started_as_root else
                              "mounts are refused to confine here")
                           + ", the private TMPDIR is a directory on the host's /tmp")
    return out


def own_terminals() -> list[str]:
    """The pseudo-terminals of the launcher's standard descriptors (the agent's
    own terminal): the only entries of the host's /dev/pts granted without a
    mount namespace."""
    out: list[str] = []
    for fd in (0, 1, 2):
        try:
            t = os.path.realpath(os.ttyname(fd))
        except OSError:
            continue
        if is_under(t, "/dev/pts") and t != "/dev/pts" and t not in out:
            out.append(t)
    return out


def _drop_covered(rules: list[tuple[str, AccessFS, str]]) -> list[tuple[str, AccessFS, str]]:
    """A rule beneath another rule that already grants all its rights adds nothing.
    Linear in rules x path depth: only a rule on the path itself or one of its
    ancestors can cover it (an earlier one, for rules on the same path)."""
    at: dict[str, list[tuple[int, AccessFS]]] = {}
    for i, (p, r, _) in enumerate(rules):
        at.setdefault(p, []).append((i, r))
    out = []
    for i, (p, r, w) in enumerate(rules):
        covered = False
        q = p
        while not covered:
            covered = any((r & ~r2) == 0 and (q != p or j < i) for j, r2 in at.get(q, ()))
            if q == "/" or not q:
                break
            q = os.path.dirname(q)
        if not covered:
            out.append((p, r, w))
    return out


def compile(policy: Policy, argv: Sequence[str], identity: Identity, host: HostFacts, *,
            parent_env: Mapping[str, str], cli_env: Sequence[str] = (),
            lsm: Lsm = Lsm(), protected: Protected | None = None,
            agent_home: str | None = None) -> Plan:
    abi = host.landlock_abi
    handled_fs = landlock.fs_rights(abi)
    handled_net = landlock.net_rights(abi) & (AccessNet.BIND_TCP | AccessNet.CONNECT_TCP
                                              | AccessNet.BIND_UDP | AccessNet.CONNECT_SEND_UDP)
    scoped = landlock.scopes(abi)
    if not policy.scope.signals:
        scoped &= ~Scope.SIGNAL
    if not policy.scope.abstract_unix:
        scoped &= ~Scope.ABSTRACT_UNIX_SOCKET

    denied = sorted({d.path for d in policy.deny})
    read_only = sorted({g.path for g in policy.read_only})
    rules: list[tuple[str, AccessFS, str]] = []
    carved: list[str] = []
    # What stays writable in the read-only host view: the write grants as carved, so
    # read-only entries inside them stay on a read-only mount too (EROFS, no chmod).
    binds: list[str] = []

    def add(paths: list[str], rights: AccessFS, why: str) -> None:
        for p in paths:
            r = rights & handled_fs
            if not os.path.isdir(p):
                r &= landlock.FILE_RIGHTS
            if r:
                rules.append((p, r, why))

    mount_ns = host.namespaces
    if policy.workdir_mode == workdir_mode.EXCLUSIVE and not mount_ns:
        # the read-only binds of what was protected at start are what keeps it
        # unchanged while nothing judges the workdir's file calls
        raise ConfineError(f"exclusive workdir ({workdir_mode.FLAG}, {workdir_mode.KEY}: "
                           "exclusive) needs a mount namespace for the read-only binds of "
                           "the protected paths, and there is none here: refusing to run")
    writes, devices = policy.write, policy.devices
    if not mount_ns:
        # The host's /dev/shm and /dev/pts are shared with every process of the
        # user: nothing of /dev/shm, and of /dev/pts only the agent's own terminal.
        writes = tuple(g for g in writes if not is_under(g.path, "/dev/shm"))
        devices = tuple(g for g in devices if not is_under(g.path, "/dev/pts"))
        if len(devices) < len(policy.devices):
            devices += tuple(dataclasses.replace(g, path=t) for g in policy.devices
                             if g.path == "/dev/pts" for t in own_terminals())
    for grants, rights, kind in ((policy.read, landlock.READ, "read"),
                                 (writes, landlock.WRITE, "write"),
                                 (devices, landlock.DEVICE, "device"),
                                 (tuple(g for g in policy.unix_sockets if os.path.exists(g.path)),
                                  AccessFS.RESOLVE_UNIX, "unix socket")):
        for g in grants:
            if kind == "write" and g.source not in ("workdir", "tmp"):
                w, r, c = _carve.carve_write(g.path, denied, read_only)
                add(r, landlock.READ, f"write, read-only part ({g.source})")
                binds += w if r else [g.path]
            else:
                w, c = _carve.carve(g.path, denied)
                if kind == "write":
                    binds.append(g.path)
            carved += c
            add(w, rights, f"{kind} ({g.source})")
    if agent_home is not None:
        _home_rules(agent_home, denied, add, binds, carved)
    rules = _drop_covered(rules)
    ports = [(p, AccessNet.CONNECT_TCP) for p in policy.network.connect_tcp]
    ports += [(p, AccessNet.BIND_TCP) for p in policy.network.bind_tcp]
    net_ns = uses_net_namespace(policy, host)
    gw_ports = NETNS_GATEWAY_PORTS if net_ns and policy.network.egress else ()
    ports += [(p, AccessNet.CONNECT_TCP) for p in gw_ports]
    ports = [(p, a & handled_net) for p, a in ports if a & handled_net]

    fixed = {"HOME": identity.home, "TMPDIR": policy.tmp, "USER": identity.user,
             "LOGNAME": identity.user}
    fixed.update(_env.server_vars(policy.tmp))
    if agent_home is not None:
        fixed.update(_env.home_vars(agent_home))
        fixed.update(_env.tool_homes(((g.template, g.path) for g in policy.write), parent_env))
    env, env_notes = _env.build(dict(parent_env), passthrough=policy.env.passthrough,
                                profile_set=policy.env.set, cli=cli_env, fixed=fixed)
    env_notes += _env.drop_user_servers(env)
    notes = list(env_notes) + list(identity.notes)
    if not identity.started_as_root:
        notes.append(caps.BOUNDING_SET_NOTE)
    if abi < 9:
        notes.append("pathname unix sockets: connect/sendto/sendmsg are mediated by the supervisor "
                     f"(Landlock ABI {abi} < 9 has no RESOLVE_UNIX); sendmmsg is refused")
    notes.append("listen() on a TCP socket without a bound port is refused (it would pick a "
                 "port without Landlock's BIND_TCP check)")
    notes += egress_notes(policy, host)
    for port in unreachable_servers(policy):
        notes.append(f"network.bind_tcp: the agent may listen on port {port} but not connect to "
                     f"it (add {port} to network.connect_tcp to reach its own server)")
    if policy.workdir_mode == workdir_mode.EXCLUSIVE:
        notes.append(workdir_mode.GIVES_UP)
    if policy.seccomp.unsafe_allow:
        notes.append("default seccomp denials removed by the profile: "
                     + ", ".join(policy.seccomp.unsafe_allow))
    if identity.uid == 0 and policy.limits.processes is not None \
            and "pids" not in host.cgroup_controllers:
        notes.append("limits: processes is not enforced for an agent running as uid 0 "
                     "(RLIMIT_NPROC does not apply to root)")
    if not host.namespaces:
        notes.append("processes: no pid namespace, so the agent sees every process of the "
                     "host in /proc (pids, command lines, status; not their environment, "
                     "memory or descriptors: Landlock refuses those)")
    if not uses_net_namespace(policy, host):
        notes.append("network tables: /proc/net shows the host's sockets and connections (no "
                     "network namespace); only another network namespace could hide them")
    missing = missing_features(policy, host, identity.started_as_root)
    lsm_kept = Lsm()
    if lsm.apparmor:
        if host.apparmor:
            lsm_kept = Lsm(apparmor=lsm.apparmor)
        else:
            missing.append(Missing("apparmor", f"--apparmor {lsm.apparmor}: AppArmor is not "
                                   "enabled on this kernel"))
    if lsm.selinux:
        if host.selinux:
            lsm_kept = Lsm(apparmor=lsm_kept.apparmor, selinux=lsm.selinux)
        else:
            missing.append(Missing("selinux", f"--selinux-context {lsm.selinux}: SELinux is "
                                   "not enabled on this kernel"))
    shm = [g.path for g in policy.write if g.path == "/dev/shm"]
    binds = [p for p in dict.fromkeys(binds) if p != "/dev/shm" and os.path.exists(p)]
    # New /dev/shm and /dev/pts exist only in a mount namespace (private_dev).
    child_rules = [("/dev/shm", landlock.WRITE & handled_fs)] if shm and mount_ns else []
    for g in policy.devices:
        if g.path in ("/dev/pts", "/dev/ptmx") and mount_ns:
            child_rules.append((g.path, landlock.DEVICE & handled_fs))
    if not mount_ns and any(g.path == "/dev/pts" for g in policy.devices):
        notes.append("/dev/pts: only the agent's own terminal is granted (no mount namespace: "
                     "it is the host's); new pseudo-terminals (openpty, script, node-pty) fail "
                     "with EACCES, their other end lying in the same /dev/pts")
    if shm and not mount_ns:
        notes.append("/dev/shm is not granted (no mount namespace: it is the host's, shared "
                     "with every process of the user): POSIX shared memory and semaphores "
                     "(shm_open, sem_open, Python multiprocessing locks) fail with EACCES")
    for g in policy.read:
        if g.path == "/proc" or g.path.startswith("/proc/"):
            child_rules.append((g.path, landlock.READ & handled_fs))
    private_binds: list[tuple[str, str]] = []
    for name in policy.private_tmp:
        dst = privatetmp.expand(name, identity.uid)
        if not mount_ns:
            notes.append(f"filesystem.private_tmp {dst}: not made (no mount namespace to "
                         "make it private in): the agent's creates there are refused")
            continue
        # a directory of the run's TMPDIR bound over the host's (runtime/session.py
        # makes both): a new mount, so its rule is added in the child
        private_binds.append((os.path.join(policy.tmp, PRIVATE_TMP, os.path.basename(dst)), dst))
        child_rules.append((dst, landlock.WRITE & handled_fs))
        binds.append(dst)
    sc_rules = seccomp.rules_for(policy.seccomp.deny, policy.seccomp.unsafe_allow,
                                 udp=policy.network.egress and host.seccomp_user_notif)
    if policy.workdir_mode == workdir_mode.EXCLUSIVE:
        sc_rules = tuple(sc_rules) + seccomp.setflags_rules()
    sc_extra: tuple[Any, ...] = ()
    if abi < 4 and not (policy.network.connect_tcp or policy.network.bind_tcp
                        or policy.network.egress):
        sc_extra = seccomp.no_inet_rules()
        notes.append(f"Landlock ABI {abi} cannot filter TCP: IPv4/IPv6 sockets refused by seccomp")
    unix_mediation = host.seccomp_user_notif
    # Without a mount namespace below ABI 3 the broker judges truncation too
    # (NO_NS_REPLACEMENTS), so file calls are mediated even where the guard has no
    # name to protect; elsewhere only for the guard (each mediated call costs).
    # An exclusive workdir: no file call is mediated (its exit check holds new names).
    file_mediation = unix_mediation and (
        (protected is not None and protected.guard
         and policy.workdir_mode != workdir_mode.EXCLUSIVE)
        or (not mount_ns and abi < landlock.FS_MIN_ABI[AccessFS.TRUNCATE]))
    ioctl_allowlist = (not mount_ns and abi < landlock.FS_MIN_ABI[AccessFS.IOCTL_DEV]
                       and host.seccomp_filter and seccomp_ioctls.available())
    refuse_abstract = (unix_mediation and policy.scope.abstract_unix and not net_ns
                       and abi < landlock.SCOPE_MIN_ABI[Scope.ABSTRACT_UNIX_SOCKET])
    signal_mediation = (unix_mediation and policy.scope.signals and not mount_ns
                        and abi < landlock.SCOPE_MIN_ABI[Scope.SIGNAL])
    meta_mediation = unix_mediation and not mount_ns
    dgram_notify = unix_mediation and seccomp.dgram_notifiable(sc_rules)
    if unix_mediation and not host.pidfd_getfd:
        notes.append("pidfd_getfd is refused on this host (a container without CAP_SYS_PTRACE?): "
                     "mediated file calls take the agent's directories through /proc; a mediated "
                     "socket call (bind, connect, sendto/sendmsg with an address, listen) is "
                     "performed on a new socket of the same kind, which replaces the agent's "
                     "(socket options other than SO_REUSEADDR, SO_REUSEPORT and IPV6_V6ONLY set "
                     "before it are lost; a socket bound or connected other than through "
                     "confine, sendmsg on a connected one and SCM_RIGHTS are refused)")
    mediate_as = ((identity.uid, identity.gid)
                  if unix_mediation and identity.switch and not host.ptrace_others else None)
    if mediate_as is not None:
        notes.append("started as root without CAP_SYS_PTRACE (a container's default): the "
                     "supervisor reads the agent's mediated calls with the agent's uid as "
                     "its real uid, in the one thread that does so")
    device_binds = None
    if mount_ns and abi < landlock.FS_MIN_ABI[AccessFS.IOCTL_DEV]:
        # /dev/pts and /dev/ptmx are a new devpts instance of the agent's (private_dev)
        device_binds = tuple(g.path for g in policy.devices
                             if not is_under(g.path, "/dev/pts") and g.path != "/dev/ptmx"
                             and os.path.exists(g.path))
    plan = Plan(policy=policy, argv=tuple(argv), identity=identity, env=env, abi=abi,
                handled_fs=handled_fs, handled_net=handled_net, scoped=scoped,
                path_rules=tuple(rules), port_rules=tuple(ports), seccomp_rules=tuple(sc_rules),
                seccomp_extra=tuple(sc_extra), missing=tuple(missing), notes=tuple(notes),
                carved=tuple(sorted(set(carved))), unix_mediation=unix_mediation,
                file_mediation=file_mediation, mount_ns=mount_ns, meta_mediation=meta_mediation,
                pidfd_getfd=host.pidfd_getfd, pid_ns=mount_ns, dgram_notify=dgram_notify,
                mediate_as=mediate_as,
                net_ns=net_ns, gateway_ports=gw_ports,
                lsm=lsm_kept, writable_binds=tuple(binds), child_rules=tuple(child_rules),
                protected=protected, mechanisms=mechanisms(policy, host),
                limits=limit_mechanisms(policy, identity, mount_ns, host.cgroup_controllers,
                                        host.root_mounts),
                cgroup=host.cgroup, egress=policy.network.egress, agent_home=agent_home,
                device_binds=device_binds, ioctl_allowlist=ioctl_allowlist,
                refuse_abstract=refuse_abstract, signal_mediation=signal_mediation,
                exec_notify=unix_mediation and policy.approvals.judges("exec"),
                private_binds=tuple(private_binds))
    return dataclasses.replace(plan, steps=tuple(child_steps(plan)))


# In the agent's own network namespace every port is free: the gateway's are fixed,
# so Landlock's rules (built before the fork) can name them. DNS on its own port.
NETNS_GATEWAY_PORTS = (3128, 3129, 53)
PRIVATE_TMP = ".private-tmp"     # below TMPDIR: the directories of filesystem.private_tmp


def egress_notes(policy: Policy, host: HostFacts) -> list[str]:
    """What the network keys mean for this run, in words (--dry-run, check)."""
    n = policy.network
    if not n.egress:
        return []
    out = []
    if n.connect_tcp:
        out.append("network.connect_tcp: ports " + ", ".join(map(str, n.connect_tcp))
                   + " of the agent's own loopback only; every other TCP connection goes "
                   "through the egress gateway (a port listed here no longer reaches every host)")
    hosts = list(n.allow) + [f"set {s}" for s in n.include]
    out.append("egress gateway: " + (("allows " + ", ".join(hosts)) if hosts else
                                     "no host is allowed (network.allow, --allow-host)")
               + (f"; denied: {', '.join(n.deny)}" if n.deny else "")
               + ("; other hosts are asked about (network.default: ask)"
                  if n.default == "ask" else "; every other host is refused"))
    out.append("egress gateway: proxy variables (HTTPS_PROXY, HTTP_PROXY, ALL_PROXY, lower "
               "case too) name it; NO_PROXY is the agent's loopback")
    if uses_net_namespace(policy, host):
        out.append("egress gateway: the agent has a network namespace of its own (only its "
                   "loopback); the gateway's sockets are made there, on ports "
                   + ", ".join(map(str, NETNS_GATEWAY_PORTS)) + " (proxy, redirect, DNS), "
                   "and it dials out from the host's")
    else:
        out.append("egress gateway: the agent shares the host's network namespace (the "
                   "profile lists loopback ports, or namespaces are unavailable): the "
                   "supervisor's check after the rewrite and Landlock's ports are the layers")
    if host.seccomp_user_notif:
        out.append("egress gateway: a connect to any other address is redirected to it "
                   "(decided by TLS SNI or HTTP Host and confine's DNS answers); DNS to any "
                   "address (port 53, UDP or TCP) is answered by confine; every other UDP "
                   "destination is refused")
    else:
        out.append("egress gateway: NO redirect of direct connects (no seccomp user "
                   "notification): programs that ignore the proxy variables are refused by "
                   "Landlock only on ports outside the gateway's")
    return out


def _home_rules(home: str, denied: list[str], add: Callable[[list[str], AccessFS, str], None],
                binds: list[str], carved: list[str]) -> None:
    """The agent home: every write right (its own rc files, history, caches), like
    the workdir, secrets carved out; writable in the read-only host view."""
    w, c = _carve.carve(home, denied)
    carved += c
    add(w, landlock.WRITE, "write (agent home)")
    binds.append(home)
