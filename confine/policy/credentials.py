"""The profile's `credentials:` section and `--credential NAME=HOST,...`, checked and
frozen; `network.upstream_ca:` (the extra CAs the gateway trusts upstream).

The threat: a typo that binds a real secret to the wrong host, or takes it from
the wrong place, sends it where the person never meant it to go. So every key
is checked here, with its line: exactly one source per entry, hosts that are
names (the swap happens only toward a name confine's DNS pinned, never an
address), methods and path prefixes spelled so they can be compared, and a
decision that is one of allow, ask, deny.

The section, one entry per variable the agent sees (docs/credentials.md):

    credentials:
      - name: FORGE_TOKEN              # the variable the agent sees (a placeholder)
        from_env: FORGE_TOKEN          # or from_file: PATH, from_command: [argv],
                                       # or mint: [argv] (+ revoke: [argv])
        hosts:                         # where the real value may be sent
          - forge.example              # a name or *.suffix, optional :port (default 443)
          - {host: api.forge.example, methods: [GET], paths: [/repos/]}
        headers: [x-api-key]           # custom headers carrying it (besides Authorization)
        decision: allow                # allow (default) | ask | deny, per use
        optional: false                # true: a source with no value skips the entry

The parsed form is plain lists, dicts and the loader's `Item`s (so the built-in
profiles can be shipped pre-parsed by policy/ship.py); `records` makes the
frozen `Credential`s of the Policy from it.
"""
from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from typing import Any

from ..credentials.binding import Target
from ..errors import ProfileError
from ..record import dataclass
from . import fields

SOURCES = ("from_env", "from_file", "from_command", "mint")
KEYS = ("name", *SOURCES, "revoke", "hosts", "headers", "decision", "optional")
TARGET_KEYS = ("host", "methods", "paths")
DECISIONS = ("allow", "ask", "deny")
DEFAULT_PORT = 443
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_METHOD = re.compile(r"^[A-Z]{1,20}$")


@dataclass(frozen=True)
class Credential:
    """One entry: where the real value comes from (`source`: env, file, command or
    mint, with `ref`: the variable name, the path, or the argv) and where it may go."""
    name: str
    source: str
    ref: tuple[str, ...]
    targets: tuple[Target, ...]
    revoke: tuple[str, ...] = ()
    headers: tuple[str, ...] = ()
    decision: str = "allow"
    optional: bool = False
    where: str = ""                    # "profile.yaml:12" or "--credential"

    def to_dict(self) -> dict[str, object]:
        return {"name": self.name, "source": self.source, "ref": list(self.ref),
                "hosts": [target_text(t) for t in self.targets],
                "revoke": list(self.revoke), "headers": list(self.headers),
                "decision": self.decision, "optional": self.optional, "where": self.where}


def target_text(t: Target) -> str:
    out = t.host if t.port in (None, DEFAULT_PORT) else f"{t.host}:{t.port}"
    if t.methods:
        out += " " + ",".join(sorted(t.methods))
    if t.paths:
        out += " " + ",".join(t.paths)
    return out


# --- the YAML side: nodes -> lists and dicts of Items, every error with its line ---

def parse(p: Any, node: Any, full: str, item: Callable[[object, str], Any]) -> list[Any]:
    """`credentials:` of one profile file. p: load._Parser (fail, scalar, where, errors)."""
    return fields.named_list(p, node, full, item, _entry, "- name: VAR ...", "bound")


