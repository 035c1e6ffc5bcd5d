"""Host rules: which destinations the gateway lets an agent reach.

The threat: an allowlist entry that matches more than its author meant (a
wildcard over a public suffix, a name spelled differently from the one the
client sends, an IP literal written as a name) opens the network to anyone who
can register a name under it. So every name is normalised the same way before
it is matched (case, one trailing dot, IDNA), anything that does not parse as a
host name is refused rather than guessed at, and deny wins over allow.

Entry grammar (one string each):

    example.com            exact name, port 443
    example.com:8443       exact name, that port
    *.example.com          any name strictly below example.com (not example.com itself)
    example.com:*          any port (only where the author writes it)
    192.0.2.7, 192.0.2.0/24, 192.0.2.0/24:443
    2001:db8::1, 2001:db8::/32, [2001:db8::1]:443, [2001:db8::/32]:*
    localhost:11434, 127.0.0.1:5432, [::1]:8080   a service on the host's loopback

Allow entries default to port 443; deny entries default to every port (a deny
written without a port means "never this host").

Host loopback (a service the person runs on localhost: a model server, a
database): an allow entry naming `localhost` or one loopback address must name
one port, never a default or `*` (the host's loopback holds the person's own
services, each of which may hand out more than the network would), and a
loopback network wider than one address is refused. `localhost:P` is both
127.0.0.1:P and [::1]:P (as /etc/hosts says), as address rules.

Public suffixes: a wildcard needs a suffix of at least two labels, and the
suffix must not be in PUBLIC_SUFFIXES, a shipped list of common multi-label
public suffixes (ccTLD second levels, hosting platforms where every customer
gets a subdomain). The full Public Suffix List has ~10k entries; this list is
a deliberate subset, so a wildcard over an unlisted multi-label public suffix
is accepted: the limit is documented in docs/gateway.md.
"""
from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Iterable, Union

from ..errors import ConfineError
from ..record import dataclass, field

IPAddress = Union[ipaddress.IPv4Address, ipaddress.IPv6Address]
IPNetwork = Union[ipaddress.IPv4Network, ipaddress.IPv6Network]

DEFAULT_ALLOW_PORT = 443
NO_RULE = "no rule"
MAX_NAME = 253
MAX_LABEL = 63
SETS_DIR = Path(__file__).resolve().parent / "sets"

# A subset of the Public Suffix List (ICANN second levels and private
# platform suffixes). A wildcard whose suffix is one of these, or has a single
# label, is refused.
PUBLIC_SUFFIXES = frozenset("""
co.uk org.uk ac.uk gov.uk me.uk ltd.uk plc.uk net.uk sch.uk nhs.uk police.uk
com.au net.au org.au edu.au gov.au asn.au id.au co.nz net.nz org.nz govt.nz ac.nz
co.jp ne.jp or.jp ac.jp go.jp gr.jp ed.jp co.kr or.kr ne.kr go.kr ac.kr
com.cn net.cn org.cn gov.cn edu.cn ac.cn com.hk org.hk net.hk edu.hk gov.hk
com.tw net.tw org.tw edu.tw gov.tw com.sg net.sg org.sg edu.sg gov.sg
com.my net.my org.my edu.my gov.my co.th ac.th go.th in.th or.th
co.in net.in org.in firm.in gen.in ind.in ac.in edu.in gov.in res.in
co.id or.id ac.id go.id web.id com.ph net.ph org.ph com.vn net.vn org.vn
com.pk net.pk org.pk com.bd com.np com.lk
co.za org.za net.za gov.za ac.za web.za com.ng org.ng com.eg com.sa com.ae
co.ke or.ke co.tz co.ug com.gh
co.il org.il net.il ac.il gov.il com.tr net.tr org.tr gen.tr com.ua net.ua org.ua
com.ru net.ru org.ru com.pl net.pl org.pl co.at or.at gv.ac com.es org.es nom.es
com.gr com.cy com.mt co.hu com.pt com.ro co.rs com.de com.fr
com.br net.br org.br gov.br edu.br art.br blog.br com.mx net.mx org.mx gob.mx edu.mx
com.ar net.ar org.ar gob.ar com.co net.co org.co com.pe org.pe com.ve com.uy com.py
com.ec com.bo co.cr com.gt com.do com.pr
github.io githubusercontent.com gitlab.io bitbucket.io codeberg.page
herokuapp.com herokudns.com appspot.com cloudfunctions.net run.app web.app
firebaseapp.com firebaseio.com googleusercontent.com storage.googleapis.com
blogspot.com withgoogle.com
amazonaws.com s3.amazonaws.com compute.amazonaws.com elasticbeanstalk.com
cloudfront.net awsapprunner.com on.aws
azurewebsites.net azurestaticapps.net azureedge.net azure-api.net cloudapp.net
blob.core.windows.net trafficmanager.net
netlify.app netlify.com vercel.app now.sh pages.dev workers.dev r2.dev
trycloudflare.com fly.dev onrender.com railway.app glitch.me repl.co replit.app
ngrok.io ngrok.app ngrok-free.app ngrok.dev loca.lt localtunnel.me serveo.net
deno.dev surge.sh readthedocs.io gitbook.io hf.space
digitaloceanspaces.com ondigitalocean.app linodeobjects.com
duckdns.org no-ip.org no-ip.com dyndns.org ddns.net freeddns.org
myshopify.com wixsite.com webflow.io squarespace.com
""".split())

