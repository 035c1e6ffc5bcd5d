"""Refs and objects as git reads them (issue 21, item 3), in-process.

The exit check reads refs and objects itself (gitdata.py).  Where it disagrees
with git, an agent can hide a branch: a loose ref `<sha> anything` (git takes
the hash), a ref that is a symlink, a symref chain, packed-refs only, the
stash, FETCH_HEAD, a worktree's HEAD.  Each form is built here with real git
and compared with what git itself resolves (`git rev-parse`, run outside as
root, no config but the repository's): the differential part.  Then each form
points a branch at a commit made with plumbing that adds `.envrc`,
`.vscode/tasks.json` and `.claude/settings.json`; the check must name the ref,
and the same form pointing at a harmless commit is silent (the control).
Objects: a pack copy and a loose copy under one id with different content, a
commit-graph that gives a commit another tree, a version 1 pack index: each is
"cannot decide" or quarantine, never a silent pass.

The end-to-end part runs a real confined process (root-started and
unprivileged): the agent hides branches in five forms at once, the exit check
names each, and the person's `git checkout` afterwards shows git reads them.
"""
from __future__ import annotations

import hashlib
import os
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

from confine import protect
from confine.protect import gitdata

from .test_scan_holes import ACTED, GIT, GITENV, _inside, _repo

PROTECTED = (".envrc", ".vscode/tasks.json", ".claude/settings.json")


def git(wd, *a: str, check: bool = True, input: str | None = None) -> str:
    p = subprocess.run([GIT, "-C", str(wd), *a], env=GITENV, capture_output=True, text=True,
                       input=input)
    if check:
        assert p.returncode == 0, (a, p.stderr)
    return p.stdout.strip()


def rev_parse(wd, name: str) -> str | None:
    out = git(wd, "rev-parse", "-q", "--verify", "--end-of-options", name, check=False)
    return out or None


def plumbing_commit(wd, evil: bool) -> str:
    """A commit on top of HEAD made without a worktree: adds the protected files
    (evil) or an ordinary one."""
    base = git(wd, "rev-parse", "HEAD^{tree}")
    blob = git(wd, "hash-object", "-w", "--stdin", input="echo pwned\n")
    idx = str(Path(wd) / ".git" / "tmp-index")
    env = dict(GITENV, GIT_INDEX_FILE=idx)
    subprocess.run([GIT, "-C", str(wd), "read-tree", base], env=env, check=True)
    for path in (PROTECTED if evil else ("src/ok.py",)):
        subprocess.run([GIT, "-C", str(wd), "update-index", "--add", "--cacheinfo",
                        f"100644,{blob},{path}"], env=env, check=True)
    tree = subprocess.run([GIT, "-C", str(wd), "write-tree"], env=env, check=True,
                          capture_output=True, text=True).stdout.strip()
    os.unlink(idx)
    return git(wd, "commit-tree", tree, "-p", "HEAD", "-m", "x")


def started(tmp_path) -> tuple[Path, protect.Snapshot]:
    wd = tmp_path / "r"
    git(tmp_path, "init", "-q", "-b", "main", str(wd))
    (wd / "a").write_text("a")
    git(wd, "add", "a")
    git(wd, "commit", "-qm", "one")
    git(wd, "tag", "-a", "-m", "t", "v1")
    git(wd, "branch", "old")
    return wd, protect.snapshot(str(wd), git_configs=[])


def check(tmp_path, snap) -> str:
    rep = protect.verify_and_revert(snap, quarantine_dir=str(tmp_path / "q"))
    return "\n".join(f"{c.action} {c.path}: {c.detail}" for c in rep.alerts)


# --- the ref forms: each makes `name` point at commit c (as git reads it) -----------------

def _loose(wd, name, text):
    p = Path(wd) / ".git" / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)


def form_trailing_text(wd, c):
    _loose(wd, "refs/heads/topic", f"{c} anything at all\n")
    return "refs/heads/topic"


def form_trailing_tab(wd, c):
    _loose(wd, "refs/heads/topic", f"{c}\tx")
    return "refs/heads/topic"


