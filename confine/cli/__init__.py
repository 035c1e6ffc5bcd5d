"""The command line: click only. Parse, call the API, print, map errors to exit codes.
`confine exec [OPTIONS] -- CMD...` in its common spellings is parsed without click
(cli/fast.py); everything else goes to click (cli/main.py)."""
from __future__ import annotations

from typing import Any, NoReturn

__all__ = ["cli", "console", "main"]


def console() -> NoReturn:
    """The `confine` executable."""
    import sys

    from .fast import exec_args, imports_without_gc, leave, run
    got = exec_args(sys.argv[1:])
    if got is None:
        with imports_without_gc(freeze=True):   # main's console freezes first anyway
            from .main import console as with_click
        with_click()
    leave(run(*got))


def __getattr__(name: str) -> Any:
    if name not in ("cli", "main"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from .fast import imports_without_gc
    with imports_without_gc():
        from . import main as _m
    globals().update(cli=_m.cli, main=_m.main)   # the functions, not the submodule
    return globals()[name]
