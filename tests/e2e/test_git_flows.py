"""Git flows that write pointer files inside (issue 23, item 5).

`git worktree add` writes a `.git` file (`gitdir: PATH`) in the new worktree
and a `commondir` in `.git/worktrees/NAME`; both point git somewhere, so the
broker makes them without a name and puts a checked copy in place only when
they point where git itself points them (protect/gitlink.py). Each test makes
the repository outside, as the agent's account, runs git inside, and checks
from outside (the person's git) what was left; each refusal has a control (the
same write outside the sandbox works, or an allowed pointer in the same run).
"""
from __future__ import annotations

import os

SETUP = r'''
set -e
git init -q -b main r
cd r
echo one > f
git add f
git -c user.name=P -c user.email=p@example.invalid commit -qm one
'''
GIT = "git -c user.name=a -c user.email=b@example.invalid"
SAFE = ["-c", "safe.directory=*"]


def _repo(box) -> None:
    p = box.outside(["/bin/sh", "-c", SETUP])
    assert p.returncode == 0, p.stderr


def _git_out(box, *args: str):
    return box.outside(["git", *SAFE, *args])


def test_worktree_add_works_and_commits_in_it(sandbox):
    _repo(sandbox)
    p = sandbox.run(["/bin/sh", "-c", f"""
        cd r && git worktree add -q wt2 && git worktree add -q ../wt || exit 9
        cd wt2 && echo two > g && git add g && {GIT} commit -qm two || exit 8
        git status --porcelain && echo status=$?
        cd ../../wt && {GIT} commit -q --allow-empty -m three && echo done"""], timeout=120)
    assert p.returncode == 0 and "status=0" in p.stdout and "done" in p.stdout, \
        (p.stdout, p.stderr)
    assert "denied" not in p.stderr and "PROTECTED PATHS" not in p.stderr, p.stderr
    wd = sandbox.workdir
    with open(os.path.join(wd, "r/wt2/.git")) as f:
        assert f.read() == f"gitdir: {wd}/r/.git/worktrees/wt2\n"
    with open(os.path.join(wd, "r/.git/worktrees/wt2/commondir")) as f:
        assert f.read() == "../..\n"
    # the person's git: both worktrees, each with its commit, nothing changed
    log = _git_out(sandbox, "-C", "r/wt2", "log", "--format=%s")
    assert log.stdout.split() == ["two", "one"], (log.stdout, log.stderr)
    log = _git_out(sandbox, "-C", "wt", "log", "--format=%s")
    assert log.stdout.split() == ["three", "one"], (log.stdout, log.stderr)
    st = _git_out(sandbox, "-C", "r/wt2", "status", "--porcelain")
    assert (st.returncode, st.stdout) == (0, ""), (st.stdout, st.stderr)


HAND = r'''
set -u
mkdir a b c d e
(cd r && git worktree add -q w)
printf 'gitdir: %s\n' "{out}/.git" > a/.git; echo "a=$?"
echo "gitdir: ../r/.git" > b/.git; echo "b=$?"
ln -s r/.git/worktrees d/l
echo "gitdir: ../d/l/w" > d/.git; echo "d=$?"
printf 'gitdir: ../r/.git/worktrees/w\nx\n' > e/.git; echo "e=$?"
echo "../../../../.." > r/.git/worktrees/w/commondir; echo "cd=$?"
printf 'gitdir: /etc\n' > f; mkdir g && mv f g/.git; echo "g=$?"
printf 'gitdir: ../r/.git/worktrees/w\n' > c/.git; echo "c=$?"
touch z
'''


