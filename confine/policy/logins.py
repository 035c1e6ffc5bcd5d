"""The profile's `logins:` section: an agent's own login file (Claude Code's
~/.claude/.credentials.json, Codex's ~/.codex/auth.json), checked and frozen.

The threat: the tokens in such a file are credentials like any other; an agent
that can read them can send them anywhere it may reach. So a login's file is
never readable by the agent (the run binds the placeholder copy over it), the agent
gets a copy with each named secret replaced by a placeholder
(credentials/logins.py), and the gateway swaps a placeholder only toward the
hosts its entry names. The facts about an agent (file, where in its JSON the
secrets are, their hosts) live here in the profile, not in code:

    logins:
      - name: claude-code                       # a label for events and errors
        file: ~/.claude/.credentials.json       # read by you, outside the sandbox
        optional: true                          # no file: nothing to copy
        tokens:
          - {json: claudeAiOauth.accessToken, hosts: [api.anthropic.com]}
          - {json: claudeAiOauth.refreshToken}  # no hosts: never sent
          - {json: tokens.id_token, jwt: true}  # a JWT: claims kept, signature replaced

`json:` is a dotted path of object keys; a path absent from the file (or null
there) is skipped. `hosts:` has the form of a credential's hosts
(policy/credentials.py).

    refresh:                                    # the agent's token refresh, swapped
      endpoints: [platform.claude.com/v1/oauth/token]   # HOST/PATH, HTTPS, POST only
      token: claudeAiOauth.refreshToken         # its placeholder is swapped in the body
      response: {access_token: claudeAiOauth.accessToken,
                 refresh_token: claudeAiOauth.refreshToken}
      stamps: {claudeAiOauth.expiresAt: expires_in_ms}   # set by confine in the real file

The answer's fields named in `response:` get new placeholders for the agent, and
their real values are written into the real file. `stamps:` names the file's fields
the agent computes at a refresh (its own copy gets them, the real file must too, or
the next run starts from an expired login): `expires_in_ms` is now plus the answer's
`expires_in`, in milliseconds since the epoch; `now_rfc3339` is the time of the
refresh. confine computes them itself: nothing the agent writes is copied back.
"""
from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Any

from ..credentials.binding import Target
from ..record import dataclass
from . import credentials as _creds
from . import fields

KEYS = ("name", "file", "optional", "tokens", "refresh")
REFRESH_KEYS = ("endpoints", "token", "response", "stamps")
STAMPS = ("expires_in_ms", "now_rfc3339")
TOKEN_KEYS = ("json", "hosts", "headers", "jwt")
_LABEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
_JSON_KEY = re.compile(r"^[A-Za-z0-9_$-]{1,100}$")


@dataclass(frozen=True)
class LoginToken:
    path: tuple[str, ...]              # object keys, outermost first
    targets: tuple[Target, ...] = ()   # where its real value may be sent (none: nowhere)
    headers: tuple[str, ...] = ()      # custom headers carrying it, besides Authorization
    jwt: bool = False                  # header.payload kept readable, the signature replaced


@dataclass(frozen=True)
class Refresh:
    endpoints: tuple[tuple[str, str], ...]          # (host, path), HTTPS on 443
    token: tuple[str, ...]                          # the refresh token's path in the file
    response: tuple[tuple[str, tuple[str, ...]], ...]   # answer field -> path in the file
    stamps: tuple[tuple[tuple[str, ...], str], ...] = ()  # path in the file -> one of STAMPS


@dataclass(frozen=True)
class Login:
    name: str
    file: str                          # absolute, the launching person's
    tokens: tuple[LoginToken, ...]
    optional: bool = False
    where: str = ""
    refresh: Refresh | None = None

    def to_dict(self) -> dict[str, object]:
        return {"name": self.name, "file": self.file, "optional": self.optional,
                "tokens": [{"json": ".".join(t.path),
                            "hosts": [_creds.target_text(x) for x in t.targets],
                            "headers": list(t.headers), "jwt": t.jwt} for t in self.tokens],
                "where": self.where,
                **({"refresh": {"endpoints": [h + p for h, p in self.refresh.endpoints],
                                "token": ".".join(self.refresh.token),
                                "response": {k: ".".join(v) for k, v in self.refresh.response},
                                "stamps": {".".join(k): v for k, v in self.refresh.stamps}}}
                   if self.refresh is not None else {})}


