#!/usr/bin/env python3
"""Benchmark: cost of a mediated connect() to a pathname unix socket.

Run by hand (as root or a user), from a directory you own:
    python3 bench/connect_mediation.py [N]
    python3 bench/connect_mediation.py --ab [N [ROUNDS]]  # one hop (now) against two (before)
It times N connect() calls to a socket in the workdir, once unconfined and once
inside `confine exec` (where each connect is a seccomp notification handled by
the supervisor and performed by the broker), and prints the per-call cost.
bench/run.py imports `measure` (same code, as a chosen user, in a chosen place).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

INNER = r"""
import socket, time, os, json, sys, threading
n = int(sys.argv[1]); path = os.path.abspath("bench.sock")
if os.path.exists(path): os.unlink(path)
srv = socket.socket(socket.AF_UNIX); srv.bind(path); srv.listen(512)
def accept():
    while True:
        c, _ = srv.accept(); c.close()
threading.Thread(target=accept, daemon=True).start()
blocking = sys.argv[2:3] != ["nonblocking"]   # Node's and Go's sockets are not
def once():
    s = socket.socket(socket.AF_UNIX); s.setblocking(blocking); s.connect(path); s.close()
for _ in range(50): once()
t = time.perf_counter()
for _ in range(n): once()
dt = time.perf_counter() - t
print(json.dumps({"per_call_us": dt / n * 1e6}))
"""
PY = "/usr/bin/python3"


def default_confine():
    return os.environ.get("CONFINE", shutil.which("confine") or "confine")


def _as_user(user):
    """subprocess keyword arguments that run a bare command as `user` (root only)."""
    if user is None or os.geteuid() != 0:
        return {}
    import pwd
    pw = pwd.getpwnam(user)
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": pw.pw_dir, "USER": user, "LOGNAME": user,
           "LANG": "C.UTF-8"}
    return {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": [], "env": env}


def _workdir(parent, user):
    wd = tempfile.mkdtemp(prefix="confine-bench-", dir=parent or os.getcwd())
    if user is not None and os.geteuid() == 0:
        import pwd
        pw = pwd.getpwnam(user)
        os.chown(wd, pw.pw_uid, pw.pw_gid)
    return wd


def measure(n=2000, confine=None, user=None, parent=None):
    """{"bare": us, "confined": us, "added": us} per connect(), n calls each.
    user: run both sides as this account (needs root); default as root, or as yourself."""
    confine = confine or default_confine()
    wd = _workdir(parent, user)
    try:
        script = os.path.join(wd, "inner.py")
        with open(script, "w") as f:
            f.write(INNER)
        os.chmod(script, 0o644)
        bare = json.loads(subprocess.run([PY, script, str(n)], cwd=wd, capture_output=True, text=True,
                                         check=True, **_as_user(user)).stdout)
        if user is not None:
            who = ["--user", user] if os.geteuid() == 0 else []
        else:
            who = ["--user", "root"] if os.geteuid() == 0 else []
        conf = subprocess.run([confine, "exec", "-w", wd, *who, "--", PY, script, str(n)], cwd=wd,
                              capture_output=True, text=True)
        if conf.returncode:
            raise RuntimeError(f"confine failed: {conf.stderr.strip()}")
        inside = json.loads(conf.stdout.splitlines()[-1])
        return {"bare": bare["per_call_us"], "confined": inside["per_call_us"],
                "added": inside["per_call_us"] - bare["per_call_us"]}
    finally:
        shutil.rmtree(wd, ignore_errors=True)


def ab(n=2000, rounds=5, user="confine-test", parent=None):
    """The broker receiving the notifications against the supervisor receiving
    them (CONFINE_TEST_TWO_HOPS=1, the path before issue 26), rounds
    interleaved in one process: {"one hop" | "two hops": [us per connect]}."""
    confine = default_confine()
    wd = _workdir(parent, user)
    who = ["--user", user] if os.geteuid() == 0 else []
    out: dict = {}
    try:
        script = os.path.join(wd, "inner.py")
        with open(script, "w") as f:
            f.write(INNER)
        os.chmod(script, 0o644)
        for _ in range(rounds):
            for kind in ("blocking", "nonblocking"):
                for hops, env in (("two hops", {"CONFINE_TEST_TWO_HOPS": "1"}), ("one hop", {})):
                    p = subprocess.run([confine, "exec", "-w", wd, *who, "--", PY, script, str(n), kind],
                                       cwd=wd, capture_output=True, text=True,
                                       env={**os.environ, **env})
                    if p.returncode:
                        raise RuntimeError(f"failed: {p.stderr.strip()}")
                    out.setdefault(f"{hops}, {kind}", []).append(
                        json.loads(p.stdout.splitlines()[-1])["per_call_us"])
        return out
    finally:
        shutil.rmtree(wd, ignore_errors=True)


def main():
    if sys.argv[1:2] == ["--ab"]:
        n = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
        rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 5
        r = ab(n, rounds)
        print(f"unix connect(), {n} calls each, {rounds} rounds interleaved (us, min / median / max)")
        for k, v in r.items():
            v = sorted(v)
            print(f"  {k:24s} {v[0]:7.1f} / {v[len(v) // 2]:7.1f} / {v[-1]:7.1f}")
        return
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    try:
        r = measure(n)
    except RuntimeError as e:
        sys.exit(str(e))
    print(f"connect() to a unix socket in the workdir, {n} calls")
    print(f"  unconfined:         {r['bare']:8.1f} us/call")
    print(f"  confined, mediated: {r['confined']:8.1f} us/call")
    print(f"  added per call:     {r['added']:8.1f} us")


if __name__ == "__main__":
    main()
