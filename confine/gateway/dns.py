"""The gateway's DNS: the only resolver the agent gets, and the pins it leaves behind.

The threats: a query name carries data out (DNS exfiltration: the upstream
resolver forwards whatever it is asked to the name's authoritative server),
and an allowed name resolves to an address inside the trust boundary (DNS
rebinding). So a name that is not allowed is answered NXDOMAIN here, without
asking anyone; an allowed name is resolved by confine through the upstream it
was given, each address is judged (addresses.refusal) and only the accepted
ones are answered and pinned. A connection may later go only to a pinned
address (or to an address allowed by an explicit rule).

Query types, for an allowed name: A and AAAA are resolved; ANY is NOTIMP
(RFC 8482 lets servers decline it); AXFR/IXFR are REFUSED; every other type
(HTTPS, SVCB, TXT, MX, ...) is NOERROR with no records, so clients fall back to
A/AAAA and no ECH configuration or other data is fetched. A query for a name
that is not allowed is NXDOMAIN whatever its type. Class other than IN: REFUSED.
"""
from __future__ import annotations

import ipaddress
import json
import os
import socket
import struct
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import IO, Any, Callable, Sequence

from ..record import dataclass
from . import dnswire as w
from .addresses import HostAddresses, IPAddress, refusal
from .approve import Answer, Question
from .rules import NO_RULE, Decision, RuleError, Rules, normalise_host

Log = Callable[[dict[str, Any]], None]
# A lookup waits this long for its question (less than a resolver's first timeout, 5 s
# for glibc); then it goes unanswered and the client's retry finds the answer.
ASK_WAIT = 4.0


def now_iso() -> str:
    t = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1000):03d}Z"


def json_line(event: dict[str, Any]) -> str:
    return json.dumps(event, sort_keys=False, separators=(",", ":"), default=str)


