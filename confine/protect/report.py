"""The loud text a run prints when protected paths were changed.

A change to a protected path means the agent tried to plant something that
runs later outside the sandbox; the person must see it before running git or
opening the editor in the workdir, so each change gets its own line on stderr.
Threat: the agent names its files to hide or forge that text (escape
sequences that erase the lines, newlines that fake a clean line, bytes that
are not UTF-8): every name and detail is escaped before it is printed.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import printable

if TYPE_CHECKING:  # a type only: revert.py imports this module
    from .held import Held
    from .revert import Report

__all__ = ["format_report", "report_events", "held_event", "LIMIT"]

LIMIT = 200     # change lines printed on the terminal; REPORT.txt gets them all

_VERB = {
    "created": "created", "modified": "modified", "deleted": "deleted", "mode": "chmod",
    "type": "replaced", "new-repo": "new repo", "moved": "moved", "unchecked": "unchecked",
    "external": "outside",
}


def report_events(report: Report) -> list[dict[str, object]]:
    """The exit check's findings as lines of the run's record (runtime/events.py):
    every change, quarantined or not, alert or only noted; REPORT.txt and stderr
    keep their text, the record gets each one."""
    out: list[dict[str, object]] = [
        {"event": "exit_check", "what": c.what, "path": c.path, "action": c.action,
         "detail": c.detail, "quarantine": c.quarantine, "alert": c.alert}
        for c in report.changes]
    out.append({"event": "exit_check", "what": "summary", "changes": len(report.changes),
                "alerts": len(report.alerts), "failed": len(report.failed),
                "quarantine": report.quarantine_dir if any(c.quarantine for c in report.changes)
                else None, "seconds": round(report.seconds, 3)})
    return out


def held_event(held: Held) -> dict[str, object]:
    """What a run held and kept for the person (protect/held.py), as a record line."""
    return {"event": "held", "what": "kept at exit", "run": held.run_id, "dir": held.dir,
            "workdir": held.workdir, "paths": [i.path for i in held.roots][:LIMIT],
            "files": sum(1 for i in held.items if i.kind == "file"), "left": held.left[:LIMIT]}


def format_report(report: Report, *, verbose: bool = False, limit: int | None = LIMIT) -> str:
    """Loud, line-per-change text for stderr (alerts only unless verbose).
    Every failed change is printed; of the others at most `limit` (None: all)."""
    shown = report.changes if verbose else report.alerts
    if not shown:
        return ""
    lines = []
    if report.alerts:
        lines.append("confine: PROTECTED PATHS WERE CHANGED IN THE WORKDIR during this run "
                     "(files that would run later, outside the sandbox)"
                     + ("; paths shown in full lie outside it (a write grant, a copied file)"
                        if any(c.path.startswith("/") for c in report.alerts) else ""))
        if not report.namespaces_active:
            lines.append("confine: no mount namespace was active: this check after the run "
                         "was the only protection")
    if limit is not None and len(shown) > limit:
        failed = [c for c in shown if c.action == "failed"]
        rest = [c for c in shown if c.action != "failed"]
        cut = len(rest) - max(limit - len(failed), 0)
        shown = failed + rest[:len(rest) - cut]
    else:
        cut = 0
    paths = [printable(c.path or ".") for c in shown]
    width = min(max(len(p) for p in paths), 48)
    for c, path in zip(shown, paths, strict=True):
        tail = c.detail
        if c.quarantine:
            tail = (tail + "; " if tail else "") + f"moved to {c.quarantine}"
        lines.append(f"  {_VERB.get(c.what, c.what):9} {path:<{width}}  {printable(c.action)}"
                     + (f": {printable(tail)}" if tail else ""))
    if cut:
        where = f" {printable(report.quarantine_dir)}/REPORT.txt" if report.quarantine_dir else ""
        lines.append(f"confine: ... and {cut} more change(s) not shown here"
                     + (f" (all of them: {where.strip()})" if where else ""))
    if report.failed:
        lines.append(f"confine: {len(report.failed)} could NOT be reverted or checked: inspect "
                     "them before running git or opening the editor here")
    if report.quarantine_dir and any(c.quarantine for c in report.changes):
        dirs = dict.fromkeys([report.quarantine_dir, *report.other_quarantine])
        lines.append(f"confine: quarantine: {', '.join(printable(d) for d in dirs)}")
    return "\n".join(lines)