def form_upper_case(wd, c):
    _loose(wd, "refs/heads/topic", c.upper() + "\r\n")
    return "refs/heads/topic"


def form_symlink_to_file(wd, c):
    (Path(wd) / ".cache-x").write_text(c + "\n")
    (Path(wd) / ".git/refs/heads/topic").symlink_to("../../../.cache-x")
    return "refs/heads/topic"


def form_symlink_to_symlink(wd, c):
    (Path(wd) / ".cache-x").write_text(c + "\n")
    (Path(wd) / "l2").symlink_to(".cache-x")
    (Path(wd) / ".git/refs/heads/topic").symlink_to(str(Path(wd) / "l2"))
    return "refs/heads/topic"


def form_symlink_symref(wd, c):
    git(wd, "update-ref", "refs/heads/hidden", c)
    (Path(wd) / ".git/refs/heads/topic").symlink_to("refs/heads/hidden")
    return "refs/heads/topic"


def form_symlinked_refs_dir(wd, c):
    d = Path(wd) / "stash-dir"
    d.mkdir()
    (d / "topic").write_text(c + "\n")
    (Path(wd) / ".git/refs/heads/sub").symlink_to(str(d))
    return "refs/heads/sub/topic"


def form_symlinked_refs_top(wd, c):
    g = Path(wd) / ".git"
    (g / "refs").rename(g / "refs-real")
    (g / "refs").symlink_to("refs-real")
    git(wd, "update-ref", "refs/heads/topic", c)
    return "refs/heads/topic"


def form_packed_only(wd, c):
    git(wd, "update-ref", "refs/heads/topic", c)
    git(wd, "pack-refs", "--all")
    assert not (Path(wd) / ".git/refs/heads/topic").exists()
    return "refs/heads/topic"


def form_packed_unsorted_no_header(wd, c):
    packed = Path(wd) / ".git/packed-refs"
    old = packed.read_text() if packed.exists() else ""
    lines = [ln for ln in old.splitlines() if not ln.startswith("#")]
    packed.write_text(f"{c} refs/heads/topic\n" + "\n".join(lines) + ("\n" if lines else ""))
    return "refs/heads/topic"


def form_loose_over_packed(wd, c):
    git(wd, "update-ref", "refs/heads/topic", "HEAD")
    git(wd, "pack-refs", "--all")
    _loose(wd, "refs/heads/topic", c + "\n")
    return "refs/heads/topic"


def form_symref(wd, c):
    git(wd, "update-ref", "refs/heads/hidden", c)
    git(wd, "symbolic-ref", "refs/heads/topic", "refs/heads/hidden")
    return "refs/heads/topic"


def form_symref_chain_4(wd, c):
    git(wd, "update-ref", "refs/heads/h0", c)
    for i in range(1, 5):
        _loose(wd, f"refs/heads/h{i}", f"ref:\trefs/heads/h{i - 1}  \n")
    git(wd, "symbolic-ref", "refs/heads/topic", "refs/heads/h4")
    return "refs/heads/h4"


def form_head_symref(wd, c):
    git(wd, "update-ref", "refs/heads/topic", c)
    git(wd, "symbolic-ref", "HEAD", "refs/heads/topic")
    return "HEAD"


def form_stash(wd, c):
    git(wd, "update-ref", "refs/stash", c)
    return "refs/stash"


def form_fetch_head(wd, c):
    head = git(wd, "rev-parse", "HEAD")
    _loose(wd, "FETCH_HEAD", f"{c}\t\tbranch 'topic' of https://example.invalid/r\n"
                             f"{head}\tnot-for-merge\tbranch 'main' of x\n")
    return "FETCH_HEAD"


def form_orig_head(wd, c):
    _loose(wd, "ORIG_HEAD", c + "\n")
    return "ORIG_HEAD"


def form_tag_object(wd, c):
    git(wd, "tag", "-a", "-m", "t", "vx", c)
    git(wd, "pack-refs", "--all")       # with a peeled line
    return "refs/tags/vx"


