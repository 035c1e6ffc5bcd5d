"""The protected-path pattern language (confine/policy/patterns.py): what it
accepts, what `!` and a leading `/` do, and that the snapshot finds what the
patterns name. No root."""
from __future__ import annotations

import pytest

from confine import protect
from confine.policy import patterns


def test_default_patterns_compile_and_cover_the_issue_list():
    pats = patterns.compile_patterns(None)
    texts = {p.text for p in pats}
    for need in (".git/hooks/", ".git/config", ".gitmodules", ".envrc", ".vscode/", ".idea/",
                 ".bashrc", ".bash_profile", ".bash_login", ".profile", ".zshrc", ".zprofile",
                 ".zshenv", ".zlogin", ".mcp.json", ".claude/commands/", ".claude/agents/",
                 ".claude/settings.json", ".codex/"):
        assert need in texts, need
    git = [p for p in pats if p.git]
    assert {p.comps for p in git} >= {("hooks",), ("config",)}


@pytest.mark.parametrize("bad", ["", "/", "a/../b", "./", "**/x", ".git/", "/.git/config",
                                 "a//b", "!nothing-earlier"])
def test_bad_patterns_are_refused(bad):
    with pytest.raises(ValueError):
        patterns.compile_patterns([".envrc", bad])


def test_pattern_negation_and_anchor(tmp_path):
    pats = patterns.compile_patterns(list(patterns.DEFAULT_PATTERNS) + ["!.idea/", "/top.sh", "*.hook"])
    texts = [p.text for p in pats]
    assert ".idea/" not in texts and "/top.sh" in texts
    wd = tmp_path / "w"
    (wd / "a").mkdir(parents=True)
    for rel in ("top.sh", "a/top.sh", ".idea/x", "a/b.hook", "a/.envrc"):
        p = wd / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("x")
    snap = protect.snapshot(str(wd), pats, git_configs=[])
    assert set(snap.roots) == {"top.sh", "a/b.hook", "a/.envrc"}


def test_the_runtime_and_the_loader_share_one_pattern_list():
    """confine.protect re-exports the policy's pattern language, not a copy."""
    assert protect.DEFAULT_PATTERNS is patterns.DEFAULT_PATTERNS
    assert protect.compile_patterns is patterns.compile_patterns
    assert protect.Pattern is patterns.Pattern
