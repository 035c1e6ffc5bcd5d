"""Ask (`network.default: ask`): a destination no rule decides is put to a person or a program.

The threats, and the answer to each:
- the agent answering its own question: the question goes to the supervisor's
  /dev/tty (never the agent's stdin or stdout), keys typed before the question
  appeared are flushed (they were meant for the agent), and TIOCSTI is refused
  by seccomp, so only a person at the keyboard answers; `--approver CMD` runs
  outside the sandbox with the supervisor's environment, never the agent's;
- an agent flooding the person with questions: one question at a time, the
  same (host, port) asked once (concurrent connections wait on the same
  question), every answer but "once" remembered for the run, denials included;
- an unclear answer: only an explicit allow allows. No terminal, a closed
  terminal, a timeout, a key that is not one of the offered ones, an approver
  that exits non-zero, prints anything but one JSON answer, or runs too long:
  denied;
- a profile broken by "add to the profile": the new text is validated (YAML
  round trip: only `network.allow` changed, the entry parses; then the
  caller's `validate`, the policy loader), written to a temporary file beside
  it and renamed over it (atomic), under a lock file against concurrent runs,
  and only if nobody changed it since it was read. A built-in profile or one
  that is not writable is never edited ("profile" is then not offered).

The gateway calls the asker where `Rules.decide` finds no rule (an explicit
deny is never asked). DNS asks with a bounded wait: while a question is
pending the query gets no answer (the client retries); the answer, once
given, is remembered, so the connection that follows is not asked again.
"""
from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import select
import shlex
import signal
import subprocess
import termios
import threading
import time
from typing import Any, Callable

from ..errors import ConfineError
from ..record import dataclass, field
from .rules import RuleError, parse_rule

Log = Callable[[dict[str, Any]], None]
ALLOW = ("once", "run", "profile")
DECISIONS = (*ALLOW, "deny")
TTY_TIMEOUT = 60.0        # a question nobody answers is denied
APPROVER_TIMEOUT = 30.0
ONCE_HOLD = 60.0          # an "once" nobody was waiting for any more (a DNS retry) is kept this long
MAX_ANSWER = 65536        # bytes read from an approver
MAX_REMEMBERED = 4096     # answers remembered for the run (the agent chooses the hosts)
MAX_PENDING = 32          # questions waiting for the person; more are denied at once (a flood of names)
LOCK_WAIT = 5.0


@dataclass(frozen=True)
class Question:
    host: str                       # a normalised name
    port: int | None                # None: a DNS query (no port yet)
    via: str = "proxy"              # "proxy", "transparent", "dns"
    pid: int | None = None
    exe: str | None = None
    wait: float | None = None       # how long the caller waits; then Answer("pending")

    @property
    def entry(self) -> str:
        """The allow entry this question would add to a profile."""
        return self.host if self.port in (None, 443) else f"{self.host}:{self.port}"

    def shown(self) -> str:
        return f"{self.host} (DNS lookup)" if self.port is None else f"{self.host}:{self.port}"


@dataclass(frozen=True)
class Answer:
    decision: str                   # once, run, profile, deny, pending (nobody answered yet)
    approver: str                   # "tty", "command NAME", "remembered", "non-interactive", ...
    reason: str = ""

    @property
    def allowed(self) -> bool:
        return self.decision in ALLOW

    @property
    def rule(self) -> str:
        return f"ask {self.decision} ({self.approver})"


Backend = Callable[[Question, bool], tuple[str, str]]   # (question, profile offered) -> (decision, reason)


@dataclass
class _Pending:
    question: Question
    done: threading.Event = field(default_factory=threading.Event)
    answer: Answer | None = None
    waiters: int = 0