def form_worktree_head(wd, c):
    git(wd, "worktree", "add", "-q", "--detach", str(Path(wd).parent / "wt2"))
    wid = os.listdir(Path(wd) / ".git/worktrees")[0]
    _loose(wd, f"worktrees/{wid}/HEAD", c + "\n")
    return f"worktrees/{wid}/HEAD"


def form_worktree_bisect(wd, c):
    _loose(wd, "refs/bisect/bad", c + "\n")
    return "refs/bisect/bad"


FORMS = [form_trailing_text, form_trailing_tab, form_upper_case, form_symlink_to_file,
         form_symlink_to_symlink, form_symlink_symref, form_symlinked_refs_dir, form_symlinked_refs_top,
         form_packed_only,
         form_packed_unsorted_no_header, form_loose_over_packed, form_symref, form_symref_chain_4,
         form_head_symref, form_stash, form_fetch_head, form_orig_head, form_tag_object,
         form_worktree_head, form_worktree_bisect]


def _view(wd, gd: str = ".git") -> dict[str, str | None]:
    """Every ref the checker reads in the git directory gd, resolved as it resolves them."""
    st = protect.snapshot(str(wd), git_configs=[]).git_state[gd]
    assert st.refs_err is None, st.refs_err
    return {n: gitdata._resolve(st.refs, n) for n in st.refs}


def _peel(wd, v: str) -> str:
    return git(wd, "rev-parse", v + "^{}")


@pytest.mark.parametrize("form", FORMS, ids=lambda f: f.__name__[5:])
def test_the_checker_resolves_each_ref_form_as_git_does(tmp_path, form):
    """Differential: what the checker reads for every ref equals git's rev-parse, and
    every ref git lists (for-each-ref) the checker has, with the same value."""
    wd, _snap = started(tmp_path)
    c = plumbing_commit(wd, evil=True)
    name = form(wd, c)
    if name.startswith("worktrees/"):    # a linked worktree's git directory is checked itself
        got = _view(wd, ".git/" + name.rsplit("/", 1)[0]).get("HEAD")
    else:
        got = _view(wd).get(name)
    view = _view(wd)
    assert got is not None and _peel(wd, got) == c, (name, got, view)
    assert _peel(wd, rev_parse(wd, name) or "") == c          # git reads it too
    for ref, v in view.items():
        if "@line" in ref or v is None:
            continue
        assert v == rev_parse(wd, ref), ref
    listed = git(wd, "for-each-ref", "--format=%(refname) %(objectname)")
    for line in listed.splitlines():
        ref, oid = line.split(" ")
        assert view.get(ref) == oid, (ref, view)


def test_forms_git_refuses_are_not_resolved_to_a_commit(tmp_path):
    """git's own limits: a chain of five symrefs, a target that is no ref name, a
    vertical tab after the hash (not git's whitespace): git resolves none of them;
    the checker gives no commit for them either (None or cannot decide)."""
    wd, _snap = started(tmp_path)
    c = git(wd, "rev-parse", "HEAD")
    git(wd, "update-ref", "refs/heads/h0", c)
    for i in range(1, 6):
        _loose(wd, f"refs/heads/h{i}", f"ref: refs/heads/h{i - 1}\n")
    _loose(wd, "refs/heads/bad", "ref: refs/heads/../heads/h0\n")
    _loose(wd, "refs/heads/vt", c + "\vx\n")
    view = _view(wd)
    assert rev_parse(wd, "refs/heads/h4") == c and view["refs/heads/h4"] == c
    for ref in ("refs/heads/h5", "refs/heads/bad", "refs/heads/vt"):
        assert rev_parse(wd, ref) is None, ref
        assert view[ref] is None or view[ref][0] in "?!", (ref, view[ref])


@pytest.mark.parametrize("form", FORMS, ids=lambda f: f.__name__[5:])
def test_each_ref_form_pointing_at_protected_files_is_reported(tmp_path, form):
    wd, snap = started(tmp_path)
    name = form(wd, plumbing_commit(wd, evil=True))
    text = check(tmp_path, snap)
    assert name.split("/")[-1] in text and ".envrc" in text, text
    assert ".claude/settings.json" in text and ".vscode/tasks.json" in text, text


