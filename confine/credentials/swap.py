"""The placeholder swap: the gateway hands a TLS connection here (it has checked the
rules, the pins and that the ClientHello's SNI names the host); this module
terminates the agent's TLS with the run CA's leaf for that host, opens TLS to the
origin verifying it (system trust plus `network.upstream_ca`, SNI and host name),
and relays HTTP/1.1 requests one at a time, putting the real value of a credential
in place of its placeholder where, and only where, the binding allows.

The threats, and the answer to each:
- the agent sends the placeholder somewhere else to learn the value (another
  host, a path or method the binding does not name, a URL, a header that is not a
  credential header): the value is only ever written into `Authorization`
  (Bearer, token, Basic's user or password) or a header the binding names,
  toward a target it names; any other sighting of a placeholder in a request head
  refuses the request (403) and is logged as an attempted disclosure;
- a request that says one host and goes to another (domain fronting, a Host
  header naming a second tenant): every request's Host must be the SNI's name,
  which the gateway matched against confine's own DNS pins;
- request smuggling (a second request hidden in the first one's body, so it is
  never looked at): each head is parsed by `gateway.http1`, bodies are framed by
  Content-Length or chunked encoding (both at once, or any other coding, is
  refused) and the next head is read where the body ends;
- a fake origin: the upstream certificate must verify; if it does not, the agent
  gets 502 and nothing of the request is sent;
- the value in a log or an error: events name the credential, host, method and
  path only; `Binding`'s repr hides the value;
- a value that would inject header lines (CR, LF): never written; refused;
- the origin sending the value back (an echoing endpoint): put back to its
  placeholder in the response where the lengths agree, else the connection is cut.

A placeholder in a request body (a terminated connection's, or plain HTTP's
through `plain_body`) is an attempted disclosure too: bodies are streamed, not
buffered, and searched as they pass (`_Scanner`, which keeps the end of each piece
so a placeholder split across TLS records or chunks is found where it ends, before
that piece goes on); the request goes no further, the upstream connection is
dropped, the agent gets 403 if no answer has started. The one body that carries a
value is a login's token refresh (logins.py), to its endpoint only.

Not searched, and why that cannot leak a value: a compressed body
(Content-Encoding), what follows `Upgrade` (WebSocket frames, masked by the
client), HTTP/2 (never offered: ALPN says http/1.1 only). The value is only ever
written into a credential header of a request head toward a bound target, so
whatever is not searched carries at most a placeholder, never a value.

Plain HTTP never gets a value: `plain_refusal` finds a placeholder in a plain
request head so the gateway refuses it. After `Upgrade` (WebSocket) the connection
is relayed as bytes: nothing after it is swapped, so nothing after it can carry a
value.
"""
from __future__ import annotations

import base64
import binascii
import re
import select
import socket
import ssl
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, Protocol, cast

from ..errors import ConfineError
from ..gateway import http1
from ..gateway.rules import RuleError, normalise_host
from .binding import Binding, Target

if TYPE_CHECKING:
    from .ca import RunCA  # the type only: the parsing here needs no cryptography

CHUNK = 65536
RECV = 262144              # bytes taken from a socket at once (many TLS records)
MAX_CHUNK_LINE = 4096      # a chunk-size line (with extensions) or a trailer line
MAX_TRAILERS = 16384
MAX_SESSIONS = 256
Emit = Callable[[dict[str, Any]], None]
_CTL = re.compile(r"[\x00-\x1f\x7f]")


class Decide(Protocol):
    """The per-use decision (credentials/use.py `Judge.decide_use`: the binding's
    decision, asking the person, one event per use). Called only for a request whose
    target the binding names; True: this use may carry the value."""

    def __call__(self, binding: Binding, host: str, method: str, path: str,
                 process: int | str | None = None, *, port: int | None = None) -> bool: ...


class Counts(Protocol):
    up: int
    down: int


class Refusal(Exception):
    """This request is refused: `status` to the agent (0: none, the connection just
    ends), `reason` to the log."""

    def __init__(self, reason: str, status: int = 403) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status


def _clean_path(target: str) -> str:
    return target.split("?", 1)[0].split("#", 1)[0]


def _upstream_context(upstream_ca: Sequence[str]) -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_alpn_protocols(["http/1.1"])
    for path in upstream_ca:
        try:
            ctx.load_verify_locations(cafile=path)
        except (OSError, ssl.SSLError) as e:
            raise ConfineError(f"network.upstream_ca: {path}: cannot load ({e})") from None
    return ctx


