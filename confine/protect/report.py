"""The loud text a run prints when protected paths were changed.

A change to a protected path means the agent tried to plant something that
runs later outside the sandbox; the person must see it before running git or
opening the editor in the workdir, so each change gets its own line on stderr.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # a type only: revert.py imports this module
    from .revert import Report

__all__ = ["format_report"]


_VERB = {
    "created": "created", "modified": "modified", "deleted": "deleted", "mode": "chmod",
    "type": "replaced", "new-repo": "new repo", "moved": "moved", "unchecked": "unchecked",
    "external": "outside",
}


def format_report(report: Report, *, verbose: bool = False) -> str:
    """Loud, line-per-change text for stderr (alerts only unless verbose)."""
    shown = report.changes if verbose else report.alerts
    if not shown:
        return ""
    lines = []
    if report.alerts:
        lines.append("confine: PROTECTED PATHS WERE CHANGED IN THE WORKDIR during this run "
                     "(files that would run later, outside the sandbox)")
        if not report.namespaces_active:
            lines.append("confine: no mount namespace was active: this check after the run "
                         "was the only protection")
    width = min(max(len(c.path) for c in shown), 48)
    for c in shown:
        tail = c.detail
        if c.quarantine:
            tail = (tail + "; " if tail else "") + f"moved to {c.quarantine}"
        lines.append(f"  {_VERB.get(c.what, c.what):9} {c.path:<{width}}  {c.action}"
                     + (f": {tail}" if tail else ""))
    if report.failed:
        lines.append(f"confine: {len(report.failed)} could NOT be reverted: inspect them before "
                     "running git or opening the editor here")
    if report.quarantine_dir and any(c.quarantine for c in shown):
        lines.append(f"confine: quarantine: {report.quarantine_dir}")
    return "\n".join(lines)
