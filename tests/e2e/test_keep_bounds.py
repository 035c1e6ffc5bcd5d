"""Issue 21 item 6: held files (and the quarantine) are bounded across runs
(protect/keep.py), not only per run.

Six real runs each hold a 20 MiB `.envrc` (random data: a sparse file would
cost nothing on disk) with the documented override CONFINE_KEEP_BYTES=50M:
at most 50 MiB is left, the oldest runs went first and each drop was named
with its run id, workdir and size. The control is the first two runs, under
the bound: nothing is dropped. The person's state directories are the
test's own (a private /var/lib/confine as root, XDG_STATE_HOME unprivileged),
so other runs on this machine are never touched.
"""
from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import time

import pytest

from confine.protect import keep

MIB = 1 << 20
DROPPED = re.compile(r"confine: dropped held files run (\S+) \(workdir (\S+), ([\d.]+) MiB\)")


@pytest.fixture
def own_state(sandbox):
    """The sandbox with a state directory of the test's own."""
    d = tempfile.mkdtemp(prefix="confine-keep-state-")
    os.chown(d, sandbox.pw.pw_uid, sandbox.pw.pw_gid)
    if sandbox.mode == "root":
        os.chown(d, 0, 0)
        os.makedirs("/var/lib/confine", mode=0o755, exist_ok=True)
        sandbox.wrap = ["unshare", "-m", "--propagation", "private", "/bin/sh", "-c",
                        'mount --bind "$0" /var/lib/confine && exec "$@"', d]
        held = os.path.join(d, "held")
    else:
        sandbox.env = sandbox.env + [f"XDG_STATE_HOME={d}"]
        held = os.path.join(d, "confine", "held")
    yield sandbox, held
    shutil.rmtree(d, ignore_errors=True)


def _tar(wd: str) -> None:
    buf = io.BytesIO()
    data = os.urandom(20 * MIB)
    with tarfile.open(fileobj=buf, mode="w") as t:
        info = tarfile.TarInfo("t/.envrc")
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))
    with open(os.path.join(wd, "a.tar"), "wb") as f:
        f.write(buf.getvalue())
    os.chmod(os.path.join(wd, "a.tar"), 0o644)


def _du(path: str) -> int:
    out = subprocess.run(["du", "-s", "-B1", path], capture_output=True, text=True, check=True)
    return int(out.stdout.split()[0])


def _next_second(run_id: str) -> None:
    """Run ids name the second of their start (YYYYmmdd-HHMMSS-pid): one run per second is
    what orders them. The run named is over, so a clock still in its second waits for the
    next one, and one already past it need not. Seconds only: time zones differ by whole
    minutes, whichever the run's clock used."""
    now = time.time()
    if int(now) % 60 == int(run_id[13:15]):
        time.sleep(1.02 - now % 1)


def test_six_runs_of_20_mib_leave_at_most_the_bound(own_state):
    sb, held = own_state
    _tar(sb.workdir)
    env = ["CONFINE_KEEP_BYTES=50M"]
    ids, dropped = [], []
    for i in range(6):
        if i:
            _next_second(ids[-1])
        p = sb.run(["tar", "xf", "a.tar"], env_extra=env, timeout=120)
        assert p.returncode == 0, p.stderr
        assert "held t/.envrc (file, 20971520 bytes)" in p.stderr, p.stderr
        ids.append(re.search(r"confine held show (\S+)`", p.stderr).group(1))
        now = DROPPED.findall(p.stderr)
        if i < 2:
            assert now == [], p.stderr     # control: under the bound, nothing goes
        else:
            assert now, p.stderr
        dropped += now
        assert _du(held) <= 50 * MIB, (i, _du(held))
    # the oldest went first, each named with its workdir and size
    assert [d[0] for d in dropped] == ids[:4], (dropped, ids)
    assert all(d[1] == sb.workdir and 19.5 < float(d[2]) < 21 for d in dropped), dropped
    assert sorted(n for n in os.listdir(held) if n not in (keep.INDEX, keep.SIZE_DIR)) == ids[4:]
    # `confine held list` shows the sizes
    p = sb.confine("held", "list", "--json")
    assert p.returncode == 0, p.stderr
    listed = {r["run"]: r["size"] for r in json.loads(p.stdout)}
    assert set(listed) == set(ids[4:]) and all(s >= 20 * MIB for s in listed.values()), listed
    text = sb.confine("held", "list", env_extra=env).stdout
    assert "20.0 MiB" in text and "at most 50.0 MiB" in text, text
    # a single run over the bound alone: said, and kept
    p = sb.run(["tar", "xf", "a.tar"], env_extra=["CONFINE_KEEP_BYTES=10M"], timeout=120)
    assert p.returncode == 0, p.stderr
    last = re.search(r"confine held show (\S+)`", p.stderr).group(1)
    assert f"held files run {last} alone holds 20.0 MiB, over the 10.0 MiB bound" in p.stderr
    assert [n for n in os.listdir(held) if n not in (keep.INDEX, keep.SIZE_DIR)] == [last]


def test_a_bad_override_is_refused_before_the_run(own_state):
    sb, _ = own_state
    p = sb.run(["true"], env_extra=["CONFINE_KEEP_BYTES=lots"])
    assert p.returncode == 125 and "CONFINE_KEEP_BYTES" in p.stderr, p.stderr
    assert p.stderr.count("\n") == 1, p.stderr
    p = sb.run(["true"], env_extra=["CONFINE_KEEP_BYTES=2G", "CONFINE_KEEP_DAYS=7"])
    assert p.returncode == 0, p.stderr      # control