_LABEL = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")
_NUMERIC_LAST = re.compile(r"^(?:[0-9]+|0x[0-9a-f]*)$")
_PORT = re.compile(r"^[0-9]{1,5}$")
LOCALHOST = "localhost"
LOOPBACKS = (ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("::1"))


class RuleError(ConfineError):
    """A host rule (or a host name given to match) does not parse; the message names it."""


@dataclass(frozen=True)
class Decision:
    allowed: bool
    rule: str  # the entry that decided, "allow ENTRY" / "deny ENTRY", or NO_RULE

    @property
    def matched(self) -> bool:
        return self.rule != NO_RULE


@dataclass(frozen=True)
class HostRule:
    """One parsed entry. `port` None means every port."""

    text: str
    port: int | None
    name: str | None = None          # exact host name
    suffix: str | None = None        # wildcard: matches names ending in "." + suffix
    net: IPNetwork | None = None     # address or network
    # the other addresses the same entry names (localhost: 127.0.0.1 and ::1), tried
    # in turn when the one the agent connected to has no listener on the host
    alias: tuple[IPAddress, ...] = ()

    def matches_name(self, host: str) -> bool:
        if self.name is not None:
            return host == self.name
        if self.suffix is not None:
            return host.endswith("." + self.suffix)
        return False

    def matches_port(self, port: int | None) -> bool:
        # port None asks "any port at all?" (DNS, which has no port): every rule answers yes
        return self.port is None or port is None or self.port == port


def normalise_host(host: str) -> str:
    """The canonical form of a host name: lower case, no trailing dot, IDNA A-labels.

    Raises RuleError for anything that is not a valid DNS host name, including
    numeric forms that resolvers would read as an IPv4 address ("127.1", "0x7f.1").
    """
    if not isinstance(host, str) or not host:
        raise RuleError(f"empty host name: {host!r}")
    if len(host) > 4 * MAX_NAME:
        raise RuleError(f"host name too long: {host[:40]!r}...")
    h = host[:-1] if host.endswith(".") else host
    if not h:
        raise RuleError(f"empty host name: {host!r}")
    if h.isascii():
        h = h.lower()
        labels = h.split(".")
    else:
        try:
            # IDNA 2003 (nameprep + punycode): the stdlib codec; it maps case and
            # full-width dots the way browsers' older code did.
            labels = h.encode("idna").decode("ascii").split(".")
        except UnicodeError as e:
            raise RuleError(f"invalid international host name {host!r}: {e}") from None
    for label in labels:
        if not _LABEL.match(label):
            raise RuleError(f"invalid host name {host!r}: bad label {label!r}")
        if label.startswith("xn--"):
            try:
                label.encode("ascii").decode("idna")
            except UnicodeError:
                raise RuleError(f"invalid host name {host!r}: bad IDNA label {label!r}") from None
    out = ".".join(labels)
    if len(out) > MAX_NAME:
        raise RuleError(f"host name longer than {MAX_NAME} characters: {host[:40]!r}...")
    if _NUMERIC_LAST.match(labels[-1]):
        raise RuleError(f"invalid host name {host!r}: numeric last label (an address?)")
    return out


