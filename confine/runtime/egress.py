"""The egress gateway of one run: built from the Policy, started before the fork,
stopped when the run ends.

The threat: the agent reaches a host the profile does not name (to send the
workdir away), or carries data out in DNS query names. Every TCP connection
of the agent to anything but its own loopback ends at the gateway, either
because the program honours the proxy variables set here, or because the
supervisor's connect mediation redirects it there (mediation/supervisor.py,
`InetRoutes`); every DNS query (any resolver address, port 53, UDP or TCP)
is rewritten to the DNS server started here. Both answer from one `Rules`,
one `Resolver` and one `Pins`, so what DNS answered is what the gateway
dials, and nothing else.

Fail closed: the gateway and the DNS server live in the supervisor and stop
only after the agent and its leftovers are gone (Session.run); a connection
the supervisor cannot announce to the gateway is refused (ECONNREFUSED).
The upstream resolvers are the host's, read here before the fork (a stub
such as systemd-resolved's 127.0.0.53 is the upstream, never an agent
destination: the agent's port-53 traffic is always rewritten to confine's
own server).
"""
from __future__ import annotations

import dataclasses
import ipaddress
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..approval.network import make_asker
from ..credentials.binding import Binding
from ..errors import ConfineError
from ..gateway import DNSServer, Gateway, Pins, Resolver, RuleError, Rules, refusal
from ..mediation import InetRoutes
from ..plan import Plan
from ..plan.env import proxy_env
from ..record import dataclass
from .events import Events

if TYPE_CHECKING:
    from ..credentials.binding import Binding
    from ..credentials.swap import Swap

RESOLV_CONF = "/etc/resolv.conf"
MAX_EXES = 1024
LOOPBACK = "127.0.0.1"


def rules(policy_network: Any) -> Rules:
    """The host rules of the policy (allow already holds --allow-host)."""
    n = policy_network
    try:
        return Rules.parse(n.allow, n.deny, n.include, allowed_ips=n.allowed_ips)
    except RuleError as e:      # validated at load; a set file may have changed since
        raise ConfineError(f"network: {e}") from None


def upstreams(path: str = RESOLV_CONF) -> list[tuple[str, int]]:
    """The host's resolvers, as glibc reads them (`nameserver` lines, at most 3;
    none: 127.0.0.1, glibc's default). Scoped IPv6 (fe80::1%eth0) is skipped."""
    out: list[tuple[str, int]] = []
    try:
        with open(path) as f:
            text = f.read(65536)
    except OSError:
        text = ""
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "nameserver" and "%" not in parts[1]:
            try:
                out.append((str(ipaddress.ip_address(parts[1])), 53))
            except ValueError:
                continue
    return out[:3] or [(LOOPBACK, 53)]


def _exe(pid: int | None) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/exe") if pid is not None else None
    except OSError:
        return None


def refusal_line(ev: Mapping[str, Any]) -> tuple[str, str] | None:
    """(key, the one line shown) for a refused connection or DNS query; None for
    an allowed one. The key is the host (and port): one line per destination."""
    if ev.get("event") == "dns" and ev.get("refused") and not ev.get("answers"):
        # allowed, but every address it resolved to is refused (rebinding, private)
        name = str(ev.get("name"))
        return f"egress {name}", (f"egress: {name} resolves only to refused addresses "
                                  f"({'; '.join(map(str, ev['refused']))[:300]})")
    if ev.get("decision") != "deny":
        return None
    host = str(ev.get("host") or ev.get("name") or ev.get("dst") or "?")
    port = ev.get("port")
    where = f"{host}:{port}" if port is not None else host
    what = "DNS query for" if ev.get("event") == "dns" else "connection to"
    why = str(ev.get("reason") or ev.get("rule") or "refused")
    hint = ev.get("allow_with")
    if hint is None and ev.get("event") == "dns" and str(ev.get("rule", "")).startswith("no rule"):
        hint = host
    line = f"egress: {what} {where} refused ({why})"
    if hint:
        line += (f": allow it with `network.allow: [{hint}]` in the profile or "
                 f"--allow-host {hint}")
    return f"egress {where}", line


