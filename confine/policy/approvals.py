"""The profile's `approvals:` section: one default per kind of action, rules, examples.

Job: parse and check the section (docs/approvals.md is the grammar) into frozen
records the approval engine (confine/approval/) decides with. Pure: no I/O.

Threat: a rule that does not match what its author meant silently allows (or
never asks about) what should have been asked. So every rule may carry
examples that must, and must not, match it; they are checked at load, and a
failing example is an error naming the file, the line and the key, like every
other profile error. An example decided by an EARLIER rule (first match wins)
is an error too: the rule it was written for would never see it. Unknown keys,
unknown kinds and bad decisions are errors, never ignored.
"""
from __future__ import annotations

import re
from typing import Any

from ..record import dataclass
from . import fields

# the key in the profile -> the event kind the engine sees
KINDS = {"network": "network", "unix_sockets": "unix_socket", "protected_writes": "protected_write",
         "deletions": "deletions", "credentials": "credential", "exec": "exec"}
KEY_OF = {v: k for k, v in KINDS.items()}
DECISIONS = ("allow", "deny", "ask")
# What each kind does when the profile says nothing: what confine did before the engine.
DEFAULTS = {"network": "deny", "unix_socket": "deny", "protected_write": "deny",
            "deletions": "allow", "credential": "allow", "exec": "allow"}
# The subject field a rule's `match` is tested against, and whether it is an
# absolute path ("/"), a workdir-relative path ("rel") or a name ("name").
FIELD = {"network": ("host", "name"), "unix_socket": ("path", "/"), "protected_write": ("path", "rel"),
         "deletions": ("path", "rel"), "credential": ("name", "name"), "exec": ("path", "/")}
MAX_RULES = 256
MAX_THRESHOLD = 1 << 30


@dataclass(frozen=True)
class Rule:
    match: str                      # a glob: `*` and `?` within one path component, `**` any depth
    decision: str                   # allow, deny, ask
    where: str                      # "file:line"
    regex: str = ""

    def matches(self, value: str) -> bool:
        return re.fullmatch(self.regex, value) is not None


@dataclass(frozen=True)
class KindSpec:
    default: str                    # allow, deny, ask
    where: str = ""                 # "" for the built-in default
    rules: tuple[Rule, ...] = ()
    ask_above: int | None = None    # deletions: more than this many in a run is asked


@dataclass(frozen=True)
class Approvals:
    kinds: tuple[tuple[str, KindSpec], ...] = ()   # event kind -> spec; kinds not listed: DEFAULTS

    def spec(self, kind: str) -> KindSpec:
        for k, s in self.kinds:
            if k == kind:
                return s
        return KindSpec(DEFAULTS[kind])

    def decide(self, kind: str, subject: dict[str, Any]) -> tuple[str, str]:
        """(allow|deny|ask, what decided) for one event, before anything is asked:
        the first rule whose `match` matches, else the threshold (deletions), else
        the kind's default. A subject without the field a rule tests matches no rule."""
        s = self.spec(kind)
        name, _ = FIELD[kind]
        value = subject.get(name)
        if isinstance(value, str):
            for i, r in enumerate(s.rules):
                if r.matches(value):
                    return r.decision, f"approvals.{KEY_OF[kind]}.rules[{i}] ({r.where})"
        if kind == "deletions" and s.ask_above is not None:
            count = subject.get("count")
            if not isinstance(count, int) or isinstance(count, bool) or count > s.ask_above:
                return "ask", f"approvals.deletions.ask_above: {s.ask_above} ({s.where})"
            return "allow", f"approvals.deletions.ask_above: {s.ask_above} ({s.where})"
        return s.default, f"approvals.{KEY_OF[kind]}: {s.default}" + (f" ({s.where})" if s.where else "")

    def asks(self, kind: str) -> bool:
        """Anything of this kind may be asked or allowed beyond the default refusal."""
        s = self.spec(kind)
        return s.default != "deny" or any(r.decision != "deny" for r in s.rules) or s.ask_above is not None

    def judges(self, kind: str) -> bool:
        """Anything of this kind may be refused or asked: the calls must be seen."""
        s = self.spec(kind)
        return s.default != "allow" or any(r.decision != "allow" for r in s.rules) \
            or s.ask_above is not None

    def to_dict(self) -> dict[str, object]:
        return {KEY_OF[k]: {"default": s.default, "ask_above": s.ask_above,
                            "rules": [{"match": r.match, "decision": r.decision, "where": r.where}
                                      for r in s.rules]} for k, s in self.kinds}


def glob_regex(pattern: str) -> str:
    """`*`, `?`: within one component; `**`: any number of components (a whole component)."""
    out = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        out.append("[^/]*" if c == "*" else "[^/]" if c == "?" else re.escape(c))
        i += 1
    return "".join(out)


def _check_match(kind: str, v: object) -> str | None:
    if not isinstance(v, str) or not v or "\0" in v:
        return f"{v!r} is not a pattern"
    _, shape = FIELD[kind]
    if shape == "/" and not v.startswith("/"):
        return f"{v!r} must be an absolute path"
    if shape == "rel" and (v.startswith("/") or v.startswith("../") or "/../" in v):
        return f"{v!r} must be relative to the workdir"
    return None


