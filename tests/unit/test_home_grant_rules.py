"""Write grants in HOME, without a kernel: what the loader refuses and how the
planner carves the files that run later (policy/runlater.py, plan/carve.py).
The end-to-end proof with real confined processes: tests/e2e/test_home_grants.py."""
from __future__ import annotations

import os

import pytest
from landlockpy import AccessFS

from confine.errors import ProfileError
from confine.plan import HostFacts, compile
from confine.plan.carve import carve_write
from confine.plan.identity import Identity
from confine.policy import load as _load
from confine.policy import runlater

FULL = HostFacts(landlock_abi=7, seccomp_filter=True, seccomp_user_notif=True, namespaces=True,
                 apparmor=False, selinux=False)
MAKE = AccessFS.MAKE_REG | AccessFS.MAKE_DIR | AccessFS.MAKE_SYM | AccessFS.REMOVE_FILE


@pytest.fixture
def home(tmp_path):
    h = tmp_path / "home"
    for d in (".claude/commands", ".claude/projects", ".codex/sessions", ".local/bin",
              ".local/share/claude/versions", ".config", ".cache/tool"):
        (h / d).mkdir(parents=True)
    (h / ".claude/settings.json").write_text("{}")
    (h / ".claude/.credentials.json").write_text("{}")
    (h / ".codex/config.toml").write_text("")
    (h / ".codex/work.config.toml").write_text("")
    (h / ".codex/auth.json").write_text("{}")
    (tmp_path / "wd").mkdir()
    (tmp_path / "tmp").mkdir()
    return str(h)


def _load_p(home: str, profile: str = "claude-code", **kw):
    base = os.path.dirname(home)
    return _load.load(profile, workdir=os.path.join(base, "wd"), home=home,
                      tmp=os.path.join(base, "tmp"), **kw)


def _plan(policy):
    ident = Identity(uid=os.getuid(), gid=os.getgid(), user="u", home=policy.home,
                     switch=False, started_as_root=False)
    return compile(policy, ["true"], ident, FULL, parent_env={})


def _rights(plan, path: str) -> AccessFS:
    """The rights Landlock gives `path`: the union of the rules on it and above it."""
    r = AccessFS(0)
    for p, a, _ in plan.path_rules:
        if path == p or path.startswith(p.rstrip("/") + "/"):
            r |= a
    return r


@pytest.mark.parametrize("rel", ["", ".local", ".config", ".local/bin", ".local/share",
                                 ".claude/commands", ".claude/settings.json",
                                 ".local/share/claude", ".local/share/claude/versions",
                                 ".codex/config.toml", ".claude/../.local",
                                 ".local/bin/../../.local/bin", ".local/", "./.config//"])
def test_write_grants_that_hand_over_run_later_files_are_refused(home, rel):
    path = os.path.normpath(os.path.join(home, rel))
    with pytest.raises(ProfileError, match="not writable"):
        _load_p(home, extra_write=[os.path.join(home, rel) if rel else home])
    assert os.path.exists(path)


@pytest.mark.parametrize("path", ["/", "/etc", "/usr/local", "/var", "/opt", "/home", "/tmp",
                                  "/proc/self", "/run"])
def test_system_write_grants_are_refused(home, path):
    with pytest.raises(ProfileError, match=f"--write: {path} .*not writable: it is"):
        _load_p(home, profile="default", extra_write=[path])


def test_dev_shm_and_a_tools_own_dir_stay_grantable(home):
    p = _load_p(home, profile="default", extra_write=[os.path.join(home, ".cache/tool")])
    assert {"/dev/shm", os.path.join(home, ".cache/tool")} <= {g.path for g in p.write}


def test_symlink_to_a_run_later_dir_is_refused(home):
    link = os.path.join(home, "innocent")
    os.symlink(os.path.join(home, ".local/bin"), link)
    with pytest.raises(ProfileError, match=r"\.local/bin"):
        _load_p(home, extra_write=[link])
    os.symlink(home, os.path.join(home, "me"))
    with pytest.raises(ProfileError, match="home directory"):
        _load_p(home, extra_write=[os.path.join(home, "me")])


