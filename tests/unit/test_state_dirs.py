"""Where confine keeps state for the person (paths.state_dir): root's
/var/lib/confine only for a root confine; an unprivileged one stays in its own
XDG state (issue 23 item 3). Held files, quarantine and index all ask it."""
from __future__ import annotations

import os

from confine.paths import state_dir
from confine.protect import held, index, revert


def test_unprivileged_state_never_names_var_lib_confine(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    for name in ("held", "quarantine", "index"):
        assert state_dir(name, euid=1000) == str(tmp_path / "confine" / name)
        assert state_dir(name, euid=0) == f"/var/lib/confine/{name}"      # control
    assert held.held_base(euid=1000) == str(tmp_path / "confine" / "held")
    assert revert.default_quarantine_dir("R", euid=1000) == str(tmp_path / "confine" /
                                                                 "quarantine" / "R")
    assert index.default_dir(euid=1000) == str(tmp_path / "confine" / "index")
    assert revert.default_quarantine_dir("R", euid=0) == "/var/lib/confine/quarantine/R"


def test_relative_xdg_state_home_and_explicit_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", "relative/dir")
    assert state_dir("held", euid=1000) == os.path.join(os.path.expanduser("~"), ".local",
                                                         "state", "confine", "held")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    assert state_dir("held", euid=1000, home="/h") == "/h/.local/state/confine/held"


def test_the_unit_tier_has_a_state_home_of_its_own():
    assert not state_dir("held", euid=1000).startswith(os.path.expanduser("~") + "/")
