"""Issue 10, items 2, 5, 6, 7: what the exit check did not see, from inside a real run.

Each test runs `confine exec` (root-started and unprivileged) and makes the
agent plant something that a person's git would run or write later:

* a bare repository hidden under .git/objects with core.pager, reached by a
  symlink `tools` (item 2: the walk skipped git internals);
* `chmod 0777 . .git` (item 7: modes were not protected);
* a staged `.envrc`, a commit adding `.vscode/tasks.json`, a replace ref,
  info/grafts and objects/info/alternates (item 5: git's own data);
* files named by the global git config (include.path, core.pager) in the
  workdir (item 6): bound read-only like .git/hooks.

Each has a control: an ordinary change beside it that stays and is not
reported, or the same write outside the sandbox, which works.
"""
from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile

import pytest

from confine import protect

# The agent exited 0 but the exit check acted: confine exits 123 (session.EXIT_CHECK_ACTED).
ACTED = 123

GIT = shutil.which("git") or "/usr/bin/git"
GITENV = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "GIT_CONFIG_NOSYSTEM": "1",
          "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "t",
          "GIT_COMMITTER_EMAIL": "t@e", "LANG": "C", "GIT_CONFIG_COUNT": "1",
          "GIT_CONFIG_KEY_0": "safe.directory", "GIT_CONFIG_VALUE_0": "*"}
GITENV_IN = " ".join(f"{k}='{v}'" for k, v in GITENV.items() if k != "PATH")


def _repo(sandbox) -> str:
    wd = sandbox.workdir
    sh = (f"{GIT} init -q -b main . && echo hi > README && {GIT} add README && "
          f"{GIT} commit -qm one && {GIT} gc -q")
    subprocess.run(sh, shell=True, cwd=wd, check=True, env=GITENV, capture_output=True)
    subprocess.run(["chown", "-R", f"{sandbox.agent.pw_uid}:{sandbox.agent.pw_gid}", wd],
                   check=True)
    return wd


def _inside(sandbox, script: str, **kw):
    return sandbox.run(["/bin/sh", "-c", f"export {GITENV_IN}; {script}"], **kw)


def test_hidden_bare_repository_under_git_objects_is_found(sandbox):
    wd = _repo(sandbox)
    marker = os.path.join(tempfile.gettempdir(), f"confine-pwn-{os.getpid()}-{sandbox.mode}")
    p = _inside(sandbox, (
        f"{GIT} init -q --bare .git/objects/zz/b && "
        f"{GIT} -C .git/objects/zz/b config core.pager 'touch {marker}' && "
        "ln -s .git/objects/zz/b tools && "
        f"{GIT} init -q --bare plain.git && {GIT} -C plain.git config user.name x"))
    assert p.returncode == ACTED, p.stderr
    assert "new repo" in p.stderr and ".git/objects/zz/b/config" in p.stderr, p.stderr
    assert "core.pager" in p.stderr
    cfg = open(os.path.join(wd, ".git/objects/zz/b/config")).read()
    assert "pager" not in cfg
    # control: the symlink and a harmless bare repository stay, unreported
    assert os.path.islink(os.path.join(wd, "tools"))
    assert "name = x" in open(os.path.join(wd, "plain.git/config")).read()
    assert "plain.git" not in p.stderr
    # and the user's git in tools runs nothing
    subprocess.run([GIT, "-c", "core.pager=", "-C", os.path.join(wd, "tools"), "config", "-l"],
                   env=GITENV, capture_output=True)
    q = subprocess.run([GIT, "-C", os.path.join(wd, "tools"), "config", "core.pager"],
                       env=GITENV, capture_output=True, text=True)
    assert q.stdout.strip() == ""
    assert not os.path.exists(marker)


