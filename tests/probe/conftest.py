"""Fixtures for the probe and audit tests: run `confine probe|audit` as root or
as the unprivileged test account, in fresh workdirs.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile

import pytest

PREFIX = os.environ.get("CONFINE_TEST_PREFIX", "/opt/confine-test")
VENV_PY = os.path.join(PREFIX, "bin", "python")
BASE_PATH = "/usr/local/bin:/usr/bin:/bin"


def needs_root():
    if os.geteuid() != 0:
        pytest.skip("needs root (to run as the test account and to plant targets)")


@pytest.fixture(scope="session")
def confine_cmd(confine_bin):
    return [confine_bin]


class Runner:
    """Runs confine as root or as the test account with a minimal environment."""

    def __init__(self, mode: str, pw, base: list[str], wrap: list[str] | tuple[str, ...] = ()):
        self.mode, self.pw, self.base = mode, pw, base
        self.wrap = list(wrap)            # runs the whole command under it (ip netns exec NS)

    def __call__(self, *args, env_extra=(), cwd=None, timeout=60):
        if self.mode == "user":
            prefix = ["setpriv", f"--reuid={self.pw.pw_uid}", f"--regid={self.pw.pw_gid}",
                      "--clear-groups", "--", "env", "-i", f"HOME={self.pw.pw_dir}",
                      f"USER={self.pw.pw_name}"]
        else:
            prefix = ["env", "-i", "HOME=/root", "USER=root"]
        # The metadata attempts (audit and probe) go to a closed local port, never to
        # 169.254.169.254: tests send traffic only to this machine.
        prefix += [f"PATH={BASE_PATH}", "LANG=C.UTF-8", "CONFINE_AUDIT_METADATA=127.0.0.1:1",
                   *env_extra]
        return subprocess.run(self.wrap + prefix + self.base + list(args), capture_output=True, text=True,
                              timeout=timeout, cwd=cwd or "/")


def make_workdir(pw, mode=0o755) -> str:
    d = tempfile.mkdtemp(prefix="confine-probe-test-wd-", dir="/tmp")
    os.chmod(d, mode)
    os.chown(d, pw.pw_uid, pw.pw_gid)
    return d


def parse(p) -> dict:
    assert p.stdout.lstrip().startswith("{"), f"no JSON (rc {p.returncode}): {p.stderr[-2000:]}"
    return json.loads(p.stdout)


@pytest.fixture
def workdir(test_user):
    needs_root()
    d = make_workdir(test_user)
    yield d
    shutil.rmtree(d, ignore_errors=True)