@pytest.mark.parametrize("form", FORMS, ids=lambda f: f.__name__[5:])
def test_each_ref_form_pointing_at_a_harmless_commit_is_silent(tmp_path, form):
    """The control: the same form, an ordinary commit: no alert at all."""
    wd, snap = started(tmp_path)
    form(wd, plumbing_commit(wd, evil=False))
    assert check(tmp_path, snap) == ""


def test_a_stash_with_untracked_protected_files_is_reported(tmp_path):
    """`git stash -u` keeps untracked files in a third parent, whose tree is not the
    stash's own: `git stash pop` writes them."""
    wd, snap = started(tmp_path)
    (wd / ".envrc").write_text("echo pwned\n")
    (wd / "a").write_text("changed")
    git(wd, "stash", "push", "-u", "-q")
    assert not (wd / ".envrc").exists()
    text = check(tmp_path, snap)
    assert "refs/stash" in text and ".envrc" in text, text


def test_an_older_stash_entry_is_reported(tmp_path):
    wd, snap = started(tmp_path)
    (wd / ".envrc").write_text("echo pwned\n")
    git(wd, "stash", "push", "-u", "-q")
    (wd / "a").write_text("changed")
    git(wd, "stash", "push", "-q")
    text = check(tmp_path, snap)
    assert "refs/stash@{1}" in text and ".envrc" in text, text


@pytest.mark.parametrize("symlinked", [False, True], ids=["file", "symlink"])
def test_every_line_of_fetch_head_is_checked(tmp_path, symlinked):
    """`git merge FETCH_HEAD` merges every line not marked not-for-merge, not only the
    first one that rev-parse reads."""
    wd, snap = started(tmp_path)
    head, c = git(wd, "rev-parse", "HEAD"), plumbing_commit(wd, evil=True)
    text = f"{head}\t\tbranch 'main' of x\n{c}\t\tbranch 'topic' of x\n"
    if symlinked:
        (wd / ".fh").write_text(text)
        (wd / ".git/FETCH_HEAD").symlink_to("../.fh")
    else:
        _loose(wd, "FETCH_HEAD", text)
    out = check(tmp_path, snap)
    assert "FETCH_HEAD@line2" in out and ".envrc" in out, out


def test_broken_and_unreadable_refs_are_cannot_decide(tmp_path):
    """Content git treats as broken, a symlink out of the workdir: named, cannot decide."""
    wd, snap = started(tmp_path)
    outside = tmp_path / "outside-ref"
    outside.write_text(plumbing_commit(wd, evil=True) + "\n")
    (wd / ".git/refs/heads/out").symlink_to(str(outside))
    _loose(wd, "refs/heads/junk", "zz" * 20 + "\n")
    text = check(tmp_path, snap)
    assert "refs/heads/out" in text and "cannot decide" in text, text
    assert "refs/heads/junk" in text, text


def test_an_unreadable_directory_of_refs_is_cannot_decide(tmp_path):
    wd, snap = started(tmp_path)
    (wd / ".git/refs/heads/sub").mkdir()
    (wd / ".git/refs/heads/sub/topic").write_text(plumbing_commit(wd, evil=True) + "\n")
    os.rename(wd / ".git/refs/heads/sub", tmp_path / "sub-outside")
    (wd / ".git/refs/heads/sub").symlink_to(tmp_path / "sub-outside")
    assert rev_parse(wd, "refs/heads/sub/topic")                  # git reads through it
    text = check(tmp_path, snap)
    assert "cannot decide" in text and "refs/heads/sub" in text, text


def test_a_reftable_made_during_the_run_is_cannot_decide(tmp_path):
    """Refs in the reftable format are not read by this check: a change is named."""
    wd, snap = started(tmp_path)
    (wd / ".git/reftable").mkdir()
    (wd / ".git/reftable/tables.list").write_text("0x000000000001-0x000000000001-x.ref\n")
    out = check(tmp_path, snap)
    assert "reftable" in out and "cannot decide" in out, out


def test_packed_refs_git_refuses_or_with_a_name_twice_are_cannot_decide(tmp_path):
    wd, snap = started(tmp_path)
    c = plumbing_commit(wd, evil=False)
    head = git(wd, "rev-parse", "HEAD")
    (wd / ".git/packed-refs").write_text(f"{head} refs/heads/topic\n{c} refs/heads/topic\n")
    assert "listed twice" in check(tmp_path, snap)


