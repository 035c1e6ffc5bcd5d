"""Every example in the README runs as written (issue 23 item 6).

- The first screen (the ```console block): each `$ CMD  # WHAT HAPPENS` line is run
  inside `confine exec -- bash -c CMD`, as the unprivileged account and as root with the
  agent's account, and must do what its comment says: the error text the shell prints,
  "works", or the word it echoes. `/home/me` stands for the agent's real home. Controls:
  the same reads and writes outside succeed.
- Every ```sh block: each line is run by bash as the unprivileged account in a scratch
  directory, with `confine` on PATH; none may be a usage error (2), confine's own error
  (125), not executable (126) or not found (127). The ```yaml block is the file the sh
  block validates (`myprofile.yaml`).
- The ```python block runs with the install's Python, /srv/agent/repo replaced by a
  scratch workdir.
```text blocks (install, interactive agents, sample output) are not run.
"""
from __future__ import annotations

import os
import pwd
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from conftest import CONFINE, PREFIX

REPO = Path(__file__).resolve().parents[2]
TEXT = (REPO / "README.md").read_text()


def blocks(lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", TEXT, re.M | re.S)


def test_the_readme_is_an_entrance():
    assert len(TEXT.splitlines()) <= 350
    # every page it links to exists
    for link in re.findall(r"\]\(([^)#]+)\)", TEXT):
        if "://" not in link:
            assert (REPO / link).exists(), link


def _commands(block: str) -> list[tuple[str, str]]:
    out = []
    for line in block.splitlines():
        if not line.startswith("$ "):
            continue
        cmd, _, want = line[2:].partition("  # ")
        out.append((cmd.strip(), want.strip()))
    return out


def test_first_screen(sandbox):
    cmds = _commands(blocks("console")[0])
    assert cmds[0][0].startswith("cd ") and cmds[1][0] == "confine exec -- bash", cmds[:2]
    home = sandbox.home
    agent = sandbox.agent
    ssh = os.path.join(home, ".ssh")
    os.makedirs(ssh, exist_ok=True)
    with open(os.path.join(ssh, "id_rsa"), "w") as f:
        f.write("not a real key\n")
    for p in (ssh, os.path.join(ssh, "id_rsa")):
        os.chown(p, agent.pw_uid, agent.pw_gid)
    # controls: outside, the agent's account may read its key and write its .bashrc
    assert sandbox.outside(["cat", f"{ssh}/id_rsa"]).returncode == 0
    assert sandbox.outside(["test", "-w", f"{home}/.bashrc"]).returncode == 0
    for cmd, want in cmds[2:]:
        cmd = cmd.replace("/home/me", home)
        p = sandbox.run(["/bin/bash", "-c", cmd])
        said = p.stdout + p.stderr
        if want.startswith("works"):
            assert p.returncode == 0, (cmd, said)
            if "held" in want:
                assert "confine: held" in p.stderr, (cmd, said)
                assert not os.path.lexists(os.path.join(sandbox.workdir, ".envrc"))
        elif want == "committed":
            assert p.returncode == 0 and "committed" in p.stdout, (cmd, said)
        else:
            needle = re.split(r"\s{2,}", want)[0]
            assert p.returncode != 0 and needle in p.stderr, (cmd, want, said)
    # what was refused inside was not done
    with open(f"{home}/.bashrc") as f:
        assert not f.read().endswith("\nx\n")


@pytest.fixture
def scratch(test_user, confine_bin):
    d = tempfile.mkdtemp(prefix="confine-readme-")
    os.chmod(d, 0o755)
    bindir = os.path.join(d, "bin")
    os.mkdir(bindir)
    os.symlink(CONFINE, os.path.join(bindir, "confine"))
    wd = os.path.join(d, "work")
    os.mkdir(wd)
    os.chown(wd, test_user.pw_uid, test_user.pw_gid)
    yield d, bindir, wd
    shutil.rmtree(d, ignore_errors=True)
    log = os.path.join(test_user.pw_dir, "confine-run.log")
    if os.path.exists(log):
        os.unlink(log)


def _as_user(pw: pwd.struct_passwd, argv: list[str], cwd: str, path: str,
             timeout: int = 180) -> subprocess.CompletedProcess:
    env = ["env", "-i", f"HOME={pw.pw_dir}", f"PATH={path}", "LANG=C.UTF-8",
           f"USER={pw.pw_name}", "CONFINE_AUDIT_METADATA=127.0.0.1:1"]
    return subprocess.run(["setpriv", f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}",
                           "--clear-groups", "--", *env, *argv], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)


def test_every_sh_example_runs(test_user, scratch):
    _, bindir, wd = scratch
    profile = blocks("yaml")[0]
    with open(os.path.join(wd, "myprofile.yaml"), "w") as f:
        f.write(profile)
    path = f"{bindir}:/usr/local/bin:/usr/bin:/bin"
    ran = 0
    for block in blocks("sh"):
        for line in block.splitlines():
            cmd = re.sub(r"\s+#\s.*$", "", line).strip()
            if not cmd:
                continue
            p = _as_user(test_user, ["/bin/bash", "-c", cmd], wd, path)
            assert p.returncode not in (2, 125, 126, 127), (cmd, p.returncode, p.stderr[-2000:])
            assert "Usage:" not in p.stderr, (cmd, p.stderr)
            if not cmd.startswith(("confine check", "confine probe", "confine audit")):
                assert p.returncode == 0, (cmd, p.returncode, p.stderr[-2000:])
            ran += 1
    assert ran >= 10
    # what the examples say they make is there
    assert os.path.exists(os.path.join(wd, "apparmor-out", "confine-default"))
    assert os.path.getsize(os.path.join(wd, "seccomp.json")) > 0


def test_the_python_example_runs(test_user, scratch):
    _, _, wd = scratch
    code = blocks("python")[0].replace("/srv/agent/repo", wd)
    p = _as_user(test_user, [os.path.join(PREFIX, "bin", "python"), "-c", code], wd,
                 "/usr/local/bin:/usr/bin:/bin")
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("0 b'"), p.stdout
