"""Addresses the gateway never dials for a name, whatever the name resolved to.

The threat: an allowed name (or one an attacker controls under an allowed
wildcard) resolves to an address inside the host's trust boundary (DNS
rebinding): the cloud metadata service, the host's own services, the LAN.
So every resolved address is judged here before it is pinned or dialled.

Two kinds of refusal:
- HARD: never dialled, not even with an explicit address rule: metadata
  endpoints, unspecified, link-local, multicast, broadcast, reserved and
  documentation ranges, and IPv6 outside global unicast that is not listed.
- OPT-IN: loopback, private (RFC 1918), unique-local, CGNAT and the host's own
  addresses: dialled only when an explicit address rule lies wholly inside the
  refused range (so `0.0.0.0/0` does not open the LAN, `10.1.2.0/24` opens just
  that net, and a host's own address needs a rule for exactly that address).

IPv6 forms that carry an IPv4 address (v4-mapped, v4-compatible, 6to4, NAT64
64:ff9b::/96, Teredo) are judged by the IPv4 address they carry.
"""
from __future__ import annotations

import fcntl
import ipaddress
import socket
import struct
import threading
import time
from typing import Callable, Iterable, Union

from ..kernel.sysfs import read_text
from ..record import dataclass

IPAddress = Union[ipaddress.IPv4Address, ipaddress.IPv6Address]
IPNetwork = Union[ipaddress.IPv4Network, ipaddress.IPv6Network]

HARD = "hard"
OPT_IN = "opt-in"
EMBEDS = "embeds"   # an IPv6 range whose addresses carry an IPv4 address


@dataclass(frozen=True)
class Range:
    net: IPNetwork
    kind: str
    why: str


def _r(net: str, kind: str, why: str) -> Range:
    return Range(ipaddress.ip_network(net), kind, why)


# Most specific first: the first range that contains an address judges it.
RANGES: tuple[Range, ...] = (
    # cloud metadata endpoints (some of them inside ranges that are otherwise opt-in)
    _r("169.254.169.254/32", HARD, "cloud metadata (AWS, GCP, Azure, OpenStack)"),
    _r("169.254.170.2/32", HARD, "cloud metadata (AWS ECS task)"),
    _r("100.100.100.200/32", HARD, "cloud metadata (Alibaba)"),
    _r("168.63.129.16/32", HARD, "cloud metadata (Azure wireserver)"),
    _r("192.0.0.192/32", HARD, "cloud metadata (Oracle)"),
    _r("fd00:ec2::254/128", HARD, "cloud metadata (AWS IPv6)"),
    _r("fd00:ec2::23/128", HARD, "cloud metadata (AWS IPv6 DNS)"),
    # IPv4
    _r("0.0.0.0/8", HARD, "unspecified ('this network')"),
    _r("127.0.0.0/8", OPT_IN, "loopback"),
    _r("10.0.0.0/8", OPT_IN, "private"),
    _r("172.16.0.0/12", OPT_IN, "private"),
    _r("192.168.0.0/16", OPT_IN, "private"),
    _r("100.64.0.0/10", OPT_IN, "carrier-grade NAT"),
    _r("169.254.0.0/16", HARD, "link-local"),
    _r("192.0.0.0/24", HARD, "reserved (IETF protocol assignments)"),
    _r("192.0.2.0/24", HARD, "reserved (documentation)"),
    _r("198.51.100.0/24", HARD, "reserved (documentation)"),
    _r("203.0.113.0/24", HARD, "reserved (documentation)"),
    _r("192.88.99.0/24", HARD, "reserved (6to4 relay anycast)"),
    _r("198.18.0.0/15", HARD, "reserved (benchmarking)"),
    _r("224.0.0.0/4", HARD, "multicast"),
    _r("255.255.255.255/32", HARD, "broadcast"),
    _r("240.0.0.0/4", HARD, "reserved"),
    # IPv6
    _r("::/128", HARD, "unspecified"),
    _r("::1/128", OPT_IN, "loopback"),
    _r("::/96", EMBEDS, "IPv4-compatible"),
    _r("64:ff9b::/96", EMBEDS, "NAT64"),
    _r("64:ff9b:1::/48", HARD, "local-use NAT64"),
    _r("100::/64", HARD, "discard"),
    _r("2001::/32", EMBEDS, "Teredo"),
    _r("2001::/23", HARD, "reserved (IETF protocol assignments)"),
    _r("2001:db8::/32", HARD, "reserved (documentation)"),
    _r("3fff::/20", HARD, "reserved (documentation)"),
    _r("2002::/16", EMBEDS, "6to4"),
    _r("2000::/3", "ok", "global unicast"),
    _r("fc00::/7", OPT_IN, "unique-local"),
    _r("fe80::/10", HARD, "link-local"),
    _r("ff00::/8", HARD, "multicast"),
    _r("::/0", HARD, "reserved (outside IPv6 global unicast)"),
)


def _range_of(addr: IPAddress) -> Range | None:
    for r in RANGES:
        if r.net.version == addr.version and addr in r.net:
            return r
    return None


