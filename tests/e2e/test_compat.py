"""Older kernels: where Landlock lacks a right, the layer that replaces it holds
on its own (CONFINE_TEST_LANDLOCK_ABI_MAX makes confine believe the kernel is
older, so only the replacement stands between the agent and the target)."""
from __future__ import annotations

import json
import os

from conftest import PY, probe_code

ABI = "CONFINE_TEST_LANDLOCK_ABI_MAX={}".format

SIGNAL_BODY = r'''
pid = P["pid"]
attempt("kill", lambda: os.kill(pid, 0))
attempt("pidfd_open", lambda: os.close(os.pidfd_open(pid)))
done()
'''


def test_signals_below_abi_6_refused_by_the_pid_namespace(sandbox, outside_sleeper):
    """ABI 5 has no signal scoping: the plan names the pid namespace instead, and
    a process of the agent's own uid outside cannot be signalled (it does not
    exist in the agent's namespace). Control: the same calls work outside."""
    env = [ABI(5)]
    d = json.loads(sandbox.run(["true"], "--dry-run", "--json", env_extra=env).stdout)
    assert d["mechanisms"]["landlock.scope_signal"].startswith("pid namespace")
    assert "landlock.scope_signal" not in {m["feature"] for m in d["missing"]}
    # ABI 5 lacks abstract-socket scoping too; the network namespace replaces it, so
    # the default profile runs at ABI 5 with no flag at all
    p = sandbox.run([PY, "-c", probe_code(SIGNAL_BODY, {"pid": outside_sleeper})], env_extra=env)
    r = json.loads(p.stdout.splitlines()[-1]) if p.stdout.strip() else None
    assert r == {"kill": "ESRCH", "pidfd_open": "ESRCH"}, (r, p.stderr)
    assert "degraded" not in p.stderr, p.stderr
    _, outside = sandbox.outside_probe(SIGNAL_BODY, {"pid": outside_sleeper})
    assert outside == {"kill": "ok", "pidfd_open": "ok"}, outside


TRUNC_BODY = r'''
attempt("truncate outside", lambda: os.truncate(P["path"], 0))
attempt("truncate in workdir", lambda: (open("w.txt", "w").write("abc"), os.truncate("w.txt", 1))[-1])
done()
'''


def test_truncate_below_abi_3_refused_by_the_read_only_host(sandbox, tmp_path):
    """ABI 2 has no TRUNCATE right: a file of the agent's own outside the workdir
    is still not truncated (EROFS from the read-only host view); inside the
    workdir truncation works (control), and outside it works unconfined."""
    victim = os.path.join(sandbox.home, ".confine-trunc-victim")
    with open(victim, "w") as f:
        f.write("keep me")
    os.chown(victim, sandbox.agent.pw_uid, sandbox.agent.pw_gid)
    try:
        env = [ABI(2)]
        d = json.loads(sandbox.run(["true"], "--dry-run", "--json", env_extra=env).stdout)
        assert d["mechanisms"]["landlock.truncate"].startswith("read-only host view")
        p = sandbox.run([PY, "-c", probe_code(TRUNC_BODY, {"path": victim})], env_extra=env)
        r = json.loads(p.stdout.splitlines()[-1]) if p.stdout.strip() else None
        assert r == {"truncate outside": "EROFS", "truncate in workdir": "ok"}, (r, p.stderr)
        with open(victim) as f:
            assert f.read() == "keep me"
        _, outside = sandbox.outside_probe(TRUNC_BODY, {"path": victim})
        assert outside["truncate outside"] == "ok", outside
    finally:
        os.unlink(victim)
