"""Landlock's own refusals, from the kernel's audit stream (Landlock ABI 7).

Landlock refuses in the kernel and tells no one; since ABI 7 it can write an
audit record for each refusal (type 1423, LANDLOCK_ACCESS: the domain, the
missing right, the path or port) and one per domain the first time it shows
(1424, LANDLOCK_DOMAIN: the pid that called landlock_restrict_self). The
agent's own refusals (after its exec) are logged only with
LANDLOCK_RESTRICT_SELF_LOG_NEW_EXEC_ON (kernel/landlock.py sets it when a
watch runs).

Who can read them: a process with CAP_AUDIT_READ in the initial user
namespace joins the audit netlink multicast group (with or without auditd),
and only while the kernel's audit is on (`auditctl -e 1`, `audit=1`):
Landlock writes nothing when it is off. confine never turns it on (it is a
host-wide setting that would make the kernel log for every process): an
unprivileged run, or a host with audit off, explains only the refusals of
confine's own layers (runtime/events.py says so at exit when the agent failed).

Cost: nothing per allowed call; per refusal, one record the kernel formats
and queues (rate-limited and dropped by the kernel's audit backlog when
flooded, so a storm of refusals can lose some) and one parse here.

Threat: the records of every sandbox on the host arrive here; only records of
the domain whose LANDLOCK_DOMAIN record names one of this run's pids are
passed on, and what is held for a domain not yet placed is bounded.
"""
from __future__ import annotations

import errno
import os
import re
import select
import socket
import struct
import threading
from collections import OrderedDict
from collections.abc import Callable

NETLINK_AUDIT = 9
AUDIT_GET = 1000
AUDIT_USER_MSG = 1107
AUDIT_NLGRP_READLOG = 1
LANDLOCK_ACCESS = 1423
LANDLOCK_DOMAIN = 1424
_NLMSG = struct.Struct("=IHHII")          # len, type, flags, seq, pid
_NLM_F_REQUEST = 1
_NLM_F_ACK = 4
_NLMSG_ERROR = 2
MAX_PENDING = 64            # domains not yet placed (other sandboxes' records)
MAX_PER_DOMAIN = 16         # records held for each of them

Fields = dict[str, str]


def enabled() -> int | None:
    """The kernel's audit_enabled (0 off, 1 on, 2 locked on), None if it
    cannot be asked (no CONFIG_AUDIT, or not allowed in this namespace)."""
    try:
        s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC,
                          NETLINK_AUDIT)
    except OSError:
        return None
    try:
        s.settimeout(2)
        s.bind((0, 0))
        s.send(_NLMSG.pack(_NLMSG.size, AUDIT_GET, _NLM_F_REQUEST, 1, 0))
        for _ in range(4):
            data = s.recv(8192)
            if len(data) < _NLMSG.size:
                return None
            _, typ, _, _, _ = _NLMSG.unpack_from(data)
            if typ == AUDIT_GET and len(data) >= _NLMSG.size + 8:
                return int(struct.unpack_from("=I", data, _NLMSG.size + 4)[0])
            if typ == _NLMSG_ERROR:
                err = struct.unpack_from("=i", data, _NLMSG.size)[0]
                if err:
                    return None
        return None
    except OSError:
        return None
    finally:
        s.close()


_FIELD = re.compile(r'(\w+)=("([^"]*)"|\S+)')
_HEXABLE = frozenset({"path", "exe", "comm", "name"})


def parse(text: str) -> Fields:
    """The key=value fields of one record's text (`audit(...): k=v k="v"`);
    an unquoted path is hex (the kernel's form for names with odd bytes)."""
    out: Fields = {}
    body = text.split("): ", 1)[1] if text.startswith("audit(") and "): " in text else text
    for m in _FIELD.finditer(body):
        k, raw, quoted = m.group(1), m.group(2), m.group(3)
        if quoted is not None:
            out[k] = quoted
        elif k in _HEXABLE and re.fullmatch(r"(?:[0-9A-F]{2})+", raw):
            out[k] = bytes.fromhex(raw).decode(errors="surrogateescape")
        else:
            out[k] = raw
    return out