def embedded_v4(addr: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 address carries (empty if none)."""
    if addr.ipv4_mapped is not None:
        return [addr.ipv4_mapped]
    if addr.teredo is not None:
        server, client = addr.teredo
        return [server, client]
    if addr.sixtofour is not None:
        return [addr.sixtofour]
    n = int(addr)
    if addr in ipaddress.IPv6Network("64:ff9b::/96") or addr in ipaddress.IPv6Network("::/96"):
        return [ipaddress.IPv4Address(n & 0xFFFFFFFF)]
    return []


def normalise(addr: IPAddress | str) -> IPAddress:
    a = ipaddress.ip_address(addr) if isinstance(addr, str) else addr
    if isinstance(a, ipaddress.IPv6Address) and a.ipv4_mapped is not None:
        return a.ipv4_mapped
    return a


def opening_error(net: IPNetwork) -> str | None:
    """Why an allowed_ips network would open nothing, or None if it opens what it names.

    Such a rule only lifts an OPT-IN refusal, and only where it lies wholly inside the
    refused range (see refusal()); a HARD range is never lifted and public addresses
    need no rule. A rule that does none of that would be accepted and do nothing: a
    profile silently weaker than its author thinks, so it is refused at load."""
    first = _range_of(net.network_address)

    def inside(r: Range) -> bool:
        return r.net.version == net.version and net.subnet_of(r.net)  # type: ignore[arg-type]

    if first is not None and first.kind == OPT_IN and inside(first):
        return None
    if net.num_addresses == 1 and (first is None or first.kind == "ok"):
        return None                   # a public address of this host needs exactly this
    if first is not None and first.kind == HARD and inside(first):
        return f"{net} is {first.why}: never dialled, whatever the rules say"
    if first is not None:
        public = first.kind == "ok" and inside(first)
    else:                             # IPv4 lists no public range: outside every listed one
        public = not any(r.net.version == net.version and r.net.overlaps(net)
                         for r in RANGES)
    if public:
        return (f"{net} is public: an allowed name may resolve there without an "
                "allowed_ips entry")
    return (f"{net} spans several kinds of address; an allowed_ips entry must lie wholly "
            "inside one loopback, private (RFC 1918), unique-local or carrier-grade NAT "
            "range, or be one address of this host")


def refusal(addr: IPAddress | str, *, explicit: IPNetwork | None = None,
            own: Iterable[IPAddress] = ()) -> str | None:
    """Why `addr` must not be dialled, or None if it may be.

    `explicit` is the network of the address rule that allows it, if any: it
    lifts an OPT-IN refusal only when it lies wholly inside the refused range.
    `own` are the host's own addresses.
    """
    a = normalise(addr)
    own_set = set(own)
    if a in own_set:
        exact = explicit is not None and explicit.num_addresses == 1 and a in explicit
        rng = _range_of(a)
        if rng is not None and rng.kind == HARD:
            return f"{a}: {rng.why}"
        if not exact:
            return f"{a}: an address of this host"
        return None
    rng = _range_of(a)
    if rng is None or rng.kind == "ok":
        return None
    if rng.kind == HARD:
        return f"{a}: {rng.why}"
    if rng.kind == EMBEDS:
        assert isinstance(a, ipaddress.IPv6Address)
        for v4 in embedded_v4(a):
            why = refusal(v4, explicit=None, own=own_set)
            if why is not None:
                return f"{a}: {rng.why} address carrying {why}"
        return None
    if explicit is not None and explicit.version == a.version and explicit.subnet_of(rng.net):  # type: ignore[arg-type]
        return None
    return f"{a}: {rng.why} (allow it with an explicit address rule)"


def host_addresses() -> frozenset[IPAddress]:
    """This host's own interface addresses (of the current network namespace)."""
    out: set[IPAddress] = set()
    text = read_text("/proc/net/if_inet6")
    for line in (text or "").splitlines():
        hexaddr = line.split()[0] if line.split() else ""
        if len(hexaddr) == 32:
            try:
                out.add(ipaddress.IPv6Address(int(hexaddr, 16)))
            except ValueError:
                pass
    # fib_trie lists every local IPv4 address (secondary ones too) as "/32 host LOCAL"
    text = read_text("/proc/net/fib_trie")
    last: str | None = None
    for line in (text or "").splitlines():
        s = line.strip()
        if s.startswith("|--"):
            last = s[3:].strip()
        elif s.startswith("/32 host LOCAL") and last:
            try:
                out.add(ipaddress.IPv4Address(last))
            except ValueError:
                pass
    if not any(a.version == 4 for a in out):
        out |= _ioctl_v4()
    return frozenset(out)


def _ioctl_v4() -> set[IPAddress]:
    """Each interface's primary IPv4 address (SIOCGIFADDR): the fallback where
    /proc/net/fib_trie cannot be read. Secondary addresses are missed."""
    out: set[IPAddress] = set()
    try:
        names = [n for _, n in socket.if_nameindex()]
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    except OSError:
        return out
    with s:
        for n in names:
            try:
                req = struct.pack("16s16s", n.encode()[:15], b"")
                res = fcntl.ioctl(s.fileno(), 0x8915, req)   # SIOCGIFADDR
            except OSError:
                continue
            out.add(ipaddress.IPv4Address(res[20:24]))
    return out


class HostAddresses:
    """host_addresses(), re-read at most every `ttl` seconds (addresses change: DHCP)."""

    def __init__(self, ttl: float = 10.0,
                 reader: Callable[[], frozenset[IPAddress]] = host_addresses) -> None:
        self._ttl = ttl
        self._reader = reader
        self._lock = threading.Lock()
        self._at = -1e18
        self._value: frozenset[IPAddress] = frozenset()

    def get(self) -> frozenset[IPAddress]:
        with self._lock:
            now = time.monotonic()
            if now - self._at >= self._ttl:
                self._value = self._reader()
                self._at = now
            return self._value
