"""The real values, got outside the sandbox before the start, and their placeholders.

Sources: the launching person's environment, a file of theirs, or a command run as
them (never through a shell, with a timeout, stdin closed, its stderr kept out of
every message when it succeeded). The threats:
- a value that reaches the agent some other way than the gateway: nothing here
  writes it anywhere; errors name the credential and the source, never the value
  (and never a failed command's output beyond a few lines of its stderr);
- a file someone else controls (the value would be theirs to choose) or that
  others may already read: the file must belong to the person (or root) and not
  be writable by group or others; readable by others is said, not refused;
- a placeholder a tool rejects for its shape (`ghp_` + 36 alphanumerics, `sk-ant-`):
  see `placeholder` for the rule.

A value is one line of printable characters (it goes into an HTTP header), of at
least 8: a value with a control character or a line break, or shorter, is refused.
"""
from __future__ import annotations

import json
import os
import secrets
import stat
import string
import subprocess
from collections.abc import Mapping, Sequence

from ..errors import ConfineError, printable
from ..record import dataclass

COMMAND_TIMEOUT = 60.0         # seconds a from_command or mint: may take
MAX_OUTPUT = 1 << 20           # bytes read from it
MAX_FILE = 1 << 20
MIN_LENGTH = 8
# Known prefixes kept as they are (tools and servers check them), longest first.
PREFIXES = tuple(sorted((
    "github_pat_", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "glpat-", "gldt-", "glptt-",
    "sk-ant-api03-", "sk-ant-oat01-", "sk-ant-ort01-", "sk-ant-admin01-", "sk-ant-", "sk-proj-", "sk-svcacct-",
    "sk-admin-", "sk-", "xoxb-", "xoxp-", "xoxa-", "xapp-", "hf_", "npm_", "pypi-", "AKIA",
    "ASIA", "glc_", "dop_v1_", "shpat_", "SG.", "rk_live_", "sk_live_", "sk_test_",
    "Bearer ",
), key=len, reverse=True))
MIN_RANDOM_BITS = 64           # below this the shape is given up for a long random placeholder
_HEX_LOWER = set(string.digits + "abcdef")
_HEX_UPPER = set(string.digits + "ABCDEF")
_CLASSES = (string.ascii_lowercase, string.ascii_uppercase, string.digits)


class SourceError(ConfineError):
    """A credential's value could not be got; the message never holds the value."""


@dataclass(frozen=True)
class Got:
    value: str
    expires: str | None = None         # as the mint command printed it, if it did

    def __repr__(self) -> str:
        return f"Got(<{len(self.value)} characters>, expires={self.expires!r})"


def check_value(name: str, what: str, value: str) -> str:
    """The value as it will go on the wire: surrounding white space removed; one
    printable line, not empty."""
    v = value.strip()
    if not v:
        raise SourceError(f"credential {name}: {what} gave an empty value")
    if any(ord(c) < 0x20 or ord(c) == 0x7f for c in v):
        raise SourceError(f"credential {name}: the value from {what} has a line break or a "
                          "control character (a value is one line)")
    if len(v) < MIN_LENGTH:
        # copies of it are looked for in the agent's environment (plan/env.py): a value
        # this short would match ordinary text, and no real token is this short
        raise SourceError(f"credential {name}: the value from {what} has fewer than "
                          f"{MIN_LENGTH} characters: is that the right source?")
    return v


def from_env(name: str, var: str, env: Mapping[str, str]) -> str | None:
    v = env.get(var)
    return None if v is None else check_value(name, f"the environment variable {var}", v)


def from_file(name: str, path: str, euid: int | None = None) -> tuple[str, list[str]]:
    """(value, notes). The file is opened once and judged by what was opened."""
    text, notes = read_file(name, path, euid)
    return check_value(name, f"from_file {printable(path)}", text), notes


