#!/usr/bin/env python3
"""Benchmark: cost of a mediated connect() to a pathname unix socket.

Run by hand (as root or a user), from a directory you own:
    python3 bench/connect_mediation.py [N]
It times N connect() calls to a socket in the workdir, once unconfined and once
inside `confine exec` (where each connect is a seccomp notification handled by
the supervisor and performed by the broker), and prints the per-call cost.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

N = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
INNER = r"""
import socket, time, os, json, sys, threading
n = int(sys.argv[1]); path = os.path.abspath("bench.sock")
if os.path.exists(path): os.unlink(path)
srv = socket.socket(socket.AF_UNIX); srv.bind(path); srv.listen(512)
def accept():
    while True:
        c, _ = srv.accept(); c.close()
threading.Thread(target=accept, daemon=True).start()
def once():
    s = socket.socket(socket.AF_UNIX); s.connect(path); s.close()
for _ in range(50): once()
t = time.perf_counter()
for _ in range(n): once()
dt = time.perf_counter() - t
print(json.dumps({"per_call_us": dt / n * 1e6}))
"""


def main():
    confine = os.environ.get("CONFINE", shutil.which("confine") or "confine")
    wd = tempfile.mkdtemp(prefix="confine-bench-", dir=os.getcwd())
    try:
        script = os.path.join(wd, "inner.py")
        with open(script, "w") as f:
            f.write(INNER)
        py = "/usr/bin/python3"
        bare = json.loads(subprocess.run([py, script, str(N)], cwd=wd, capture_output=True,
                                         text=True, check=True).stdout)
        user = ["--user", "root"] if os.geteuid() == 0 else []
        conf = subprocess.run([confine, "exec", "-w", wd, *user, "--", py, script, str(N)], cwd=wd,
                              capture_output=True, text=True)
        if conf.returncode:
            sys.exit(f"confine failed: {conf.stderr}")
        inside = json.loads(conf.stdout.splitlines()[-1])
        print(f"connect() to a unix socket in the workdir, {N} calls")
        print(f"  unconfined:         {bare['per_call_us']:8.1f} us/call")
        print(f"  confined, mediated: {inside['per_call_us']:8.1f} us/call")
        print(f"  added per call:     {inside['per_call_us'] - bare['per_call_us']:8.1f} us")
    finally:
        shutil.rmtree(wd, ignore_errors=True)


if __name__ == "__main__":
    main()