def _entry(p: Any, el: Any, full: str, item: Callable[[object, str], Any]) -> dict[str, Any]:
    import yaml  # type: ignore[import-untyped]  # already imported: this is a YAML parse
    raw = fields.mapping(p, el, full, KEYS,
                         "each entry is a mapping (name:, from_env: ..., hosts: [...])")
    if "name" not in raw:
        p.fail(el, f"{full}: an entry needs name: (the variable the agent sees)")
    name = p.scalar(raw["name"], f"{full}.name")
    if not isinstance(name, str) or not _NAME.match(name):
        p.fail(raw["name"], f"{full}.name: {name!r} is not an environment variable name")
    at = f"{full}[{name}]"
    out: dict[str, Any] = {"name": item(name, p.where(raw["name"]))}
    sources = [s for s in SOURCES if s in raw]
    if len(sources) != 1:
        p.fail(el, f"{at}: give exactly one of {', '.join(SOURCES)}"
                   + (f" (got {', '.join(sources)})" if sources else ""))
    src = sources[0]
    if src == "from_env":
        v = p.scalar(raw[src], f"{at}.{src}")
        if not isinstance(v, str) or not _NAME.match(v):
            p.fail(raw[src], f"{at}.from_env: {v!r} is not an environment variable name")
        out[src] = item(v, p.where(raw[src]))
    elif src == "from_file":
        out[src] = fields.own_file(p, raw[src], f"{at}.from_file", item)
    else:
        out[src] = _argv(p, raw[src], f"{at}.{src}", item)
    if "revoke" in raw:
        if src != "mint":
            p.fail(_key_node(el, "revoke"), f"{at}.revoke: only a minted credential (mint:) is revoked")
        out["revoke"] = _argv(p, raw["revoke"], f"{at}.revoke", item)
    if "hosts" not in raw:
        p.fail(el, f"{at}: hosts: is required (where the real value may be sent)")
    if not isinstance(raw["hosts"], yaml.SequenceNode) or not raw["hosts"].value:
        p.fail(raw["hosts"], f"{at}.hosts: must be a non-empty list")
    out["hosts"] = [_target(p, h, f"{at}.hosts", item) for h in raw["hosts"].value]
    if "headers" in raw:
        out["headers"] = fields.header_names(p, raw["headers"], f"{at}.headers", item)
    if "decision" in raw:
        v = p.scalar(raw["decision"], f"{at}.decision")
        if v not in DECISIONS:
            p.fail(raw["decision"], f"{at}.decision: {v!r} is not one of {', '.join(DECISIONS)}")
        out["decision"] = item(v, p.where(raw["decision"]))
    if "optional" in raw:
        out["optional"] = fields.flag(p, raw["optional"], f"{at}.optional", item)
    return out


def _key_node(mapping: Any, key: str) -> Any:
    """The node of a mapping's key (an error about the key itself points at its line)."""
    return next(k for k, _ in mapping.value if getattr(k, "value", None) == key)


def _argv(p: Any, node: Any, full: str, item: Callable[[object, str], Any]) -> list[Any]:
    import yaml
    if not isinstance(node, yaml.SequenceNode) or not node.value:
        p.fail(node, f"{full}: must be a command as a non-empty list ([prog, arg, ...]); "
                     "it runs without a shell")
    out = []
    for a in node.value:
        v = p.scalar(a, full)
        if isinstance(v, bool) or v is None or not isinstance(v, (str, int, float)):
            p.fail(a, f"{full}: {v!r} is not a command argument")
        out.append(item(str(v), p.where(a)))
    if not out[0].value:
        p.fail(node, f"{full}: the program is empty")
    return out


def _target(p: Any, node: Any, full: str, item: Callable[[object, str], Any]) -> Any:
    import yaml
    if isinstance(node, yaml.MappingNode):
        got = fields.mapping(p, node, full, TARGET_KEYS, "a host, or a mapping with host:")
        if "host" not in got:
            p.fail(node, f"{full}: an entry as a mapping needs host:")
        out: dict[str, Any] = {"host": _host(p, got["host"], full, item)}
        for key in ("methods", "paths"):
            if key not in got:
                continue
            ln = got[key]
            if not isinstance(ln, yaml.SequenceNode) or not ln.value:
                p.fail(ln, f"{full}.{key}: must be a non-empty list")
            vals = []
            for x in ln.value:
                v = p.scalar(x, f"{full}.{key}")
                why = _method_error(v) if key == "methods" else _path_error(v)
                if why:
                    p.fail(x, f"{full}.{key}: {why}")
                vals.append(item(v, p.where(x)))
            out[key] = vals
        return out
    return _host(p, node, full, item)


def _host(p: Any, node: Any, full: str, item: Callable[[object, str], Any]) -> Any:
    v = p.scalar(node, full)
    why = host_error(v)
    if why:
        p.fail(node, f"{full}: {why}")
    return item(v, p.where(node))


def host_error(v: object) -> str | None:
    """Why `v` is not a credential host (a name or *.suffix, optional :port), or None."""
    from ..gateway import rules as host_rules
    if not isinstance(v, str):
        return f"{v!r} is not a host name"
    try:
        r = host_rules.parse_rule(v, default_port=DEFAULT_PORT)
    except host_rules.RuleError as e:
        return str(e)
    if r.name is None and r.suffix is None:
        return (f"{v!r}: a credential is bound to host names, not addresses (the swap "
                "happens only toward a name confine's DNS answered)")
    return None


def _method_error(v: object) -> str | None:
    if not isinstance(v, str) or not _METHOD.match(v):
        return f"{v!r} is not an HTTP method in capitals (GET, POST, ...)"
    return None


