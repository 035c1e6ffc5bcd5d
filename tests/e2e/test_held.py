"""Protected names that arrive with content are held, not refused (protect/held.py).

A clone, checkout, restore, stash pop or `tar x` of a tree carrying `.vscode/`,
`.idea/`, `.envrc`, `.mcp.json` succeeds with every ordinary file in place; the
protected ones never exist at their paths while the agent runs (checked from
inside and from outside while it still runs), are listed at exit and kept in
the invoking user's state, and `confine held show|apply|discard` handles them.
Each claim has its control: the same clone outside the sandbox writes the
protected files (the repository carries them), ordinary names beside the
refused ones work. The refusals that stay (links, symlinks, renames onto a
protected name, git internals) are tried too, and the held area, which the
agent can write, is attacked: symlinks to the person's files, a flood of
files, names with newlines and escape sequences, renames and hard links.
"""
from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import tarfile

import pytest
from conftest import PY

GIT_ENV = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@e", "GIT_CONFIG_COUNT": "1",
           "GIT_CONFIG_KEY_0": "safe.directory", "GIT_CONFIG_VALUE_0": "*"}
PROTECTED = {".envrc": "export HELD=1\n", ".mcp.json": '{"mcpServers": {}}\n',
             ".vscode/tasks.json": '{"tasks": []}\n', ".vscode/settings.json": "{}\n",
             ".idea/workspace.xml": "<project/>\n", "sub/.envrc": "echo sub\n"}
ORDINARY = {"a.txt": "a\n", "sub/b.txt": "b\n", "README": "readme\n"}
ROOTS = [".envrc", ".idea", ".mcp.json", ".vscode", "sub/.envrc"]
# A clone or checkout of protected names leaves them staged and in commits a later
# `git checkout`/`restore` would write: the exit check notes that, and a noted
# alert exits 123 where the agent exited 0 (issue 21 item 7)
NOTED = 123
GITC = ["git", "-c", "user.name=t", "-c", "user.email=t@e"]


def _git(*args: str, cwd: str | None = None) -> None:
    subprocess.run(["git", *args], check=True, env=GIT_ENV, cwd=cwd, capture_output=True)


def make_bare(sb, with_branch: bool = False) -> str:
    """`up.git` in the workdir: a bare repository whose tree carries PROTECTED
    and ORDINARY (and a branch `other` that changes .envrc and a task)."""
    src = os.path.join(sb.workdir, "..", os.path.basename(sb.workdir) + "-src")
    shutil.rmtree(src, ignore_errors=True)
    _git("init", "-q", "-b", "main", src)
    for rel, text in {**PROTECTED, **ORDINARY}.items():
        os.makedirs(os.path.dirname(os.path.join(src, rel)), exist_ok=True)
        with open(os.path.join(src, rel), "w") as f:
            f.write(text)
    _git("add", "-A", cwd=src)
    _git("commit", "-qm", "init", cwd=src)
    if with_branch:
        _git("checkout", "-qb", "other", cwd=src)
        for rel in (".envrc", ".vscode/tasks.json", "a.txt"):
            with open(os.path.join(src, rel), "a") as f:
                f.write("# other\n")
        _git("commit", "-qam", "other", cwd=src)
        _git("checkout", "-q", "main", cwd=src)
    up = os.path.join(sb.workdir, "up.git")
    _git("clone", "-q", "--bare", src, up)
    shutil.rmtree(src)
    subprocess.run(["chown", "-R", f"{sb.pw.pw_uid}:{sb.pw.pw_gid}", up], check=True)
    return up


def denials(stderr: str) -> list[str]:
    """confine's denial lines, but for issue 11 item 1 (the broker's vetted git
    configs keyed by inode number: a reused inode reads as one; fixed apart)."""
    return [ln for ln in stderr.splitlines() if "denied:" in ln
            and not ln.endswith("a git config checked by confine")]


def run_id(stderr: str) -> str:
    m = re.search(r"confine held show (\S+)`", stderr)
    assert m, stderr
    return m.group(1)


def held_json(sb) -> list:
    p = sb.confine("held", "list", "--json")
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


@pytest.fixture
def cleanup(request):
    """Runs whose held state a test made: discarded at the end."""
    made: list[tuple[object, str]] = []
    yield made
    for sb, rid in made:
        sb.confine("held", "discard", rid)


