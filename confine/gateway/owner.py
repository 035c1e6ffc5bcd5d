"""Which process opened a connection to the proxy: for the log line and the ask question.

A proxy client is only an address and port on loopback. Its socket's inode is
found in /proc/net/tcp{,6} (the row whose local end is the client's address and
whose remote end is the gateway's), then the process holding that inode among
the run's processes (the supervisor's descendants: it is a subreaper, so every
process of the run is one). The agent chooses its process names and may race
the lookup (close, pass the socket on), so: bounded work, and "unknown" when the
answer is not one process, never a guess.
"""
from __future__ import annotations

import errno
import ipaddress
import os
import socket
import struct
import threading
from typing import Callable, Iterable

from ..record import dataclass

MAX_TABLE = 16 << 20  # bytes of /proc/net/tcp read (about 100k sockets)
MAX_PROCS = 4096      # processes looked at
MAX_FDS = 65536       # descriptors looked at, in all
MAX_OWNERS = 8


@dataclass(frozen=True)
class Owner:
    pid: int | None                 # None: unknown
    exe: str | None = None
    owners: tuple[int, ...] = ()    # when more than one process holds the socket


UNKNOWN = Owner(None)


def _hex_addr(a: str, port: int, v6: bool) -> str:
    """The /proc/net/tcp spelling of an address: the address in host byte order words."""
    ip = ipaddress.ip_address(a)
    if v6:
        if ip.version == 4:
            ip = ipaddress.IPv6Address("::ffff:" + str(ip))
        words = struct.unpack("!4I", ip.packed)
        return "".join(f"{struct.unpack('<I', struct.pack('!I', w))[0]:08X}" for w in words) + f":{port:04X}"
    if ip.version == 6:
        m = ip.ipv4_mapped
        if m is None:
            return ""
        ip = m
    return f"{struct.unpack('<I', ip.packed)[0]:08X}:{port:04X}"


def socket_inode(local: tuple[str, int], remote: tuple[str, int], net: str = "/proc/thread-self/net",
                 diag: socket.socket | None = None) -> int | None:
    """The inode of the TCP socket with this local and remote end (as the client sees them):
    asked of the kernel by its four-tuple (sock_diag, a hash lookup, in the network
    namespace `diag` was made in, else this thread's), else found in `net`/tcp{,6} (which
    the kernel builds by walking every socket of that namespace: slow on a busy host)."""
    try:
        ino = _diag_inode(local, remote, diag)
        if ino is not None or net == "/proc/thread-self/net":
            return ino
    except (OSError, ValueError, struct.error):
        pass
    return _table_inode(local, remote, net)


def _table_inode(local: tuple[str, int], remote: tuple[str, int], net: str) -> int | None:
    for name, v6 in (("tcp", False), ("tcp6", True)):
        lo, re_ = _hex_addr(local[0], local[1], v6), _hex_addr(remote[0], remote[1], v6)
        if not lo or not re_:
            continue
        want = f" {lo} {re_} ".encode()
        try:
            with open(f"{net}/{name}", "rb") as f:
                data, read = b"", 0
                while read < MAX_TABLE:
                    chunk = f.read(65536)
                    if not chunk:
                        break
                    read += len(chunk)
                    data = data[data.rfind(b"\n") + 1:] + chunk
                    at = data.find(want)
                    if at >= 0 and data.find(b"\n", at) >= 0:
                        parts = data[at:data.find(b"\n", at)].split()
                        ino = int(parts[8])
                        return ino or None
        except (OSError, ValueError, IndexError):
            continue
    return None


NETLINK_SOCK_DIAG, SOCK_DIAG_BY_FAMILY, NLMSG_ERROR = 4, 20, 2
INET_DIAG_NOCOOKIE = 0xFFFFFFFF


_DIAG_LOCK = threading.Lock()


def _diag_inode(local: tuple[str, int], remote: tuple[str, int], nl: socket.socket | None = None) -> int | None:
    """sock_diag's exact lookup (no NLM_F_DUMP): None when no such socket, OSError/ValueError
    when the kernel cannot be asked. `nl`: a NETLINK_SOCK_DIAG socket made in the namespace
    to ask (shared: one request at a time)."""
    a, b = ipaddress.ip_address(local[0]), ipaddress.ip_address(remote[0])
    if a.version != b.version:
        raise ValueError("mixed families")
    fam = socket.AF_INET6 if a.version == 6 else socket.AF_INET
    sockid = (struct.pack("!HH", local[1], remote[1]) + a.packed.ljust(16, b"\0") + b.packed.ljust(16, b"\0")
              + struct.pack("=III", 0, INET_DIAG_NOCOOKIE, INET_DIAG_NOCOOKIE))
    req = struct.pack("=BBBBI", fam, socket.IPPROTO_TCP, 0, 0, 0xFFFFFFFF) + sockid
    msg = struct.pack("=IHHII", 16 + len(req), SOCK_DIAG_BY_FAMILY, 1, 1, 0) + req   # NLM_F_REQUEST
    if nl is None:
        with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_SOCK_DIAG) as own:
            own.settimeout(1.0)
            own.sendto(msg, (0, 0))
            data = own.recv(65536)
    else:
        with _DIAG_LOCK:
            nl.settimeout(1.0)
            nl.sendto(msg, (0, 0))
            data = nl.recv(65536)
    length, mtype = struct.unpack_from("=IH", data, 0)
    if mtype == NLMSG_ERROR:
        err = -struct.unpack_from("=i", data, 16)[0]
        if err == errno.ENOENT:
            return None
        raise OSError(err, os.strerror(err))
    if mtype != SOCK_DIAG_BY_FAMILY or length < 16 + 72:
        raise ValueError("unexpected sock_diag reply")
    body = data[16:length]
    got = body[4:4 + 36]
    if got[:36] != sockid[:36]:
        raise ValueError("sock_diag answered another socket")
    ino = struct.unpack_from("=I", body, 4 + 48 + 16)[0]
    return int(ino) or None


