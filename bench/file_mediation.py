#!/usr/bin/env python3
"""Benchmark: cost of the protected-path guard on file-system calls.

Run by hand (as root or a user), from a directory you own:
    python3 bench/file_mediation.py [N]
    python3 bench/file_mediation.py --ab [N [ROUNDS]]   # one hop (now) against two (before)
Inside `confine exec`, every open for writing, creat, mkdir, rename, link,
symlink, mknod, truncate, unlink and rmdir is a seccomp notification the
supervisor hands to the broker (confine/mediation/files.py); read-only opens
are not mediated. This times N of each kind of call unconfined and confined,
then what undo adds (confine/undo/: N files made before the run, each
deleted, and N each overwritten with O_TRUNC: a link, a copy), then a small
git workload (init, 500 files, add, commit) both ways.
bench/run.py imports `measure` (same code, as a chosen user, in a chosen place).
"""
import json
import os
import shutil
import subprocess
import sys
import time

from connect_mediation import PY, _as_user, _workdir, default_confine

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
os.makedirs("e", exist_ok=True)
def mkdir_existing():
    try:
        os.mkdir("e")
    except FileExistsError:
        pass
out = {
    "open read-only (not mediated)": timed(lambda: os.close(os.open("f", os.O_RDONLY))),
    "open O_WRONLY|O_CREAT|O_TRUNC, existing": timed(lambda: os.close(os.open("f", W))),
    "create + unlink a new file": timed(lambda: (os.close(os.open("g", W | os.O_EXCL)), os.unlink("g"))),
    "mkdir + rmdir": timed(lambda: (os.mkdir("d"), os.rmdir("d"))),
    "mkdir of an existing directory (EEXIST)": timed(mkdir_existing),
    "rename there and back": timed(lambda: (os.rename("f", "h"), os.rename("h", "f"))),
}
print(json.dumps(out))
"""
# How many mediated calls each kind makes.
MEDIATED_CALLS = {
    "open read-only (not mediated)": 0,
    "open O_WRONLY|O_CREAT|O_TRUNC, existing": 1,
    "create + unlink a new file": 2,
    "mkdir + rmdir": 2,
    "mkdir of an existing directory (EEXIST)": 1,
    "rename there and back": 2,
    "undo: unlink a file there at the start (kept: a link)": 1,
    "undo: O_TRUNC + write 4 KiB of a file there at the start (kept: a copy)": 1,
}
# Files that exist before the run: what undo keeps (a file made during the run is not).
UNDO_INNER = r"""
import json, os, sys, time
n = int(sys.argv[1])
def each(fn):
    t = time.perf_counter()
    for i in range(n): fn(i)
    return (time.perf_counter() - t) / n * 1e6
def over(i):
    fd = os.open("o/%d" % i, os.O_WRONLY | os.O_TRUNC)
    os.write(fd, b"y" * 4096)
    os.close(fd)
