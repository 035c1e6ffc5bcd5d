"""policy/_shipped.py: the built-in profiles parsed ahead of time.

The loader reads a built-in profile from there (no PyYAML import, no parse)
only when the file holds exactly the text the entry was made from. These
cases check that each entry is what the parser makes of its file, that a
policy loaded through it equals one parsed from the YAML, and that a changed
or unknown file is parsed from its YAML.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from confine.policy import _shipped, load, ship


@pytest.mark.parametrize("name", load.builtin_names())
def test_each_entry_is_what_parsing_the_yaml_gives(name):
    text, parsed = ship.parse_builtin(name)
    assert _shipped.TEXT[name] == text, "regenerate with scripts/gen-artefacts.sh"
    shipped = _shipped.parsed(name, text, load.Item)
    assert shipped == parsed and repr(shipped) == repr(parsed)   # repr: True is not 1


def test_every_builtin_profile_has_an_entry():
    assert set(_shipped.TEXT) == set(_shipped.BUILD) == set(load.builtin_names())
    assert {"default", "strict", "claude-code", "codex"} <= set(_shipped.TEXT)
    assert _shipped.parsed("default", _shipped.TEXT["default"] + " ", load.Item) is None


@pytest.mark.parametrize("name", load.builtin_names())
def test_a_policy_through_the_entry_equals_one_from_yaml(name, tmp_path, monkeypatch):
    dirs = {k: str(tmp_path / k) for k in ("workdir", "home", "tmp")}
    for d in dirs.values():
        os.mkdir(d)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))   # no user profiles
    shipped = load.load(name, **dirs)
    layers = load.read_layers(name)
    monkeypatch.setattr(_shipped, "TEXT", {})
    assert load.read_layers(name) == layers
    from_yaml = load.load(name, **dirs)
    assert from_yaml == shipped and repr(from_yaml) == repr(shipped)


def test_the_caller_gets_a_copy():
    raw, _ = load.read_layers("default")
    first = repr(raw)
    raw["filesystem"]["read"].append("mutated")
    raw["filesystem"].clear()
    assert repr(load.read_layers("default")[0]) == first


def test_a_changed_builtin_file_is_parsed_from_its_yaml(tmp_path, monkeypatch):
    d = tmp_path / "profiles"
    shutil.copytree(load.builtin_dir(), d)
    text = (d / "strict.yaml").read_text()
    (d / "strict.yaml").write_text(text + "\ndescription: changed\n"
                                   if "description:" not in text else
                                   text.replace("description:", "description: changed #", 1))
    monkeypatch.setattr(load, "builtin_dir", lambda: d)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    raw, _ = load.read_layers("strict")
    assert raw["description"].value.startswith("changed")
    # control: the unchanged file beside it is the shipped entry
    assert load.read_layers("default")[0] == _shipped.BUILD["default"](load.Item)


_PROBE = r"""
import json, sys
from confine.policy import load
before = "yaml" in sys.modules
raw, _ = load.read_layers(sys.argv[1])
print(json.dumps([before, "yaml" in sys.modules]))
"""


def _imports_yaml(ref: str, env_home: str) -> list[bool]:
    r = subprocess.run([sys.executable, "-c", _PROBE, ref], capture_output=True, text=True,
                       timeout=60, env={"PATH": "/usr/bin:/bin", "XDG_CONFIG_HOME": env_home,
                                        "HOME": env_home})
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_a_builtin_profile_loads_without_pyyaml_a_user_file_with_it(tmp_path):
    assert _imports_yaml("default", str(tmp_path)) == [False, False]
    assert _imports_yaml("claude-code", str(tmp_path)) == [False, False]
    own = tmp_path / "mine.yaml"
    own.write_text("extends: default\nfilesystem:\n  read: [/opt]\n")
    assert _imports_yaml(str(own), str(tmp_path)) == [False, True]