def test_modes_of_the_workdir_and_git_directories_are_restored(sandbox):
    wd = _repo(sandbox)
    os.mkdir(os.path.join(wd, "sub"), 0o755)
    os.chown(os.path.join(wd, "sub"), sandbox.agent.pw_uid, sandbox.agent.pw_gid)
    before = {r: stat.S_IMODE(os.stat(os.path.join(wd, r)).st_mode) for r in (".", ".git")}
    p = _inside(sandbox, "chmod 0777 . .git .git/refs sub && "
                         f"{GIT} init -q new && chmod 0777 new new/.git")
    assert p.returncode == ACTED, p.stderr
    for r in (".", ".git"):
        assert stat.S_IMODE(os.stat(os.path.join(wd, r)).st_mode) == before[r], r
        assert f"chmod     {r} " in p.stderr, p.stderr
    assert not stat.S_IMODE(os.stat(os.path.join(wd, ".git/refs")).st_mode) & 0o022
    for r in ("new", "new/.git"):        # made during the run: no longer writable by others
        assert not stat.S_IMODE(os.stat(os.path.join(wd, r)).st_mode) & 0o002, r
    # control: the chmod did work inside, and an ordinary directory keeps its new mode
    assert stat.S_IMODE(os.stat(os.path.join(wd, "sub")).st_mode) == 0o777
    assert "sub" not in [ln.split()[1] for ln in p.stderr.splitlines() if ln.startswith("  chmod")]


GIT_DATA = (
    "h=$({git} hash-object -w --stdin </dev/null) && "
    "{git} update-index --add --cacheinfo 100644,$h,.envrc && "
    "{git} checkout -q -b side && "
    "{git} update-index --add --cacheinfo 100644,$h,.vscode/tasks.json && "
    "{git} commit -qm side && {git} checkout -q -f main && "
    # the control first: once .envrc is staged, a commit would carry it
    "{git} checkout -q -b plain && echo x > main.py && {git} add main.py && "
    "{git} commit -qm plain && {git} checkout -q main && "
    "{git} update-index --add --cacheinfo 100644,$h,.envrc && "
    "{git} replace HEAD side && echo $h > .git/info/grafts && "
    "echo /tmp > .git/objects/info/alternates"
)


def test_git_data_that_writes_protected_files_later_is_reported(sandbox):
    wd = _repo(sandbox)
    p = _inside(sandbox, GIT_DATA.format(git=GIT))
    assert p.returncode == ACTED, p.stderr
    err = p.stderr
    assert "staged entries for protected paths" in err and ".envrc" in err, err
    assert "refs/heads/side" in err and ".vscode/tasks.json" in err, err
    assert ".git/info/grafts" in err and ".git/objects/info/alternates" in err, err
    assert "replace" in err
    # reverted: no replace ref, grafts or alternates are left
    r = subprocess.run([GIT, "-C", wd, "replace", "-l"], env=GITENV, capture_output=True,
                       text=True)
    assert r.stdout.strip() == ""
    assert not os.path.exists(os.path.join(wd, ".git/info/grafts"))
    assert not os.path.exists(os.path.join(wd, ".git/objects/info/alternates"))
    # control: the ordinary commit on `plain` is kept and not reported
    assert "refs/heads/plain" not in err
    r = subprocess.run([GIT, "-C", wd, "log", "-1", "--format=%s", "plain"], env=GITENV,
                       capture_output=True, text=True)
    assert r.stdout.strip() == "plain"


def test_ordinary_git_work_reports_nothing(sandbox):
    """Control for the above: commits, branches, a gc and a repack are silent."""
    _repo(sandbox)
    p = _inside(sandbox, (f"echo x > a.py && {GIT} add a.py && {GIT} commit -qm a && "
                          f"{GIT} checkout -q -b b && echo y > b.py && {GIT} add b.py && "
                          f"{GIT} commit -qm b && {GIT} gc -q && {GIT} tag t1 && "
                          f"{GIT} checkout -q main"))
    assert p.returncode == 0, p.stderr
    assert "PROTECTED PATHS" not in p.stderr, p.stderr


def test_files_named_by_the_global_git_config_are_protected(sandbox):
    wd = _repo(sandbox)
    os.makedirs(os.path.join(wd, "tools"))
    for rel in ("tools/pager", "inc.cfg", "tools/free"):
        with open(os.path.join(wd, rel), "w") as f:
            f.write("[user]\n" if rel.endswith(".cfg") else "#!/bin/sh\ncat\n")
    subprocess.run(["chown", "-R", f"{sandbox.agent.pw_uid}:{sandbox.agent.pw_gid}", wd],
                   check=True)
    xdg = tempfile.mkdtemp(prefix="confine-xdg-")
    try:
        os.makedirs(os.path.join(xdg, "git"))
        with open(os.path.join(xdg, "git", "config"), "w") as f:
            f.write(f"[include]\n\tpath = {wd}/inc.cfg\n[core]\n\tpager = sh {wd}/tools/pager\n")
        os.chmod(xdg, 0o755)
        body = r'''
for rel in ("inc.cfg", "tools/pager", "tools/free"):
    attempt(rel, lambda r=rel: opened(r, os.O_WRONLY | os.O_APPEND))
'''
        p, res = sandbox.probe(body, env_extra=[f"XDG_CONFIG_HOME={xdg}"])
        assert res is not None, p.stderr
        assert res["inc.cfg"] != "ok" and res["tools/pager"] != "ok", res
        assert res["tools/free"] == "ok", res             # control, inside
        assert open(os.path.join(wd, "tools/pager")).read() == "#!/bin/sh\ncat\n"
        # control: outside the sandbox the same account may write it
        _, out = sandbox.outside_probe(body)
        assert out["tools/pager"] == "ok", out
    finally:
        shutil.rmtree(xdg, ignore_errors=True)


