"""Field shapes that `credentials:` and `logins:` share (policy/credentials.py,
policy/logins.py), parsed once so both name the same mistake the same way: a list
of named entries (each entry's errors collected, a name given twice refused), a
mapping with known keys, true/false, a file of the person's own, custom header names.
`p` is load._Parser (fail, scalar, where, errors); `item` makes load.Item."""
from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

from ..errors import ProfileError

Item = Callable[[object, str], Any]

HEADER = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,100}$")     # an HTTP token
# headers the swap owns or that carry no credential: naming them is a mistake
# (Authorization is always looked at, so it is never named either)
NOT_HEADERS = ("host", "content-length", "transfer-encoding", "connection", "cookie",
               "authorization")


def named_list(p: Any, node: Any, full: str, item: Item, entry: Callable[..., dict[str, Any]],
               shape: str, twice: str) -> list[dict[str, Any]]:
    """The YAML list under `full`, each element parsed by `entry(p, el, full, item)` into
    a dict with a "name" Item; every entry's error is collected (load.py reports them
    together), and a name seen twice is refused (`twice`: "bound", "named")."""
    import yaml  # type: ignore[import-untyped]  # already imported: this is a YAML parse
    if isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:null":
        return []
    if not isinstance(node, yaml.SequenceNode):
        p.fail(node, f"{full!r} must be a list of entries ({shape})")
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for el in node.value:
        try:
            got = entry(p, el, full, item)
        except ProfileError as e:
            p.errors.append(str(e))
            continue
        name = str(got["name"].value)
        if name in seen:
            p.errors.append(f"{p.where(el)}: {full}: {name} is {twice} twice in this file")
            continue
        seen.add(name)
        out.append(got)
    return out


def suggest(key: str, valid: Iterable[str]) -> str:
    """The end of an unknown-key message: the nearest valid key, or all of them."""
    import difflib  # only for this message: not on every start
    valid = list(valid)
    near = difflib.get_close_matches(str(key), valid, n=1, cutoff=0.5)
    return f" (did you mean {near[0]!r}?)" if near else f" (valid keys: {', '.join(valid)})"


def keyed(p: Any, node: Any, full: str, keys: tuple[str, ...],
          not_mapping: str) -> dict[str, tuple[Any, Any]]:
    """{key: (key node, value node)} of a mapping whose keys must be among `keys`, each
    once; `not_mapping` is the whole message when `node` is not a mapping."""
    import yaml
    if not isinstance(node, yaml.MappingNode):
        p.fail(node, not_mapping)
    out: dict[str, tuple[Any, Any]] = {}
    for k, v in node.value:
        key = p.scalar(k, full)
        if key not in keys:
            p.fail(k, f"unknown key {full + '.' + str(key)!r}{suggest(key, keys)}")
        if key in out:
            p.fail(k, f"duplicate key {full + '.' + str(key)!r}")
        out[key] = (k, v)
    return out


def mapping(p: Any, node: Any, full: str, keys: tuple[str, ...], shape: str) -> dict[str, Any]:
    """{key: value node}; `shape`: what `full` must be, for the error."""
    return {k: v for k, (_, v) in keyed(p, node, full, keys, f"{full}: {shape}").items()}


def flag(p: Any, node: Any, full: str, item: Item) -> Any:
    v = p.scalar(node, full)
    if not isinstance(v, bool):
        p.fail(node, f"{full}: must be true or false")
    return item(v, p.where(node))


def own_file(p: Any, node: Any, full: str, item: Item) -> Any:
    """A file the person reads outside the sandbox: absolute or under ~/."""
    v = p.scalar(node, full)
    if not isinstance(v, str) or not v.startswith(("/", "~/")):
        p.fail(node, f"{full}: {v!r} must be absolute or start with ~/ (your home: the file "
                     "is read by you, outside the sandbox)")
    return item(v, p.where(node))


def header_names(p: Any, node: Any, full: str, item: Item) -> list[Any]:
    """Custom header names a value may be put in, lower-cased."""
    import yaml
    if not isinstance(node, yaml.SequenceNode):
        p.fail(node, f"{full}: must be a list of header names")
    out = []
    for h in node.value:
        v = p.scalar(h, full)
        if not isinstance(v, str) or not HEADER.match(v) or v.lower() in NOT_HEADERS:
            p.fail(h, f"{full}: {v!r} is not a custom header name (Authorization is always "
                      "looked at; Host, Cookie and framing headers never)")
        out.append(item(v.lower(), p.where(h)))
    return out