def parse_address(text: str) -> IPAddress | None:
    """An IP literal (v4, v6, optionally in brackets; v4-mapped v6 as v4), or None."""
    t = text[1:-1] if text.startswith("[") and text.endswith("]") else text
    if "%" in t:   # zone ids select an interface: never a rule or a destination
        return None
    try:
        addr = ipaddress.ip_address(t)
    except ValueError:
        return None
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        return addr.ipv4_mapped
    return addr


def is_public_suffix(suffix: str) -> bool:
    return suffix.count(".") < 1 or suffix in PUBLIC_SUFFIXES


def _split_port(entry: str, default: int | None) -> tuple[str, int | None]:
    if entry.startswith("["):
        end = entry.find("]")
        if end < 0:
            raise RuleError(f"host rule {entry!r}: unclosed '['")
        host, rest = entry[1:end], entry[end + 1:]
        if not rest:
            return host, default
        if not rest.startswith(":"):
            raise RuleError(f"host rule {entry!r}: unexpected text after ']'")
        return host, _port(entry, rest[1:])
    if entry.count(":") > 1:   # a bare IPv6 address or network: no port
        return entry, default
    if ":" in entry:
        host, p = entry.rsplit(":", 1)
        return host, _port(entry, p)
    return entry, default


def _port(entry: str, p: str) -> int | None:
    if p == "*":
        return None
    if not _PORT.match(p) or not 1 <= int(p) <= 65535:
        raise RuleError(f"host rule {entry!r}: port must be 1-65535 or '*', not {p!r}")
    return int(p)


def parse_rule(entry: str, *, default_port: int | None = DEFAULT_ALLOW_PORT) -> HostRule:
    """One entry -> HostRule. Raises RuleError naming the entry."""
    if not isinstance(entry, str):
        raise RuleError(f"host rule must be a string, not {type(entry).__name__}: {entry!r}")
    text = entry.strip()
    if not text:
        raise RuleError("empty host rule")
    if any(c.isspace() for c in text):
        raise RuleError(f"host rule {entry!r}: contains white space")
    host, port = _split_port(text, default_port)
    if "/" in host:
        try:
            net = ipaddress.ip_network(host, strict=True)
        except ValueError as e:
            raise RuleError(f"host rule {entry!r}: not a network ({e})") from None
        if default_port is not None and _loopback_net(net) and net.num_addresses > 1:
            raise RuleError(f"host rule {entry!r}: name one loopback address and its port "
                            "(localhost:PORT), not a loopback network")
        return HostRule(text=text, port=port, net=net)
    addr = parse_address(host)
    if addr is not None:
        if default_port is not None and addr.is_loopback:
            _need_port(entry, text)
        return HostRule(text=text, port=port, net=ipaddress.ip_network(addr))
    if text.startswith("["):
        raise RuleError(f"host rule {entry!r}: brackets are for IPv6 addresses only")
    if host == "*" or host == "*.":
        raise RuleError(f"host rule {entry!r}: a bare '*' would allow every host")
    if host.startswith("*."):
        try:
            suffix = normalise_host(host[2:])
        except RuleError as e:
            raise RuleError(f"host rule {entry!r}: {e}") from None
        if is_public_suffix(suffix):
            raise RuleError(f"host rule {entry!r}: wildcard over the public suffix {suffix!r}; "
                            "name the hosts or a suffix someone owns")
        return HostRule(text=text, port=port, suffix=suffix)
    if "*" in host:
        raise RuleError(f"host rule {entry!r}: '*' is allowed only as a whole first label ('*.example.com')")
    try:
        name = normalise_host(host)
    except RuleError as e:
        raise RuleError(f"host rule {entry!r}: {e}") from None
    if default_port is not None and name == LOCALHOST:
        _need_port(entry, text)
    return HostRule(text=text, port=port, name=name)