class JsonLines:
    """A Log that appends each event as one JSON line to a text stream (thread-safe, flushed)."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream
        self._lock = threading.Lock()

    def __call__(self, event: dict[str, Any]) -> None:
        line = json_line(event) + "\n"
        with self._lock:
            self._stream.write(line)
            self._stream.flush()


class Pins:
    """name -> addresses confine resolved for it in this run.

    By default a pin is held for the whole run (clients cache answers longer
    than their TTL: the JVM, Go's and node's own caches); `hold` seconds makes
    pins expire at max(TTL, hold) instead. Bounded: past `max_names` names, or
    `max_per_name` addresses for one name, new pins are refused (fail closed:
    a connection to an unpinned address is refused).
    """

    def __init__(self, *, max_names: int = 4096, max_per_name: int = 64, hold: float | None = None) -> None:
        self._lock = threading.Lock()
        self._pins: dict[str, dict[IPAddress, float]] = {}
        self._max_names = max_names
        self._max_per_name = max_per_name
        self._hold = hold

    def add(self, name: str, addrs: Sequence[IPAddress], ttl: int) -> bool:
        expires = float("inf") if self._hold is None else time.monotonic() + max(ttl, self._hold)
        with self._lock:
            entry = self._pins.get(name)
            if entry is None:
                if len(self._pins) >= self._max_names:
                    return False
                entry = self._pins[name] = {}
            ok = True
            for a in addrs:
                if a in entry or len(entry) < self._max_per_name:
                    entry[a] = max(expires, entry.get(a, 0.0))
                else:
                    ok = False
            return ok

    def addresses(self, name: str) -> frozenset[IPAddress]:
        now = time.monotonic()
        with self._lock:
            return frozenset(a for a, exp in self._pins.get(name, {}).items() if exp > now)

    def contains(self, name: str, addr: IPAddress) -> bool:
        now = time.monotonic()
        with self._lock:
            exp = self._pins.get(name, {}).get(addr)
            return exp is not None and exp > now

    def snapshot(self) -> dict[str, list[str]]:
        now = time.monotonic()
        with self._lock:
            return {n: sorted(str(a) for a, exp in e.items() if exp > now) for n, e in self._pins.items()}


@dataclass(frozen=True)
class Resolution:
    name: str
    qtype: int
    rcode: int
    addresses: tuple[IPAddress, ...]            # accepted and pinned
    refused: tuple[tuple[str, str], ...] = ()   # (address, why)
    ttl: int = 0
    upstream: str | None = None                 # "ip:port" asked, None if answered from the cache
    pin_full: bool = False
    error: str | None = None                    # why no upstream answered (SERVFAIL)


class Resolver:
    """Resolves allowed names through the given upstream resolvers, judges and pins the answers.

    The caller decides whether a name is allowed; the resolver never sees one
    that is not. Answers are cached until their TTL (clamped to
    [min_ttl, max_ttl]) so a busy client does not multiply upstream queries.
    """

    def __init__(self, upstreams: Sequence[tuple[str, int]], rules: Rules, pins: Pins, *,
                 timeout: float = 2.0, host_addresses: HostAddresses | None = None,
                 cache_size: int = 2048, min_ttl: int = 5, max_ttl: int = 300) -> None:
        if not upstreams:
            raise ValueError("the gateway's resolver needs at least one upstream")
        self.upstreams = [(str(ipaddress.ip_address(h)), int(p)) for h, p in upstreams]
        self.rules = rules
        self.pins = pins
        self.timeout = timeout
        self.host_addresses = host_addresses or HostAddresses()
        self._cache: dict[tuple[str, int], tuple[float, Resolution]] = {}
        self._cache_size = cache_size
        self._min_ttl, self._max_ttl = min_ttl, max_ttl
        self._lock = threading.Lock()
        self.upstream_queries = 0

    def judge(self, addr: IPAddress, port: int | None) -> str | None:
        """Why `addr` may not be dialled for an allowed name (on `port`), or None."""
        rule = self.rules.address_rule(addr, port)
        if rule is not None and rule[0] == "deny":
            return f"{addr}: refused by deny {rule[1].text}"
        explicit = rule[1].net if rule is not None else self.rules.resolve_net(addr)
        return refusal(addr, explicit=explicit, own=self.host_addresses.get())

    def lookup(self, name: str, qtype: int) -> Resolution:
        key = (name, qtype)
        now = time.monotonic()
        with self._lock:
            hit = self._cache.get(key)
            hit = hit if hit is not None and hit[0] > now else None
        if hit is not None:
            r = hit[1]
            if r.addresses:
                self.pins.add(name, r.addresses, r.ttl)   # a cached answer keeps its pins alive
            return Resolution(r.name, r.qtype, r.rcode, r.addresses, r.refused, r.ttl, None)
        r = self._ask(name, qtype)
        if r.rcode in (w.NOERROR, w.NXDOMAIN):
            with self._lock:
                if len(self._cache) >= self._cache_size:
                    self._cache = {k: v for k, v in self._cache.items() if v[0] > now}
                    while len(self._cache) >= self._cache_size:
                        self._cache.pop(next(iter(self._cache)))
                self._cache[key] = (now + max(r.ttl, self._min_ttl), r)
        return r

    def resolve(self, name: str) -> tuple[list[IPAddress], list[Resolution]]:
        """A and AAAA for `name`: the accepted addresses (IPv4 first) and the resolutions."""
        res = [self.lookup(name, w.A), self.lookup(name, w.AAAA)]
        return [a for r in res for a in r.addresses], res

    def _ask(self, name: str, qtype: int) -> Resolution:
        query_bytes: bytes | None = None
        last = "no upstream answered"
        for host, port in self.upstreams:
            mid = int.from_bytes(os.urandom(2), "big")
            query_bytes = w.build_query(mid, name, qtype)
            with self._lock:
                self.upstream_queries += 1
            try:
                reply = self._udp(host, port, query_bytes, mid, name, qtype)
                if reply is not None and reply.tc:
                    reply = self._tcp(host, port, query_bytes, mid, name, qtype)
            except (OSError, w.DNSFormatError) as e:
                last = f"{host}:{port}: {e}"
                continue
            if reply is None:
                last = f"{host}:{port}: no valid answer"
                continue
            return self._accept(name, qtype, reply, f"{host}:{port}")
        return Resolution(name, qtype, w.SERVFAIL, (), (), 0, None, error=last)

    def _matches(self, reply: w.Message, mid: int, name: str, qtype: int) -> bool:
        if reply.id != mid or not reply.qr or len(reply.questions) != 1:
            return False
        q = reply.questions[0]
        return q.name.lower() == name and q.qtype == qtype

    def _udp(self, host: str, port: int, data: bytes, mid: int, name: str, qtype: int) -> w.Message | None:
        fam = socket.AF_INET6 if ":" in host else socket.AF_INET
        deadline = time.monotonic() + self.timeout
        with socket.socket(fam, socket.SOCK_DGRAM) as s:
            s.connect((host, port))     # only datagrams from the upstream are received
            s.send(data)
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise OSError("timed out")
                s.settimeout(left)
                try:
                    buf = s.recv(w.MAX_MESSAGE)
                except socket.timeout:
                    raise OSError("timed out") from None
                try:
                    reply = w.parse(buf)
                except w.DNSFormatError:
                    continue
                if self._matches(reply, mid, name, qtype):
                    return reply

    def _tcp(self, host: str, port: int, data: bytes, mid: int, name: str, qtype: int) -> w.Message | None:
        with socket.create_connection((host, port), timeout=self.timeout) as s:
            s.sendall(struct.pack("!H", len(data)) + data)
            deadline = time.monotonic() + self.timeout
            n = struct.unpack("!H", _recv_exact(s, 2, deadline))[0]
            reply = w.parse(_recv_exact(s, n, deadline))
        return reply if self._matches(reply, mid, name, qtype) else None

    def _accept(self, name: str, qtype: int, reply: w.Message, upstream: str) -> Resolution:
        if reply.rcode != w.NOERROR:
            rcode = reply.rcode if reply.rcode == w.NXDOMAIN else w.SERVFAIL
            return Resolution(name, qtype, rcode, (), (), self._min_ttl, upstream)
        # follow the CNAME chain inside the answer; the client gets flat records for its name
        owners = {name}
        ttl = self._max_ttl
        for _ in range(8):
            grew = False
            for rec in reply.answers:
                if rec.rtype == w.CNAME and rec.name in owners and rec.target and rec.target not in owners:
                    owners.add(rec.target)
                    ttl = min(ttl, rec.ttl)
                    grew = True
            if not grew:
                break
        accepted: list[IPAddress] = []
        refused: list[tuple[str, str]] = []
        for rec in reply.answers:
            if rec.rtype != qtype or rec.name not in owners or rec.rclass != w.CLASS_IN:
                continue
            addr = w.rdata_address(rec.rtype, rec.rdata)
            if addr is None:
                continue
            ttl = min(ttl, rec.ttl)
            why = self.judge(addr, None)
            if why is None:
                if addr not in accepted:
                    accepted.append(addr)
            else:
                refused.append((str(addr), why))
        ttl = max(0, min(ttl, self._max_ttl)) if accepted else self._min_ttl
        full = False
        if accepted and not self.pins.add(name, accepted, ttl):
            full = True
            accepted = [a for a in accepted if self.pins.contains(name, a)]
        return Resolution(name, qtype, w.NOERROR, tuple(accepted), tuple(refused), ttl, upstream, full)


def _recv_exact(s: socket.socket, n: int, deadline: float) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        left = deadline - time.monotonic()
        if left <= 0:
            raise OSError("timed out")
        s.settimeout(left)
        try:
            chunk = s.recv(n - len(buf))
        except socket.timeout:
            raise OSError("timed out") from None
        if not chunk:
            raise OSError("connection closed")
        buf += chunk
    return bytes(buf)


class DNSServer:
    """A DNS server on (host, port), UDP and TCP, answering from the Resolver.

    Bounded: UDP queries go to `workers` threads with at most 4 * workers
    waiting (more are dropped: the client retries); at most `max_tcp` TCP
    clients, each idle at most `tcp_idle` seconds.
    """

    def __init__(self, resolver: Resolver, *, host: str = "127.0.0.1", port: int = 0,
                 log: Log | None = None, workers: int = 16, max_tcp: int = 32,
                 tcp_idle: float = 10.0, ask: Callable[[Question], Answer] | None = None,
                 ask_wait: float = ASK_WAIT) -> None:
        self.resolver = resolver
        self.ask = ask                 # network.default: ask (approve.make_asker); None: NXDOMAIN
        self.ask_wait = ask_wait
        self.rules = resolver.rules
        self.log = log
        self._host = host
        self._want_port = port
        self._workers = workers
        self._pending = threading.BoundedSemaphore(workers * 4)
        self._tcp_slots = threading.BoundedSemaphore(max_tcp)
        self._tcp_idle = tcp_idle
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._conns: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self.udp: socket.socket | None = None
        self.tcp: socket.socket | None = None
        self.port = 0

    # --- life cycle ---
    def start(self, sockets: tuple[socket.socket, socket.socket] | None = None) -> DNSServer:
        """sockets: (UDP bound, TCP listening) on one port, made elsewhere (the wiring
        makes them in the agent's network namespace); else bound on (host, port)."""
        if sockets is not None:
            self.udp, self.tcp = sockets
            self.port = int(self.udp.getsockname()[1])
            return self._serve()
        fam = socket.AF_INET6 if ":" in self._host else socket.AF_INET
        for _ in range(20):
            udp = socket.socket(fam, socket.SOCK_DGRAM)
            tcp = socket.socket(fam, socket.SOCK_STREAM)
            try:
                udp.bind((self._host, self._want_port))
                port = udp.getsockname()[1]
                tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                tcp.bind((self._host, port))
                tcp.listen(64)
            except OSError:
                udp.close()
                tcp.close()
                if self._want_port:
                    raise
                continue
            break
        else:
            raise OSError("no port free for both UDP and TCP")
        self.udp, self.tcp, self.port = udp, tcp, port
        return self._serve()

    def _serve(self) -> DNSServer:
        self._pool = ThreadPoolExecutor(max_workers=self._workers, thread_name_prefix="confine-dns")
        for target in (self._udp_loop, self._tcp_loop):
            t = threading.Thread(target=target, daemon=True, name="confine-dns-listen")
            t.start()
            self._threads.append(t)
        return self

    @property
    def address(self) -> tuple[str, int]:
        return self._host, self.port

    def stop(self) -> None:
        self._stop.set()
        for s in (self.udp, self.tcp):
            if s is not None:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()
        with self._lock:
            conns = list(self._conns)
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
        for t in self._threads:
            t.join(timeout=2)

    def __enter__(self) -> DNSServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- UDP ---
    def _udp_loop(self) -> None:
        assert self.udp is not None and self._pool is not None
        sock = self.udp
        while not self._stop.is_set():
            try:
                data, peer = sock.recvfrom(w.MAX_MESSAGE)
            except OSError:
                return
            if not self._pending.acquire(blocking=False):
                continue  # overloaded: drop, the client retries
            try:
                self._pool.submit(self._udp_one, data, peer)
            except RuntimeError:
                self._pending.release()
                return

    def _udp_one(self, data: bytes, peer: Any) -> None:
        try:
            reply = self.answer(data, f"{peer[0]}:{peer[1]}", "udp")
            if reply is not None and self.udp is not None:
                self.udp.sendto(reply, peer)
        except OSError:
            pass
        finally:
            self._pending.release()

    # --- TCP ---
    def _tcp_loop(self) -> None:
        assert self.tcp is not None
        while not self._stop.is_set():
            try:
                conn, peer = self.tcp.accept()
            except OSError:
                return
            if not self._tcp_slots.acquire(blocking=False):
                conn.close()
                continue
            t = threading.Thread(target=self._tcp_one, args=(conn, peer), daemon=True, name="confine-dns-tcp")
            t.start()

    def _tcp_one(self, conn: socket.socket, peer: Any) -> None:
        with self._lock:
            self._conns.add(conn)
        try:
            while not self._stop.is_set():
                deadline = time.monotonic() + self._tcp_idle
                try:
                    n = struct.unpack("!H", _recv_exact(conn, 2, deadline))[0]
                    data = _recv_exact(conn, n, deadline)
                except OSError:
                    return
                reply = self.answer(data, f"{peer[0]}:{peer[1]}", "tcp")
                if reply is None:
                    return
                conn.settimeout(self._tcp_idle)
                conn.sendall(struct.pack("!H", len(reply)) + reply)
        except OSError:
            pass
        finally:
            with self._lock:
                self._conns.discard(conn)
            conn.close()
            self._tcp_slots.release()

    # --- the decision ---
    def answer(self, data: bytes, client: str, proto: str) -> bytes | None:
        """The reply to one query message (None: drop it). Fails closed: an internal error
        answers SERVFAIL, never a guess."""
        try:
            return self._answer(data, client, proto)
        except Exception as e:  # noqa: BLE001 - one query's bug must not stop the server
            if self.log is not None:
                try:
                    self.log({"time": now_iso(), "event": "dns", "proto": proto, "client": client,
                              "decision": "deny", "rule": NO_RULE, "error": f"internal: {type(e).__name__}: {e}"})
                except Exception:  # noqa: BLE001
                    pass
            if len(data) >= 12:
                mid, flags = struct.unpack_from("!HH", data, 0)
                if not flags & 0x8000:
                    return w.build_response(w.Message(id=mid, flags=flags & 0x7900), w.SERVFAIL)
            return None

    def _answer(self, data: bytes, client: str, proto: str) -> bytes | None:
        try:
            q = w.parse(data)
        except w.DNSFormatError:
            if len(data) < 12:
                return None
            mid, flags = struct.unpack_from("!HH", data, 0)
            if flags & 0x8000:
                return None
            return w.build_response(w.Message(id=mid, flags=flags & 0x7900), w.FORMERR)
        if q.qr:
            return None
        limit = w.udp_limit(q) if proto == "udp" else w.MAX_MESSAGE
        event: dict[str, Any] = {"time": now_iso(), "event": "dns", "proto": proto, "client": client}
        if q.opcode != 0:
            return self._reply(q, w.NOTIMP, [], event, "deny", "opcode not QUERY", limit)
        if len(q.questions) != 1:
            return self._reply(q, w.FORMERR, [], event, "deny", "not one question", limit)
        question = q.questions[0]
        event["name"] = question.name[:300]
        event["qtype"] = w.QTYPE_NAMES.get(question.qtype, str(question.qtype))
        if question.qclass != w.CLASS_IN:
            return self._reply(q, w.REFUSED, [], event, "deny", "class not IN", limit)
        try:
            # a dot inside a label would let the wire name differ from the matched one
            plain = question.name.isascii() and not any(b"." in lb for lb in question.labels)
            name = normalise_host(question.name) if plain else ""
        except RuleError:
            name = ""
        if not name:
            return self._reply(q, w.NXDOMAIN, [], event, "deny", "not a host name", limit)
        event["name"] = name
        decision = self.rules.decide(name, None)
        if not decision.allowed and self.ask is not None and not decision.matched:
            a = self.ask(Question(name, None, "dns", wait=self.ask_wait))
            event["approver"] = a.approver
            event["asked"] = a.decision
            if a.decision == "pending":
                event.update(decision="pending", rule=NO_RULE)
                self._log_event(event)
                return None   # unanswered: the client asks again, by then the person may have
            if a.allowed:
                decision = Decision(True, a.rule)
        if not decision.allowed:
            return self._reply(q, w.NXDOMAIN, [], event, "deny", decision.rule, limit)
        if question.qtype == w.ANY:
            return self._reply(q, w.NOTIMP, [], event, "deny", "ANY not answered", limit)
        if question.qtype in (w.AXFR, w.IXFR):
            return self._reply(q, w.REFUSED, [], event, "deny", "zone transfer", limit)
        if question.qtype not in (w.A, w.AAAA):
            return self._reply(q, w.NOERROR, [], event, "allow", decision.rule, limit)
        res = self.resolver.lookup(name, question.qtype)
        event["upstream"] = res.upstream
        if res.error:
            event["error"] = res.error
        event["answers"] = [str(a) for a in res.addresses]
        if res.refused:
            event["refused"] = [f"{why}" for _, why in res.refused]
        if res.pin_full:
            event["pins_full"] = True
        rtype = question.qtype
        answers = [(rtype, res.ttl, a.packed) for a in res.addresses]
        return self._reply(q, res.rcode, answers, event, "allow", decision.rule, limit)

    def _reply(self, q: w.Message, rcode: int, answers: list[tuple[int, int, bytes]],
               event: dict[str, Any], decision: str, rule: str, limit: int) -> bytes:
        event["decision"] = decision
        event["rule"] = rule if rule != NO_RULE else "no rule allows it"
        event["rcode"] = w.RCODE_NAMES.get(rcode, str(rcode))
        self._log_event(event)
        return w.build_response(q, rcode, answers, limit=limit)

    def _log_event(self, event: dict[str, Any]) -> None:
        if self.log is not None:
            try:
                self.log(event)
            except Exception:  # noqa: BLE001 - a failing log sink must not stop DNS
                pass
