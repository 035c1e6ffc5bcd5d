#!/usr/bin/env python3
"""Benchmark: one approval round trip through `--approver-socket` (issue 25, item 6).

Run as root:  python3 bench/approval.py [CONFINE] [N]
(default CONFINE: /opt/confine-test/bin/confine, N: 200; AB_USER: the agent,
default confine-test). The agent connects N times to a unix socket outside its
grants under `approvals: unix_sockets: ask`; a decider on a unix socket (a
thread of this process, answering "once", so every connect is asked again)
answers each question. Measured inside the agent, per connect: event to
decision applied (the agent's connect() returns). Beside it, the same connect
to a socket in the workdir (mediated, never asked), and the engine alone
(Engine.decide through the same decider, no run). Target: < 5 ms median.
"""
from __future__ import annotations

import json
import os
import pwd
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

AGENT = r"""
import socket, time, json, sys, os
target, n = sys.argv[1], int(sys.argv[2])
srv = socket.socket(socket.AF_UNIX); srv.bind("in.sock"); srv.listen(1024)
def timed(path):
    out = []
    for _ in range(n):
        s = socket.socket(socket.AF_UNIX)
        t = time.perf_counter(); s.connect(path); out.append(time.perf_counter() - t)
        s.close()
    return out
print(json.dumps({"asked": timed(target), "inside": timed(os.path.abspath("in.sock"))}))
"""


class Decider:
    """Answers every question "once" on a unix socket (frames: docs/approvals.md)."""

    def __init__(self, where: str) -> None:
        from confine.approval import frame, read_frame
        self.frame, self.read = frame, read_frame
        self.path = os.path.join(where, "decider.sock")
        self.s = socket.socket(socket.AF_UNIX)
        self.s.bind(self.path)
        os.chmod(self.path, 0o777)
        self.s.listen(64)
        self.n = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            c, _ = self.s.accept()
            try:
                q = self.read(c, time.monotonic() + 5)
                c.sendall(self.frame({"type": "answer", "id": q["id"], "decision": "once"}))
                self.n += 1
            except (OSError, ValueError):
                pass
            finally:
                c.close()


def _ms(xs: list[float]) -> str:
    return f"median {statistics.median(xs) * 1000:.3f} ms, p90 {sorted(xs)[int(len(xs) * 0.9)] * 1000:.3f} ms"


def main() -> None:
    confine = sys.argv[1] if len(sys.argv) > 1 else "/opt/confine-test/bin/confine"
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    pw = pwd.getpwnam(os.environ.get("AB_USER", "confine-test"))
    base = tempfile.mkdtemp(prefix="confine-bench-approval-", dir="/tmp")
    try:
        os.chmod(base, 0o755)
        wd = os.path.join(base, "wd")
        os.mkdir(wd)
        os.chown(wd, pw.pw_uid, pw.pw_gid)
        outside = socket.socket(socket.AF_UNIX)
        target = os.path.join(base, "outside.sock")
        outside.bind(target)
        os.chmod(target, 0o777)
        outside.listen(4096)
        threading.Thread(target=lambda: [outside.accept()[0].close() for _ in iter(int, 1)],
                         daemon=True).start()
        prof = os.path.join(base, "p.yaml")
        with open(prof, "w") as f:
            f.write("extends: default\napprovals:\n  unix_sockets: ask\n")
        os.chmod(prof, 0o644)
        d = Decider(base)

        # the engine alone: Engine.decide -> SocketApprover -> the decider
        from confine.approval import Engine, Event, SocketApprover
        from confine.policy.approvals import Approvals, KindSpec
        eng = Engine(Approvals((("unix_socket", KindSpec("ask")),)), SocketApprover(d.path), "socket")
        alone = []
        for _ in range(n):
            t = time.perf_counter()
            eng.decide(Event("unix_socket", {"path": target}), 5)
            alone.append(time.perf_counter() - t)

        p = subprocess.run(["setsid", "-w", confine, "exec", "-w", wd, "--user", pw.pw_name, "-p", prof,
                            "--approver-socket", d.path, "--", "/usr/bin/python3", "-c", AGENT, target,
                            str(n)], capture_output=True, text=True, timeout=600, cwd=wd)
        line = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
        if p.returncode != 0 or not line:
            sys.exit(f"the run failed ({p.returncode}): {p.stderr[-2000:]}")
        got = json.loads(line[-1])
        print(f"approval round trip through --approver-socket, {n} connects, {d.n} questions answered:")
        print(f"  connect asked, event to decision applied (in the agent): {_ms(got['asked'])}")
        print(f"  connect in the workdir, mediated, not asked:             {_ms(got['inside'])}")
        print(f"  the engine alone (decide -> socket decider -> verdict):  {_ms(alone)}")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