def present(wd: str, rels) -> dict:
    return {r: os.path.lexists(os.path.join(wd, r)) for r in rels}


CLONE_BODY = r'''
import subprocess
def sh(*a, **kw):
    r = subprocess.run(list(a), capture_output=True, text=True, **kw)
    return [r.returncode, r.stdout, r.stderr]
R["clone"] = sh("git", "clone", "-q", "up.git", "c")
R["inside"] = {p: os.path.lexists("c/" + p) for p in P["all"]}
R["status"] = sh("git", "-C", "c", "status", "--porcelain")
R["tmp held"] = os.path.isfile(os.environ["TMPDIR"] + "/held/c/.envrc")
'''


def test_clone_holds_protected_files_and_apply_puts_them_in_place(sandbox, cleanup):
    """(Writing to the clone's files afterwards is left to the next tests: until
    issue 11 item 1 is fixed, a file may get the inode number of the config the
    broker vetted and be refused.)"""
    make_bare(sandbox)
    wd = sandbox.workdir
    # control: outside the sandbox the same clone writes the protected files
    ctl = sandbox.outside(["git", "clone", "-q", "up.git", "ctl"])
    assert ctl.returncode == 0, ctl.stderr
    assert all(present(os.path.join(wd, "ctl"), PROTECTED).values())
    shutil.rmtree(os.path.join(wd, "ctl"))

    p, r = sandbox.probe(CLONE_BODY, {"all": list(PROTECTED) + list(ORDINARY), "gitc": GITC})
    assert r is not None, p.stderr
    rid = run_id(p.stderr)
    cleanup.append((sandbox, rid))
    assert p.returncode == NOTED, p.stderr
    assert r["clone"][0] == 0, r["clone"]
    assert r["inside"] == {**{k: False for k in PROTECTED}, **{k: True for k in ORDINARY}}
    assert r["status"] == [0, "", ""], r["status"]          # as documented: clean
    assert r["tmp held"] is True
    # outside, after the run: never written to the workdir
    c = os.path.join(wd, "c")
    assert present(c, PROTECTED) == {k: False for k in PROTECTED}
    assert all(present(c, ORDINARY).values())
    for root in ROOTS:
        assert f"confine:   held c/{root} (" in p.stderr, p.stderr
    # said while it ran too, once per held path
    said = f"confine: held {c}/.vscode: protected path (.vscode/): made in the run's held area"
    assert p.stderr.count(said) == 1, p.stderr
    assert not denials(p.stderr), p.stderr

    runs = [x for x in held_json(sandbox) if x["run"] == rid]
    assert len(runs) == 1 and sorted(h["path"] for h in runs[0]["held"]) == \
        sorted("c/" + x for x in ROOTS)
    # apply refuses what was not shown
    a = sandbox.confine("held", "apply", rid)
    assert a.returncode == 125 and "not shown yet" in a.stderr, a.stderr
    assert not os.path.lexists(os.path.join(c, ".envrc"))
    s = sandbox.confine("held", "show", rid)
    assert s.returncode == 0, s.stderr
    assert "export HELD=1" in s.stdout and '{"tasks": []}' in s.stdout
    a = sandbox.confine("held", "apply", rid)
    assert a.returncode == 0, a.stderr
    for rel, text in PROTECTED.items():
        with open(os.path.join(c, rel)) as f:
            assert f.read() == text
        st = os.lstat(os.path.join(c, rel))
        assert (st.st_uid, st.st_gid) == (sandbox.agent.pw_uid, sandbox.agent.pw_gid)
    # the person's git sees the applied files as the tracked ones, nothing skipped
    st = sandbox.outside(["git", "-C", "c", "status", "--porcelain"])
    assert (st.returncode, st.stdout) == (0, ""), (st.stdout, st.stderr)
    ls = sandbox.outside(["git", "-C", "c", "ls-files", "-v"])
    assert all(line.startswith("H ") for line in ls.stdout.splitlines()), ls.stdout
    assert not [x for x in held_json(sandbox) if x["run"] == rid]


