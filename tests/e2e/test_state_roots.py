"""An agent's state directory (`filesystem.state_roots:`, policy/stateroots.py) with plain
shell commands: any new name may be made there (a new release's state just works),
while the names the profile lists as running later are refused at the call, and one
that existed at start stays as it was; a file saved by temp-file-and-rename works.

Each refusal has its control: the same script run outside confine on a copy of the
directory, where every attempt succeeds. As root with --user and unprivileged
(`sandbox`), with all layers and with Landlock and seccomp alone (no mount namespace:
the name guard, by name and by inode, is what refuses).
"""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest

# Each attempt prints its name and exit status.
ATTEMPTS = r"""
cd "$1"
echo db > new-state.db; echo "new $?"
mkdir sessions && echo s > sessions/one.jsonl; echo "newdir $?"
echo '{"n": 2}' > state.json.tmp.1 && mv state.json.tmp.1 state.json; echo "save $?"
echo '{"hooks": 1}' > settings.json; echo "settings $?"
echo '{"hooks": 1}' > settings.local.json; echo "settingsglob $?"
echo '{"hooks": 1}' > settings.json.tmp.1 && mv settings.json.tmp.1 settings.json; echo "settingsmv $?"
echo x > agents.sh && chmod +x agents.sh; echo "script $?"
echo evil >> CLAUDE.md; echo "existing $?"
echo '{"hooks": 1}' > CLAUDE.md.tmp && mv CLAUDE.md.tmp CLAUDE.md; echo "existingmv $?"
"""
REFUSED = ("settingsmv", "script", "existing", "existingmv")
# a new protected file written in place is held (protect/held.py): the agent's write
# succeeds, outside the state directory, and the person is told
HELD = ("settings.json", "settings.local.json")


def _profile(path: str, state: str) -> None:
    with open(path, "w") as f:
        f.write("extends: default\nfilesystem:\n  state_roots:\n"
                f"    - path: {state}\n"
                "      protected: [/settings*.json, /hooks/, /CLAUDE.md, /*.sh]\n")
    os.chmod(path, 0o644)


def _state(sb, top: str) -> str:
    d = os.path.join(top, "agent-state")
    os.mkdir(d, 0o700)
    for name, text in (("state.json", '{"n": 1}'), ("CLAUDE.md", "be careful\n")):
        with open(os.path.join(d, name), "w") as f:
            f.write(text)
    subprocess.run(["chown", "-R", f"{sb.agent.pw_uid}:{sb.agent.pw_gid}", d], check=True)
    return d


def _statuses(out: str) -> dict[str, str]:
    return dict(ln.split() for ln in out.splitlines() if len(ln.split()) == 2)


@pytest.mark.parametrize("layers", ["all", "landlock"])
def test_state_root_new_names_work_run_later_names_do_not(sandbox, outside_dir, layers):
    if layers == "landlock":
        sandbox = sandbox.without_namespaces()
    state = _state(sandbox, outside_dir)
    control = os.path.join(outside_dir, "control")
    shutil.copytree(state, control, symlinks=True)
    subprocess.run(["chown", "-R", f"{sandbox.agent.pw_uid}:{sandbox.agent.pw_gid}", control],
                   check=True)
    prof = sandbox.workdir + "-state.yaml"
    _profile(prof, state)
    try:
        p = sandbox.run(["sh", "-c", ATTEMPTS, "sh", state], "-p", prof)
    finally:
        os.unlink(prof)
    got = _statuses(p.stdout)
    said = p.stdout + p.stderr
    # positive controls: new names, a new directory, a save by rename onto a state file
    assert got.get("new") == "0" and got.get("newdir") == "0" and got.get("save") == "0", said
    with open(os.path.join(state, "state.json")) as f:
        assert f.read() == '{"n": 2}\n', said
    assert os.path.isfile(os.path.join(state, "sessions", "one.jsonl")), said
    # the run-later names: refused at the call or held, none there afterwards
    for k in REFUSED:
        assert got.get(k) not in (None, "0"), (k, said)
    for name in HELD:
        assert f"held {state}/{name}" in p.stderr, (name, said)
    for name in HELD + ("agents.sh",):
        assert not os.path.exists(os.path.join(state, name)), (name, said)
    with open(os.path.join(state, "CLAUDE.md")) as f:
        assert f.read() == "be careful\n", said
    assert "confine: denied" in p.stderr, said
    # control: outside confine the very same script succeeds in every attempt
    out = sandbox.outside(["sh", "-c", ATTEMPTS, "sh", control])
    assert set(_statuses(out.stdout).values()) == {"0"}, out.stdout + out.stderr
    assert os.path.exists(os.path.join(control, "settings.json"))


def test_private_tmp_name_is_the_runs_own(sandbox):
    """`filesystem.private_tmp:` (policy/privatetmp.py): the agent writes and listens in
    /tmp/NAME-UID, a directory of its run; the host's stays empty. Control: without the
    key the same write is refused (the host's /tmp is read-only)."""
    uid = sandbox.agent.pw_uid
    name = f"confine-pt-{os.path.basename(sandbox.workdir)}"
    host = f"/tmp/{name}-{uid}"
    prof = sandbox.workdir + "-pt.yaml"
    script = (f'echo x > "{host}/lock" && cat "{host}/lock"; echo "write $?"; '
              f'python3 -c "import socket; s = socket.socket(socket.AF_UNIX); '
              f's.bind(\'{host}/s\'); s.listen(1); c = socket.socket(socket.AF_UNIX); '
              f'c.connect(\'{host}/s\')"; echo "sock $?"')
    try:
        with open(prof, "w") as f:
            f.write(f"extends: default\nfilesystem:\n  private_tmp: ['{name}-{{uid}}']\n")
        os.chmod(prof, 0o644)
        p = sandbox.run(["sh", "-c", script], "-p", prof)
        assert "write 0" in p.stdout and "sock 0" in p.stdout, p.stdout + p.stderr
        assert os.path.isdir(host) and os.listdir(host) == [], p.stderr
        assert os.stat(host).st_uid == uid
        c = sandbox.run(["sh", "-c", script])        # control: no private_tmp
        assert "write 0" not in c.stdout, c.stdout + c.stderr
        assert os.listdir(host) == []
    finally:
        os.unlink(prof)
        shutil.rmtree(host, ignore_errors=True)
