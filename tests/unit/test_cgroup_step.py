"""The child's cgroup step: the supervisor moves the child into the run's cgroup
while the child runs its first steps; the child goes no further until told so,
and then checks it is there (kernel/cgroup.py is_member, runtime/child.py)."""
from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

from confine.kernel import cgroup
from confine.runtime import child


def test_is_member_reads_the_v2_line_by_the_runs_own_name(tmp_path):
    f = tmp_path / "cgroup"
    f.write_text("12:pids:/user.slice\n0::/confine-41-ab12cd34\n")
    assert cgroup.is_member("/sys/fs/cgroup/confine-41-ab12cd34", str(f))
    assert cgroup.is_member("/sys/fs/cgroup/unified/confine-41-ab12cd34/", str(f))
    # another run's cgroup, a v1 line with the name, the parent: not members
    assert not cgroup.is_member("/sys/fs/cgroup/confine-41-ffffffff", str(f))
    f.write_text("12:pids:/confine-41-ab12cd34\n0::/\n")
    assert not cgroup.is_member("/sys/fs/cgroup/confine-41-ab12cd34", str(f))
    assert not cgroup.is_member("/x/confine-41-ab12cd34", str(tmp_path / "missing"))


def _ctx(sync: int | None, path: str | None = "/sys/fs/cgroup/confine-0-00000000"):
    return SimpleNamespace(cgroup=path, cgroup_sync=sync)


def test_the_step_stops_when_the_supervisor_did_not_say_it_moved_the_child():
    r, w = os.pipe()
    os.close(w)                          # the supervisor failed (or died): no byte
    with pytest.raises(OSError, match="did not move"):
        child._cgroup(_ctx(r))           # type: ignore[arg-type]
    os.close(r)
    r, w = os.pipe()
    os.write(w, b"x")                    # anything but the agreed byte
    os.close(w)
    with pytest.raises(OSError, match="did not move"):
        child._cgroup(_ctx(r))           # type: ignore[arg-type]
    os.close(r)
    with pytest.raises(OSError, match="no cgroup"):
        child._cgroup(_ctx(None))        # type: ignore[arg-type]


def test_the_step_checks_membership_after_the_byte():
    """Told it was moved, but /proc/self/cgroup does not name the run's cgroup
    (this test process is in none such): refused. Control: the cgroup this
    process is really in passes."""
    r, w = os.pipe()
    os.write(w, b"j")
    os.close(w)
    with pytest.raises(OSError, match="not in the run's cgroup"):
        child._cgroup(_ctx(r, "/sys/fs/cgroup/confine-0-notmine"))   # type: ignore[arg-type]
    with open("/proc/self/cgroup") as f:
        line = next((ln for ln in f.read().splitlines() if ln.startswith("0::")), None)
    if line is None or line == "0::/":
        pytest.skip("this process is in no named cgroup v2")
    r, w = os.pipe()
    os.write(w, b"j")
    os.close(w)
    child._cgroup(_ctx(r, "/sys/fs/cgroup" + line[3:]))            # type: ignore[arg-type]
