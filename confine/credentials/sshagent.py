"""An ssh-agent for the agent that holds no key: the person's real agent stands
behind it, and the profile's `ssh_agent:` decides what passes.

The threat: whoever can talk to the person's real ssh-agent signs with every
key it holds, for any host and any purpose, and may add, remove or lock keys.
The agent inside gets this proxy instead (the supervisor serves it; the real
agent's socket stays out of reach of the agent, see runtime/sshagent.py), and:

- frames are read strictly (draft-miller-ssh-agent): a 4-byte length, at most
  MAX_MESSAGE bytes, every field inside its frame; anything malformed ends the
  connection; a message this proxy does not pass on is answered FAILURE;
- REQUEST_IDENTITIES lists only the keys the profile names (by the SHA256
  fingerprint of the public key blob, as `ssh-add -l` shows it);
- SIGN_REQUEST is passed on only for a listed key and only once `judge` allows
  the use: a login signature (the SSH userauth request, RFC 4252 section 7) is
  judged by the host key the client bound to this connection with
  `session-bind@openssh.com` (OpenSSH >= 8.9 sends it); the binding is passed
  to the real agent, which checks the host's signature over the session id,
  and believed only if the real agent accepted it. The host key is mapped to
  the profile's `hosts:` through the known_hosts files read by the supervisor
  outside (HostKeys): the client's own known_hosts is the agent's to write. A
  login signature with no binding, a session id other than the bound one, a
  binding made for agent forwarding, or a host key no listed host has, is
  refused: what cannot be judged is not signed. A file signature (`ssh-keygen
  -Y sign`, the SSHSIG format: git commit signing uses namespace "git") is its
  own use, allowed only for the profile's `namespaces:`. Any other data is refused;
- adding, removing, locking keys, smartcards and every extension but
  session-bind are refused (FAILURE) and logged;
- `decision: ask` puts each use to the person (`ask`, given by the wiring),
  `deny` refuses every signature. Each use is one event (fingerprint, host or
  namespace, decision); nothing secret is in it (the proxy never sees a key).

Bounded: MAX_CLIENTS connections at once, MAX_BINDS bindings per connection;
a connection that does not finish its frame in CLIENT_TIMEOUT is closed.
"""
from __future__ import annotations

import base64
import os
import select
import socket
import struct
import threading
from collections.abc import Callable, Iterable, Mapping
from hashlib import sha256
from typing import Any

from ..errors import printable
from ..policy.ssh_agent import DEFAULT_SSH_PORT, SshAgent
from ..record import dataclass, field

MAX_MESSAGE = 256 * 1024      # OpenSSH's own agent limit (AGENT_MAX_LEN)
MAX_CLIENTS = 64
MAX_BINDS = 16                # OpenSSH's AGENT_MAX_SESSION_IDS
CLIENT_TIMEOUT = 30.0         # seconds for the rest of a frame once it started
UPSTREAM_TIMEOUT = 30.0       # the real agent's answer (it may ask its own confirmation)
MAX_KNOWN_HOSTS = 4 << 20     # bytes read of one known_hosts file

# draft-miller-ssh-agent message numbers
FAILURE = 5
SUCCESS = 6
REQUEST_IDENTITIES = 11
IDENTITIES_ANSWER = 12
SIGN_REQUEST = 13
SIGN_RESPONSE = 14
EXTENSION = 27
REFUSED_NAMES = {1: "request-rsa-identities (SSH1)", 3: "rsa-challenge (SSH1)",
                 7: "add-rsa-identity (SSH1)", 8: "remove-rsa-identity (SSH1)",
                 9: "remove-all-rsa-identities (SSH1)", 17: "add-identity",
                 18: "remove-identity", 19: "remove-all-identities", 20: "add-smartcard-key",
                 21: "remove-smartcard-key", 22: "lock", 23: "unlock",
                 24: "add-rsa-id-constrained (SSH1)", 25: "add-identity-constrained",
                 26: "add-smartcard-key-constrained"}
SESSION_BIND = "session-bind@openssh.com"
USERAUTH_REQUEST = 50
SSHSIG_MAGIC = b"SSHSIG"
PUBLICKEY_METHODS = ("publickey", "publickey-hostbound-v00@openssh.com")


class Malformed(ValueError):
    """A frame or field that does not parse: the connection is closed."""