@dataclass
class Egress:
    """The gateway and DNS server of one run: started here (`start`, on the
    supervisor's loopback) or on the sockets the child made in the agent's own
    network namespace (`start_on`, ports fixed by the plan)."""
    rules: Rules
    resolver: Resolver
    gateway: Gateway
    dns: DNSServer
    events: Events
    proxy_port: int = 0
    redirect_port: int = 0
    dns_port: int = 0
    # pid -> executable of the processes whose connects were redirected, for the log
    # (bounded: the agent chooses how many processes it runs)
    exes: dict[int, str] = dataclasses.field(default_factory=dict)
    # network.default: ask: a name no rule allows may be approved while the run goes
    # on (by the asker, at the gateway), so a pinned address is enough to go there
    ask: bool = False
    # the run's credentials (credentials/run.py): what the gateway swaps, toward where
    credentials: tuple[Binding, ...] = ()
    # the placeholder swap (credentials/swap.py) when the run has bindings: the
    # gateway terminates TLS with its CA, which the agent is told to trust
    swap: Swap | None = None

    @property
    def routes(self) -> InetRoutes:
        return InetRoutes(redirect_port=self.redirect_port, dns_port=self.dns_port,
                          proxy_port=self.proxy_port, expect=self.expect,
                          host_service=self.host_service, refused=self.refused)

    def host_service(self, ip: str, port: int) -> bool:
        """Does an allow entry name this port of the host's loopback?"""
        return self.rules.host_service(ip, port) is not None

    def start_here(self) -> None:
        try:
            self.dns.start()
            self.gateway.start()
        except OSError as e:
            self.stop()
            raise ConfineError(f"cannot start the egress gateway: {e.strerror or e}") from None
        self.proxy_port, self.redirect_port = self.gateway.port, self.gateway.redirect_port
        self.dns_port = self.dns.port

    def start_on(self, fds: list[int]) -> None:
        """fds: proxy, redirect (TCP, listening), DNS UDP and TCP, ours to keep."""
        import socket
        socks = [socket.socket(fileno=fd) for fd in fds]
        if len(socks) != 4:
            for s in socks:
                s.close()
            raise ConfineError("the child sent the wrong number of gateway sockets")
        self.gateway.start((socks[0], socks[1]))
        self.dns.start((socks[2], socks[3]))

    def expect(self, client: tuple[str, int], ip: str, port: int, pid: int | None = None) -> bool:
        """Announce a redirected connect to the gateway, or refuse it at once when
        no rule could allow it: the address is neither allowed by an address rule
        nor what confine's DNS answered for a name allowed on that port."""
        if self.rules.address_rule(ip, port) is None and not self._pinned(ip, port):
            shown = f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"
            never = refusal(ip, explicit=ipaddress.ip_network(ip))
            self.refused(f"egress {shown}",
                         f"egress: connection to {shown} refused ("
                         + (f"{never}: never reachable" if never else
                            "no allowed name resolved to it: connect by a host name the "
                            f"profile allows, or allow the address with `network.allow: "
                            f"[{shown}]`") + ")",
                         {"mode": "transparent", "host": ip, "port": port, "pid": pid,
                          "rule": "no rule", "reason": "address not resolved by confine for "
                          "an allowed name"})
            return False
        if pid is not None:
            if len(self.exes) >= MAX_EXES:
                self.exes.pop(next(iter(self.exes)))
            try:
                self.exes[pid] = os.readlink(f"/proc/{pid}/exe")
            except OSError:
                pass
        return bool(self.gateway.expect(client, ip, port, pid))

    def _pinned(self, ip: str, port: int) -> bool:
        try:
            addr = ipaddress.ip_address(ip)
        except ValueError:
            return False
        for name, addrs in self.resolver.pins.snapshot().items():
            if str(addr) in addrs and (self.ask or self.rules.decide(name, port).allowed):
                return True
        return False

    def log(self, ev: dict[str, Any]) -> None:
        """The gateway's and the DNS server's log sink: every event is one line in
        --log; a refusal is also one `confine:` line per destination."""
        pid = ev.get("pid")
        if isinstance(pid, int) and "exe" not in ev and pid in self.exes:
            ev = {**ev, "exe": self.exes[pid]}
        got = refusal_line(ev)
        if got is None:
            self.events.emit(ev)
        else:
            self.events.refused(got[0], got[1], ev, layer="gateway")

    def refused(self, key: str, line: str, ev: dict[str, Any]) -> None:
        """A refusal by the supervisor's own INET check (UDP not to DNS, ...)."""
        pid = ev.get("pid")
        self.events.refused(key, line, {"event": "connect", "decision": "deny",
                                        "exe": _exe(pid if isinstance(pid, int) else None),
                                        **ev}, layer="mediation")

    def in_tmp(self, tmp: str) -> None:
        """Once the TMPDIR is what the agent will see (its tmpfs mounted): the system
        bundle plus the run CA there, for a run that swaps (a new file the agent may
        read; replacing it changes only what the agent itself trusts)."""
        if self.swap is None:
            return
        from ..credentials.ca import write_bundle
        path = os.path.join(tmp, BUNDLE)
        try:
            write_bundle(self.swap.ca, path)
        except OSError as e:
            raise ConfineError(f"cannot write the run's CA bundle {path}: {e.strerror or e}") from None

    def stop(self) -> None:
        """Both, whatever the first does: the exit check runs after this."""
        try:
            self.gateway.stop()
        finally:
            self.dns.stop()


