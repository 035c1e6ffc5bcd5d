#!/usr/bin/env python3
"""Benchmark: wall-clock cost of `confine exec -- /bin/true` (run by hand).

    python3 bench/startup.py [N]     # from a project directory you own
Prints the mean over N runs, unconfined vs confined, and the import-only cost.
"""
import os
import shutil
import subprocess
import sys
import time

N = int(sys.argv[1]) if len(sys.argv) > 1 else 20
CONFINE = os.environ.get("CONFINE", shutil.which("confine") or "confine")


def mean_ms(cmd):
    subprocess.run(cmd, capture_output=True)
    t = time.perf_counter()
    for _ in range(N):
        subprocess.run(cmd, capture_output=True)
    return (time.perf_counter() - t) / N * 1000


user = ["--user", "root"] if os.geteuid() == 0 and os.stat(".").st_uid == 0 else []
print(f"{N} runs each, from {os.getcwd()}")
print(f"  /bin/true:                       {mean_ms(['/bin/true']):7.1f} ms")
print(f"  confine --version (imports):     {mean_ms([CONFINE, '--version']):7.1f} ms")
print(f"  confine exec -- /bin/true:       {mean_ms([CONFINE, 'exec', *user, '--', '/bin/true']):7.1f} ms")
