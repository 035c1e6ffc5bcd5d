"""Write grants in HOME: files that run later stay read-only, broad grants are refused.

Issue 10 item 9: `-p claude-code` let the agent add a hook to
~/.claude/settings.json, a command to ~/.claude/commands/ or replace the
`claude` executable under ~/.local/share/claude; `-p codex` the same for
~/.codex/config.toml (notify, MCP servers); `--write ~`, `~/.local`,
`~/.config` and `/etc` were accepted without a word. Each attempt runs in a real
confined process, started as root (agent = the test account) and as the test
account itself, with all layers and with Landlock alone (no mount namespace);
the controls are the agent's own state, written in the same run, and the same
files opened for writing outside.
"""
from __future__ import annotations

import copy
import json
import os
import shutil

import pytest

PLANT = {
    ".claude/settings.json": '{"hooks": {}}\n',
    ".claude/commands/x.md": "say hello\n",
    ".claude/projects/old/s.jsonl": "{}\n",
    ".claude/.credentials.json": "{}\n",
    ".claude.json": "{}\n",
    ".codex/config.toml": "model = 'x'\n",
    ".codex/auth.json": "{}\n",
    ".codex/sessions/2026/s.jsonl": "{}\n",
    ".local/share/claude/versions/1/claude": "#!/bin/sh\necho real claude\n",
}
TOPS = (".claude", ".claude.json", ".codex", ".local/share/claude")
LOGINS = (".claude/.credentials.json", ".codex/auth.json")    # logins: in the profiles


def _without_namespaces(sb, home: str, allowed: dict, login: str, key: str):
    """The landlock layers only: a login file is given as a placeholder copy bound over
    it, which needs a mount namespace; with the file there the run is refused by name
    (checked here), so the rest of the test runs without it."""
    sb = sb.without_namespaces()
    p = sb.run(["true"], "-p", "claude-code" if login.startswith(".claude") else "codex")
    assert p.returncode == 125 and "needs a mount namespace" in p.stderr, p.stderr
    os.unlink(os.path.join(home, login))
    return sb, {k: v for k, v in allowed.items() if k != key}


def _chown_tree(path: str, pw) -> None:
    os.lchown(path, pw.pw_uid, pw.pw_gid)
    for dirpath, dirnames, filenames in os.walk(path):
        for n in dirnames + filenames:
            os.lchown(os.path.join(dirpath, n), pw.pw_uid, pw.pw_gid)