def parse(p: Any, node: Any, full: str, item: Callable[[object, str], Any]) -> list[Any]:
    """`logins:` of one profile file. p: load._Parser (fail, scalar, where, errors)."""
    return fields.named_list(p, node, full, item, _entry,
                             "- name: LABEL, file: PATH, tokens: ...", "named")


def _mapping(p: Any, node: Any, full: str, keys: tuple[str, ...]) -> dict[str, Any]:
    return fields.mapping(p, node, full, keys, f"must be a mapping ({', '.join(keys)})")


def _entry(p: Any, el: Any, full: str, item: Callable[[object, str], Any]) -> dict[str, Any]:
    import yaml  # type: ignore[import-untyped]  # already imported: this is a YAML parse
    raw = _mapping(p, el, full, KEYS)
    for need in ("name", "file", "tokens"):
        if need not in raw:
            p.fail(el, f"{full}: an entry needs {need}:")
    name = p.scalar(raw["name"], f"{full}.name")
    if not isinstance(name, str) or not _LABEL.match(name):
        p.fail(raw["name"], f"{full}.name: {name!r} is not a label (letters, digits, . _ -)")
    at = f"{full}[{name}]"
    out: dict[str, Any] = {"name": item(name, p.where(raw["name"]))}
    out["file"] = fields.own_file(p, raw["file"], f"{at}.file", item)
    if "optional" in raw:
        out["optional"] = fields.flag(p, raw["optional"], f"{at}.optional", item)
    tn = raw["tokens"]
    if not isinstance(tn, yaml.SequenceNode) or not tn.value:
        p.fail(tn, f"{at}.tokens: must be a non-empty list of {{json: PATH, hosts: [...]}}")
    tokens = []
    seen: set[str] = set()
    for t in tn.value:
        traw = _mapping(p, t, f"{at}.tokens", TOKEN_KEYS)
        if "json" not in traw:
            p.fail(t, f"{at}.tokens: each entry needs json: (a dotted path in the file)")
        path = p.scalar(traw["json"], f"{at}.tokens.json")
        if not isinstance(path, str) or not all(_JSON_KEY.match(x) for x in path.split(".")):
            p.fail(traw["json"], f"{at}.tokens.json: {path!r} is not a dotted path of keys "
                                 "(claudeAiOauth.accessToken)")
        if path in seen:
            p.fail(traw["json"], f"{at}.tokens.json: {path} is named twice")
        seen.add(path)
        tok: dict[str, Any] = {"json": item(path, p.where(traw["json"]))}
        if "hosts" in traw:
            hn = traw["hosts"]
            if not isinstance(hn, yaml.SequenceNode):
                p.fail(hn, f"{at}.tokens[{path}].hosts: must be a list")
            tok["hosts"] = [_creds._target(p, h, f"{at}.tokens[{path}].hosts", item)
                            for h in hn.value]
        if "headers" in traw:
            tok["headers"] = fields.header_names(p, traw["headers"], f"{at}.tokens[{path}].headers",
                                                 item)
        if "jwt" in traw:
            tok["jwt"] = fields.flag(p, traw["jwt"], f"{at}.tokens[{path}].jwt", item)
        tokens.append(tok)
    out["tokens"] = tokens
    if "refresh" in raw:
        out["refresh"] = _refresh(p, raw["refresh"], f"{at}.refresh", item, seen)
    return out


