"""protect/held.py called directly: the index edit against real git, the copy
out of a held area an agent prepared, and the person's show/apply/discard.

The index edit is checked by git itself (`ls-files -v`, `status`, `fsck`,
`commit -a`) for index versions 2, 3 and 4 and both object formats; a control
without the edit shows git reporting the missing files as deleted. The held
area is attacked as the agent could: symlinks to the person's files, a FIFO,
more entries than the cap, names with newlines and escape sequences.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile

import pytest

from confine import protect
from confine.protect import held

ENV = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "GIT_CONFIG_NOSYSTEM": "1",
       "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "t",
       "GIT_COMMITTER_EMAIL": "t@e"}


def git(*a: str, cwd: str) -> str:
    return subprocess.run(["git", *a], cwd=cwd, env=ENV, check=True, capture_output=True,
                          text=True).stdout


@pytest.fixture
def tmp():
    d = tempfile.mkdtemp(prefix="confine-held-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.mark.parametrize("fmt", ["sha1", "sha256"])
@pytest.mark.parametrize("ver", ["2", "3", "4"])
def test_skip_worktree_edit_is_accepted_by_git(tmp, fmt, ver):
    r = os.path.join(tmp, "r")
    subprocess.run(["git", "init", "-q", f"--object-format={fmt}", r], env=ENV, check=True)
    git("config", "index.version", ver, cwd=r)
    for rel in (".envrc", ".vscode/t.json", "a/b", "a/.envrc", "long/" + "n" * 200 + "/" + "m" * 200):
        os.makedirs(os.path.dirname(os.path.join(r, rel)) or r, exist_ok=True)
        with open(os.path.join(r, rel), "w") as f:
            f.write(rel + "\n")
    git("add", "-A", cwd=r)
    git("commit", "-qm", "x", cwd=r)
    for rel in (".envrc", "a/.envrc"):
        os.unlink(os.path.join(r, rel))
    shutil.rmtree(os.path.join(r, ".vscode"))
    # control: git sees the missing files as deleted
    assert git("status", "--porcelain", cwd=r).count(" D ") == 3
    path = os.path.join(r, ".git", "index")
    data = open(path, "rb").read()
    new = held.mark_skip_worktree(data, lambda n: n in (b".envrc", b"a/.envrc")
                                  or n.startswith(b".vscode/"))
    assert new is not None and new != data
    with open(path, "wb") as f:
        f.write(new)
    assert held.skip_worktree_paths(new) == {b".envrc", b"a/.envrc", b".vscode/t.json"}
    flags = dict(line.split(" ", 1)[::-1] for line in git("ls-files", "-v", cwd=r).splitlines())
    assert flags == {".envrc": "S", ".vscode/t.json": "S", "a/.envrc": "S", "a/b": "H",
                     "long/" + "n" * 200 + "/" + "m" * 200: "H"}
    assert git("status", "--porcelain", cwd=r) == ""
    git("fsck", cwd=r)
    with open(os.path.join(r, "a/b"), "a") as f:
        f.write("more\n")
    git("commit", "-qam", "y", cwd=r)
    assert git("show", "--name-status", "--format=", "HEAD", cwd=r) == "M\ta/b\n"
    # and cleared again (what `confine held apply` does after putting files back)
    back = held.mark_skip_worktree(open(path, "rb").read(), lambda n: True, on=False)
    assert back is not None and held.skip_worktree_paths(back) == set()


def test_skip_worktree_edit_refuses_what_it_cannot_check():
    assert held.mark_skip_worktree(b"not an index at all, no", lambda n: True) is None
    r = tempfile.mkdtemp()
    try:
        subprocess.run(["git", "init", "-q", r], env=ENV, check=True)
        open(os.path.join(r, "f"), "w").close()
        git("add", "f", cwd=r)
        data = open(os.path.join(r, ".git/index"), "rb").read()
        bad = data[:-1] + bytes([data[-1] ^ 1])             # a checksum that does not match
        assert held.mark_skip_worktree(bad, lambda n: True) is None
        assert held.mark_skip_worktree(data[:40], lambda n: True) is None
    finally:
        shutil.rmtree(r)


def _guard(wd: str) -> protect.Guard:
    return protect.Guard(wd, protect.compile_patterns(protect.DEFAULT_PATTERNS))


def test_collect_keeps_only_regular_files_and_dirs_at_protected_paths(tmp, monkeypatch):
    wd, area, base = (os.path.join(tmp, n) for n in ("wd", "area", "state"))
    os.makedirs(wd)
    secret = os.path.join(tmp, "secret")
    with open(secret, "w") as f:
        f.write("SECRET\n")
    os.makedirs(os.path.join(area, "c", ".vscode", "deep"))
    with open(os.path.join(area, "c", ".envrc"), "w") as f:
        f.write("export A=1\n")
    with open(os.path.join(area, "c", ".vscode", "deep", "t.json"), "w") as f:
        f.write("{}\n")
    os.symlink(secret, os.path.join(area, "c", ".vscode", "link"))
    os.symlink(secret, os.path.join(area, ".mcp.json"))
    os.symlink(tmp, os.path.join(area, ".idea"))
    os.mkfifo(os.path.join(area, "c", ".vscode", "fifo"))
    with open(os.path.join(area, "c", "scratch.txt"), "w") as f:
        f.write("not protected: not kept\n")
    weird = "x\n\x1b[2J"
    os.makedirs(os.path.join(area, weird))
    with open(os.path.join(area, weird, ".envrc"), "w") as f:
        f.write("w\n")
    fd = os.open(area, os.O_PATH | os.O_DIRECTORY)
    try:
        h = held.collect(fd, _guard(wd), "20260101-000000-1", base=base)
    finally:
        os.close(fd)
    assert sorted(r.path for r in h.roots) == ["c/.envrc", "c/.vscode",
                                               weird + "/.envrc"]
    assert {i.path for i in h.items} == {"c/.envrc", "c/.vscode", "c/.vscode/deep",
                                         "c/.vscode/deep/t.json", weird + "/.envrc"}
    left = "\n".join(h.left)
    for what in ("c/.vscode/link: a symlink", ".mcp.json: a symlink", ".idea: a symlink",
                 "c/.vscode/fifo: not a regular file"):
        assert what in left, left
    text = held.format_held(h)
    assert "\x1b" not in text and "x\\x0a\\x1b[2J/.envrc" in text, text
    for dp, dn, fn in os.walk(base):
        for n in dn + fn:
            p = os.path.join(dp, n)
            assert not os.path.islink(p) and (os.path.isdir(p) or os.path.isfile(p)), p
            assert "SECRET" not in (open(p).read() if os.path.isfile(p) else "")
    assert not os.path.exists(os.path.join(base, h.run_id, "files", "c", "scratch.txt"))


def test_collect_is_bounded(tmp, monkeypatch):
    monkeypatch.setattr(held, "ENTRY_CAP", 50)
    monkeypatch.setattr(held, "COPY_CAP", 1000)
    wd, area = os.path.join(tmp, "wd"), os.path.join(tmp, "area")
    os.makedirs(wd)
    os.makedirs(os.path.join(area, ".vscode"))
    for i in range(80):
        with open(os.path.join(area, ".vscode", f"f{i:03d}"), "w") as f:
            f.write("x" * 10)
    with open(os.path.join(area, ".envrc"), "w") as f:
        f.write("y" * 5000)                                  # over the byte cap
    fd = os.open(area, os.O_PATH | os.O_DIRECTORY)
    try:
        h = held.collect(fd, _guard(wd), "20260101-000000-2", base=os.path.join(tmp, "s"))
    finally:
        os.close(fd)
    assert len(h.items) <= 50
    assert any("over the 50 entries" in n for n in h.left), h.left
    assert any(n.startswith(".envrc: over the") for n in h.left), h.left
    assert ".envrc" not in {i.path for i in h.items}


def test_apply_only_after_show_and_never_over_or_through(tmp):
    wd, area, base = (os.path.join(tmp, n) for n in ("wd", "area", "state"))
    os.makedirs(os.path.join(wd, "c"))
    os.makedirs(os.path.join(area, "c", ".vscode"))
    os.makedirs(os.path.join(area, "d"))
    for rel in ("c/.envrc", "c/.vscode/t.json", "d/.envrc"):
        with open(os.path.join(area, rel), "w") as f:
            f.write(rel + "\n")
    os.makedirs(os.path.join(wd, "d"))
    fd = os.open(area, os.O_PATH | os.O_DIRECTORY)
    try:
        h = held.collect(fd, _guard(wd), "20260101-000000-3", base=base)
    finally:
        os.close(fd)
    m = held.load(h.run_id, base)
    roots = held.select(m, [])
    with pytest.raises(held.HeldError, match="not shown yet"):
        held.apply(m, roots)
    lines: list[str] = []
    held.show(m, roots, lines.append)
    assert "   c/.envrc" in lines
    m = held.load(h.run_id, base)
    # the destination directory replaced by a symlink to elsewhere since it was shown
    os.rename(os.path.join(wd, "d"), os.path.join(wd, "d.old"))
    os.symlink(tmp, os.path.join(wd, "d"))
    with pytest.raises(held.HeldError, match="a symlink"):
        held.apply(m, held.select(m, ["d/.envrc"]))
    assert not os.path.exists(os.path.join(tmp, ".envrc"))
    # the destination exists
    with open(os.path.join(wd, "c", ".envrc"), "w") as f:
        f.write("mine\n")
    with pytest.raises(held.HeldError, match="exists"):
        held.apply(m, held.select(m, ["c/.envrc"]))
    assert open(os.path.join(wd, "c", ".envrc")).read() == "mine\n"
    # the held copy changed after it was shown
    with open(os.path.join(base, h.run_id, "files", "c", ".vscode", "t.json"), "a") as f:
        f.write("changed\n")
    with pytest.raises(held.HeldError, match="changed since"):
        held.apply(m, held.select(m, [os.path.join(wd, "c/.vscode")]))
    assert not os.path.exists(os.path.join(wd, "c", ".vscode"))
    held.show(m, held.select(m, ["c/.vscode"]), lines.append)
    m = held.load(h.run_id, base)
    assert held.apply(m, held.select(m, ["c/.vscode"])) == ["c/.vscode"]
    assert open(os.path.join(wd, "c/.vscode/t.json")).read() == "c/.vscode/t.json\nchanged\n"
    assert held.discard(m, held.select(m, [])) == ["c/.envrc", "c/.vscode", "d/.envrc"]
    assert not os.path.exists(os.path.join(base, h.run_id))
    with pytest.raises(held.HeldError, match="is not held"):
        held.select({"items": [], "workdir": wd, "run": "x"}, ["nope"])