@pytest.mark.parametrize("evil", [True, False], ids=["protected", "control"])
def test_a_commit_left_only_in_the_reflog_is_reported(tmp_path, evil):
    """The branch is put back, but `git reset --hard main@{1}` (or HEAD@{1}) checks out
    the commit the reflog recorded during the run."""
    wd, snap = started(tmp_path)
    head = git(wd, "rev-parse", "HEAD")
    c = plumbing_commit(wd, evil=evil)
    git(wd, "update-ref", "-m", "x", "refs/heads/main", c)
    git(wd, "update-ref", "-m", "y", "refs/heads/main", head)
    assert git(wd, "rev-parse", "main@{1}") == c and git(wd, "rev-parse", "HEAD@{1}") == c
    text = check(tmp_path, snap)
    if evil:
        # one commit, named once (under the first reflog entry that holds it)
        assert ("main@{1}" in text or "HEAD@{1}" in text) and ".envrc" in text, text
        assert c[:12] in text, text
    else:
        assert text == ""


def test_an_operation_left_in_progress_is_cannot_decide(tmp_path):
    """`git rebase --abort` resets to rebase-merge/orig-head, `--continue` picks the
    todo list: an in-progress rebase made during the run is named; one from before
    the run, unchanged, is not (the control)."""
    wd, snap = started(tmp_path)
    c = plumbing_commit(wd, evil=True)
    rm = wd / ".git" / "rebase-merge"
    rm.mkdir()
    (rm / "orig-head").write_text(c + "\n")
    (rm / "head-name").write_text("refs/heads/main\n")
    (rm / "git-rebase-todo").write_text(f"pick {c} x\n")
    text = check(tmp_path, snap)
    assert ".git/rebase-merge" in text and "cannot decide" in text, text
    snap2 = protect.snapshot(str(wd), git_configs=[])
    assert check(tmp_path, snap2) == ""


# --- objects: what git reads first, and whether it is what the id says --------------------

def _write_loose(wd, kind: bytes, body: bytes, as_id: str | None = None) -> str:
    raw = kind + b" " + str(len(body)).encode() + b"\0" + body
    h = as_id or hashlib.sha1(raw).hexdigest()
    d = Path(wd) / ".git" / "objects" / h[:2]
    d.mkdir(exist_ok=True)
    f = d / h[2:]
    if f.exists():
        f.chmod(0o644)
        f.unlink()
    f.write_bytes(zlib.compress(raw, 9))
    return h


def test_a_loose_copy_unlike_the_packed_one_is_cannot_decide(tmp_path):
    """git reads a packed object before a loose one: a loose file under a packed
    commit's id holding a harmless tree must not hide the packed commit's .envrc."""
    wd, snap = started(tmp_path)
    c = plumbing_commit(wd, evil=True)
    git(wd, "update-ref", "refs/heads/topic", c)
    git(wd, "repack", "-a", "-d", "-q")
    git(wd, "prune-packed")
    harmless = git(wd, "rev-parse", "HEAD^{tree}")
    _write_loose(wd, b"commit", f"tree {harmless}\n\nx\n".encode(), as_id=c)
    assert git(wd, "rev-parse", f"{c}^{{tree}}") != harmless       # git takes the pack's
    text = check(tmp_path, snap)
    assert "does not hash to its id" in text and "refs/heads/topic" in text, text


def test_a_commit_graph_made_during_the_run_is_quarantined(tmp_path):
    """git takes a commit's tree from the commit-graph; a new one is moved away."""
    wd, snap = started(tmp_path)
    git(wd, "update-ref", "refs/heads/topic", plumbing_commit(wd, evil=False))
    git(wd, "commit-graph", "write", "--reachable")
    graph = wd / ".git/objects/info/commit-graph"
    assert graph.exists()
    rep = protect.verify_and_revert(snap, quarantine_dir=str(tmp_path / "q"))
    assert any(c.path.endswith("objects/info/commit-graph") and c.action == "quarantined"
               for c in rep.changes), rep.changes
    assert not graph.exists()
    assert not rep.alerts        # `git gc` writes one in ordinary work: moved away, silently
    assert git(wd, "log", "-1", "--format=%s", "topic") == "x"     # git works without it