@pytest.fixture
def agent_home(test_user):
    """Claude Code's and Codex's files in the test account's home, as a user who
    ran both once outside has them (removed afterwards)."""
    home = test_user.pw_dir
    made = []
    for d in (".local", ".local/share", ".config"):
        p = os.path.join(home, d)
        if not os.path.isdir(p):
            os.makedirs(p)
            made.append(p)
            os.chown(p, test_user.pw_uid, test_user.pw_gid)
    for t in TOPS:
        p = os.path.join(home, t)
        if os.path.isdir(p):
            shutil.rmtree(p)
        elif os.path.lexists(p):
            os.unlink(p)
    for rel, text in PLANT.items():
        p = os.path.join(home, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w") as f:
            f.write(text)
    os.chmod(os.path.join(home, PLANT_EXE), 0o755)
    for login in LOGINS:
        os.chmod(os.path.join(home, login), 0o600)     # as the agents make them
    for t in TOPS:
        _chown_tree(os.path.join(home, t), test_user)
    yield home
    for t in TOPS:
        p = os.path.join(home, t)
        if os.path.isdir(p):
            shutil.rmtree(p, ignore_errors=True)
        elif os.path.lexists(p):
            os.unlink(p)
    for p in reversed(made):
        shutil.rmtree(p, ignore_errors=True)


PLANT_EXE = ".local/share/claude/versions/1/claude"

# name -> (kind, path relative to HOME[, second path])
CLAUDE_DENIED = {
    "write_settings": ("append", ".claude/settings.json"),
    "truncate_settings": ("trunc", ".claude/settings.json"),
    "create_settings_local": ("create", ".claude/settings.local.json"),
    "rename_over_settings": ("rename", ".claude/projects/old/s.jsonl", ".claude/settings.json"),
    "unlink_settings": ("unlink", ".claude/settings.json"),
    "symlink_settings_local": ("symlink", ".claude/settings.local.json"),
    "write_command": ("append", ".claude/commands/x.md"),
    "create_command": ("create", ".claude/commands/y.md"),
    "rename_commands_away": ("rename", ".claude/commands", ".claude/projects/c"),
    "move_into_commands": ("rename", ".claude/projects/old/s.jsonl", ".claude/commands/z.md"),
    "hardlink_settings": ("link", ".claude/settings.json", ".claude/projects/old/l.json"),
    "through_symlink": ("via_symlink", ".claude/settings.json", ".claude/projects/old/sl"),
    "exchange_settings": ("exchange", ".claude/projects/old/s.jsonl", ".claude/settings.json"),
    "mkdir_hooks": ("mkdir", ".claude/hooks"),
    "mkdir_agents": ("mkdir", ".claude/agents"),
    "new_top_level": ("create", ".claude/statusline.sh"),
    "write_executable": ("append", PLANT_EXE),
    "new_version": ("mkdir", ".local/share/claude/versions/2"),
}
CLAUDE_ALLOWED = {
    "state_transcript": ("mkfile", ".claude/projects/new/s.jsonl"),
    "state_old_transcript": ("append", ".claude/projects/old/s.jsonl"),
    # new names in the state root (policy/stateroots.py): nothing is made before the run
    "state_todos": ("mkfile", ".claude/todos/t.json"),
    "state_statsig": ("mkfile", ".claude/statsig/s"),
    "state_snapshots": ("mkfile", ".claude/shell-snapshots/s.sh"),
    "state_history": ("mkfile", ".claude/history.jsonl"),
    "state_new_release": ("mkfile", ".claude/a-name-of-a-later-release/x.json"),
    "credentials": ("append", ".claude/.credentials.json"),
    "claude_json": ("append", ".claude.json"),
    "read_settings": ("read", ".claude/settings.json"),
    "read_command": ("read", ".claude/commands/x.md"),
    "list_claude": ("list", ".claude"),
}
CODEX_DENIED = {
    "write_config": ("append", ".codex/config.toml"),
    "truncate_config": ("trunc", ".codex/config.toml"),
    "rename_over_config": ("rename", ".codex/sessions/2026/s.jsonl", ".codex/config.toml"),
    "unlink_config": ("unlink", ".codex/config.toml"),
    "new_profile_config": ("create", ".codex/evil.config.toml"),
    "hardlink_config": ("link", ".codex/config.toml", ".codex/sessions/2026/c.toml"),
    "mkdir_rules": ("mkdir", ".codex/rules"),
    "agents_md": ("create", ".codex/AGENTS.md"),
}
CODEX_ALLOWED = {
    "auth_refresh": ("append", ".codex/auth.json"),
    "session": ("mkfile", ".codex/sessions/2026/t.jsonl"),
    "log": ("mkfile", ".codex/log/codex-tui.log"),
    "history": ("mkfile", ".codex/history.jsonl"),
    "sqlite": ("mkfile", ".codex/state_9.sqlite"),
    "read_config": ("read", ".codex/config.toml"),
}

BODY = r'''
H = os.environ["HOME"]
def act(kind, a, b=None):
    a = os.path.join(H, a)
    b = os.path.join(H, b) if b else None
    if kind == "append":
        opened(a, os.O_WRONLY | os.O_APPEND)
    elif kind == "trunc":
        opened(a, os.O_WRONLY | os.O_TRUNC)
    elif kind in ("create", "mkfile"):
        if kind == "mkfile":
            os.makedirs(os.path.dirname(a), exist_ok=True)
        opened(a, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    elif kind == "rename":
        os.rename(a, b)
    elif kind == "unlink":
        os.unlink(a)
    elif kind == "link":
        os.link(a, b)
    elif kind == "via_symlink":
        if not os.path.islink(b):
            os.symlink(a, b)
        opened(b, os.O_WRONLY | os.O_APPEND)
    elif kind == "exchange":
        AT_FDCWD, RENAME_EXCHANGE = -100, 2
        ctypes.set_errno(0)
        if libc.renameat2(AT_FDCWD, a.encode(), AT_FDCWD, b.encode(), RENAME_EXCHANGE) != 0:
            raise OSError(ctypes.get_errno(), "renameat2")
    elif kind == "symlink":
        os.symlink("/tmp/x", a)
    elif kind == "mkdir":
        os.mkdir(a)
    elif kind == "read":
        read_file(a)
    elif kind == "list":
        os.listdir(a)
for name, spec in P["acts"].items():
    attempt(name, lambda spec=spec: act(*spec))
'''

# EXDEV: a rename across the bind mounts, or Landlock refusing the REFER right
DENIED = {"EACCES", "EROFS", "EPERM", "EXDEV"}
# In a state root (the agent profiles' ~/.claude and ~/.codex, policy/stateroots.py)
# the names are protected as the workdir's are: a new one made in place is held
# (the call succeeds, the name is kept elsewhere), a bound one gives EBUSY, and without
# a mount namespace a removal or rename away is reverted by the exit check. What
# counts is that nothing of the agent's is in place afterwards (checked below).
IN_STATE_ROOT = DENIED | {"EBUSY", "ok"}
HELD_OR_DENIED = {"create", "mkdir", "unlink", "rename"}


def _check(sb, profile, denied, allowed, home):
    before = {rel: open(os.path.join(home, rel), "rb").read() for rel in PLANT
              if os.path.exists(os.path.join(home, rel))}
    # reads first: without a mount namespace a removal below succeeds until the exit check
    acts = {**{k: v for k, v in allowed.items() if v[0] in ("read", "list")}, **denied,
            **allowed}
    p, r = sb.probe(BODY, {"acts": acts}, "-p", profile)
    assert r is not None, p.stderr
    for name in denied:
        kind, path = denied[name][0], denied[name][-1]
        in_root = path.startswith((".claude/", ".codex/"))
        # without a mount namespace an earlier removal or rename away succeeded (the
        # exit check puts it back): a later attempt on it finds nothing
        ok = DENIED
        if in_root:
            ok = (IN_STATE_ROOT if kind in HELD_OR_DENIED | {"link", "via_symlink", "exchange",
                                                         "symlink"} else DENIED) | {"ENOENT"}
        assert r[name] in ok, (name, r[name], p.stderr)
    for name in allowed:
        assert r[name] == "ok", (name, r[name], p.stderr)
    for rel in ("settings.json", "commands/x.md"):
        if profile == "claude-code":
            assert open(os.path.join(home, ".claude", rel), "rb").read() == before[".claude/" + rel]
    assert open(os.path.join(home, PLANT_EXE), "rb").read() == before[PLANT_EXE]
    assert open(os.path.join(home, ".codex/config.toml"), "rb").read() \
        == before[".codex/config.toml"]
    for path in ("settings.local.json", "hooks", "agents", "commands/y.md", "statusline.sh"):
        assert not os.path.lexists(os.path.join(home, ".claude", path))
    for path in ("evil.config.toml", "rules", "AGENTS.md"):
        assert not os.path.lexists(os.path.join(home, ".codex", path))
    assert os.path.isdir(os.path.join(home, ".claude", "commands"))


def _outside_control(sb, home, denied):
    """The same files are the agent identity's own: opening them for writing (and
    creating the missing names) works outside, so only confine refuses it."""
    acts = {k: v for k, v in denied.items() if v[0] in ("append", "create", "mkdir", "link")}
    body = BODY + r'''
for name, (kind, a, *rest) in P["acts"].items():
    p = os.path.join(H, a)
    if R.get(name) == "ok" and kind == "create":
        os.unlink(p)
    elif R.get(name) == "ok" and kind == "mkdir":
        os.rmdir(p)
    elif R.get(name) == "ok" and kind == "link":
        os.unlink(os.path.join(H, rest[0]))
'''
    _, r = sb.outside_probe(body, {"acts": acts})
    assert r is not None
    for name in acts:
        assert r[name] == "ok", (name, r[name])


@pytest.mark.parametrize("layers", ["all", "landlock"])
def test_claude_code_hooks_commands_executables_read_only(sandbox, agent_home, layers):
    sb, allowed = (sandbox, CLAUDE_ALLOWED) if layers == "all" else _without_namespaces(
        sandbox, agent_home, CLAUDE_ALLOWED, LOGINS[0], "credentials")
    _outside_control(sb, agent_home, CLAUDE_DENIED)
    _check(sb, "claude-code", CLAUDE_DENIED, allowed, agent_home)


@pytest.mark.parametrize("layers", ["all", "landlock"])
def test_codex_config_read_only(sandbox, agent_home, layers):
    sb, allowed = (sandbox, CODEX_ALLOWED) if layers == "all" else _without_namespaces(
        sandbox, agent_home, CODEX_ALLOWED, LOGINS[1], "auth_refresh")
    _outside_control(sb, agent_home, CODEX_DENIED)
    _check(sb, "codex", CODEX_DENIED, allowed, agent_home)


@pytest.mark.parametrize("spelled", ["{home}", "{home}/.local", "{home}/.config",
                                     "{home}/.local/bin", "{home}/.claude/commands",
                                     "{home}/.local/share/claude", "/etc", "/usr/local", "/"])
def test_broad_write_grants_refused(sandbox, agent_home, spelled):
    path = spelled.format(home=agent_home)
    made = not os.path.exists(path)
    os.makedirs(path, exist_ok=True)
    if path.startswith(agent_home):
        os.chown(path, sandbox.agent.pw_uid, sandbox.agent.pw_gid)
    try:
        _refused(sandbox, path)
    finally:
        if made:
            os.rmdir(path)


def _refused(sandbox, path: str) -> None:
    p = sandbox.run(["/bin/true"], "-p", "claude-code", "--write", path)
    assert p.returncode == 125, p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and path in lines[0] and "not writable" in lines[0], p.stderr
    # control: the same run without the grant starts
    ok = sandbox.run(["/bin/true"], "-p", "claude-code")
    assert ok.returncode == 0, ok.stderr


def test_narrow_write_grant_in_home_still_works(sandbox, agent_home):
    """A tool's own directory stays grantable (the refusal is not "anything in HOME")."""
    d = os.path.join(agent_home, ".cache", "mytool")
    os.makedirs(d, exist_ok=True)
    _chown_tree(os.path.join(agent_home, ".cache"), sandbox.agent)
    try:
        p, r = sandbox.probe("attempt('w', lambda: opened(P['f'], os.O_WRONLY | os.O_CREAT))",
                             {"f": os.path.join(d, "x")}, "--write", d)
        assert r == {"w": "ok"}, p.stderr
    finally:
        shutil.rmtree(os.path.join(agent_home, ".cache"), ignore_errors=True)


def _profile(sb, text: str) -> str:
    """A profile file the launcher can read in both modes (the workdir is the test
    account's)."""
    path = os.path.join(sb.workdir, "mine.yaml")
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, 0o644)
    return path


