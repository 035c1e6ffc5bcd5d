"""The agent home without a kernel: its name, the grant links, the environment and
the Landlock rule the planner gives it (runtime/home.py, plan/env.py). The proof
with real confined processes: tests/e2e/test_agent_home.py."""
from __future__ import annotations

import os
import stat

import pytest
from landlockpy import AccessFS

from confine.errors import ConfineError
from confine.plan import HostFacts, compile
from confine.plan import env as _env
from confine.plan.identity import Identity
from confine.policy import load as _load
from confine.runtime import home as _home

FULL = HostFacts(landlock_abi=7, seccomp_filter=True, seccomp_user_notif=True, namespaces=True,
                 apparmor=False, selinux=False)


@pytest.fixture
def home(tmp_path):
    h = tmp_path / "home"
    for d in (".claude/projects", ".codex/sessions", ".config/git", ".local/bin"):
        (h / d).mkdir(parents=True)
    (h / ".gitconfig").write_text("[user]\n")
    (h / ".config/git/config").write_text("")
    (h / ".claude.json").write_text("{}")
    (tmp_path / "wd").mkdir()
    (tmp_path / "tmp").mkdir()
    return str(h)


def _policy(home: str, profile: str = "claude-code", **kw):
    base = os.path.dirname(home)
    return _load.load(profile, workdir=os.path.join(base, "wd"), home=home,
                      tmp=os.path.join(base, "tmp"), **kw)


def _ident(home: str) -> Identity:
    return Identity(uid=os.getuid(), gid=os.getgid(), user="u", home=home, switch=False,
                    started_as_root=False)


def test_name_is_per_profile_and_workdir_and_plain():
    a = _home.name_for("default", "/srv/a")
    assert a == _home.name_for("default", "/srv/a")
    assert len({a, _home.name_for("default", "/srv/b"), _home.name_for("codex", "/srv/a"),
                _home.name_for("/etc/p/default.yaml", "/srv/a")}) == 4
    odd = _home.name_for("../x y.yaml", "/srv/" + "\n.." + "\u00e9" * 300)
    assert odd.isascii() and "/" not in odd and not odd.startswith(".") and len(odd) < 100


def test_links_are_the_outermost_grants_in_home(home):
    pol = _policy(home, extra_read=[os.path.join(home, ".claude", "projects")])
    ah = os.path.join(home, ".local/state/confine/homes/x")
    links = dict(_home.links_for(pol, home, ah))
    assert links[".claude"] == os.path.join(home, ".claude")
    assert ".claude.json" not in links     # a copy (filesystem.copied), never a link
    assert links[".gitconfig"] == os.path.join(home, ".gitconfig")
    assert links[".config/git/config"] == os.path.join(home, ".config/git/config")
    assert links[".local/bin"] == os.path.join(home, ".local/bin")
    assert ".claude/projects" not in links          # inside the ~/.claude link already
    assert not any(r.startswith(".local/state") for r in links)


def test_links_never_home_or_an_ancestor_of_the_agent_home(home):
    pol = _policy(home, "default", extra_read=[home, os.path.join(home, ".local")])
    ah = os.path.join(home, ".local/state/confine/homes/x")
    links = dict(_home.links_for(pol, home, ah))
    assert "." not in links and ".local" not in links and "" not in links


def test_plan_gives_home_every_write_right_and_the_environment(home):
    pol = _policy(home)
    ah = os.path.join(home, ".local/state/confine/homes/x")
    os.makedirs(ah)
    plan = compile(pol, ["true"], _ident(home), FULL,
                   parent_env={"TMUX": "/tmp/tmux-1/default,1,0", "STY": "1.pts"},
                   cli_env=["TMUX_PANE=%1"], agent_home=ah)
    rules = {p: a for p, a, _ in plan.path_rules}
    assert rules[ah] & AccessFS.MAKE_REG and rules[ah] & AccessFS.REMOVE_FILE
    assert ah in plan.writable_binds
    env = plan.env
    assert env["HOME"] == ah and env["XDG_CACHE_HOME"] == ah + "/.cache"
    assert env["XDG_CONFIG_HOME"] == ah + "/.config"
    assert env["TMUX_TMPDIR"] == pol.tmp and env["SCREENDIR"].startswith(pol.tmp + "/")
    assert not {"TMUX", "TMUX_PANE", "STY"} & set(env)
    assert "CODEX_HOME" not in env                  # claude-code grants no ~/.codex
    codex = compile(_policy(home, "codex"), ["true"], _ident(home), FULL, parent_env={},
                    agent_home=ah)
    assert codex.env["CODEX_HOME"] == os.path.join(home, ".codex")
    mine = compile(_policy(home, "codex"), ["true"], _ident(home), FULL,
                   parent_env={"CODEX_HOME": "/x"}, agent_home=ah)
    assert mine.env.get("CODEX_HOME") != os.path.join(home, ".codex")   # the caller's wins


def test_no_agent_home_keeps_the_accounts_home(home):
    plan = compile(_policy(home), ["true"], _ident(home), FULL, parent_env={})
    assert plan.env["HOME"] == home and plan.agent_home is None
    assert "XDG_CACHE_HOME" not in plan.env
    assert plan.env["TMUX_TMPDIR"] == plan.policy.tmp          # tmux inside is still its own


