"""The approvers: who answers the engine's questions, outside the agent's reach.

- the terminal (TtyApprover): the supervisor's /dev/tty, never the agent's
  stdin or stdout; keys typed before the question appeared are flushed (they
  were meant for the agent) and TIOCSTI is refused by seccomp, so only a
  person at the keyboard answers;
- a program (`--approver CMD`, CommandApprover): one JSON question on stdin,
  one JSON answer on stdout, run as the supervisor, outside the sandbox;
- a long-lived decider (`--approver-socket PATH`, SocketApprover): a unix
  socket served by a UI, a chat bot or a fleet's queue, for many runs; one
  connection per question, length-prefixed frames (frames below).

Threat, for all three: an unclear answer allows. Only an explicit allow
allows; no terminal, a closed one, a timeout, a key not offered, a program
that fails, a decider that is absent, dead, slow, or sends anything but one
well-formed answer to this very question: deny, with the reason.
One question at a time: the run's engine has one queue and one thread that
asks (engine.py); the lock _ONE keeps it so for engines that share an
approver (a gateway tested on its own).
"""
from __future__ import annotations

import errno
import json
import os
import re
import select
import shlex
import signal
import socket
import struct
import subprocess
import termios
import threading
import time
from typing import Any

from ..errors import ConfineError
from .engine import ANSWERS, Event

TTY_TIMEOUT = 60.0        # a question nobody answers is denied
APPROVER_TIMEOUT = 30.0
MAX_ANSWER = 65536        # bytes read from an approver
MAX_FRAME = 65536         # a socket frame's largest body, both ways
FRAME = struct.Struct(">I")
FRAME_VERSION = 1
_ONE = threading.Lock()


def _legacy(ev: Event) -> dict[str, Any]:
    """The first shape of a question (the gateway's, before the engine: host, port,
    via, entry, pid, exe at the top level), kept for the kinds that had it so
    existing --approver programs go on working."""
    s, p = ev.subject, ev.process
    exe = p.get("exe")
    if p.get("cmdline"):
        exe = f"{exe or '?'} ({p['cmdline']})"
    if ev.kind == "network":
        out = {k: s.get(k) for k in ("host", "port", "via", "entry")}
    elif ev.kind == "credential":
        port = s.get("port") or 443
        out = {"host": s.get("host"), "port": port, "via": "credential",
               "entry": f"credential {s.get('name')}: {s.get('use')} by "
                        f"{p.get('cmdline') or p.get('exe') or '?'}"}
    elif ev.kind == "ssh_agent":
        file = s.get("use") == "file"
        out = {"host": f"sshsig:{s.get('namespace')}" if file else s.get("host"),
               "port": None if file else s.get("port"),
               "via": f"ssh-agent to sign {'a file ' if file else ''}with {s.get('key')}"}
        out["entry"] = out["host"] if out["port"] in (None, 443) else f"{out['host']}:{out['port']}"
    else:
        return {}
    return {**out, "pid": p.get("pid"), "exe": exe}


# --- the terminal ---
_SHOWN = re.compile(r"[^\x20-\x7e]")


def _printable(s: str, n: int = 60) -> str:
    return _SHOWN.sub("?", s)[:n]


class TtyApprover:
    """One prompt line at the bottom of the supervisor's terminal, one key.

    The cursor is saved and restored around the line and the line is cleared
    after the answer, so a full-screen agent loses at most its bottom line until
    it next redraws. The terminal's modes (an agent may have it in raw mode) are
    saved and put back unless the agent changed them meanwhile."""

    KEYS = {"o": "once", "y": "once", "r": "run", "p": "profile", "d": "deny", "n": "deny"}

    def __init__(self, path: str = "/dev/tty", timeout: float = TTY_TIMEOUT) -> None:
        self.path = path
        self.timeout = timeout

    def __call__(self, ev: Event, offer: tuple[str, ...]) -> tuple[str, str]:
        with _ONE:
            return self._open(ev, "profile" in offer)

    def _open(self, q: Event, offer_profile: bool) -> tuple[str, str]:
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC)
        except OSError as e:
            return "deny", f"no terminal ({e.strerror})"
        try:
            try:
                if os.tcgetpgrp(fd) != os.getpgrp():
                    return "deny", "confine is not in the terminal's foreground"
            except OSError as e:
                return "deny", f"not a terminal ({e.strerror})"
            return self._ask(fd, q, offer_profile)
        finally:
            os.close(fd)

    def _ask(self, fd: int, q: Event, offer_profile: bool) -> tuple[str, str]:
        saved = termios.tcgetattr(fd)
        mine = [list(x) if isinstance(x, list) else x for x in saved]
        mine[3] = saved[3] & ~(termios.ICANON | termios.ECHO)
        mine[6][termios.VMIN] = 1
        mine[6][termios.VTIME] = 0
        keys = "[o]nce [r]un " + ("[p]rofile " if offer_profile else "") + "[d]eny"
        pid, exe, cmd = q.process.get("pid"), q.process.get("exe"), q.process.get("cmdline")
        shown = f"{exe or '?'} ({cmd})" if cmd else str(exe or "?")
        who = f"pid {pid} {_printable(shown, 40)}" if pid else "the agent"
        line = f" confine: {who} wants {q.shown()}: allow {keys}? "
        try:
            cols = os.get_terminal_size(fd).columns
        except OSError:
            cols = 0
        if cols > 20 and len(line) >= cols:
            # one line only: a wrapped question would scroll the agent's screen
            short = "[o/r/p/d]" if offer_profile else "[o/r/d]"
            line = f" confine: {q.shown()[:cols - 32]}: allow {short}? "[:cols - 1]
        try:
            termios.tcsetattr(fd, termios.TCSANOW, mine)
            termios.tcflush(fd, termios.TCIFLUSH)     # typed-ahead keys were for the agent
            os.write(fd, b"\0337\033[999;1H\033[2K\033[7m" + line.encode() + b"\033[0m")
            key = self._key(fd)
        except OSError as e:
            return "deny", f"terminal: {e.strerror}"
        finally:
            try:
                os.write(fd, b"\r\033[2K\0338")
                if termios.tcgetattr(fd) == mine:
                    termios.tcsetattr(fd, termios.TCSANOW, saved)
            except (OSError, termios.error):
                pass
        if key is None:
            return "deny", f"no answer in {self.timeout:g} s"
        d = self.KEYS.get(key.lower())
        if d is None or (d == "profile" and not offer_profile):
            return "deny", f"key {key!r} is not an allow"
        return d, ""

    def _key(self, fd: int) -> str | None:
        end = time.monotonic() + self.timeout
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return None
            r, _, _ = select.select([fd], [], [], left)
            if not r:
                return None
            try:
                b = os.read(fd, 1)
            except OSError as e:
                if e.errno in (errno.EAGAIN, errno.EINTR):
                    continue
                raise
            if not b:
                raise OSError(errno.EIO, "terminal closed")
            return b.decode("latin-1")