def test_profile_write_grant_refused_with_file_and_line(sandbox, agent_home):
    prof = _profile(sandbox, "extends: default\nfilesystem:\n  write:\n    - ?~/.cache/x\n"
                             "    - ~/.config\n")
    p = sandbox.run(["/bin/true"], "-p", prof)
    assert p.returncode == 125, p.stderr
    assert "mine.yaml:5" in p.stderr and ".config" in p.stderr, p.stderr


def test_read_only_profile_key_carves_a_user_grant(sandbox, agent_home):
    """`filesystem.read_only:` adds entries to the built-in list: writable tool
    directory, one script in it that a hook names stays read-only (in the state root
    ~/.claude, as a pattern of its own; the profile's own patterns already protect
    top-level *.sh, *.py, *.js scripts)."""
    tool = os.path.join(agent_home, ".claude")
    script = os.path.join(tool, "status.rb")
    with open(script, "w") as f:
        f.write("#!/bin/sh\n")
    os.lchown(script, sandbox.agent.pw_uid, sandbox.agent.pw_gid)
    prof = _profile(sandbox, "extends: claude-code\nfilesystem:\n  read_only:\n"
                             "    - ~/.claude/status.rb\n")
    body = ("attempt('script', lambda: opened(P['s'], os.O_WRONLY | os.O_APPEND))\n"
            "attempt('cred', lambda: opened(P['c'], os.O_WRONLY | os.O_APPEND))\n")
    params = {"s": script, "c": os.path.join(tool, ".credentials.json")}
    p, r = sandbox.probe(body, params, "-p", prof)
    assert r is not None, p.stderr
    assert r["script"] in DENIED and r["cred"] == "ok", (r, p.stderr)
    p, r = sandbox.probe(body, params, "-p", "claude-code")   # control: not listed, writable
    assert r == {"script": "ok", "cred": "ok"}, p.stderr


