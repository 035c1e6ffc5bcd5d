"""The guard's verdicts on names (confine/protect/guard.py), without a kernel: which
creations, renames and writes it refuses for the default patterns. The
end-to-end proof that the broker asks it is tests/test_guard_runtime.py."""
from __future__ import annotations

import pytest

from confine import protect
from confine.protect.guard import VET, Guard

W = "/w"


@pytest.fixture(scope="module")
def g():
    return Guard(W, protect.compile_patterns(None), extra=[("tools/hooks", True)],
                 global_hooks=[".githooks"], inodes=[(1, 2)])


@pytest.mark.parametrize("rel,kind", [
    (".envrc", "file"), ("a/b/.envrc", "file"), (".envrc", "symlink"), (".envrc", "link"),
    (".envrc", "node"), (".envrc", "dir"), (".mcp.json", "file"), (".vscode", "dir"),
    (".vscode/tasks.json", "file"), (".idea/x/y.xml", "file"), (".claude/settings.json", "file"),
    (".claude/commands", "dir"), (".claude/commands/x.md", "file"), (".codex/config.toml", "file"),
    (".git/hooks/pre-commit", "file"), ("sub/.git/hooks/post-checkout", "file"),
    (".git/modules/lib/hooks/pre-commit", "file"), (".git/worktrees/w/config.worktree", "file"),
    (".git/config", "file"), ("x/.git/config", "file"), (".gitmodules", "file"),
    (".git", "file"), ("sub/.git", "symlink"), (".claude", "symlink"),
    ("tools/hooks/pre-commit", "file"), ("pkg/.githooks/pre-push", "file"),
    (".bashrc", "file"), (".profile", "link"), (".confine-vet-1234", "file"),
    (".ENVRC", "file"), (".Git/Hooks/pre-commit", "file"), (".VSCode/tasks.json", "file"),
])
def test_refused_creations(g, rel, kind):
    assert g.create(f"{W}/{rel}", kind) is not None


@pytest.mark.parametrize("rel,kind", [
    ("main.py", "file"), ("envrc", "file"), ("a/.envrc.example", "file"), (".git", "dir"),
    (".git/hooks", "dir"), (".git/hooks/pre-commit.sample", "file"), (".git/HEAD", "file"),
    (".git/config.lock", "file"), (".git/refs/heads/config", "file"),
    (".git/refs/heads/hooks/x", "file"), (".git/objects/ab/cdef", "file"), (".claude", "dir"),
    (".claude/notes.md", "file"), ("docs/.vscode.md", "file"), ("link", "symlink"),
])
def test_allowed_creations(g, rel, kind):
    assert g.create(f"{W}/{rel}", kind) is None


def test_outside_the_workdir_is_not_the_guards_business(g):
    assert g.create("/elsewhere/.envrc", "file") is None
    assert g.create("/w2/.envrc", "file") is None      # a sibling, not below /w
    assert g.rename_to("/tmp/.git", ) is None


@pytest.mark.parametrize("rel", [".git", "sub/.git", ".git/modules/x", ".claude", ".vscode",
                                 ".git/hooks", ".envrc", ".git/config.worktree"])
def test_refused_rename_destinations(g, rel):
    assert g.rename_to(f"{W}/{rel}") not in (None, VET)


def test_git_config_only_through_the_lock_file(g):
    assert g.rename_to(f"{W}/.git/config") == VET
    assert g.rename_to(f"{W}/a/.git/modules/m/config") == VET
    assert g.rename_to(f"{W}/.git/HEAD") is None


def test_writes(g):
    assert g.write(f"{W}/.git/config", 5, 5) is not None
    assert g.write(f"{W}/ordinary", 1, 2) is not None         # a protected inode, another name
    assert g.write(f"{W}/ordinary", 5, 5) is None
    assert g.write(None, 5, 5) is None


def test_negated_pattern_is_not_guarded():
    g = Guard(W, protect.compile_patterns(list(protect.DEFAULT_PATTERNS) + ["!.idea/"]))
    assert g.create(f"{W}/.idea/workspace.xml", "file") is None
    assert g.create(f"{W}/.vscode/tasks.json", "file") is not None


def test_exact_paths_from_the_snapshot():
    """Roots recorded at start (e.g. the workdir target of a protected symlink)
    are guarded by exact path, whatever the patterns say."""
    g = Guard(W, (), extra=[("githooks", True), ("tools/fsmonitor", False)])
    assert g.create(f"{W}/githooks/pre-commit", "file") is not None
    assert g.write(f"{W}/tools/fsmonitor", 9, 9) is not None
    assert g.write(f"{W}/tools/other", 9, 9) is None
    assert g.rename_to(f"{W}/tools") is not None          # would bring a new tools/fsmonitor
    assert g.create(f"{W}/githooksx", "file") is None


@pytest.mark.parametrize("rel", [
    ".ENVRC", ".EnvRc", ".claude/ſettings.json",        # LATIN SMALL LETTER LONG S folds to s
    ".env\u200crc", "\ufeff.envrc", ".g\u200dit/hooks/pre-commit",   # ignorable code points
    ".\u212a", "sub/.VSCODE/tasks.json",                  # KELVIN SIGN is K (NFD)
])
def test_variants_a_folding_directory_would_open_are_refused(rel):
    g = Guard(W, protect.compile_patterns(list(protect.DEFAULT_PATTERNS) + [".k"]))
    assert g.create(f"{W}/{rel}", "file") is not None, rel


def test_component_verdicts_match_the_path_verdicts(g):
    """The broker judges components it found by descriptor (create_at and
    friends); they must agree with the path forms on every name, odd ones too."""
    names = [".envrc", "x (deleted)", "a\nb", "\x1b[2J", "l" * 300, ".git", "hooks",
             "pre-commit", ".claude", "settings.json", "ünï", ".confine-vet-1"]
    import itertools
    for a, b in itertools.product(names, repeat=2):
        comps = ("sub", a, b)
        path = "/".join((W,) + comps)
        folded = Guard.folded(comps)
        for kind in ("file", "dir", "symlink"):
            assert g.create_at(folded, kind) == g.create(path, kind), (comps, kind)
        assert g.rename_to_at(folded) == g.rename_to(path), comps
        assert g.write_at(folded, 7, 7) == g.write(path, 7, 7), comps
    assert g.create_at(None, "file") is None and g.write_at(None, 1, 2) is not None
