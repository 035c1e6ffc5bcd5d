"""The command line: click only. Parse, call the API, print, map errors to exit codes."""
from .main import cli, console, main

__all__ = ["cli", "console", "main"]
