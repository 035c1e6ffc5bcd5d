"""confine: host-level confinement launcher for AI agents on Linux."""
from .api import prepare, run
from .errors import ConfineError

__all__ = ["run", "prepare", "ConfineError"]
__version__ = "0.1.0"
