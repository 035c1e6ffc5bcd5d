"""The exit check from the kernel's reports (confine/protect/changes.py).

As root, the supervisor marks the workdir's filesystem with fanotify before
the start's walk; at exit only the directories the kernel reported a name in
(and what leads to those listed every time) are walked, not every directory.
These tests make, below directories the index vouches for and with their
mtime put back, what the exit check must find whoever made it (another
process, an unmediated bind(), a bare repository made name by name, a
directory holding hooks renamed in, a hard link, a FIFO, a mode change), and
check that the check found it with the reports in use; a control with the
reports emptied shows the reports are what found it. Then what makes the
reports incomplete (a queue overflow, a mount point in the workdir, the
workdir replaced) and must fall back to a stamp of every directory.
In-process (the protect API), root only; the real run also as the test account
(no mark there: the exit check takes every stamp).
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import textwrap
import time

import pytest

from confine import protect
from confine.protect import changes, index

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="a filesystem mark needs root")

# A stamp is never ahead of the clock (the kernel's coarse one lags it): the window and a
# little from now, every stamp made so far is older than the window at the next walk.
RACY_S = index.RACY_NS / 1e9 + 0.05    # for a real run (the installed confine's constant)
# In this process the racy window is shortened (a fixture below): what the tests check is
# how the reports and the index's vouching combine, not the window's length, and 2.4 s of
# ageing per test was most of this file's time. 100 ms stays far above the filesystems'
# timestamp granularity (the coarse clock: a few ms).
TEST_RACY_NS = 100_000_000
AGE_S = TEST_RACY_NS / 1e9 + 0.05


def keep_mtime(path: str):
    st = os.stat(path)

    class _K:
        def __enter__(self):
            return self

        def __exit__(self, *a):
            os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns), follow_symlinks=False)
    return _K()


@pytest.fixture(autouse=True)
def marks_for_small_trees(monkeypatch):
    """These trees are far below changes.WORTH_DIRS: mark them all the same."""
    monkeypatch.setattr(changes, "WORTH_DIRS", 0)


@pytest.fixture(autouse=True)
def short_racy_window(monkeypatch):
    import sys
    monkeypatch.setattr(index, "RACY_NS", TEST_RACY_NS)
    # the module, not the package's `snapshot` function of the same name
    monkeypatch.setattr(sys.modules["confine.protect.snapshot"], "RACY_NS", TEST_RACY_NS)


@pytest.fixture
def tree():
    """A workdir of plain directories and a repository, its index stored by one
    start and exit, aged so that the index vouches for every directory."""
    top = tempfile.mkdtemp(prefix="confine-reports-", dir="/var/tmp")
    wd, store = os.path.join(top, "w"), os.path.join(top, "store")
    for rel in ("a/b/c", "a/b/d", "m/n", "p/q/r/s", "src/lib", "t/u"):
        os.makedirs(os.path.join(wd, rel))
    subprocess.run(["git", "init", "-q", os.path.join(wd, "repo")], check=True)
    with open(os.path.join(wd, "a/b/c/plain.txt"), "w") as f:
        f.write("x\n")
    os.chmod(os.path.join(wd, "a/b/c/plain.txt"), 0o644)
    time.sleep(AGE_S)
    snap = protect.snapshot(wd, git_configs=[], index_dir=store)
    protect.verify_and_revert(snap, quarantine_dir=os.path.join(top, "q0"))
    time.sleep(AGE_S)
    try:
        yield top, wd, store
    finally:
        shutil.rmtree(top, ignore_errors=True)


def start(wd: str, store: str) -> protect.Snapshot:
    snap = protect.snapshot(wd, git_configs=[], index_dir=store)
    assert snap.changes is not None, snap.changes_note
    assert snap.index_reused >= 8, snap.describe()["index"]     # control: the index vouches
    return snap


def make(wd: str, what: str) -> str:
    """One change below vouched directories, each directory's mtime put back;
    the path the exit check must name."""
    j = lambda *p: os.path.join(wd, *p)  # noqa: E731
    if what == "new name":
        with keep_mtime(j("p/q/r/s")):
            with open(j("p/q/r/s/.envrc"), "w") as f:
                f.write("export X=1\n")
        return "p/q/r/s/.envrc"
    if what == "socket":            # bind() is not a mediated call
        with keep_mtime(j("a/b/d")):
            s = socket.socket(socket.AF_UNIX)
            s.bind(j("a/b/d/.envrc"))
            s.close()
        return "a/b/d/.envrc"
    if what == "fifo":
        with keep_mtime(j("t/u")):
            os.mkfifo(j("t/u/.mcp.json"))
        return "t/u/.mcp.json"
    if what == "bare repository":   # name by name, no .git anywhere
        with keep_mtime(j("src/lib")):
            os.mkdir(j("src/lib/x.git"))
        for d in ("objects", "refs", "hooks"):
            os.mkdir(j("src/lib/x.git", d))
        with open(j("src/lib/x.git/HEAD"), "w") as f:
            f.write("ref: refs/heads/main\n")
        with open(j("src/lib/x.git/hooks/post-checkout"), "w") as f:
            f.write("#!/bin/sh\necho pwned\n")
        os.chmod(j("src/lib/x.git/hooks/post-checkout"), 0o755)
        return "src/lib/x.git/hooks/post-checkout"
    if what == "renamed in":        # a directory holding a repository with a hook
        stage = j("..", "stage")
        subprocess.run(["git", "init", "-q", os.path.join(stage, "r")], check=True)
        with open(os.path.join(stage, "r/.git/hooks/pre-commit"), "w") as f:
            f.write("#!/bin/sh\necho pwned\n")
        with keep_mtime(j("m/n")):
            os.rename(os.path.join(stage, "r"), j("m/n/r"))
        return "m/n/r/.git/hooks/pre-commit"
    if what == "hard link":         # of a file from outside, onto a protected name
        src = j("..", "outside-envrc")
        with open(src, "w") as f:
            f.write("export X=1\n")
        with keep_mtime(j("a/b/c")):
            os.link(src, j("a/b/c/.envrc"))
        return "a/b/c/.envrc"
    if what == "hook mode":         # no name at all: a mode change of a protected file
        os.chmod(j("repo/.git/config"), 0o777)
        return "repo/.git/config"
    raise AssertionError(what)


KINDS = ["new name", "socket", "fifo", "bare repository", "renamed in", "hard link", "hook mode"]


@root_only
@pytest.mark.parametrize("what", KINDS)
def test_the_reports_find_what_was_made_below_vouched_directories(tree, what):
    top, wd, store = tree
    snap = start(wd, store)
    path = make(wd, what)
    rep = protect.verify_and_revert(snap, quarantine_dir=os.path.join(top, "q1"))
    assert rep.exit_walk.startswith("the kernel's reports"), rep.exit_walk
    assert path in {c.path for c in rep.alerts}, (path, [(c.path, c.what) for c in rep.changes])
    if what not in ("hook mode",):
        assert not os.path.lexists(os.path.join(wd, path)), "not moved away"
    else:
        assert os.stat(os.path.join(wd, path)).st_mode & 0o777 != 0o777
    # and nothing is left for a full check (a fresh snapshot, no index) to find
    again = protect.snapshot(wd, git_configs=[])
    assert not protect.verify_and_revert(again, quarantine_dir=os.path.join(top, "q2")).alerts


@root_only
@pytest.mark.parametrize("what", ["new name", "bare repository", "renamed in"])
def test_control_without_the_reports_the_same_change_is_missed(tree, what, monkeypatch):
    """The reports emptied (as if the kernel had said nothing): the same change
    is not found, so the test above sees what the reports find."""
    top, wd, store = tree
    snap = start(wd, store)
    path = make(wd, what)
    monkeypatch.setattr(changes.Changes, "changed", lambda self, wfd, w: (set(), ""))
    rep = protect.verify_and_revert(snap, quarantine_dir=os.path.join(top, "q1"))
    assert rep.exit_walk.startswith("the kernel's reports"), rep.exit_walk
    assert path not in {c.path for c in rep.alerts}
    assert os.path.lexists(os.path.join(wd, path))      # left in place


@root_only
def test_a_queue_overflow_takes_every_stamp(tree):
    top, wd, store = tree
    snap = start(wd, store)
    many = os.path.join(top, "many")
    os.mkdir(many)
    for i in range(20000):          # more than the kernel queues (16384)
        os.close(os.open(os.path.join(many, str(i)), os.O_CREAT | os.O_WRONLY, 0o600))
    path = make(wd, "new name")
    rep = protect.verify_and_revert(snap, quarantine_dir=os.path.join(top, "q1"))
    assert rep.exit_walk.startswith("every directory's stamp") and "overflow" in rep.exit_walk, \
        rep.exit_walk
    assert path in {c.path for c in rep.alerts}


@root_only
def test_a_mount_point_in_the_workdir_takes_every_stamp(tree):
    top, wd, store = tree
    snap = start(wd, store)
    src = os.path.join(top, "elsewhere")
    os.mkdir(src)
    subprocess.run(["mount", "--bind", src, os.path.join(wd, "t/u")], check=True)
    try:
        with open(os.path.join(src, ".envrc"), "w") as f:   # by the other path
            f.write("export X=1\n")
        rep = protect.verify_and_revert(snap, quarantine_dir=os.path.join(top, "q1"))
        assert rep.exit_walk.startswith("every directory's stamp") and "mount point" in \
            rep.exit_walk, rep.exit_walk
        assert "t/u/.envrc" in {c.path for c in rep.alerts}
    finally:
        subprocess.run(["umount", "-l", os.path.join(wd, "t/u")], check=True)


@root_only
def test_a_workdir_replaced_during_the_run_takes_every_stamp(tree):
    top, wd, store = tree
    snap = start(wd, store)
    os.rename(wd, wd + ".old")
    shutil.copytree(wd + ".old", wd, symlinks=True)
    make(wd, "new name")
    rep = protect.verify_and_revert(snap, quarantine_dir=os.path.join(top, "q1"))
    assert "not the directory walked at start" in rep.exit_walk, rep.exit_walk
    assert "p/q/r/s/.envrc" in {c.path for c in rep.alerts}


@root_only
def test_without_an_index_directory_there_is_no_mark(tree):
    top, wd, store = tree
    snap = protect.snapshot(wd, git_configs=[])
    assert snap.changes is None
    rep = protect.verify_and_revert(snap, quarantine_dir=os.path.join(top, "q1"))
    assert rep.exit_walk.startswith("every directory's stamp"), rep.exit_walk


def test_a_real_run_finds_a_name_another_process_made_while_the_agent_made_none(sandbox):
    """confine exec (root: from the reports; the test account: every stamp): the
    agent makes no name at all (it waits on stdin); meanwhile another process
    makes .envrc below a vouched directory, mtime put back. The exit check
    finds it and moves it away."""
    sb = sandbox
    for rel in ("a", "a/b", "p", "p/q", "p/q/r", "p/q/r/s"):
        os.mkdir(os.path.join(sb.workdir, rel))
        os.lchown(os.path.join(sb.workdir, rel), sb.pw.pw_uid, sb.pw.pw_gid)
    time.sleep(RACY_S)
    assert sb.run(["true"]).returncode == 0         # stores the index
    time.sleep(RACY_S)
    agent = sb.popen(["python3", "-c", textwrap.dedent("""
        import sys
        print("ready", flush=True)
        sys.stdin.readline()
    """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert agent.stdout.readline().strip() == "ready"
        d = os.path.join(sb.workdir, "p/q/r/s")
        with keep_mtime(d):
            with open(os.path.join(d, ".envrc"), "w") as f:
                f.write("export X=1\n")
            os.lchown(os.path.join(d, ".envrc"), sb.pw.pw_uid, sb.pw.pw_gid)
        out, err = agent.communicate("\n", timeout=60)
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()
    assert "p/q/r/s/.envrc" in err, err
    assert not os.path.exists(os.path.join(sb.workdir, "p/q/r/s/.envrc"))


@root_only
def test_a_workdir_below_worth_dirs_gets_no_mark_and_its_stamps_find_the_change(tree, monkeypatch):
    """A workdir whose last index held fewer directories than WORTH_DIRS is not
    marked (the group's teardown would cost more than its stamps); the exit check
    takes every stamp and still finds a change made with the mtime put back. At
    the threshold exactly, the mark is placed."""
    top, wd, store = tree
    n = len(protect.snapshot(wd, git_configs=[], index_dir=store).dir_index)
    monkeypatch.setattr(changes, "WORTH_DIRS", n)
    assert protect.snapshot(wd, git_configs=[], index_dir=store).changes is not None
    monkeypatch.setattr(changes, "WORTH_DIRS", n + 1)
    snap = protect.snapshot(wd, git_configs=[], index_dir=store)
    assert snap.changes is None and "directories at the last run" in snap.changes_note
    assert snap.index_reused >= 8, snap.describe()["index"]
    d = os.path.join(wd, "p/q/r/s")
    with keep_mtime(d):
        with open(os.path.join(d, ".envrc"), "w") as f:
            f.write("export X=1\n")
    rep = protect.verify_and_revert(snap, quarantine_dir=os.path.join(top, "q1"))
    assert rep.exit_walk.startswith("every directory's stamp"), rep.exit_walk
    assert "p/q/r/s/.envrc" in {c.path for c in rep.alerts}


@root_only
def test_a_restarted_group_reports_only_what_follows_and_only_for_its_filesystem(tree):
    """Changes.restart (a Sandbox's kept group): what was queued before is
    forgotten, what follows is reported; a workdir on another filesystem gets
    False (a new group), as does a closed group."""
    top, wd, store = tree
    wfd = os.open(wd, os.O_RDONLY | os.O_DIRECTORY)
    try:
        g, why = changes.open_changes(wfd)
        assert g is not None, why
        os.mkdir(os.path.join(wd, "m/n/before"))
        dirty, why = g.changed(wfd, wd)
        assert dirty == {"m/n"}, (dirty, why)          # control: it was reported
        assert g.restart(wfd)
        with open(os.path.join(wd, "t/u/after.txt"), "w"):
            pass
        dirty, why = g.changed(wfd, wd)
        assert dirty == {"t/u"}, (dirty, why)
        other = os.open("/dev/shm", os.O_RDONLY | os.O_DIRECTORY)
        try:
            assert not g.restart(other)
        finally:
            os.close(other)
        g.close()
        assert not g.restart(wfd)
    finally:
        os.close(wfd)