def test_a_multi_pack_index_over_a_replaced_pack_is_quarantined(tmp_path):
    wd = tmp_path / "r"
    git(tmp_path, "init", "-q", "-b", "main", str(wd))
    (wd / "a").write_text("a")
    git(wd, "add", "a")
    git(wd, "commit", "-qm", "one")
    git(wd, "repack", "-a", "-d", "-q")
    git(wd, "multi-pack-index", "write")
    snap = protect.snapshot(str(wd), git_configs=[])
    pdir = wd / ".git/objects/pack"
    pack = next(p for p in pdir.iterdir() if p.suffix == ".pack")
    data = pack.read_bytes()
    pack.chmod(0o644)
    pack.write_bytes(data)                  # same name and content, rewritten: ctime moves
    rep = protect.verify_and_revert(snap, quarantine_dir=str(tmp_path / "q"))
    assert any(c.path.endswith("pack/multi-pack-index") and c.action == "quarantined"
               for c in rep.changes), rep.changes
    assert not (pdir / "multi-pack-index").exists()


def test_an_unchanged_commit_graph_and_ordinary_work_are_silent(tmp_path):
    """Control: a commit-graph from before the run stays; ordinary commits say nothing."""
    wd = tmp_path / "r"
    git(tmp_path, "init", "-q", "-b", "main", str(wd))
    (wd / "a").write_text("a")
    git(wd, "add", "a")
    git(wd, "commit", "-qm", "one")
    git(wd, "commit-graph", "write", "--reachable")
    snap = protect.snapshot(str(wd), git_configs=[])
    (wd / "b").write_text("b")
    git(wd, "add", "b")
    git(wd, "commit", "-qm", "two")
    git(wd, "repack", "-a", "-q")
    assert check(tmp_path, snap) == ""
    assert (wd / ".git/objects/info/commit-graph").exists()


def test_http_alternates_and_a_promisor_pack_are_not_trusted(tmp_path):
    """http-alternates (objects fetched from elsewhere) is moved away like alternates;
    an object a partial clone would fetch lazily (a `.promisor` pack, the object
    absent) is cannot decide, not "nothing to check"."""
    wd, snap = started(tmp_path)
    (wd / ".git/objects/info/http-alternates").write_text("http://127.0.0.1:9/x\n")
    git(wd, "repack", "-a", "-d", "-q")
    pack = next(p for p in (wd / ".git/objects/pack").iterdir() if p.suffix == ".pack")
    pack.with_suffix(".promisor").write_text("")
    _loose(wd, "refs/heads/lazy", "ab" * 20 + "\n")
    rep = protect.verify_and_revert(snap, quarantine_dir=str(tmp_path / "q"))
    text = "\n".join(f"{c.action} {c.path}: {c.detail}" for c in rep.alerts)
    assert "quarantined .git/objects/info/http-alternates" in text, text
    assert "refs/heads/lazy" in text and "not found" in text, text
    assert not (wd / ".git/objects/info/http-alternates").exists()


def test_a_version_1_pack_index_is_cannot_decide(tmp_path):
    """git reads version 1 pack indexes; the reader used to skip such a pack and take
    a loose copy git never reads."""
    wd, snap = started(tmp_path)
    git(wd, "update-ref", "refs/heads/topic", plumbing_commit(wd, evil=True))
    git(wd, "repack", "-a", "-d", "-q", "--no-write-bitmap-index")
    git(wd, "prune-packed")
    pdir = wd / ".git/objects/pack"
    idx = next(p for p in pdir.iterdir() if p.suffix == ".idx")
    v2 = idx.read_bytes()
    n = struct.unpack(">256I", v2[8:8 + 1024])[255]
    shas = [v2[1032 + 20 * i:1052 + 20 * i] for i in range(n)]
    offs = [v2[1032 + 24 * n + 4 * i:1036 + 24 * n + 4 * i] for i in range(n)]
    v1 = v2[8:1032] + b"".join(o + s for o, s in zip(offs, shas, strict=True)) + v2[-40:]
    idx.chmod(0o644)
    idx.write_bytes(v1)
    # a loose copy under the commit's id that says "harmless tree": git takes the pack's
    c = git(wd, "rev-parse", "topic")
    harmless = git(wd, "rev-parse", "HEAD^{tree}")
    _write_loose(wd, b"commit", f"tree {harmless}\n\nx\n".encode(), as_id=c)
    assert git(wd, "rev-parse", "topic^{tree}") != harmless
    text = check(tmp_path, snap)
    assert "cannot decide" in text and "version 2" in text, text