def descendants(root: int) -> list[int]:
    """Every process below `root` (bounded by MAX_PROCS): from the children lists of its
    threads where the kernel has them (only the tree is read), else from every /proc/N/stat."""
    out: list[int] = []
    todo = [root]
    try:
        while todo and len(out) < MAX_PROCS:
            pid = todo.pop()
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                    kids = [int(x) for x in f.read().split()]
                out.extend(kids)
                todo.extend(kids)
        return out[:MAX_PROCS]
    except FileNotFoundError:
        if out or not os.path.exists(f"/proc/{root}"):
            pass   # a process ended while we walked: its children are re-parented to a subreaper
        if not os.path.exists(f"/proc/{root}/task/{root}/children"):
            return _descendants_by_stat(root)
        return out[:MAX_PROCS]
    except (OSError, ValueError):
        return out[:MAX_PROCS]


def _descendants_by_stat(root: int) -> list[int]:
    kids: dict[int, list[int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    for n in names:
        if not n.isdigit():
            continue
        try:
            with open(f"/proc/{n}/stat", "rb") as f:
                s = f.read(512)
            ppid = int(s[s.rindex(b")") + 2:].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        kids.setdefault(ppid, []).append(int(n))
    out: list[int] = []
    todo = [root]
    while todo and len(out) < MAX_PROCS:
        for c in kids.get(todo.pop(), ()):
            out.append(c)
            todo.append(c)
    return out[:MAX_PROCS]


def exe_of(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        pass
    try:
        with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as f:
            return f"[{f.read(64).strip()}]"
    except OSError:
        return None


def _other_netns(pids: list[int]) -> int | None:
    """A run process in a network namespace other than this thread's, or None."""
    try:
        mine = os.stat("/proc/thread-self/ns/net").st_ino
    except OSError:
        return None
    for pid in pids[:16]:
        try:
            if os.stat(f"/proc/{pid}/ns/net").st_ino != mine:
                return pid
        except OSError:
            continue
    return None


class Finder:
    """`finder(client, gateway) -> Owner`: the run's process holding the client's socket.

    `pids()` lists the run's processes (default: this process's descendants). The
    client's socket lives in the namespace of the gateway's listener, which may be the
    agent's own (the wiring makes the listeners there): `diag`, a NETLINK_SOCK_DIAG
    socket made in that namespace, asks there; without it, a run process's /proc/PID/net
    (its namespace's table) is read when this thread's namespace is another."""

    def __init__(self, pids: Callable[[], Iterable[int]] | None = None, net: str | None = None,
                 diag: socket.socket | None = None) -> None:
        self._pids = pids or (lambda: descendants(os.getpid()))
        self._net = net
        self._diag = diag

    def __call__(self, client: tuple[str, int], gateway: tuple[str, int]) -> Owner:
        pids = list(self._pids())[:MAX_PROCS]
        ino = socket_inode(client, gateway, self._net or "/proc/thread-self/net", self._diag)
        if ino is None and self._net is None and self._diag is None:
            other = _other_netns(pids)
            if other is not None:
                ino = _table_inode(client, gateway, f"/proc/{other}/net")
        if ino is None:
            return UNKNOWN
        want = f"socket:[{ino}]"
        found: list[int] = []
        budget = MAX_FDS
        for pid in pids:
            try:
                fds = os.listdir(f"/proc/{pid}/fd")
            except OSError:
                continue
            for fd in fds[:budget]:
                try:
                    if os.readlink(f"/proc/{pid}/fd/{fd}") == want:
                        found.append(pid)
                        break
                except OSError:
                    continue
            budget -= len(fds)
            if budget <= 0 or len(found) > MAX_OWNERS:
                break
        if len(found) == 1:
            return Owner(found[0], exe_of(found[0]))
        return Owner(None, None, tuple(found[:MAX_OWNERS]))


__all__ = ["Finder", "Owner", "UNKNOWN", "descendants", "exe_of", "socket_inode"]
