"""Each path resolved once while one run is prepared.

The workdir check, the profile's grants and secrets, the files that run later
and their carve-outs resolve the same paths again and again (about 330
resolutions of 200 paths for the default profile, each an lstat per component).
Within one_view() an absolute path is resolved once and every later question
gets that answer: one view of the file system for the whole preparation, as
if it were read at one instant, instead of a different answer to the same
question a few milliseconds later. Outside it, realpath is os.path.realpath.

Only what is resolved in the view is kept, never across runs: a Sandbox's next
run starts with an empty view. Creating files and directories (the profile's
`state:` entries) changes no resolution; the agent's home, which makes
symlinks, resolves on its own.
"""
from __future__ import annotations

import contextvars
import os
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

T = TypeVar("T")

_VIEW: contextvars.ContextVar[dict[Hashable, Any] | None] = contextvars.ContextVar(
    "confine_view", default=None)


def realpath(path: str) -> str:
    view = _VIEW.get()
    if view is None or not path.startswith("/"):
        return os.path.realpath(path)     # a relative path depends on the cwd
    got = view.get(path)
    if got is None:
        got = view[path] = os.path.realpath(path)
    return got


def once(key: Hashable, make: Callable[[], T]) -> T:
    """make() once per view for key (everything its answer depends on but the file
    system); outside a view, every time."""
    view = _VIEW.get()
    if view is None:
        return make()
    k = ("once", key)
    if k not in view:
        view[k] = make()
    got: T = view[k]
    return got


@contextmanager
def one_view() -> Iterator[None]:
    token = _VIEW.set({})
    try:
        yield
    finally:
        _VIEW.reset(token)
