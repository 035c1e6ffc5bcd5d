#!/usr/bin/env python3
"""Benchmark: what one mediated file call costs when the mediator is compiled.

    sudo python3 bench/native_hop.py [N [ROUNDS]] [--json]   # as root: runs as confine-test
    python3 bench/native_hop.py [N [ROUNDS]]                # unprivileged: as yourself

Builds bench/native/hop.c with `cc` into a temporary directory and runs it in
each mode (bare; hop1: the listener's owner performs the call and answers with
ADDFD; hop2: it hands the call to a broker process first; hop1steps: hop1 plus a
pidfd, the cwd looked up per call and a protected-name check), the modes
interleaved over ROUNDS rounds in a fresh directory (on tmpfs under
bench/run.py). Prints, per kind of call, the time added per mediated call
against bare in the same round (median and range over the rounds). It is the
compiled floor for issue 26's target (+40 us per mediated file call), beside
confine's own figures (bench/file_mediation.py) in bench/run.py's `native`
section. Without a C compiler the result is one line saying so.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

from connect_mediation import _as_user, _workdir
from file_mediation import MEDIATED_CALLS

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "native", "hop.c")
MODES = ("bare", "hop1", "hop2", "hop1steps")
NO_CC = "skipped: no C compiler (apt install gcc)"


def build(dest: str) -> str | None:
    """Compile hop.c into dest (readable and runnable by the account); None without cc."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None
    out = os.path.join(dest, "hop")
    p = subprocess.run([cc, "-O2", "-Wall", "-Wextra", "-Werror", "-o", out, SOURCE],
                       capture_output=True, text=True)
    if p.returncode:
        raise RuntimeError(f"cc failed on {SOURCE}: {p.stderr.strip()}")
    os.chmod(dest, 0o755)
    os.chmod(out, 0o755)
    return out


def run_mode(hop: str, mode: str, n: int, wd: str, user: str | None) -> dict:
    """One run of `hop MODE N` in wd: {kind: {"us_per_op", "mediated", "notifs"}, "probe": {...}}."""
    p = subprocess.run([hop, mode, str(n)], cwd=wd, capture_output=True, text=True, timeout=600,
                       **_as_user(user))
    if p.returncode:
        raise RuntimeError(f"hop {mode} {n} failed ({p.returncode}): {p.stderr.strip()}")
    out: dict = {}
    try:
        for line in p.stdout.splitlines():
            d = json.loads(line)
            out[d["kind"]] = d
    except (ValueError, KeyError) as e:
        raise RuntimeError(f"hop {mode} {n}: unreadable output ({e}): {p.stdout[:200]!r}") from e
    return out


def measure(n: int = 2000, rounds: int = 3, user: str | None = "confine-test",
            parent: str | None = None) -> dict:
    """{"n", "rounds", "runs": {mode: [{kind: us per op}]}, "notifs": {mode: {kind: count}},
    "mediated": {kind: calls per op}, "probe": {mode: {...}}, "summary": {kind: {...}}};
    or {"skipped": NO_CC}. Modes are interleaved, their order rotated each round."""
    user = user if os.geteuid() == 0 else None
    build_dir = tempfile.mkdtemp(prefix="confine-hop-")
    wd = _workdir(parent, user)
    try:
        hop = build(build_dir)
        if hop is None:
            return {"skipped": NO_CC}
        runs: dict[str, list[dict[str, float]]] = {m: [] for m in MODES}
        notifs: dict[str, dict[str, int]] = {}
        mediated: dict[str, int] = {}
        probe: dict[str, dict] = {}
        for r in range(rounds):
            for mode in MODES[r % len(MODES):] + MODES[:r % len(MODES)]:
                res = run_mode(hop, mode, n, wd, user)
                probe[mode] = res.pop("probe")
                runs[mode].append({k: v["us_per_op"] for k, v in res.items()})
                notifs[mode] = {k: v["notifs"] for k, v in res.items()}
                for k, v in res.items():
                    if MEDIATED_CALLS.get(k) != v["mediated"]:
                        raise RuntimeError(f"hop.c counts {v['mediated']} mediated calls for {k!r}, "
                                           f"file_mediation.py {MEDIATED_CALLS.get(k)}")
                    mediated[k] = v["mediated"]
        return {"n": n, "rounds": rounds, "runs": runs, "notifs": notifs, "mediated": mediated,
                "probe": probe, "summary": summarize(runs, mediated)}
    finally:
        shutil.rmtree(build_dir, ignore_errors=True)
        shutil.rmtree(wd, ignore_errors=True)


def summarize(runs: dict[str, list[dict[str, float]]], mediated: dict[str, int]) -> dict:
    """{kind: {"bare": median us per op, mode: {"median", "min", "max"} added per mediated call}}:
    each round's mode against the same round's bare, so load that shifts between rounds
    moves both sides."""
    out: dict[str, dict] = {}
    for k, m in mediated.items():
        row: dict = {"bare": statistics.median(x[k] for x in runs["bare"]), "mediated": m}
        for mode in MODES[1:]:
            if not m:
                continue
            added = sorted((a[k] - b[k]) / m for a, b in zip(runs[mode], runs["bare"], strict=True))
            row[mode] = {"median": statistics.median(added), "min": added[0], "max": added[-1]}
        out[k] = row
    return out


def cell(s: dict | None) -> str:
    """'+median (min..max)' of an added figure, us."""
    if not s:
        return "-"
    return f"{s['median']:+.0f} ({s['min']:+.0f}..{s['max']:+.0f})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("n", nargs="?", type=int, default=2000, help="calls of each kind per run")
    ap.add_argument("rounds", nargs="?", type=int, default=3, help="rounds, the modes interleaved")
    ap.add_argument("--user", default="confine-test", help="the account the runs take as root (default confine-test)")
    ap.add_argument("--json", action="store_true", help="print the raw results as JSON")
    a = ap.parse_args()
    try:
        r = measure(a.n, a.rounds, a.user)
    except (RuntimeError, OSError, subprocess.SubprocessError) as e:
        print(f"native_hop: {e}", file=sys.stderr)
        return 125
    if a.json:
        print(json.dumps(r, indent=1))
        return 0
    if "skipped" in r:
        print(r["skipped"])
        return 0
    print(f"added per mediated call, us: median (min..max) of {r['rounds']} rounds of {r['n']} calls each, "
          "against bare in the same round")
    head = ("call", "bare us/op", "hop1", "hop2", "hop1steps")
    rows = [(k, f"{v['bare']:.1f}", *(cell(v.get(m)) for m in MODES[1:])) for k, v in r["summary"].items()]
    w = [max(len(str(x[i])) for x in (head, *rows)) for i in range(len(head))]
    for x in (head, *rows):
        print("  ".join(str(c).ljust(w[i]) for i, c in enumerate(x)))
    print("mkdir .vscode / plain: " + ", ".join(f"{m} {p['protected_mkdir']}/{p['plain_mkdir']}"
                                                 for m, p in r["probe"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