# --- end to end: a real confined run, then the person's git ----------------------------

AGENT = r'''
set -eu
base=$({git} rev-parse 'HEAD^{{tree}}')
blob=$(echo 'echo pwned' | {git} hash-object -w --stdin)
export GIT_INDEX_FILE=.git/scratch-index
{git} read-tree "$base"
for p in {paths}; do {git} update-index --add --cacheinfo "100644,$blob,$p"; done
c=$({git} commit-tree "$({git} write-tree)" -p HEAD -m x)
rm -f .git/scratch-index
unset GIT_INDEX_FILE
{git} update-ref refs/heads/topic-packed "$c"
{git} pack-refs --all
test ! -e .git/refs/heads/topic-packed
printf '%s anything here\n' "$c" > .git/refs/heads/topic-trailing
printf '%s\n' "$c" > .cache-tip
ln -s ../../../.cache-tip .git/refs/heads/topic-link
{git} update-ref refs/heads/hidden "$c"
{git} symbolic-ref refs/heads/topic-symref refs/heads/hidden
{git} update-ref refs/stash "$c"
echo done
'''
REFS = ("topic-trailing", "topic-link", "topic-packed", "topic-symref", "refs/stash")
EVIL = ".envrc .vscode/tasks.json .claude/settings.json"


def _git_out(wd: str, *a: str) -> subprocess.CompletedProcess:
    return subprocess.run([GIT, "-C", wd, *a], env=GITENV, capture_output=True, text=True)


def _run(sandbox, paths: str):
    wd = _repo(sandbox)
    p = _inside(sandbox, AGENT.format(git=GIT, paths=paths), timeout=120)
    assert "done" in p.stdout, p.stderr
    return wd, p


def test_hidden_branches_pointing_at_protected_files_are_reported(sandbox):
    wd, p = _run(sandbox, EVIL)
    # the agent exited 0; what the person must look at makes it 123 (issue 21 item 7)
    assert p.returncode == ACTED, p.stderr
    lines = [ln for ln in p.stderr.splitlines() if "adds or changes protected paths" in ln
             or "cannot decide" in ln]
    for ref in REFS:
        assert any(ref in ln for ln in lines), (ref, p.stderr)
    assert ".envrc" in p.stderr and ".claude/settings.json" in p.stderr, p.stderr
    # git reads every one of them as the commit: the person's checkout writes .envrc
    tip = _git_out(wd, "rev-parse", "topic-symref").stdout.strip()
    for ref in REFS:
        assert _git_out(wd, "rev-parse", ref).stdout.strip() == tip, ref
    q = _git_out(wd, "checkout", "-q", "topic-trailing")
    assert q.returncode == 0, q.stderr
    assert os.path.exists(os.path.join(wd, ".envrc"))


def test_the_same_refs_pointing_at_a_harmless_commit_are_silent(sandbox):
    """Control: the same forms, a commit adding an ordinary file: nothing reported."""
    wd, p = _run(sandbox, "src/ok.py")
    assert "git-data" not in p.stderr and "protected paths" not in p.stderr, p.stderr
    assert "cannot decide" not in p.stderr, p.stderr
    q = _git_out(wd, "checkout", "-q", "topic-trailing")
    assert q.returncode == 0, q.stderr
    assert os.path.exists(os.path.join(wd, "src/ok.py"))
    assert not os.path.exists(os.path.join(wd, ".envrc"))
