"""Issue 21 item 7: what the exit check only noted still changes the exit status.

A staged protected entry or a commit that adds a protected name is left in place
(reverting git's own data would lose the person's work), but the person's next
`git checkout` writes it: a harness that trusts the status must see 123. Each
case runs a real confined process, started by root and unprivileged, with the
ordinary commit beside it as the control.
"""
from __future__ import annotations

import json
import os
import subprocess

from conftest import PREFIX

from .test_scan_holes import GIT, GITENV, GITENV_IN, _inside, _repo

ACTED = 123
STAGE_ENVRC = ("h=$({git} hash-object -w --stdin </dev/null) && "
               "{git} update-index --add --cacheinfo 100644,$h,.envrc").format(git=GIT)
PYTHON = os.path.join(PREFIX, "bin", "python")
COMMIT_ENVRC = STAGE_ENVRC + f" && {GIT} commit -qm env"


def test_staged_protected_entry_exits_123(sandbox):
    _repo(sandbox)
    p = _inside(sandbox, STAGE_ENVRC)
    assert p.returncode == ACTED, p.stderr
    assert "staged entries for protected paths" in p.stderr and ".envrc" in p.stderr
    assert "--agent-status" in p.stderr


def test_agent_status_keeps_the_agents_0(sandbox):
    _repo(sandbox)
    p = sandbox.run(["/bin/sh", "-c", f"export {GITENV_IN}; {STAGE_ENVRC}"], "--agent-status")
    assert p.returncode == 0, p.stderr
    assert "staged entries for protected paths" in p.stderr      # still reported


def test_commit_adding_a_protected_name_exits_123(sandbox):
    _repo(sandbox)
    p = _inside(sandbox, COMMIT_ENVRC)
    assert p.returncode == ACTED, p.stderr
    assert "adds or changes protected paths" in p.stderr and ".envrc" in p.stderr, p.stderr


def test_nonzero_agent_status_is_kept(sandbox):
    _repo(sandbox)
    p = _inside(sandbox, STAGE_ENVRC + " && exit 7")
    assert p.returncode == 7, p.stderr
    assert ".envrc" in p.stderr


def test_ordinary_commit_exits_0(sandbox):
    """Control: the same plumbing on an ordinary name is silent."""
    _repo(sandbox)
    p = _inside(sandbox, STAGE_ENVRC.replace(".envrc", "main.py") + f" && {GIT} commit -qm m")
    assert p.returncode == 0, p.stderr
    assert "PROTECTED PATHS" not in p.stderr, p.stderr


def test_api_result_status_is_123(sandbox):
    """The Python API gives the same status, and the agent's own 0 beside it."""
    _repo(sandbox)
    env = {k: v for k, v in GITENV.items() if k != "PATH"}
    code = ("import confine, json, os\n"
            f"os.environ.update({env!r})\n"
            "out = []\n"
            "for sh in ('true', {STAGE_ENVRC!r}):\n"
            f"    r = confine.run_result(['/bin/sh', '-c', sh], workdir={sandbox.workdir!r}, "
            "warn=lambda m: None)\n"
            "    out.append([r.status, r.agent_status])\n"
            "print(json.dumps(out))\n").replace("{STAGE_ENVRC!r}", repr(STAGE_ENVRC))
    cmd = sandbox.cmd([])[:-1] + [PYTHON, "-c", code]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=sandbox.workdir)
    assert p.returncode == 0, p.stderr
    control, staged = json.loads(p.stdout.splitlines()[-1])
    assert control == [0, None]
    assert staged == [ACTED, 0]


def test_cannot_decide_exits_123(sandbox):
    """An index the check cannot read (git would refuse it too, but the person's
    next `git` may be a newer one): "cannot decide" is something to look at."""
    _repo(sandbox)
    p = _inside(sandbox, "printf 'not an index at all, but long enough' > .git/index")
    assert p.returncode == ACTED, p.stderr
    assert "cannot decide" in p.stderr, p.stderr
