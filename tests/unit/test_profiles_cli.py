"""Profiles as a user meets them: the README's example loads, YAML's `?` trap is
named, `confine profile list` shows user, system and built-in profiles, and
`profile validate` takes a name or a file. Pure: the checkout's code, no root."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from confine.cli.main import cli
from confine.errors import ProfileError
from confine.policy import load as _load

README = Path(__file__).resolve().parents[2] / "README.md"


@pytest.fixture
def dirs(tmp_path, monkeypatch):
    wd, home, tmp = (tmp_path / n for n in ("wd", "home", "tmp"))
    for d in (wd, home, tmp):
        d.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    return tmp_path, str(wd), str(home), str(tmp)


def _readme_example() -> str:
    """The full example of the profile reference (docs/profiles.md; the README's short
    one is run by tests/e2e/test_readme.py)."""
    text = (README.parent / "docs" / "profiles.md").read_text()
    m = re.search(r"```yaml\n(description: What this profile is for\..*?)```", text, re.S)
    assert m, "the profile reference's example moved"
    return m.group(1)


def test_readme_profile_example_is_valid(dirs):
    root, wd, home, tmp = dirs
    prof = root / "example.yaml"
    prof.write_text(_readme_example())
    pol = _load.load(str(prof), workdir=wd, home=home, tmp=tmp)
    assert pol.network.connect_tcp == (8080,)
    assert pol.network.allow[0] == "api.example.com" and pol.network.include == ("registries",)


def test_question_mark_in_a_flow_list_is_named(dirs):
    root, wd, home, tmp = dirs
    prof = root / "bad.yaml"
    prof.write_text("filesystem:\n  read: [/usr, ?/opt]\n")
    with pytest.raises(ProfileError) as e:
        _load.load(str(prof), workdir=wd, home=home, tmp=tmp)
    msg = str(e.value)
    assert "bad.yaml:2" in msg and "'?/opt'" in msg and "quote it" in msg


def test_profile_list_shows_user_profiles_and_shadowing(dirs):
    root, *_ = dirs
    user = root / "xdg" / "confine" / "profiles"
    user.mkdir(parents=True)
    (user / "mine.yaml").write_text("description: my own\nextends: default\n")
    (user / "strict.yaml").write_text("description: my strict\nextends: strict\n")
    (user / "broken.yaml").write_text("filesystem:\n  raed: []\n")
    r = CliRunner().invoke(cli, ["profile", "list", "--json"])
    assert r.exit_code == 0, r.output
    import json
    rows = json.loads(r.output)
    by = {(x["name"], x["origin"]): x for x in rows}
    assert by[("mine", "user")]["description"] == "my own"
    assert by[("strict", "user")]["shadowed"] is False
    assert by[("strict", "built-in")]["shadowed"] is True
    assert "raed" in by[("broken", "user")]["error"]
    assert ("default", "built-in") in by


def test_profile_validate_takes_a_name_or_a_file(dirs, monkeypatch):
    root, *_ = dirs
    r = CliRunner().invoke(cli, ["profile", "validate", "default"])
    assert r.exit_code == 0 and "default: valid" in r.output, r.output
    monkeypatch.chdir(root)
    (root / "local.yaml").write_text("extends: default\n")
    r = CliRunner().invoke(cli, ["profile", "validate", "local.yaml"])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(cli, ["profile", "validate", "nope.yaml"])
    assert r.exit_code != 0 and "does not exist" in str(r.exception)


def test_exec_without_double_dash_suggests_it(capsys):
    from confine.cli.main import main
    with pytest.raises(SystemExit) as e:
        main(["exec", "ls", "-la"])
    assert e.value.code == 125
    err = capsys.readouterr().err
    assert "No such option" in err and "put `--` before the command" in err


def test_exec_without_a_command_is_a_usage_error(capsys):
    from confine.cli.main import main
    with pytest.raises(SystemExit) as e:
        main(["exec"])
    assert e.value.code == 125
    assert "no command given" in capsys.readouterr().err


def test_profile_validate_lists_every_error_with_its_line(dirs, monkeypatch, capsys):
    """Issue 23 item 7: not just the first error. Each bad key and each bad list entry is
    named with its line; a good key between them is not; a run still says one line."""
    root, *_ = dirs
    monkeypatch.chdir(root)
    (root / "bad.yaml").write_text(
        "extends: default\n"                      # 1
        "filesystem:\n"                           # 2
        "  reed: [/usr]\n"                        # 3  unknown key
        "  read: [/usr, relative/path]\n"         # 4  bad entry
        "network:\n"                              # 5
        "  connect_tcp: [80, 70000]\n"            # 6  bad port
        "  allow: [example.org]\n"                # 7  fine
        "colour: red\n")                          # 8  unknown section
    from confine.cli.main import main
    with pytest.raises(SystemExit) as e:
        main(["profile", "validate", "bad.yaml"])
    assert e.value.code == 125
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 5, lines
    for n, needle in ((3, "reed"), (4, "relative/path"), (6, "70000"), (8, "colour")):
        assert any(f"bad.yaml:{n}:" in ln and needle in ln for ln in lines), (n, lines)
    assert lines[-1] == "confine: bad.yaml: 4 errors"
    assert not any(":7:" in ln for ln in lines)
    # the loader itself raises the first, with the others attached
    from confine.errors import ProfileError
    from confine.policy import load as _load
    with pytest.raises(ProfileError) as pe:
        _load.load("./bad.yaml", workdir=str(root), home=str(root), tmp=str(root))
    assert ":3:" in str(pe.value) and len(pe.value.more) == 3
