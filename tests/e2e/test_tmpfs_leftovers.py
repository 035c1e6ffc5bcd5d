"""The TMPDIR tmpfs a supervisor killed with SIGKILL could not detach is detached
by the next run (kernel/tmpfs.py sweep); a live run's is left alone."""
from __future__ import annotations

import json
import os
import signal
import subprocess

import pytest

pytestmark = pytest.mark.e2e


def mounted(path: str) -> bool:
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == path and " - tmpfs confine-tmp " in line for line in f)


def start_sleeper(sb) -> tuple[subprocess.Popen, str]:
    p = sb.popen(["/bin/sh", "-c", 'echo "$TMPDIR"; exec sleep 60'],
                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline().strip()
    assert line.startswith("/"), p.stderr.read() if p.poll() is not None else line
    return p, line


def test_a_killed_supervisors_tmpfs_is_detached_by_the_next_run(root_sandbox):
    sb = root_sandbox
    dead, dead_tmp = start_sleeper(sb)
    live, live_tmp = start_sleeper(sb)
    try:
        assert mounted(dead_tmp) and mounted(live_tmp)
        dead.send_signal(signal.SIGKILL)
        dead.wait(10)
        # the control: nothing but the sweep removes it (the supervisor had no chance)
        assert mounted(dead_tmp), "the killed supervisor's tmpfs went away by itself"
        r = sb.run(["/bin/true"])
        assert r.returncode == 0, r.stderr
        assert not mounted(dead_tmp)
        assert not os.path.exists(dead_tmp)
        # the other run is alive: its tmpfs stays, and it can still write there
        assert mounted(live_tmp)
        assert live.poll() is None
    finally:
        live.kill()
        live.wait(10)
        for p in (dead, live):
            p.stdout.close()
            p.stderr.close()
    # the live run's supervisor was killed too: the next run takes its tmpfs as well
    r = sb.run(["/bin/true"])
    assert r.returncode == 0, r.stderr
    assert not mounted(live_tmp)


def test_a_record_of_ours_names_only_our_own_mounts(root_sandbox, tmp_path):
    """A record whose supervisor is gone but whose path is not a confine-tmp
    tmpfs (a directory, another filesystem) detaches nothing."""
    from confine.kernel import tmpfs
    state = str(tmp_path / "state")
    other = tmp_path / "plain"
    other.mkdir()
    (other / "keep").write_text("x")
    tmpfs.record(str(other), state)
    rec = os.path.join(state, os.listdir(state)[0])
    with open(rec) as f:
        data = json.load(f)

    def rewrite(**kw):
        with open(rec, "w") as f:
            json.dump({**data, **kw}, f)
    # a supervisor that cannot be judged from here is taken to be alive: another pid
    # namespace's, or one whose start time was not known
    for kw in ({"pid": 2147483647, "pidns": "pid:[1]"}, {"pid": 2147483647, "start": -1},
               {"pid": 2147483647, "pidns": ""}):
        rewrite(**kw)
        assert tmpfs.sweep(state) == [] and len(os.listdir(state)) == 1, kw
    # its supervisor gone (no such pid): swept
    rewrite(pid=2147483647)
    assert tmpfs.sweep(state) == [str(other)]
    assert (other / "keep").read_text() == "x"        # not empty: never removed
    assert os.listdir(state) == []
    # a record for the state dir of a live process is kept
    tmpfs.record(str(other), state)
    assert tmpfs.sweep(state) == [] and len(os.listdir(state)) == 1
