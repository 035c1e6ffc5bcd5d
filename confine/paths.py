"""Path containment, spelled once. Pure string logic: callers pass real paths."""
from __future__ import annotations


def is_under(path: str, root: str) -> bool:
    """path is root or lies below it (absolute, already-resolved paths)."""
    return path == root or path.startswith(root.rstrip("/") + "/")


def rel_under(rel: str, top: str) -> bool:
    """The same for workdir-relative paths, where "" is the workdir itself."""
    return top == "" or rel == top or rel.startswith(top + "/")