def _loopback_net(net: IPNetwork) -> bool:
    return net.network_address.is_loopback and net.broadcast_address.is_loopback


def _need_port(entry: str, text: str) -> None:
    """A host loopback allow entry names its port: no default, never every port."""
    if _split_port(text, None)[1] is None:
        raise RuleError(f"host rule {entry!r}: a service on the host's loopback needs its "
                        "port (localhost:PORT); every port of it is never allowed")


def _loopback_rules(r: HostRule) -> list[HostRule]:
    """`localhost:P` as the address rules it stands for (127.0.0.1:P, [::1]:P)."""
    if r.name != LOCALHOST:
        return []
    return [HostRule(text=r.text, port=r.port, net=ipaddress.ip_network(a),
                     alias=tuple(b for b in LOOPBACKS if b != a)) for a in LOOPBACKS]


def is_host_service(r: HostRule) -> bool:
    """An allow entry naming one port of one address of the host's loopback."""
    return (r.net is not None and r.net.num_addresses == 1 and r.port is not None
            and r.net.network_address.is_loopback)


def entry_for(host: str, port: int | None) -> str | None:
    """The allow entry that would allow exactly (host, port), for a refusal message;
    None if `host` is neither a valid name nor an address."""
    addr = parse_address(host)
    if addr is None:
        try:
            h = normalise_host(host)
        except RuleError:
            return None
    else:
        h = f"[{addr}]" if addr.version == 6 and port != DEFAULT_ALLOW_PORT else str(addr)
    if port == DEFAULT_ALLOW_PORT:
        return h
    return f"{h}:{'*' if port is None else port}"


def load_set(name: str, directory: Path = SETS_DIR) -> tuple[str, ...]:
    """The host entries of a named set (sets/NAME.yaml: `hosts: [...]`)."""
    if not re.match(r"^[a-z0-9][a-z0-9_-]*$", name):
        raise RuleError(f"host set name {name!r}: letters, digits, '-' and '_' only")
    import yaml  # type: ignore[import-untyped]  # only for a set: not on every start
    path = directory / f"{name}.yaml"
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        known = ", ".join(sorted(available_sets(directory))) or "none"
        raise RuleError(f"unknown host set {name!r} (known: {known})") from None
    except (OSError, yaml.YAMLError) as e:
        raise RuleError(f"host set {name!r} ({path}): {e}") from None
    hosts = data.get("hosts") if isinstance(data, dict) else None
    if not isinstance(hosts, list) or not all(isinstance(h, str) for h in hosts):
        raise RuleError(f"host set {name!r} ({path}): 'hosts' must be a list of strings")
    return tuple(hosts)


def available_sets(directory: Path = SETS_DIR) -> list[str]:
    try:
        return sorted(p.stem for p in directory.glob("*.yaml"))
    except OSError:
        return []