class Asker:
    """Remembers answers for the run and puts new questions, one at a time, to a backend."""

    def __init__(self, backend: Backend, approver: str, *, profile: ProfileWriter | None = None,
                 events: Log | None = None) -> None:
        self._backend = backend
        self.approver = approver
        self.profile = profile
        self._events = events
        self._lock = threading.Lock()
        self._allowed: set[tuple[str, int | None]] = set()      # run and profile answers
        self._denied: set[tuple[str, int | None]] = set()
        self._once: dict[tuple[str, int | None], float] = {}    # host, port -> until (monotonic)
        self._pending: dict[tuple[str, int | None], _Pending] = {}
        self._queue: list[_Pending] = []
        self._wake = threading.Condition(self._lock)
        self._worker: threading.Thread | None = None

    # --- what is remembered ---
    def _remembered(self, key: tuple[str, int | None]) -> Answer | None:
        host, port = key
        now = time.monotonic()
        if (host, None) in self._denied or key in self._denied:
            return Answer("deny", "remembered", "denied earlier in this run")
        if port is None:
            if any(h == host for h, _ in self._allowed):
                return Answer("run", "remembered")
        elif key in self._allowed:
            return Answer("run", "remembered")
        until = self._once.pop(key, None)
        if until is not None and until >= now:
            return Answer("once", "remembered", "allowed once")
        return None

    def _remember(self, key: tuple[str, int | None], a: Answer, waiters: int) -> None:
        host, port = key
        if len(self._allowed) + len(self._denied) + len(self._once) >= MAX_REMEMBERED:
            return   # bounded: later questions are asked again (and denied if nobody answers)
        if a.decision == "deny":
            self._denied.add(key)
        elif a.decision in ("run", "profile"):
            self._allowed.add((host, 443 if port is None else port))
        elif a.decision == "once":
            until = time.monotonic() + ONCE_HOLD
            if port is None:
                # a lookup allowed once: the connection that follows it is the same request
                self._once[(host, 443)] = until
            if waiters == 0:
                self._once[key] = until   # the waiter gave up (a DNS retry will come)

    # --- asking ---
    def __call__(self, q: Question) -> Answer:
        key = (q.host, q.port)
        with self._lock:
            hit = self._remembered(key)
            if hit is not None:
                self._log(q, hit)
                return hit
            p = self._pending.get(key)
            if p is None and len(self._pending) >= MAX_PENDING:
                full = Answer("deny", self.approver, f"{MAX_PENDING} questions are already waiting")
                self._log(q, full)
                return full
            if p is None:
                p = _Pending(q)
                self._pending[key] = p
                self._queue.append(p)
                self._start_worker()
                self._wake.notify()
            p.waiters += 1
        p.done.wait(q.wait)
        with self._lock:
            p.waiters -= 1
            a = p.answer
        if a is None:
            return Answer("pending", self.approver, "the question is not answered yet")
        return a

    def _start_worker(self) -> None:
        if self._worker is None:
            self._worker = threading.Thread(target=self._work, daemon=True, name="confine-ask")
            self._worker.start()

    def _work(self) -> None:
        # the terminal is ours to read only in the foreground; never stop the supervisor for it
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTTIN, signal.SIGTTOU})
        while True:
            with self._lock:
                while not self._queue:
                    self._wake.wait()
                p = self._queue.pop(0)
            a = self._decide(p.question)
            with self._lock:
                p.answer = a
                self._pending.pop((p.question.host, p.question.port), None)
                self._remember((p.question.host, p.question.port), a, p.waiters)
                p.done.set()
            self._log(p.question, a)

    def _decide(self, q: Question) -> Answer:
        offered = self.profile is not None and self.profile.why_not() is None
        try:
            decision, reason = self._backend(q, offered)
        except Exception as e:  # noqa: BLE001 - an approver that fails denies
            decision, reason = "deny", f"approver failed: {type(e).__name__}: {e}"
        if decision not in DECISIONS:
            decision, reason = "deny", f"not an answer: {decision[:80]!r}"
        if decision == "profile":
            if not offered or self.profile is None:
                why = self.profile.why_not() if self.profile is not None else "no profile file"
                return Answer("run", self.approver, f"not added to the profile ({why}): allowed for this run")
            try:
                self.profile.add(q.entry)
            except ConfineError as e:
                return Answer("run", self.approver, f"not added to the profile ({e}): allowed for this run")
            return Answer("profile", self.approver, f"added {q.entry} to {self.profile.path}")
        return Answer(decision, self.approver, reason)

    def _log(self, q: Question, a: Answer) -> None:
        if self._events is None:
            return
        ev: dict[str, Any] = {"event": "ask", "host": q.host, "port": q.port, "via": q.via,
                              "decision": a.decision, "approver": a.approver}
        if q.pid is not None:
            ev["pid"] = q.pid
        if q.exe:
            ev["exe"] = q.exe
        if a.reason:
            ev["reason"] = a.reason
        try:
            self._events(ev)
        except Exception:  # noqa: BLE001 - a failing log sink must not stop the answer
            pass


