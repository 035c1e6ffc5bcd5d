"""The workdir's directory index (confine/protect/index.py), kept between runs.

A run stores, at exit, the stamp (device, inode, ctime, mtime) of every
directory and what its listing showed; the next walk (the next start, and
this run's exit check) lists again only what changed. These tests attack
that: names added below a directory whose mtime was put back (ctime cannot
be), a renamed directory holding a protected name, an index file planted by
the agent, damaged, foreign-owned or left by a workdir replaced at the same
path. Each run is real (`confine exec`, root and user); what the walk found
is read from --dry-run --json (its `protected_paths`), beside the same
workdir walked without an index as the control.

Directories made within index.RACY_NS of a walk are never vouched for (the
clock's coarse tick), so every test lets its tree age by that much first.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import tempfile
import textwrap
import time

import pytest

from confine import protect
from confine.protect import index


def _age() -> None:
    """Let every stamp made so far become trustworthy (not a timing assertion). A stamp
    is never ahead of the clock (the kernel's coarse one lags it): RACY_NS and a little
    from now, every stamp made so far is older than RACY_NS at the next walk. RACY_NS as
    this process has it: the installed confine's, but for the in-process tests below."""
    time.sleep(index.RACY_NS / 1e9 + 0.05)


@pytest.fixture
def short_racy_window(monkeypatch):
    """For the tests that walk in this process (as tests/protect/test_exit_reports.py
    does): what they check is that the walk with the index equals the walk without it,
    not the window's length, and its ageing was most of their time. 100 ms stays far
    above the filesystems' timestamp granularity (the coarse clock: a few ms)."""
    import sys
    monkeypatch.setattr(index, "RACY_NS", 100_000_000)
    # the module, not the package's `snapshot` function of the same name
    monkeypatch.setattr(sys.modules["confine.protect.snapshot"], "RACY_NS", 100_000_000)


def own(sb, path: str) -> None:
    for d, dirs, files in os.walk(path):
        for n in [d, *(os.path.join(d, x) for x in dirs + files)]:
            os.lchown(n, sb.pw.pw_uid, sb.pw.pw_gid)


def mk(sb, rel: str, text: str | None = None) -> str:
    """A directory (text None) or a file in the workdir, owned by the person.
    Only what it makes is chowned: a chown sets ctime, which the index reads."""
    p = os.path.join(sb.workdir, rel)
    parts = rel.split("/")
    for i in range(1, len(parts) + (text is None)):
        d = os.path.join(sb.workdir, *parts[:i])
        if not os.path.isdir(d):
            os.mkdir(d)
            os.lchown(d, sb.pw.pw_uid, sb.pw.pw_gid)
    if text is not None:
        with open(p, "w") as f:
            f.write(text)
        os.lchown(p, sb.pw.pw_uid, sb.pw.pw_gid)
    return p


def keep_mtime(path: str):
    """Put a directory's atime and mtime back after a change (utimensat, as its
    owner may): only its ctime tells."""
    st = os.stat(path)

    class _K:
        def __enter__(self):
            return self

        def __exit__(self, *a):
            os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns), follow_symlinks=False)
            assert os.stat(path).st_mtime_ns == st.st_mtime_ns
    return _K()


def walked(sb) -> dict:
    """What the start's walk found (--dry-run reads the stored index too)."""
    p = sb.confine("exec", "-w", sb.workdir, *sb.opts, "--dry-run", "--json", "--", "true")
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)["protected_paths"]


def protected(d: dict) -> set[str]:
    return {x["path"] for x in d["protected"]}


def index_dir(sb) -> str:
    return "/var/lib/confine/index" if sb.mode == "root" else \
        os.path.join(sb.pw.pw_dir, ".local", "state", "confine", "index")