def test_path_dir_in_home_is_never_writable(home):
    d = os.path.join(home, "tools")
    os.mkdir(d)
    never = runlater.never_writable(home, env_path=f"/usr/bin:{d}")
    assert runlater.refusal(d, home, never, []) is not None
    assert runlater.refusal(d, home, runlater.never_writable(home, env_path="/usr/bin"),
                            []) is None


def test_profile_error_names_file_and_line(home, tmp_path):
    prof = tmp_path / "p.yaml"
    prof.write_text("extends: default\nfilesystem:\n  write:\n    - ~/.cache/tool\n"
                    "    - ~/.config\n")
    with pytest.raises(ProfileError, match=r"p\.yaml:5: ~/\.config .*not writable"):
        _load_p(home, profile=str(prof))
    prof.write_text("filesystem:\n  state:\n    - ~/.local/bin/x\n")
    with pytest.raises(ProfileError, match=r"p\.yaml:3: .*not writable"):
        _load_p(home, profile=str(prof))
    prof.write_text("filesystem:\n  read_onyl: [~/x]\n")
    with pytest.raises(ProfileError, match="did you mean 'read_only'"):
        _load_p(home, profile=str(prof))


def test_claude_code_state_root_is_writable_and_protected_by_its_patterns(home):
    """~/.claude is a state root (policy/stateroots.py): Landlock lets the agent make any
    name there (a new release's new state works); what runs later is the root's
    patterns' to protect (name guard, binds, exit check), never a carve."""
    from confine.protect.roots import roots_of
    pol = _load_p(home, create_state=True)
    plan = _plan(pol)
    c = os.path.join(home, ".claude")
    for p in (c, c + "/new-in-a-later-release", c + "/projects"):
        assert _rights(plan, p) & MAKE == MAKE, p
    assert not any(g.path.startswith(c + "/") for g in pol.read_only)
    assert not _rights(plan, home + "/.local/share/claude/versions") & AccessFS.WRITE_FILE
    (root,) = [r for r in roots_of(pol) if r.path == c]
    for pat in ("/settings*.json", "/hooks/", "/commands/", "/plugins/cache/", "/CLAUDE.md"):
        assert pat in root.patterns, pat
    assert ".envrc" in root.patterns          # the workdir's patterns too
    assert [r.path for r in pol.state_roots] == [c]
    # nothing is made before the start any more
    assert not os.path.exists(c + "/todos")


def test_codex_state_root(home):
    from confine.protect.roots import roots_of
    pol = _load_p(home, profile="codex", create_state=True)
    plan = _plan(pol)
    x = os.path.join(home, ".codex")
    assert _rights(plan, x) & MAKE == MAKE
    (root,) = [r for r in roots_of(pol) if r.path == x]
    assert "/config.toml" in root.patterns and "/*.config.toml" in root.patterns


@pytest.mark.parametrize("body,match", [
    ("  state_roots:\n    - path: ~/.claude\n      protect: [/x]\n",
     r"p\.yaml:5: unknown key 'filesystem\.state_roots\.protect'"),
    ("  state_roots:\n    - ~/.claude\n", r"p\.yaml:4: .*mapping with keys path, protected"),
    ("  state_roots:\n    - path: .claude\n", r"p\.yaml:4: .*must be absolute"),
    ("  state_roots:\n    - path: ~/.claude\n      protected: ['!.envrc']\n",
     r"p\.yaml:5: .*never remove"),
    ("  state_roots:\n    - path: ~/.claude\n      protected: [a/**/b]\n", r"p\.yaml:5: .*\*\*"),
    ("  state_roots:\n    - protected: [/x]\n", r"p\.yaml:4: .*without 'path'"),
])
def test_state_roots_bad_input_names_line_and_key(home, tmp_path, body, match):
    prof = tmp_path / "p.yaml"
    prof.write_text("extends: default\nfilesystem:\n" + body)
    with pytest.raises(ProfileError, match=match):
        _load_p(home, profile=str(prof))


