"""confine: host-level confinement launcher for AI agents on Linux."""
from .api import Completed, Sandbox, prepare, run, run_result
from .errors import ConfineError

__all__ = ["run", "run_result", "prepare", "Sandbox", "Completed", "ConfineError"]
__version__ = "0.1.0"
