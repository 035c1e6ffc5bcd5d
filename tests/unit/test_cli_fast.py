"""cli/fast.py reads `confine exec` exactly as click (cli/main.py) does, or
leaves it to click: for each argv below, the keyword arguments api.run gets
are compared, and the spellings the fast path must not take return None."""
from __future__ import annotations

import os

import pytest

from confine import api
from confine.cli import fast
from confine.cli.main import cli


def _by_click(argv: list[str], monkeypatch) -> tuple[list[str], dict]:
    got: dict = {}

    def fake_run(command, **kw):
        got["command"], got["kw"] = list(command), kw
        return 0
    monkeypatch.setattr(api, "run", fake_run)
    with pytest.raises(SystemExit) as e:
        cli.main(args=argv, prog_name="confine", standalone_mode=False)
    assert e.value.code == 0
    return got["command"], got["kw"]


SAME = [
    ["exec", "--", "/bin/true"],
    ["exec", "-w", "/tmp", "--user", "nobody", "--", "/bin/true", "-x", "--y"],
    ["exec", "--workdir=/tmp", "-p", "dev", "--profile", "agent", "--", "sh", "-c", "exit 3"],
    ["exec", "--read", "/usr", "--read=/opt", "--write", "/srv", "--env", "A=1", "--env", "B",
     "--", "env"],
    ["exec", "--allow-degraded", "--force-workdir", "--agent-status", "--no-agent-home", "--",
     "true"],
    ["exec", "--no-agent-home", "--agent-home", "--degrade", "mount_namespace", "--degrade",
     "landlock.ioctl_dev", "--", "true"],
    ["exec", "--apparmor", "prof", "--selinux-context", "u:r:t:s0", "--log", "/var/log/x",
     "--allow-host", "example.org", "--allow-host=*.example.com:8443", "--approver", "ask-me",
     "--", "true", "--", "x"],
    ["exec", "--user", "a", "--user", "b", "--", "true"],
    ["exec", "--approver-socket", "/run/decider.sock", "--", "true"],
    ["exec", "--approver-socket=/run/d.sock", "--approver", "x", "--", "true"],
    ["exec", "--credential", "GH_TOKEN=github.com,api.github.com", "--credential=X=a.example",
     "--", "true"],
]


@pytest.mark.parametrize("argv", SAME, ids=lambda a: " ".join(a)[:60])
def test_the_fast_path_reads_exec_as_click_does(argv, monkeypatch):
    got = fast.exec_args(argv)
    assert got is not None
    assert (list(got[0]), got[1]) == _by_click(argv, monkeypatch)


CLICK_ONLY = [
    ["exec", "true"],                                  # no --
    ["exec", "--"],                                    # no command
    ["exec", "--dry-run", "--", "true"],
    ["exec", "--json", "--dry-run", "--", "true"],
    ["exec", "--help", "--", "true"],
    ["exec", "-h", "--", "true"],
    ["exec", "--prof", "x", "--", "true"],             # abbreviations are click's to refuse
    ["exec", "-pdev", "--", "true"],
    ["exec", "--user", "--", "true"],                  # the value would be --
    ["exec", "--user", "-x", "--", "true"],
    ["exec", "--user=", "--", "true"],
    ["exec", "--force-workdir=1", "--", "true"],
    ["exec", "--bogus", "--", "true"],
    ["exec", "-w"],
    ["check"],
    ["profile", "list"],
    ["exec-x", "--", "true"],
]


@pytest.mark.parametrize("argv", CLICK_ONLY, ids=lambda a: " ".join(a)[:60])
def test_what_the_fast_path_leaves_to_click(argv):
    assert fast.exec_args(argv) is None


def test_a_workdir_that_is_a_file_is_left_to_click(tmp_path):
    f = tmp_path / "f"
    f.write_text("")
    assert fast.exec_args(["exec", "-w", str(f), "--", "true"]) is None
    assert fast.exec_args(["exec", "-w", str(tmp_path), "--", "true"]) is not None
    assert os.path.isdir(tmp_path)


def test_run_maps_confine_errors_and_crashes_to_one_line(monkeypatch, capsys):
    from confine.errors import ConfineError

    def refuse(command, **kw):
        raise ConfineError("no such thing")
    monkeypatch.setattr(api, "run", refuse)
    assert fast.run(["true"], {}) == 125
    assert capsys.readouterr().err == "confine: no such thing\n"

    def crash(command, **kw):
        raise RuntimeError("boom")
    monkeypatch.setattr(api, "run", crash)
    monkeypatch.delenv("CONFINE_DEBUG", raising=False)
    assert fast.run(["true"], {}) == 125
    assert capsys.readouterr().err == "confine: internal error: RuntimeError: boom\n"
    monkeypatch.setattr(api, "run", lambda command, **kw: 7)
    assert fast.run(["true"], {}) == 7