# --- the scan itself, no run (fast; no root needed) ------------------------------------------

def test_global_config_references_and_home_paths(tmp_path):
    wd = tmp_path / "home" / "src" / "w"
    (wd / ".git").mkdir(parents=True)
    (wd / ".git" / "config").write_text("[core]\n\tfsmonitor = ~/src/w/bin/fsm\n"
                                        "[include]\n\tpath = ~/src/w/more.cfg\n")
    for rel in ("bin/fsm", "more.cfg", "inc2.cfg", "bin/edit", "bin/ssh", "hooks2/x",
                "via/extra"):
        (wd / rel).parent.mkdir(parents=True, exist_ok=True)
        (wd / rel).write_text("x\n")
    (wd / "more.cfg").write_text(f"[core]\n\teditor = {wd}/bin/edit\n")
    extra = tmp_path / "extra.cfg"
    extra.write_text(f"[core]\n\tsshCommand = env X=1 {wd}/via/extra -v\n")
    g = tmp_path / "gitconfig"
    g.write_text(f"[include]\n\tpath = {wd}/inc2.cfg\n\tpath = {extra}\n"
                 f"[includeIf \"gitdir:{wd}/\"]\n\tpath = {wd}/bin/ssh\n"
                 f"[core]\n\thooksPath = {wd}/hooks2\n")
    snap = protect.snapshot(str(wd), home=str(tmp_path / "home"), git_configs=[str(g)])
    for rel in ("bin/fsm", "more.cfg", "bin/edit", "inc2.cfg", "bin/ssh", "hooks2",
                "via/extra"):
        assert rel in snap.roots, (rel, sorted(snap.roots))
    assert snap.roots["hooks2"].tree