class Swap:
    """The run's bindings, its CA and the upstream trust; `relay` serves one connection."""

    def __init__(self, bindings: Sequence[Binding], ca: RunCA, *, upstream_ca: Sequence[str] = (),
                 emit: Emit | None = None, decide: Decide | None = None,
                 upstream_context: ssl.SSLContext | None = None) -> None:
        self.bindings = tuple(bindings)
        self.ca = ca
        self.emit = emit
        # None: the binding's own decision, "ask" refused (nobody to ask); the run
        # passes its Judge (runtime/egress.py)
        self.decide = decide
        self.upstream = upstream_context or _upstream_context(upstream_ca)
        # TLS sessions of verified origins, resumed by the next connection to the same
        # (host, port): a full handshake with chain verification is most of what the
        # swap adds to a connection; a resumed one is a third of it
        self._sessions: OrderedDict[tuple[str, int], ssl.SSLSession] = OrderedDict()
        self._lock = threading.Lock()
        # an origin that echoes a request header back (a debugging endpoint, an error
        # page) would hand the agent the value: in responses it is put back to its
        # placeholder where that has the same length (the framing stays right), and
        # otherwise the connection ends
        self._echo = _values(self.bindings)
        # agents' logins (credentials/logins.py): a token refresh to the profile's endpoint
        # gets the refresh token in its body, its answer's new tokens made placeholders
        self.refreshers: list[Any] = [b.refresh for b in self.bindings if b.refresh is not None]
        for r in self.refreshers:
            r.emit = emit

    def refresher_for(self, host: str, port: int, method: str, path: str) -> Any:
        return next((r for r in self.refreshers if r.matches(host, port, method, path)), None)

    def add_binding(self, b: Binding) -> None:
        """A token a refresh answered with: swapped from now on, like the run's own."""
        with self._lock:
            self.bindings = self.bindings + (b,)
            if b.refresh is not None and b.refresh not in self.refreshers:
                self.refreshers.append(b.refresh)
            self._echo = _values(self.bindings)

    def terminates(self, name: str) -> bool:
        """Does a TLS connection to this name go through `relay`? Every named one once the
        run has a binding: a placeholder sent to a host without one must be seen to be
        refused (an address without a name carries no SNI and is relayed as it is)."""
        return bool(self.bindings)

    # --- plain HTTP: never a value ---
    def plain_refusal(self, head: http1.RequestHead, host: str, port: int) -> str | None:
        """Why a plain-HTTP request may not go (it carries a placeholder), or None."""
        try:
            self._scan(head, host, port, None, swap=False)
        except Refusal as r:
            return r.reason
        return None

    def plain_body(self, head: http1.RequestHead, host: str, port: int) -> Callable[[bytes], str | None]:
        """The search of a plain request's body, piece after piece in order: why the
        piece may not go on (a placeholder in it, or ending in it), or None."""
        scanner = self.body_scanner(head, host, port)

        def check(data: bytes) -> str | None:
            try:
                scanner.scan(data)
            except Refusal as r:
                return r.reason
            return None
        return check

    # --- one request head ---
    def rewrite(self, head: http1.RequestHead, host: str, port: int, pid: int | str | None = None) -> bytes:
        """The head to send upstream, values swapped in; Refusal if it may not go."""
        if head.method == "CONNECT":
            raise Refusal("CONNECT inside a terminated connection", 405)
        if not (head.target.startswith("/") or (head.target == "*" and head.method == "OPTIONS")):
            raise Refusal("only origin-form request targets are forwarded", 400)
        hh = head.host()
        if hh is None:
            raise Refusal("a request needs exactly one Host header", 400)
        try:
            hname, hport = http1.split_authority(hh, port)
            hname = normalise_host(hname)
        except (http1.BadRequest, RuleError) as e:
            raise Refusal(f"bad Host header: {e}", 400) from None
        if hname != host or hport != port:
            raise Refusal(f"Host {hh[:100]} is not the connection's host {host}:{port} (SNI)", 421)
        headers = self._scan(head, host, port, pid, swap=True)
        lines = [f"{head.method} {head.target} {head.version}"] + [f"{k}: {v}" for k, v in headers]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    def _scan(self, head: http1.RequestHead, host: str, port: int, pid: int | str | None, *,
              swap: bool) -> list[tuple[str, str]]:
        for b in self.bindings:
            if b.placeholder in head.target:
                raise self._disclosure(b, host, port, head, "the URL")
        out: list[tuple[str, str]] = []
        for k, v in head.headers:
            kl = k.lower()
            if kl == "authorization":
                v = self._authorization(v, host, port, head, pid, swap)
            else:
                for b in self.bindings:
                    if b.placeholder not in v:
                        continue
                    if not swap or kl not in b.headers:
                        raise self._disclosure(b, host, port, head, f"the header {kl}")
                    v = v.replace(b.placeholder, self._value(b, host, port, head, pid, kl))
            out.append((k, v))
        return out

    def _authorization(self, v: str, host: str, port: int, head: http1.RequestHead, pid: int | str | None,
                       swap: bool) -> str:
        scheme, sp, cred = v.partition(" ")
        s = scheme.lower()
        where = f"the header authorization ({s})"
        if s == "basic" and sp:
            try:
                raw = base64.b64decode(cred.strip(), validate=True).decode("utf-8")
            except (binascii.Error, UnicodeDecodeError):
                raw = ""
            hit = [b for b in self.bindings if b.placeholder in raw]
            if hit:
                if not swap:
                    raise self._disclosure(hit[0], host, port, head, where)
                for b in hit:
                    raw = raw.replace(b.placeholder, self._value(b, host, port, head, pid, "authorization"))
                return f"{scheme} {base64.b64encode(raw.encode('utf-8')).decode('ascii')}"
        for b in self.bindings:
            if b.placeholder not in v:
                continue
            if not swap or s not in ("bearer", "token") or not sp:
                raise self._disclosure(b, host, port, head, where)
            cred = cred.replace(b.placeholder, self._value(b, host, port, head, pid, "authorization"))
            v = f"{scheme} {cred}"
        return v

    def _value(self, b: Binding, host: str, port: int, head: http1.RequestHead, pid: int | str | None,
               header: str) -> str:
        path = _clean_path(head.target)
        if not any(t.matches(host, port, head.method, path) for t in b.targets):
            raise self._disclosure(b, host, port, head, f"the header {header}")
        why = None
        if _CTL.search(b.value) or not b.value.isascii():
            why = "the value holds control or non-ASCII characters (it would change the request's lines)"
            self._log(b, host, port, head, header, "deny", why)
        elif self.decide is not None:
            # the Judge decides (ask included) and logs the use itself
            if not self.decide(b, host, head.method, head.target, pid, port=port):
                why = "not allowed (see the credential_use event)"
        else:
            if b.decision == "ask":
                why = "decision ask, and nobody to ask"
            elif b.decision != "allow":
                why = f"decision {b.decision}"
            self._log(b, host, port, head, header, "deny" if why else "allow", why)
        if why:
            raise Refusal(f"credential {b.name} toward {host}:{port}: {why}")
        return b.value

    def _disclosure(self, b: Binding, host: str, port: int, head: http1.RequestHead, where: str) -> Refusal:
        reason = (f"attempted disclosure: the placeholder of {b.name} in {where} toward {host}:{port} "
                  f"{head.method} {_clean_path(head.target)[:200]} (it may go to "
                  f"{', '.join(_shown(t) for t in b.targets) or 'nowhere'} only)")
        self._log(b, host, port, head, where, "deny", reason, disclosure=True)
        return Refusal(reason)

    def _log(self, b: Binding, host: str, port: int, head: http1.RequestHead, where: str,
             decision: str, reason: str | None, disclosure: bool = False) -> None:
        if self.emit is None:
            return
        ev: dict[str, Any] = {"event": "credential_use", "name": b.name, "host": host,
                              "port": port, "method": head.method, "path": _clean_path(head.target)[:500],
                              "where": where, "decision": decision}
        if reason:
            ev["reason"] = reason
        if disclosure:
            ev["disclosure"] = True
        try:
            self.emit(ev)
        except Exception:  # noqa: BLE001 - a failing log sink must not stop the relay
            pass

    # --- one connection ---
    def relay(self, counts: Counts, client: socket.socket, first: bytes, upstream: socket.socket,
              host: str, port: int, ev: dict[str, Any], *, idle: float = 300.0,
              handshake_timeout: float = 10.0, stop: threading.Event | None = None) -> None:
        """Serve one connection: `first` is what the gateway already read of the client
        (the ClientHello), `upstream` a TCP connection to a pinned address of `host`.
        Returns when either side is done; a refused request ends the connection with
        `ev` saying why (decision deny)."""
        ev["terminated"] = True
        deadline = time.monotonic() + handshake_timeout
        for s in (client, upstream):
            # handshake flights and records go out as made: no waiting for an ACK
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self._lock:
            session = self._sessions.get((host, port))
        origin = _End(upstream, self.upstream, server_hostname=host, session=session)
        agent = _End(client, self.ca.server_context(host), server_side=True)
        agent.inc.write(first)
        try:
            # the origin's ClientHello goes out first: the origin works on it while
            # the agent's handshake is done here (the two overlap, not add up)
            origin.step()
        except (ssl.SSLError, OSError):
            pass          # said by the handshake below, after the agent's
        agent.handshake(deadline)
        try:
            origin.handshake(deadline)
        except ssl.SSLCertVerificationError as e:
            why = f"the certificate of {host} did not verify: {e.verify_message or e.reason}"
            ev.update(decision="deny", reason=why)
            agent.refuse(502, why)
            return
        except (ssl.SSLError, OSError) as e:
            why = f"TLS to {host} failed: {e}"
            ev.update(decision="deny", reason=why)
            agent.refuse(502, why)
            return
        pid = ev.get("pid")
        requests = _Requests(self, host, port, pid if isinstance(pid, int) else None)
        for s in (client, upstream):
            s.settimeout(idle)
        try:
            self._serve(agent, origin, requests, counts, ev, idle, stop)
        except Refusal as r:
            ev.update(decision="deny", reason=r.reason)
            if r.status:
                agent.refuse(r.status, r.reason)
            # else: mid-response; the connection ends without close_notify, so the
            # client sees a cut, not a complete answer
        finally:
            # a resumed session is good for the next connection too: taking it again
            # would cost a copy (CPython copies a session through DER both ways, 0.2-0.4
            # ms each, on this machine), so only a new one is kept
            got = None if origin.obj.session_reused else origin.obj.session
            if got is not None:
                with self._lock:
                    self._sessions[(host, port)] = got
                    self._sessions.move_to_end((host, port))
                    while len(self._sessions) > MAX_SESSIONS:
                        self._sessions.popitem(last=False)

    def _serve(self, agent: _End, origin: _End, requests: _Requests, counts: Counts, ev: dict[str, Any],
               idle: float, stop: threading.Event | None) -> None:
        client, upstream = agent.sock, origin.sock
        host, port = requests.host, requests.port
        echo = _Scanner(self._echo, lambda b, replaced: self._log_echo(b, host, port, replaced))
        poller = select.poll()
        poller.register(client.fileno(), select.POLLIN)
        poller.register(upstream.fileno(), select.POLLIN)
        agent_open = True
        while True:
            if stop is not None and stop.is_set():
                ev.update(decision="deny", reason="gateway stopped")
                return
            if agent_open:
                # what is already decrypted (the request sent with the handshake, too)
                done = self._pump_agent(agent, origin, requests, counts)
                if done:
                    agent_open = False
                    poller.unregister(client.fileno())
                    try:
                        upstream.shutdown(socket.SHUT_WR)
                    except OSError:
                        pass
            if self._pump_origin(origin, agent, counts, echo, requests):
                agent.close_notify()
                return
            events = poller.poll(int(idle * 1000))
            if not events:
                ev["reason"] = "idle timeout"
                return
            for fd, _e in events:
                if fd == client.fileno():
                    agent.fill()
                else:
                    origin.fill()

    @staticmethod
    def _pump_agent(agent: _End, origin: _End, requests: _Requests, counts: Counts) -> bool:
        """Plaintext from the agent, judged and sent on; True at the agent's end."""
        while True:
            data = agent.read()
            if data is None:
                return False
            if not data:
                return True
            out = requests.feed(data)
            if out:
                origin.write(out)
                counts.up += len(out)

    def _log_echo(self, b: Binding, host: str, port: int, replaced: bool) -> Refusal | None:
        what = "replaced by the placeholder" if replaced else "ended"
        if self.emit is not None:
            try:
                self.emit({"event": "credential_use", "name": b.name, "host": host, "port": port,
                           "where": "a response", "decision": "allow" if replaced else "deny",
                           "reason": f"the origin sent the value back: {what}"})
            except Exception:  # noqa: BLE001 - a failing log sink must not stop the relay
                pass
        return None if replaced else Refusal(f"the origin {host} sent the value of {b.name} back", 0)

    def body_scanner(self, head: http1.RequestHead, host: str, port: int) -> _Scanner:
        """The search of one request's body for every placeholder of the run (those a
        refresh added too): a body never gets a value, so a placeholder in one is an
        attempt to send it where the swap does not look."""
        with self._lock:
            needles = [(b, b.placeholder.encode("utf-8", "replace"), None) for b in self.bindings]
        return _Scanner(needles, lambda b, _r: self._disclosure(b, host, port, head, "the body"))

    @staticmethod
    def _pump_origin(origin: _End, agent: _End, counts: Counts, echo: _Scanner,
                     requests: _Requests | None = None) -> bool:
        """Plaintext from the origin to the agent (the value, if echoed, put back to the
        placeholder); True at the origin's end. Each record is decrypted into one buffer
        and encrypted from it (no copy in Python), and what is there goes out in one send."""
        buf, view = origin.buf, origin.view
        end = False
        while True:
            try:
                # with a buffer, read() returns the count (typeshed says bytes)
                n = cast(int, origin.obj.read(CHUNK, buf))
            except ssl.SSLWantReadError:
                if origin.out.pending:
                    origin.flush()
                break
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                end = True
                break
            if not n:
                end = True
                break
            if requests is not None and requests.refreshing is not None:
                # a token refresh's answer: held whole, then given with new placeholders
                # (or not at all): the real new tokens never go to the agent
                out = requests.refresh_answer(bytes(buf[:n]), False)
                if out is None:
                    continue
                agent.obj.write(out)
                counts.down += len(out)
                end = True
                break
            echo.scan(buf, n)
            agent.obj.write(view[:n])
            if requests is not None:
                requests.answered = True
            counts.down += n
        if end and requests is not None and requests.refreshing is not None:
            out = requests.refresh_answer(b"", True)
            if out:
                agent.obj.write(out)
        agent.flush()
        return end