def index_files(sb) -> list[str]:
    """The stored index files of this workdir (the index holds its path)."""
    d, key = index_dir(sb), os.fsencode(os.path.realpath(sb.workdir))
    out = []
    for n in os.listdir(d) if os.path.isdir(d) else ():
        with open(os.path.join(d, n), "rb") as f:
            if key in f.read():
                out.append(os.path.join(d, n))
    return out


def stored(sb) -> dict:
    """A tree of plain directories aged past RACY_NS, one real run (it keeps
    the index at exit), and the walk that follows: it vouches for them."""
    for rel in ("a/b/c", "a/b/d", "m/n", "p/q/r/s"):
        mk(sb, rel)
    mk(sb, "a/b/c/plain.txt", "x\n")
    _age()
    p = sb.run(["true"])
    assert p.returncode == 0, p.stderr
    assert index_files(sb), "the run kept no index"
    d = walked(sb)
    assert d["index"]["reused"] >= 8, d["index"]   # control: the index is in use
    return d


# --- the next start sees what changed between runs ---------------------------------------

def test_a_name_added_below_a_directory_with_its_mtime_put_back_is_found(sandbox):
    sb = sandbox
    before = stored(sb)
    assert "a/b/c/.envrc" not in protected(before)
    with keep_mtime(os.path.join(sb.workdir, "a/b/c")):
        mk(sb, "a/b/c/.envrc", "export X=1\n")
    with keep_mtime(os.path.join(sb.workdir, "p/q/r/s")):
        repo = os.path.join(sb.workdir, "p/q/r/s/repo")
        subprocess.run(["git", "init", "-q", repo], check=True, capture_output=True)
        own(sb, repo)
    d = walked(sb)
    assert d["index"]["reused"] > 0                # the rest still vouched for
    assert "a/b/c/.envrc" in protected(d)
    assert "p/q/r/s/repo/.git" in d["git_directories"]
    # and the run protects it: the agent cannot write it, the file beside it can be
    p, out = sb.py("""
        import json
        res = {}
        for n in ("a/b/c/.envrc", "a/b/c/plain.txt"):
            try:
                with open(n, "a") as f:
                    f.write("echo pwned\\n")
                res[n] = "ok"
            except OSError as e:
                res[n] = e.__class__.__name__
        print(json.dumps(res))
    """)
    assert out["a/b/c/plain.txt"] == "ok", p.stderr
    assert out["a/b/c/.envrc"] != "ok", out
    with open(os.path.join(sb.workdir, "a/b/c/.envrc")) as f:
        assert f.read() == "export X=1\n"


def test_a_renamed_directory_holding_a_protected_name_is_found_where_it_went(sandbox):
    sb = sandbox
    mk(sb, "a/x/.envrc", "export X=1\n")
    before = stored(sb)
    assert "a/x/.envrc" in protected(before)
    with keep_mtime(os.path.join(sb.workdir, "a")), keep_mtime(os.path.join(sb.workdir, "m/n")):
        os.rename(os.path.join(sb.workdir, "a/x"), os.path.join(sb.workdir, "m/n/y"))
    d = walked(sb)
    assert "m/n/y/.envrc" in protected(d) and "a/x/.envrc" not in protected(d)


def test_a_workdir_replaced_at_the_same_path_gets_no_index(sandbox):
    sb = sandbox
    stored(sb)
    old = sb.workdir + ".old"
    os.rename(sb.workdir, old)
    try:
        shutil.copytree(old, sb.workdir, symlinks=True)
        os.chmod(sb.workdir, 0o755)
        own(sb, sb.workdir)
        mk(sb, "a/b/c/.envrc", "export X=1\n")
        d = walked(sb)
        assert d["index"]["reused"] == 0, d["index"]
        assert "a/b/c/.envrc" in protected(d)
    finally:
        shutil.rmtree(old, ignore_errors=True)


# --- the stored index is unreachable for the agent and checked before use ----------------