def _path_error(v: object) -> str | None:
    if not isinstance(v, str) or not v.startswith("/") or any(c in v for c in "?#% \t") \
            or "/../" in v + "/" or "/./" in v + "/":
        return (f"{v!r} is not a path prefix (starts with /, no query, fragment, "
                "percent-escape, '.' or '..' segment)")
    return None


# --- the parsed form -> frozen records ---

def records(raw: list[Any], cli: Sequence[str] = (), *,
            expand: Callable[[str], str] = os.path.expanduser) -> tuple[Credential, ...]:
    """The Policy's credentials: the profile chain's entries (a derived file's entry
    replaces its parent's of the same name), then --credential (replacing either).
    expand: a from_file's `~`, the launching person's home (who reads it), never the
    agent's."""
    out: dict[str, Credential] = {}
    for e in raw:
        c = _record(e, expand)
        out.pop(c.name, None)
        out[c.name] = c
    for text in cli:
        c = from_flag(text)
        out.pop(c.name, None)
        out[c.name] = c
    return tuple(out.values())


def _record(e: dict[str, Any], expand: Callable[[str], str]) -> Credential:
    src = next(s for s in SOURCES if s in e)
    kind = {"from_env": "env", "from_file": "file", "from_command": "command",
            "mint": "mint"}[src]
    ref: tuple[str, ...]
    if src == "from_env":
        ref = (str(e[src].value),)
    elif src == "from_file":
        ref = (os.path.normpath(expand(str(e[src].value))),)
    else:
        ref = tuple(str(a.value) for a in e[src])
    return Credential(
        name=str(e["name"].value), source=kind, ref=ref,
        targets=tuple(_target_record(t) for t in e["hosts"]),
        revoke=tuple(str(a.value) for a in e.get("revoke", [])),
        headers=tuple(dict.fromkeys(str(h.value) for h in e.get("headers", []))),
        decision=str(e["decision"].value) if "decision" in e else "allow",
        optional=bool(e["optional"].value) if "optional" in e else False,
        where=e["name"].where)


def _target_record(t: Any) -> Target:
    from ..gateway import rules as host_rules
    h = t["host"] if isinstance(t, dict) else t
    r = host_rules.parse_rule(str(h.value), default_port=DEFAULT_PORT)
    host = r.name if r.name is not None else f"*.{r.suffix}"
    if not isinstance(t, dict):
        return Target(host=host, port=r.port)
    return Target(host=host, port=r.port,
                  methods=frozenset(str(m.value) for m in t.get("methods", [])),
                  paths=tuple(dict.fromkeys(str(x.value) for x in t.get("paths", []))))


def from_flag(text: str) -> Credential:
    """`--credential NAME=HOST[,HOST...]`: NAME from the launching person's environment,
    sent only to those hosts (each a name or *.suffix with an optional :port)."""
    name, eq, hosts = text.partition("=")
    if not _NAME.match(name):
        raise ProfileError(f"--credential {text}: {name!r} is not an environment variable name")
    if not eq or not hosts.strip(","):
        raise ProfileError(f"--credential {name}: name the hosts its value may be sent to "
                           f"(--credential {name}=HOST[,HOST...])")
    targets = []
    for h in hosts.split(","):
        if not h:
            continue
        why = host_error(h)
        if why:
            raise ProfileError(f"--credential {name}: {why}")
        from ..gateway import rules as host_rules
        r = host_rules.parse_rule(h, default_port=DEFAULT_PORT)
        targets.append(Target(host=r.name if r.name is not None else f"*.{r.suffix}",
                              port=r.port))
    return Credential(name=name, source="env", ref=(name,), targets=tuple(targets),
                      where="--credential")


def upstream_ca(items: list[Any], expand: Callable[[str], str]) -> tuple[str, ...]:
    """network.upstream_ca: PEM files that exist and hold a certificate."""
    out = []
    for it in items:
        path = os.path.normpath(expand(str(it.value).lstrip("?")))
        try:
            with open(path, "rb") as f:
                head = f.read(1 << 20)
        except OSError as e:
            raise ProfileError(f"{it.where}: network.upstream_ca: {path}: "
                               f"{e.strerror or e}") from None
        if b"-----BEGIN CERTIFICATE-----" not in head:
            raise ProfileError(f"{it.where}: network.upstream_ca: {path}: no PEM certificate "
                               "in it (-----BEGIN CERTIFICATE-----)")
        out.append(path)
    return tuple(dict.fromkeys(out))
