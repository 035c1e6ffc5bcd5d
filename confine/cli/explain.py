"""click command `explain`, registered by cli/main.py with add_command.

Reads a run's `--log FILE` (JSON lines) and prints, for every distinct
refusal, what to add to a profile (one YAML snippet), the command-line form
where there is one, and what cannot be granted. The mapping is
confine/policy/explain.py's; this only reads and prints.

Exit codes: 0 (also when nothing was refused); 125 for a log that cannot be read.
"""
from __future__ import annotations

import json
import sys
from typing import IO

import click

from ..errors import ConfineError
from ..policy import explain as _explain

MAX_LINE = 1 << 20       # a longer line is not one of ours: skipped


def _events(f: IO[str]) -> tuple[list[dict], int]:
    """The JSON objects of the log, and how many lines were not one."""
    out: list[dict] = []
    bad = 0
    for line in f:
        line = line.strip()
        if not line:
            continue
        if len(line) > MAX_LINE:
            bad += 1
            continue
        try:
            v = json.loads(line)
        except ValueError:
            bad += 1
            continue
        if isinstance(v, dict):
            out.append(v)
        else:
            bad += 1
    return out, bad


@click.command("explain")
@click.argument("log", required=False, metavar="[LOG]")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def explain(log: str | None, as_json: bool) -> None:
    """Say what to add to a profile for each refusal in LOG.

    \b
    LOG is a file written by `confine exec --log FILE` (`-` or nothing:
    standard input). Secrets, files that run later outside the sandbox and
    git's own hooks and config are never suggested: they are listed as what
    cannot be granted, and why.
    """
    try:
        if log in (None, "-"):
            events, bad = _events(sys.stdin)
        else:
            with open(log, encoding="utf-8", errors="replace") as f:
                events, bad = _events(f)
    except OSError as e:
        raise ConfineError(f"{log}: cannot read ({e.strerror})") from None
    except UnicodeDecodeError:
        raise ConfineError(f"{log}: not a text file") from None
    rep = _explain.report(events)
    yaml_text = _explain.snippet(rep.grants)
    if as_json:
        click.echo(json.dumps({**rep.to_dict(), "profile_yaml": yaml_text,
                               "skipped_lines": bad}, indent=2))
        return
    e = click.echo
    total = sum(rep.counts.values())
    for why in rep.unseen:
        e("Landlock's own refusals of reads, executes and TCP binds are not in this log, "
          + why)
    if not total:
        e("nothing was refused in this log" + (f" ({bad} lines were not JSON)" if bad else ""))
        return
    by = ", ".join(f"{n} by {layer}" for layer, n in sorted(rep.counts.items(),
                                                            key=lambda kv: -kv[1]))
    e(f"{total} refusals ({by})" + (f"; {bad} lines were not JSON and were skipped" if bad
                                    else ""))
    if rep.grants:
        e("\nTo allow them, add to the profile (a file with `extends: PROFILE` and these "
          "lines, used with -p FILE):\n")
        e(yaml_text.rstrip("\n"))
        if rep.flags:
            e("\nor, for this run only: " + " ".join(rep.flags))
        if rep.notes:
            e("\nNotes:")
            for n in rep.notes:
                e(f"  {n}")
    if rep.cannot:
        e("\nCannot be granted:")
        for c in rep.cannot:
            e(f"  {c}")