def read_file(name: str, path: str, euid: int | None = None,
              only: tuple[int, ...] = ()) -> tuple[str, list[str]]:
    """(text, notes): a file of the person's (or root's), not writable by others, as
    UTF-8 text. `only`: the owners accepted instead, and no symlink as the last
    component (an agent's login: root reading it for --user must not be led to a
    file of root's)."""
    euid = os.geteuid() if euid is None else euid
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOCTTY | os.O_NONBLOCK
                     | (os.O_NOFOLLOW if only else 0))
    except OSError as e:
        raise SourceError(f"credential {name}: from_file {printable(path)}: "
                          f"{e.strerror}") from None
    notes = []
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise SourceError(f"credential {name}: from_file {printable(path)}: not a "
                              "regular file")
        if st.st_uid not in (only or (euid, 0)):
            raise SourceError(f"credential {name}: from_file {printable(path)} belongs to uid "
                              f"{st.st_uid}, not to you: its owner chooses the value")
        if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise SourceError(f"credential {name}: from_file {printable(path)} is writable by "
                              "group or others (chmod go-w): they could choose the value")
        if st.st_mode & (stat.S_IRGRP | stat.S_IROTH):
            notes.append(f"credential {name}: from_file {printable(path)} is readable by group "
                         "or others (chmod go-r)")
        data = os.read(fd, MAX_FILE + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_FILE:
        raise SourceError(f"credential {name}: from_file {printable(path)}: larger than "
                          f"{MAX_FILE} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise SourceError(f"credential {name}: from_file {printable(path)}: not UTF-8 "
                          "text") from None
    return text, notes


def run(name: str, what: str, argv: Sequence[str], *, stdin: bytes | None = None,
        timeout: float = COMMAND_TIMEOUT) -> bytes:
    """Run argv as this process's user, without a shell, in a session of its own (a
    timeout kills its group). Its stdout is returned; its stderr is shown only
    when it failed (a few lines: it may be the only explanation the person gets)."""
    shown = printable(" ".join(argv))[:120]
    try:
        p = subprocess.Popen(list(argv), stdin=subprocess.PIPE if stdin is not None
                             else subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, start_new_session=True, close_fds=True)
    except OSError as e:
        raise SourceError(f"credential {name}: {what} {shown}: {e.strerror or e}") from None
    try:
        out, err = p.communicate(stdin, timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(p.pid)
        p.communicate()
        raise SourceError(f"credential {name}: {what} {shown}: no answer in {timeout:g} s "
                          "(killed)") from None
    finally:
        _kill_group(p.pid)      # what it left running in its session must not outlive it
    if p.returncode != 0:
        tail = [printable(x)[:200] for x in err.decode("utf-8", "replace").splitlines()[-3:]]
        raise SourceError(f"credential {name}: {what} {shown} exited with status "
                          f"{p.returncode}" + (": " + " / ".join(tail) if tail else ""))
    if len(out) > MAX_OUTPUT:
        raise SourceError(f"credential {name}: {what} {shown}: more than {MAX_OUTPUT} bytes "
                          "of output")
    return out


def _kill_group(pid: int) -> None:
    import signal
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass


def from_command(name: str, what: str, argv: Sequence[str],
                 timeout: float = COMMAND_TIMEOUT) -> Got:
    """The value a command prints: its first line, and optionally the expiry on the
    second; or one JSON object {"value": ..., "expires": ...} ("token" for "value",
    "expiration"/"expires_at" for "expires")."""
    out = run(name, what, argv, timeout=timeout)
    try:
        text = out.decode("utf-8")
    except UnicodeDecodeError:
        raise SourceError(f"credential {name}: {what}: its output is not UTF-8") from None
    stripped = text.strip()
    if stripped.startswith("{"):
        try:
            obj = json.loads(stripped)
        except ValueError:
            raise SourceError(f"credential {name}: {what}: its output starts with '{{' but "
                              "is not JSON") from None
        val = obj.get("value", obj.get("token")) if isinstance(obj, dict) else None
        if not isinstance(val, str):
            raise SourceError(f"credential {name}: {what}: its JSON has no string "
                              "\"value\" (or \"token\")")
        exp = next((obj[k] for k in ("expires", "expiration", "expires_at") if k in obj), None)
        return Got(check_value(name, what, val), None if exp is None else printable(str(exp))[:80])
    lines = stripped.splitlines()
    if not lines:
        raise SourceError(f"credential {name}: {what} printed nothing")
    exp2 = lines[1].strip() if len(lines) > 1 else ""
    if len(lines) > 2:
        raise SourceError(f"credential {name}: {what} printed {len(lines)} lines (the value, "
                          "and optionally its expiry, one line each)")
    return Got(check_value(name, what, lines[0]), printable(exp2)[:80] or None)


def placeholder(value: str) -> str:
    """What the agent holds instead of `value`, made afresh for each run.

    The rule: a known prefix (ghp_, github_pat_, sk-ant-api03-, sk-, xoxb-, ...) is
    kept; every other character is replaced by a random one of its own class
    (lower case, upper case, digit; a value that is all hex digits stays hex);
    anything else (-, _, ., =) is kept where it is. So the length, the prefix and
    each position's class are the value's, and nothing else of it. If that leaves
    less than 64 random bits (a short value), the shape is given up: the known
    prefix (or `confine-`) and 32 random hex digits. Never equal to the value."""
    prefix = next((p for p in PREFIXES if value.startswith(p) and len(value) > len(p)), "")
    body = value[len(prefix):]
    chars = set(body)
    if chars <= _HEX_LOWER and len(chars & set("abcdef")) > 0:
        alphabets = [string.digits + "abcdef" if c in _HEX_LOWER else "" for c in body]
    elif chars <= _HEX_UPPER and len(chars & set("ABCDEF")) > 0:
        alphabets = [string.digits + "ABCDEF" if c in _HEX_UPPER else "" for c in body]
    else:
        alphabets = [next((a for a in _CLASSES if c in a), "") for c in body]
    import math
    bits = sum(math.log2(len(a)) for a in alphabets if a)
    while True:
        if bits < MIN_RANDOM_BITS:
            out = (prefix or "confine-") + secrets.token_hex(16)
        else:
            out = prefix + "".join(secrets.choice(a) if a else c
                                   for a, c in zip(alphabets, body, strict=True))
        if out != value and value not in out and out not in value:
            return out
