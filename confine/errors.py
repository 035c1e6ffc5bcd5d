"""Errors confine reports itself (each carries the exit status the CLI uses), and
the one way a `confine:` line shows text it did not write.

Threat: names in confine's lines are the agent's choice (a file, a socket, a
command): escape sequences that rewrite the terminal, newlines that forge a
line, bytes that are not UTF-8. `printable` is the one escaping, so a name
reads the same in every line (`\xfe` for a byte that is not UTF-8)."""
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


def printable(text: str, backslash: bool = True) -> str:
    """Printable text: control characters, format characters (bidi overrides),
    separators other than space and undecodable bytes (surrogateescape) become
    \\xNN / \\uNNNN escapes. backslash: a backslash becomes two, so an escape
    cannot be forged by a name; the sinks (`say`) pass False and keep line
    breaks, so text escaped once passes them unchanged."""
    if text.isprintable() and (not backslash or "\\" not in text):
        return text
    out = []
    for ch in text:
        o = ord(ch)
        if ch == "\\":
            out.append("\\\\" if backslash else ch)
        elif 0xDC80 <= o <= 0xDCFF:             # a byte that was not UTF-8
            out.append(f"\\x{o - 0xDC00:02x}")
        elif ch.isprintable() or (ch == "\n" and not backslash):
            out.append(ch)
        elif o < 0x100:
            out.append(f"\\x{o:02x}")
        else:
            out.append(f"\\u{o:04x}" if o < 0x10000 else f"\\U{o:08x}")
    return "".join(out)


def say(msg: str) -> None:
    """A `confine:` line on stderr, whatever it holds (no raw byte or control
    character reaches the terminal)."""
    print(f"confine: {printable(msg, backslash=False)}", file=sys.stderr, flush=True)


def default_warn(msg: str) -> None:
    """The one default sink for warnings and denial reports: a line on stderr."""
    say(msg)
