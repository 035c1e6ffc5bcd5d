"""The child runs exactly the steps --dry-run prints, in the same order.

The API's run_result reports the steps the child began (over the status
pipe, as it began each); `confine exec --dry-run --json` prints plan.steps.
Both are compared for a workdir holding a git repository (so the protected
read-only binds are part of the plan), with all layers and without the
namespace layers, started as root and as the unprivileged account.
"""
from __future__ import annotations

import json
import os
import re
import subprocess

import pytest
from conftest import PREFIX

PYTHON = os.path.join(PREFIX, "bin", "python")


def _git_repo(sandbox) -> None:
    subprocess.run(["git", "init", "-q", sandbox.workdir], check=True)
    if os.geteuid() == 0:
        subprocess.run(["chown", "-R", f"{sandbox.pw.pw_uid}:{sandbox.pw.pw_gid}",
                        sandbox.workdir], check=True)


@pytest.mark.parametrize("layers", ["all", "landlock"])
def test_executed_steps_are_the_printed_steps(sandbox, layers):
    sb = sandbox.without_namespaces() if layers == "landlock" else sandbox
    _git_repo(sb)
    dry = sb.confine("exec", "--dry-run", "--json", "-w", sb.workdir, *sb.opts, "--", "true")
    assert dry.returncode == 0, dry.stderr
    printed = [s["name"] for s in json.loads(dry.stdout)["steps"]]
    degrade = ("mount_namespace",) if layers == "landlock" else ()
    code = ("import confine, json, sys\n"
            f"r = confine.run_result(['true'], workdir={sb.workdir!r}, "
            f"allow_degraded={degrade!r}, warn=lambda m: None)\n"
            "print(json.dumps({'status': r.status, 'steps': r.steps}))\n")
    cmd = sb.cmd([]) [:-1] + [PYTHON, "-c", code]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=sb.workdir)
    assert p.returncode == 0, p.stderr
    ran = json.loads(p.stdout.splitlines()[-1])
    assert ran["status"] == 0
    assert ran["steps"] == printed
    assert printed[0] == "pdeathsig" and printed[-1] == "exec"
    if layers == "all":
        assert "protected_binds" in printed and "pid_namespace" in printed
    else:
        assert "mount_namespace" not in printed


def test_dry_run_shows_protected_paths(sandbox):
    _git_repo(sandbox)
    dry = sandbox.confine("exec", "--dry-run", "--json", "-w", sandbox.workdir, "--", "true")
    assert dry.returncode == 0, dry.stderr
    d = json.loads(dry.stdout)
    pp = d["protected_paths"]
    assert ".git/hooks" in {p["path"] for p in pp["protected"]}
    binds = next(s for s in d["steps"] if s["name"] == "protected_binds")
    assert binds["read_only"] == pp["read_only_binds"] and binds["read_only"]


ADDED = (".tool-hooks/", ".tool-*.toml")


def test_exec_and_exporters_protect_the_same_patterns(sandbox, tmp_path):
    """A profile with its own `protected:` entries: `confine exec` snapshots and
    guards exactly the list the AppArmor profile and the systemd unit are built
    from (tests/export/test_protected.py reads those back), and the added names
    are refused inside while an ordinary name beside them is not."""
    from confine.export import source
    from confine.policy.patterns import effective
    prof = os.path.join(sandbox.workdir + "-prof.yaml")
    with open(prof, "w") as f:
        f.write("extends: default\nprotected:\n" + "".join(f"  - '{p}'\n" for p in ADDED))
    os.chmod(prof, 0o644)
    try:
        dry = sandbox.confine("exec", "--dry-run", "--json", "-w", sandbox.workdir, "-p", prof,
                              "--", "true")
        assert dry.returncode == 0, dry.stderr
        shown = json.loads(dry.stdout)["protected_paths"]["patterns"]
        want = effective(source.load_policy(prof))
        assert list(shown) == list(want)
        assert set(ADDED) <= set(shown)
        # symlinks stay refused; a new file or directory is held (protect/held.py)
        p, r = sandbox.probe('attempt("added", lambda: os.symlink("x", ".tool-hooks"))\n'
                             'attempt("glob", lambda: os.symlink("x", ".tool-a.toml"))\n'
                             'attempt("plain", lambda: opened("tool.toml", os.O_WRONLY | os.O_CREAT))\n'
                             'attempt("held", lambda: opened(".tool-b.toml", os.O_WRONLY | os.O_CREAT))\n'
                             'R["here"] = os.path.lexists(".tool-b.toml")',
                             None, "-p", prof)
        assert r is not None, p.stderr
        assert r["plain"] == "ok", r
        assert r["added"] in ("EACCES", "EPERM") and r["glob"] in ("EACCES", "EPERM"), r
        assert r["held"] == "ok" and r["here"] is False, r
        m = re.search(r"confine held discard (\S+)`", p.stderr)
        assert m and sandbox.confine("held", "discard", m.group(1)).returncode == 0, p.stderr
    finally:
        os.unlink(prof)
