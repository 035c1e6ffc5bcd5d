"""The agent's IPv4/IPv6 destinations while the egress gateway runs (issue 14).

The threat: a program that ignores the proxy variables connects to an
address directly (a plain `socket.create_connection`, a Go binary), or sends
UDP anywhere (QUIC, DNS to a resolver of its choosing, a covert channel).
Landlock filters TCP ports, not addresses, so a connect to any host on the
gateway's own port would pass it (nono #1631). So the supervisor, which sees
every connect, sendto with an address, sendmsg and sendmmsg (seccomp user
notification), rewrites each destination before the broker performs the call:

* TCP to the agent's own loopback: unchanged (Landlock: only the profile's
  `connect_tcp` ports and the gateway's), except a port the profile names as
  a service on the host's loopback (`localhost:P`, `127.0.0.1:P`, `[::1]:P`):
  the agent's own loopback is not the host's (its own network namespace), so
  that connect is redirected like any other destination below, and the
  gateway dials exactly that port of the host's loopback;
* TCP or UDP to port 53 of any address: confine's DNS server;
* any other TCP destination: the supervisor binds the agent's socket to a
  loopback port, announces it to the gateway (`expect`) with the original
  destination, and the broker connects it to the gateway's redirect port,
  where the gateway decides by SNI/Host and its pins;
* any other UDP destination: refused (EACCES).

After the rewrite, `final_check` refuses any address that is not loopback:
a bug in the rewriting refuses, it does not open the network.
"""
from __future__ import annotations

import errno
import ipaddress
import os
import socket
import struct
from collections.abc import Callable
from typing import Any

from ..record import dataclass

AF_UNSPEC = 0
MSG_FASTOPEN = 0x20000000
DNS_PORT = 53
LOOP4 = ipaddress.IPv4Address("127.0.0.1")
MAPPED_LOOP = ipaddress.IPv6Address("::ffff:127.0.0.1")
_IN = struct.Struct("!HH4s8x")          # sockaddr_in, but sin_family is host order: see _fam
_IN6 = struct.Struct("!HHI16sI")        # family, port, flowinfo, address, scope id


@dataclass(frozen=True)
class InetRoutes:
    """Where the agent's INET traffic goes (all on the loopback the agent shares
    with the supervisor), and the two calls into the gateway."""
    redirect_port: int
    dns_port: int
    proxy_port: int
    expect: Callable[..., bool]                         # Gateway.expect
    host_service: Callable[[str, int], bool]             # a host loopback entry names it
    refused: Callable[[str, str, dict[str, Any]], None]  # key, line, event


class Refuse(Exception):
    def __init__(self, err: int) -> None:
        super().__init__(err)
        self.errno = err


IPAddr = ipaddress.IPv4Address | ipaddress.IPv6Address


def _fam(raw: bytes) -> int:
    return int(struct.unpack_from("<H", raw)[0]) if len(raw) >= 2 else -1


def parse(raw: bytes, sock_family: int) -> tuple[IPAddr, int] | None:
    """(address, port) as the kernel will read `raw` on a socket of this family;
    None for an address it would refuse (the caller refuses it too)."""
    fam = _fam(raw)
    if fam == AF_UNSPEC and sock_family == socket.AF_INET:
        fam = socket.AF_INET        # udp_sendmsg reads AF_UNSPEC as AF_INET
    if fam == socket.AF_INET and len(raw) >= 16:
        port, packed = struct.unpack_from("!H4s", raw, 2)
        return ipaddress.IPv4Address(packed), int(port)
    if fam == socket.AF_INET6 and len(raw) >= 24 and sock_family == socket.AF_INET6:
        port, _flow, packed = struct.unpack_from("!HI16s", raw, 2)
        a = ipaddress.IPv6Address(packed)
        return (a.ipv4_mapped or a), int(port)
    return None


def own_loopback(ip: IPAddr) -> bool:
    """The kernel delivers to this host's loopback: 127/8, ::1, and the unspecified
    address (a connect to 0.0.0.0 reaches a local listener)."""
    return ip.is_loopback or ip.is_unspecified


def sockaddr(sock_family: int, port: int) -> bytes:
    """127.0.0.1:port in the socket's family (v4-mapped for IPv6 sockets)."""
    if sock_family == socket.AF_INET:
        return struct.pack("<H", socket.AF_INET) + struct.pack("!H4s8x", port, LOOP4.packed)
    return (struct.pack("<H", socket.AF_INET6)
            + struct.pack("!HI16sI", port, 0, MAPPED_LOOP.packed, 0))


def _v6only(s: socket.socket) -> bool:
    if s.family != socket.AF_INET6:
        return False
    try:
        return bool(s.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY))
    except OSError:
        return True