# --- a program ---
class CommandApprover:
    """`--approver CMD`: one JSON event on stdin, one JSON answer on stdout.

    The answer is `{"decision": "once" | "run" | "profile" | "deny"}` (an
    optional "reason"). The program runs as the supervisor (the invoking user),
    outside the sandbox, with the supervisor's environment, in its own session
    (a timeout kills its whole group), stdin and stdout pipes, stderr the
    supervisor's."""

    def __init__(self, command: str, timeout: float = APPROVER_TIMEOUT,
                 env: dict[str, str] | None = None) -> None:
        self.argv = shlex.split(command)
        if not self.argv:
            raise ConfineError("--approver: empty command")
        self.timeout = timeout
        self.env = dict(os.environ) if env is None else env

    def __call__(self, ev: Event, offer: tuple[str, ...]) -> tuple[str, str]:
        with _ONE:
            return self._run(ev, offer)

    def _run(self, ev: Event, offer: tuple[str, ...]) -> tuple[str, str]:
        offer_profile = "profile" in offer
        event: dict[str, Any] = {"event": "ask", "version": 1, **ev.to_dict(), "choices": list(offer),
                                 **_legacy(ev)}
        try:
            p = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 env=self.env, start_new_session=True, close_fds=True)
        except OSError as e:
            return "deny", f"approver did not start: {e.strerror}"
        try:
            out, status = self._talk(p, (json.dumps(event) + "\n").encode())
        finally:
            # the whole group, before it is reaped (until then its id cannot be reused):
            # what it left running must not outlive the question
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except OSError:
                pass
            p.wait()
        if out is None:
            return "deny", f"approver gave no answer in {self.timeout:g} s"
        if status != 0:
            return "deny", f"approver exited with status {status}"
        try:
            ans = json.loads(out.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            return "deny", "approver's answer is not JSON"
        if not isinstance(ans, dict) or ans.get("decision") not in ANSWERS:
            return "deny", "approver's answer has no decision"
        d = str(ans["decision"])
        if d == "profile" and not offer_profile:
            return "run", "profile not offered: allowed for this run"
        reason = ans.get("reason")
        return d, reason[:200] if isinstance(reason, str) else ""

    def _talk(self, p: subprocess.Popen[bytes], data: bytes) -> tuple[bytes | None, int]:
        assert p.stdin is not None and p.stdout is not None
        end = time.monotonic() + self.timeout
        try:
            p.stdin.write(data)
            p.stdin.close()
        except OSError:
            pass   # it did not read its question: its answer still decides (and must be an allow)
        out = b""
        fd = p.stdout.fileno()
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return None, -1
            r, _, _ = select.select([fd], [], [], min(left, 0.1))
            if not r:
                if p.poll() is not None:
                    break   # it answered and exited; a child it left holding stdout is killed below
                continue
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            out += chunk
            if len(out) > MAX_ANSWER:
                return b"", -1
        try:
            status = p.wait(timeout=max(0.0, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            return None, -1
        return out, status


# --- a decider on a unix socket ---
def frame(obj: dict[str, Any]) -> bytes:
    """One frame: 4-byte big-endian length, then that many bytes of UTF-8 JSON (an object)."""
    body = json.dumps(obj, separators=(",", ":"), default=str).encode("utf-8")
    if len(body) > MAX_FRAME:
        raise ValueError(f"frame of {len(body)} bytes is larger than {MAX_FRAME}")
    return FRAME.pack(len(body)) + body


def read_frame(sock: socket.socket, deadline: float) -> dict[str, Any]:
    """One frame from `sock` by `deadline` (time.monotonic()); ValueError for anything
    but one JSON object within MAX_FRAME, TimeoutError past the deadline."""
    head = _read(sock, FRAME.size, deadline)
    (n,) = FRAME.unpack(head)
    if n == 0 or n > MAX_FRAME:
        raise ValueError(f"frame length {n} (1 to {MAX_FRAME})")
    body = _read(sock, n, deadline)
    try:
        obj = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise ValueError("frame is not UTF-8 JSON") from None
    if not isinstance(obj, dict):
        raise ValueError("frame is not a JSON object")
    return obj


def _read(sock: socket.socket, n: int, deadline: float) -> bytes:
    out = b""
    while len(out) < n:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("no answer in time")
        sock.settimeout(left)
        try:
            chunk = sock.recv(n - len(out))
        except socket.timeout:
            raise TimeoutError("no answer in time") from None
        if not chunk:
            raise ValueError("the decider closed the connection")
        out += chunk
    return out


_ANSWER_KEYS = frozenset({"type", "id", "decision", "reason"})


class SocketApprover:
    """`--approver-socket PATH`: a question frame out, an answer frame back, on a new
    connection per question (a decider that restarts between questions loses
    nothing; one that is absent or dead denies). The question:
    {"type": "question", "version": 1, "id": N, "run": RUN, "workdir": DIR,
     "kind": K, "subject": {...}, "process": {"pid", "exe"}, "choices": [...]}
    the answer: {"type": "answer", "id": N, "decision": one of choices, "reason": "..."
    (optional, at most 200 characters shown)}; any other key, a wrong id or type, a
    second frame's worth of garbage: deny."""

    def __init__(self, path: str, *, run: str = "", workdir: str = "",
                 timeout: float = APPROVER_TIMEOUT) -> None:
        self.path = path
        self.run = run
        self.workdir = workdir
        self.timeout = timeout
        self._next = 0

    def __call__(self, ev: Event, offer: tuple[str, ...]) -> tuple[str, str]:
        with _ONE:
            self._next += 1
            return self.ask(ev, offer, self._next)

    def ask(self, ev: Event, offer: tuple[str, ...], qid: int) -> tuple[str, str]:
        question = {"type": "question", "version": FRAME_VERSION, "id": qid, "run": self.run,
                    "workdir": self.workdir, **ev.to_dict(), "choices": list(offer)}
        deadline = time.monotonic() + self.timeout
        try:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        except OSError as e:
            return "deny", f"approver socket: {e.strerror}"
        try:
            s.settimeout(self.timeout)
            try:
                s.connect(self.path)
                s.sendall(frame(question))
            except OSError as e:
                return "deny", f"approver socket {self.path}: {e.strerror or e}"
            except ValueError as e:
                return "deny", f"question too large: {e}"
            try:
                ans = read_frame(s, deadline)
            except TimeoutError:
                return "deny", f"approver socket gave no answer in {self.timeout:g} s"
            except (ValueError, OSError) as e:
                return "deny", f"approver socket: {e}"
        finally:
            s.close()
        if set(ans) - _ANSWER_KEYS:
            return "deny", f"approver socket: unknown keys {sorted(set(ans) - _ANSWER_KEYS)[:5]}"
        if ans.get("type", "answer") != "answer" or ans.get("id") != qid:
            return "deny", "approver socket: the answer is not to this question"
        d = ans.get("decision")
        if d not in offer:
            return "deny", f"approver socket: {str(d)[:40]!r} is not one of {', '.join(offer)}"
        reason = ans.get("reason", "")
        if not isinstance(reason, str):
            return "deny", "approver socket: reason is not a string"
        return str(d), reason[:200]


def choose(command: str | None, socket_path: str | None, *, tty: str = "/dev/tty",
           timeout: float | None = None, run: str = "", workdir: str = "") -> tuple[Any, str]:
    """(approver, its name) for a run: the socket decider, else the command, else the
    terminal; without any of them every question is denied (non-interactive)."""
    if socket_path:
        return (SocketApprover(socket_path, run=run, workdir=workdir,
                               timeout=APPROVER_TIMEOUT if timeout is None else timeout),
                f"socket {socket_path}")
    if command:
        cmd = CommandApprover(command, timeout=APPROVER_TIMEOUT if timeout is None else timeout)
        return cmd, f"command {os.path.basename(cmd.argv[0])}"
    try:
        fd = os.open(tty, os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC)
        os.close(fd)
    except OSError:
        return deny_all("non-interactive (no terminal)"), "non-interactive"
    return TtyApprover(tty, TTY_TIMEOUT if timeout is None else timeout), "tty"


def deny_all(reason: str) -> Any:
    def approver(ev: Event, offer: tuple[str, ...]) -> tuple[str, str]:
        return "deny", reason
    return approver
