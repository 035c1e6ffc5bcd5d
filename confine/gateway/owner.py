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

import ipaddress
import os
import struct
from dataclasses import dataclass
from typing import Callable, Iterable

MAX_ROWS = 65536      # rows of /proc/net/tcp read
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


def socket_inode(local: tuple[str, int], remote: tuple[str, int], net: str = "/proc/thread-self/net") -> int | None:
    """The inode of the TCP socket with this local and remote end (as the client sees them)."""
    for name, v6 in (("tcp", False), ("tcp6", True)):
        lo, re_ = _hex_addr(local[0], local[1], v6), _hex_addr(remote[0], remote[1], v6)
        if not lo or not re_:
            continue
        try:
            with open(f"{net}/{name}", encoding="ascii", errors="replace") as f:
                next(f, None)
                for n, line in enumerate(f):
                    if n >= MAX_ROWS:
                        break
                    parts = line.split()
                    if len(parts) > 9 and parts[1] == lo and parts[2] == re_:
                        ino = int(parts[9])
                        return ino or None
        except (OSError, ValueError):
            continue
    return None


def descendants(root: int) -> list[int]:
    """Every process below `root` (bounded by MAX_PROCS)."""
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


class Finder:
    """`finder(client, gateway) -> Owner`: the run's process holding the client's socket.

    `pids()` lists the run's processes (default: this process's descendants)."""

    def __init__(self, pids: Callable[[], Iterable[int]] | None = None, net: str = "/proc/thread-self/net") -> None:
        self._pids = pids or (lambda: descendants(os.getpid()))
        self._net = net

    def __call__(self, client: tuple[str, int], gateway: tuple[str, int]) -> Owner:
        ino = socket_inode(client, gateway, self._net)
        if ino is None:
            return UNKNOWN
        want = f"socket:[{ino}]"
        found: list[int] = []
        budget = MAX_FDS
        for pid in list(self._pids())[:MAX_PROCS]:
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