def test_hand_written_pointers_elsewhere_never_appear(sandbox, outside_dir):
    """A `.git` file pointing outside, to another repository's own git
    directory, through a symlink or with more than git writes, and a
    commondir pointing elsewhere, never appear; the one pointing to the
    worktree's git directory (control) does."""
    _repo(sandbox)
    out = sandbox.outside(["git", "init", "-q", outside_dir])
    assert out.returncode == 0, out.stderr
    p = sandbox.run(["/bin/sh", "-c", HAND.replace("{out}", outside_dir)], timeout=120)
    wd = sandbox.workdir
    assert "g=0" not in p.stdout, (p.stdout, p.stderr)      # nor renamed into place
    for d in "abdeg":
        assert not os.path.lexists(os.path.join(wd, d, ".git")), (d, p.stdout, p.stderr)
    assert "a .git file would point git at another directory" in p.stderr, p.stderr
    with open(os.path.join(wd, "r/.git/worktrees/w/commondir")) as f:
        assert f.read() == "../..\n"
    # control: the pointer git would write is there, and git uses it
    with open(os.path.join(wd, "c/.git")) as f:
        assert f.read() == "gitdir: ../r/.git/worktrees/w\n"
    log = _git_out(sandbox, "-C", "c", "log", "--format=%s")
    assert log.stdout.split() == ["one"], (log.stdout, log.stderr)
    # control: outside the sandbox the same writes work
    q = sandbox.outside(["/bin/sh", "-c", "mkdir -p x && echo 'gitdir: ../r/.git' > x/.git "
                         "&& cat x/.git"])
    assert q.stdout == "gitdir: ../r/.git\n", q


def test_copy_of_a_repository_says_use_git_clone(sandbox):
    _repo(sandbox)
    p = sandbox.run(["/bin/sh", "-c", "cp -a r r2; echo cp=$?; git clone -q r r3; echo clone=$?"],
                    timeout=120)
    assert "cp=0" not in p.stdout and "clone=0" in p.stdout, (p.stdout, p.stderr)
    assert "r2/.git/config" in p.stderr and "use `git clone`" in p.stderr, p.stderr
    # control: the clone is a repository the person's git reads
    log = _git_out(sandbox, "-C", "r3", "log", "--format=%s")
    assert log.stdout.split() == ["one"], (log.stdout, log.stderr)


def _library(box, where: str) -> None:
    p = box.outside(["/bin/sh", "-c", f"git init -q -b main {where} && "
                     f"{GIT} -C {where} commit -q --allow-empty -m lib"])
    assert p.returncode == 0, p.stderr


def test_submodule_add_of_a_local_repository_outside(sandbox, outside_dir):
    """`git submodule add /outside/lib lib` (granted --read): the submodule's
    `.git` file, its git directory's core.worktree and the new `.gitmodules`
    pass the checks, git status is clean inside and for the person after the
    exit check, which keeps all three."""
    _repo(sandbox)
    lib = os.path.join(outside_dir, "lib")
    _library(sandbox, lib)
    p = sandbox.run(["/bin/sh", "-c", f"""
        cd r && git -c protocol.file.allow=always submodule add -q {lib} lib || exit 9
        {GIT} commit -qm sub || exit 8
        git status --porcelain && echo status=$?
        git -C lib config core.worktree ../../../f; echo other=$?"""], "--read", outside_dir,
                    timeout=120)
    # and core.worktree pointing anywhere else is refused
    assert p.returncode == 0 and p.stdout.startswith("status=0\n"), (p.stdout, p.stderr)
    assert "other=0" not in p.stdout and "core.worktree" in p.stderr, (p.stdout, p.stderr)
    assert "denied: create" not in p.stderr and "r/.gitmodules" not in p.stderr, p.stderr
    wd = sandbox.workdir
    with open(os.path.join(wd, "r/.gitmodules")) as f:
        assert f.read() == f'[submodule "lib"]\n\tpath = lib\n\turl = {lib}\n'
    with open(os.path.join(wd, "r/lib/.git")) as f:
        assert f.read() == "gitdir: ../.git/modules/lib\n"
    with open(os.path.join(wd, "r/.git/modules/lib/config")) as f:
        assert "\tworktree = ../../../lib\n" in f.read()
    for args in (["status", "--porcelain"], ["-C", "lib", "status", "--porcelain"]):
        st = _git_out(sandbox, "-C", "r", *args)
        assert (st.returncode, st.stdout) == (0, ""), (args, st.stdout, st.stderr)
    # the staged and committed .gitmodules is the checked file itself: nothing to note
    assert "PROTECTED PATHS WERE CHANGED" not in p.stderr, p.stderr
    sm = _git_out(sandbox, "-C", "r", "submodule", "status")
    assert sm.returncode == 0 and sm.stdout.split()[1:2] == ["lib"], (sm.stdout, sm.stderr)


