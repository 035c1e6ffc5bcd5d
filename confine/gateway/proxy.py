"""The gateway: every outbound TCP connection of the agent is decided and relayed here.

Two entries, one decision:
- the HTTP proxy (for clients that honour proxy variables): `CONNECT host:port`
  and absolute-URI plain HTTP (`GET http://host/...`);
- `handle_redirected(sock, orig_ip, orig_port)`: a connection the supervisor
  redirected here because the agent connected to an address directly; or,
  equivalently, `expect(client_addr, orig_ip, orig_port)` followed by the
  agent's socket connecting to `redirect_port`.

The threats, and the answer to each:
- a name outside the rules: refused before anything is resolved or dialled;
- an allowed name resolving inside the trust boundary (rebinding, metadata):
  the gateway resolves the name itself (Resolver), judges every address
  (addresses.refusal) and dials only an accepted, pinned address, never a
  name and never an address the client chose;
- a tunnel opened for one host and used for another: the ClientHello's SNI
  must equal the CONNECT host (TLS only through CONNECT); the tunnel is one
  upstream connection, so no second host can be reached through it; plain
  HTTP is one request per connection (`Connection: close`, further client
  bytes are discarded);
- a direct connection to an address with a made-up SNI/Host: the address must
  be pinned for the very name the SNI/Host gives, and that name allowed;
- stalled or numerous clients: a cap on connections, a handshake deadline
  (whole, not per read), an idle timeout, caps on head and ClientHello sizes.

Every connection ends in one JSON log line (the `log` callback): time, mode,
client, pid (when the caller knows it), host, port, resolved and dialled
addresses, SNI, decision, rule, reason, bytes each way, duration.
"""
from __future__ import annotations

import fcntl
import os
import select
import socket
import threading
import time
from typing import Any, Callable, Protocol

from ..record import dataclass
from . import http1
from .addresses import IPAddress, normalise
from .approve import Answer, Question
from .dns import Log, Resolver, now_iso
from .owner import Finder, Owner, exe_of
from .rules import LOCALHOST, LOOPBACKS, NO_RULE, Decision, RuleError, Rules, entry_for, normalise_host, parse_address
from .sni import MAX_HELLO, MAX_RECORD, MalformedHello, looks_like_tls, parse_client_hello

CHUNK = 65536
ASK_WAIT = 120.0   # a connection waits this long for its question (queued behind others); then refused
# every connection event has these fields (None where they do not apply), so a log reader
# can tell "not known" from "not logged"
EVENT_FIELDS = ("time", "pid", "exe", "host", "port", "resolved", "dialled", "sni", "decision", "rule",
                "approver", "bytes_up", "bytes_down", "duration_ms")
Ask = Callable[[Question], Answer]
OwnerOf = Callable[[tuple[str, int], tuple[str, int]], Owner]


class Terminator(Protocol):
    """What the gateway hands TLS connections to when the run has credentials to swap
    (confine/credentials/swap.py `Swap`; the gateway holds no TLS logic of its own)."""

    def terminates(self, name: str) -> bool: ...

    def relay(self, counts: Any, client: socket.socket, first: bytes, upstream: socket.socket, host: str,
              port: int, ev: dict[str, Any], *, idle: float, handshake_timeout: float,
              stop: threading.Event) -> None: ...

    def plain_refusal(self, head: http1.RequestHead, host: str, port: int) -> str | None: ...

    def plain_body(self, head: http1.RequestHead, host: str, port: int) -> Callable[[bytes], str | None]: ...


@dataclass(frozen=True)
class Limits:
    max_conns: int = 256
    handshake_timeout: float = 10.0   # the whole of: request head, ClientHello (srt: 10 s)
    idle_timeout: float = 300.0       # no byte either way for this long: closed
    connect_timeout: float = 5.0      # per upstream address tried
    max_dial: int = 4                 # upstream addresses tried per connection