def test_dry_run_shows_the_read_only_entries(sandbox, agent_home):
    """...and changes nothing: the missing state entries are made by a run only."""
    p = sandbox.confine("exec", "-w", sandbox.workdir, "-p", "claude-code", "--dry-run",
                        "--json", "--", "true")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    claude = os.path.join(agent_home, ".claude")
    # a state root: no carve, a protected root whose patterns name what runs later
    assert not any(x.startswith(claude + "/") for x in d["landlock"]["read_only_in_write"])
    (root,) = [r for r in d["protected_paths"]["roots"] if r["path"] == claude]
    assert "/settings*.json" in root["patterns"] and "/hooks/" in root["patterns"], root
    assert "settings.json" in {e["path"] for e in root["protected"]}, root
    assert not os.path.lexists(os.path.join(claude, "todos"))
    assert sandbox.run(["/bin/true"], "-p", "claude-code").returncode == 0
    assert not os.path.lexists(os.path.join(claude, "todos"))     # nothing made before


@pytest.mark.parametrize("unconfined", [False, True])
def test_probe_reports_agent_profile_hooks_blocked(sandbox, agent_home, unconfined):
    """`confine probe -p claude-code` tries ~/.claude/settings.json, commands/ and
    ~/.codex/config.toml; unconfined (the probe's control) it can write them."""
    env = ("CONFINE_TEST_PROBE_UNCONFINED=1",) if unconfined else ()
    p = sandbox.confine("probe", "-w", sandbox.workdir, "-p", "claude-code", "--json",
                        "--only", "later", env_extra=env, timeout=120)
    r = json.loads(p.stdout)
    a = {x["id"]: x for x in r["attempts"]}["later.home_agent_hooks"]
    if unconfined:
        assert a["result"] == "possible", a
    else:
        assert a["result"] == "blocked" and a["seen"] in DENIED, a
        assert a["mechanism"] in ("landlock", "read-only mount"), a
    before = open(os.path.join(agent_home, ".claude/settings.json")).read()
    assert before == PLANT[".claude/settings.json"]


@pytest.mark.parametrize("rel", [".config", ".claude", ".local/bin", ".local/share/claude",
                                 ".codex/rules"])
def test_workdir_that_holds_run_later_home_files_refused(sandbox, agent_home, rel):
    """The workdir's protected names are workdir-relative: `-w ~/.config` would hand
    over ~/.config/confine (the profiles of the next run), `-w ~/.claude` its hooks."""
    wd = os.path.join(agent_home, rel)
    made = not os.path.exists(wd)
    os.makedirs(wd, exist_ok=True)
    os.chown(wd, sandbox.agent.pw_uid, sandbox.agent.pw_gid)
    try:
        _workdir_refused(sandbox, wd)
    finally:
        if made:
            os.rmdir(wd)


def _workdir_refused(sandbox, wd: str) -> None:
    sb = copy.copy(sandbox)
    sb.workdir = wd
    p = sb.run(["/bin/true"], "-p", "claude-code", cwd="/")
    assert p.returncode == 125 and "refusing workdir" in p.stderr, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr
    forced = sb.run(["/bin/true"], "-p", "claude-code", "--force-workdir", cwd="/")
    assert forced.returncode == 0, forced.stderr    # control: the check, not the run
