"""Messages from the child to the supervisor over the CLOEXEC status pipe.

One JSON object a line, each line one write(2) below PIPE_BUF, so the lines of
the relay, pid 1 and the agent never interleave. The pipe closes at a
successful exec; anything but Begin/InitPid/Listener on it is a failure.
"""
from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import asdict
from typing import Union

from ..record import dataclass


@dataclass(frozen=True)
class Begin:
    step: str                 # the child starts this step of plan.steps


@dataclass(frozen=True)
class InitPid:
    pid: int                  # pid 1 of the agent's pid namespace, as the supervisor sees it


@dataclass(frozen=True)
class Listener:
    fd: int                   # the seccomp listener's number in the holder; copy it, then "go"


@dataclass(frozen=True)
class Sockets:
    fds: list[int]            # the gateway's sockets in the child (proxy, redirect, DNS udp, tcp)


@dataclass(frozen=True)
class ExecFailed:
    errno: int
    message: str


@dataclass(frozen=True)
class SetupFailed:
    step: str
    message: str


Message = Union[Begin, InitPid, Listener, Sockets, ExecFailed, SetupFailed]
_TYPES: dict[str, type] = {t.__name__: t for t in (Begin, InitPid, Listener, Sockets, ExecFailed,
                                                    SetupFailed)}
_MAX = 3800


def send(fd: int, msg: Message) -> None:
    body = {"type": type(msg).__name__, **asdict(msg)}
    line = json.dumps(body).encode()
    if len(line) > _MAX:
        for k in ("message",):
            if k in body:
                body[k] = body[k][:1000] + "..."
        line = json.dumps(body).encode()[:_MAX]
    os.write(fd, line + b"\n")


def parse(line: bytes) -> Message:
    """A line from the pipe; garbage becomes a SetupFailed (fail closed)."""
    try:
        body = json.loads(line)
        cls = _TYPES[body.pop("type")]
        msg: Message = cls(**body)
        return msg
    except (ValueError, KeyError, TypeError):
        return SetupFailed("unknown", f"unreadable status from the child: {line[:200]!r}")


def receive(fd: int) -> Iterator[Message]:
    """Every message on the pipe until the child's end is closed; a last line
    without its newline is parsed too (garbage: a SetupFailed, never ignored)."""
    buf = b""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except InterruptedError:
            continue
        if not chunk:
            break
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            yield parse(line)
    if buf:
        yield parse(buf)
