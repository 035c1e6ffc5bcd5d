"""cgroup.fork_into blocks every signal around its raw clone: a handler that ran
between the C library's fork preparation and the clone could leave the import
lock taken, or run on in the child as the parent. Observed from inside the
clone call itself (replaced here by one that reads this thread's blocked mask
and fails, so nothing is forked)."""
from __future__ import annotations

import signal

from confine.kernel import cgroup


def test_every_signal_is_blocked_during_the_clone(tmp_path, monkeypatch):
    seen = []

    def clone(*_args):
        with open("/proc/thread-self/status") as f:
            blk = next(ln for ln in f if ln.startswith("SigBlk:")).split()[1]
        seen.append(int(blk, 16))
        return -1

    monkeypatch.setattr(cgroup, "_clone3", clone)
    before = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    assert cgroup.fork_into(str(tmp_path)) is None
    want = sum(1 << (s - 1) for s in signal.valid_signals()
               if s not in (signal.SIGKILL, signal.SIGSTOP))         # never blockable
    assert seen and seen[0] & want == want, (hex(seen[0]), hex(want))
    assert signal.pthread_sigmask(signal.SIG_BLOCK, []) == before     # restored
