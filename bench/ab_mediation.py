#!/usr/bin/env python3
"""Benchmark: two installs of confine side by side, per mediated call (us).

Run as root:  python3 bench/ab_mediation.py OLD_CONFINE NEW_CONFINE [ROUNDS] [N]
(AB_DIR=DIR: the workdirs under DIR, e.g. a tmpfs; AB_USER: the agent, default
confine-test). Alternates the two (old, new, then new, old, ...) through
file_mediation.measure and connect_mediation.measure, so that load from
elsewhere falls on both, and prints the median of each row over the rounds.
Run it under `nice -n -10` on a shared machine.
"""
import os
import statistics
import sys

import connect_mediation
import file_mediation


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    both = {"old": sys.argv[1], "new": sys.argv[2]}
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 10
    n = int(sys.argv[4]) if len(sys.argv) > 4 else 2000
    user, parent = os.environ.get("AB_USER", "confine-test"), os.environ.get("AB_DIR")
    rows: dict[str, dict[str, list[float]]] = {k: {} for k in both}
    for r in range(rounds):
        for name in (("old", "new") if r % 2 == 0 else ("new", "old")):
            f = file_mediation.measure(n, confine=both[name], user=user, parent=parent, git=False)
            for k, v in f["calls"].items():
                per = v["per_mediated_call"]
                rows[name].setdefault(k, []).append(per if per is not None else v["added"])
            c = connect_mediation.measure(n, confine=both[name], user=user, parent=parent)
            rows[name].setdefault("unix connect", []).append(c["added"])
    print(f"added per mediated call (us), median of {rounds} rounds of {n} calls: old / new")
    for k in rows["old"]:
        print(f"  {k:42s} {statistics.median(rows['old'][k]):8.1f} "
              f"{statistics.median(rows['new'][k]):8.1f}")


if __name__ == "__main__":
    main()