def route(routes: InetRoutes, connect: bool, raw: bytes, sockfd: int, pid: int) -> bytes:
    """The address the broker uses instead of `raw` (b"": none, the socket's
    connected peer); raises Refuse. `sockfd`: the supervisor's copy."""
    s = socket.socket(fileno=os.dup(sockfd))
    try:
        return _route(routes, connect, raw, s, pid)
    finally:
        s.close()


def _route(routes: InetRoutes, connect: bool, raw: bytes, s: socket.socket, pid: int) -> bytes:
    stream = s.type == socket.SOCK_STREAM
    if not raw:
        return raw                     # the peer was decided when it was connected
    if connect and _fam(raw) == AF_UNSPEC:
        return raw                     # dissolves the association: reaches nobody
    if not connect and _fam(raw) == AF_UNSPEC and s.family == socket.AF_INET6:
        return b""                     # udpv6_sendmsg: no address, the connected peer
    dst = parse(raw, s.family)
    if dst is None:
        raise Refuse(errno.EAFNOSUPPORT if _fam(raw) not in (socket.AF_INET, socket.AF_INET6)
                     else errno.EINVAL)
    ip, port = dst
    shown = f"[{ip}]:{port}" if ip.version == 6 else f"{ip}:{port}"
    if port == DNS_PORT:
        # Every resolver the agent knows is confine's; the reply comes from
        # confine's server, which connected sockets accept (the kernel matches
        # the peer it was connected to, which is the rewritten one).
        if _v6only(s):
            raise Refuse(errno.ENETUNREACH)
        return sockaddr(s.family, routes.dns_port)
    if not stream:
        routes.refused(f"udp {shown}", f"egress: UDP to {shown} refused (only DNS, port 53, "
                       "leaves the sandbox, to confine's resolver; QUIC falls back to TCP)",
                       {"mode": "udp", "host": str(ip), "port": port, "pid": pid,
                        "rule": "UDP only to DNS", "reason": "UDP other than DNS"})
        raise Refuse(errno.EACCES)
    if own_loopback(ip) and (port in (routes.proxy_port, routes.redirect_port)
                             or not routes.host_service(str(ip), port)):
        return raw                     # Landlock decides by port (the gateway's: its own)
    if _v6only(s):
        raise Refuse(errno.ENETUNREACH)
    local = s.getsockname()
    if int(local[1]) == 0:
        s.bind(("127.0.0.1", 0) if s.family == socket.AF_INET else (str(MAPPED_LOOP), 0))
        local = s.getsockname()
    else:
        bound = ipaddress.ip_address(str(local[0]).split("%", 1)[0])
        if isinstance(bound, ipaddress.IPv6Address) and bound.ipv4_mapped is not None:
            bound = bound.ipv4_mapped
        if not own_loopback(bound):
            raise Refuse(errno.EADDRNOTAVAIL)   # the gateway could not tell it from another
    if not routes.expect(("127.0.0.1", int(local[1])), str(ip), port, pid):
        raise Refuse(errno.ECONNREFUSED)
    return sockaddr(s.family, routes.redirect_port)


def final_check(raw: bytes, sock_family: int, connect: bool) -> bool:
    """True if `raw` (after route) reaches only this host's loopback (or nobody)."""
    if not raw or (connect and _fam(raw) == AF_UNSPEC):
        return True
    dst = parse(raw, sock_family)
    return dst is not None and own_loopback(dst[0])


# --- sendmmsg --------------------------------------------------------------------

MMSGHDR_SIZE = 64          # struct msghdr (56) + msg_len (4) + padding, x86_64/aarch64
MAX_MMSG = 64              # messages handled per call (fewer than asked is legal)
MAX_DGRAM = 65536
_SEND_FLAGS = socket.MSG_NOSIGNAL | getattr(socket, "MSG_MORE", 0x8000) \
    | getattr(socket, "MSG_EOR", 0x80) | getattr(socket, "MSG_CONFIRM", 0x800)


def send_all(sockfd: int, messages: list[bytes], flags: int) -> tuple[list[int], int]:
    """Send each message on the (connected) socket without blocking the
    supervisor: (bytes sent of each message sent, errno of the first failure or 0)."""
    s = socket.socket(fileno=os.dup(sockfd))
    sent: list[int] = []
    try:
        for m in messages:
            try:
                sent.append(s.send(m, (flags & _SEND_FLAGS) | socket.MSG_DONTWAIT
                                   | socket.MSG_NOSIGNAL))
            except OSError as e:
                return sent, (e.errno or errno.EIO)
            if sent[-1] < len(m):
                break
        return sent, 0
    finally:
        s.close()
