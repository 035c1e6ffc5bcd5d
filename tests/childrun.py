"""Run a function in a forked child and get its JSON-able result back: the one
fork + pipe + timeout helper the component tests share."""
from __future__ import annotations

import json
import os
import select
import signal
import time
import traceback
from collections.abc import Callable
from typing import Any


def fork_json(fn: Callable[[], Any], timeout: float = 10.0,
              before: Callable[[], None] | None = None) -> dict[str, Any]:
    """fork; in the child run before() (if given) then fn(). Returns
    {"ok": True, "value": ...} or {"ok": False, "type", "errno", "msg", "tb"}.
    The child never returns into pytest; a child still running after `timeout`
    is killed and the test fails."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            try:
                if before is not None:
                    before()
                res = {"ok": True, "value": fn()}
            except BaseException as e:  # noqa: BLE001 - report everything
                res = {"ok": False, "type": type(e).__name__, "errno": getattr(e, "errno", None),
                       "msg": str(e), "tb": traceback.format_exc()}
            data = json.dumps(res).encode()
            while data:
                data = data[os.write(w, data):]
        finally:
            os._exit(0)
    os.close(w)
    chunks, deadline = [], time.monotonic() + timeout
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([r], [], [], left)[0]:
                os.kill(pid, signal.SIGKILL)
                raise AssertionError(f"child did not finish within {timeout}s")
            chunk = os.read(r, 65536)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(r)
        _, st = os.waitpid(pid, 0)
    out = json.loads(b"".join(chunks) or b'{"ok": false, "msg": "child sent nothing", "tb": ""}')
    if os.WIFSIGNALED(st):
        out["signal"] = os.WTERMSIG(st)
    else:
        out["exit"] = os.WEXITSTATUS(st)
    return out
