"""The command line: click only. Parse, call the API, print, map errors to exit codes."""
import gc as _gc

# As in confine/__init__.py: no collection passes while importing (console()
# freezes what was imported before it runs anything).
_gc_was_on = _gc.isenabled()
_gc.disable()
try:
    from .main import cli, console, main
finally:
    if _gc_was_on:
        _gc.enable()

__all__ = ["cli", "console", "main"]