class Reader:
    """The SSH wire types (RFC 4251 section 5) inside one frame, bounds checked."""

    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise Malformed("field runs past the end of its message")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def byte(self) -> int:
        return self.take(1)[0]

    def uint32(self) -> int:
        return int(struct.unpack(">I", self.take(4))[0])

    def string(self) -> bytes:
        return self.take(self.uint32())

    def text(self) -> str:
        try:
            return self.string().decode("utf-8")
        except UnicodeDecodeError:
            raise Malformed("a name that is not UTF-8") from None

    def boolean(self) -> bool:
        return self.byte() != 0

    def end(self) -> None:
        if self.pos != len(self.data):
            raise Malformed("bytes after the last field")

    @property
    def rest(self) -> bytes:
        return self.data[self.pos:]


def sshstring(b: bytes) -> bytes:
    return struct.pack(">I", len(b)) + b


def frame(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


FAILURE_FRAME = frame(bytes([FAILURE]))


def recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise EOFError
        buf += chunk
    return bytes(buf)


def read_frame(sock: socket.socket, first_timeout: float | None = None) -> bytes:
    """One message body (EOFError at a clean end between messages; Malformed
    past MAX_MESSAGE or empty). The first byte may wait `first_timeout`; the rest
    of a frame must come within CLIENT_TIMEOUT."""
    sock.settimeout(first_timeout)
    head = sock.recv(4)
    if not head:
        raise EOFError
    sock.settimeout(CLIENT_TIMEOUT)
    if len(head) < 4:
        head += recv_exact(sock, 4 - len(head))
    (n,) = struct.unpack(">I", head)
    if n == 0 or n > MAX_MESSAGE:
        raise Malformed(f"a message of {n} bytes (at most {MAX_MESSAGE})")
    return recv_exact(sock, n)


def fingerprint(blob: bytes) -> str:
    """OpenSSH's SHA256 fingerprint of a public key blob."""
    return "SHA256:" + base64.b64encode(sha256(blob).digest()).decode().rstrip("=")


def key_type(blob: bytes) -> str:
    try:
        return printable(Reader(blob).text())[:60]
    except Malformed:
        return "?"


# --- the hosts' keys, from known_hosts files read outside ---
def _pattern_match(name: str, pattern: str) -> bool:
    """OpenSSH's match_pattern: `*` and `?` wildcards, case-insensitive."""
    import fnmatch
    return fnmatch.fnmatchcase(name.lower(), pattern.lower().replace("[", "[[]"))


def _hosts_match(field_: str, names: Iterable[str]) -> bool:
    """The known_hosts host field (comma list, `!` negation, `|1|salt|hash`) against
    the spellings of one host: a negated match refuses, else any match accepts."""
    names = list(names)
    if field_.startswith("|1|"):
        import hmac  # HMAC-SHA1 (OpenSSL): only for a hashed entry
        parts = field_.split("|")
        if len(parts) != 4:
            return False
        try:
            salt, want = base64.b64decode(parts[2]), base64.b64decode(parts[3])
        except ValueError:
            return False
        return any(hmac.compare_digest(hmac.new(salt, n.encode(), "sha1").digest(), want)
                   for n in names)
    hit = False
    for pat in field_.split(","):
        neg = pat.startswith("!")
        pat = pat[1:] if neg else pat
        if any(_pattern_match(n, pat) for n in names):
            if neg:
                return False
            hit = True
    return hit


def shown_host(host: str, port: int) -> str:
    if port == DEFAULT_SSH_PORT:
        return host
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _spellings(host: str, port: int) -> list[str]:
    return [host] if port == DEFAULT_SSH_PORT else [f"[{host}]:{port}"]


@dataclass
class HostKeys:
    """The key blobs each profile host is known by, and the revoked ones."""
    keys: dict[tuple[str, int], set[bytes]] = field(default_factory=dict)
    revoked: set[bytes] = field(default_factory=set)
    read: tuple[str, ...] = ()           # the files that were there

    @classmethod
    def load(cls, files: Iterable[str], hosts: Iterable[tuple[str, int]]) -> HostKeys:
        hosts = list(hosts)
        out = cls(keys={h: set() for h in hosts})
        read = []
        for path in files:
            try:
                with open(path, "rb") as f:
                    text = f.read(MAX_KNOWN_HOSTS).decode("utf-8", "replace")
            except OSError:
                continue
            read.append(path)
            for line in text.splitlines():
                out._line(line, hosts)
        out.read = tuple(read)
        return out

    def _line(self, line: str, hosts: list[tuple[str, int]]) -> None:
        parts = line.split()
        if not parts or parts[0].startswith("#"):
            return
        marker = None
        if parts[0].startswith("@"):
            marker, parts = parts[0], parts[1:]
        if len(parts) < 3:
            return
        try:
            blob = base64.b64decode(parts[2], validate=True)
        except ValueError:
            return
        if key_type(blob) != parts[1]:
            return
        if marker == "@revoked":
            self.revoked.add(blob)
            return
        if marker is not None:
            return      # @cert-authority: host certificates are not judged (refused)
        for h in hosts:
            if _hosts_match(parts[0], _spellings(*h)):
                self.keys[h].add(blob)

    def hosts_of(self, hostkey: bytes) -> list[tuple[str, int]]:
        if hostkey in self.revoked:
            return []
        return [h for h, ks in self.keys.items() if hostkey in ks]

    def unknown(self) -> list[tuple[str, int]]:
        return [h for h, ks in self.keys.items() if not ks - self.revoked]


# --- what a signature is for ---
@dataclass(frozen=True)
class Use:
    """One signature asked for: the key, what it is for, who asks."""
    key: str                     # fingerprint
    kind: str                    # "login", "file" or "unknown"
    host: str = ""               # login: the profile host(s) the bound key belongs to, shown
    dest: tuple[str, int] | None = None   # login: the first of them
    namespace: str = ""          # file: the SSHSIG namespace
    pid: int | None = None
    exe: str | None = None
    cmdline: str = ""

    @property
    def what(self) -> str:
        if self.kind == "login":
            return f"ssh login to {self.host}"
        if self.kind == "file":
            return f"file signature (namespace {self.namespace!r})"
        return "a signature of unknown data"


@dataclass
class Binding:
    hostkey: bytes
    session_id: bytes
    forwarding: bool


def parse_sshsig(data: bytes) -> str:
    """The namespace of an SSHSIG signed blob (PROTOCOL.sshsig); Malformed if not one."""
    r = Reader(data)
    if r.take(6) != SSHSIG_MAGIC:
        raise Malformed("not SSHSIG")
    namespace = r.text()
    r.string()          # reserved
    r.text()            # hash algorithm
    r.string()          # H(message)
    r.end()
    if not namespace:
        raise Malformed("SSHSIG with an empty namespace")
    return namespace


@dataclass(frozen=True)
class Userauth:
    session_id: bytes
    user: str
    method: str
    key: bytes
    hostkey: bytes | None      # publickey-hostbound-v00: the server's key, signed over too


def parse_userauth(data: bytes) -> Userauth:
    r = Reader(data)
    sid = r.string()
    if r.byte() != USERAUTH_REQUEST:
        raise Malformed("not a userauth request")
    user, service, method = r.text(), r.text(), r.text()
    if service != "ssh-connection" or method not in PUBLICKEY_METHODS:
        raise Malformed(f"userauth for {service!r} by {method!r}")
    if not r.boolean():
        raise Malformed("userauth without a signature flag")
    r.text()                 # algorithm
    key = r.string()
    hostkey = r.string() if method == PUBLICKEY_METHODS[1] else None
    r.end()
    return Userauth(sid, user, method, key, hostkey)


# --- the proxy ---
Emit = Callable[[Mapping[str, Any]], None]
Refused = Callable[[str, str, Mapping[str, Any]], None]      # key, line, event
Ask = Callable[[Use], tuple[bool, str]]                      # allowed, who decided
# the inode of the client's socket of the connection accept() will return next
PendingPeer = Callable[[socket.socket], "int | None"]
Who = Callable[[int], tuple[int | None, str | None, str]]   # client socket inode -> pid, exe, cmdline


class Proxy:
    """The agent's ssh-agent: serves `lsock` in threads of the supervisor until stop().
    upstream: the real agent's socket path (None: there is none, nothing is listed)."""

    def __init__(self, policy: SshAgent, upstream: str | None, host_keys: HostKeys, *,
                 emit: Emit, refused: Refused, ask: Ask | None = None,
                 who: Who | None = None, pending_peer: PendingPeer | None = None,
                 peer_uid: int | None = None) -> None:
        self.policy = policy
        self.upstream = upstream
        self.host_keys = host_keys
        self.keys = frozenset(policy.keys)
        self.emit, self.refused, self.ask = emit, refused, ask
        self.who = who or (lambda ino: (None, None, ""))
        self.pending_peer = pending_peer or (lambda lsock: None)
        self.peer_uid = peer_uid
        self._lock = threading.Lock()
        self._clients: set[socket.socket] = set()
        self._stop_r, self._stop_w = os.pipe2(os.O_CLOEXEC)
        self._thread: threading.Thread | None = None
        self._lsock: socket.socket | None = None

    # --- lifetime ---
    def start(self, lsock: socket.socket) -> None:
        lsock.setblocking(False)     # a connection gone between select and accept
        self._lsock = lsock
        self._thread = threading.Thread(target=self._accept, daemon=True, name="confine-ssh-agent")
        self._thread.start()

    def stop(self) -> None:
        os.write(self._stop_w, b"x")
        if self._thread is not None:
            self._thread.join(5)
        with self._lock:
            for c in self._clients:
                try:
                    c.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        if self._lsock is not None:
            self._lsock.close()
        os.close(self._stop_r)
        os.close(self._stop_w)

    def _accept(self) -> None:
        assert self._lsock is not None
        while True:
            r, _, _ = select.select([self._lsock.fileno(), self._stop_r], [], [])
            if self._stop_r in r:
                return
            try:
                peer = self.pending_peer(self._lsock)
            except Exception:  # noqa: BLE001 - who asks is then unknown, never guessed
                peer = None
            try:
                c, _ = self._lsock.accept()
                c.setblocking(True)
            except OSError:
                continue
            if self.peer_uid is not None and not self._peer_ok(c):
                c.close()
                continue
            with self._lock:
                if len(self._clients) >= MAX_CLIENTS:
                    c.close()
                    self.refused("ssh-agent clients", f"ssh-agent: more than {MAX_CLIENTS} "
                                 "connections at once: refused", {"event": "ssh-agent",
                                                                  "kind": "connect",
                                                                  "decision": "deny"})
                    continue
                self._clients.add(c)
            threading.Thread(target=self._client, args=(c, peer), daemon=True,
                             name="confine-ssh-agent-client").start()

    def _peer_ok(self, c: socket.socket) -> bool:
        try:
            _pid, uid, _gid = struct.unpack("3i", c.getsockopt(socket.SOL_SOCKET,
                                                               socket.SO_PEERCRED, 12))
        except OSError:
            return False
        return bool(uid == self.peer_uid)

    # --- one client ---
    def _client(self, c: socket.socket, peer: int | None) -> None:
        conn = _Conn(self, c, peer)
        try:
            conn.run()
        except (EOFError, OSError, Malformed):
            pass
        except Exception as e:  # noqa: BLE001 - a bug here closes the connection, never signs
            self.emit({"event": "ssh-agent", "kind": "error", "decision": "deny",
                       "reason": f"{type(e).__name__}: {e}"[:300]})
        finally:
            conn.close()
            with self._lock:
                self._clients.discard(c)
            c.close()


class _Conn:
    def __init__(self, proxy: Proxy, sock: socket.socket, peer: int | None = None) -> None:
        self.p = proxy
        self.sock = sock
        self.peer = peer
        self.up: socket.socket | None = None
        self.binds: list[Binding] = []
        self._who: tuple[int | None, str | None, str] | None = None

    def close(self) -> None:
        if self.up is not None:
            self.up.close()

    def run(self) -> None:
        while True:
            try:
                reply = self.handle(read_frame(self.sock))
            except Malformed as e:
                self.p.refused("ssh-agent malformed", f"ssh-agent: a malformed message ({e}): "
                               "connection closed", {"event": "ssh-agent", "kind": "malformed",
                                                     "decision": "deny", "reason": str(e)})
                raise
            self.sock.sendall(reply)

    def handle(self, body: bytes) -> bytes:
        t = body[0]
        if t == REQUEST_IDENTITIES:
            return self.identities(body)
        if t == SIGN_REQUEST:
            return self.sign(body)
        if t == EXTENSION:
            return self.extension(body)
        name = REFUSED_NAMES.get(t, f"message {t}")
        self.deny("op " + name, f"ssh-agent: {name} refused (the agent inside may only list "
                  "and use the keys the profile names)", {"kind": "refused", "op": name})
        return FAILURE_FRAME

    # --- the real agent ---
    def call(self, body: bytes) -> bytes:
        """Send one message to the real agent on this connection's own link to it
        (a binding holds for one connection), read its answer."""
        if self.p.upstream is None:
            raise ConnectionError("no agent")
        if self.up is None:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
            s.settimeout(UPSTREAM_TIMEOUT)
            try:
                s.connect(self.p.upstream)
            except OSError:
                s.close()
                raise
            self.up = s
        self.up.sendall(frame(body))
        return read_frame(self.up, UPSTREAM_TIMEOUT)

    def upstream_failed(self, e: BaseException) -> bytes:
        why = "no ssh-agent outside (SSH_AUTH_SOCK was not set)" if self.p.upstream is None \
            else f"the ssh-agent outside did not answer ({type(e).__name__})"
        self.deny("upstream", f"ssh-agent: {why}", {"kind": "upstream"})
        if self.up is not None:
            self.up.close()
            self.up = None
        return FAILURE_FRAME

    # --- the messages ---
    def identities(self, body: bytes) -> bytes:
        Reader(body[1:]).end()
        try:
            answer = self.call(body)
        except (OSError, EOFError, ConnectionError, Malformed) as e:
            if self.p.upstream is None:
                return frame(bytes([IDENTITIES_ANSWER]) + struct.pack(">I", 0))
            return self.upstream_failed(e)
        if answer[0] != IDENTITIES_ANSWER:
            return FAILURE_FRAME
        r = Reader(answer[1:])
        n = r.uint32()
        if n > MAX_MESSAGE // 8:
            raise Malformed("too many identities")
        kept = []
        for _ in range(n):
            blob, comment = r.string(), r.string()
            if fingerprint(blob) in self.p.keys:
                kept.append(sshstring(blob) + sshstring(comment))
        r.end()
        self.p.emit({"event": "ssh-agent", "kind": "list", "listed": len(kept),
                     "hidden": n - len(kept)})
        return frame(bytes([IDENTITIES_ANSWER]) + struct.pack(">I", len(kept)) + b"".join(kept))

    def extension(self, body: bytes) -> bytes:
        r = Reader(body[1:])
        name = r.text()
        if name != SESSION_BIND:
            shown = printable(name)[:80]
            self.deny(f"extension {shown}", f"ssh-agent: extension {shown!r} refused",
                      {"kind": "refused", "op": f"extension {shown}"})
            return FAILURE_FRAME
        hostkey, sid, _sig = r.string(), r.string(), r.string()
        forwarding = r.boolean()
        r.end()
        if len(self.binds) >= MAX_BINDS:
            self.deny("binds", f"ssh-agent: more than {MAX_BINDS} session bindings on one "
                      "connection: refused", {"kind": "session-bind"})
            return FAILURE_FRAME
        try:
            answer = self.call(body)
        except (OSError, EOFError, ConnectionError, Malformed) as e:
            return self.upstream_failed(e)
        if answer[0] == SUCCESS:
            # the real agent checked the host's signature over the session id
            self.binds.append(Binding(hostkey, sid, forwarding))
        else:
            self.p.emit({"event": "ssh-agent", "kind": "session-bind", "decision": "deny",
                         "hostkey": fingerprint(hostkey),
                         "reason": "the ssh-agent outside did not accept the binding"})
        return FAILURE_FRAME if answer[0] != SUCCESS else frame(bytes([SUCCESS]))

    def sign(self, body: bytes) -> bytes:
        r = Reader(body[1:])
        blob, data = r.string(), r.string()
        r.uint32()       # flags: passed on as they are
        r.end()
        fp = fingerprint(blob)
        pid, exe, cmdline = self.who()
        use = Use(key=fp, kind="unknown", pid=pid, exe=exe, cmdline=cmdline)
        if fp not in self.p.keys:
            return self.refuse(use, "the key is not in ssh_agent.keys",
                               f"allow it with `ssh_agent: {{keys: [{fp}]}}` in the profile")
        use, why = self.judge(use, blob, data)
        if why is not None:
            return self.refuse(use, why)
        decision = self.p.policy.decision
        approver = "profile"
        if decision == "deny":
            return self.refuse(use, "ssh_agent.decision is deny")
        if decision == "ask":
            if self.p.ask is None:
                return self.refuse(use, "nobody can be asked")
            ok, approver = self.p.ask(use)
            if not ok:
                return self.refuse(use, f"not approved ({approver})")
        try:
            answer = self.call(body)
        except (OSError, EOFError, ConnectionError, Malformed) as e:
            return self.upstream_failed(e)
        signed = answer[0] == SIGN_RESPONSE
        self.p.emit({**self.event(use), "decision": "allow" if signed else "error",
                     "approver": approver,
                     **({} if signed else {"reason": "the ssh-agent outside did not sign"})})
        return frame(answer) if signed else FAILURE_FRAME

    def judge(self, use: Use, blob: bytes, data: bytes) -> tuple[Use, str | None]:
        """What the signature is for, and why it is refused (None: the policy allows it)."""
        import dataclasses
        if data.startswith(SSHSIG_MAGIC):
            try:
                ns = parse_sshsig(data)
            except Malformed as e:
                return use, f"malformed file signature request ({e})"
            use = dataclasses.replace(use, kind="file", namespace=printable(ns)[:64])
            if ns not in self.p.policy.namespaces:
                return use, (f"namespace {ns!r} is not in ssh_agent.namespaces")
            return use, None
        try:
            ua = parse_userauth(data)
        except Malformed as e:
            return use, f"neither an ssh login nor a file signature ({e})"
        use = dataclasses.replace(use, kind="login")
        if ua.key != blob:
            return use, "the login names another key than the one asked to sign"
        if not self.binds:
            return use, ("the client bound no host to this connection (session-bind@openssh.com, "
                         "OpenSSH 8.9 or later): the destination cannot be judged")
        if any(b.forwarding for b in self.binds):
            return use, "agent forwarding out of the sandbox is not allowed"
        last = self.binds[-1]
        if last.session_id != ua.session_id:
            return use, "the login is for another session than the one bound"
        if ua.hostkey is not None and ua.hostkey != last.hostkey:
            return use, "the login names another host key than the one bound"
        hosts = self.p.host_keys.hosts_of(last.hostkey)
        use = dataclasses.replace(use, host=", ".join(shown_host(h, p) for h, p in hosts) or
                                  f"unknown host key {fingerprint(last.hostkey)}",
                                  dest=hosts[0] if hosts else None)
        if not hosts:
            return use, (f"the host key {fingerprint(last.hostkey)} is not known for any host "
                         "in ssh_agent.hosts (by the known_hosts files read outside)")
        return use, None

    # --- what is said ---
    def who(self) -> tuple[int | None, str | None, str]:
        if self._who is None:
            try:
                self._who = self.p.who(self.peer) if self.peer else (None, None, "")
            except Exception:  # noqa: BLE001 - who asks is shown as unknown, never guessed
                self._who = (None, None, "")
        return self._who

    def event(self, use: Use) -> dict[str, Any]:
        ev: dict[str, Any] = {"event": "ssh-agent", "kind": "sign", "key": use.key,
                              "use": use.kind}
        if use.host:
            ev["host"] = use.host
        if use.namespace:
            ev["namespace"] = use.namespace
        if use.pid is not None:
            ev["pid"] = use.pid
        if use.exe:
            ev["exe"] = use.exe
        if use.cmdline:
            ev["cmdline"] = use.cmdline
        return ev

    def refuse(self, use: Use, why: str, hint: str = "") -> bytes:
        self.p.refused(f"ssh-agent sign {use.key} {use.kind} {use.host or use.namespace}",
                       f"ssh-agent: {use.what} with {use.key} refused ({why})"
                       + (f": {hint}" if hint else ""),
                       {**self.event(use), "decision": "deny", "reason": why})
        return FAILURE_FRAME

    def deny(self, key: str, line: str, ev: dict[str, Any]) -> None:
        pid, exe, _ = self.who()
        self.p.refused(f"ssh-agent {key}", line, {"event": "ssh-agent", "decision": "deny",
                                                  **({"pid": pid} if pid else {}),
                                                  **({"exe": exe} if exe else {}), **ev})


__all__ = ["HostKeys", "Malformed", "Proxy", "Use", "fingerprint", "parse_sshsig",
           "parse_userauth", "read_frame", "shown_host"]
