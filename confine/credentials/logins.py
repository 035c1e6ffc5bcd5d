"""Agents' login files (policy/logins.py): the agent gets a copy with each named
secret replaced by a placeholder, the gateway swaps the placeholders back toward
the hosts the profile names.

The threats:
- the agent reading the real tokens: in the agent's mount namespace, the copy is
  bound over its path (no Landlock deny: the file's directory is usually a state
  root, which a deny inside would carve, so the agent could make no new name there;
  runtime/child.py `_readonly_host`); without a mount namespace
  there is no copy to give, so the run is refused rather than the login dropped
  silently or the real file shown;
- a copy that still holds a value (a secret the profile did not name, a value
  repeated elsewhere in the file): every named value is searched for in the
  copy before it is written, and the run refused if one is left;
- a file someone else controls (they would choose the tokens the agent's
  requests carry): the same owner and mode checks as `from_file`, the agent's
  own account being an owner too (its login, read by root for `--user`).

A JWT (Codex's id_token) keeps its header and claims readable (the agent reads
its plan and account from them) and only its signature becomes a placeholder:
the claims are not secret, the signature is what makes it a credential.
"""
from __future__ import annotations

import datetime
import json
import os
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from ..errors import ConfineError, printable
from ..policy.logins import Login, LoginToken
from ..record import dataclass, field
from . import redo, sources
from .binding import Binding

DIR = ".confine-logins"           # in the run's TMPDIR
Warn = Callable[[str], None]
Emit = Callable[[dict[str, object]], None]


@dataclass
class Copy:
    """One login's copy: written into the run's TMPDIR, bound over `target` inside."""
    login: str
    target: str                        # the real file's path (the agent's view)
    text: str = field(repr=False)      # the copy, placeholders only
    bindings: tuple[Binding, ...] = ()
    path: str = ""                     # where the copy was written


def binding_name(login: Login, tok: LoginToken) -> str:
    return f"{login.name}:{'.'.join(tok.path)}"


def _lookup(obj: Any, path: tuple[str, ...]) -> tuple[dict[str, Any] | None, Any]:
    """(the object holding the last key, its value); (None, None) where absent."""
    cur = obj
    for k in path[:-1]:
        if not isinstance(cur, dict) or not isinstance(cur.get(k), dict):
            return None, None
        cur = cur[k]
    if not isinstance(cur, dict) or path[-1] not in cur:
        return None, None
    return cur, cur[path[-1]]


def jwt_placeholder(value: str) -> str | None:
    """header.payload.<placeholder of the signature>, or None if it is no JWT."""
    parts = value.split(".")
    if len(parts) != 3 or not all(parts[:2]) or len(parts[2]) < sources.MIN_LENGTH:
        return None
    return f"{parts[0]}.{parts[1]}.{sources.placeholder(parts[2])}"


def make_copy(login: Login, text: str) -> Copy:
    """The placeholder copy of one login file's text (JSON) and its Bindings."""
    what = f"login {login.name} ({printable(login.file)})"
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        raise sources.SourceError(f"{what}: not JSON ({e.msg}, line {e.lineno})") from None
    bindings: list[Binding] = []
    for tok in login.tokens:
        holder, value = _lookup(obj, tok.path)
        if holder is None or value is None or value == "":
            continue
        name = binding_name(login, tok)
        if not isinstance(value, str):
            raise sources.SourceError(f"{what}: {'.'.join(tok.path)} is not a string")
        v = sources.check_value(name, what, value)
        # jwt: a token that is no JWT (an opaque one) gets the ordinary placeholder
        ph = (jwt_placeholder(v) if tok.jwt else None) or sources.placeholder(v)
        holder[tok.path[-1]] = ph
        refresher = None
        if login.refresh is not None and login.refresh.token == tok.path:
            refresher = Refresher(login, v)
            refresher.placeholders.append(ph)
        bindings.append(Binding(name=name, placeholder=ph, value=v, targets=tok.targets,
                                headers=tok.headers, refresh=refresher))
    out = json.dumps(obj, indent=2) + "\n"
    for b in bindings:
        secret = b.value.rsplit(".", 1)[-1] if b.placeholder.count(".") >= 2 and \
            b.value.count(".") == 2 else b.value
        if secret in out:
            raise sources.SourceError(f"{what}: the value of {'.'.join(b.name.split(':')[1:])} "
                                      "appears elsewhere in the file too: refusing to give "
                                      "the agent a copy that holds it")
    return Copy(login=login.name, target=login.file, text=out, bindings=tuple(bindings))


