"""`filesystem.copied:`: a file in the real HOME that the agent gets as a copy of its
own, written back at exit with the keys that run later kept at their start values.

Threat and need: Claude Code keeps its state in ~/.claude.json and saves it by
writing `~/.claude.json.tmp.<pid>.<n>` beside the file (a link resolved first) and
renaming it over. A write grant on the real file cannot allow that without opening
the rest of HOME, and the same file holds `mcpServers` (top level and per project):
commands the person's next Claude Code run outside confine starts. A write grant let
the agent plant one. So the agent home gets a regular file of its own, a copy (the
temporary file and the rename then happen in the agent home), and at exit the
runtime writes it back (protect/copied.py): only valid JSON, only when the real file
did not change meanwhile, and with every `protected_keys` path put back to what it
was at the start (a change there is an alert):

    filesystem:
      copied:
        - path: ?~/.claude.json
          protected_keys: [mcpServers, projects.*.mcpServers]

A key path is dot-separated object keys; `*` is any one key. The file must lie in
HOME (the agent home mirrors it there); it need not exist (`?` is then required):
a copy the agent makes is created at the real path at exit, the same way.
"""
from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Any, NoReturn

from ..paths import is_under
from ..record import dataclass
from . import entries

__all__ = ["Copied", "parse", "resolve", "key_error"]

_KEY = re.compile(r"^(?:\*|[^.*]+)(?:\.(?:\*|[^.*]+))*$")


@dataclass(frozen=True)
class Copied:
    path: str                      # the real file, absolute (a symlink in HOME resolved)
    rel: str                       # its place relative to HOME (and to the agent home)
    template: str                  # as written, e.g. "~/.claude.json"
    source: str                    # "claude-code.yaml:21"
    protected_keys: tuple[str, ...]

    def to_dict(self) -> dict[str, object]:
        return {"path": self.path, "template": self.template, "source": self.source,
                "protected_keys": list(self.protected_keys)}


def key_error(v: object) -> str | None:
    """Why `v` is not a key path (a.b.c, `*` for any one key), or None."""
    if not isinstance(v, str) or not _KEY.match(v):
        return (f"{v!r} is not a key path (object keys joined by '.', '*' for any one "
                "key, e.g. projects.*.mcpServers)")
    return None


def parse(p: entries.Loader, node: Any, full: str, *, yaml: Any,
          path_error: Callable[[object], str | None],
          item: Callable[[object, str], Any]) -> list[dict[str, Any]]:
    """The YAML list under `full` -> [{"path": Item, "protected_keys": [Item, ...]}]."""
    return entries.parse(p, node, full, yaml=yaml, item=item, list_key="protected_keys",
                         example="?~/.claude.json", path_error=path_error,
                         element_error=lambda _earlier, v: key_error(v),
                         list_shape="a list of key paths")


def resolve(entries: list[dict[str, Any]], expand: Callable[[str], str],
            realpath: Callable[[str], str], home: str,
            fail: Callable[[str, str], NoReturn]) -> tuple[Copied, ...]:
    """Each entry -> Copied. A path outside HOME, HOME itself, a directory, or a
    missing file without '?' is refused (the copy lives at the same place in the
    agent home; only a regular file can be copied and checked)."""
    out: dict[str, Copied] = {}
    for e in entries:
        it = e["path"]
        text = str(it.value)
        template = text.lstrip("?")
        spelled = os.path.normpath(expand(template))
        real = realpath(spelled)
        if not is_under(spelled, home) or spelled == home:
            fail(it.where, f"{template} ({spelled}) is not a file in HOME ({home})")
        if os.path.isdir(real):
            fail(it.where, f"{template} ({real}) is a directory: only a file is copied")
        if not text.startswith("?") and not os.path.lexists(spelled):
            fail(it.where, f"{template} ({spelled}) does not exist; prefix it with '?' "
                 "if it may be missing")
        out.setdefault(real, Copied(real, os.path.relpath(spelled, home), template, it.where,
                                    tuple(dict.fromkeys(str(k.value)
                                                        for k in e["protected_keys"]))))
    return tuple(out.values())
