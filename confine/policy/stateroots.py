"""`filesystem.state_roots:`: an agent's own state directories, writable as a whole,
with the names in them that run later protected like the workdir's.

Threat: an agent's state directory (~/.claude, ~/.codex) mixes data the agent must
write on every run (sessions, history, caches, databases, lock files; each release
adds names) with files the agent's CLI runs later as the person, outside any sandbox
(settings with hooks, commands, sub-agents, plugins, skills, config.toml with a
notify command or MCP servers, rules, prompts, AGENTS.md/CLAUDE.md, scripts). A
fixed list of the writable names broke on each new release (the agent could not
create its new state and failed); a fixed list of carved read-only names in code
made every new agent a code change. So a profile names the directory and the
patterns in it that run later:

    filesystem:
      state_roots:
        - path: ?~/.claude
          protected: [/settings*.json, /hooks/, /commands/, ...]

The directory becomes a write grant and a protected root (protect/roots.py) whose
patterns are these plus the workdir's (DEFAULT_PATTERNS and `protected:`): the
agent may create any other name there, and the protected ones get what the
workdir's get: the name guard at the call, read-only binds of what exists, held
files and the exit check. Patterns are those of `protected:`
(policy/patterns.py), relative to the state root; a leading `/` anchors one at
its top.

Fail closed: the built-in read-only entries of policy/runlater.py (what runs later
in ~/.claude and ~/.codex, kept in code so that `--write ~/.claude` under any
profile stays carved) that lie inside a state root must be matched by its
patterns, or the profile is refused: a state root can only replace that carve by
patterns that protect at least as much, never drop it. A state root is not made
when missing: the agent then makes its state in its own HOME (runtime/home.py),
which only later confined runs of the same profile and workdir read.
"""
from __future__ import annotations

import fnmatch
import os
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from ..paths import is_under
from ..record import dataclass
from .patterns import Pattern, compile_patterns

__all__ = ["StateRoot", "parse", "resolve", "covers"]

KEYS = ("path", "protected")


@dataclass(frozen=True)
class StateRoot:
    path: str                      # absolute, symlinks resolved
    spelled: str                   # absolute, as written (the agent home links it so)
    template: str                  # as written, e.g. "~/.claude"
    source: str                    # "claude-code.yaml:21"
    patterns: tuple[str, ...]      # its own protected patterns, normalised


def parse(node: Any, full: str, *, yaml: Any, scalar: Callable[[Any, str], Any],
          where: Callable[[Any], str], fail: Callable[[Any, str], NoReturn],
          path_error: Callable[[Any, str], str | None],
          item: Callable[[object, str], Any]) -> list[dict[str, Any]]:
    """The YAML list under `full` -> [{"path": Item, "protected": [Item, ...]}].
    The loader's parser lends its helpers (load.py owns YAML and Item)."""
    if isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:null":
        return []
    if not isinstance(node, yaml.SequenceNode):
        fail(node, f"{full!r} must be a list of mappings with keys {', '.join(KEYS)}")
    out: list[dict[str, Any]] = []
    for el in node.value:
        if not isinstance(el, yaml.MappingNode):
            fail(el, f"{full}: each entry is a mapping with keys {', '.join(KEYS)} "
                     "(e.g. - path: ?~/.claude)")
        entry: dict[str, Any] = {}
        for k, v in el.value:
            key = k.value if isinstance(k, yaml.ScalarNode) else None
            if key not in KEYS:
                fail(k, f"unknown key {full + '.' + str(key)!r} (valid keys: {', '.join(KEYS)})")
            if key in entry:
                fail(k, f"duplicate key {full}.{key}")
            if key == "path":
                p = scalar(v, f"{full}.path")
                why = path_error(v, str(p)) if isinstance(p, str) else f"{p!r} is not a path"
                if why:
                    fail(v, f"{full}.path: {why}")
                entry[key] = item(p, where(v))
                continue
            if not isinstance(v, yaml.SequenceNode):
                fail(v, f"{full}.protected must be a list of patterns")
            pats: list[Any] = []
            for pel in v.value:
                t = scalar(pel, f"{full}.protected")
                if not isinstance(t, str) or t.strip().startswith("!"):
                    fail(pel, f"{full}.protected: {t!r}: a state root's patterns add to the "
                              "workdir's, never remove one ('!')")
                try:
                    compile_patterns([str(i.value) for i in pats] + [str(t)])
                except ValueError as e:
                    fail(pel, f"{full}.protected: {e}")
                pats.append(item(str(t), where(pel)))
            entry[key] = pats
        if "path" not in entry:
            fail(el, f"{full}: an entry without 'path'")
        entry.setdefault("protected", [])
        out.append(entry)
    return out


