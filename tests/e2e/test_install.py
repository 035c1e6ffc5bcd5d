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
    _launcher_is_isolated(prefix, tmp_path)
    p = subprocess.run([str(REPO / "install.sh"), "--uninstall"], env=env, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert not prefix.exists()
    again = subprocess.run([str(REPO / "install.sh"), "--uninstall"], env=env,
                           capture_output=True, text=True, timeout=60)
    assert again.returncode == 1 and "no confine installation" in again.stderr


def _launcher_is_isolated(prefix: Path, tmp_path: Path) -> None:
    """The launcher starts with -I -S and still finds its own packages: a PYTHONPATH
    holding another `confine` is not imported (it is, by the venv's python: the control)."""
    script = prefix / "bin" / "confine"
    assert script.read_text().splitlines()[0] == f"#!{prefix}/bin/python -IS"
    fake = tmp_path / "fake"
    (fake / "confine").mkdir(parents=True)
    (fake / "confine" / "__init__.py").write_text("raise SystemExit('fake confine imported')\n")
    env = dict(os.environ, PYTHONPATH=str(fake))
    control = subprocess.run([str(prefix / "bin" / "python"), "-c", "import confine"], env=env,
                             capture_output=True, text=True, cwd=tmp_path)
    assert "fake confine imported" in control.stderr
    dry = subprocess.run([str(script), "exec", "--dry-run", "--user", "root", "--", "/bin/true"], env=env,
                         capture_output=True, text=True, timeout=60, cwd=fake)
    assert dry.returncode == 0, dry.stderr
    assert "profile:  default" in dry.stdout and "fake" not in dry.stderr


def test_a_prefix_too_long_for_a_shebang_keeps_pips_launcher(tmp_path):
    prefix = tmp_path / ("p" * 100) / "venv"
    env = dict(os.environ, CONFINE_PREFIX=str(prefix), CONFINE_NO_LINK="1")
    p = subprocess.run([str(REPO / "install.sh")], env=env, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    script = prefix / "bin" / "confine"
    assert "-IS" not in script.read_text().splitlines()[0]
    v = subprocess.run([str(script), "--version"], capture_output=True, text=True)
    assert v.returncode == 0 and "confine" in v.stdout
