#!/usr/bin/env python3
"""Benchmark: mediated file calls made at the same time by several agent
threads or processes (issue 13, goal 4: handled in parallel, not one at a time).

Run by hand (as root or a user), from a directory you own:
    python3 bench/parallel_mediation.py [N] [WAYS]
Each of WAYS threads (then WAYS processes) creates and unlinks N files of its
own (every create is a seccomp notification judged by the broker), unconfined
and inside `confine exec`; prints the wall time per create, all of them
together (a single-threaded run's figure divided by WAYS is perfect scaling).
bench/run.py-style `measure` (same code, as a chosen user, in a chosen place).
"""
import json
import os
import subprocess
import sys
import time

from connect_mediation import PY, _as_user, _workdir, default_confine

INNER = r"""
import json, os, sys, threading, time
n, ways, kind = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
W = os.O_WRONLY | os.O_CREAT | os.O_EXCL
def work(tag):
    os.makedirs(tag, exist_ok=True)
    for i in range(n):
        p = "%s/f%d" % (tag, i)
        os.close(os.open(p, W, 0o600))
        os.unlink(p)
work("warm")
t = time.perf_counter()
if kind == "threads":
    ts = [threading.Thread(target=work, args=("t%d" % k,)) for k in range(ways)]
    [x.start() for x in ts]; [x.join() for x in ts]
else:
    kids = []
    for k in range(ways):
        pid = os.fork()
        if pid == 0:
            work("p%d" % k); os._exit(0)
        kids.append(pid)
    for pid in kids: os.waitpid(pid, 0)
print(json.dumps({"per_call_us": (time.perf_counter() - t) / (n * ways) * 1e6}))
"""


def measure(n=1000, ways=4, confine=None, user=None, parent=None):
    """{"1": {...}, "threads": {...}, "processes": {...}}: per create (wall
    time over all calls, us), each {"bare", "confined", "added"}."""
    confine = confine or default_confine()
    wd = _workdir(parent, user)
    if os.geteuid() == 0:
        who = ["--user", user or "root"]
    else:
        who = []
    try:
        script = os.path.join(wd, "inner.py")
        with open(script, "w") as f:
            f.write(INNER)
        os.chmod(script, 0o644)

        def run(w, kind, inside):
            argv = [PY, script, str(n), str(w), kind]
            cmd = [confine, "exec", "-w", wd, *who, "--", *argv] if inside else argv
            p = subprocess.run(cmd, cwd=wd, capture_output=True, text=True,
                               **({} if inside else _as_user(user)))
            if p.returncode:
                raise RuntimeError(f"failed: {cmd}: {p.stderr.strip()}")
            return json.loads(p.stdout.splitlines()[-1])["per_call_us"]

        out = {}
        for label, w, kind in (("1", 1, "threads"), ("threads", ways, "threads"),
                               ("processes", ways, "processes")):
            b, c = run(w, kind, False), run(w, kind, True)
            out[label] = {"bare": b, "confined": c, "added": c - b}
        return out
    finally:
        import shutil
        shutil.rmtree(wd, ignore_errors=True)


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    ways = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    t = time.perf_counter()
    try:
        r = measure(n, ways)
    except RuntimeError as e:
        sys.exit(str(e))
    print(f"create + unlink, {n} per thread/process, wall time per create (us): "
          "unconfined / confined / added")
    for k, v in r.items():
        label = "1 thread" if k == "1" else f"{ways} {k}"
        print(f"  {label:12s} {v['bare']:8.1f} {v['confined']:8.1f} {v['added']:+8.1f}")
    print(f"({time.perf_counter() - t:.1f} s)")


if __name__ == "__main__":
    main()
