"""The seccomp listener reaches the supervisor as SCM_RIGHTS (runtime/channels.py).
Where a container's seccomp profile refuses that sendmsg, the run fails closed
before the agent runs, in one line saying what the container must allow; the
same container-like filter without that refusal runs it (the control). Started
as root (the agent as the test account) and as the test account."""
from __future__ import annotations

import os

from conftest import PREFIX

# the host-condition launcher (tests/conditions): a parent filter like a container's
LAUNCHER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "conditions",
                        "launcher.py")
VENV_PY = os.path.join(PREFIX, "bin", "python")


def _under(sandbox, *opts: str):
    sandbox.wrap = [VENV_PY, LAUNCHER, *opts, "--"]
    return sandbox.run(["sh", "-c", "touch ran; echo agent-ran"])


def test_refused_sendmsg_fails_closed_with_what_to_allow(sandbox):
    p = _under(sandbox, "--refuse", "sendmsg")
    assert p.returncode == 125, (p.returncode, p.stdout, p.stderr)
    assert "agent-ran" not in p.stdout and not os.path.exists(os.path.join(sandbox.workdir, "ran"))
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("confine: ") and "must allow sendmsg" in last, p.stderr
    assert "seccomp listener" in last, last
    control = _under(sandbox, "--no-userns")
    assert control.returncode == 0 and "agent-ran" in control.stdout, control.stderr
