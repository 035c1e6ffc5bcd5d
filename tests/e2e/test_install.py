"""install.sh installs into a prefix and --uninstall removes exactly that."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_install_then_uninstall(tmp_path):
    prefix = tmp_path / "venv"
    env = dict(os.environ, CONFINE_PREFIX=str(prefix), CONFINE_NO_LINK="1")
    p = subprocess.run([str(REPO / "install.sh")], env=env, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    assert (prefix / "bin" / "confine").exists()
    v = subprocess.run([str(prefix / "bin" / "confine"), "--version"], capture_output=True,
                       text=True)
    assert v.returncode == 0 and "confine" in v.stdout
    p = subprocess.run([str(REPO / "install.sh"), "--uninstall"], env=env, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert not prefix.exists()
    again = subprocess.run([str(REPO / "install.sh"), "--uninstall"], env=env,
                           capture_output=True, text=True, timeout=60)
    assert again.returncode == 1 and "no confine installation" in again.stderr