# --- the terminal ---
_SHOWN = re.compile(r"[^\x20-\x7e]")


def _printable(s: str, n: int = 60) -> str:
    return _SHOWN.sub("?", s)[:n]


class TtyBackend:
    """One prompt line at the bottom of the supervisor's terminal, one key.

    The cursor is saved and restored around the line and the line is cleared
    after the answer, so a full-screen agent loses at most its bottom line until
    it next redraws. The terminal's modes (an agent may have it in raw mode) are
    saved and put back unless the agent changed them meanwhile."""

    KEYS = {"o": "once", "r": "run", "p": "profile", "d": "deny", "n": "deny"}

    def __init__(self, path: str = "/dev/tty", timeout: float = TTY_TIMEOUT) -> None:
        self.path = path
        self.timeout = timeout

    def __call__(self, q: Question, offer_profile: bool) -> tuple[str, str]:
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

    def _ask(self, fd: int, q: Question, offer_profile: bool) -> tuple[str, str]:
        saved = termios.tcgetattr(fd)
        mine = [list(x) if isinstance(x, list) else x for x in saved]
        mine[3] = saved[3] & ~(termios.ICANON | termios.ECHO)
        mine[6][termios.VMIN] = 1
        mine[6][termios.VTIME] = 0
        keys = "[o]nce [r]un " + ("[p]rofile " if offer_profile else "") + "[d]eny"
        who = f"pid {q.pid} {_printable(q.exe or '?', 40)}" if q.pid else "the agent"
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
class CommandBackend:
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

    def __call__(self, q: Question, offer_profile: bool) -> tuple[str, str]:
        event = {"event": "ask", "version": 1, "host": q.host, "port": q.port, "via": q.via,
                 "pid": q.pid, "exe": q.exe, "entry": q.entry,
                 "choices": list(ALLOW if offer_profile else ("once", "run")) + ["deny"]}
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
        if not isinstance(ans, dict) or ans.get("decision") not in DECISIONS:
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


def _deny_all(reason: str) -> Backend:
    def backend(q: Question, offer_profile: bool) -> tuple[str, str]:
        return "deny", reason
    return backend


# --- adding to the profile ---
def _builtin_dirs() -> tuple[str, ...]:
    """Where the shipped profiles live (installed package, or a source checkout)."""
    from importlib import resources
    out = [os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "profiles")]
    try:
        out.append(str(resources.files("confine.profiles")))
    except ModuleNotFoundError:
        pass
    return tuple(out)


_NET = re.compile(r"^network:\s*(#.*)?$")
_TOP = re.compile(r"^[^\s#]")
_ALLOW_BLOCK = re.compile(r"^(\s+)allow:\s*(#.*)?$")
_ALLOW_FLOW = re.compile(r"^(\s+)allow:\s*\[(.*)\]\s*(#.*)?$")
_ITEM = re.compile(r"^(\s+)-\s")


