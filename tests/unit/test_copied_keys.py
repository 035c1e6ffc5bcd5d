"""protect/copied.py's judgement of an agent's copy (pure: bytes in, verdict out):
protected key paths with `*` put back, duplicate keys and NaN refused, a parent that
is no longer an object refused, a new project's empty defaults not counted."""
from __future__ import annotations

import base64
import json

from confine.protect.copied import judge

KEYS = ["mcpServers", "projects.*.mcpServers", "projects.*.allowedTools"]


def _start(doc: object) -> dict[str, object]:
    return {"data": base64.b64encode(json.dumps(doc).encode()).decode()}


def _judge(start: object, new: str) -> tuple[object, str, list[str]]:
    data, why, reverted = judge(_start(start), new.encode(), KEYS)
    return (None if data is None else json.loads(data)), why, reverted


def test_planted_servers_dropped_rest_kept():
    start = {"projects": {"/a": {"mcpServers": {"ok": {"command": "x"}}}}}
    new = {"n": 2, "mcpServers": {"evil": {"command": "sh"}},
           "projects": {"/a": {"mcpServers": {"ok": {"command": "evil"}}},
                        "/b": {"allowedTools": ["Bash(*)"], "history": [1]}}}
    doc, why, reverted = _judge(start, json.dumps(new))
    assert why == "" and sorted(reverted) == ["mcpServers", "projects./a.mcpServers",
                                              "projects./b.allowedTools"]
    assert doc == {"n": 2, "projects": {"/a": {"mcpServers": {"ok": {"command": "x"}}},
                                         "/b": {"history": [1]}}}


def test_unchanged_and_empty_defaults_written_as_is():
    text = json.dumps({"n": 3, "projects": {"/new": {"mcpServers": {}, "allowedTools": []}}})
    data, why, reverted = judge(_start({"n": 1}), text.encode(), KEYS)
    assert (data, why, reverted) == (text.encode(), "", [])


def test_duplicate_keys_nan_and_garbage_refused():
    for text in ('{"mcpServers": {}, "mcpServers": {"e": 1}}', '{"n": NaN}', '{"n": 1,',
                 "\xff"):
        doc, why, _ = _judge({}, text)
        assert doc is None and "not valid JSON" in why, text


def test_a_parent_no_longer_an_object_is_refused():
    doc, why, _ = _judge({"projects": {"/a": {"mcpServers": {"s": 1}}}}, '{"projects": []}')
    assert doc is None and "cannot be put back" in why


def _profile(tmp_path, body: str):
    from confine.errors import ProfileError
    from confine.policy import load as _load
    home, wd = tmp_path / "home", tmp_path / "wd"
    for d in (home, wd, tmp_path / "tmp"):
        d.mkdir(exist_ok=True)
    prof = tmp_path / "p.yaml"
    prof.write_text("extends: default\nfilesystem:\n  copied:\n" + body)
    try:
        return _load.load(str(prof), workdir=str(wd), home=str(home), tmp=str(tmp_path / "tmp"))
    except ProfileError as e:
        return str(e)


def test_profile_key_parsed_and_bad_entries_named(tmp_path):
    pol = _profile(tmp_path, "    - path: ?~/.claude.json\n      protected_keys: [mcpServers]\n")
    assert [c.rel for c in pol.copied] == [".claude.json"]
    assert pol.copied[0].protected_keys == ("mcpServers",)
    assert not any(w.path.endswith(".claude.json") for w in pol.write)   # never a grant
    for body, said in (
            ("    - path: ?~/.x\n      protect: [a]\n", "p.yaml:5: unknown key"),
            ("    - path: ?~/.x\n      protected_keys: [a..b]\n", "p.yaml:5"),
            ("    - path: ?/etc/x.json\n", "not a file in HOME"),
            ("    - path: ~/.missing.json\n", "does not exist"),
            ("    - protected_keys: [a]\n", "without 'path'")):
        got = _profile(tmp_path, body)
        assert isinstance(got, str) and said in got, (body, got)