class _Nodes:
    """The loader's parser (load._Parser) seen through the few calls this needs."""

    def __init__(self, parser: Any) -> None:
        self.p = parser

    def fail(self, node: Any, msg: str) -> Any:
        return self.p.fail(node, msg)

    def scalar(self, node: Any, full: str) -> Any:
        return self.p.scalar(node, full)

    def mapping(self, node: Any, full: str, keys: tuple[str, ...]) -> dict[str, tuple[Any, Any]]:
        return fields.keyed(self.p, node, full, keys,
                            f"{full!r} must be a mapping with keys {', '.join(keys)}")

    def seq(self, node: Any, full: str) -> list[Any]:
        if getattr(node, "id", "") == "scalar" and node.value in ("", "~", "null"):
            return []
        if getattr(node, "id", "") != "sequence":
            self.fail(node, f"{full!r} must be a list")
        return list(node.value)


def parse(parser: Any, node: Any, full: str) -> dict[str, KindSpec]:
    """The `approvals:` node -> {event kind: KindSpec}; a dict, so that a profile
    extending another replaces one kind and keeps the others (load._merge)."""
    n = _Nodes(parser)
    out: dict[str, KindSpec] = {}
    if getattr(node, "id", "") == "scalar" and node.value in ("", "~", "null"):
        return out
    for key, (knode, vnode) in n.mapping(node, full, tuple(KINDS)).items():
        out[KINDS[key]] = _kind(n, KINDS[key], vnode, f"{full}.{key}", parser.where(knode))
    return out


def _decision(n: _Nodes, node: Any, full: str, kind: str) -> str:
    v = n.scalar(node, full)
    allowed = ("ask", "deny") if kind == "network" else DECISIONS
    if v not in allowed:
        n.fail(node, f"{full}: {v!r} is not one of {', '.join(allowed)}")
    return str(v)


def _kind(n: _Nodes, kind: str, node: Any, full: str, where: str) -> KindSpec:
    if getattr(node, "id", "") == "scalar":
        return KindSpec(_decision(n, node, full, kind), where)
    keys: tuple[str, ...] = ("default", "rules")
    if kind == "deletions":
        keys = ("default", "ask_above", "rules")
    if kind == "network":
        n.fail(node, f"{full} takes one of ask, deny (hosts are ruled by network.allow and network.deny)")
    m = n.mapping(node, full, keys)
    default = _decision(n, m["default"][1], f"{full}.default", kind) if "default" in m else DEFAULTS[kind]
    ask_above = None
    if "ask_above" in m:
        v = n.scalar(m["ask_above"][1], f"{full}.ask_above")
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= MAX_THRESHOLD:
            n.fail(m["ask_above"][1], f"{full}.ask_above: {v!r} is not a count (0 to {MAX_THRESHOLD})")
        ask_above = v
    rules: list[Rule] = []
    if "rules" in m:
        items = n.seq(m["rules"][1], f"{full}.rules")
        if len(items) > MAX_RULES:
            n.fail(m["rules"][1], f"{full}.rules: more than {MAX_RULES} rules")
        for i, el in enumerate(items):
            rules.append(_rule(n, kind, el, f"{full}.rules[{i}]", rules))
    return KindSpec(default, where, tuple(rules), ask_above)


def _rule(n: _Nodes, kind: str, node: Any, full: str, earlier: list[Rule]) -> Rule:
    m = n.mapping(node, full, ("match", "decision", "examples"))
    for need in ("match", "decision"):
        if need not in m:
            n.fail(node, f"{full}: missing key {need!r}")
    mnode = m["match"][1]
    pat = n.scalar(mnode, f"{full}.match")
    why = _check_match(kind, pat)
    if why is not None:
        n.fail(mnode, f"{full}.match: {why}")
    rule = Rule(str(pat), _decision(n, m["decision"][1], f"{full}.decision", kind),
                n.p.where(node), glob_regex(str(pat)))
    if "examples" in m:
        ex = n.mapping(m["examples"][1], f"{full}.examples", ("match", "no_match"))
        for key, must in (("match", True), ("no_match", False)):
            if key not in ex:
                continue
            for el in n.seq(ex[key][1], f"{full}.examples.{key}"):
                v = n.scalar(el, f"{full}.examples.{key}")
                if not isinstance(v, str):
                    n.fail(el, f"{full}.examples.{key}: {v!r} is not a string")
                if rule.matches(v) != must:
                    n.fail(el, f"{full}.examples.{key}: {v!r} "
                               + ("does not match" if must else "matches") + f" {rule.match!r}")
                if must:
                    first = next((r for r in earlier if r.matches(v)), None)
                    if first is not None:
                        n.fail(el, f"{full}.examples.match: {v!r} is decided by an earlier rule "
                                   f"({first.match!r}, {first.where}) first")
    return rule


def build(parsed: dict[str, KindSpec], network_default: str) -> Approvals:
    """The Policy's Approvals; the network kind is `network.default` (one setting, two
    spellings: the loader refuses the two when they disagree)."""
    kinds = dict(parsed)
    if network_default != "deny" or "network" in kinds:
        kinds["network"] = KindSpec(network_default, kinds["network"].where if "network" in kinds else "")
    return Approvals(tuple(sorted(kinds.items())))
