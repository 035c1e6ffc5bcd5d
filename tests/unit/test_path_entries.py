"""filesystem.state_roots: and filesystem.copied: share one entry parser
(confine/policy/entries.py): each mistake is named with its line and key in both."""
from __future__ import annotations

import pytest


def _load(tmp_path, section: str, body: str) -> str:
    from confine.errors import ProfileError
    from confine.policy import load as _load
    home, wd = tmp_path / "home", tmp_path / "wd"
    for d in (home, wd, tmp_path / "tmp"):
        d.mkdir(exist_ok=True)
    prof = tmp_path / "p.yaml"
    prof.write_text(f"extends: default\nfilesystem:\n  {section}:\n" + body)
    try:
        _load.load(str(prof), workdir=str(wd), home=str(home), tmp=str(tmp_path / "tmp"))
    except ProfileError as e:
        return str(e)
    return "loaded"


@pytest.mark.parametrize("section,lst,good", [("state_roots", "protected", "/hooks/"),
                                              ("copied", "protected_keys", "mcpServers")])
@pytest.mark.parametrize("body,said", [
    ("    path: x\n", "p.yaml:4: 'filesystem.{s}' must be a list of mappings with keys path, {l}"),
    ("    - ?~/.x\n", "p.yaml:4: filesystem.{s}: each entry is a mapping with keys path, {l}"),
    ("    - path: ?~/.x\n      other: [a]\n", "p.yaml:5: unknown key 'filesystem.{s}.other'"),
    ("    - path: ?~/.x\n      path: ?~/.y\n", "p.yaml:5: duplicate key 'filesystem.{s}.path'"),
    ("    - {l}: [{g}]\n", "p.yaml:4: filesystem.{s}: an entry without 'path'"),
    ("    - path: [a]\n", "p.yaml:4"),
    ("    - path: ?~/.x\n      {l}: {g}\n", "p.yaml:5: filesystem.{s}.{l} must be a list of"),
    ("    - path: ?~/.x\n      {l}:\n        - {g}\n        - [x]\n", "p.yaml:7"),
])
def test_mistakes_named_with_line_and_key(tmp_path, section, lst, good, body, said):
    got = _load(tmp_path, section, body.format(l=lst, g=good))
    assert said.format(s=section, l=lst) in got, got


@pytest.mark.parametrize("section,lst,bad,said", [
    ("state_roots", "protected", "'!/hooks/'", "never remove one ('!')"),
    ("copied", "protected_keys", "a..b", "is not a key path"),
])
def test_bad_element_named(tmp_path, section, lst, bad, said):
    got = _load(tmp_path, section, f"    - path: ?~/.x\n      {lst}:\n        - good\n        - {bad}\n")
    assert "p.yaml:7" in got and f"filesystem.{section}.{lst}: " in got and said in got, got


def test_controls_load(tmp_path):
    assert _load(tmp_path, "state_roots", "    - path: ?~/.x\n      protected: [/hooks/]\n") == "loaded"
    assert _load(tmp_path, "copied", "    - path: ?~/.x\n      protected_keys: [mcpServers]\n") == "loaded"
