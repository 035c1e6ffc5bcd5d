"""The pointer-file and .gitmodules judgements (protect/gitlink.py), pure."""
from __future__ import annotations

import pytest

from confine.protect import gitlink
from confine.protect.guard import fold

ROOTS = ("/w",)


@pytest.mark.parametrize("comps,kind", [
    ((".git",), gitlink.GITFILE),
    (("a", "wt", ".git"), gitlink.GITFILE),
    ((".git", ".git"), None),                       # inside a git directory
    ((".git", "modules", "x", ".git"), None),
    (("r", ".git", "worktrees", "w", "commondir"), gitlink.COMMONDIR),
    (("r", ".git", "commondir"), None),             # a repository's own: never made this way
    (("r", ".git", "worktrees", "w", "x", "commondir"), None),
    (("commondir",), None),
])
def test_kind(comps, kind):
    assert gitlink.kind(comps) == kind


@pytest.mark.parametrize("data,parent,want", [
    (b"gitdir: /w/r/.git/worktrees/x\n", ("r", "x"), ("r", ".git", "worktrees", "x")),
    (b"gitdir: ../.git/modules/lib\n", ("r", "lib"), ("r", ".git", "modules", "lib")),
    (b"gitdir: ./../../r/.git/worktrees/x\n", ("a", "b"), ("r", ".git", "worktrees", "x")),
])
def test_gitdir_of(data, parent, want):
    assert gitlink.gitdir_of(data, parent, ROOTS) == want


@pytest.mark.parametrize("data", [
    b"gitdir: /elsewhere/.git\n",            # outside the workdir
    b"gitdir: /wx/.git\n",                   # a sibling whose name starts like it
    b"gitdir: ../../.git\n",                 # climbs out
    b"gitdir: ../r/.git/worktrees/x",        # no newline: not written yet
    b"gitdir: ../r/.git/worktrees/x\n\n",    # more than git writes
    b"gitdir:../r/.git/worktrees/x\n",
    b"gitdir: \n",
    b"gitdir: a\x00b\n",
])
def test_gitdir_of_refuses(data):
    with pytest.raises(ValueError):
        gitlink.gitdir_of(data, ("a",), ROOTS)


@pytest.mark.parametrize("comps,ok", [
    ((".git", "worktrees", "x"), True),
    (("r", ".git", "modules", "a", "b"), True),
    ((".git", "modules", "a", "modules", "b"), True),
    ((".git",), False),                                  # another repository's own
    ((".git", "worktrees"), False),
    ((".git", "worktrees", "x", "y"), False),
    ((".git", "modules", "a", "hooks"), False),
    ((".git", "modules", "a", "objects", "b"), False),
    (("r", "lib"), False),
])
def test_allowed_target(comps, ok):
    assert (gitlink.allowed_target(comps) is None) == ok


def test_worktree_of():
    gd = ("r", ".git", "modules", "lib")
    assert gitlink.worktree_of(gd, "../../../lib", fold) == ("r", "lib")
    for bad in ("/abs/lib", "../../../.git/x", "../../../../../x", "", "../../../r/.GIT"):
        with pytest.raises(ValueError):
            gitlink.worktree_of(gd, bad, fold)
    with pytest.raises(ValueError):          # not a submodule's git directory
        gitlink.worktree_of(("r", ".git", "worktrees", "x"), "../../../x", fold)


def _local(path: str) -> str | None:
    return "inside" if path.startswith("/w/") else None


@pytest.mark.parametrize("url,ok", [
    ("https://example.invalid/x.git", True),
    ("ssh://git@example.invalid/x.git", True),
    ("git@example.invalid:org/x.git", True),
    ("/srv/git/x", True),
    ("file:///srv/git/x", True),
    ("/w/r", False),
    ("file:///w/r", False),
    ("../x", False),
    ("./x", False),
    ("ext::sh -c id", False),
    ("fd::3", False),
    ("ssh://-oProxyCommand=x/y", False),
    ("-u x", False),
    ("!sh", False),
    ("x", False),
])
def test_url_problem(url, ok):
    assert (gitlink.url_problem(url, _local) is None) == ok


def test_gitmodules_problems():
    good = b'[submodule "a"]\n\tpath = a\n\turl = /srv/a\n\tbranch = main\n'
    assert gitlink.gitmodules_problems(good, _local) == []
    for bad in (good + b"\tupdate = !sh\n", good + b"\tupdate = rebase\n",
                b'[submodule "a"]\n\tpath = ../a\n', b'[submodule "a"]\n\tpath = x/.git/y\n',
                b'[core]\n\tfsmonitor = x\n', b'[submodule]\n\tpath = a\n',
                b'[submodule "a"]\n\tbranch = -x\n', b'[submodule "a"\n', b"\0"):
        assert gitlink.gitmodules_problems(bad, _local), bad
