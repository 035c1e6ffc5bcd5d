#!/usr/bin/env python3
"""Benchmark: cost of the protected-path guard on file-system calls.

Run by hand (as root or a user), from a directory you own:
    python3 bench/file_mediation.py [N]
Inside `confine exec`, every open for writing, creat, mkdir, rename, link,
symlink, mknod and truncate is a seccomp notification the supervisor hands to
the broker (confine/mediation/files.py); read-only opens are not mediated. This
times N of each kind of call unconfined and confined, then a small git
workload (init, 500 files, add, commit) both ways.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

N = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
INNER = r"""
import json, os, sys, time
n = int(sys.argv[1])
def timed(fn):
    for _ in range(20): fn()
    t = time.perf_counter()
    for _ in range(n): fn()
    return (time.perf_counter() - t) / n * 1e6
W = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
open("f", "w").close()
out = {
    "open read-only (not mediated)": timed(lambda: os.close(os.open("f", os.O_RDONLY))),
    "open O_WRONLY|O_CREAT|O_TRUNC, existing": timed(lambda: os.close(os.open("f", W))),
    "create + unlink a new file": timed(lambda: (os.close(os.open("g", W | os.O_EXCL)), os.unlink("g"))),
    "mkdir + rmdir": timed(lambda: (os.mkdir("d"), os.rmdir("d"))),
    "rename there and back": timed(lambda: (os.rename("f", "h"), os.rename("h", "f"))),
}
print(json.dumps(out))
"""
GIT = r"""
set -e
d=repo-$$ && git init -q $d && cd $d
git config user.name b && git config user.email b@example.invalid
for i in $(seq 1 500); do echo "line $i" > "file$i.txt"; done
git add -A && git commit -qm bench
"""


def main():
    confine = os.environ.get("CONFINE", shutil.which("confine") or "confine")
    wd = tempfile.mkdtemp(prefix="confine-bench-", dir=os.getcwd())
    py = "/usr/bin/python3"
    user = ["--user", "root"] if os.geteuid() == 0 else []
    try:
        script = os.path.join(wd, "inner.py")
        with open(script, "w") as f:
            f.write(INNER)

        def run(argv, inside):
            cmd = [confine, "exec", "-w", wd, *user, "--", *argv] if inside else argv
            t = time.perf_counter()
            p = subprocess.run(cmd, cwd=wd, capture_output=True, text=True)
            if p.returncode:
                sys.exit(f"failed: {cmd}: {p.stderr}")
            return p.stdout, time.perf_counter() - t

        bare = json.loads(run([py, script, str(N)], False)[0])
        inside = json.loads(run([py, script, str(N)], True)[0].splitlines()[-1])
        print(f"per call, {N} calls each (us): unconfined / confined / added")
        for k in bare:
            print(f"  {k:42s} {bare[k]:8.1f} {inside[k]:8.1f} {inside[k] - bare[k]:+8.1f}")
        _, g0 = run(["/bin/sh", "-c", GIT], False)
        _, g1 = run(["/bin/sh", "-c", GIT], True)
        _, s1 = run(["/bin/true"], True)
        print(f"git init + 500 files + add + commit: unconfined {g0:.2f} s, confined {g1:.2f} s "
              f"(of which {s1:.2f} s is confine's start-up)")
    finally:
        shutil.rmtree(wd, ignore_errors=True)


if __name__ == "__main__":
    main()