@pytest.mark.parametrize("layers", ["all", "landlock"])
def test_the_agent_cannot_plant_or_edit_the_index(sandbox, layers):
    """Also with Landlock and seccomp alone (no mount namespace, no read-only host)."""
    sb = sandbox if layers == "all" else sandbox.without_namespaces()
    stored(sb)
    d = index_dir(sb)
    files = index_files(sb)
    code = textwrap.dedent(f"""
        import json, os
        res = {{}}
        for what, path, flags in (("plant", {os.path.join(d, "0" * 32)!r}, os.O_CREAT),
                                  ("edit", {files[0]!r}, 0)):
            try:
                os.close(os.open(path, os.O_WRONLY | flags, 0o600))
                res[what] = "ok"
            except OSError as e:
                res[what] = e.__class__.__name__
        print(json.dumps(res))
    """)
    p, out = sb.py(code)
    assert out == {"plant": out["plant"], "edit": out["edit"]} and "ok" not in out.values(), \
        (out, p.stderr)
    assert not os.path.exists(os.path.join(d, "0" * 32))
    if sb.mode == "user":
        # control: the same account, unconfined, may write there
        c = sb.outside(["python3", "-c", code])
        assert json.loads(c.stdout.strip().splitlines()[-1]) == {"plant": "ok", "edit": "ok"}
        os.unlink(os.path.join(d, "0" * 32))


