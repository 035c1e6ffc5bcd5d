"""Fixtures for the exporter tests: profiles loaded as the exporters load them,
and the external compilers/checkers, which must be present where
scripts/test-deps-export.sh can install them (root on Debian/Ubuntu)."""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from confine.export import source
from confine.policy import load as _load

REPO = Path(__file__).resolve().parents[2]
BUILTIN = tuple(_load.builtin_names())
REFPOLICY = Path(os.environ.get("CONFINE_REFPOLICY_DIR",
                                "/var/cache/confine-test/selinux-policy-default"))


def _installable() -> bool:
    return os.geteuid() == 0 and shutil.which("apt-get") is not None


def need(path_or_tool: str) -> str:
    """The tool's path. Missing: fail where the deps script could have installed
    it (that script did not run), skip elsewhere."""
    found = path_or_tool if os.path.isabs(path_or_tool) else shutil.which(path_or_tool)
    if found and os.path.exists(found):
        return found
    msg = f"{path_or_tool} missing: run scripts/test-deps-export.sh as root"
    if _installable():
        pytest.fail(msg)
    pytest.skip(msg)


@pytest.fixture(scope="session")
def policies():
    return {name: source.load_policy(name) for name in BUILTIN}


@pytest.fixture(scope="session")
def refpolicy() -> Path:
    if not (REFPOLICY / "base.pp").is_file():
        need(str(REFPOLICY / "base.pp"))
    return REFPOLICY


@pytest.fixture
def workdir(test_user):
    """A project in the agent's home: ProtectHome=tmpfs hides it unless bound."""
    base = test_user.pw_dir if os.geteuid() == 0 else os.path.expanduser("~")
    d = tempfile.mkdtemp(prefix="confine-export-", dir=base)
    if os.geteuid() == 0:
        os.chown(d, test_user.pw_uid, test_user.pw_gid)
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)
