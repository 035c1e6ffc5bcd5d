"""Without a pid namespace, every agent process still ends with the run
(pid_namespace.lifetime, issue 12 item 1): processes that try to leave the
supervisor's tree by re-parenting: an intermediate that makes itself a child
subreaper, collects an orphan and then dies; and a grandchild whose parent exits
at once (double fork) after setsid. Control: the agent reports them alive."""
from __future__ import annotations

import textwrap

import pytest
from conftest import PY
from test_processes import LIB, _cleanup, _survivors, _tag

pytestmark = pytest.mark.e2e

REPARENT = LIB + textwrap.dedent("""
    import os, time
    r, w = os.pipe()
    if os.fork() == 0:                      # the would-be subreaper
        libc.prctl(36, 1, 0, 0, 0)          # PR_SET_CHILD_SUBREAPER
        name()
        if os.fork() == 0:
            if os.fork() == 0:              # orphaned at once: re-parented to the subreaper
                os.setsid()
                name()
                os.write(w, b"r")
                while True:
                    time.sleep(60)
            os._exit(0)
        time.sleep(0.3)
        os._exit(0)                         # the subreaper dies: the orphan moves on again
    if os.fork() == 0:                      # double fork + setsid, the classic daemon
        if os.fork() == 0:
            os.setsid()
            name()
            os.write(w, b"r")
            while True:
                time.sleep(60)
        os._exit(0)
    assert os.read(r, 1) + os.read(r, 1) == b"rr"
    time.sleep(0.6)                         # the subreaper is gone by now
    print("started", count(), flush=True)
""")


@pytest.mark.parametrize("layers", ["all", "landlock"])
def test_reparented_processes_are_dead_when_confine_returns(sandbox, layers):
    sb, tag = (sandbox.without_namespaces() if layers == "landlock" else sandbox), _tag()
    try:
        p = sb.run([PY, "-c", REPARENT, tag], timeout=60)
        assert p.returncode == 0, p.stderr
        # control: both alive inside (the dead subreaper may still count, as a zombie)
        assert p.stdout.split()[0] == "started" and int(p.stdout.split()[1]) >= 2, p.stdout
        assert _survivors(tag) == []
    finally:
        _cleanup(tag)
