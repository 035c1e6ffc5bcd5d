"""The command line: click only. Parse, call the API, print, map errors to exit codes."""
from .main import cli, main

__all__ = ["cli", "main"]
