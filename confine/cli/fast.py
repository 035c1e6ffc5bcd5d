"""`confine exec [OPTIONS] -- CMD...` without click: the common start parsed by
hand, so a run does not import click (a tenth of a start) before it confines.

Only what is certainly read the same way as cli/main.py's `exec` reads it is
taken here: each option spelled in full as `--name VALUE`, `--name=VALUE`,
`-p VALUE`, `-w VALUE` or a flag, then `--` and the command. Anything else
(--dry-run, --help, a value that starts with '-', an unknown or abbreviated
option, no `--`, a workdir that is a file) returns None and click parses it,
with its own messages. tests/unit/test_cli_fast.py checks both agree."""
from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NoReturn

# name -> (option key, repeatable); the names are main.py's exec options
_VALUES: dict[str, tuple[str, bool]] = {
    "-p": ("profile", False), "--profile": ("profile", False),
    "-w": ("workdir", False), "--workdir": ("workdir", False),
    "--read": ("read", True), "--write": ("write", True), "--env": ("env", True),
    "--user": ("user", False), "--degrade": ("degrade", True),
    "--apparmor": ("apparmor", False), "--selinux-context": ("selinux_context", False),
    "--log": ("log", False), "--allow-host": ("allow_host", True),
    "--approver": ("approver", False), "--approver-socket": ("approver_socket", False),
    "--credential": ("credential", True),
}
_FLAGS: dict[str, tuple[str, bool]] = {
    "--allow-degraded": ("allow_degraded", True), "--force-workdir": ("force_workdir", True),
    "--agent-status": ("agent_status", True), "--agent-home": ("agent_home", True),
    "--no-agent-home": ("agent_home", False), "--exclusive-workdir": ("exclusive", True),
}


def exec_args(argv: list[str]) -> tuple[list[str], dict[str, Any]] | None:
    """(command, api.run keyword arguments) for `exec ... -- CMD...`, or None."""
    if len(argv) < 3 or argv[0] != "exec" or "--" not in argv:
        return None
    if os.environ.get("CONFINE_DELEGATE"):
        return None                       # inside a run: click's exec delegates it
    end = argv.index("--")
    command = argv[end + 1:]
    if not command:
        return None
    opts: dict[str, Any] = {"profile": "default", "workdir": None, "user": None,
                            "apparmor": None, "selinux_context": None, "log": None,
                            "approver": None, "approver_socket": None, "allow_degraded": False,
                            "force_workdir": False, "agent_status": False, "agent_home": True,
                            "exclusive": False}
    many: dict[str, list[str]] = {k: [] for k in ("read", "write", "env", "degrade",
                                                  "allow_host", "credential")}
    i = 1
    while i < end:
        tok = argv[i]
        name, eq, val = tok.partition("=") if tok.startswith("--") else (tok, "", "")
        if name in _FLAGS and not eq:
            key, value = _FLAGS[name]
            opts[key] = value
            i += 1
            continue
        if name not in _VALUES:
            return None
        if not eq:
            if i + 1 >= end:
                return None
            val = argv[i + 1]
            i += 2
        else:
            i += 1
        if val.startswith("-") or not val:
            return None
        key, repeat = _VALUES[name]
        if repeat:
            many[key].append(val)
        else:
            opts[key] = val
    if opts["workdir"] is not None and os.path.isfile(opts["workdir"]):
        return None                       # click.Path(file_okay=False) says why
    degrade = tuple(many.pop("degrade"))
    opts.update({k: tuple(v) for k, v in many.items()})
    opts["allow_degraded"] = opts["allow_degraded"] or degrade
    return command, opts


@contextmanager
def imports_without_gc(freeze: bool = False) -> Iterator[None]:
    """As in confine/__init__.py: imports make many objects and almost no garbage,
    so the collector's passes are off while they run, then back as they were.
    `freeze`: what is there is kept out of every collection (gc.freeze) before
    the collector is back, which would otherwise scan it all once first."""
    import gc
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if freeze:
            gc.freeze()
        if was_on:
            gc.enable()


def run(command: list[str], opts: dict[str, Any]) -> int:
    """api.run, with cli/main.py main()'s exit codes and one-line errors."""
    with imports_without_gc(freeze=True):
        from .. import api
        from ..errors import ConfineError, say
        from ..protect import index
        from ..runtime import launch  # noqa: F401 - what every run imports, here
    index.OWN_PROCESS = True
    try:
        return api.run(command, **opts)
    except ConfineError as e:
        say(str(e))
        return e.status
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # one line, not a traceback; CONFINE_DEBUG=1 shows it
        if os.environ.get("CONFINE_DEBUG"):
            raise
        say(f"internal error: {type(e).__name__}: {e}")
        return 125


def leave(code: object) -> NoReturn:
    """Exit without the interpreter's shutdown (a full garbage collection of
    everything imported, tens of ms per run); the session has already cleaned
    up what it made."""
    import sys
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    if not isinstance(code, int):
        if code is not None:
            print(code, file=sys.stderr)
        code = 0 if code is None else 1
    os._exit(code)
