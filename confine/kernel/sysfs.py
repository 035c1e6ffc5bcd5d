"""The one reader of small /proc and /sys files (kernel knobs, LSM state)."""
from __future__ import annotations


def read_text(path: str, *, strip: bool = False) -> str | None:
    """The file's text, or None if it cannot be read (absent, not permitted)."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return None
    return text.strip() if strip else text
