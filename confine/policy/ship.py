"""Writes policy/_shipped.py: each built-in profile's text and what the loader's
parser makes of it, so `confine exec` with a built-in profile neither imports
PyYAML nor parses. Part of `python -m confine.export.artefacts`
(scripts/gen-artefacts.sh); tests/export/test_drift.py fails when the shipped
module is not what this renders from profiles/*.yaml."""
from __future__ import annotations

from typing import Any

from . import load

HEAD = '''"""The built-in profiles, parsed: each file's text and what policy/load.py's
parser makes of it. Generated from profiles/*.yaml by scripts/gen-artefacts.sh
(policy/ship.py): do not edit. The loader takes an entry only for a file in the
built-in directory that holds exactly its text; any other file is parsed from
its YAML. tests/unit/test_shipped.py checks each entry against the parser."""
# ruff: noqa: E501
from __future__ import annotations

from collections.abc import Callable
from typing import Any


def parsed(name: str, text: str, item: Callable[[object, str], Any]) -> dict[str, Any] | None:
    """The parsed profile `name`, made afresh with `item` (load.Item), if `text` is the
    text it was made from."""
    if TEXT.get(name) != text:
        return None
    return BUILD[name](item)
'''


def _render(v: Any, indent: str) -> str:
    if isinstance(v, dict):
        if not v:
            return "{}"
        inner = indent + "    "
        return "{\n" + "".join(f"{inner}{k!r}: {_render(x, inner)},\n" for k, x in v.items()) \
            + indent + "}"
    if isinstance(v, list):
        if not v:
            return "[]"
        inner = indent + "    "
        return "[\n" + "".join(f"{inner}{_render(x, inner)},\n" for x in v) + indent + "]"
    if isinstance(v, load.Item):
        if isinstance(v.value, (dict, list, load.Item)):
            raise TypeError(f"an Item holds {type(v.value).__name__}: not rendered")
        return f"Item({v.value!r}, {v.where!r})"
    raise TypeError(f"cannot render {type(v).__name__} ({v!r})")


def parse_builtin(name: str) -> tuple[str, dict[str, Any]]:
    """A built-in profile's text and what the parser makes of it (never _shipped)."""
    path = load.builtin_dir() / f"{name}.yaml"
    text = path.read_text()
    return text, load._Parser(path).parse_text(text)


def render() -> str:
    names = load.builtin_names()
    texts, funcs = [], []
    for name in names:
        text, data = parse_builtin(name)
        fn = "_" + "".join(c if c.isalnum() else "_" for c in name)
        texts.append(f"    {name!r}: {text!r},\n")
        funcs.append(f"\n\ndef {fn}(Item: Callable[[object, str], Any]) -> dict[str, Any]:\n"
                     f"    return {_render(data, '    ')}\n")
    build = "".join(f"    {n!r}: _{''.join(c if c.isalnum() else '_' for c in n)},\n" for n in names)
    return (HEAD + "\n\nTEXT: dict[str, str] = {\n" + "".join(texts) + "}\n" + "".join(funcs)
            + "\n\nBUILD: dict[str, Callable[[Callable[[object, str], Any]], dict[str, Any]]] = {\n"
            + build + "}\n")
