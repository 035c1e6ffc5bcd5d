"""cgroup.fork_into blocks every signal around its raw clone: a handler that ran
between the C library's fork preparation and the clone could leave the import
lock taken, or run on in the child as the parent. Observed from inside the
clone call itself (replaced by one that reads this thread's blocked mask and
fails, so nothing is forked), in a forked child: fork_into only clones in a
process of one thread."""
from __future__ import annotations

import signal

from childrun import fork_json

from confine.kernel import cgroup


def _observe(path: str) -> dict:
    seen = []

    def clone(*_args):
        with open("/proc/thread-self/status") as f:
            blk = next(ln for ln in f if ln.startswith("SigBlk:")).split()[1]
        seen.append(int(blk, 16))
        return -1

    cgroup._clone3 = clone
    before = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    got = cgroup.fork_into(path)
    after = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    return {"got": got, "seen": seen, "restored": before == after}


def test_every_signal_is_blocked_during_the_clone(tmp_path):
    r = fork_json(lambda: _observe(str(tmp_path)))
    assert r["ok"], r
    out = r["value"]
    want = sum(1 << (s - 1) for s in signal.valid_signals()
               if s not in (signal.SIGKILL, signal.SIGSTOP))         # never blockable
    assert out["got"] is None and len(out["seen"]) == 1, out
    assert out["seen"][0] & want == want, (hex(out["seen"][0]), hex(want))
    assert out["restored"], out
