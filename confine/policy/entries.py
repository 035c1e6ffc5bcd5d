"""Lists of `- path: P` entries with one list of strings beside it, as
`filesystem.state_roots:` (`protected:`) and `filesystem.copied:` (`protected_keys:`)
write them: one parser, so both say the same thing about the same mistake (which
line, which key, what was expected)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn, Protocol

__all__ = ["Loader", "parse"]


class Loader(Protocol):
    """What load.py's parser lends (it owns YAML and the line numbers)."""
    def where(self, node: Any) -> str: ...
    def fail(self, node: Any, msg: str) -> NoReturn: ...
    def scalar(self, node: Any, full: str) -> Any: ...


def parse(p: Loader, node: Any, full: str, *, yaml: Any, item: Callable[[object, str], Any],
          list_key: str, example: str, path_error: Callable[[object], str | None],
          element_error: Callable[[list[str], object], str | None],
          list_shape: str) -> list[dict[str, Any]]:
    """The YAML list under `full` -> [{"path": Item, list_key: [Item, ...]}].
    element_error(earlier elements, element): why an element of the list is refused.
    list_shape: what the list holds, for the error ("a list of patterns")."""
    keys = ("path", list_key)
    shown = ", ".join(keys)
    if isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:null":
        return []
    if not isinstance(node, yaml.SequenceNode):
        p.fail(node, f"{full!r} must be a list of mappings with keys {shown}")
    out: list[dict[str, Any]] = []
    for el in node.value:
        if not isinstance(el, yaml.MappingNode):
            p.fail(el, f"{full}: each entry is a mapping with keys {shown} (e.g. - path: {example})")
        entry: dict[str, Any] = {}
        for k, v in el.value:
            key = k.value if isinstance(k, yaml.ScalarNode) else None
            if key not in keys:
                p.fail(k, f"unknown key {full + '.' + str(key)!r} (valid keys: {shown})")
            if key in entry:
                p.fail(k, f"duplicate key {full + '.' + str(key)!r}")
            if key == "path":
                s = p.scalar(v, f"{full}.path")
                why = path_error(s) if isinstance(s, str) else f"{s!r} is not a path"
                if why:
                    p.fail(v, f"{full}.path: {why}")
                entry[key] = item(s, p.where(v))
                continue
            if not isinstance(v, yaml.SequenceNode):
                p.fail(v, f"{full}.{list_key} must be {list_shape}")
            elements: list[Any] = []
            for e in v.value:
                t = p.scalar(e, f"{full}.{list_key}")
                why = element_error([str(i.value) for i in elements], t)
                if why:
                    p.fail(e, f"{full}.{list_key}: {why}")
                elements.append(item(str(t), p.where(e)))
            entry[key] = elements
        if "path" not in entry:
            p.fail(el, f"{full}: an entry without 'path'")
        entry.setdefault(list_key, [])
        out.append(entry)
    return out
