"""Snapshot.describe(): the JSON-able account of what a run protects and how
(--dry-run prints it). No root: an ordinary temp workdir."""
from __future__ import annotations

import json
import os

from confine import protect


def test_describe_lists_read_only_binds_and_guard_only_paths(tmp_path):
    wd = tmp_path / "w"
    (wd / ".vscode").mkdir(parents=True)
    (wd / ".vscode" / "tasks.json").write_text("{}")
    (wd / ".envrc").write_text("export X=1\n")
    (wd / "real-mcp.json").write_text("{}")
    os.symlink("real-mcp.json", wd / ".mcp.json")      # a mount cannot cover the link itself
    snap = protect.snapshot(str(wd), git_configs=[])
    d = json.loads(json.dumps(snap.describe()))
    assert d == snap.describe()
    assert d["workdir"] == str(wd.resolve())
    assert d["patterns"] == list(protect.DEFAULT_PATTERNS)
    assert {".envrc", ".vscode"} <= set(d["read_only_binds"])
    assert ".mcp.json" not in d["read_only_binds"]
    assert {g["path"] for g in d["guard_only"]} == {".mcp.json"}
    assert "symlink" in d["guard_only"][0]["reason"]
    by_path = {p["path"]: p for p in d["protected"]}
    assert by_path[".envrc"]["read_only_bind"] and not by_path[".mcp.json"]["read_only_bind"]
    assert by_path["real-mcp.json"]["why"] == "target of symlink .mcp.json"
    assert d["bases"] and isinstance(d["bases_complete"], bool)


def test_guard_from_snapshot_judges_what_the_snapshot_found(tmp_path):
    """Guard.from_snapshot: the patterns, the roots found (a symlink target
    that no pattern names), the protected inodes and the workdir's paths."""
    wd = tmp_path / "w"
    wd.mkdir()
    (wd / "real-mcp.json").write_text("{}")
    os.symlink("real-mcp.json", wd / ".mcp.json")
    (wd / "plain.txt").write_text("x")
    snap = protect.snapshot(str(wd), git_configs=[])
    g = protect.Guard.from_snapshot(snap)
    w = snap.workdir
    assert g.workdir == w and g.patterns
    assert g.write(f"{w}/real-mcp.json", 0, 0) is not None        # a root: the link's target
    assert g.write(f"{w}/plain.txt", 0, 0) is None
    st = os.stat(wd / "real-mcp.json")
    assert g.write(None, st.st_dev, st.st_ino) is not None        # its inode, by any name
    assert g.create(f"{w}/sub/.envrc", "file") is not None        # a default pattern
    assert set(g.roots) >= {b.path for b in snap.mount_plan.bases}