print(json.dumps({
    "undo: unlink a file there at the start (kept: a link)": each(lambda i: os.unlink("k/%d" % i)),
    "undo: O_TRUNC + write 4 KiB of a file there at the start (kept: a copy)": each(over),
}))
"""


def _undo_files(wd, n, user):
    """n files of 4 KiB in k/ (deleted) and o/ (overwritten), made before the run."""
    for d in ("k", "o"):
        shutil.rmtree(os.path.join(wd, d), ignore_errors=True)
        os.mkdir(os.path.join(wd, d))
        for i in range(n):
            with open(os.path.join(wd, d, str(i)), "wb") as f:
                f.write(b"x" * 4096)
    if user is not None and os.geteuid() == 0:
        subprocess.run(["chown", "-R", user, os.path.join(wd, "k"), os.path.join(wd, "o")],
                       check=True)
GIT = r"""
set -e
d=repo-$$ && git init -q $d && cd $d
git config user.name b && git config user.email b@example.invalid
for i in $(seq 1 500); do echo "line $i" > "file$i.txt"; done
git add -A && git commit -qm bench
"""


def measure(n=2000, confine=None, user=None, parent=None, git=True):
    """{"calls": {kind: {"bare", "confined", "added", "per_mediated_call"}} (us),
    "git": {"bare", "confined", "startup"} (s) if git}."""
    confine = confine or default_confine()
    wd = _workdir(parent, user)
    if user is not None:
        who = ["--user", user] if os.geteuid() == 0 else []
    else:
        who = ["--user", "root"] if os.geteuid() == 0 else []
    try:
        script = os.path.join(wd, "inner.py")
        with open(script, "w") as f:
            f.write(INNER)
        os.chmod(script, 0o644)

        def run(argv, inside):
            cmd = [confine, "exec", "-w", wd, *who, "--", *argv] if inside else argv
            t = time.perf_counter()
            p = subprocess.run(cmd, cwd=wd, capture_output=True, text=True, **({} if inside else _as_user(user)))
            if p.returncode:
                raise RuntimeError(f"failed: {cmd}: {p.stderr.strip()}")
            return p.stdout, time.perf_counter() - t

        bare = json.loads(run([PY, script, str(n)], False)[0])
        inside = json.loads(run([PY, script, str(n)], True)[0].splitlines()[-1])
        undo_script = os.path.join(wd, "undo_inner.py")
        with open(undo_script, "w") as f:
            f.write(UNDO_INNER)
        os.chmod(undo_script, 0o644)
        _undo_files(wd, n, user)
        bare.update(json.loads(run([PY, undo_script, str(n)], False)[0]))
        _undo_files(wd, n, user)
        inside.update(json.loads(run([PY, undo_script, str(n)], True)[0].splitlines()[-1]))
        calls = {}
        for k in bare:
            added = inside[k] - bare[k]
            m = MEDIATED_CALLS.get(k, 1)
            calls[k] = {"bare": bare[k], "confined": inside[k], "added": added,
                        "per_mediated_call": added / m if m else None}
        out = {"calls": calls}
        if git and shutil.which("git"):
            _, g0 = run(["/bin/sh", "-c", GIT], False)
            _, g1 = run(["/bin/sh", "-c", GIT], True)
            _, s1 = run(["/bin/true"], True)
            out["git"] = {"bare": g0, "confined": g1, "startup": s1}
        return out
    finally:
        shutil.rmtree(wd, ignore_errors=True)


def ab(n=2000, rounds=3, user="confine-test", parent=None):
    """The broker receiving the notifications (this change) against the
    supervisor receiving them (CONFINE_TEST_TWO_HOPS=1, the path before it),
    rounds interleaved in one process: {"one hop" | "two hops": [{kind: us}]}."""
    confine = default_confine()
    wd = _workdir(parent, user)
    who = ["--user", user] if os.geteuid() == 0 else []
    out = {"one hop": [], "two hops": []}
    try:
        script = os.path.join(wd, "inner.py")
        with open(script, "w") as f:
            f.write(INNER)
        os.chmod(script, 0o644)
        for _ in range(rounds):
            for name, env in (("two hops", {"CONFINE_TEST_TWO_HOPS": "1"}), ("one hop", {})):
                p = subprocess.run([confine, "exec", "-w", wd, *who, "--", PY, script, str(n)],
                                   cwd=wd, capture_output=True, text=True,
                                   env={**os.environ, **env})
                if p.returncode:
                    raise RuntimeError(f"failed: {p.stderr.strip()}")
                out[name].append(json.loads(p.stdout.splitlines()[-1]))
        return out
    finally:
        shutil.rmtree(wd, ignore_errors=True)


def main():
    if sys.argv[1:2] == ["--ab"]:
        n = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
        rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
        r = ab(n, rounds)
        print(f"per call, {n} calls each, {rounds} rounds interleaved (us, min / median):"
              " two hops (before), one hop (now)")
        for k in r["one hop"][0]:
            a = sorted(x[k] for x in r["two hops"])
            b = sorted(x[k] for x in r["one hop"])
            print(f"  {k:42s} {a[0]:7.1f} / {a[len(a) // 2]:7.1f}   {b[0]:7.1f} / {b[len(b) // 2]:7.1f}")
        return
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    try:
        r = measure(n)
    except RuntimeError as e:
        sys.exit(str(e))
    print(f"per call, {n} calls each (us): unconfined / confined / added")
    for k, v in r["calls"].items():
        print(f"  {k:72s} {v['bare']:8.1f} {v['confined']:8.1f} {v['added']:+8.1f}")
    if "git" in r:
        g = r["git"]
        print(f"git init + 500 files + add + commit: unconfined {g['bare']:.2f} s, confined {g['confined']:.2f} s "
              f"(of which {g['startup']:.2f} s is confine's start-up)")


if __name__ == "__main__":
    main()