def test_walk_enters_git_internals_and_records_modes(tmp_path):
    wd = tmp_path / "w"
    b = wd / ".git" / "refs" / "x" / "b"
    for d in (b / "objects", b / "refs", wd / ".git" / "objects", wd / ".git" / "refs"):
        d.mkdir(parents=True, exist_ok=True)
    (wd / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (b / "HEAD").write_text("ref: refs/heads/main\n")
    (b / "config").write_text("[core]\n\tbare = true\n")
    snap = protect.snapshot(str(wd), git_configs=[])
    assert ".git/refs/x/b" in snap.gitdirs and ".git/refs/x/b/config" in snap.roots
    assert {"", ".git", ".git/refs", ".git/refs/x", ".git/refs/x/b"} <= set(snap.dir_modes)


def test_index_parser_versions(tmp_path):
    """DIRC v2, v3 (extended flags) and v4 (prefix-compressed paths), as git writes them."""
    wd = tmp_path / "r"
    subprocess.run([GIT, "init", "-q", str(wd)], check=True, env=GITENV)
    names = ["a/b/.envrc", "a/b/c", "a/b/cd/.mcp.json", "z" * 200 + "/" + "y" * 200]
    for n in names:
        (wd / n).parent.mkdir(parents=True, exist_ok=True)
        (wd / n).write_text("x")
    subprocess.run([GIT, "-C", str(wd), "add", "-A"], check=True, env=GITENV)
    from confine.protect.gitdata import parse_index
    for ver in ("2", "3", "4"):
        subprocess.run([GIT, "-C", str(wd), "update-index", "--index-version", ver],
                       check=True, env=GITENV)
        if ver == "3":          # an intent-to-add entry has the extended flags
            (wd / "ita").write_text("x")
            subprocess.run([GIT, "-C", str(wd), "add", "-N", "ita"], check=True, env=GITENV)
            names.append("ita")
        ents, link = parse_index((wd / ".git" / "index").read_bytes())
        assert sorted(p for p, _, _ in ents) == sorted(names), ver
        assert not link


@pytest.mark.parametrize("n", [3000])
def test_git_data_check_is_bounded_by_what_changed(tmp_path, n):
    """A repository with n files and a packed history: a one-file commit reads a
    handful of objects, not the whole tree."""
    wd = tmp_path / "r"
    subprocess.run([GIT, "init", "-q", "-b", "main", str(wd)], check=True, env=GITENV)
    for i in range(n):
        (wd / f"d{i % 30}" / f"f{i}").parent.mkdir(exist_ok=True)
        (wd / f"d{i % 30}" / f"f{i}").write_text(str(i))
    run = lambda *a: subprocess.run([GIT, "-C", str(wd), *a], check=True, env=GITENV,  # noqa: E731
                                    capture_output=True)
    run("add", "-A")
    run("commit", "-qm", "one")
    run("gc", "-q")
    snap = protect.snapshot(str(wd), git_configs=[])
    (wd / "d3" / "new").write_text("x")
    run("add", "-A")
    run("commit", "-qm", "two")
    from confine.protect import gitdata
    calls = []
    orig = gitdata._Objects.read

    def counting(self, h):
        calls.append(h)
        return orig(self, h)
    gitdata._Objects.read = counting
    try:
        rep = protect.verify_and_revert(snap, quarantine_dir=str(tmp_path / "q"))
    finally:
        gitdata._Objects.read = orig
    assert not rep.alerts, protect.format_report(rep)
    assert 0 < len(calls) < 20, len(calls)


# --- attacks on the git-data reader: each must end in "cannot decide", never in a crash ------

def _git(wd, *a, **kw):
    return subprocess.run([GIT, "-C", str(wd), *a], check=True, env=GITENV, capture_output=True,
                          **kw)


def _loose(wd, kind: bytes, body: bytes) -> str:
    import hashlib
    import zlib
    raw = kind + b" " + str(len(body)).encode() + b"\0" + body
    h = hashlib.sha1(raw).hexdigest()
    d = wd / ".git" / "objects" / h[:2]
    d.mkdir(exist_ok=True)
    (d / h[2:]).write_bytes(zlib.compress(raw, 9))
    return h


def _cannot_decide(tmp_path, wd, snap) -> str:
    rep = protect.verify_and_revert(snap, quarantine_dir=str(tmp_path / "q"))
    text = protect.format_report(rep)
    assert "cannot decide" in text, text
    return text


def _started_repo(tmp_path):
    wd = tmp_path / "r"
    _git(tmp_path, "init", "-q", "-b", "main", str(wd))
    (wd / "a").write_text("a")
    _git(wd, "add", "a")
    _git(wd, "commit", "-qm", "one")
    return wd, protect.snapshot(str(wd), git_configs=[])


def test_a_tree_bomb_is_cannot_decide(tmp_path):
    wd, snap = _started_repo(tmp_path)
    from confine.protect import gitdata
    big = _loose(wd, b"tree", b"100644 x\0" + b"\0" * 20 + b"\0" * (gitdata.OBJECT_CAP + 1000))
    c = _loose(wd, b"commit", f"tree {big}\n\nx\n".encode())
    (wd / ".git" / "refs" / "heads" / "bomb").write_text(c + "\n")
    assert "larger than" in _cannot_decide(tmp_path, wd, snap)


def test_malformed_objects_and_index_are_cannot_decide(tmp_path):
    wd, snap = _started_repo(tmp_path)
    bad_tree = _loose(wd, b"tree", b"100644 no-nul-and-no-hash")
    c = _loose(wd, b"commit", f"tree {bad_tree}\n\nx\n".encode())
    (wd / ".git" / "refs" / "heads" / "bad").write_text(c + "\n")
    (wd / ".git" / "refs" / "heads" / "missing").write_text("ab" * 20 + "\n")
    _cannot_decide(tmp_path, wd, snap)
    (tmp_path / "2").mkdir()
    wd2, snap2 = _started_repo(tmp_path / "2")
    (wd2 / ".git" / "index").write_bytes(b"DIRC\0\0\0\4\0\0\0\5" + b"\xff" * 80)
    _cannot_decide(tmp_path / "2", wd2, snap2)


def test_a_delta_cycle_in_a_pack_is_cannot_decide(tmp_path):
    """Two REF_DELTA entries naming each other as base: bounded, no RecursionError."""
    import hashlib
    import struct
    import zlib
    wd, snap = _started_repo(tmp_path)
    a, b = hashlib.sha1(b"A").digest(), hashlib.sha1(b"B").digest()
    delta = zlib.compress(b"\x01\x01\x01x")          # src 1, dst 1, insert "x"
    ents, offs = b"", {}
    for sha, base in ((a, b), (b, a)):
        offs[sha] = 12 + len(ents)
        ents += bytes([0x70 | 4]) + base + delta    # type 7, size 4
    pack = b"PACK" + struct.pack(">II", 2, 2) + ents
    pack += hashlib.sha1(pack).digest()
    shas = sorted(offs)
    fan = [sum(1 for s in shas if s[0] <= i) for i in range(256)]
    idx = (b"\xfftOc" + struct.pack(">I", 2) + struct.pack(">256I", *fan) + b"".join(shas)
           + b"\0" * 8 + b"".join(struct.pack(">I", offs[s]) for s in shas) + b"\0" * 40)
    pdir = wd / ".git" / "objects" / "pack"
    pdir.mkdir(exist_ok=True)
    (pdir / "pack-x.pack").write_bytes(pack)
    (pdir / "pack-x.idx").write_bytes(idx)
    (wd / ".git" / "refs" / "heads" / "cycle").write_text(a.hex() + "\n")
    _cannot_decide(tmp_path, wd, snap)


def test_a_packed_replace_ref_is_cut_out_of_packed_refs(tmp_path):
    wd, snap = _started_repo(tmp_path)
    (wd / "b").write_text("b")
    _git(wd, "add", "b")
    _git(wd, "commit", "-qm", "two")
    _git(wd, "replace", "HEAD", "HEAD~1")
    _git(wd, "pack-refs", "--all")
    assert b"refs/replace/" in (wd / ".git" / "packed-refs").read_bytes()
    rep = protect.verify_and_revert(snap, quarantine_dir=str(tmp_path / "q"))
    assert any(c.what == "git-data" and "refs/replace/" in c.path for c in rep.alerts)
    assert b"refs/replace/" not in (wd / ".git" / "packed-refs").read_bytes()
    assert _git(wd, "log", "-1", "--format=%s", "main", text=True).stdout.strip() == "two"


def test_probe_reports_hidden_bare_repo_and_modes_blocked_by_the_exit_check(sandbox):
    import json
    _repo(sandbox)
    p = sandbox.confine("probe", "-w", sandbox.workdir, "--json", "--only", "later.hidden_bare_repo",
                        "--only", "later.modes", timeout=120)
    r = json.loads(p.stdout)
    got = {a["id"]: a for a in r["attempts"]}
    for aid in ("later.hidden_bare_repo", "later.modes"):
        assert got[aid]["result"] == "blocked", got[aid]
        assert got[aid]["mechanism"].startswith("exit check"), got[aid]
    # and the exit check of that run did what the battery says (its report in quarantine)
    scratch = os.path.basename(r["targets"]["scratch"])
    qbase = ("/var/lib/confine/quarantine" if sandbox.mode == "root"
             else os.path.join(sandbox.pw.pw_dir, ".local/state/confine/quarantine"))
    reports = [os.path.join(qbase, d, "REPORT.txt") for d in os.listdir(qbase)]
    text = "".join(open(f).read() for f in reports
                   if os.path.exists(f) and scratch in open(f).read())
    assert f"{scratch}/hidden/.git/objects/zz/b/config  sanitized: removed core.pager" in text, text
    assert f"{scratch}/modes/.git" in text and "777 -> 775" in text, text
    # control: the same battery unconfined finds both possible
    p = sandbox.confine("probe", "-w", sandbox.workdir, "--json", "--only",
                        "later.hidden_bare_repo", "--only", "later.modes", timeout=120,
                        env_extra=["CONFINE_TEST_PROBE_UNCONFINED=1"])
    r = json.loads(p.stdout)
    assert {a["id"]: a["result"] for a in r["attempts"]} == {
        "later.hidden_bare_repo": "possible", "later.modes": "possible"}, r["attempts"]
