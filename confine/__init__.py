"""confine: host-level confinement launcher for AI agents on Linux."""
import gc as _gc

# Importing confine makes tens of thousands of objects and almost no garbage: the
# collector's passes over them cost a third of the import (a start of `confine
# exec`). Off while importing, back as it was afterwards. Turned back on, the
# collector would scan all of them at the next allocation (6-10 ms): unless the
# program has frozen objects of its own (which unfreeze would release), they go
# straight to the oldest generation, where a full collection still sees them.
_gc_was_on = _gc.isenabled()
_gc.disable()
try:
    from .api import Completed, Sandbox, prepare, run, run_result
    from .errors import ConfineError
finally:
    if _gc_was_on:
        if not _gc.get_freeze_count():
            _gc.freeze()
            _gc.unfreeze()
        _gc.enable()

__all__ = ["run", "run_result", "prepare", "Sandbox", "Completed", "ConfineError"]
__version__ = "0.1.0"
