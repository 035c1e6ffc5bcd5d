"""click command `confine log`: the run's record (confine/journal/).

    confine log show [RUN|--last|FILE] [--json]     one line per decision
    confine log verify [RUN|--last|FILE] [--json]   the chain and its HMAC
    confine log path [RUN|--last]                   where the record is
    confine log export [RUN|--last|FILE] --format ocsf|json

RUN defaults to the newest run (--last says so explicitly); FILE (a path) is a
--log file or a copy, which may hold several runs' records one after another.
Exit codes of verify (and of show and export, which verify too): 0 ok, 1 edited,
removed, reordered or truncated (the line names the first bad line), 2 not closed
(the run was killed, or its end was cut off), 3 the HMAC cannot be checked here
(no key, or another account's), 125 refused (no such run).
"""
from __future__ import annotations

import json
import sys

import click

from ..errors import ConfineError, printable, say
from ..journal import chain, render, store

_CODES = {chain.OK: 0, chain.NOT_CLOSED: 2, chain.NO_KEY: 3, chain.OTHER_KEY: 3}


def _run_arg(run: str | None, last: bool) -> str | None:
    if run is not None and last:
        raise ConfineError("give a RUN or --last, not both")
    return run


def _load(run: str | None) -> tuple[str, bytes, list[chain.Verdict]]:
    """(path, bytes, one verdict per record in it)."""
    path = store.locate(run)
    data = store.read(path)
    base = store.base_of(path)
    key = store.load_key(False, base)
    if key is None and base is None:     # a copy: the key of wherever this account has one
        key = next((k for k in map(lambda b: store.load_key(False, b), store.bases()) if k),
                   None)
    expect = path.rsplit("/", 1)[-1].removesuffix(store.SUFFIX) if base else None
    parts = chain.segments(data) if data else [(1, data)]
    return path, data, [chain.verify(b, key, run=expect, first=first) for first, b in parts]


def _worst(verdicts: list[chain.Verdict]) -> chain.Verdict:
    for v in verdicts:
        if not v.ok:
            return v
    return verdicts[-1]


def _code(v: chain.Verdict) -> int:
    return _CODES.get(v.result, 1)


@click.group("log")
def log() -> None:
    """The run's record: every decision of a run, hash-chained and closed with an HMAC."""


@log.command("show")
@click.argument("run", required=False)
@click.option("--last", is_flag=True, help="The newest run (the default).")
@click.option("--json", "as_json", is_flag=True, help="The record's lines as they are.")
def show(run: str | None, last: bool, as_json: bool) -> None:
    """One line per decision of RUN; a record that does not verify is said after it."""
    path, data, verdicts = _load(_run_arg(run, last))
    if as_json:
        sys.stdout.write(data.decode("ascii", "backslashreplace"))
    else:
        for rec in render.records(data):
            click.echo(render.human(rec))
    v = _worst(verdicts)
    if not v.ok:
        say(f"{printable(path)}: {v.message}")
    sys.exit(_code(v))


@log.command("verify")
@click.argument("run", required=False)
@click.option("--last", is_flag=True, help="The newest run (the default).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def verify(run: str | None, last: bool, as_json: bool) -> None:
    """Check RUN's record: every line chained to the one before, the end line's HMAC."""
    path, _, verdicts = _load(_run_arg(run, last))
    v = _worst(verdicts)
    if as_json:
        click.echo(json.dumps({"path": path, **v.to_dict(),
                               "records": [x.to_dict() for x in verdicts]}))
    elif v.ok:
        click.echo(f"{printable(path)}: {v.message}"
                   + (f" ({len(verdicts)} records)" if len(verdicts) > 1 else ""))
    else:
        say(f"{printable(path)}: {v.message}")
    sys.exit(_code(v))


@log.command("path")
@click.argument("run", required=False)
@click.option("--last", is_flag=True, help="The newest run (the default).")
def path_(run: str | None, last: bool) -> None:
    """Where RUN's record is."""
    click.echo(store.locate(_run_arg(run, last)))


@log.command("export")
@click.argument("run", required=False)
@click.option("--last", is_flag=True, help="The newest run (the default).")
@click.option("--format", "fmt", type=click.Choice(["ocsf", "json"]), default="ocsf",
              show_default=True, help="OCSF 1.1 events or the record's own lines, one "
                                      "JSON object per line (docs/record.md).")
def export(run: str | None, last: bool, fmt: str) -> None:
    """RUN's record for a SIEM, one JSON object per line; exits as verify does."""
    path, data, verdicts = _load(_run_arg(run, last))
    rid = ""
    for rec in render.records(data):
        if rec.get("event") == "start":
            rid = str(rec.get("run") or "")
        out = render.ocsf(rec, rid) if fmt == "ocsf" else {"run": rid, **rec}
        click.echo(json.dumps(out, separators=(",", ":"), default=str))
    v = _worst(verdicts)
    if not v.ok:
        say(f"{printable(path)}: {v.message}")
    sys.exit(_code(v))