def _shown(t: Target) -> str:
    s = t.host + (f":{t.port}" if t.port is not None else "")
    if t.methods:
        s += " " + "|".join(sorted(t.methods))
    if t.paths:
        s += " " + "|".join(t.paths)
    return s


class _End:
    """One TLS side over memory BIOs (the agent's first bytes were read by the gateway
    already, so OpenSSL cannot read them from the socket itself)."""

    def __init__(self, sock: socket.socket, ctx: ssl.SSLContext, *, server_side: bool = False,
                 server_hostname: str | None = None, session: ssl.SSLSession | None = None) -> None:
        self.sock = sock
        self.inc, self.out = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.obj = ctx.wrap_bio(self.inc, self.out, server_side=server_side, server_hostname=server_hostname,
                                session=session)
        self.eof = False
        self.buf = bytearray(CHUNK)
        self.view = memoryview(self.buf)

    def flush(self) -> None:
        data = self.out.read()
        if data:
            self.sock.sendall(data)

    def fill(self) -> None:
        try:
            data = self.sock.recv(RECV)
        except (ConnectionResetError, BrokenPipeError):
            data = b""
        except BlockingIOError:
            return
        if data:
            self.inc.write(data)
        else:
            self.eof = True
            self.inc.write_eof()

    def step(self) -> None:
        """As much of the handshake as can be done without waiting (the ClientHello)."""
        try:
            self.obj.do_handshake()
        except ssl.SSLWantReadError:
            pass
        self.flush()

    def handshake(self, deadline: float) -> None:
        while True:
            try:
                self.obj.do_handshake()
                self.flush()
                return
            except ssl.SSLWantReadError:
                self.flush()
                left = deadline - time.monotonic()
                if left <= 0 or self.eof:
                    raise ConnectionError("TLS handshake not completed") from None
                self.sock.settimeout(left)
                try:
                    self.fill()
                except socket.timeout:
                    raise ConnectionError("TLS handshake timed out") from None

    def read(self) -> bytes | None:
        """Plaintext there now; None if more bytes must arrive first; b"" at the end."""
        try:
            return self.obj.read(CHUNK)
        except ssl.SSLWantReadError:
            if self.out.pending:
                self.flush()    # post-handshake messages (tickets, key updates) go out too
            return None
        except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
            return b""

    def write(self, data: bytes) -> None:
        self.obj.write(data)
        self.flush()

    def close_notify(self) -> None:
        try:
            self.obj.unwrap()
        except (ssl.SSLError, OSError):
            pass
        try:
            self.flush()
        except OSError:
            pass

    def refuse(self, status: int, reason: str) -> None:
        body = f"confine: {reason}\n".encode("utf-8", "replace")
        name = {400: "Bad Request", 403: "Forbidden", 405: "Method Not Allowed", 421: "Misdirected Request",
                431: "Request Header Fields Too Large", 501: "Not Implemented", 502: "Bad Gateway"}.get(status,
                                                                                                    "Error")
        try:
            self.write(f"HTTP/1.1 {status} {name}\r\nContent-Type: text/plain; charset=utf-8\r\n"
                       f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode("ascii") + body)
        except (ssl.SSLError, OSError):
            return
        self.close_notify()


