"""Expensive test setups run in the background, one at a time, from the end of collection.

Some setups wait for nothing but take a core for many seconds (install.sh's venv and pip
runs, the SELinux policy linked with the whole reference policy). A test module's
`start_early(items)` (called by tests/conftest.py when collection ends) submits them
here; they run one after another while the tests collected before them run, on the core
those leave mostly idle: one at a time, so they take at most that core, and at nice 19
(`low`), so a test that wants the core gets it. The fixture that needs a job's result
calls `wait()`: a job not started yet starts then, out of turn, and one running gets its
normal priority back (the test is waiting for it now).
"""
from __future__ import annotations

import os
import signal
import subprocess
import threading
from typing import Callable

_lock = threading.Lock()
_queue: list[Job] = []
_runner: threading.Thread | None = None


def low(argv: list[str]) -> list[str]:
    """argv at nice 19 (its children too): a test that wants the core gets it first."""
    return ["nice", "-n", "19", *argv]


class Job:
    """One background process; `start` makes it (a Popen in a session of its own)."""

    def __init__(self, start: Callable[[], subprocess.Popen]) -> None:
        self._start = start
        self._lock = threading.Lock()
        self.proc: subprocess.Popen | None = None
        self.killed = False

    def run(self) -> subprocess.Popen | None:
        with self._lock:
            if self.proc is None and not self.killed:
                self.proc = self._start()
            return self.proc

    def wait(self, timeout: float) -> int:
        """The process's exit status, started now if it was not yet."""
        proc = self.run()
        assert proc is not None, "the background job was stopped"
        if proc.poll() is None:
            try:    # its process group (a session of its own): what it forks later too
                os.setpriority(os.PRIO_PGRP, proc.pid, 0)
            except OSError:
                pass    # not root: it stays at nice 19, only slower
        return proc.wait(timeout=timeout)

    def kill(self) -> None:
        with self._lock:
            self.killed = True
            if self.proc is not None and self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def submit(job: Job) -> Job:
    global _runner
    with _lock:
        _queue.append(job)
        if _runner is None or not _runner.is_alive():
            _runner = threading.Thread(target=_run, name="test-background", daemon=True)
            _runner.start()
    return job


def _run() -> None:
    while True:
        with _lock:
            if not _queue:
                return
            job = _queue.pop(0)
        proc = job.run()
        if proc is not None:
            proc.wait()


def drop(job: Job) -> None:
    """The job killed (and never started, if it was still queued)."""
    with _lock:
        if job in _queue:
            _queue.remove(job)
    job.kill()