def start(logins: tuple[Login, ...], *, uid: int, gid: int, tmp: str, mount_ns: bool,
          warn: Warn, emit: Emit, grants: Iterable[tuple[str, str]],
          denied: Iterable[str]) -> list[Copy]:
    """Each login file read and its copy made, to be written (`write`) at its `path`
    in `tmp` once the TMPDIR is what the agent will see (its tmpfs mounted).
    `grants` (path, source) and `denied`: the profile's, where a refresh's redo record
    must not be (redo.py)."""
    grants, denied = tuple(grants), tuple(denied)
    out: list[Copy] = []
    for lg in logins:
        try:
            # the agent's account's login (or, unprivileged, the person's own)
            owners = (uid,) if os.geteuid() in (0, uid) else (uid, os.geteuid())
            # a refresh a run that died did not finish writing (before the file is read)
            redo.recover(lg.name, lg.file, owners, warn, emit)
            text, notes = sources.read_file(f"login {lg.name}", lg.file, only=owners)
        except sources.SourceError:
            if lg.optional and not os.path.lexists(lg.file):
                emit({"event": "login", "action": "skipped", "name": lg.name,
                      "reason": "optional, no file"})
                continue
            raise
        for n in notes:
            warn(n)
        if not mount_ns:
            raise ConfineError(f"login {lg.name}: {lg.file} is kept from the agent, and its "
                               "placeholder copy needs a mount namespace, which this run has "
                               "not: refusing (remove the file, or drop the login from the "
                               "profile)")
        c = make_copy(lg, text)
        for b in c.bindings:
            if isinstance(b.refresh, Refresher):
                b.refresh.owners = owners
                # where a refresh keeps its record (redo.py): refused now, not mid-refresh
                redo.check(lg.name, grants, denied)
        c.path = os.path.join(tmp, DIR, lg.name + ".json")
        out.append(c)
        emit({"event": "login", "action": "bound", "name": lg.name, "file": lg.file,
              "tokens": [{"name": b.name,
                          "hosts": [t.host + (f":{t.port}" if t.port not in (None, 443) else "")
                                    for t in b.targets]} for b in c.bindings]})
    return out


def write(copies: list[Copy], uid: int, gid: int) -> None:
    """The copies written, owned by the agent, 0600 (it may change its own copy)."""
    for c in copies:
        d = os.path.dirname(c.path)
        os.makedirs(d, mode=0o700, exist_ok=True)
        os.chown(d, uid, gid)
        fd = os.open(c.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                     | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, c.text.encode("utf-8"))
            os.fchown(fd, uid, gid)
        finally:
            os.close(fd)


MAX_REFRESH_BODY = 65536       # bytes of a refresh request's body, and of its answer's


class RefreshError(Exception):
    """The refresh cannot be done safely: the agent gets no answer (never the real tokens)."""


