"""The validated, immutable policy: the single source of truth.

Everything downstream (the launch plan, --dry-run, exporters, probe) reads
these objects; nothing re-parses YAML. Paths are absolute and resolved at
load time; `template` keeps the profile's spelling ({workdir}/..., ~/...) so
exporters can emit variables instead of one machine's paths.
"""
from __future__ import annotations

from ..record import dataclass, field
from .approvals import Approvals
from .copied import Copied
from .credentials import Credential
from .logins import Login
from .ssh_agent import SshAgent
from .stateroots import StateRoot


@dataclass(frozen=True)
class PathGrant:
    path: str          # absolute, symlinks resolved
    template: str      # as written in the profile, e.g. "{workdir}" or "~/.gitconfig"
    source: str        # "default.yaml:12" or "--read"
    optional: bool = False


@dataclass(frozen=True)
class Network:
    """connect_tcp: ports of the agent's OWN loopback it may connect to (with the
    egress gateway on, every other TCP connection goes through the gateway);
    allow/deny: host rules (confine/gateway/rules.py grammar; deny wins), include:
    named host sets, allowed_ips: networks an allowed name may resolve to although
    they are private; default: "deny" or "ask" for a destination no rule allows."""
    connect_tcp: tuple[int, ...] = ()
    bind_tcp: tuple[int, ...] = ()
    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    include: tuple[str, ...] = ()
    allowed_ips: tuple[str, ...] = ()
    default: str = "deny"
    upstream_ca: tuple[str, ...] = ()          # PEM files the gateway trusts upstream, besides the system's

    @property
    def egress(self) -> bool:
        """The gateway runs: the agent may reach something beyond its own loopback,
        or is told why not (a profile with TCP ports, host rules, or ask)."""
        return bool(self.connect_tcp or self.allow or self.include or self.default == "ask")

    def to_dict(self) -> dict[str, object]:
        return {"connect_tcp": list(self.connect_tcp), "bind_tcp": list(self.bind_tcp),
                "allow": list(self.allow), "deny": list(self.deny),
                "include": list(self.include), "allowed_ips": list(self.allowed_ips),
                "default": self.default, "upstream_ca": list(self.upstream_ca)}


@dataclass(frozen=True)
class Env:
    passthrough: tuple[str, ...] = ()          # names or NAME_* globs taken from the caller
    set: tuple[tuple[str, str], ...] = ()      # explicit values


@dataclass(frozen=True)
class Seccomp:
    deny: tuple[str, ...] = ()                 # extra syscalls to deny
    unsafe_allow: tuple[str, ...] = ()         # named opt-outs from the default deny set


@dataclass(frozen=True)
class Scope:
    signals: bool = True          # no signals to processes outside the sandbox
    abstract_unix: bool = True    # no connecting to abstract unix sockets outside


@dataclass(frozen=True)
class Limits:
    """Resource limits of a run; None is unlimited. The mechanism each gets
    (cgroup, rlimit, tmpfs size) is the planner's choice (plan/compile.py)."""
    processes: int | None = None       # tasks (threads count) the agent may run at once
    memory: int | None = None          # bytes
    open_files: int | None = None      # descriptors per process
    file_size: int | None = None       # bytes, largest file the agent may write
    tmp_size: int | None = None        # bytes, the private TMPDIR
    shm_size: int | None = None        # bytes, the private /dev/shm

    def to_dict(self) -> dict[str, int | None]:
        return {"processes": self.processes, "memory": self.memory,
                "open_files": self.open_files, "file_size": self.file_size,
                "tmp_size": self.tmp_size, "shm_size": self.shm_size}


@dataclass(frozen=True)
class Policy:
    name: str
    description: str
    sources: tuple[str, ...]                   # profile files, most derived first
    workdir: str
    home: str
    tmp: str
    read: tuple[PathGrant, ...] = ()           # read + execute
    write: tuple[PathGrant, ...] = ()          # full file rights except device nodes
    devices: tuple[PathGrant, ...] = ()        # read/write/ioctl on device nodes
    deny: tuple[PathGrant, ...] = ()           # never readable or writable, even under a grant
    read_only: tuple[PathGrant, ...] = ()      # run later: only readable, even under a write grant
    network: Network = field(default_factory=Network)
    env: Env = field(default_factory=Env)
    seccomp: Seccomp = field(default_factory=Seccomp)
    scope: Scope = field(default_factory=Scope)
    unix_sockets: tuple[PathGrant, ...] = ()   # pathname sockets connectable outside the workdir
    protected: tuple[str, ...] = ()            # workdir patterns added to patterns.DEFAULT_PATTERNS
    limits: Limits = field(default_factory=Limits)
    approvals: Approvals = field(default_factory=Approvals)   # approvals:, the engine's rules
    # None: no agent socket inside (ssh_agent.py); out of the hash: hash(None) differs
    # between processes before Python 3.12 (tests/unit/test_record.py compares them)
    ssh_agent: SshAgent | None = field(default=None, hash=False)
    workdir_mode: str = "shared"               # policy/workdir_mode.py: shared | exclusive
    credentials: tuple[Credential, ...] = ()   # values the agent sees only as placeholders
    state_roots: tuple[StateRoot, ...] = ()    # agent state directories: protected roots
    private_tmp: tuple[str, ...] = ()          # names in /tmp made private (privatetmp.py)
    logins: tuple[Login, ...] = ()             # agents' login files: a placeholder copy inside
    copied: tuple[Copied, ...] = ()            # files of HOME given as copies (copied.py)

    def to_dict(self) -> dict[str, object]:
        def grants(gs: tuple[PathGrant, ...]) -> list[dict[str, object]]:
            return [{"path": g.path, "template": g.template, "source": g.source,
                     "optional": g.optional} for g in gs]
        return {
            "name": self.name, "description": self.description,
            "sources": list(self.sources), "workdir": self.workdir,
            "home": self.home, "tmp": self.tmp,
            "read": grants(self.read), "write": grants(self.write),
            "devices": grants(self.devices), "deny": grants(self.deny),
            "read_only": grants(self.read_only),
            "network": self.network.to_dict(),
            "env": {"pass": list(self.env.passthrough), "set": dict(self.env.set)},
            "seccomp": {"deny": list(self.seccomp.deny),
                        "unsafe_allow": list(self.seccomp.unsafe_allow)},
            "unix_sockets": {"allow": grants(self.unix_sockets)},
            "protected": list(self.protected),
            "state_roots": [{"path": r.path, "template": r.template, "source": r.source,
                             "protected": list(r.patterns)} for r in self.state_roots],
            "private_tmp": list(self.private_tmp),
            "copied": [c.to_dict() for c in self.copied],
            "limits": self.limits.to_dict(),
            **({"approvals": self.approvals.to_dict()} if self.approvals.kinds else {}),
            "workdir_mode": self.workdir_mode,
            "credentials": [c.to_dict() for c in self.credentials],
            **({"logins": [lg.to_dict() for lg in self.logins]} if self.logins else {}),
            "scope": {"signals": self.scope.signals,
                      "abstract_unix": self.scope.abstract_unix},
            **({"ssh_agent": self.ssh_agent.to_dict()} if self.ssh_agent is not None else {}),
        }