def test_discard_removes_held_files(sandbox, cleanup):
    make_bare(sandbox)
    p = sandbox.run(["git", "clone", "-q", "up.git", "c"])
    assert p.returncode == NOTED, p.stderr
    rid = run_id(p.stderr)
    cleanup.append((sandbox, rid))
    d = [x for x in held_json(sandbox) if x["run"] == rid][0]["dir"]
    assert os.path.isdir(d)
    sub = sandbox.confine("held", "discard", rid, "c/.envrc", "--json")
    assert sub.returncode == 0 and json.loads(sub.stdout)["discarded"] == ["c/.envrc"], sub
    left = [h["path"] for x in held_json(sandbox) if x["run"] == rid for h in x["held"]]
    assert "c/.envrc" not in left and "c/.vscode" in left
    x = sandbox.confine("held", "discard", rid)
    assert x.returncode == 0, x.stderr
    assert not os.path.exists(d)
    assert not present(os.path.join(sandbox.workdir, "c"), PROTECTED)[".envrc"]
    bad = sandbox.confine("held", "show", rid)
    assert bad.returncode == 125 and "no held files" in bad.stderr, bad.stderr


def test_discard_puts_the_index_back(sandbox, cleanup):
    """The held files were marked skip-worktree inside (so git there is clean);
    after `discard` git reports them deleted, as they are, and an entry the
    person marked skip-worktree themselves keeps its bit."""
    make_bare(sandbox)
    p = sandbox.run(["git", "clone", "-q", "up.git", "c"])
    assert p.returncode == NOTED, p.stderr     # the clone carries protected names
    rid = run_id(p.stderr)
    cleanup.append((sandbox, rid))
    mine = sandbox.outside(["git", "-C", "c", "update-index", "--skip-worktree", "README"])
    assert mine.returncode == 0, mine.stderr
    # control: before the discard the held entries are skipped and git is clean
    st = sandbox.outside(["git", "-C", "c", "status", "--porcelain"])
    assert (st.returncode, st.stdout) == (0, ""), (st.stdout, st.stderr)
    ls = sandbox.outside(["git", "-C", "c", "ls-files", "-v", ".envrc", "README"])
    assert ls.stdout.split("\n")[:2] == ["S .envrc", "S README"], ls.stdout
    x = sandbox.confine("held", "discard", rid, "c/.envrc", "c/.vscode")
    assert x.returncode == 0, x.stderr
    st = sandbox.outside(["git", "-C", "c", "status", "--porcelain"])
    assert sorted(st.stdout.splitlines()) == [" D .envrc", " D .vscode/settings.json",
                                              " D .vscode/tasks.json"], st.stdout
    ls = sandbox.outside(["git", "-C", "c", "ls-files", "-v"])
    flags = dict(reversed(line.split(" ", 1)) for line in ls.stdout.splitlines())
    assert flags[".envrc"] == "H" and flags[".vscode/tasks.json"] == "H", flags
    # not discarded: still held, still skipped; the person's own bit untouched
    assert flags[".mcp.json"] == "S" and flags["README"] == "S", flags


WAIT_BODY = r'''
import subprocess, sys
r = subprocess.run(["git", "clone", "-q", "up.git", "c"], capture_output=True, text=True)
print("ready %d" % r.returncode, flush=True)
sys.stdin.readline()
'''


