"""Kernel adapters: one module per mechanism (see CONTRIBUTING.md)."""
from . import libc as _libc  # noqa: F401  (first: its find_library cache serves pyseccomp)
