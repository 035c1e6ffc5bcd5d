"""`python3 scripts/gen-man.py` as the README gives it: a plain python3 has none of
confine's dependencies, so the script runs again with the Python of confine's install
(issue 23 item 7). Control: with no install to find it says what to do, exit 1."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

from conftest import PREFIX

REPO = Path(__file__).resolve().parents[2]
SYSTEM_PY = "/usr/bin/python3"


def _gen(home: Path) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home)}
    return subprocess.run([SYSTEM_PY, str(REPO / "scripts" / "gen-man.py")], env=env,
                          capture_output=True, text=True, timeout=60, cwd=home)


def test_plain_python3_uses_the_installs_python(tmp_path):
    lacks = subprocess.run([SYSTEM_PY, "-c", "import landlockpy"], capture_output=True)
    assert lacks.returncode != 0, "the system python3 has landlockpy: nothing to test"
    # a user's install (./install.sh as a user) is found in ~/.local/share/confine
    share = tmp_path / "home" / ".local" / "share"
    share.mkdir(parents=True)
    os.symlink(PREFIX, share / "confine")
    p = _gen(tmp_path / "home")
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith(".TH CONFINE 1") and "confine exec" in p.stdout.replace("\\-", "-")


def test_without_an_install_it_says_what_to_do(tmp_path):
    if os.path.exists("/opt/confine/bin/python") or (REPO / ".venv").exists():
        import pytest
        pytest.skip("an install or .venv exists here: the script finds it")
    (tmp_path / "empty").mkdir()
    p = _gen(tmp_path / "empty")
    assert p.returncode == 1 and "run ./install.sh first" in p.stderr, p.stderr