def test_prepare_makes_a_private_home_and_refuses_a_symlink(home, tmp_path):
    ah = _home.locate(_ident(home), "default", str(tmp_path / "wd"), {})
    assert ah.startswith(os.path.join(home, ".local/state/confine/homes/"))
    wd = str(tmp_path / "wd")
    notes = _home.prepare(ah, _ident(home), [(".gitconfig", os.path.join(home, ".gitconfig"))],
                          wd)
    assert notes == []
    assert stat.S_IMODE(os.stat(ah).st_mode) == 0o700
    assert os.readlink(os.path.join(ah, ".gitconfig")) == os.path.join(home, ".gitconfig")
    assert "runs only inside confine" in open(os.path.join(ah, ".bashrc")).read()
    os.rename(ah, ah + ".old")
    os.symlink(ah + ".old", ah)
    with pytest.raises(ConfineError, match="symbolic link"):
        _home.prepare(ah, _ident(home), [], wd)


def test_user_server_variables_dropped_even_when_named():
    env = {"TMUX": "x", "PATH": "/bin"}
    notes = _env.drop_user_servers(env)
    assert env == {"PATH": "/bin"} and notes and "tmux" in notes[0]


def test_homes_of_vanished_workdirs_are_collected(home, tmp_path):
    ident = _ident(home)
    gone, kept, odd = (tmp_path / "gone", tmp_path / "kept", tmp_path / b"o\xffdd\n".decode(
        "utf-8", "surrogateescape"))
    for d in (gone, kept, odd):
        d.mkdir()
    homes = {}
    for d in (gone, kept, odd):
        homes[d] = _home.locate(ident, "default", str(d), {})
        _home.prepare(homes[d], ident, [], str(d))
    gone.rmdir()
    unmounted = tmp_path / "mnt" / "proj"       # parent missing: a file system not mounted
    h = _home.locate(ident, "default", str(unmounted), {})
    os.makedirs(tmp_path / "mnt" / "proj")
    _home.prepare(h, ident, [], str(unmounted))
    os.rmdir(tmp_path / "mnt" / "proj")
    os.rmdir(tmp_path / "mnt")
    _home._COLLECTED.clear()          # the next collection: another process, or a minute on
    _home.prepare(homes[kept], ident, [], str(kept))
    assert not os.path.exists(homes[gone])
    assert not os.path.exists(os.path.join(os.path.dirname(homes[gone]),
                                           "." + os.path.basename(homes[gone]) + ".workdir"))
    assert os.path.isdir(homes[kept]) and os.path.isdir(homes[odd]) and os.path.isdir(h)


def test_one_process_collects_a_homes_directory_once_a_minute(home, tmp_path, monkeypatch):
    """Many runs in one program (confine.Sandbox) do not read every home's record each
    time: within _COLLECT_EVERY of a collection the next run's leaves a vanished
    workdir's home; once the interval has passed it is removed (the control that the
    skip above was the throttle, not a miss). The run's own record is kept current."""
    ident = _ident(home)
    gone, mine = tmp_path / "gone", tmp_path / "mine"
    gone.mkdir()
    mine.mkdir()
    h_gone = _home.locate(ident, "default", str(gone), {})
    h_mine = _home.locate(ident, "default", str(mine), {})
    _home._COLLECTED.clear()
    _home.prepare(h_gone, ident, [], str(gone))
    gone.rmdir()
    _home.prepare(h_mine, ident, [], str(mine))
    assert os.path.isdir(h_gone)                       # skipped: collected moments ago
    rec = os.path.join(os.path.dirname(h_mine), "." + os.path.basename(h_mine) + ".workdir")
    assert open(rec).read() == str(mine)
    now = _home.time.monotonic()
    monkeypatch.setattr(_home.time, "monotonic", lambda: now + _home._COLLECT_EVERY + 1)
    _home.prepare(h_mine, ident, [], str(mine))
    assert not os.path.exists(h_gone) and os.path.isdir(h_mine)


def test_a_home_another_run_collected_meanwhile_is_no_note(tmp_path, monkeypatch):
    """Two runs of one account collect the same vanished workdir's home at once:
    the one that comes second finds it gone, which is what it wanted (no note on
    stderr). Control: a home whose workdir still exists is kept, and a vanished
    one nobody else touches is removed."""
    homes = tmp_path / "homes"
    homes.mkdir()
    for n in ("gone-a", "gone-b", "kept"):
        (homes / n).mkdir()
    (homes / ".gone-a.workdir").write_text(str(tmp_path / "vanished-a"))
    (homes / ".gone-b.workdir").write_text(str(tmp_path / "vanished-b"))
    (homes / ".kept.workdir").write_text(str(tmp_path))
    real_remove = _home.remove_at

    def raced(sfd: int, name: str) -> None:
        if name == "gone-a":             # the other run was faster: home and record gone
            real_remove(sfd, name)
            os.unlink(f".{name}.workdir", dir_fd=sfd)
            raise FileNotFoundError(2, "No such file or directory")
        real_remove(sfd, name)
    monkeypatch.setattr(_home, "remove_at", raced)
    fd = os.open(homes, os.O_RDONLY | os.O_DIRECTORY)
    try:
        notes = _home._record_and_collect(fd, "mine", str(tmp_path))
    finally:
        os.close(fd)
    assert notes == []
    assert sorted(os.listdir(homes)) == [".kept.workdir", ".mine.workdir", "kept"]
