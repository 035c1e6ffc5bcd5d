#!/usr/bin/env python3
"""bench/tricks.py: do confine's start-up tricks pay for the reading they cost? (issue 26 item 3)

    python3 bench/tricks.py [N]        # as root, from a directory root owns; N rounds (default 40)

Two modules exist only to make `confine exec` start sooner:
- confine/record.py: dataclass/NamedTuple without the standard library's per-class compiles;
- confine/cli/fast.py: the common `exec ... -- CMD` parsed without importing click.
(A third, confine/digest.py, SHA-256 without loading OpenSSL, measured no saving here and
was removed; docs/benchmarks.md keeps its row.)

Each is replaced, one at a time and both together, by the plain standard-library version in a
copy of this checkout's package; every variant runs `confine exec --user root -- /bin/true`
and `confine --version`, interleaved round by round so that load on the machine hits every
variant alike. Printed: median wall time and median CPU time (user+sys of all processes of
the run) per variant, and each trick's saving against the checkout as it is.
"""
from __future__ import annotations

import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

PLAIN_RECORD = '''"""bench variant: the standard library's records."""
from dataclasses import dataclass, field
from typing import NamedTuple
__all__ = ["dataclass", "field", "NamedTuple"]
'''
FAST_OFF = ('    """(command, api.run keyword arguments) for `exec ... -- CMD...`, or None."""\n',
            '    """(command, api.run keyword arguments) for `exec ... -- CMD...`, or None."""\n'
            '    return None\n')
VARIANTS = {
    "as is": (),
    "record.py -> dataclasses": ("record",),
    "cli/fast.py -> click": ("fast",),
    "both plain": ("record", "fast"),
}


def make_variant(base: str, name: str, plain: tuple[str, ...]) -> str:
    dest = os.path.join(base, name.replace(" ", "_").replace("/", "_").replace(">", ""))
    shutil.copytree(os.path.join(ROOT, "confine"), os.path.join(dest, "confine"),
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(os.path.join(ROOT, "profiles"), os.path.join(dest, "confine", "profiles"))
    pkg = os.path.join(dest, "confine")
    if "record" in plain:
        with open(os.path.join(pkg, "record.py"), "w") as f:
            f.write(PLAIN_RECORD)
    if "fast" in plain:
        p = os.path.join(pkg, "cli", "fast.py")
        with open(p) as f:
            text = f.read()
        assert FAST_OFF[0] in text, "cli/fast.py changed: update bench/tricks.py"
        with open(p, "w") as f:
            f.write(text.replace(FAST_OFF[0], FAST_OFF[1], 1))
    return dest


def cpu_ms() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (r.ru_utime + r.ru_stime) * 1000


def run(path: str, args: list[str]) -> tuple[float, float]:
    env = dict(os.environ, PYTHONPATH=path)
    cmd = [sys.executable, "-c",
           "import sys; sys.argv[0] = 'confine'; from confine.cli import console; console()", *args]
    c, t = cpu_ms(), time.perf_counter()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
    return (time.perf_counter() - t) * 1000, cpu_ms() - c


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    user = ["--user", "root"] if os.geteuid() == 0 else []
    runs = {"exec": ["exec", *user, "--", "/bin/true"], "--version": ["--version"]}
    with tempfile.TemporaryDirectory(prefix="confine-tricks-") as base:
        paths = {v: make_variant(base, v, p) for v, p in VARIANTS.items()}
        got: dict[tuple[str, str], list[tuple[float, float]]] = {
            (v, r): [] for v in VARIANTS for r in runs}
        for v in VARIANTS:                      # warm: write the .pyc files
            for a in runs.values():
                run(paths[v], a)
        for _ in range(n):
            for v in VARIANTS:
                for r, a in runs.items():
                    got[v, r].append(run(paths[v], a))
    print(f"{n} rounds, interleaved; {sys.executable}")
    print("| variant | exec wall ms | exec CPU ms | --version wall ms | exec CPU vs as is |")
    print("|---|---|---|---|---|")
    ref = statistics.median(c for _, c in got["as is", "exec"])
    for v in VARIANTS:
        wall = statistics.median(w for w, _ in got[v, "exec"])
        cpu = statistics.median(c for _, c in got[v, "exec"])
        ver = statistics.median(w for w, _ in got[v, "--version"])
        print(f"| {v} | {wall:.1f} | {cpu:.1f} | {ver:.1f} | {cpu - ref:+.1f} |")


if __name__ == "__main__":
    main()
