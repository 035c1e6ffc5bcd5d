#!/usr/bin/env python3
"""Benchmark: the cost of the run's record (confine/journal/) per refusal.

Run by hand, with the checkout or an installed confine importable:
    python3 bench/record.py [N] [DIR]
Times N refusals through `Events.explained` (what the mediator calls for each
refused call: the explanation, the once-per-key line, the record line) without a
record (as before the record existed, no --log) and with one in DIR (default
/var/tmp: a disk, so the batched fsyncs are real), and prints one markdown row:
microseconds per refusal, both ways, and the difference. The agent's mediated call
itself costs ~170 us more (docs/benchmarks.md, per mediated call).
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from confine.journal import store  # noqa: E402
from confine.journal.writer import Journal  # noqa: E402
from confine.policy import explain  # noqa: E402
from confine.runtime.events import Events  # noqa: E402


def per_refusal(events: Events, n: int) -> float:
    r = explain.Refusal("protected", explain.GUARD, "/w/.envrc",
                        "symlink /w/.envrc: protected path (.envrc)", ".envrc")
    for _ in range(200):
        events.explained(r)
    t = time.perf_counter()
    for _ in range(n):
        events.explained(r)
    return (time.perf_counter() - t) / n * 1e6


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
    base = tempfile.mkdtemp(prefix="confine-bench-record-",
                            dir=sys.argv[2] if len(sys.argv) > 2 else "/var/tmp")
    store.state_dir = lambda name, **_: os.path.join(base, name)   # type: ignore[assignment]
    os.environ["CONFINE_RECORD_LINES"] = str(n + 1000)
    quiet = lambda _msg: None  # noqa: E731
    try:
        bare = min(per_refusal(Events(None, quiet), n) for _ in range(3))
        recs = []
        for i in range(3):
            j = Journal.open(f"20261206-000000-{i + 1}", {"argv": ["bench"]})
            j.start()
            ev = Events(None, quiet, journal=j)
            recs.append(per_refusal(ev, n))
            t = time.perf_counter()
            ev.close({})
            close_ms = (time.perf_counter() - t) * 1e3
        rec = min(recs)
        print("| refusals | without a record (us) | with the record (us) | added per refusal (us) "
              "| closing the record (ms) |")
        print("|---|---|---|---|---|")
        print(f"| {n} | {bare:.1f} | {rec:.1f} | +{rec - bare:.1f} | {close_ms:.1f} |")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
