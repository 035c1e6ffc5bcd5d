"""click commands `confine undo` and `confine runs` (confine/undo/).

    confine undo RUN-ID [PATH...]     put back what run RUN-ID removed or changed
    confine undo --last [PATH...]     ... the newest run's
    confine runs [--json]             every run that kept something, and what it changed

PATH (workdir-relative or absolute) narrows the undo to those paths and what
lies below them. A file changed after the run ended is not overwritten
without --force; what was skipped is said. Run outside any sandbox, by the
person who ran confine. Exit codes: 0 done, 1 something was skipped, 125
refused (the line says why).
"""
from __future__ import annotations

import json
import os
import time

import click

from ..errors import ConfineError, printable
from ..paths import is_under
from ..protect.held import MANIFEST
from ..undo import store
from ..undo.restore import restore


def _rel(path: str, workdir: str) -> str:
    if not os.path.isabs(path):
        full = os.path.abspath(path)
        if not is_under(full, workdir):
            return os.path.normpath(path)       # already workdir-relative
    else:
        full = os.path.normpath(path)
    if not is_under(full, workdir):
        raise ConfineError(f"{path}: not in the run's workdir {workdir}")
    return os.path.relpath(full, workdir) if full != workdir else ""


@click.command("undo")
@click.argument("args", nargs=-1)
@click.option("--last", is_flag=True, help="The newest run.")
@click.option("--force", is_flag=True, help="Also over files changed after the run ended.")
def undo(args: tuple[str, ...], last: bool, force: bool) -> int:
    """Put back the files a run removed, replaced or rewrote in its workdir."""
    if not last and not args:
        raise ConfineError("confine undo: name a run (see `confine runs`) or --last")
    run = None if last else args[0]
    paths = list(args if last else args[1:])
    try:
        dfd, run = store.open_run(run)
    except OSError as e:
        raise ConfineError(f"confine undo: {e.strerror or e}") from None
    try:
        m = store.read_json(dfd, MANIFEST) or {}
        workdir = m.get("workdir")
        if not isinstance(workdir, str) or not os.path.isabs(workdir):
            raise ConfineError(f"confine undo: run {run} names no workdir")
        ended = m.get("ended_ns")
        if not isinstance(ended, int):
            ended = time.time_ns()      # the run did not end cleanly: everything is the agent's
        rels = [_rel(p, workdir) for p in paths]
        got = restore(dfd, store.read_entries(dfd), workdir, ended_ns=ended, paths=rels,
                      force=force)
    finally:
        os.close(dfd)
    click.echo(f"run {run}: {got.restored} put back in {printable(workdir)}"
               + (f", {got.unchanged} already as kept" if got.unchanged else "")
               + (f", {len(got.skipped)} skipped:" if got.skipped else ""))
    for s in got.skipped:
        click.echo(f"  skipped {printable(s)}")
    return 1 if got.skipped else 0


@click.command("runs")
@click.option("--json", "as_json", is_flag=True, help="One JSON list, every path included.")
def runs(as_json: bool) -> None:
    """The runs that kept something for `confine undo`, oldest first."""
    base = store.base()
    try:
        bfd = os.open(base, store.DIR_FLAGS)
    except FileNotFoundError:
        bfd = -1
    except OSError as e:
        raise ConfineError(f"confine runs: {base}: {e.strerror or e}") from None
    out = []
    if bfd >= 0:
        try:
            for r in store.run_ids(bfd):
                try:
                    dfd = os.open(r, store.DIR_FLAGS, dir_fd=bfd)
                except OSError:
                    continue
                try:
                    out.append(store.summary(r, dfd))
                finally:
                    os.close(dfd)
        finally:
            os.close(bfd)
    if as_json:
        click.echo(json.dumps(out, indent=1))
        return
    if not out:
        click.echo(f"no run kept anything ({printable(base)})")
        return
    for s in out:
        what = ", ".join(f"{n} {op}" for op, n in sorted(s["changed"].items()) if op != "parent")
        click.echo(f"{s['run']}  {printable(s['workdir'])}  {what or 'nothing'}"
                   + (f"  ({len(s['not_kept'])} not kept)" if s["not_kept"] else "")
                   + ("  (deletions refused: those made before were put back)"
                      if s["deletions_refused"] else ""))
