#!/usr/bin/env python3
"""Print a man page (roff) for confine, generated from the CLI's own --help texts,
so it can never disagree with them. Usage: python3 scripts/gen-man.py > confine.1"""
from __future__ import annotations

import datetime
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _python_with_confine() -> None:
    """A plain `python3` lacks confine's dependencies (click, landlockpy, ...): run again
    with the Python of confine's own install (./install.sh as root or as a user, or
    `./test.sh --fast`'s .venv), once, or say what to do."""
    import os
    if not os.environ.get("CONFINE_GEN_MAN_REEXEC"):
        os.environ["CONFINE_GEN_MAN_REEXEC"] = "1"
        for py in ("/opt/confine/bin/python",
                   os.path.expanduser("~/.local/share/confine/bin/python"),
                   str(REPO / ".venv" / "bin" / "python")):
            if os.access(py, os.X_OK):
                os.execv(py, [py, __file__, *sys.argv[1:]])
    sys.exit("gen-man.py: needs confine's dependencies (click, landlockpy, ...): run "
             "./install.sh first (the script then uses that install's Python), or run it "
             "with a Python that has them")


try:
    import click  # noqa: E402

    from confine import __version__  # noqa: E402
    from confine.cli.main import cli  # noqa: E402
except ImportError:
    _python_with_confine()
    raise


def _esc(text: str) -> str:
    lines = (line.replace("\\", "\\\\").replace("-", "\\-") for line in text.splitlines())
    return "\n".join("\\&" + line if line.startswith((".", "'")) else line for line in lines)


def _commands(group: click.Group, ctx: click.Context, prefix: str):
    for name in sorted(group.list_commands(ctx)):
        cmd = group.get_command(ctx, name)
        if cmd is None or cmd.hidden:
            continue
        sub = click.Context(cmd, info_name=name, parent=ctx)
        yield f"{prefix} {name}", cmd, sub
        if isinstance(cmd, click.Group):
            yield from _commands(cmd, sub, f"{prefix} {name}")


def main() -> None:
    ctx = click.Context(cli, info_name="confine")
    out = [f'.TH CONFINE 1 "{datetime.date.today():%Y-%m-%d}" "confine {__version__}"',
           ".SH NAME", "confine \\- run AI agents inside a kernel-enforced boundary",
           ".SH SYNOPSIS", ".B confine", "COMMAND [OPTIONS] [-- CMD [ARGS...]]",
           ".SH DESCRIPTION", _esc(cli.get_help(ctx))]
    out.append(".SH COMMANDS")
    for name, cmd, sub in _commands(cli, ctx, "confine"):
        out += [f".SS {_esc(name)}", ".nf", _esc(cmd.get_help(sub)), ".fi"]
    out += [".SH EXIT STATUS",
            "The command's own status; 128+N if it died of signal N; 125 confine's own error "
            "(one line on stderr); 126 found but not executable; 127 not found.",
            ".SH SEE ALSO", "README.md, CONTRIBUTING.md, docs/ in the source tree."]
    print("\n".join(out))


if __name__ == "__main__":
    main()
