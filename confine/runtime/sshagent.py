"""The run's ssh-agent (profile `ssh_agent:`): the socket the agent finds at
SSH_AUTH_SOCK, served by the supervisor with the person's real agent behind it
(the protocol and the policy: credentials/sshagent.py).

The threat: the person's real agent signs anything for anyone who reaches its
socket. The agent never gets that socket: SSH_AUTH_SOCK inside names the proxy
in the run's private TMPDIR, the real one is opened by the supervisor only (its
path is the launching person's SSH_AUTH_SOCK, read before the start), and a run
whose policy would let the agent connect to the real socket itself (it lies in
the workdir, the TMPDIR, the agent's home or a `unix_sockets.allow` entry:
Plan.unix_roots) is refused. Without
the section nothing here runs and SSH_AUTH_SOCK is not passed (plan/env.py).

The proxy's directory is made by the supervisor (root's where confine runs as
root, so the agent cannot rename its entry away). Were the agent to replace the
name anyway (the unprivileged case: the TMPDIR is its own), it would only serve
its own clients: the supervisor listens on the socket it bound and never
connects to that path.

The host keys of the profile's `hosts:` are read here, before the start, from
the known_hosts files the section names (default: the launching person's
~/.ssh/known_hosts and /etc/ssh/ssh_known_hosts): the agent's own known_hosts is
written by the agent and decides nothing.
"""
from __future__ import annotations

import dataclasses
import os
import socket
import struct
from collections.abc import Callable, Mapping
from typing import Any

from ..credentials import sshagent as proto
from ..errors import ConfineError, printable
from ..gateway import owner
from ..paths import is_under
from ..plan import Plan
from ..plan.steps import child_steps
from ..policy.ssh_agent import DEFAULT_SSH_PORT
from ..record import dataclass
from .events import Events

ENV = "SSH_AUTH_SOCK"
DIR_NAME = ".confine-ssh-agent"
SOCKET_NAME = "agent.sock"
UNIX_DIAG_ICONS, UDIAG_SHOW_ICONS = 3, 0x08
MAX_CMDLINE = 300


@dataclass
class Agent:
    """One run's agent socket: prepared with the plan, served from the TMPDIR's mount
    until the agent is gone."""
    policy: Any                     # policy.ssh_agent.SshAgent
    upstream: str | None            # the real agent's socket, outside
    path: str                       # the socket inside (SSH_AUTH_SOCK)
    host_keys: proto.HostKeys
    uid: int
    gid: int
    proxy: proto.Proxy | None = None

    def start(self, events: Events, approver: str | None = None) -> None:
        """Bind the socket (the TMPDIR is what the agent will see) and serve it.
        Questions go to the run's approval engine (events.approval), whose approver
        the flags chose; `approver` is kept for the caller's signature only."""
        d = os.path.dirname(self.path)
        lsock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        try:
            os.mkdir(d, 0o711)
            os.chmod(d, 0o711)
            lsock.bind(self.path)
            if os.geteuid() == 0:
                os.chown(self.path, self.uid, self.gid)
            os.chmod(self.path, 0o600)
            lsock.listen(16)
        except OSError as e:
            lsock.close()
            raise ConfineError(f"ssh_agent: cannot make the agent's socket {self.path}: "
                               f"{e.strerror or e}") from None

        def refused(key: str, line: str, ev: Mapping[str, Any]) -> None:
            events.refused(key, line, ev, layer="ssh-agent")
        self.proxy = proto.Proxy(self.policy, self.upstream, self.host_keys,
                                 emit=events.emit, refused=refused,
                                 ask=ask_person(events) if self.policy.decision == "ask"
                                 else None, who=who, pending_peer=pending_peer, peer_uid=self.uid)
        self.proxy.start(lsock)
        events.emit({"event": "ssh-agent", "kind": "start", "socket": self.path,
                     "keys": list(self.policy.keys), "hosts": [
                         proto.shown_host(h, p) for h, p in self.policy.hosts],
                     "namespaces": list(self.policy.namespaces),
                     "decision": self.policy.decision, "known_hosts": list(self.host_keys.read),
                     "upstream": self.upstream is not None})

    def stop(self) -> None:
        p, self.proxy = self.proxy, None
        if p is not None:
            p.stop()