@dataclass(frozen=True)
class Rules:
    """The frozen allow and deny lists. Build with Rules.parse()."""

    allow: tuple[HostRule, ...] = ()
    deny: tuple[HostRule, ...] = ()
    # networks an allowed *name* may resolve to although they are private, loopback,
    # CGNAT or this host's (the address filter's opt-in ranges), without making them
    # destinations by address (OpenShell's allowed_ips)
    resolve_nets: tuple[IPNetwork, ...] = ()
    labels: tuple[tuple[HostRule, str], ...] = field(default=(), compare=False, repr=False)

    @classmethod
    def parse(cls, allow: Iterable[str] = (), deny: Iterable[str] = (),
              sets: Iterable[str] = (), sets_dir: Path = SETS_DIR,
              allowed_ips: Iterable[str] = ()) -> Rules:
        a = [parse_rule(e) for e in allow]
        labels: list[tuple[HostRule, str]] = []
        for s in sets:
            for e in load_set(s, sets_dir):
                try:
                    r = parse_rule(e)
                except RuleError as err:
                    raise RuleError(f"host set {s!r}: {err}") from None
                a.append(r)
                labels.append((r, f"allow {e} (set {s})"))
        d = [parse_rule(e, default_port=None) for e in deny]
        a += [x for r in a for x in _loopback_rules(r)]
        d += [x for r in d for x in _loopback_rules(r)]
        nets: list[IPNetwork] = []
        for e in allowed_ips:
            try:
                net = ipaddress.ip_network(e.strip(), strict=True)
            except (ValueError, AttributeError) as err:
                raise RuleError(f"allowed address {e!r}: not an address or network ({err})") from None
            from .addresses import opening_error  # only for profiles that have the key
            why = opening_error(net)
            if why is not None:
                raise RuleError(f"allowed address {e!r}: {why}")
            nets.append(net)
        return cls(allow=tuple(a), deny=tuple(d), resolve_nets=tuple(nets), labels=tuple(labels))

    def resolve_net(self, ip: IPAddress) -> IPNetwork | None:
        """The allowed_ips network containing `ip`, if any."""
        for n in self.resolve_nets:
            if n.version == ip.version and ip in n:
                return n
        return None

    def _label(self, kind: str, r: HostRule) -> str:
        for rule, label in self.labels:
            if rule is r:
                return label
        return f"{kind} {r.text}"

    def decide(self, host: str, port: int | None) -> Decision:
        """May a connection to `host` (a name or an IP literal) on `port` go ahead?

        port None asks whether any port is allowed (the DNS server's question).
        A host that does not parse is refused, never matched loosely.
        """
        addr = parse_address(host)
        if addr is not None:
            return self.allows_address(addr, port)
        try:
            name = normalise_host(host)
        except RuleError:
            return Decision(False, NO_RULE)
        for r in self.deny:
            # for the any-port question only a deny of every port refuses the name
            if r.matches_name(name) and (r.port is None or (port is not None and r.port == port)):
                return Decision(False, self._label("deny", r))
        for r in self.allow:
            if r.matches_name(name) and r.matches_port(port):
                return Decision(True, self._label("allow", r))
        return Decision(False, NO_RULE)

    def allows_address(self, ip: IPAddress | str, port: int | None) -> Decision:
        """Is `ip` on `port` explicitly allowed by an address or network rule?"""
        rule = self.address_rule(ip, port)
        if rule is None:
            return Decision(False, NO_RULE)
        kind, r = rule
        return Decision(kind == "allow", self._label(kind, r))

    def host_service(self, ip: IPAddress | str, port: int) -> HostRule | None:
        """The allow entry naming exactly this port of the host's loopback (a
        connect the agent makes to its own loopback goes to the host's), or None."""
        rule = self.address_rule(ip, port)
        if rule is None or rule[0] != "allow" or not is_host_service(rule[1]):
            return None
        return rule[1]

    def address_rule(self, ip: IPAddress | str, port: int | None) -> tuple[str, HostRule] | None:
        """The deciding address rule ("deny" or "allow", rule), or None if none matches."""
        addr = parse_address(ip) if isinstance(ip, str) else ip
        if addr is None:
            return None
        if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
            addr = addr.ipv4_mapped
        for r in self.deny:
            if r.net is not None and addr in r.net and (r.port is None or (port is not None and r.port == port)):
                return "deny", r
        for r in self.allow:
            if r.net is not None and addr in r.net and r.matches_port(port):
                return "allow", r
        return None
