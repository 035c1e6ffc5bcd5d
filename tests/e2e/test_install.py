"""install.sh installs into a prefix and --uninstall removes exactly that."""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import NamedTuple

import background
import pytest

REPO = Path(__file__).resolve().parents[2]
# A shebang line holds at most 127 bytes: this prefix's launcher cannot carry "-IS".
LONG = "p" * 100


class Install(NamedTuple):
    src: Path
    prefix: Path
    env: dict[str, str]
    job: background.Job
    log: Path

    def wait(self) -> str:
        """install.sh's exit checked; its stderr."""
        rc = self.job.wait(timeout=300)
        err = (self.log / "stderr").read_text()
        assert rc == 0, err
        return err


_installs: dict[str, Install] = {}
_top: list[str] = []
# each test's install: the prefix below a directory of the test's own
PREFIXES = {"test_install_then_uninstall": ("short", "venv"),
            "test_a_prefix_too_long_for_a_shebang_keeps_pips_launcher": ("long", f"{LONG}/venv")}


def _start(test: str) -> Install:
    """install.sh run from a copy of the checkout of its own: pip builds a local project
    in its source tree (build/, *.egg-info), and two builds in one tree could mix their
    files."""
    name, rel = PREFIXES[test]
    if name in _installs:
        return _installs[name]
    if not _top:
        _top.append(tempfile.mkdtemp(prefix="confine-install-test-"))
    base = Path(_top[0]) / name
    src = base / "src"
    shutil.copytree(REPO, src, symlinks=True, ignore=shutil.ignore_patterns(
        ".git", "build", "*.egg-info", ".venv", "__pycache__"))
    prefix = base / rel
    env = dict(os.environ, CONFINE_PREFIX=str(prefix), CONFINE_NO_LINK="1")

    def start() -> subprocess.Popen:
        with open(base / "stdout", "w") as o, open(base / "stderr", "w") as e:
            return subprocess.Popen(background.low([str(src / "install.sh")]), env=env,
                                    stdout=o, stderr=e,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
    _installs[name] = Install(src, prefix, env, background.submit(background.Job(start)), base)
    return _installs[name]


def start_early(items) -> None:
    """The selected tests' installs, submitted at the end of collection (tests/conftest.py)
    to run in the background (tests/background.py): each is a venv and two pip runs,
    about 20 s of one core, and nothing needs them before these tests."""
    for item in items:
        if item.originalname in PREFIXES:
            _start(item.originalname)


def stop_early() -> None:
    for i in _installs.values():
        background.drop(i.job)
    _installs.clear()
    for top in _top:
        shutil.rmtree(top, ignore_errors=True)
    _top.clear()


@pytest.fixture
def install(request):
    """This test's install.sh run, finished and checked (started by start_early where
    collection did that)."""
    inst = _start(request.node.originalname)
    inst.wait()
    return inst


@pytest.fixture(scope="module", autouse=True)
def _installs_end():
    yield
    stop_early()


def test_install_then_uninstall(install, tmp_path):
    prefix, env = install.prefix, install.env
    assert (prefix / "bin" / "confine").exists()
    v = subprocess.run([str(prefix / "bin" / "confine"), "--version"], capture_output=True,
                       text=True)
    assert v.returncode == 0 and "confine" in v.stdout
    _launcher_is_isolated(prefix, tmp_path)
    p = subprocess.run([str(install.src / "install.sh"), "--uninstall"], env=env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert not prefix.exists()
    again = subprocess.run([str(install.src / "install.sh"), "--uninstall"], env=env,
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


def test_a_prefix_too_long_for_a_shebang_keeps_pips_launcher(install):
    script = install.prefix / "bin" / "confine"
    assert len(f"#!{install.prefix}/bin/python -IS") > 127
    assert "-IS" not in script.read_text().splitlines()[0]
    v = subprocess.run([str(script), "--version"], capture_output=True, text=True)
    assert v.returncode == 0 and "confine" in v.stdout
