"""install.sh and Ubuntu's user-namespace restriction (issue 12 item 2): the
launcher's AppArmor profile (`userns,` for the installed confine, nothing else)
parses, the restriction is detected, and an unprivileged install prints the one
command that loads the profile. Loading itself needs an AppArmor kernel (not here)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
INSTALL = str(REPO / "install.sh")


def _run(*args: str, env_extra: dict | None = None, user=None) -> subprocess.CompletedProcess:
    env = dict(os.environ, **(env_extra or {}))
    cmd = [INSTALL, *args]
    if user is not None:
        cmd = ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups",
               "--", "env", f"HOME={user.pw_dir}", *[f"{k}={v}" for k, v in
                                                    (env_extra or {}).items()], *cmd]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=30)


def test_profile_names_the_installed_launcher_and_parses(tmp_path):
    prefix = "/opt/confine-x y"                       # odd prefix: the name stays one word
    p = _run("--apparmor-profile", env_extra={"CONFINE_PREFIX": prefix})
    assert p.returncode == 0, p.stderr
    text = p.stdout
    m = re.search(r"^profile (\S+) (.+) flags=\(unconfined\) \{$", text, re.M)
    assert m and m.group(2) == f"{prefix}/bin/confine", text
    assert re.fullmatch(r"[A-Za-z0-9_]+", m.group(1)), m.group(1)
    assert "\n  userns,\n" in text and "abi <abi/4.0>," in text
    default = _run("--apparmor-profile", env_extra={"CONFINE_PREFIX": "/opt/confine"}).stdout
    assert "profile confine /opt/confine/bin/confine " in default
    parser = shutil.which("apparmor_parser")
    if parser is None:
        pytest.skip("apparmor_parser not installed")
    version = subprocess.run([parser, "--version"], capture_output=True, text=True).stdout
    major = int(re.search(r"version (\d+)", version).group(1))
    if major < 4:
        # abi 4.0 and the userns rule are AppArmor 4 (Ubuntu 24.04); the rest must parse
        text = text.replace("abi <abi/4.0>,", "").replace("  userns,\n", "")
    prof = tmp_path / "confine.aa"
    prof.write_text(text.replace(prefix, "/opt/confine-x_y"))
    check = subprocess.run([parser, "-QT", str(prof)], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    prof.write_text(text.replace("flags=(unconfined) {", "flags=(unconfined) {\n  bogus rule,"))
    bad = subprocess.run([parser, "-QT", str(prof)], capture_output=True, text=True)
    assert bad.returncode != 0                         # control: the parser does judge it


@pytest.mark.parametrize("value, prints", [("1", True), ("0", False), (None, False)])
def test_restriction_detected_and_the_command_printed(test_user, value, prints):
    d = tempfile.mkdtemp(prefix="confine-aa-")
    try:
        sysctl = os.path.join(d, "apparmor_restrict_unprivileged_userns")
        if value is not None:
            with open(sysctl, "w") as f:
                f.write(value + "\n")
        os.chmod(d, 0o755)
        p = _run("--apparmor-check", user=test_user,
                 env_extra={"CONFINE_TEST_USERNS_SYSCTL": sysctl,
                            "CONFINE_PREFIX": "/home/x/.local/share/confine"})
        assert p.returncode == 0, p.stderr
        cmd = f"sudo CONFINE_PREFIX=/home/x/.local/share/confine {INSTALL} --apparmor"
        assert (cmd in p.stdout) is prints, p.stdout
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_apparmor_load_needs_root(test_user):
    p = _run("--apparmor", user=test_user)
    assert p.returncode == 1 and "needs root" in p.stderr, p.stderr
