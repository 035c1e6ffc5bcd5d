"""The rule for a config git rewrites during the run (gitconfig.vet_git_config),
the guard's verdict on existing repository configs, and which configs the
snapshot leaves without a bind. End to end: tests/e2e/test_git_existing.py."""
from __future__ import annotations

import os
import subprocess

from confine import protect
from confine.protect.guard import VET, Guard

PERSON = b"[core]\n\tbare = false\n\teditor = vim\n[filter \"lfs\"]\n\tclean = git-lfs clean\n"


def names(data: bytes, trusted: bytes | None) -> list[str] | str:
    bad, err = protect.vet_git_config(data, trusted)
    return err if err else [it.name for it in bad]


def test_safe_keys_pass_and_others_are_named():
    assert names(b"[user]\n\tname = a\n[remote \"o\"]\n\turl = x\n", None) == []
    assert names(b"[core]\n\tpager = less\n[alias]\n\tx = !sh\n", None) == ["core.pager", "alias.x"]


def test_the_persons_entries_may_stay_exactly_as_they_were():
    assert names(PERSON + b"[user]\n\tname = a\n", PERSON) == []
    # reordered, and under a header written another way, still the same entries
    assert names(b"[filter \"lfs\"]\n\tclean = git-lfs clean\n[core]\n\teditor = vim\n", PERSON) == []
    assert names(b"[core]\n\teditor = emacs\n", PERSON) == ["core.editor"]          # another value
    assert names(PERSON + b"[core]\n\teditor = vim\n", PERSON) == ["core.editor"]   # twice
    assert names(b"[filter \"LFS\"]\n\tclean = git-lfs clean\n", PERSON) == ["filter.LFS.clean"]
    assert names(b"[core]\n", PERSON) == []                                          # removed


def test_nul_bytes_and_syntax_errors_refuse_the_file():
    assert names(b"[user]\n\tname = a\0b\n", None) == "a NUL byte"
    assert names(b"[user\n", None).startswith("line ")


def test_the_guard_vets_a_rename_onto_an_existing_config_only_where_the_snapshot_said():
    g = Guard("/w", protect.compile_patterns(None), extra=[("r/.git/config", False),
                                                          ("b.git/config", False)],
              configs=[("r/.git/config", PERSON)])
    assert g.rename_to("/w/r/.git/config") == VET
    assert g.trusted_config(g.rel("/w/r/.git/config")) == PERSON
    assert g.rename_to("/w/b.git/config") not in (None, VET)         # kept its bind: refused
    assert g.rename_to("/w/new/.git/config") == VET                  # a new repository
    assert g.trusted_config(g.rel("/w/new/.git/config")) is None
    assert g.write("/w/r/.git/config", 1, 1) is not None
    assert g.create("/w/r/.git/config", "file") is not None


def test_snapshot_leaves_repository_configs_to_the_guard_only_when_asked(tmp_path):
    wd = str(tmp_path)
    env = {"PATH": "/usr/bin:/bin", "HOME": wd, "GIT_CONFIG_NOSYSTEM": "1"}
    for repo in ("r", "v/x"):
        subprocess.run(["git", "init", "-q", os.path.join(wd, repo)], check=True, env=env)
    os.link(os.path.join(wd, "v/x/.git/config"), os.path.join(wd, "v/hard"))
    plain = protect.snapshot(wd, home=wd, git_configs=[])
    ro = {"/".join(m.rel) for m in plain.mount_plan.mounts if m.readonly}
    assert plain.checked_configs == () and "r/.git/config" in ro
    snap = protect.snapshot(wd, home=wd, git_configs=[], guarded=True)
    ro = {"/".join(m.rel) for m in snap.mount_plan.mounts if m.readonly}
    # a hard-linked config keeps its bind: the other name could write it
    assert snap.checked_configs == ("r/.git/config",), snap.checked_configs
    assert "r/.git/config" not in ro and "r/.git/hooks" in ro and "v/x/.git/config" in ro
    assert Guard.from_snapshot(snap).rename_to(f"{snap.workdir}/r/.git/config") == VET
    assert snap.describe()["checked_configs"] == ["r/.git/config"]
