"""A scripted decider for `--approver-socket` (docs/approvals.md frames), for tests.

It listens on a unix socket in its own directory under /tmp (reachable by the
test account too: the supervisor runs as that account in unprivileged runs),
answers each question with the next scripted decision and keeps every
question it was asked.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import struct
import tempfile
import threading


class Decider:
    def __init__(self, answers=(), *, raw=None, delay=0.0):
        self.dir = tempfile.mkdtemp(prefix="confine-decider-", dir="/tmp")
        os.chmod(self.dir, 0o755)
        self.path = os.path.join(self.dir, "decider.sock")
        self.answers = list(answers)    # decisions, in order; "deny" once they run out
        self.raw = raw                  # bytes sent instead of a well-formed answer
        self.delay = delay
        self.questions: list[dict] = []
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(self.path)
        os.chmod(self.path, 0o777)
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.stop = False
        self.t = threading.Thread(target=self._serve, daemon=True)
        self.t.start()

    def _serve(self):
        while not self.stop:
            try:
                c, _ = self.sock.accept()
            except (socket.timeout, OSError):
                continue
            try:
                self._one(c)
            except OSError:
                pass
            finally:
                c.close()

    def _one(self, c):
        c.settimeout(5)
        head = _exact(c, 4)
        (n,) = struct.unpack(">I", head)
        q = json.loads(_exact(c, n))
        self.questions.append(q)
        if self.delay:
            import time
            time.sleep(self.delay)
        if self.raw is not None:
            c.sendall(self.raw)
            return
        d = self.answers.pop(0) if self.answers else "deny"
        body = json.dumps({"type": "answer", "id": q["id"], "decision": d,
                           "reason": f"scripted {d}"}).encode()
        c.sendall(struct.pack(">I", len(body)) + body)

    def close(self):
        self.stop = True
        self.t.join(2)
        self.sock.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def _exact(c, n):
    out = b""
    while len(out) < n:
        chunk = c.recv(n - len(out))
        if not chunk:
            raise OSError("closed")
        out += chunk
    return out
