"""The exec command line as a new user meets it (real runs, root and unprivileged)."""
from __future__ import annotations

import json


def test_dry_run_json_needs_no_command(sandbox):
    p = sandbox.confine("exec", "--dry-run", "--json", "-w", sandbox.workdir)
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["steps"][-1]["name"] == "exec" and d["command"]


def test_env_name_that_is_not_set_is_refused(sandbox):
    p = sandbox.run(["true"], "--env", "CONFINE_SURELY_UNSET_VAR")
    assert p.returncode == 125
    assert "--env CONFINE_SURELY_UNSET_VAR: not set" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1
    ok = sandbox.run(["sh", "-c", 'echo "$X"'], "--env", "X=1")   # control: a value passes
    assert ok.returncode == 0 and ok.stdout.strip() == "1", ok.stderr


def test_listen_without_connect_is_explained(sandbox, tmp_path):
    import os
    prof = sandbox.workdir + "-bind.yaml"
    with open(prof, "w") as f:
        f.write("extends: default\nnetwork:\n  bind_tcp: [8000]\n")
    os.chmod(prof, 0o644)
    try:
        p = sandbox.run(["true"], "-p", prof)
        assert p.returncode == 0, p.stderr
        assert "bind_tcp lets the agent listen on port 8000" in p.stderr
        assert "network.connect_tcp" in p.stderr
    finally:
        os.unlink(prof)