def covers(patterns: Sequence[Pattern], rel: str) -> bool:
    """Whether a root-relative path is protected by `patterns` (itself, or a tree
    pattern above it); `.git` patterns never cover an agent's state entry."""
    comps = tuple(c for c in rel.split("/") if c)
    for p in patterns:
        if p.git:
            continue
        n = len(p.comps)
        for i in ([0] if p.anchored else range(len(comps))):
            part = comps[i:i + n]
            if len(part) < n or not all(fnmatch.fnmatchcase(c, pc)
                                        for c, pc in zip(part, p.comps, strict=True)):
                continue
            if len(comps) - i == n or p.tree:
                return True
    return False


def _literal(rel: str) -> str:
    """A root-relative path as a pattern matching only itself."""
    return "/".join("".join("[" + c + "]" if c in "*?[" else c for c in comp)
                    for comp in rel.split("/"))


def resolve(entries: list[dict[str, Any]], expand: Callable[[str], str],
            realpath: Callable[[str], str], read_only: Sequence[tuple[str, str, bool]],
            refusal: Callable[[str], str | None],
            fail: Callable[[str, str], NoReturn]) -> tuple[list[Any], tuple[StateRoot, ...]]:
    """(write items, state roots): each existing state root becomes a write item and a
    StateRoot. `refusal(path)`: why a write grant there is refused (runlater.refusal);
    `read_only` is (path, template, built in) of the carved entries: a built-in one
    inside a root that its patterns do not cover is refused (`fail(where, message)`),
    a profile's own (`filesystem.read_only:`) becomes a pattern of the root."""
    items: list[Any] = []
    roots: list[StateRoot] = []
    for e in entries:
        it = e["path"]
        text = str(it.value)
        template = text.lstrip("?")
        spelled = os.path.normpath(expand(template))
        real = realpath(spelled)
        if not os.path.isdir(real):
            if text.startswith("?") and not os.path.lexists(spelled):
                continue
            fail(it.where, f"state root {template} ({spelled}) is not a directory"
                 + ("" if text.startswith("?") else "; prefix it with '?' if it may be missing"))
        for p in dict.fromkeys((spelled, real)):
            why = refusal(p)
            if why:
                fail(it.where, f"{template} ({p}): not writable: {why}")
        texts = [str(p.value) for p in e["protected"]]
        pats = compile_patterns(texts)
        for ro, ro_template, builtin in read_only:
            for base in dict.fromkeys((spelled, real)):
                if not is_under(ro, base) or ro == base:
                    continue
                rel = os.path.relpath(ro, base)
                if covers(pats, rel):
                    continue
                if not builtin:
                    texts.append("/" + _literal(rel) + ("/" if os.path.isdir(ro) else ""))
                    pats = compile_patterns(texts)
                    continue
                fail(it.where, f"state root {template}: {ro_template} runs later and "
                     f"stays read-only under every write grant; add a pattern that "
                     f"protects it (e.g. /{rel}) to its protected list")
        items.append(type(it)(text, it.where))
        roots.append(StateRoot(real, spelled, template, it.where, tuple(p.text for p in pats)))
    return items, tuple(roots)