@pytest.mark.parametrize("damage", ["flip", "truncate", "foreign", "writable"])
def test_a_damaged_or_foreign_index_is_not_used(sandbox, damage):
    sb = sandbox
    stored(sb)
    if damage == "foreign" and sb.mode == "user":
        pytest.skip("only root can give the test account's file to another owner")
    for path in index_files(sb):
        if damage == "flip":
            with open(path, "r+b") as f:
                f.seek(-5, os.SEEK_END)
                b = f.read(1)
                f.seek(-5, os.SEEK_END)
                f.write(bytes([b[0] ^ 1]))
        elif damage == "truncate":
            os.truncate(path, os.path.getsize(path) // 2)
        elif damage == "foreign":
            os.chown(path, 65534, 65534)
        else:
            os.chmod(path, 0o622)
    with keep_mtime(os.path.join(sb.workdir, "a/b/c")):
        mk(sb, "a/b/c/.envrc", "export X=1\n")
    d = walked(sb)
    assert d["index"]["reused"] == 0, d["index"]
    assert "a/b/c/.envrc" in protected(d)
    for path in index_files(sb):
        os.unlink(path)


# --- the exit check, with the start's index, sees what changed during the run -------------

@pytest.mark.parametrize("how", ["new name", "hard link"])
def test_the_exit_check_finds_a_name_made_below_a_vouched_directory(sandbox, how):
    """A protected name made during the run where the guard does not see it
    (outside the sandbox, by another process), below a directory the index
    vouches for, with its mtime put back: the exit check finds and reports it.
    Or a protected file changed through a hard link in a vouched directory
    (no directory changes): its content is read again all the same."""
    sb = sandbox
    if how == "hard link":
        mk(sb, ".envrc", "export X=1\n")
        mk(sb, "m/n")
        os.link(os.path.join(sb.workdir, ".envrc"), os.path.join(sb.workdir, "m/n/link"))
    stored(sb)
    agent = sb.popen(["python3", "-c", textwrap.dedent("""
        import os, time
        open("ready", "w").close()
        while not os.path.exists("go"):
            time.sleep(0.02)
    """)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ready = os.path.join(sb.workdir, "ready")
        for _ in range(1500):
            if os.path.exists(ready) or agent.poll() is not None:
                break
            time.sleep(0.02)
        assert os.path.exists(ready), agent.communicate(timeout=5)
        if how == "hard link":
            with open(os.path.join(sb.workdir, "m/n/link"), "a") as f:
                f.write("echo pwned\n")
        else:
            with keep_mtime(os.path.join(sb.workdir, "p/q/r/s")):
                mk(sb, "p/q/r/s/.envrc", "export X=1\n")
        mk(sb, "go", "")
        out, err = agent.communicate(timeout=60)
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()
    if how == "hard link":
        assert ".envrc" in err and "modified" in err, err
        with open(os.path.join(sb.workdir, ".envrc")) as f:
            assert f.read() == "export X=1\n"
    else:
        assert "p/q/r/s/.envrc" in err, err
        assert not os.path.exists(os.path.join(sb.workdir, "p/q/r/s/.envrc")), err


# --- the walk with an index finds exactly what the walk without one finds -----------------

def _view(snap: protect.Snapshot) -> dict:
    d = snap.describe()
    d.pop("seconds")
    d.pop("index")
    d["entries"] = sorted((e.rel, e.kind, e.ino, e.sha256) for e in snap.entries.values())
    return d


def test_random_changes_walk_the_same_with_and_without_the_index(short_racy_window):
    """In-process (no sandbox needed, any user): a tree of plain directories,
    repositories, pointers and protected names; rounds of random changes, each
    directory's mtime put back; the snapshot and the exit check with the index
    equal the ones without it."""
    rnd = random.Random(13)
    top = tempfile.mkdtemp(prefix="confine-index-")
    try:
        wd, store = os.path.join(top, "w"), os.path.join(top, "store")
        os.mkdir(wd)
        dirs = [""]
        for i in range(120):
            d = os.path.join(rnd.choice(dirs), f"d{i}") if dirs else f"d{i}"
            os.mkdir(os.path.join(wd, d))
            dirs.append(d)
        subprocess.run(["git", "init", "-q", os.path.join(wd, dirs[5])], check=True)
        names = [".envrc", ".git", ".vscode", "x.txt", "sub", ".claude", "HEAD", "refs"]
        _age()
        snap = protect.snapshot(wd, git_configs=[], index_dir=store)
        protect.verify_and_revert(snap, quarantine_dir=os.path.join(top, "q0"))
        for rnd_no in range(4):
            _age()
            dirs = sorted(os.path.relpath(d, wd) if d != wd else ""
                          for d, _, _ in os.walk(wd) if "/.git/" not in d + "/")
            for _ in range(6):
                d = os.path.join(wd, rnd.choice(dirs))
                n = rnd.choice(names)
                with keep_mtime(d):
                    p = os.path.join(d, n)
                    if os.path.lexists(p):
                        continue
                    if rnd.random() < 0.5:
                        os.mkdir(p)
                    else:
                        with open(p, "w") as f:
                            f.write("gitdir: ../d1\n" if n == ".git" else "x\n")
            a, b = rnd.sample(dirs[1:], 2)
            src, dst = os.path.join(wd, a), os.path.join(wd, b, f"moved{rnd_no}")
            if not dst.startswith(src + "/") and os.path.isdir(src):
                with keep_mtime(os.path.dirname(src)), keep_mtime(os.path.dirname(dst)):
                    os.rename(src, dst)
            dirs = sorted(os.path.relpath(d, wd) if d != wd else ""
                          for d, _, _ in os.walk(wd) if "/.git/" not in d + "/")
            with_index = protect.snapshot(wd, git_configs=[], index_dir=store)
            assert with_index.index_reused > 0
            without = protect.snapshot(wd, git_configs=[])
            assert _view(with_index) == _view(without), rnd_no
            # the exit check with the start's index against the one without
            made = set()
            for _ in range(3):
                d = rnd.choice(dirs)
                if os.path.isdir(os.path.join(wd, d)) and not os.path.isdir(
                        os.path.join(wd, d, ".envrc")):
                    with keep_mtime(os.path.join(wd, d)):
                        with open(os.path.join(wd, d, ".envrc"), "a") as f:
                            f.write("x\n")
                    made.add(os.path.join(d, ".envrc"))
            r1 = protect.verify_and_revert(with_index,
                                           quarantine_dir=os.path.join(top, f"q{rnd_no}a"))
            assert not r1.failed
            assert made <= {c.path for c in r1.alerts}, (made, [c.path for c in r1.changes])
            w2 = protect.snapshot(wd, git_configs=[])
            r2 = protect.verify_and_revert(w2, quarantine_dir=os.path.join(top, f"q{rnd_no}b"))
            assert not r2.alerts, [c.path for c in r2.alerts]   # r1 put everything back
    finally:
        shutil.rmtree(top, ignore_errors=True)


# --- where the index may live and on which filesystems -----------------------------------

def test_no_index_where_the_profile_lets_the_agent_write(tmp_path, monkeypatch):
    """dir_for: the index directory is refused when a write grant (or the
    workdir) covers it or lies inside it; control: an unrelated grant."""
    from types import SimpleNamespace
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    want = os.path.realpath(tmp_path / "state" / "confine" / "index")

    def pol(*write: str, wd: str = str(tmp_path / "w")) -> SimpleNamespace:
        g = [SimpleNamespace(path=p) for p in write]
        return SimpleNamespace(workdir=wd, write=g, devices=())
    assert index.dir_for(pol(str(tmp_path / "other"))) == (want, "")
    for bad in (str(tmp_path / "state"), str(tmp_path), want, os.path.join(want, "x")):
        got, why = index.dir_for(pol(bad))
        assert got is None and "writable in the sandbox" in why, bad
    assert index.dir_for(pol(wd=str(tmp_path / "state")))[0] is None


def test_no_index_on_a_filesystem_whose_stamps_cannot_vouch(tmp_path):
    fd = os.open("/proc", os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert "proc" in (index.unsupported(fd) or "")
    finally:
        os.close(fd)
    fd = os.open(str(tmp_path), os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert index.unsupported(fd) is None      # control: this machine's /tmp
    finally:
        os.close(fd)


def test_an_unchanged_index_is_not_written_again_a_changed_one_is(tmp_path, short_racy_window):
    """In-process: the exit check rewrites the stored index only when a walk
    saw something new (a new file replaces the old by rename: a new inode)."""
    wd, store = tmp_path / "w", str(tmp_path / "store")
    for d in ("a/b", "c"):
        (wd / d).mkdir(parents=True)
    _age()

    def run() -> protect.Snapshot:
        s = protect.snapshot(str(wd), git_configs=[], index_dir=store)
        protect.verify_and_revert(s, quarantine_dir=str(tmp_path / "q"))
        return s

    def ino() -> int:
        (name,) = os.listdir(store)
        return os.stat(os.path.join(store, name)).st_ino
    s = run()                                  # no index yet: stored at exit
    assert not s.index_stored and s.index_reused == 0
    first = ino()
    s = run()
    assert s.index_stored and s.index_reused > 0 and ino() == first
    _age()
    with keep_mtime(str(wd / "a/b")):
        (wd / "a/b/new").mkdir()
    s = run()
    assert not s.index_stored and ino() != first


def test_old_indexes_and_killed_saves_are_expired(tmp_path):
    store = tmp_path / "store"
    store.mkdir(mode=0o700)
    old = time.time_ns() - 3600 * 10**9
    for i in range(index.KEEP + 8):
        p = store / f"{i:032x}"
        p.write_bytes(b"x")
        os.utime(p, ns=(old + i, old + i))
    (store / ".left-by-a-kill.123").write_bytes(b"x")
    os.utime(store / ".left-by-a-kill.123", ns=(old, old))
    (store / "not-ours").write_bytes(b"x")          # other names are left alone
    index.save(str(store), ("k",), {})
    left = set(os.listdir(store))
    assert len([n for n in left if len(n) == 32]) == index.KEEP
    assert f"{index.KEEP + 7:032x}" in left and f"{0:032x}" not in left
    assert ".left-by-a-kill.123" not in left and "not-ours" in left
    assert index.load(str(store), ("k",)) == {}
    assert index.load(str(store), ("other",)) is None