class Refresher:
    """One login's token refresh, in the gateway: the refresh token's placeholder swapped
    into the body of a POST to the profile's endpoint, and in the answer each new token
    replaced by a new placeholder, its real value written into the real file (in place,
    `_store`; with the profile's `stamps:`), so the agent's copy and the real file stay
    in step.
    Threat: the new real tokens reaching the agent; anything that cannot be parsed or
    written is refused, never passed on."""

    def __init__(self, login: Login, value: str) -> None:
        assert login.refresh is not None
        self.login = login
        self.refresh = login.refresh
        self.value = value                   # the current real refresh token
        self.placeholders: list[str] = []    # every placeholder this token had (the agent's)
        self.lock = threading.Lock()
        self.emit: Emit | None = None
        self.owners: tuple[int, ...] = (os.geteuid(),)   # whose file it may be (start sets it)

    def __repr__(self) -> str:
        return f"Refresher({self.login.name!r})"

    def matches(self, host: str, port: int, method: str, path: str) -> bool:
        return method == "POST" and port == 443 and (host, path) in self.refresh.endpoints

    def request(self, body: bytes) -> bytes:
        """The body with the real refresh token in place of its placeholder."""
        text = body.decode("utf-8", "replace")
        hits = [ph for ph in self.placeholders if ph in text]
        if not hits:
            raise RefreshError("the refresh request does not carry this login's refresh token")
        for ph in hits:
            text = text.replace(ph, self.value)
        return text.encode("utf-8")

    def answer(self, body: bytes, bind: Callable[[Binding], None]) -> bytes:
        """The answer's body for the agent: new tokens as new placeholders (each bound with
        `bind`), and the real file updated with the real ones (one refresh at a time)."""
        with self.lock:
            return self._answer(body, bind)

    def _answer(self, body: bytes, bind: Callable[[Binding], None]) -> bytes:
        try:
            obj = json.loads(body)
        except ValueError:
            raise RefreshError("the token endpoint's answer is not JSON") from None
        if not isinstance(obj, dict):
            raise RefreshError("the token endpoint's answer is not a JSON object")
        new: dict[tuple[str, ...], str] = {}
        tokens = {t.path: t for t in self.login.tokens}
        for fld, path in self.refresh.response:
            v = obj.get(fld)
            if v is None:
                continue
            if not isinstance(v, str):
                raise RefreshError(f"the answer's {fld} is not a string")
            v = sources.check_value(f"login {self.login.name}", "the token endpoint", v)
            tok = tokens[path]
            ph = (jwt_placeholder(v) if tok.jwt else None) or sources.placeholder(v)
            obj[fld] = ph
            new[path] = v
            b = Binding(name=binding_name(self.login, tok), placeholder=ph, value=v,
                        targets=tok.targets, headers=tok.headers,
                        refresh=self if path == self.refresh.token else None)
            bind(b)
            if path == self.refresh.token:
                self.value = v
                self.placeholders.append(ph)
        if not new:
            # not a refresh (an error told with 200): nothing stamped, nothing written
            raise RefreshError("the token endpoint's answer holds none of the login's tokens")
        out = json.dumps(obj).encode("utf-8")
        for v in new.values():
            if v.encode() in out:
                raise RefreshError("a new token appears elsewhere in the answer")
        self._store(new, self._stamps(obj.get("expires_in")))
        if self.emit is not None:
            self.emit({"event": "login", "action": "refreshed", "name": self.login.name,
                       "tokens": [".".join(p) for p in new]})
        return out

    def _stamps(self, expires_in: object) -> dict[tuple[str, ...], object]:
        """The values of `refresh.stamps:` for a refresh answered now (an answer without
        a numeric expires_in leaves its stamp as it was)."""
        now = time.time()
        out: dict[tuple[str, ...], object] = {}
        for path, kind in self.refresh.stamps:
            if kind == "now_rfc3339":
                out[path] = datetime.datetime.fromtimestamp(now, datetime.timezone.utc) \
                    .isoformat().replace("+00:00", "Z")
            elif isinstance(expires_in, (int, float)) and not isinstance(expires_in, bool):
                out[path] = int((now + expires_in) * 1000)
        return out

    def _store(self, new: dict[tuple[str, ...], str],
               stamps: dict[tuple[str, ...], object] | None = None) -> None:
        """The real file with the new values, written in place (opened below the
        directory's descriptor, no link followed, the same inode, so its mode and owner
        stay). Not a temporary file renamed over it: the agent's copy is bound over this
        name, and a name replaced outside ends that bind in the agent's mount namespace
        (the kernel detaches mounts on a name that goes), so the agent would then read
        the real file; a temporary file beside it would be in the agent's state root.
        The new text is first kept in a redo record (redo.py), removed once written."""
        path = self.login.file
        fd = redo.open_login(path, self.owners, RefreshError)
        try:
            data = os.read(fd, sources.MAX_FILE + 1)
            try:
                obj = json.loads(data)
            except ValueError:
                raise RefreshError(f"{path} is no longer JSON") from None
            for p, v in new.items():
                holder, _old = _lookup(obj, p)
                if holder is None:
                    raise RefreshError(f"{path} no longer has {'.'.join(p)}")
                holder[p[-1]] = v
            for p, sv in (stamps or {}).items():
                parent = _lookup(obj, p[:-1])[1] if len(p) > 1 else obj
                if isinstance(parent, dict):
                    parent[p[-1]] = sv
            out = (json.dumps(obj, indent=2) + "\n").encode("utf-8")
            # the new tokens are the only working ones now (the old refresh token is
            # spent): kept in confine's own state first, so a supervisor that dies in
            # the write below leaves them for the next start (redo.py)
            try:
                rec: redo.Record | None = redo.Record(self.login.name, path, out, data)
            except (OSError, ConfineError) as e:
                # the tokens are got already: written without a record rather than lost
                rec = None
                if self.emit is not None:
                    self.emit({"event": "login", "action": "unrecorded",
                               "name": self.login.name,
                               "reason": getattr(e, "strerror", None) or str(e)})
            try:
                redo.write_in_place(fd, out)
                if rec is not None:
                    rec.done()
            finally:
                if rec is not None:
                    rec.close()
        finally:
            os.close(fd)
