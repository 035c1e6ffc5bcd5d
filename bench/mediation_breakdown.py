#!/usr/bin/env python3
"""Benchmark: where the time of one mediated create goes, step by step (us).

Run as root:  python3 bench/mediation_breakdown.py [N] [USER]
(BREAKDOWN_DIR=DIR: make the workdir under DIR, e.g. a tmpfs; CONFINE: which confine)
Copies the installed confine package (the one `confine` runs) to a temporary
directory, adds time stamps (CLOCK_MONOTONIC, the same clock in every
process) to the broker's receiving of a file call (mediation/broker.py,
`receive`: since issue 26 the broker receives the notification itself; the
two-hop path's figures are in docs/benchmarks.md), runs N creates of a new file
(`openat(O_CREAT|O_EXCL)`, then unlink, which is not mediated) in a confined
agent with that copy on PYTHONPATH, and prints the median of each step. The
stamps cost a few us themselves; read the shares. A patch that no longer
applies (the code moved) stops with the line it looked for.
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

AGENT = r"""
import os, time, json, sys
n = int(sys.argv[1])
W = os.O_WRONLY | os.O_CREAT | os.O_EXCL
st = []
for i in range(n + 50):
    t0 = time.perf_counter_ns()
    fd = os.open("g", W, 0o600)
    t1 = time.perf_counter_ns()
    os.close(fd); os.unlink("g")
    st.append((t0, t1))
json.dump(st, open("agent.json", "w"))
"""

BRK = [
    ("import threading\n", "import threading\nimport time as _T\nimport json as _J\n_BL = []\n_AB = [0, 0]\n"),
    # receive() hands a file call to received_file_call(): the first stamps travel in _AB
    ("""        try:
            n = notify.recv(listener[0])
        except OSError:""", """        _a = _T.perf_counter_ns()
        try:
            n = notify.recv(listener[0])
            _AB[:] = [_a, _T.perf_counter_ns()]
        except OSError:"""),
    ("""        if got is None:
            return forward(n, slot)
        answer = None""", """        _c = _T.perf_counter_ns()
        if got is None:
            return forward(n, slot)
        answer = None"""),
    ("""            req = got.request(0)
            try:
                answer = files.handle(req, got.fds)""", """            req = got.request(0)
            _d = _T.perf_counter_ns()
            try:
                answer = files.handle(req, got.fds)
                _e = _T.perf_counter_ns()"""),
    ("""            left = _answer(listener[0], req, answer)""",
     """            left = _answer(listener[0], req, answer)
            if req.op == Op.OPEN:
                _BL.append((_AB[0], _AB[1], _c, _d, _e, _T.perf_counter_ns()))
                if len(_BL) % 100 == 0 and files.guard is not None:
                    with open(files.guard.workdir + '/broker.json', 'w') as _f:
                        _J.dump(_BL, _f)"""),
]
# confine's launcher, with the patched copy first on sys.path (PYTHONPATH)
LAUNCH = "import sys; from confine.cli import console; sys.argv[0] = 'confine'; sys.exit(console())"
STEPS = (
    "agent's syscall -> the broker's poll() returns",
    "NOTIF_RECV",
    "copy the path, the ids, the directory (gather_file)",
    "ID_VALID + the request",
    "files.handle (walk, guard, the create itself)",
    "ADDFD|SEND -> the agent's syscall returns (its wake-up)",
    "(the broker's ADDFD ioctl returns: after the agent ran, not waited for)",
    "total, as the agent sees it",
)


def _patch(path, edits):
    with open(path) as f:
        s = f.read()
    for old, new in edits:
        if old not in s:
            sys.exit(f"{path}: the code moved, no longer found:\n{old}")
        s = s.replace(old, new, 1)
    with open(path, "w") as f:
        f.write(s)


def measure(n=2000, user="nobody", confine=None):
    confine = confine or os.environ.get("CONFINE") or shutil.which("confine") or "confine"
    with open(confine) as f:
        # the interpreter without the launcher's -I -S, which would ignore PYTHONPATH
        python = f.readline()[2:].split()[0]
    pkg = subprocess.run([python, "-c", "import confine, os; print(os.path.dirname(confine.__file__))"],
                         capture_output=True, text=True, check=True, cwd="/").stdout.strip()
    tmp = tempfile.mkdtemp(prefix="confine-breakdown-", dir=os.environ.get("BREAKDOWN_DIR"))
    try:
        shutil.copytree(pkg, os.path.join(tmp, "lib", "confine"))
        _patch(os.path.join(tmp, "lib", "confine", "mediation", "broker.py"), BRK)
        wd = os.path.join(tmp, "wd")
        os.mkdir(wd)
        with open(os.path.join(wd, "agent.py"), "w") as f:
            f.write(AGENT)
        subprocess.run(["chmod", "-R", "a+rX", tmp], check=True)
        import pwd
        pw = pwd.getpwnam(user)
        os.chown(wd, pw.pw_uid, pw.pw_gid)
        env = dict(os.environ, PYTHONPATH=os.path.join(tmp, "lib"))
        env.pop("CONFINE_TEST_TWO_HOPS", None)
        p = subprocess.run([python, "-c", LAUNCH, "exec", "-w", wd, "--user", user, "--", "/usr/bin/python3",
                            "agent.py", str(n)], cwd=wd, env=env, capture_output=True, text=True)
        if p.returncode:
            sys.exit(f"confine failed: {p.stderr.strip()}")
        with open(os.path.join(wd, "agent.json")) as f:
            agent = json.load(f)
        with open(os.path.join(wd, "broker.json")) as f:
            brk = json.load(f)
        rows = []
        for (t0, t1), (a, b, c, d, e, f_) in zip(agent, brk, strict=False):
            rows.append((a - t0, b - a, c - b, d - c, e - d, t1 - e, f_ - e, t1 - t0))
        rows = rows[50:]
        return {k: statistics.median(r[i] for r in rows) / 1000 for i, k in enumerate(STEPS)}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    user = sys.argv[2] if len(sys.argv) > 2 else "nobody"
    r = measure(n, user)
    print(f"one mediated create (openat O_CREAT|O_EXCL), median of {n} (us), as {user}:")
    for k, v in r.items():
        print(f"  {k:62s} {v:7.1f}")


if __name__ == "__main__":
    main()