class ProfileWriter:
    """Adds an entry to `network.allow` of one profile file, safely (see the module docstring)."""

    def __init__(self, path: str | None, *, builtin_dirs: tuple[str, ...] = (),
                 validate: Callable[[str], None] | None = None) -> None:
        self.path = os.path.realpath(path) if path else None
        self.builtin_dirs = tuple(os.path.realpath(d) for d in builtin_dirs)
        self.validate = validate

    def why_not(self) -> str | None:
        """Why this profile cannot be edited, or None."""
        if self.path is None:
            return "the profile is a built-in"
        if any(self.path.startswith(d.rstrip("/") + "/") for d in self.builtin_dirs):
            return "the profile is a built-in"
        if not os.path.isfile(self.path):
            return "the profile is not a file"
        if not os.access(self.path, os.W_OK) or not os.access(os.path.dirname(self.path), os.W_OK):
            return "the profile is not writable"
        return None

    def add(self, entry: str) -> bool:
        """Add `entry`; False if it is there already. ConfineError if it cannot be done."""
        why = self.why_not()
        if why is not None:
            raise ConfineError(why)
        assert self.path is not None
        try:
            parse_rule(entry)
        except RuleError as e:
            raise ConfineError(str(e)) from None
        lock = os.open(self.path + ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            end = time.monotonic() + LOCK_WAIT
            while True:
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except OSError as e:
                    if e.errno not in (errno.EAGAIN, errno.EACCES) or time.monotonic() > end:
                        raise ConfineError(f"{self.path}: locked by another run") from None
                    time.sleep(0.02)
            return self._add_locked(entry)
        finally:
            os.close(lock)   # releases the lock

    def _add_locked(self, entry: str) -> bool:
        import yaml  # type: ignore[import-untyped]
        assert self.path is not None
        for _ in range(3):
            st = os.stat(self.path)
            with open(self.path, encoding="utf-8") as f:
                old = f.read()
            try:
                before = yaml.safe_load(old) or {}
            except yaml.YAMLError as e:
                raise ConfineError(f"{self.path}: not valid YAML ({e})") from None
            if not isinstance(before, dict):
                raise ConfineError(f"{self.path}: not a mapping")
            net = before.get("network") or {}
            have = net.get("allow") if isinstance(net, dict) else None
            if isinstance(have, list) and entry in have:
                return False
            new = insert_allow(old, entry)
            try:
                after = yaml.safe_load(new)
            except yaml.YAMLError as e:
                raise ConfineError(f"{self.path}: the edit would not be valid YAML ({e})") from None
            want = dict(before)
            want_net = dict(net) if isinstance(net, dict) else {}
            want_net["allow"] = [*(have or []), entry]
            want["network"] = want_net
            if after != want:
                raise ConfineError(f"{self.path}: cannot add {entry} without changing something else "
                                   "(add it to network.allow by hand)")
            d = os.path.dirname(self.path)
            tmp = os.path.join(d, f".{os.path.basename(self.path)}.confine-{os.getpid()}-{threading.get_ident()}")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, st.st_mode & 0o7777)
            try:
                try:
                    os.write(fd, new.encode("utf-8"))
                    if os.geteuid() == 0:
                        os.fchown(fd, st.st_uid, st.st_gid)
                    os.fsync(fd)
                finally:
                    os.close(fd)
                if self.validate is not None:
                    try:
                        self.validate(tmp)
                    except ConfineError as e:
                        raise ConfineError(f"{self.path}: the edit does not load ({e})") from None
                now = os.stat(self.path)
                if (now.st_ino, now.st_mtime_ns, now.st_size) != (st.st_ino, st.st_mtime_ns, st.st_size):
                    continue   # changed by someone not holding the lock (an editor): read it again
                os.replace(tmp, self.path)
                tmp = ""
            finally:
                if tmp:
                    try:
                        os.unlink(tmp)
                    except OSError:
                        pass
            dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
            return True
        raise ConfineError(f"{self.path}: keeps changing while confine writes it")