class Refused(Exception):
    """The connection is refused; `status` is the HTTP status for proxy clients."""

    def __init__(self, reason: str, status: int = 403, rule: str = NO_RULE, *, by_rules: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status
        self.rule = rule
        self.by_rules = by_rules   # refused because no rule allows it (a rule could)


class _Timeout(Exception):
    pass


class _Conn:
    """One client connection's record: what the log line will say."""

    def __init__(self, mode: str, client: socket.socket, peer: str, pid: int | None) -> None:
        self.sock = client
        self.start = time.monotonic()
        self.ev: dict[str, Any] = {"time": now_iso(), "event": "connect", "mode": mode, "client": peer}
        if pid is not None:
            self.ev["pid"] = pid
            self.ev["exe"] = exe_of(pid)
        self.up = 0
        self.down = 0
        self.upstream: socket.socket | None = None
        self.asked = False


class Gateway:
    """The proxy server on (host, port) and the transparent entry, sharing rules, resolver and pins."""

    def __init__(self, rules: Rules, resolver: Resolver, *, host: str = "127.0.0.1", port: int = 0,
                 log: Log | None = None, limits: Limits | None = None, ask: Ask | None = None,
                 owner: OwnerOf | None = None, credentials: Terminator | None = None) -> None:
        self.rules = rules
        self.credentials = credentials       # the placeholder swap (TLS terminated), or None
        self.ask = ask                       # network.default: ask (approve.make_asker); None: deny
        self.owner = owner or Finder()       # which of the run's processes a proxy client is
        self.resolver = resolver
        self.pins = resolver.pins
        self.log = log
        self.limits = limits or Limits()
        self._host, self._want_port = host, port
        self._slots = threading.BoundedSemaphore(self.limits.max_conns)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._live: set[socket.socket] = set()
        self._threads: set[threading.Thread] = set()
        self.listener: socket.socket | None = None
        self.redirect_listener: socket.socket | None = None
        self.port = 0
        self.redirect_port = 0
        self._expected: dict[tuple[str, int], tuple[float, str | IPAddress, int, int | None]] = {}
        self._accept_threads: list[threading.Thread] = []

    # --- life cycle ---
    def start(self, listeners: tuple[socket.socket, socket.socket] | None = None) -> Gateway:
        """listeners: (proxy, redirect) listening sockets made elsewhere (the wiring
        makes them in the agent's network namespace); else bound on (host, port)."""
        if listeners is None:
            self.listener, self.port = self._listen(self._want_port)
            self.redirect_listener, self.redirect_port = self._listen(0)
        else:
            self.listener, self.redirect_listener = listeners
            self.port = int(self.listener.getsockname()[1])
            self.redirect_port = int(self.redirect_listener.getsockname()[1])
        for lst, mode in ((self.listener, "proxy"), (self.redirect_listener, "redirect")):
            t = threading.Thread(target=self._accept_loop, args=(lst, mode), daemon=True, name="confine-gw-accept")
            t.start()
            self._accept_threads.append(t)
        return self

    def _listen(self, port: int) -> tuple[socket.socket, int]:
        fam = socket.AF_INET6 if ":" in self._host else socket.AF_INET
        s = socket.socket(fam, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((self._host, port))
        s.listen(512)
        return s, int(s.getsockname()[1])

    @property
    def address(self) -> tuple[str, int]:
        return self._host, self.port

    def stop(self, timeout: float = 5.0) -> None:
        """Stop accepting, close every connection, wait (bounded) for the workers."""
        self._stop.set()
        for lst in (self.listener, self.redirect_listener):
            if lst is not None:
                try:
                    lst.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                lst.close()
        with self._lock:
            live = list(self._live)
            threads = list(self._threads)
        for s in live:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        deadline = time.monotonic() + timeout
        for t in threads + self._accept_threads:
            try:
                t.join(timeout=max(0.0, deadline - time.monotonic()))
            except RuntimeError:
                pass    # _spawn registered it and has not started it yet: it sees _stop

    def __enter__(self) -> Gateway:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def active(self) -> int:
        with self._lock:
            return len(self._threads)

    # --- entries ---
    def _accept_loop(self, lst: socket.socket, mode: str) -> None:
        while not self._stop.is_set():
            try:
                sock, peer = lst.accept()
            except OSError:
                if self._stop.is_set():
                    return
                time.sleep(0.05)   # EMFILE and the like: do not spin
                continue
            shown = f"{peer[0]}:{peer[1]}"
            if mode == "proxy":
                self._spawn("proxy", sock, shown, None, None, None)
                continue
            with self._lock:
                hit = self._expected.pop((str(normalise(peer[0])), int(peer[1])), None)
            if hit is None or hit[0] < time.monotonic():
                conn = _Conn("transparent", sock, shown, None)
                conn.ev.update(decision="deny", rule=NO_RULE, reason="a connection confine did not redirect")
                _close(sock)
                self._emit(conn)
                continue
            _, dst_ip, dst_port, pid = hit
            self._spawn("transparent", sock, shown, pid, dst_ip, dst_port)

    def expect(self, client: tuple[str, int], orig_dst_ip: str | IPAddress, orig_dst_port: int,
               pid: int | None = None, within: float = 10.0) -> bool:
        """Announce that a connection from `client` (the agent socket's local address, bound
        by the supervisor) will arrive on redirect_port, redirected from (orig_dst_ip,
        orig_dst_port). The redirect listener serves it as handle_redirected would; a
        connection nobody announced is refused. False when the table is full (refuse the
        connect). Announcements expire after `within` seconds."""
        key = (str(normalise(client[0])), int(client[1]))
        now = time.monotonic()
        with self._lock:
            if len(self._expected) >= 4 * self.limits.max_conns:
                self._expected = {k: v for k, v in self._expected.items() if v[0] >= now}
                if len(self._expected) >= 4 * self.limits.max_conns:
                    return False
            self._expected[key] = (now + within, orig_dst_ip, orig_dst_port, pid)
        return True

    def handle_redirected(self, client_sock: socket.socket, orig_dst_ip: str | IPAddress,
                          orig_dst_port: int, pid: int | None = None) -> None:
        """Take over a connection the agent made to (orig_dst_ip, orig_dst_port) directly.

        Returns at once; the connection is served (or refused and closed) on a worker
        thread. The gateway owns the socket from here on.
        """
        try:
            peer = client_sock.getpeername()
            name = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer or "unix")
        except OSError:
            name = "?"
        self._spawn("transparent", client_sock, name, pid, orig_dst_ip, orig_dst_port)

    def _spawn(self, mode: str, sock: socket.socket, peer: str, pid: int | None,
               dst_ip: str | IPAddress | None, dst_port: int | None) -> None:
        conn = _Conn(mode, sock, peer, pid)
        if self._stop.is_set() or not self._slots.acquire(blocking=False):
            conn.ev.update(decision="deny", rule=NO_RULE,
                           reason="gateway stopping" if self._stop.is_set() else "too many connections")
            if mode == "proxy":
                _try_send(sock, b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\n"
                                b"Content-Length: 0\r\n\r\n")
            _close(sock)
            self._emit(conn)
            return
        t = threading.Thread(target=self._run, args=(conn, dst_ip, dst_port), daemon=True, name="confine-gw")
        with self._lock:
            self._live.add(sock)
            self._threads.add(t)
        try:
            t.start()
        except RuntimeError as e:   # no thread to be had: refuse this one, keep accepting
            with self._lock:
                self._live.discard(sock)
                self._threads.discard(t)
            self._slots.release()
            _close(sock)
            conn.ev.update(decision="deny", rule=NO_RULE, reason=f"no worker thread: {e}")
            self._emit(conn)

    def _run(self, conn: _Conn, dst_ip: str | IPAddress | None, dst_port: int | None) -> None:
        try:
            if dst_port is None:
                self._serve_proxy(conn)
            else:
                assert dst_ip is not None
                self._serve_redirected(conn, dst_ip, dst_port)
        except Refused as r:
            conn.ev["decision"] = "deny"
            conn.ev["rule"] = r.rule
            conn.ev["reason"] = r.reason
            if r.by_rules and r.rule == NO_RULE and "host" in conn.ev:
                # what would allow it, for the wiring's one-line refusal message
                hint = entry_for(str(conn.ev["host"]), conn.ev.get("port"))
                if hint is not None:
                    conn.ev["allow_with"] = hint
            if r.status and conn.ev.get("mode") == "proxy" and not conn.ev.get("tunnel"):
                body = f"confine: {conn.ev.get('host', '?')}:{conn.ev.get('port', '?')} refused: {r.reason}\n"
                _try_send(conn.sock, _status(r.status, body))
        except _Timeout:
            conn.ev["decision"] = conn.ev.get("decision", "deny")
            conn.ev["reason"] = conn.ev.get("reason") or "handshake timeout"
            if conn.ev["decision"] == "deny":
                conn.ev.setdefault("rule", NO_RULE)
        except OSError as e:
            conn.ev.setdefault("decision", "deny")
            conn.ev.setdefault("rule", NO_RULE)
            conn.ev["error"] = f"{type(e).__name__}: {e}"
        except Exception as e:  # noqa: BLE001 - one connection's bug must not take the gateway down
            conn.ev["decision"] = "deny"
            conn.ev.setdefault("rule", NO_RULE)
            conn.ev["error"] = f"internal: {type(e).__name__}: {e}"
        finally:
            for s in (conn.sock, conn.upstream):
                if s is not None:
                    _close(s)
            with self._lock:
                self._live.discard(conn.sock)
                if conn.upstream is not None:
                    self._live.discard(conn.upstream)
                self._threads.discard(threading.current_thread())
            self._slots.release()
            self._emit(conn)

    def _emit(self, conn: _Conn) -> None:
        for k in EVENT_FIELDS:
            conn.ev.setdefault(k, None)
        if conn.ev["pid"] is None:
            conn.ev["pid"] = "unknown"
        conn.ev["bytes_up"] = conn.up
        conn.ev["bytes_down"] = conn.down
        conn.ev["duration_ms"] = round((time.monotonic() - conn.start) * 1000, 1)
        if self.log is not None:
            try:
                self.log(conn.ev)
            except Exception:  # noqa: BLE001 - a failing log sink must not stop the gateway
                pass

    # --- reading the client's first bytes, against one deadline ---
    def _recv(self, conn: _Conn, deadline: float) -> bytes:
        left = deadline - time.monotonic()
        if left <= 0:
            raise _Timeout()
        conn.sock.settimeout(left)
        try:
            data = conn.sock.recv(CHUNK)
        except socket.timeout:
            raise _Timeout() from None
        if not data:
            raise Refused("client closed before the request was complete", 0)
        return data

    def _read_head(self, conn: _Conn, buf: bytes, deadline: float) -> tuple[http1.RequestHead, bytes]:
        while http1.head_end(buf) < 0:
            if len(buf) >= http1.MAX_HEAD:
                raise Refused("request head too large", 431)
            buf += self._recv(conn, deadline)
        try:
            head = http1.parse_head(buf)
        except http1.BadRequest as e:
            raise Refused(str(e), e.status) from None
        return head, buf[head.size:]

    def _read_hello(self, conn: _Conn, buf: bytes, deadline: float) -> tuple[str | None, bytes]:
        cap = MAX_HELLO + 8 * (5 + MAX_RECORD)
        while True:
            try:
                hello = parse_client_hello(buf)
            except MalformedHello as e:
                raise Refused(f"not a TLS ClientHello: {e}", 0) from None
            if hello is not None:
                return hello.sni, buf
            if len(buf) > cap:
                raise Refused("ClientHello larger than the cap", 0)
            buf += self._recv(conn, deadline)

    # --- deciding ---
    def _addresses_for(self, conn: _Conn, host: str, port: int) -> tuple[str, list[IPAddress]]:
        """Decide (host, port) and return (name or literal, the addresses it may be dialled at)."""
        conn.ev["host"], conn.ev["port"] = host, port
        addr = parse_address(host)
        if addr is not None:
            d = self.rules.allows_address(addr, port)
            if not d.allowed:
                raise Refused(f"the address {addr} port {port} is not allowed", 403, d.rule, by_rules=True)
            why = self.resolver.judge(addr, port)
            if why is not None:
                raise Refused(why, 403, d.rule)
            conn.ev.update(decision="allow", rule=d.rule, resolved=[str(addr)])
            return str(addr), [addr]
        try:
            name = normalise_host(host)
        except RuleError as e:
            raise Refused(str(e), 400) from None
        conn.ev["host"] = name
        d = self.rules.decide(name, port)
        if not d.allowed:
            d = self._ask(conn, d, name, port, "proxy", 403)
        conn.ev["rule"] = d.rule
        if name == LOCALHOST:
            # the host's loopback by the entry that names it; never asked upstream
            local = [a for a in LOOPBACKS if self.rules.host_service(a, port) is not None]
            if not local:
                raise Refused(f"{name} port {port} is not allowed", 403, d.rule, by_rules=True)
            conn.ev.update(decision="allow", resolved=[str(a) for a in local])
            return name, local
        addrs, res = self.resolver.resolve(name)
        conn.ev["resolved"] = [str(a) for a in addrs]
        refused = [why for r in res for _, why in r.refused if why]
        if refused:
            conn.ev["refused_addresses"] = refused
        ok = [a for a in addrs if self.resolver.judge(a, port) is None]
        if not ok:
            if refused:
                raise Refused(f"{name} resolves only to refused addresses ({'; '.join(refused)})", 403, d.rule)
            errors = sorted({r.error for r in res if r.error})
            if errors:
                raise Refused(f"{name} could not be resolved ({'; '.join(errors)})", 502, d.rule)
            raise Refused(f"{name} has no address", 502, d.rule)
        conn.ev["decision"] = "allow"
        return name, ok

    def _ask(self, conn: _Conn, d: Decision, name: str, port: int, via: str, status: int) -> Decision:
        """No rule allows (name, port): ask (network.default: ask), or refuse. An explicit
        deny is never asked."""
        if self.ask is None or d.matched:
            raise Refused(f"{name} port {port} is not allowed", status, d.rule, by_rules=True)
        pid = conn.ev.get("pid")
        a = self.ask(Question(name, port, via, pid=pid if isinstance(pid, int) else None,
                              exe=conn.ev.get("exe"), wait=ASK_WAIT))
        conn.ev["approver"] = a.approver
        conn.ev["asked"] = a.decision
        conn.asked = True
        if not a.allowed:
            why = f"{a.decision} by {a.approver}" + (f": {a.reason}" if a.reason else "")
            raise Refused(f"{name} port {port} is not allowed ({why})", status, d.rule, by_rules=True)
        return Decision(True, a.rule)

    def _who(self, conn: _Conn) -> None:
        """The proxy client's process (bounded; "unknown" rather than a guess)."""
        try:
            peer, me = conn.sock.getpeername(), conn.sock.getsockname()
            o = self.owner((str(peer[0]), int(peer[1])), (str(me[0]), int(me[1])))
        except Exception:  # noqa: BLE001 - the log line is worth less than the connection
            return
        if o.pid is not None:
            conn.ev["pid"], conn.ev["exe"] = o.pid, o.exe
        elif o.owners:
            conn.ev["owners"] = list(o.owners)

    def _dial(self, conn: _Conn, addrs: list[IPAddress], port: int) -> socket.socket:
        last: OSError | None = None
        for a in addrs[: self.limits.max_dial]:
            fam = socket.AF_INET6 if a.version == 6 else socket.AF_INET
            s = socket.socket(fam, socket.SOCK_STREAM)
            with self._lock:
                self._live.add(s)
            conn.upstream = s
            s.settimeout(self.limits.connect_timeout)
            try:
                s.connect((str(a), port))
            except OSError as e:
                last = e
                with self._lock:
                    self._live.discard(s)
                _close(s)
                conn.upstream = None
                if self._stop.is_set():
                    break
                continue
            conn.ev["dialled"] = f"[{a}]:{port}" if a.version == 6 else f"{a}:{port}"
            return s
        raise Refused(f"could not connect to {', '.join(map(str, addrs))} port {port}: {last}", 502,
                      str(conn.ev.get("rule", NO_RULE)))

    # --- the proxy ---
    def _serve_proxy(self, conn: _Conn) -> None:
        deadline = time.monotonic() + self.limits.handshake_timeout
        head, rest = self._read_head(conn, b"", deadline)
        conn.ev["method"] = head.method
        self._who(conn)
        if head.method == "CONNECT":
            try:
                host, port = http1.split_authority(head.target, None)
            except http1.BadRequest as e:
                raise Refused(str(e), e.status) from None
            name, addrs = self._addresses_for(conn, host, port)
            if conn.asked:   # the person's time is not the client's handshake
                deadline = time.monotonic() + self.limits.handshake_timeout
            _send(conn.sock, b"HTTP/1.1 200 Connection established\r\n\r\n", deadline)
            conn.ev["tunnel"] = True
            conn.ev["decision"] = "deny"   # until the ClientHello is checked
            sni, first = self._read_hello(conn, rest, deadline)
            conn.ev["sni"] = sni
            self._check_sni(name, sni)
            conn.ev["decision"] = "allow"
            up = self._dial(conn, addrs, port)
            if not self._terminated(conn, name, port, up, first):
                self._relay(conn, up, first, None)
            return
        try:
            host, port, path = http1.absolute_target(head.target)
            hh = head.host()
            if hh is None or not http1.same_authority(http1.split_authority(hh, 80), (host, port)):
                raise http1.BadRequest("the Host header must name the request's host")
            body = head.content_length()
        except http1.BadRequest as e:
            conn.ev["host"] = head.target[:200]
            raise Refused(str(e), e.status) from None
        name, addrs = self._addresses_for(conn, host, port)
        check = self._plain(head, name, port, 403, rest[:body])
        up = self._dial(conn, addrs, port)
        first = http1.origin_head(head, path) + rest[:body]
        self._relay(conn, up, first, body - len(rest[:body]), check)

    @staticmethod
    def _check_sni(name: str, sni: str | None) -> None:
        if parse_address(name) is not None:
            return   # an explicitly allowed address: TLS to an address carries no SNI
        if sni is None:
            raise Refused(f"no SNI in the ClientHello (the tunnel is for {name})", 0)
        try:
            s = normalise_host(sni)
        except RuleError:
            raise Refused(f"SNI {sni[:100]!r} is not a host name", 0) from None
        if s != name:
            raise Refused(f"SNI {s} does not match the tunnel's host {name}", 0)

    # --- the transparent entry ---
    def _serve_redirected(self, conn: _Conn, dst_ip: str | IPAddress, dst_port: int) -> None:
        deadline = time.monotonic() + self.limits.handshake_timeout
        dst = normalise(dst_ip)
        shown = f"[{dst}]:{dst_port}" if dst.version == 6 else f"{dst}:{dst_port}"
        conn.ev.update(host=str(dst), port=dst_port, dst=shown)
        rule = self.rules.address_rule(dst, dst_port)
        if rule is not None:
            kind, r = rule
            if kind == "deny":
                raise Refused(f"{dst} refused by deny {r.text}", 0, f"deny {r.text}")
            why = self.resolver.judge(dst, dst_port)
            if why is not None:
                raise Refused(why, 0, f"allow {r.text}")
            conn.ev.update(decision="allow", rule=f"allow {r.text}")
            # localhost:P: the agent may have tried ::1 first where the service
            # listens on 127.0.0.1 only; the accepted connect cannot fall back itself
            up = self._dial(conn, [dst, *r.alias], dst_port)
            self._relay(conn, up, b"", None)
            return
        first = self._recv(conn, deadline)
        limit: int | None = None
        check: Callable[[bytes], str | None] | None = None
        sent = b""
        head: http1.RequestHead | None = None
        if looks_like_tls(first):
            sni, first = self._read_hello(conn, first, deadline)
            conn.ev["sni"] = sni
            if sni is None:
                raise Refused(f"TLS without SNI to {shown}: the address alone is not allowed", 0)
            try:
                name = normalise_host(sni)
            except RuleError:
                raise Refused(f"SNI {sni[:100]!r} is not a host name", 0) from None
        else:
            head, rest = self._read_head(conn, first, deadline)
            try:
                hh = head.host()
                if hh is None:
                    raise http1.BadRequest("no single Host header")
                hhost, hport = http1.split_authority(hh, dst_port)
                if hport != dst_port:
                    raise http1.BadRequest(f"Host port {hport} is not the connection's port {dst_port}")
                path = head.target
                if not path.startswith("/"):
                    thost, tport, path = http1.absolute_target(head.target)
                    if not http1.same_authority((thost, tport), (hhost, hport)):
                        raise http1.BadRequest("the Host header must name the request's host")
                body = head.content_length()
            except http1.BadRequest as e:
                raise Refused(f"plain HTTP to {shown}: {e}", 0) from None
            try:
                name = normalise_host(hhost)
            except RuleError:
                raise Refused(f"Host {hhost[:100]!r} is not a host name", 0) from None
            first = http1.origin_head(head, path) + rest[:body]
            limit = body - len(rest[:body])
            sent = rest[:body]
        conn.ev["host"] = name
        d = self.rules.decide(name, dst_port)
        if not d.allowed:
            d = self._ask(conn, d, name, dst_port, "transparent", 0)
        if not self.pins.contains(name, dst):
            raise Refused(f"{dst} was not resolved by confine for {name}", 0, d.rule)
        why = self.resolver.judge(dst, dst_port)
        if why is not None:
            raise Refused(why, 0, d.rule)
        if head is not None:
            check = self._plain(head, name, dst_port, 0, sent)
        conn.ev.update(decision="allow", rule=d.rule, resolved=sorted(str(a) for a in self.pins.addresses(name)))
        up = self._dial(conn, [dst], dst_port)
        if head is not None or not self._terminated(conn, name, dst_port, up, first):
            self._relay(conn, up, first, limit, check)

    # --- the credential swap's hooks ---
    def _terminated(self, conn: _Conn, name: str, port: int, up: socket.socket, first: bytes) -> bool:
        """Hand a TLS connection to the swap when it takes this name (it is pinned and
        its SNI checked by now); False: relay it as it is."""
        c = self.credentials
        if c is None or parse_address(name) is not None or not c.terminates(name):
            return False
        c.relay(conn, conn.sock, first, up, name, port, conn.ev, idle=self.limits.idle_timeout,
                handshake_timeout=self.limits.handshake_timeout, stop=self._stop)
        return True

    def _plain(self, head: http1.RequestHead, name: str, port: int, status: int,
               body: bytes) -> Callable[[bytes], str | None] | None:
        """Plain HTTP never carries a credential: a placeholder in its head or its body is
        refused (toward a name; an address literal, like its TLS, is outside the swap and
        relayed as it is). `body`: what of the body was read with the head; the search of
        the rest (for `_relay`) is returned."""
        if self.credentials is None or parse_address(name) is not None:
            return None
        why = self.credentials.plain_refusal(head, name, port)
        check = self.credentials.plain_body(head, name, port)
        why = why or check(body)
        if why is not None:
            raise Refused(f"plain HTTP: {why}", status)
        return check

    # --- relaying ---
    def _relay(self, conn: _Conn, up: socket.socket, first: bytes, up_limit: int | None,
               check: Callable[[bytes], str | None] | None = None) -> None:
        """Copy bytes both ways until both sides are done, a side errs, or nothing moves for
        idle_timeout. `up_limit`: client bytes still to forward after `first` (None: no limit;
        beyond it client bytes are read and discarded). `check`: the swap's search of a
        plain body (with `up_limit`): a piece it refuses, and all after it, never goes.

        A direction that has carried SPLICE_AFTER bytes switches to splice(2) through a pipe
        (no copy through Python); short connections never spend the two descriptors."""
        c = conn.sock
        idle = self.limits.idle_timeout
        c.settimeout(idle)
        up.settimeout(idle)
        for s in (c, up):
            # a relay sends on what it got at once: Nagle would hold a small write (a
            # TLS close_notify after the response) until the client's delayed ACK (40 ms)
            try:
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        if first:
            up.sendall(first)
            conn.up += len(first)
        poller = select.poll()
        fds = {c.fileno(): c, up.fileno(): up}
        open_from = {c.fileno(): True, up.fileno(): True}
        moved = {c.fileno(): 0, up.fileno(): 0}
        pipes: dict[int, tuple[int, int] | None] = {}
        for fd in fds:
            poller.register(fd, select.POLLIN | select.POLLPRI)
        discarded = 0
        try:
            while any(open_from.values()):
                if self._stop.is_set():
                    raise Refused("gateway stopped", 0, str(conn.ev.get("rule", NO_RULE)))
                events = poller.poll(int(idle * 1000))
                if not events:
                    conn.ev["reason"] = "idle timeout"
                    return
                for fd, _ev in events:
                    src = fds[fd]
                    dst = up if src is c else c
                    limited = src is c and up_limit is not None
                    if not limited and moved[fd] >= SPLICE_AFTER and fd not in pipes:
                        pipes[fd] = _pipe()
                    pipe = pipes.get(fd)
                    if pipe is not None and not limited:
                        n = _splice(src, dst, pipe, idle)
                        if n < 0:
                            continue
                        data = b""
                    else:
                        try:
                            data = src.recv(CHUNK)
                        except (ConnectionResetError, BrokenPipeError):
                            data = b""
                        except BlockingIOError:
                            continue
                        n = len(data)
                    if not n:
                        open_from[fd] = False
                        poller.unregister(fd)
                        try:
                            dst.shutdown(socket.SHUT_WR)
                        except OSError:
                            pass
                        if src is up:
                            return   # the server is done: nothing more to wait for from the client
                        continue
                    if limited:
                        assert up_limit is not None
                        fwd = data[: max(up_limit, 0)]
                        up_limit -= len(fwd)
                        discarded += len(data) - len(fwd)
                        if discarded:
                            conn.ev["discarded_up"] = discarded
                        data = fwd
                        n = len(data)
                        if not data:
                            continue
                        why = check(data) if check is not None else None
                        if why is not None:
                            # a 403 only where no answer has begun (it would land inside one)
                            raise Refused(f"plain HTTP: {why}", 0 if conn.down else 403,
                                          str(conn.ev.get("rule", NO_RULE)))
                    moved[fd] += n
                    if src is c:
                        conn.up += n
                    else:
                        conn.down += n
                    if data:
                        dst.sendall(data)
        finally:
            for p in pipes.values():
                if p is not None:
                    os.close(p[0])
                    os.close(p[1])


SPLICE_AFTER = 1 << 20
PIPE_SIZE = 1 << 20   # /proc/sys/fs/pipe-max-size's default; a smaller pipe still works
_SPLICE = getattr(os, "splice", None)
_SPLICE_FLAGS = getattr(os, "SPLICE_F_MOVE", 1) | getattr(os, "SPLICE_F_NONBLOCK", 2)


def _pipe() -> tuple[int, int] | None:
    """A pipe for splice(2), or None (no splice, or no descriptor to spare: copy instead)."""
    if _SPLICE is None:
        return None
    try:
        r, w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        fcntl.fcntl(w, 1031, PIPE_SIZE)   # F_SETPIPE_SZ
    except OSError:
        pass
    return r, w


def _splice(src: socket.socket, dst: socket.socket, pipe: tuple[int, int], idle: float) -> int:
    """Move what src has to dst through the pipe: bytes moved, 0 at EOF, -1 if nothing was there."""
    assert _SPLICE is not None
    try:
        n = int(_SPLICE(src.fileno(), pipe[1], PIPE_SIZE, flags=_SPLICE_FLAGS))
    except BlockingIOError:
        return -1
    except (ConnectionResetError, BrokenPipeError):
        return 0
    left = n
    while left:
        try:
            left -= int(_SPLICE(pipe[0], dst.fileno(), left, flags=_SPLICE_FLAGS))
        except BlockingIOError:
            p = select.poll()
            p.register(dst.fileno(), select.POLLOUT)
            if not p.poll(int(idle * 1000)):
                raise socket.timeout("send timed out") from None
    return n


def _status(code: int, body: str) -> bytes:
    reason = {400: "Bad Request", 403: "Forbidden", 421: "Misdirected Request", 431: "Request Header Fields Too Large",
              501: "Not Implemented", 502: "Bad Gateway", 503: "Service Unavailable"}.get(code, "Error")
    b = body.encode("utf-8", "replace")
    return (f"HTTP/1.1 {code} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\n"
            f"Content-Length: {len(b)}\r\nConnection: close\r\n\r\n").encode("ascii") + b


def _send(sock: socket.socket, data: bytes, deadline: float) -> None:
    left = deadline - time.monotonic()
    if left <= 0:
        raise _Timeout()
    sock.settimeout(left)
    try:
        sock.sendall(data)
    except socket.timeout:
        raise _Timeout() from None


def _try_send(sock: socket.socket, data: bytes) -> None:
    try:
        sock.settimeout(0.5)
        sock.sendall(data)
    except OSError:
        pass


def _close(sock: socket.socket) -> None:
    try:
        sock.close()
    except OSError:
        pass


__all__ = ["Gateway", "Limits", "Refused"]
