"""Shared fixtures: the installed confine, an unprivileged account, workdirs.

Tests run real confined processes. `as_user` is parametrized: "root" starts
confine as root (the agent then runs as the workdir's owner, the test
account), "user" starts confine as the unprivileged test account itself.
"""
from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import textwrap

import pytest

TEST_USER = "confine-test"
PREFIX = os.environ.get("CONFINE_TEST_PREFIX", "/opt/confine-test")
CONFINE = os.path.join(PREFIX, "bin", "confine")
PY = "/usr/bin/python3"  # the system python: readable inside the default profile


def _user():
    try:
        return pwd.getpwnam(TEST_USER)
    except KeyError:
        return None


@pytest.fixture(scope="session")
def confine_bin():
    if not os.access(CONFINE, os.X_OK):
        pytest.fail(f"{CONFINE} not installed: run ./test.sh (it installs confine there)")
    return CONFINE


@pytest.fixture(scope="session")
def test_user():
    pw = _user()
    if pw is None:
        pytest.fail(f"account {TEST_USER} missing: run ./test.sh as root (scripts/test-deps.sh)")
    return pw


class Sandbox:
    """Runs `confine exec` as root or as the test account, in a fresh workdir."""

    def __init__(self, mode: str, pw, workdir: str):
        self.mode = mode
        self.pw = pw
        self.workdir = workdir
        self.home = pw.pw_dir

    def cmd(self, args: list[str]) -> list[str]:
        base = [CONFINE] + args
        env = ["env", "-i", f"HOME={self.home}", "PATH=/usr/local/bin:/usr/bin:/bin",
               "LANG=C.UTF-8", f"USER={self.pw.pw_name}"]
        if self.mode == "user":
            return ["setpriv", f"--reuid={self.pw.pw_uid}", f"--regid={self.pw.pw_gid}",
                    "--clear-groups", "--"] + env + base
        return env[:2] + ["HOME=/root", "PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8",
                          "USER=root"] + base

    def run(self, cmd: list[str], *opts: str, input=None, timeout=60, cwd=None, env_extra=()):
        full = self.cmd(["exec", "-w", self.workdir, *opts, "--", *cmd])
        if env_extra:
            i = full.index(CONFINE)
            full = full[:i] + list(env_extra) + full[i:]
        return subprocess.run(full, input=input, capture_output=True, text=True,
                              timeout=timeout, cwd=cwd or self.workdir)

    def confine(self, *args: str, timeout=60, cwd=None):
        return subprocess.run(self.cmd(list(args)), capture_output=True, text=True,
                              timeout=timeout, cwd=cwd or self.workdir)

    def py(self, code: str, *opts: str, timeout=60):
        """Run python code inside; it must print one JSON line; returns (proc, data)."""
        p = self.run([PY, "-c", textwrap.dedent(code)], *opts, timeout=timeout)
        data = None
        for line in reversed(p.stdout.splitlines()):
            if line.startswith("{"):
                data = json.loads(line)
                break
        return p, data


def make_workdir(pw) -> str:
    d = tempfile.mkdtemp(prefix="confine-wd-", dir="/tmp")
    os.chmod(d, 0o755)
    if os.geteuid() == 0:
        os.chown(d, pw.pw_uid, pw.pw_gid)
    return d


@pytest.fixture(params=["root", "user"])
def sandbox(request, confine_bin, test_user):
    if request.param == "root" and os.geteuid() != 0:
        pytest.skip("needs root")
    if request.param == "user" and os.geteuid() != 0:
        pytest.skip("needs root to switch to the test account")
    wd = make_workdir(test_user)
    yield Sandbox(request.param, test_user, wd)
    shutil.rmtree(wd, ignore_errors=True)


@pytest.fixture
def root_sandbox(confine_bin, test_user):
    if os.geteuid() != 0:
        pytest.skip("needs root")
    wd = make_workdir(test_user)
    yield Sandbox("root", test_user, wd)
    shutil.rmtree(wd, ignore_errors=True)


@pytest.fixture(scope="session")
def planted_home(test_user):
    """Secrets and dotfiles in the test account's real home (created, never the
    machine's own)."""
    home = test_user.pw_dir
    files = {
        ".ssh/id_rsa": "-----BEGIN FAKE KEY-----\n",
        ".aws/credentials": "[default]\naws_secret_access_key=fake\n",
        ".bashrc": "# test bashrc\n",
        ".gitconfig": "[user]\n\tname = Confine Test\n\temail = test@example.invalid\n",
        ".netrc": "machine example.invalid login x password y\n",
        "notes.txt": "private notes\n",
    }
    for rel, text in files.items():
        p = os.path.join(home, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w") as f:
            f.write(text)
        os.chmod(p, 0o600)
    for dirpath, dirnames, filenames in os.walk(home):
        for n in dirnames + filenames:
            os.lchown(os.path.join(dirpath, n), test_user.pw_uid, test_user.pw_gid)
    return home