def _values(bindings: Sequence[Binding]) -> list[tuple[Binding, bytes, bytes | None]]:
    """What a response is searched for: each value, with its placeholder to put back."""
    return [(b, b.value.encode("utf-8", "replace"), b.placeholder.encode("utf-8", "replace"))
            for b in bindings if b.value]


class _Scanner:
    """One stream searched for byte strings: the values in the origin's answers (put back
    to their placeholders where the lengths agree), the placeholders in the agent's
    request bodies (refused). The last (longest - 1) bytes seen are kept, so a string
    split across pieces (TLS records, reads, the chunks of a chunked body, the chunk-size
    line between them) is found in the piece where it ends, before that piece goes on:
    the far side gets at most a part of one, never all of it.

    `needles`: (binding, the bytes to find, what to put in their place or None);
    `hit(binding, replaced)`: logs a sighting and gives the Refusal to raise (None
    when the bytes were replaced)."""

    def __init__(self, needles: Sequence[tuple[Binding, bytes, bytes | None]],
                 hit: Callable[[Binding, bool], Refusal | None]) -> None:
        self.needles = [n for n in needles if n[1]]
        self.hit = hit
        self.keep = max((len(n) for _, n, _ in self.needles), default=1) - 1
        self.tail = b""

    def scan(self, buf: bytearray | bytes, n: int | None = None) -> None:
        """Search `buf[:n]` (a bytearray is changed in place where a value is put back);
        raises the Refusal of a sighting that is not replaced."""
        if not self.needles:
            return
        n = len(buf) if n is None else n
        for b, needle, swap_to in self.needles:
            if self.tail and needle in self.tail + bytes(buf[:min(n, len(needle) - 1)]):
                self._raise(b)            # split: its start has gone on already
            i = buf.find(needle, 0, n)
            while i >= 0:
                if swap_to is None or len(swap_to) != len(needle) or not isinstance(buf, bytearray):
                    self._raise(b)
                buf[i:i + len(needle)] = swap_to
                self.hit(b, True)
                i = buf.find(needle, i + len(needle), n)
        k = self.keep
        self.tail = bytes(buf[n - k:n]) if n >= k else (self.tail + bytes(buf[:n]))[max(0, len(self.tail) + n - k):]

    def _raise(self, b: Binding) -> NoReturn:
        r = self.hit(b, False)
        raise r if r is not None else Refusal(f"{b.name} seen", 0)


