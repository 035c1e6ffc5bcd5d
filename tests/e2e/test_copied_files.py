"""A file of HOME given as a copy (`filesystem.copied:`, policy/copied.py,
protect/copied.py) with plain shell commands: the agent saves it by a temporary file
beside it renamed over it (as Claude Code saves ~/.claude.json) with no refusal, the
real file gets the change after exit, and the keys that run later (MCP servers,
top level and per project) are put back, with an alert and exit 123, while the other
changes land. A real file changed outside during the run is never clobbered, a copy
that is not JSON is never written back, and a fresh HOME gets the file created.

Controls: the same save run outside confine on a copy (every write succeeds there and
keeps what the agent wrote), and a run whose save touches no protected key (exit 0,
written back as is). Root with --user and unprivileged (`sandbox`).
"""
from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import time

import pytest

KEYS = ["mcpServers", "projects.*.mcpServers"]
START = {"numStartups": 1, "projects": {"/p": {"mcpServers": {}, "history": []}}}
SAVE = r"""
f="$HOME/$1"
[ -f "$f" ] && [ ! -L "$f" ]; echo "regular $?"
printf '%s' "$2" > "$f.tmp.$$.1" && mv "$f.tmp.$$.1" "$f"; echo "save $?"
"""
PLANT = {"numStartups": 2, "mcpServers": {"x": {"command": "/tmp/evil"}},
         "projects": {"/p": {"mcpServers": {"y": {"command": "/tmp/evil"}}, "history": [1]}}}
CLEAN = {"numStartups": 2, "projects": {"/p": {"mcpServers": {}, "history": [1]}}}


@pytest.fixture
def copied(sandbox):
    """(name in HOME, real path, profile path): a file of the test account's HOME
    named for this test alone (other runs use the account's HOME at the same time)."""
    name = f".confine-copied-{secrets.token_hex(4)}.json"
    real = os.path.join(sandbox.agent.pw_dir, name)
    prof = sandbox.workdir + "-copied.yaml"
    with open(prof, "w") as f:
        f.write("extends: default\nfilesystem:\n  copied:\n"
                f"    - path: ?~/{name}\n      protected_keys: {json.dumps(KEYS)}\n")
    os.chmod(prof, 0o644)
    yield name, real, prof
    for p in (real, prof):
        if os.path.lexists(p):
            os.unlink(p)


def _put(sb, path: str, doc: object, mode: int = 0o640) -> None:
    with open(path, "w") as f:
        json.dump(doc, f)
    os.chmod(path, mode)
    os.chown(path, sb.agent.pw_uid, sb.agent.pw_gid)


def _statuses(out: str) -> dict[str, str]:
    return dict(ln.split() for ln in out.splitlines() if len(ln.split()) == 2)


def _load(path: str) -> object:
    with open(path) as f:
        return json.load(f)


def test_save_by_rename_written_back(sandbox, copied):
    name, real, prof = copied
    _put(sandbox, real, START)
    p = sandbox.run(["sh", "-c", SAVE, "sh", name, json.dumps(CLEAN)], "-p", prof)
    said = p.stdout + p.stderr
    got = _statuses(p.stdout)
    assert got == {"regular": "0", "save": "0"}, said
    assert p.returncode == 0, said
    assert "denied" not in p.stderr, said
    assert _load(real) == CLEAN, said
    st = os.stat(real)
    assert (st.st_uid, st.st_mode & 0o777) == (sandbox.agent.pw_uid, 0o640), said


def test_run_later_keys_dropped_other_changes_land(sandbox, copied, outside_dir):
    name, real, prof = copied
    _put(sandbox, real, START)
    # control: outside, the same save keeps what was written, servers included
    ctl = os.path.join(outside_dir, name)
    _put(sandbox, ctl, START)
    c = sandbox.outside(["sh", "-c", SAVE.replace("$HOME", outside_dir), "sh", name,
                         json.dumps(PLANT)])
    assert _statuses(c.stdout) == {"regular": "0", "save": "0"}, c.stderr
    assert _load(ctl) == PLANT
    log = os.path.join(outside_dir, "run.jsonl")
    p = sandbox.run(["sh", "-c", SAVE, "sh", name, json.dumps(PLANT)], "-p", prof,
                    "--log", log)
    said = p.stdout + p.stderr
    assert _statuses(p.stdout) == {"regular": "0", "save": "0"}, said
    assert p.returncode == 123, said
    assert "mcpServers" in p.stderr and "projects./p.mcpServers" in p.stderr, said
    assert _load(real) == CLEAN, said
    with open(log) as f:     # the decision is in the run's record too
        said_there = [e for e in map(json.loads, f) if e.get("path") == real]
    assert [(e["action"], e["alert"]) for e in said_there] == [("sanitized", True)], said_there


def test_real_file_changed_outside_not_clobbered(sandbox, copied):
    name, real, prof = copied
    _put(sandbox, real, START)
    go, saved = (os.path.join(sandbox.workdir, n) for n in ("go", "saved"))
    script = SAVE + ': > "$4"\nwhile [ ! -e "$3" ]; do sleep 0.05; done\n'
    proc = sandbox.popen(["sh", "-c", script, "sh", name, json.dumps(CLEAN), go, saved],
                         "-p", prof, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not os.path.exists(saved):
            time.sleep(0.05)
        mine = {"numStartups": 7}
        _put(sandbox, real, mine)      # the person's own Claude Code, meanwhile
        with open(go, "w"):
            pass
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    said = out + err
    assert _statuses(out) == {"regular": "0", "save": "0"}, said
    assert proc.returncode == 0, said     # the person's edit, not the agent's: said, no alert
    assert _load(real) == mine, said
    m = re.search(r"changed during the run.*kept at (\S+)", err)
    assert m, said
    assert _load(m.group(1)) == CLEAN, said


def test_invalid_json_not_written_back(sandbox, copied):
    name, real, prof = copied
    _put(sandbox, real, START)
    p = sandbox.run(["sh", "-c", SAVE, "sh", name, '{"numStartups": 2,'], "-p", prof)
    said = p.stdout + p.stderr
    assert _statuses(p.stdout) == {"regular": "0", "save": "0"}, said
    assert p.returncode == 123, said
    assert "not valid JSON" in p.stderr, said
    assert _load(real) == START, said


def test_fresh_home_file_created_without_servers(sandbox, copied):
    name, real, prof = copied
    assert not os.path.lexists(real)
    plant = {"k": 1, "mcpServers": {"x": {"command": "/tmp/evil"}}}
    p = sandbox.run(["sh", "-c", SAVE, "sh", name, json.dumps(plant)], "-p", prof)
    said = p.stdout + p.stderr
    assert _statuses(p.stdout) == {"regular": "1", "save": "0"}, said
    assert p.returncode == 123, said
    assert _load(real) == {"k": 1}, said
    st = os.stat(real)
    assert (st.st_uid, st.st_mode & 0o777) == (sandbox.agent.pw_uid, 0o600), said