def test_held_files_are_absent_from_outside_while_the_agent_runs(sandbox, cleanup):
    make_bare(sandbox)
    proc = sandbox.popen([PY, "-c", WAIT_BODY], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line == "ready 0\n", (line, proc.stderr.read() if proc.poll() is not None else "")
        c = os.path.join(sandbox.workdir, "c")
        # while the agent still runs: ordinary files there, protected ones not
        assert all(present(c, ORDINARY).values())
        assert present(c, PROTECTED) == {k: False for k in PROTECTED}
        # the person's git outside sees nothing deleted either
        st = sandbox.outside(["git", "-C", "c", "status", "--porcelain"])
        assert (st.returncode, st.stdout) == (0, ""), st
        proc.stdin.write("\n")
        proc.stdin.flush()
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == NOTED, err
    cleanup.append((sandbox, run_id(err)))


GIT_OPS_BODY = r'''
import subprocess
def sh(*a):
    r = subprocess.run(list(a), capture_output=True, text=True)
    return [r.returncode, r.stdout, r.stderr]
os.chdir("c")
R["reset"] = sh("git", "reset", "-q", "--hard")       # checks out the whole tree
os.unlink("a.txt")
R["restore"] = sh("git", "restore", "--source=HEAD", ":/")
R["restored"] = os.path.isfile("a.txt")
R["checkout"] = sh("git", "checkout", "-q", "other")
R["status other"] = sh("git", "status", "--porcelain")
with open("a.txt", "a") as f:
    f.write("stash me\n")
R["stash"] = sh(*P["gitc"], "stash", "-q")
R["checkout main"] = sh("git", "checkout", "-q", "main")
R["cherry-pick"] = sh(*P["gitc"], "cherry-pick", "other")
R["stash pop"] = sh("git", "stash", "pop", "-q")
R["status end"] = sh("git", "status", "--porcelain")
R["commit"] = sh(*P["gitc"], "commit", "-qam", "edit")
R["changed"] = sh("git", "show", "--name-status", "--format=", "HEAD")
R["inside"] = {p: os.path.lexists(p) for p in P["protected"]}
'''


def test_restore_checkout_stash_and_cherry_pick_succeed(sandbox, cleanup):
    """In a clone made outside without a checkout (its config is not one the
    broker vetted: issue 11 item 1 reuses such inode numbers), every tree-writing
    git operation inside."""
    make_bare(sandbox, with_branch=True)
    ctl = sandbox.outside(["git", "clone", "-q", "--no-checkout", "up.git", "c"])
    assert ctl.returncode == 0, ctl.stderr
    # a local branch, so that checking it out inside writes no tracking config
    # (a repository that existed at start: issue 11 item 3)
    ctl = sandbox.outside(["git", "-C", "c", "branch", "-q", "--no-track", "other", "origin/other"])
    assert ctl.returncode == 0, ctl.stderr
    p, r = sandbox.probe(GIT_OPS_BODY, {"protected": list(PROTECTED), "gitc": GITC})
    assert r is not None, p.stderr
    cleanup.append((sandbox, run_id(p.stderr)))
    for k in ("reset", "restore", "checkout", "stash", "checkout main", "cherry-pick",
              "stash pop"):
        assert r[k][0] == 0, (k, r[k], p.stderr)
    assert r["restored"] is True
    assert r["status other"][1] == ""
    assert r["status end"][1] == " M a.txt\n", r["status end"]
    assert r["commit"][0] == 0, r["commit"]
    assert r["changed"][1] == "M\ta.txt\n", r["changed"]     # no deletion committed
    assert not any(r["inside"].values()), r["inside"]
    assert not any(present(os.path.join(sandbox.workdir, "c"), PROTECTED).values())
    assert p.returncode == NOTED and not denials(p.stderr), p.stderr


def test_checkout_in_a_repository_that_existed_at_start(sandbox, cleanup):
    """The repository is there before the run (its .git pinned, .git/config a
    read-only bind); a branch that adds protected files is checked out inside."""
    wd = sandbox.workdir
    _git("init", "-q", "-b", "main", wd)
    with open(os.path.join(wd, "a.txt"), "w") as f:
        f.write("a\n")
    _git("add", "-A", cwd=wd)
    _git("commit", "-qm", "one", cwd=wd)
    _git("checkout", "-qb", "other", cwd=wd)
    for rel, text in PROTECTED.items():
        os.makedirs(os.path.dirname(os.path.join(wd, rel)) or wd, exist_ok=True)
        with open(os.path.join(wd, rel), "w") as f:
            f.write(text)
    _git("add", "-A", cwd=wd)
    _git("commit", "-qm", "two", cwd=wd)
    _git("checkout", "-q", "main", cwd=wd)
    assert not any(present(wd, PROTECTED).values())
    subprocess.run(["chown", "-R", f"{sandbox.pw.pw_uid}:{sandbox.pw.pw_gid}", wd], check=True)
    body = (GIT_OPS_BODY.split("os.chdir")[0]
            + 'R["checkout"] = sh("git", "checkout", "-q", "other")\n'
            + 'R["status"] = sh("git", "status", "--porcelain")\n'
            + 'R["back"] = sh("git", "checkout", "-q", "main")\n'
            + 'R["again"] = sh("git", "checkout", "-q", "other")\n'
            + 'R["inside"] = {p: os.path.lexists(p) for p in P["protected"]}\n')
    p, r = sandbox.probe(body, {"protected": list(PROTECTED)})
    assert r is not None, p.stderr
    cleanup.append((sandbox, run_id(p.stderr)))
    assert r["checkout"][0] == r["back"][0] == r["again"][0] == 0, (r, p.stderr)
    assert r["status"] == [0, "", ""], r["status"]
    assert not any(r["inside"].values()) and not any(present(wd, PROTECTED).values())
    for root in ROOTS:
        assert f"confine:   held {root} (" in p.stderr, p.stderr


def test_tar_x_holds_protected_members(sandbox, cleanup):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for rel, text in {**PROTECTED, **ORDINARY}.items():
            data = text.encode()
            info = tarfile.TarInfo("t/" + rel)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    arch = os.path.join(sandbox.workdir, "a.tar")
    with open(arch, "wb") as f:
        f.write(buf.getvalue())
    os.chmod(arch, 0o644)
    p = sandbox.run(["tar", "xf", "a.tar"])
    assert p.returncode == 0, p.stderr
    t = os.path.join(sandbox.workdir, "t")
    assert all(present(t, ORDINARY).values())
    assert not any(present(t, PROTECTED).values())
    rid = run_id(p.stderr)
    cleanup.append((sandbox, rid))
    assert "confine:   held t/.vscode (directory, 2 file(s)" in p.stderr, p.stderr
    # control: the same archive outside the sandbox writes them
    ctl = sandbox.outside(["tar", "xf", "a.tar", "--transform", "s,^t/,ctl/,"])
    assert ctl.returncode == 0 and all(present(os.path.join(sandbox.workdir, "ctl"),
                                               PROTECTED).values())


def test_unzip_holds_protected_members(sandbox, cleanup):
    import zipfile
    arch = os.path.join(sandbox.workdir, "a.zip")
    with zipfile.ZipFile(arch, "w") as z:
        for rel, text in {**PROTECTED, **ORDINARY}.items():
            z.writestr("z/" + rel, text)
    os.chmod(arch, 0o644)
    p = sandbox.run(["unzip", "-q", "a.zip"])
    assert p.returncode == 0, p.stderr
    z = os.path.join(sandbox.workdir, "z")
    assert all(present(z, ORDINARY).values())
    assert not any(present(z, PROTECTED).values())
    rid = run_id(p.stderr)
    cleanup.append((sandbox, rid))
    for root in ROOTS:
        assert f"confine:   held z/{root} (" in p.stderr, p.stderr
    ctl = sandbox.outside(["unzip", "-q", "-d", "ctl", "a.zip"])
    assert ctl.returncode == 0 and all(present(os.path.join(sandbox.workdir, "ctl", "z"),
                                               PROTECTED).values())


OWN_BODY = r'''
O = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
os.makedirs(".git/hooks")
opened("plain", O)
# what stays refused: the agent's own links, renames and git internals
attempt("symlink .envrc", lambda: os.symlink("plain", ".envrc"))
attempt("symlink ordinary", lambda: os.symlink("plain", "plain-link"))
attempt("link .mcp.json", lambda: os.link("plain", ".mcp.json"))
attempt("link ordinary", lambda: os.link("plain", "plain-hard"))
attempt("rename onto .envrc", lambda: os.rename("plain-hard", ".envrc"))
attempt("fifo .envrc", lambda: os.mkfifo(".envrc"))
attempt("hook", lambda: opened(".git/hooks/pre-commit", O, 0o755))
attempt("hook sample", lambda: opened(".git/hooks/pre-commit.sample", O))
attempt("git config", lambda: opened(".git/config", O))
attempt("gitfile", lambda: (os.mkdir("n"), opened("n/.git", O))[-1])
# held: a new protected file made by the agent itself (echo x > .envrc)
def write(path, text):
    with open(path, "w") as f:
        f.write(text)
attempt("write .envrc", lambda: write(".envrc", "export A=1\n"))
R[".envrc exists"] = os.path.lexists(".envrc")
attempt("append .envrc", lambda: write(".envrc", "export B=2\n"))
# the held area's content by the agent's own hand: renames and links
T = os.environ["TMPDIR"] + "/held"
attempt("rename held .envrc away", lambda: os.rename(".envrc", "renamed"))
attempt("mkdir .vscode", lambda: os.makedirs(".vscode/sub"))
attempt("write task", lambda: write(".vscode/sub/tasks.json", "{}\n"))
attempt("task to ordinary", lambda: os.rename(".vscode/sub/tasks.json", "task-plain"))
R["task-plain"] = os.path.isfile("task-plain")
attempt("ordinary back to task", lambda: os.rename("task-plain", ".vscode/sub/tasks.json"))
attempt("task onto .mcp.json", lambda: (write("again", "x"), os.rename("again", ".mcp.json"))[-1])
attempt("held file into workdir", lambda: os.rename(T + "/.envrc", ".envrc"))
attempt("held dir into workdir", lambda: os.rename(T + "/.vscode", "vs"))
attempt("hard link held to .envrc", lambda: os.link(T + "/.envrc", ".envrc"))
attempt("hard link held to ordinary", lambda: os.link(T + "/.envrc", "envrc-copy"))
R["visible"] = sorted(n for n in os.listdir(".") if n.startswith("."))
'''


def test_refusals_that_stay_and_the_agents_own_held_writes(sandbox, cleanup):
    p, r = sandbox.probe(OWN_BODY)
    assert r is not None, p.stderr
    assert r["symlink ordinary"] == "ok" and r["link ordinary"] == "ok"      # controls
    for k in ("symlink .envrc", "link .mcp.json", "rename onto .envrc", "fifo .envrc",
              "hook", "git config", "task onto .mcp.json", "held file into workdir",
              "hard link held to .envrc"):
        assert r[k] == "EACCES", (k, r[k], p.stderr)
    # a `.git` file is made without a name and appears only with a checked
    # `gitdir:` line (protect/gitlink.py): this one never appears
    assert r["gitfile"] == "ok" and not os.path.lexists(os.path.join(sandbox.workdir, "n/.git"))
    assert r["hook sample"] == "ok"
    assert r["write .envrc"] == "ok" and r["append .envrc"] == "ok"
    assert r[".envrc exists"] is False
    assert r["rename held .envrc away"] == "ENOENT"       # the name does not exist here
    assert r["mkdir .vscode"] == "ok" and r["write task"] == "ok"
    # the private TMPDIR may be a tmpfs of its own: then the kernel says EXDEV
    assert r["task to ordinary"] in ("ok", "EXDEV"), r
    if r["task to ordinary"] == "ok":
        assert r["task-plain"] is True and r["ordinary back to task"] == "ok", r
    assert r["held dir into workdir"] == "EXDEV"
    assert r["hard link held to ordinary"] in ("ok", "EXDEV")    # EXDEV: Landlock's refer rule
    assert r["visible"] == [".git"], r["visible"]
    wd = sandbox.workdir
    assert not os.path.lexists(os.path.join(wd, ".envrc"))
    assert not os.path.lexists(os.path.join(wd, ".vscode"))
    assert not os.path.lexists(os.path.join(wd, ".mcp.json"))
    assert "denied: symlink" in p.stderr and "protected path (.envrc)" in p.stderr
    assert f"confine: held {wd}/.envrc: protected path (.envrc): made in" in p.stderr
    rid = run_id(p.stderr)
    cleanup.append((sandbox, rid))
    assert "confine:   held .envrc (file, 11 bytes)" in p.stderr, p.stderr
    assert "confine:   held .vscode (directory, 1 file(s), 3 bytes)" in p.stderr, p.stderr
    s = sandbox.confine("held", "show", rid, ".envrc")
    assert "export B=2" in s.stdout and "export A=1" not in s.stdout, s.stdout


ATTACK_BODY = r'''
T = os.environ["TMPDIR"] + "/held"
H = P["home"]
os.makedirs("w1")
# symlinks in the held area at protected paths, to the person's files
os.symlink(H + "/.bashrc", T + "/.envrc")
os.makedirs(T + "/.vscode")
os.symlink(H + "/.bashrc", T + "/.vscode/tasks.json")
os.symlink(H, T + "/.idea")
os.makedirs(T + "/w1")
os.symlink(H, T + "/w1/sub")
os.mkfifo(T + "/.vscode/fifo")
# names with newlines and escape sequences
weird = "we\nird\x1b[2J\x1b]0;pwn\x07"
os.makedirs(weird)
with open(weird + "/.envrc", "w") as f:
    f.write("\x1b[31mred\x1b[0m\nconfine: nothing held\n")
# the held area itself swapped for a symlink to the workdir
os.rename(T, T + "-moved")
os.symlink(os.getcwd(), T)
with open(".mcp.json", "w") as f:
    f.write("{}\n")
R["mcp here"] = os.path.lexists(".mcp.json")
R["mcp in moved"] = os.path.isfile(T + "-moved/.mcp.json")
'''


def test_attacks_on_the_held_area(sandbox, cleanup, planted_home):
    before = open(os.path.join(planted_home, ".bashrc")).read()
    p, r = sandbox.probe(ATTACK_BODY, {"home": planted_home})
    assert r is not None, p.stderr
    assert r == {"mcp here": False, "mcp in moved": True}, (r, p.stderr)
    assert "\x1b" not in p.stderr and "\x07" not in p.stderr
    assert not any(line.startswith("confine: nothing held") for line in p.stderr.splitlines())
    rid = run_id(p.stderr)
    cleanup.append((sandbox, rid))
    assert "held we\\x0aird\\x1b[2J\\x1b]0;pwn\\x07/.envrc" in p.stderr, p.stderr
    assert "not kept: .envrc: a symlink" in p.stderr, p.stderr
    assert "not kept: .vscode/tasks.json: a symlink" in p.stderr, p.stderr
    assert "not kept: .idea: a symlink" in p.stderr, p.stderr
    assert "held .mcp.json" in p.stderr
    wd = sandbox.workdir
    assert not os.path.lexists(os.path.join(wd, ".envrc"))
    assert not os.path.lexists(os.path.join(wd, ".mcp.json"))
    m = [x for x in held_json(sandbox) if x["run"] == rid][0]
    # nothing in the person's state is a symlink or a FIFO
    for dp, dn, fn in os.walk(m["dir"]):
        for n in dn + fn:
            st = os.lstat(os.path.join(dp, n))
            assert not (os.path.islink(os.path.join(dp, n)) or (st.st_mode & 0o170000) == 0o010000)
    s = sandbox.confine("held", "show", rid)
    assert s.returncode == 0 and "\x1b" not in s.stdout and "\x07" not in s.stdout, s.stdout
    assert "\\x1b[31mred" in s.stdout
    a = sandbox.confine("held", "apply", rid)
    assert a.returncode == 0, a.stderr
    assert os.path.isfile(os.path.join(wd, "we\nird\x1b[2J\x1b]0;pwn\x07", ".envrc"))
    assert not os.path.islink(os.path.join(wd, ".envrc"))
    assert open(os.path.join(planted_home, ".bashrc")).read() == before


FLOOD_BODY = r'''
os.makedirs(".vscode")
for i in range(P["n"]):
    fd = os.open(".vscode/f%05d" % i, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    os.close(fd)
R["n"] = len(os.listdir(os.environ["TMPDIR"] + "/held/.vscode"))
'''


def test_a_flood_of_held_files_is_bounded(user_sandbox, cleanup):
    from confine.protect import held
    n = held.ENTRY_CAP + 5
    p, r = user_sandbox.probe(FLOOD_BODY, {"n": n}, timeout=300)
    assert r == {"n": n}, p.stderr
    rid = run_id(p.stderr)
    cleanup.append((user_sandbox, rid))
    assert f"over the {held.ENTRY_CAP} entries" in p.stderr, p.stderr
    m = [x for x in held_json(user_sandbox) if x["run"] == rid][0]
    assert m["held"][0]["files"] == held.ENTRY_CAP - 1       # the directory is one entry


def test_held_list_filtered_by_workdir(sandbox, cleanup):
    """`confine held list -w DIR` shows the runs of that workdir (or below it) only
    (issue 23 item 7); control: without -w the same run is listed, and a workdir
    that holds nothing lists nothing."""
    p = sandbox.run(["/bin/sh", "-c", "echo 'echo hi' > .envrc"])
    assert p.returncode == 0, p.stderr
    rid = run_id(p.stderr)
    cleanup.append((sandbox, rid))
    assert rid in [r["run"] for r in held_json(sandbox)]
    mine = sandbox.confine("held", "list", "--json", "-w", sandbox.workdir)
    assert mine.returncode == 0, mine.stderr
    rows = json.loads(mine.stdout)
    assert [r["run"] for r in rows] == [rid], rows
    above = json.loads(sandbox.confine("held", "list", "--json", "-w",
                                       os.path.dirname(sandbox.workdir)).stdout)
    assert rid in [r["run"] for r in above]
    other = sandbox.confine("held", "list", "-w", sandbox.workdir + "-elsewhere")
    assert other.returncode == 0 and "nothing is held" in other.stdout, other.stdout
    assert json.loads(sandbox.confine("held", "list", "--json", "-w",
                                      sandbox.workdir + "-elsewhere").stdout) == []