class _Requests:
    """The agent's byte stream cut into requests: each head judged (`Swap.rewrite`),
    each body framed by Content-Length or chunked encoding and searched for the
    placeholders (the decoded chunk data and the trailers, not the framing), passed on
    unchanged where none is in it."""

    def __init__(self, swap: Swap, host: str, port: int, pid: int | None) -> None:
        self.swap, self.host, self.port, self.pid = swap, host, port, pid
        self.buf = b""
        self.state = "head"      # head | body | size | data | crlf | trailer | raw | refresh | done
        self.left = 0
        self.trailers = 0
        self.count = 0           # request heads seen on this connection
        self.refreshing: Any = None   # the Refresher whose answer is awaited
        self._refresh_head: http1.RequestHead | None = None
        self._answer = b""
        self.body: _Scanner | None = None     # the current request's body search
        # a byte of an answer went to the agent since the last head: a refusal now cannot
        # be a 403 of its own (it would land inside that answer), the connection just ends
        self.answered = False

    def feed(self, data: bytes) -> bytes:
        if self.state == "raw":
            return data
        if self.state == "done":
            return b""           # after a refresh the connection ends with its answer
        self.buf += data
        out: list[bytes] = []
        while self.buf:
            if self.state == "head":
                end = http1.head_end(self.buf)
                if end < 0:
                    if len(self.buf) >= http1.MAX_HEAD:
                        raise Refusal("request head too large", 431)
                    break
                try:
                    head = http1.parse_head(self.buf[:end])
                except http1.BadRequest as e:
                    raise Refusal(str(e), e.status) from None
                self.count += 1
                r = self.swap.refresher_for(self.host, self.port, head.method,
                                            _clean_path(head.target))
                if r is not None:
                    self._refresh_start(r, head)
                    self.buf = self.buf[end:]
                    continue
                out.append(self.swap.rewrite(head, self.host, self.port, self.pid))
                self.buf = self.buf[end:]
                self._body(head)
                self.body = self.swap.body_scanner(head, self.host, self.port)
                self.answered = False
            elif self.state == "refresh":
                if len(self.buf) < self.left:
                    break
                out.append(self._refresh_request(self.buf[:self.left]))
                self.buf = b""
                self.state = "done"
            elif self.state == "done":
                self.buf = b""
            elif self.state == "raw":
                out.append(self.buf)
                self.buf = b""
            elif self.state in ("body", "data"):
                take = self.buf[:self.left]
                self._search(take)
                out.append(take)
                self.buf = self.buf[len(take):]
                self.left -= len(take)
                if not self.left:
                    self.state = "head" if self.state == "body" else "crlf"
            elif self.state == "crlf":
                if len(self.buf) < 2:
                    break
                if self.buf[:2] != b"\r\n":
                    raise Refusal("bad chunked encoding (no CRLF after a chunk)", 400)
                out.append(self.buf[:2])
                self.buf = self.buf[2:]
                self.state = "size"
            else:   # size | trailer: one line
                i = self.buf.find(b"\r\n")
                if i < 0:
                    if len(self.buf) > MAX_CHUNK_LINE:
                        raise Refusal("bad chunked encoding (line too long)", 400)
                    break
                line = self.buf[:i]
                if self.state == "trailer":
                    self._search(self.buf[:i + 2])
                out.append(self.buf[:i + 2])
                self.buf = self.buf[i + 2:]
                if self.state == "size":
                    size = line.split(b";", 1)[0].strip(b" \t")
                    if not size or len(size) > 15 or any(c not in b"0123456789abcdefABCDEF" for c in size):
                        raise Refusal("bad chunked encoding (chunk size)", 400)
                    self.left = int(size, 16)
                    self.state = "data" if self.left else "trailer"
                    self.trailers = 0
                else:
                    self.trailers += i + 2
                    if self.trailers > MAX_TRAILERS:
                        raise Refusal("bad chunked encoding (trailers too large)", 400)
                    if not line:
                        self.state = "head"
        return b"".join(out)

    def _search(self, data: bytes) -> None:
        assert self.body is not None
        try:
            self.body.scan(data)
        except Refusal as r:
            if self.answered:
                r.status = 0
            raise

    def _refresh_start(self, r: Any, head: http1.RequestHead) -> None:
        from .logins import MAX_REFRESH_BODY
        if self.count != 1:
            raise Refusal("a token refresh must be the first request on its connection", 421)
        try:
            n = head.content_length()
        except http1.BadRequest as e:
            raise Refusal(f"token refresh: {e}", 411) from None
        if not 0 < n <= MAX_REFRESH_BODY:
            raise Refusal(f"token refresh: a body of 1 to {MAX_REFRESH_BODY} bytes", 413)
        self.refreshing, self._refresh_head = r, head
        self.left, self.state = n, "refresh"

    def _refresh_request(self, body: bytes) -> bytes:
        from .logins import RefreshError
        r, head = self.refreshing, self._refresh_head
        assert head is not None
        try:
            new: bytes = r.request(body)
        except RefreshError as e:
            raise Refusal(f"token refresh of login {r.login.name}: {e}") from None
        # the answer must be plain and the last on the connection: it is read whole
        keep = tuple((k, v) for k, v in head.headers if k.lower() not in (
            "content-length", "accept-encoding", "connection", "keep-alive", "te"))
        head2 = http1.RequestHead(head.method, head.target, head.version, keep + (
            ("Content-Length", str(len(new))), ("Accept-Encoding", "identity"),
            ("Connection", "close")), head.size)
        out = self.swap.rewrite(head2, self.host, self.port, self.pid)
        if self.swap.emit is not None:
            self.swap.emit({"event": "credential_use", "name": f"{r.login.name}:refresh",
                            "host": self.host, "port": self.port, "method": head.method,
                            "path": _clean_path(head.target), "where": "the body",
                            "decision": "allow"})
        return out + new

    def refresh_answer(self, data: bytes, end: bool) -> bytes | None:
        """The token endpoint's answer once whole (None: not yet): its new tokens as new
        placeholders; a Refusal (the connection cut) where it cannot be judged."""
        from .logins import MAX_REFRESH_BODY, RefreshError
        self._answer += data
        if len(self._answer) > MAX_REFRESH_BODY + http1.MAX_HEAD:
            raise Refusal("token refresh: the answer is too large", 0)
        got = _whole_response(self._answer, end)
        if got is None:
            if end:
                raise Refusal("token refresh: the answer ended early", 0)
            return None
        status, headers, body = got
        r, self.refreshing = self.refreshing, None
        if status == 200:
            if any(k.lower() == "content-encoding" and v.strip().lower() != "identity"
                   for k, v in headers):
                raise Refusal("token refresh: an encoded answer (asked for identity)", 0)
            try:
                body = r.answer(body, self.swap.add_binding)
            except (RefreshError, OSError, ConfineError) as e:
                raise Refusal(f"token refresh of login {r.login.name}: {e}", 0) from None
        # no value at all (a new one, or one the run already had) goes to the agent
        seen = body + "\n".join(f"{k}: {v}" for k, v in headers).encode("latin-1", "replace")
        if any(b.value.encode() in seen for b in self.swap.bindings):
            raise Refusal("token refresh: the answer holds a value", 0)
        keep = [(k, v) for k, v in headers if k.lower() not in (
            "content-length", "transfer-encoding", "connection", "keep-alive")]
        lines = [f"HTTP/1.1 {status} {'OK' if status == 200 else 'Error'}"] + [
            f"{k}: {v}" for k, v in keep] + [f"Content-Length: {len(body)}", "Connection: close"]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body

    def _body(self, head: http1.RequestHead) -> None:
        te = head.get("transfer-encoding")
        if te:
            if head.get("content-length"):
                raise Refusal("a body framed by both Content-Length and Transfer-Encoding", 400)
            if len(te) != 1 or te[0].strip().lower() != "chunked":
                raise Refusal("only chunked Transfer-Encoding is forwarded", 501)
            self.state = "size"
        else:
            try:
                n = head.content_length()
            except http1.BadRequest as e:
                raise Refusal(str(e), e.status) from None
            self.left = n
            self.state = "body" if n else "head"
        if head.get("upgrade"):
            # the origin may switch protocols: what follows is not HTTP/1.1 and gets no
            # swap (so carries no value), and is relayed as it is
            if self.state != "head":
                raise Refusal("a request with both Upgrade and a body", 501)
            self.state = "raw"


