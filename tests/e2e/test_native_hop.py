"""The compiled prototype of bench/native/hop.c measures what it says it does.

bench/run.py's `native` section sets its figures beside confine's per-call cost
(issue 26). They only mean something if each mediated call really went through
the seccomp listener and was performed by the supervisor side, and if
hop1steps' name check really runs: the program counts the notifications its
supervisor handled during each kind's timed loop, and reports what a mkdir of
a protected name and of a plain one returned. Controls: bare mode (no filter:
no notification counted, nothing refused) and hop1 (the same listener without
the check: the protected mkdir succeeds, so the EPERM of hop1steps is the
check's).

Built with the C compiler the bench uses (bench/native_hop.py's `build`); where
there is none the test is skipped, loudly.
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile

import pytest
from conftest import TEST_USER, make_workdir

BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir, "bench")
sys.path.append(BENCH)   # last: bench/ must not shadow a module of the suite
import native_hop  # noqa: E402

N = 40


def test_hop_calls_go_through_the_listener_and_steps_refuse_protected_names(test_user):
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("NO NATIVE HOP TEST: " + native_hop.NO_CC)
    # not pytest's tmp_path: the account must reach the program (pytest-of-root is 0700)
    build = tempfile.mkdtemp(prefix="confine-hop-", dir="/tmp")
    wd = make_workdir(test_user)
    user = TEST_USER if os.geteuid() == 0 else None
    try:
        hop = native_hop.build(build)
        assert hop is not None
        runs = {m: native_hop.run_mode(hop, m, N, wd, user) for m in native_hop.MODES}
    finally:
        shutil.rmtree(wd, ignore_errors=True)
        shutil.rmtree(build, ignore_errors=True)
    mediated = {k: v["mediated"] for k, v in runs["bare"].items() if k != "probe"}
    assert mediated["create + unlink a new file"] == 2 and mediated["open read-only (not mediated)"] == 0
    for mode in ("hop1", "hop2", "hop1steps"):
        got = {k: runs[mode][k]["notifs"] for k in mediated}
        assert got == {k: N * m for k, m in mediated.items()}, mode
    # the control: without the filter nothing is counted, so the counts above are the listener's
    assert {k: runs["bare"][k]["notifs"] for k in mediated} == dict.fromkeys(mediated, 0)
    assert runs["hop1steps"]["probe"]["protected_mkdir"] == "EPERM"
    assert runs["hop1steps"]["probe"]["plain_mkdir"] == "ok"
    for control in ("bare", "hop1", "hop2"):
        assert runs[control]["probe"]["protected_mkdir"] == "ok", control
        assert runs[control]["probe"]["plain_mkdir"] == "ok", control