def start(policy: Any, events: Events, resolv_conf: str = RESOLV_CONF,
          approver: str | None = None, engine: Any = None,
          credentials: Sequence[Binding] = ()) -> Egress:
    """Build and start the gateway and the DNS server on the supervisor's loopback."""
    eg = build(policy, events, resolv_conf, approver=approver, engine=engine,
               credentials=credentials)
    eg.start_here()
    return eg


def build(policy: Any, events: Events, resolv_conf: str = RESOLV_CONF,
          ports: tuple[int, ...] = (), approver: str | None = None, engine: Any = None,
          credentials: Sequence[Binding] = ()) -> Egress:
    """The gateway and DNS server, not started; ports: (proxy, redirect, DNS) of
    the sockets start_on will get; engine: the run's approval engine, whose
    approver the gateway's questions go to (one question at a time across kinds);
    credentials: the run's Bindings (the values supervisor-side only; the gateway
    swaps them in)."""
    r = rules(policy.network)
    resolver = Resolver(upstreams(resolv_conf), r, Pins())
    holder: list[Egress] = []

    def log(ev: dict[str, Any]) -> None:
        if holder:
            holder[0].log(ev)
    # network.default: ask: one asker for both entries (None under deny). The
    # profile it may add an entry to is the run's most derived file (a built-in
    # one is never edited); a candidate is accepted only if the loader takes it.
    ask = make_asker(policy.network.default, approver,
                     policy.sources[0] if policy.sources else None, events.emit,
                     validate=lambda path: _validate_profile(path, policy), engine=engine)
    kw: dict[str, Any] = {} if ask is None else {"ask": ask}
    dns = DNSServer(resolver, host=LOOPBACK, log=log, **kw)
    swap = _swap(credentials, policy, log, events, approver, engine)
    gw = Gateway(r, resolver, host=LOOPBACK, log=log, credentials=swap, **kw)
    eg = Egress(rules=r, resolver=resolver, gateway=gw, dns=dns, events=events,
                ask=policy.network.default == "ask", credentials=tuple(credentials), swap=swap)
    if ports:
        eg.proxy_port, eg.redirect_port, eg.dns_port = ports
    holder.append(eg)
    return eg


def _swap(credentials: Sequence[Binding], policy: Any, log: Any, events: Events,
          approver: str | None, engine: Any) -> Swap | None:
    """The swap of a run with credentials (None without: TLS is never terminated)."""
    if not credentials:
        return None
    # cryptography only for a run that swaps
    from ..credentials.ca import RunCA
    from ..credentials.swap import Swap
    from ..credentials.use import Judge
    # each use decided (and recorded) by the run's Judge; its questions go to the
    # run's approval engine, in the one queue with every other question of the run
    judge = Judge(events.emit, approver, engine=engine)
    return Swap(credentials, RunCA(), upstream_ca=policy.network.upstream_ca, emit=log,
                decide=judge.decide_use)


def _validate_profile(path: str, policy: Any) -> None:
    from ..policy import load as _load
    _load.load(path, workdir=policy.workdir, home=policy.home, tmp=policy.tmp)


def bind_plan(plan: Plan, eg: Egress) -> Plan:
    """The plan with the running gateway's ports: Landlock lets the agent (and
    the broker) connect to exactly these on top of the profile's own ports, and
    the proxy variables name the proxy."""
    from landlockpy import AccessNet
    extra: list[tuple[int, AccessNet]] = []
    if plan.handled_net & AccessNet.CONNECT_TCP and not plan.gateway_ports:
        have = {p for p, a in plan.port_rules if a & AccessNet.CONNECT_TCP}
        extra = [(p, AccessNet.CONNECT_TCP)
                 for p in sorted({eg.proxy_port, eg.redirect_port, eg.dns_port} - have)]
    env = dict(plan.env)
    env.update(proxy_env(LOOPBACK, eg.proxy_port))
    if eg.swap is not None:
        env.update(trust_env(os.path.join(plan.policy.tmp, BUNDLE)))
    return dataclasses.replace(plan, port_rules=tuple(plan.port_rules) + tuple(extra), env=env)


BUNDLE = "confine-ca.pem"


def trust_env(bundle: str) -> dict[str, str]:
    """The variables that point the agent's TLS stacks at the run's bundle."""
    from ..credentials.ca import trust_env as env_of
    return dict(env_of(bundle))