def _whole_response(buf: bytes, end: bool) -> tuple[int, list[tuple[str, str]], bytes] | None:
    """(status, headers, body) of one HTTP/1.1 response once all of it is in `buf`
    (Content-Length, chunked, or to the end of the connection); None if not yet."""
    i = buf.find(b"\r\n\r\n")
    if i < 0:
        return None
    lines = buf[:i].decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise Refusal("token refresh: a malformed answer", 0)
    headers = []
    for ln in lines[1:]:
        k, sep, v = ln.partition(":")
        if not sep:
            raise Refusal("token refresh: a malformed answer", 0)
        headers.append((k.strip(), v.strip()))
    rest = buf[i + 4:]
    te = [v.lower() for k, v in headers if k.lower() == "transfer-encoding"]
    cl = [v for k, v in headers if k.lower() == "content-length"]
    if te:
        if te != ["chunked"]:
            raise Refusal("token refresh: an answer's Transfer-Encoding", 0)
        body, pos = b"", 0
        while True:
            j = rest.find(b"\r\n", pos)
            if j < 0:
                return None
            size_s = rest[pos:j].split(b";", 1)[0].strip()
            try:
                size = int(size_s, 16)
            except ValueError:
                raise Refusal("token refresh: bad chunked encoding", 0) from None
            if size == 0:
                return (int(parts[1]), headers, body) if rest.find(b"\r\n\r\n", j) >= 0 \
                    or rest[j:j + 4] == b"\r\n\r\n" else None
            if len(rest) < j + 2 + size + 2:
                return None
            body += rest[j + 2:j + 2 + size]
            pos = j + 2 + size + 2
    if cl:
        if len(set(cl)) != 1 or not cl[0].isdigit():
            raise Refusal("token refresh: bad Content-Length", 0)
        n = int(cl[0])
        return (int(parts[1]), headers, rest[:n]) if len(rest) >= n else None
    return (int(parts[1]), headers, rest) if end else None


__all__ = ["Decide", "Refusal", "Swap"]
