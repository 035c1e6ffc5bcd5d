"""click command `confine held`: the protected files a run held (protect/held.py).

    confine held [list]                       every run with held files
    confine held show [RUN-ID] [PATH...]      what they are, content included
    confine held apply [RUN-ID] [PATH...]     put shown ones in place
    confine held discard [RUN-ID] [PATH...]   remove them

RUN-ID defaults to the newest run; PATH (workdir-relative or absolute) to
all of its held paths. Run outside any sandbox, by the person who ran confine.
Exit codes: 0 done, 125 refused (the line says why).
"""
from __future__ import annotations

import json
import os
import re
from typing import Any

import click

from ..errors import ConfineError, printable
from ..paths import is_under
from ..protect import held as _held
from ..protect import keep as _keep

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_RUN = re.compile(r"\d{8}-\d{6}-\d+(\.[A-Za-z0-9_-]+)?")


def _split(args: tuple[str, ...]) -> tuple[str | None, list[str]]:
    """(run id, paths): the first argument is a run id when it looks like one."""
    if args and _RUN.fullmatch(args[0]):
        return args[0], list(args[1:])
    return None, list(args)


def _load(args: tuple[str, ...]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    run, paths = _split(args)
    try:
        m = _held.load(run)
        return m, _held.select(m, paths)
    except (_held.HeldError, OSError) as e:
        raise ConfineError(str(e)) from None


def _item_json(m: dict[str, Any], r: dict[str, Any]) -> dict[str, Any]:
    files = [i for i in m["items"] if i["root"] == r["path"] and i["kind"] == "file"]
    return {"path": r["path"], "kind": r["kind"], "files": len(files),
            "bytes": sum(i["size"] for i in files), "shown": r["path"] in m["shown"]}


@click.group("held", invoke_without_command=True)
@click.pass_context
def held(ctx: click.Context) -> None:
    """Protected files that arrived with content (a clone, checkout, tar x) and
    were held instead of written: list, show, apply or discard them."""
    if ctx.invoked_subcommand is None:
        ctx.invoke(held_list, as_json=False)


@held.command("list")
@click.option("-w", "--workdir", "workdirs", multiple=True, metavar="DIR",
              help="Only runs whose workdir (or write grant) is DIR or lies below it "
                   "(repeatable; DIR need not exist any more).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def held_list(workdirs: tuple[str, ...], as_json: bool) -> None:
    """Every run that holds files, with its held paths."""
    wanted = [os.path.realpath(os.path.abspath(os.path.expanduser(w))) for w in workdirs]
    out: list[dict[str, Any]] = []
    for run in _held.runs():
        try:
            m = _held.load(run)
        except _held.HeldError:
            continue
        if wanted and not any(is_under(str(m["workdir"]), w) for w in wanted):
            continue
        try:
            size = _keep.tree_size(os.open(os.path.dirname(m["dir"]), _DIR), run, close=True)
        except OSError:
            size = None
        out.append({"run": run, "workdir": m["workdir"], "dir": m["dir"], "size": size,
                    "held": [_item_json(m, r) for r in _held.iter_roots(m)],
                    "left": m.get("left", [])})
    if as_json:
        click.echo(json.dumps(out, indent=2))
        return
    if not out:
        click.echo(f"nothing is held ({printable(_held.held_base())})"
                   + (f" for {', '.join(printable(w) for w in wanted)}" if wanted else ""))
        return
    lim = _keep.limits()
    total = sum(one["size"] or 0 for one in out)
    click.echo(f"{len(out)} run(s), {_keep.human(total)} on disk (kept: at most "
               f"{_keep.human(lim.max_bytes)}, {lim.days:g} days; {_keep.BYTES_ENV}, "
               f"{_keep.DAYS_ENV})")
    for one in out:
        shown = "size unknown" if one["size"] is None else _keep.human(one["size"])
        click.echo(f"{one['run']}  {printable(one['workdir'])}  ({shown})")
        for r in one["held"]:
            what = "dir " if r["kind"] == "dir" else "file"
            seen = "shown" if r["shown"] else "not shown"
            click.echo(f"  {what} {printable(r['path'])}  ({r['files']} file(s), {r['bytes']} "
                       f"bytes, {seen})")


@held.command("show")
@click.argument("args", nargs=-1, metavar="[RUN-ID] [PATH...]")
@click.option("--json", "as_json", is_flag=True,
              help="Machine-readable: paths, hashes and destinations (no content).")
def held_show(args: tuple[str, ...], as_json: bool) -> None:
    """Print held paths and their content (escaped); apply needs this first."""
    m, roots = _load(args)
    lines: list[str] = []
    try:
        _held.show(m, roots, lines.append, content=not as_json)
    except (_held.HeldError, OSError) as e:
        raise ConfineError(str(e)) from None
    if as_json:
        m = _held.load(m["run"])
        click.echo(json.dumps({"run": m["run"], "workdir": m["workdir"],
                               "held": [dict(_item_json(m, r), destination=m["shown"].get(
                                   r["path"], {}).get("dest"), items=[
                                       i for i in m["items"] if i["root"] == r["path"]])
                                   for r in roots]}, indent=2))
        return
    for line in lines:
        click.echo(line)
    click.echo(f"confine: to put these in place: confine held apply {m['run']}"
               + "".join(" " + printable(r["path"]) for r in roots if len(roots) < 10))


@held.command("apply")
@click.argument("args", nargs=-1, metavar="[RUN-ID] [PATH...]")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def held_apply(args: tuple[str, ...], as_json: bool) -> None:
    """Put shown held paths in place (never over an existing file)."""
    m, roots = _load(args)
    try:
        done = _held.apply(m, roots)
        notes = [n for n in (_held.unskip(m, p) for p in done) if n]
        _held.discard(_held.load(m["run"]), [r for r in roots if r["path"] in done])
    except (_held.HeldError, OSError) as e:
        raise ConfineError(str(e)) from None
    if as_json:
        click.echo(json.dumps({"run": m["run"], "applied": done, "notes": notes}))
        return
    for p in done:
        click.echo(f"applied {printable(p)}")
    for n in notes:
        click.echo(f"confine: {printable(n)}", err=True)


@held.command("discard")
@click.argument("args", nargs=-1, metavar="[RUN-ID] [PATH...]")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def held_discard(args: tuple[str, ...], as_json: bool) -> None:
    """Remove held paths without putting them in place."""
    m, roots = _load(args)
    notes: list[str] = []
    try:
        gone = _held.discard(m, roots, notes)
    except (_held.HeldError, OSError) as e:
        raise ConfineError(str(e)) from None
    if as_json:
        click.echo(json.dumps({"run": m["run"], "discarded": gone, "notes": notes}))
        return
    for p in gone:
        click.echo(f"discarded {printable(p)}")
    for n in notes:
        click.echo(f"confine: {printable(n)}", err=True)