def test_state_root_must_protect_what_runs_later(home, tmp_path):
    """Fail closed: a state root replaces the built-in carve only by patterns that
    cover every built-in entry in it."""
    prof = tmp_path / "p.yaml"
    prof.write_text("extends: default\nfilesystem:\n  state_roots:\n    - path: ~/.claude\n"
                    "      protected: [/hooks/, /commands/]\n")
    with pytest.raises(ProfileError, match=r"p\.yaml:4: .*state root ~/\.claude: .* runs later"):
        _load_p(home, profile=str(prof))
    prof.write_text("extends: default\nfilesystem:\n  state_roots:\n    - path: ~/.nothing\n")
    with pytest.raises(ProfileError, match=r"p\.yaml:4: .*not a directory.*'\?'"):
        _load_p(home, profile=str(prof))
    prof.write_text("extends: default\nfilesystem:\n  state_roots:\n    - path: ?~/.nothing\n")
    assert _load_p(home, profile=str(prof)).state_roots == ()
    # a state root where a write grant is refused is refused too
    prof.write_text("extends: default\nfilesystem:\n  state_roots:\n    - path: ~/.local\n")
    with pytest.raises(ProfileError, match=r"p\.yaml:4: .*not writable"):
        _load_p(home, profile=str(prof))


def test_a_user_grant_on_claude_is_carved_too(home):
    """Not only the built-in profile: `--write ~/.claude` with the default profile."""
    plan = _plan(_load_p(home, profile="default", extra_write=[os.path.join(home, ".claude")]))
    s = os.path.join(home, ".claude/settings.json")
    assert not _rights(plan, s) & AccessFS.WRITE_FILE
    assert _rights(plan, os.path.join(home, ".claude/projects")) & AccessFS.WRITE_FILE


def test_symlinked_agent_dir_is_carved_at_its_target(home, tmp_path):
    real = tmp_path / "dotfiles-claude"
    os.rename(os.path.join(home, ".claude"), real)
    os.symlink(real, os.path.join(home, ".claude"))
    plan = _plan(_load_p(home, profile="default", extra_write=[os.path.join(home, ".claude")]))
    assert not _rights(plan, str(real / "settings.json")) & AccessFS.WRITE_FILE
    assert _rights(plan, str(real / "projects")) & AccessFS.WRITE_FILE


def test_carve_write_secret_and_read_only_together(tmp_path):
    g = tmp_path / "g"
    for d in ("a", "ro", "sec", "deep/ro2", "deep/ok"):
        (g / d).mkdir(parents=True)
    w, r, carved = carve_write(str(g), [str(g / "sec")], [str(g / "ro"), str(g / "deep/ro2"),
                                                            str(g / "missing")])
    assert sorted(w) == [str(g / "a"), str(g / "deep/ok")]
    assert str(g / "sec") not in r and str(g / "ro") in r and str(g) not in r
    assert str(g) in carved and str(g / "deep") in carved
    w, r, _ = carve_write(str(g / "ro"), [], [str(g / "ro")])
    assert w == [] and r == [str(g / "ro")]


def test_make_state_never_follows_a_symlink(tmp_path):
    parent = tmp_path / "p"
    parent.mkdir()
    target = tmp_path / "elsewhere"
    os.symlink(target, parent / "todos")
    assert runlater.make_state(str(parent / "todos"), directory=True) is True  # exists (a link)
    assert not target.exists()
    assert runlater.make_state(str(tmp_path / "nope" / "x"), directory=True) is False
    assert runlater.make_state(str(parent / "h.jsonl"), directory=False) is True
    assert (parent / "h.jsonl").stat().st_mode & 0o777 == 0o600


def test_profile_read_only_in_a_state_root_becomes_its_pattern(home, tmp_path):
    from confine.protect.roots import roots_of
    os.makedirs(os.path.join(home, ".claude/tools"))
    prof = tmp_path / "p.yaml"
    prof.write_text("extends: claude-code\nfilesystem:\n  read_only:\n    - ~/.claude/tools/status.rb\n")
    pol = _load_p(home, profile=str(prof))
    (root,) = [r for r in roots_of(pol) if r.path == os.path.join(home, ".claude")]
    assert "/tools/status.rb" in root.patterns
    assert not any(g.path.startswith(os.path.join(home, ".claude/")) for g in pol.read_only)