GITMODULES = {
    "ok": "[submodule \"x\"]\n\tpath = x\n\turl = {lib}\n",
    "update": "[submodule \"x\"]\n\tpath = x\n\turl = {lib}\n\tupdate = !sh -c id\n",
    "inside": "[submodule \"x\"]\n\tpath = x\n\turl = {wd}/r\n",
    "relative": "[submodule \"x\"]\n\tpath = x\n\turl = ../r\n",
    "ext": "[submodule \"x\"]\n\tpath = x\n\turl = ext::sh -c id\n",
    "writable": "[submodule \"x\"]\n\tpath = x\n\turl = {out}\n",
}


def test_gitmodules_written_inside_is_checked(sandbox, outside_dir):
    """git's lock-file rename onto a new `.gitmodules`: an `update` command, a
    url into the workdir, a relative url, a remote helper and a url the
    sandbox may write (--write) never appear; the plain one (control, same
    run) does. Outside the sandbox the same renames work (control)."""
    lib = os.path.join(outside_dir, "lib")
    out = os.path.join(outside_dir, "w")
    _library(sandbox, lib)
    _library(sandbox, out)
    script = "; ".join(f"mkdir {k} && printf '%s' '{v}' > {k}/.gitmodules.lock && "
                       f"mv {k}/.gitmodules.lock {k}/.gitmodules; echo {k}=$?"
                       for k, v in GITMODULES.items())
    script = script.replace("{lib}", lib).replace("{wd}", sandbox.workdir).replace("{out}", out)
    p = sandbox.run(["/bin/sh", "-c", script], "--read", lib, "--write", out, timeout=120)
    assert "ok=0" in p.stdout, (p.stdout, p.stderr)
    for k in GITMODULES:
        there = os.path.exists(os.path.join(sandbox.workdir, k, ".gitmodules"))
        assert there == (k == "ok"), (k, p.stdout, p.stderr)
        assert (f"{k}=0" in p.stdout) == (k == "ok"), (k, p.stdout)
    assert "submodule.x.update: only" in p.stderr and "writable inside the sandbox" in p.stderr, \
        p.stderr
    q = sandbox.outside(["/bin/sh", "-c", "mkdir o && printf '[submodule \"x\"]\\n\\tupdate = "
                         "!true\\n' > o/.gitmodules.lock && mv o/.gitmodules.lock o/.gitmodules "
                         "&& echo done"])
    assert q.stdout == "done\n", q


STAGED = r'''
cd r
printf '[submodule "x"]\n\tpath = x\n\turl = https://example.invalid/x\n' > .gitmodules.lock
mv .gitmodules.lock .gitmodules && git add .gitmodules || exit 9
sha=$(printf '[submodule "x"]\n\tpath = x\n\tupdate = !sh -c id\n' | git hash-object -w --stdin)
[ "$TAMPER" = 1 ] && git update-index --cacheinfo "100644,$sha,.gitmodules"
echo done
'''


def test_a_staged_gitmodules_other_than_the_checked_file_is_noted(sandbox):
    """The exit check notes a staged `.gitmodules` unless it is the checked
    file in the working tree: one staged by hand with `update = !cmd` is
    named (the control, the same run without it, is not)."""
    _repo(sandbox)
    for tamper in ("0", "1"):
        p = sandbox.run(["/bin/sh", "-c", STAGED.replace("$TAMPER", tamper)], timeout=120)
        assert p.stdout == "done\n", (p.stdout, p.stderr)
        noted = "staged entries for protected paths" in p.stderr and ".gitmodules" in p.stderr
        assert noted == (tamper == "1"), (tamper, p.stderr)
        sandbox.outside(["git", *SAFE, "-C", "r", "rm", "-q", "--cached", "-f", ".gitmodules"])
        os.unlink(os.path.join(sandbox.workdir, "r/.gitmodules"))
