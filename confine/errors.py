"""Errors confine reports itself. Each carries the exit status the CLI uses."""
from __future__ import annotations

import sys


class ConfineError(Exception):
    """confine's own failure: bad input, unsupported protection, setup error (exit 125)."""

    status = 125


class ProfileError(ConfineError):
    """A profile is malformed; the message names file, line and key. `more` holds the
    file's further errors (`confine profile validate` lists them all; a run says the
    first in its one line)."""

    def __init__(self, msg: str, more: tuple[str, ...] = ()):
        super().__init__(msg)
        self.more = more


class CommandNotFound(ConfineError):
    status = 127


class CommandNotExecutable(ConfineError):
    status = 126


def default_warn(msg: str) -> None:
    """The one default sink for warnings and denial reports: a line on stderr."""
    print(f"confine: {msg}", file=sys.stderr, flush=True)