def prepare(plan: Plan, tmp: str | None, parent_env: Mapping[str, str],
            warn: Callable[[str], None]) -> tuple[Plan, Agent | None]:
    """The plan with SSH_AUTH_SOCK naming the run's agent socket, and the agent to
    start; (plan, None) when the profile has no `ssh_agent:` section."""
    pol = plan.policy.ssh_agent
    if pol is None:
        return plan, None
    if tmp is None:
        raise ConfineError("ssh_agent: the run has no private TMPDIR for the agent's socket")
    upstream = parent_env.get(ENV) or None
    if upstream is not None:
        upstream = os.path.abspath(upstream)
        for where in plan.unix_roots():
            if is_under(upstream, where) or is_under(os.path.realpath(upstream), where):
                raise ConfineError(
                    f"ssh_agent: the ssh-agent socket outside ({printable(upstream)}) lies in "
                    f"{printable(where)}, which the agent may connect in: it would reach the "
                    "real agent itself; refusing to run")
    else:
        warn("ssh_agent: SSH_AUTH_SOCK is not set, so there is no ssh-agent outside: the "
             "agent's ssh-agent lists no key")
    keys = proto.HostKeys.load(pol.known_hosts, pol.hosts)
    for h, p in keys.unknown():
        shown = h if p == DEFAULT_SSH_PORT else f"[{h}]:{p}"
        warn(f"ssh_agent: no host key for {shown} in "
             f"{', '.join(keys.read) or 'any of ' + ', '.join(pol.known_hosts)}: ssh logins "
             "to it are refused (connect once outside, or add its key with ssh-keyscan)")
    path = os.path.join(tmp, DIR_NAME, SOCKET_NAME)
    ident = plan.identity
    out = dataclasses.replace(plan, env={**plan.env, ENV: path})
    return (dataclasses.replace(out, steps=tuple(child_steps(out))),
            Agent(policy=pol, upstream=upstream, path=path, host_keys=keys,
                  uid=ident.uid, gid=ident.gid))


# --- asking: through the run's approval engine ---
def ask_person(events: Events) -> proto.Ask:
    """One use of a key put to the run's approval engine (kind "ssh_agent": the run's
    one queue, approver and memory; the ssh_agent section decided "ask", so the
    profile's approvals rules are not consulted). An answer here never allows a
    network destination (the engine remembers by kind); "run" is remembered for
    the key and the host (or namespace) for the rest of the run."""
    from ..approval import Event
    engine = events.approval
    if engine is None or engine.approver is None or engine.name == "non-interactive":
        events.warn("ssh_agent.decision is ask, but there is no terminal to ask on and no "
                    "--approver: every signature will be refused")

    def ask(use: proto.Use) -> tuple[bool, str]:
        if engine is None:
            return False, "nobody can be asked"
        if use.kind == "login" and use.dest is not None:
            subject = {"key": use.key, "use": "login", "host": use.dest[0], "port": use.dest[1]}
        else:
            subject = {"key": use.key, "use": "file", "namespace": use.namespace}
        process = {k: v for k, v in (("pid", use.pid), ("exe", use.exe),
                                     ("cmdline", use.cmdline[:MAX_CMDLINE])) if v}
        v = engine.decide(Event("ssh_agent", subject, process), ask=True)
        return v.allowed, f"ask {v.answer or v.decision} ({v.by})"
    return ask


# --- who is asking ---
def pending_peer(lsock: socket.socket) -> int | None:
    """The inode of the client's socket of the first connection waiting on the
    listening socket `lsock` (the one accept() returns next: the queue is FIFO),
    by sock_diag's UDIAG_SHOW_ICONS. Asked of the listener, which lives in the
    supervisor's network namespace; the accepted socket belongs to the client's
    (the agent's own), which an unprivileged supervisor may not enter."""
    ino = os.fstat(lsock.fileno()).st_ino
    req = struct.pack("=BBHIIIII", socket.AF_UNIX, 0, 0, 0xFFFFFFFF, ino, UDIAG_SHOW_ICONS,
                      owner.INET_DIAG_NOCOOKIE, owner.INET_DIAG_NOCOOKIE)
    msg = struct.pack("=IHHII", 16 + len(req), owner.SOCK_DIAG_BY_FAMILY, 1, 1, 0) + req
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, owner.NETLINK_SOCK_DIAG) as nl:
        nl.settimeout(1.0)
        nl.sendto(msg, (0, 0))
        data = nl.recv(65536)
    length, mtype = struct.unpack_from("=IH", data, 0)
    if mtype != owner.SOCK_DIAG_BY_FAMILY or length > len(data) or length < 32:
        return None
    pos = 32
    while pos + 4 <= length:
        alen, atype = struct.unpack_from("=HH", data, pos)
        if alen < 4:
            return None
        if atype == UNIX_DIAG_ICONS:
            return int(struct.unpack_from("=I", data, pos + 4)[0]) if alen >= 8 else None
        pos += (alen + 3) & ~3
    return None


def who(peer: int) -> tuple[int | None, str | None, str]:
    """(pid, executable, command line) of the run's process holding the client's
    socket (inode `peer`): where the supervisor's broker made the connect (unix
    mediation), the connecting pid is the broker's, so the holder is looked for
    among the run's processes. Unknown (None) when that is not one process."""
    want = f"socket:[{peer}]"
    found: list[int] = []
    budget = owner.MAX_FDS
    for p in owner.descendants(os.getpid()):
        try:
            fds = os.listdir(f"/proc/{p}/fd")
        except OSError:
            continue
        for fd in fds[:budget]:
            try:
                if os.readlink(f"/proc/{p}/fd/{fd}") == want:
                    found.append(p)
                    break
            except OSError:
                continue
        budget -= len(fds)
        if budget <= 0 or len(found) > 1:
            break
    if len(found) != 1:
        return None, None, ""
    pid = found[0]
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read(4096)
        cmdline = printable(" ".join(a.decode("utf-8", "replace") for a in raw.split(b"\0") if a))
    except OSError:
        cmdline = ""
    return pid, owner.exe_of(pid), cmdline[:MAX_CMDLINE]
