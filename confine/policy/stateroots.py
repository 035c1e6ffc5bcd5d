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
from . import entries
from .patterns import Pattern, compile_patterns

__all__ = ["StateRoot", "parse", "resolve", "covers", "uncovered", "literal"]


@dataclass(frozen=True)
class StateRoot:
    path: str                      # absolute, symlinks resolved
    spelled: str                   # absolute, as written (the agent home links it so)
    template: str                  # as written, e.g. "~/.claude"
    source: str                    # "claude-code.yaml:21"
    patterns: tuple[str, ...]      # its own protected patterns, normalised


def parse(p: entries.Loader, node: Any, full: str, *, yaml: Any,
          path_error: Callable[[object], str | None],
          item: Callable[[object, str], Any]) -> list[dict[str, Any]]:
    """The YAML list under `full` -> [{"path": Item, "protected": [Item, ...]}]."""
    return entries.parse(p, node, full, yaml=yaml, item=item, list_key="protected",
                         example="?~/.claude", path_error=path_error,
                         element_error=_pattern_error, list_shape="a list of patterns")


def _pattern_error(earlier: list[str], v: object) -> str | None:
    if not isinstance(v, str) or v.strip().startswith("!"):
        return f"{v!r}: a state root's patterns add to the workdir's, never remove one ('!')"
    try:
        compile_patterns([*earlier, v])
    except ValueError as e:
        return str(e)
    return None


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


def literal(rel: str, tree: bool) -> str:
    """A root-relative path as an anchored pattern matching only itself (and what is
    under it, for a tree)."""
    return "/" + "/".join("".join("[" + c + "]" if c in "*?[" else c for c in comp)
                          for comp in rel.split("/")) + ("/" if tree else "")


def uncovered(patterns: Sequence[Pattern], base: str, ro: str) -> str | None:
    """A read-only entry `ro` strictly inside the root at `base` that `patterns` do
    not protect, as root-relative; else None. The profile's own such entries become
    patterns of the root (`literal`); a built-in one refuses it."""
    if not is_under(ro, base) or ro == base:
        return None
    rel = os.path.relpath(ro, base)
    return None if covers(patterns, rel) else rel


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
        for base in dict.fromkeys((spelled, real)):
            for ro, ro_template, builtin in read_only:
                rel = uncovered(pats, base, ro)
                if rel is None:
                    continue
                if builtin:
                    fail(it.where, f"state root {template}: {ro_template} runs later and "
                         f"stays read-only under every write grant; add a pattern that "
                         f"protects it (e.g. /{rel}) to its protected list")
                texts.append(literal(rel, os.path.isdir(ro)))
                pats = compile_patterns(texts)
        items.append(type(it)(text, it.where))
        roots.append(StateRoot(real, spelled, template, it.where, tuple(p.text for p in pats)))
    return items, tuple(roots)