def insert_allow(text: str, entry: str) -> str:
    """`text` with `entry` appended to its top-level network.allow list, comments and layout
    kept. ConfineError where the layout is not one this edits (flow mappings and the like)."""
    note = "  # added by confine (ask)"
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    net = next((i for i, ln in enumerate(lines) if _NET.match(ln.rstrip("\n"))), None)
    if net is None:
        if any(ln.startswith("network:") for ln in lines):
            raise ConfineError("network: is not a block mapping (add the entry by hand)")
        return "".join(lines) + f"network:\n  allow:\n    - {entry}{note}\n"
    end = next((i for i in range(net + 1, len(lines)) if _TOP.match(lines[i])), len(lines))
    body = range(net + 1, end)
    indent = next((re.match(r"^(\s+)", lines[i]).group(1) for i in body  # type: ignore[union-attr]
                   if lines[i].strip() and not lines[i].lstrip().startswith("#")), "  ")
    for i in body:
        ln = lines[i].rstrip("\n")
        m = _ALLOW_FLOW.match(ln)
        if m and m.group(1) == indent:
            items = [x.strip() for x in m.group(2).split(",") if x.strip()]
            tail = f"  {m.group(3)}" if m.group(3) else ""
            lines[i] = f"{indent}allow: [{', '.join([*items, entry])}]{tail}\n"
            return "".join(lines)
        m = _ALLOW_BLOCK.match(ln)
        if m and m.group(1) == indent:
            last, item_indent = i, indent + "  "
            for j in range(i + 1, end):
                s = lines[j]
                if not s.strip() or s.lstrip().startswith("#"):
                    continue
                im = _ITEM.match(s)
                lead = len(s) - len(s.lstrip())
                if im and lead >= len(indent):
                    last, item_indent = j, im.group(1)
                    continue
                if lead > len(indent) + 2 and last != i:
                    continue   # a continuation of the last item
                break
            lines.insert(last + 1, f"{item_indent}- {entry}{note}\n")
            return "".join(lines)
    ins = net + 1
    lines.insert(ins, f"{indent}allow:\n{indent}  - {entry}{note}\n")
    return "".join(lines)


def make_asker(default: str, approver: str | None, profile_path: str | None, events: Log | None, *,
               tty: str = "/dev/tty", timeout: float | None = None, builtin_dirs: tuple[str, ...] = (),
               validate: Callable[[str], None] | None = None) -> Callable[[Question], Answer] | None:
    """The asker for a run: None when `default` is "deny" (nothing is asked). `approver`
    (--approver CMD) replaces the terminal; without a terminal every question is denied.
    `profile_path`: the profile file the run loaded (None for a built-in, which is
    never edited); `validate(path)` loads a candidate profile (the policy loader) and
    raises ConfineError if it does not load."""
    if default == "deny":
        return None
    if default != "ask":
        raise ConfineError(f"network.default: {default!r} is not deny or ask")
    writer = ProfileWriter(profile_path, builtin_dirs=builtin_dirs or _builtin_dirs(), validate=validate)
    if approver:
        cmd = CommandBackend(approver, timeout=APPROVER_TIMEOUT if timeout is None else timeout)
        return Asker(cmd, f"command {os.path.basename(cmd.argv[0])}", profile=writer, events=events)
    try:
        fd = os.open(tty, os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC)
        os.close(fd)
    except OSError:
        return Asker(_deny_all("non-interactive (no terminal)"), "non-interactive", profile=writer, events=events)
    return Asker(TtyBackend(tty, TTY_TIMEOUT if timeout is None else timeout), "tty", profile=writer, events=events)


__all__ = ["Answer", "Asker", "CommandBackend", "ProfileWriter", "Question", "TtyBackend", "insert_allow",
           "make_asker"]
