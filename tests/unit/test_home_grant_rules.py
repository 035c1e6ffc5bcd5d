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


def test_claude_code_carves_hooks_and_commands(home):
    plan = _plan(_load_p(home, create_state=True))
    c = os.path.join(home, ".claude")
    # no new name in ~/.claude or commands/, existing ones not writable
    for p in (c, c + "/commands", c + "/settings.json", c + "/hooks", c + "/settings.local.json",
              home + "/.local/share/claude/versions"):
        assert not _rights(plan, p) & (MAKE | AccessFS.WRITE_FILE | AccessFS.TRUNCATE), p
        # carved around the login file (logins:): ~/.claude and names not there yet get nothing
        assert p == c or not os.path.exists(p) or _rights(plan, p) & AccessFS.READ_FILE, p
    for p in (c + "/projects", c + "/todos", c + "/history.jsonl"):
        assert _rights(plan, p) & AccessFS.WRITE_FILE, p
    # the login: never the real file (the run binds a placeholder copy over it)
    assert not _rights(plan, c + "/.credentials.json"), c
    assert os.path.isdir(c + "/todos") and os.path.isfile(c + "/history.jsonl")
    # the mount namespace keeps the carved entries on the read-only host view
    assert c not in plan.writable_binds and c + "/projects" in plan.writable_binds
    assert c + "/settings.json" in plan.to_dict()["landlock"]["read_only_in_write"]


def test_codex_carves_config_and_profile_configs(home):
    plan = _plan(_load_p(home, profile="codex", create_state=True))
    x = os.path.join(home, ".codex")
    for p in (x, x + "/config.toml", x + "/work.config.toml", x + "/rules"):
        assert not _rights(plan, p) & (MAKE | AccessFS.WRITE_FILE), p
    for p in (x + "/sessions", x + "/log"):
        assert _rights(plan, p) & AccessFS.WRITE_FILE, p
    assert not _rights(plan, x + "/auth.json"), x      # the login (logins:): a copy at run time


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
    plan = _plan(_load_p(home))
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