class LandlockWatch:
    """Reads the audit multicast group on a thread of its own and calls
    `on_refusal(fields)` for each LANDLOCK_ACCESS record of a domain made by
    one of `add_pid()`'s pids. open() raises OSError (EPERM without
    CAP_AUDIT_READ); start() before the fork, stop() after the agent is gone."""

    def __init__(self, sock: socket.socket, on_refusal: Callable[[Fields], None]):
        self.sock = sock
        self.on_refusal = on_refusal
        self.pids: set[int] = set()
        self.ours: set[str] = set()
        self.held: OrderedDict[str, list[Fields]] = OrderedDict()   # domain -> its records
        self.made_by: OrderedDict[str, int] = OrderedDict()         # domain -> pid, not ours yet
        self.seen = 0                  # our records passed on
        self._lock = threading.Lock()
        self._fence = ""
        self._fenced = threading.Event()
        self._stop_r, self._stop_w = os.pipe2(os.O_CLOEXEC)
        self.thread = threading.Thread(target=self._loop, name="confine-audit", daemon=True)

    @classmethod
    def open(cls, on_refusal: Callable[[Fields], None]) -> LandlockWatch:
        s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC,
                          NETLINK_AUDIT)
        try:
            s.bind((0, 1 << (AUDIT_NLGRP_READLOG - 1)))
            # A burst of refusals should wait in the kernel, not be dropped here.
            try:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
            except OSError:
                pass
        except BaseException:
            s.close()
            raise
        return cls(s, on_refusal)

    def start(self) -> None:
        self.thread.start()

    def add_pid(self, pid: int) -> None:
        """A pid (as the host sees it) that may call landlock_restrict_self."""
        with self._lock:
            self.pids.add(pid)
            for dom in [d for d, p in self.made_by.items() if p == pid]:
                del self.made_by[dom]
                self._place(dom)

    def stop(self, wait: float = 2.0) -> None:
        """Send a record of our own and wait (at most `wait` seconds) until it
        comes back: every record the agent caused before is through by then."""
        try:
            if self.thread.is_alive():
                self._fence = "confine-fence-" + os.urandom(8).hex()
                if self._send_user(self._fence):
                    self._fenced.wait(wait)
        finally:
            try:
                os.write(self._stop_w, b"x")
            except OSError:
                pass
            if self.thread.is_alive():
                self.thread.join(wait)
            self.sock.close()
            os.close(self._stop_r)
            os.close(self._stop_w)

    def _send_user(self, text: str) -> bool:
        try:
            s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC,
                              NETLINK_AUDIT)
        except OSError:
            return False
        try:
            s.bind((0, 0))
            body = text.encode() + b"\0"
            s.send(_NLMSG.pack(_NLMSG.size + len(body), AUDIT_USER_MSG,
                               _NLM_F_REQUEST | _NLM_F_ACK, 1, 0) + body)
            return True
        except OSError:
            return False
        finally:
            s.close()

    def _loop(self) -> None:
        poller = select.poll()
        poller.register(self.sock.fileno(), select.POLLIN)
        poller.register(self._stop_r, select.POLLIN)
        while True:
            for fd, _ in poller.poll():
                if fd == self._stop_r:
                    return
                try:
                    data = self.sock.recv(1 << 16)
                except OSError as e:
                    if e.errno == errno.ENOBUFS:
                        continue        # the kernel dropped some: read on
                    return
                self._messages(data)

    def _messages(self, data: bytes) -> None:
        off = 0
        while off + _NLMSG.size <= len(data):
            ln, typ, _, _, _ = _NLMSG.unpack_from(data, off)
            if ln < _NLMSG.size or off + ln > len(data):
                return
            text = data[off + _NLMSG.size:off + ln].rstrip(b"\0").decode(errors="replace")
            off += (ln + 3) & ~3
            try:
                self._record(typ, text)
            except Exception:  # noqa: BLE001 - a record we cannot read is skipped, not fatal
                continue

    def _record(self, typ: int, text: str) -> None:
        if typ == AUDIT_USER_MSG:
            if self._fence and self._fence in text:
                self._fenced.set()
            return
        if typ not in (LANDLOCK_ACCESS, LANDLOCK_DOMAIN):
            return
        f = parse(text)
        dom = f.get("domain", "")
        if not dom:
            return
        with self._lock:
            if typ == LANDLOCK_DOMAIN:
                if f.get("status") != "allocated":
                    return
                pid = int(f["pid"]) if f.get("pid", "").isdigit() else -1
                if pid in self.pids:
                    self._place(dom)
                else:
                    # the restricting process may say its pid to us only later
                    if len(self.made_by) >= MAX_PENDING:
                        self.made_by.popitem(last=False)
                    self.made_by[dom] = pid
                return
            if dom in self.ours:
                self.seen += 1
                self.on_refusal(f)
                return
            recs = self.held.get(dom)
            if recs is None:
                if len(self.held) >= MAX_PENDING:
                    self.held.popitem(last=False)
                recs = self.held[dom] = []
            if len(recs) < MAX_PER_DOMAIN:
                recs.append(f)

    def _place(self, dom: str) -> None:
        """dom is ours: pass on what was held for it (lock held)."""
        self.ours.add(dom)
        for r in self.held.pop(dom, []):
            self.seen += 1
            self.on_refusal(r)
