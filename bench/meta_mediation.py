#!/usr/bin/env python3
"""Benchmark: cost of the broker's metadata mediation (no mount namespace).

Run by hand (as root or a user), from a directory you own:
    python3 bench/meta_mediation.py [N]
With a mount namespace chmod, utime and setxattr are not mediated (the
read-only host view refuses them outside the writable paths); without one
(CONFINE_TEST_NO_NAMESPACES=1 here, a container or Ubuntu's restriction in
real life) each is a seccomp notification the broker judges and performs
(confine/mediation/files.py, handle_meta). Times N of each, bare, confined
with the namespace and confined without it, in microseconds per call.
"""
import json
import os
import shutil
import subprocess
import sys

from connect_mediation import PY, default_confine

INNER = r"""
import json, os, sys, time
n = int(sys.argv[1])
def timed(fn):
    for _ in range(20): fn()
    t = time.perf_counter()
    for _ in range(n): fn()
    return (time.perf_counter() - t) / n * 1e6
open("m", "w").close()
fd = os.open("m", os.O_RDONLY)
print(json.dumps({
    "stat (never mediated)": timed(lambda: os.stat("m")),
    "chmod": timed(lambda: os.chmod("m", 0o644)),
    "fchmod": timed(lambda: os.chmod(fd, 0o644)),
    "utime": timed(lambda: os.utime("m", (1, 1))),
    "setxattr": timed(lambda: os.setxattr("m", b"user.b", b"1")),
}))
"""


def run(argv, env=None):
    p = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600)
    if p.returncode != 0:
        raise SystemExit(p.stderr)
    return json.loads(p.stdout.splitlines()[-1])


def main() -> None:
    n = sys.argv[1] if len(sys.argv) > 1 else "2000"
    confine = default_confine()
    wd = os.path.abspath(f"meta-bench-{os.getpid()}")
    os.mkdir(wd)
    try:
        os.chdir(wd)
        env = dict(os.environ)
        rows = {"bare": run([PY, "-c", INNER, n])}
        cmd = [confine, "exec", "-w", wd, "--", PY, "-c", INNER, n]
        rows["confined, mount namespace"] = run(cmd, env)
        rows["confined, no namespaces"] = run(cmd, dict(env, CONFINE_TEST_NO_NAMESPACES="1"))
    finally:
        os.chdir("/")
        shutil.rmtree(wd, ignore_errors=True)
    kinds = list(rows["bare"])
    print(f"{'us per call':28}" + "".join(f"{k:>14}" for k in kinds))
    for name, r in rows.items():
        print(f"{name:28}" + "".join(f"{r[k]:14.1f}" for k in kinds))


if __name__ == "__main__":
    main()