def _refresh(p: Any, node: Any, at: str, item: Callable[[object, str], Any],
             paths: set[str]) -> dict[str, Any]:
    import yaml
    raw = _mapping(p, node, at, REFRESH_KEYS)
    for need in REFRESH_KEYS[:3]:
        if need not in raw:
            p.fail(node, f"{at}: needs {need}:")
    en = raw["endpoints"]
    if not isinstance(en, yaml.SequenceNode) or not en.value:
        p.fail(en, f"{at}.endpoints: must be a non-empty list of HOST/PATH")
    eps = []
    for e in en.value:
        v = p.scalar(e, f"{at}.endpoints")
        host, _, path = str(v).partition("/")
        why = _creds.host_error(host) if isinstance(v, str) and path else "no /PATH"
        if why or host.startswith("*.") or ":" in host or _creds._path_error("/" + path):
            p.fail(e, f"{at}.endpoints: {v!r} is not HOST/PATH (one name, no port, a plain "
                      f"path){': ' + why if why else ''}")
        eps.append(item(str(v), p.where(e)))
    tok = p.scalar(raw["token"], f"{at}.token")
    if tok not in paths:
        p.fail(raw["token"], f"{at}.token: {tok!r} is not one of this login's tokens: json")
    rn = raw["response"]
    if not isinstance(rn, yaml.MappingNode) or not rn.value:
        p.fail(rn, f"{at}.response: must map the answer's fields to tokens' json paths")
    resp = {}
    for k, v in rn.value:
        field_ = p.scalar(k, f"{at}.response")
        target = p.scalar(v, f"{at}.response")
        if not isinstance(field_, str) or not _JSON_KEY.match(field_):
            p.fail(k, f"{at}.response: {field_!r} is not a field name")
        if target not in paths:
            p.fail(v, f"{at}.response.{field_}: {target!r} is not one of this login's tokens: json")
        resp[field_] = item(target, p.where(v))
    stamps = {}
    sn = raw.get("stamps")
    if sn is not None and not isinstance(sn, yaml.MappingNode):
        p.fail(sn, f"{at}.stamps: must map the file's dotted paths to one of {', '.join(STAMPS)}")
    for k, v in sn.value if sn is not None else ():
        path = p.scalar(k, f"{at}.stamps")
        kind = p.scalar(v, f"{at}.stamps")
        if not isinstance(path, str) or not all(_JSON_KEY.match(x) for x in path.split(".")):
            p.fail(k, f"{at}.stamps: {path!r} is not a dotted path of keys")
        if path in paths:
            p.fail(k, f"{at}.stamps: {path} is one of this login's tokens")
        if kind not in STAMPS:
            p.fail(v, f"{at}.stamps.{path}: {kind!r} is not one of {', '.join(STAMPS)}")
        stamps[path] = item(kind, p.where(v))
    return {"endpoints": eps, "token": item(tok, p.where(raw["token"])), "response": resp,
            "stamps": stamps}


def records(raw: list[Any], *, expand: Callable[[str], str] = os.path.expanduser
            ) -> tuple[Login, ...]:
    """The Policy's logins: a derived file's entry replaces its parent's of the same name.
    expand: `~` is the launching person's home (who reads the file), never the agent's."""
    out: dict[str, Login] = {}
    for e in raw:
        toks = tuple(LoginToken(
            path=tuple(str(t["json"].value).split(".")),
            targets=tuple(_creds._target_record(h) for h in t.get("hosts", [])),
            headers=tuple(dict.fromkeys(str(h.value) for h in t.get("headers", []))),
            jwt=bool(t["jwt"].value) if "jwt" in t else False) for t in e["tokens"])
        rf = None
        if "refresh" in e:
            r = e["refresh"]
            rf = Refresh(
                endpoints=tuple((str(x.value).split("/", 1)[0].lower(),
                                 "/" + str(x.value).split("/", 1)[1]) for x in r["endpoints"]),
                token=tuple(str(r["token"].value).split(".")),
                response=tuple((k, tuple(str(v.value).split("."))) for k, v in r["response"].items()),
                stamps=tuple((tuple(k.split(".")), str(v.value)) for k, v in r.get("stamps", {}).items()))
        lg = Login(name=str(e["name"].value), refresh=rf,
                   file=os.path.normpath(expand(str(e["file"].value))), tokens=toks,
                   optional=bool(e["optional"].value) if "optional" in e else False,
                   where=e["name"].where)
        out.pop(lg.name, None)
        out[lg.name] = lg
    return tuple(out.values())
