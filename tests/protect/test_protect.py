"""Protected paths in the workdir: mount namespace layer and the supervisor's guard.

Real kernel, real git, no mocks, no `confine exec` (the launcher wires these
functions in; here they are called directly):

* namespace layer: a forked child runs `namespaces.enter`, `make_private` and
  `apply(snapshot.mount_plan)` (the launcher's calls) as root (CLONE_NEWNS) and as the unprivileged test account (CLONE_NEWUSER |
  CLONE_NEWNS, both from a forked-and-setresuid child and from a fresh process
  started with setpriv), then attempts every forbidden write, rename and
  delete and checks the errno, and runs normal git work, which must succeed;
* guard: the test account plays the agent (no namespace: the fallback),
  plants hooks, fsmonitor configs, a new nested repository, symlinks and
  FIFOs; `verify_and_revert` must put everything back, quarantine what is new,
  never write outside the workdir, and afterwards a host `git status`,
  `git checkout` and `git commit` must run nothing that was planted (each plant
  is first shown to work when left in place).

Every root-only test skips with a reason when not root.
"""
from __future__ import annotations

import errno
import json
import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
import time

import pytest
from childrun import fork_json

from confine import protect
from confine.kernel import caps, namespaces

TEST_USER = "confine-test"
IS_ROOT = os.geteuid() == 0
root_only = pytest.mark.skipif(not IS_ROOT, reason="needs root: creates the test account's "
                               "files and processes")
GIT = shutil.which("git") or "/usr/bin/git"


# --- helpers ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def account():
    try:
        return pwd.getpwnam(TEST_USER)
    except KeyError:
        pytest.skip(f"account {TEST_USER} missing: run ./test.sh as root (scripts/test-deps.sh)")


def _env(home: str) -> dict:
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": home, "LANG": "C",
            "GIT_CONFIG_NOSYSTEM": "1", "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x.invalid",
            "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@x.invalid"}


def as_user(pw, cmd: str, cwd: str, home: str, check: bool = True) -> subprocess.CompletedProcess:
    """A shell command as the test account (a fresh process: setpriv)."""
    argv = ["setpriv", f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}", "--clear-groups",
            "/bin/sh", "-c", cmd]
    p = subprocess.run(argv, cwd=cwd, env=_env(home), capture_output=True, text=True, timeout=60)
    if check and p.returncode != 0:
        raise AssertionError(f"{cmd!r} failed ({p.returncode}): {p.stdout}{p.stderr}")
    return p


def in_child(fn, pw=None, timeout: float = 60.0):
    """fn() in a forked child (as the test account when pw is given: setgroups,
    setresgid, setresuid); returns its JSON-able value or raises with its traceback."""
    def before():
        if pw is not None:
            os.setgroups([])
            os.setresgid(pw.pw_gid, pw.pw_gid, pw.pw_gid)
            os.setresuid(pw.pw_uid, pw.pw_uid, pw.pw_uid)
    res = fork_json(fn, timeout, before)
    assert res["ok"], res["tb"]
    return res["value"]


def err_of(fn) -> str:
    """errno name of fn()'s OSError, or "ok"."""
    try:
        fn()
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))


def write(path: str, text: str = "x\n") -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o755)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def append(path: str, text: str = "x\n") -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def chown_tree(top: str, pw) -> None:
    os.lchown(top, pw.pw_uid, pw.pw_gid)
    for d, dirs, files in os.walk(top):
        for n in dirs + files:
            os.lchown(os.path.join(d, n), pw.pw_uid, pw.pw_gid)


def read(path: str) -> str:
    with open(path) as f:
        return f.read()


@pytest.fixture
def world(account):
    """A temp workdir owned by the test account: a repository with one commit,
    a nested repository in vendor/x and one deep in node_modules, a .gitmodules,
    .envrc, .vscode/tasks.json and .claude/commands; plus a home for git and
    a quarantine directory, all outside the workdir."""
    if not IS_ROOT:
        pytest.skip("needs root: creates the test account's files and processes")
    top = tempfile.mkdtemp(prefix="confine-protect-", dir="/tmp")
    os.chmod(top, 0o755)
    wd, home, out = (os.path.join(top, n) for n in ("w", "home", "outside"))
    for d in (wd, home, out):
        os.mkdir(d, 0o755)
    chown_tree(top, account)
    sh = (
        "git init -q -b main . && echo hello > README && "
        "printf '[submodule \"s\"]\\n\\tpath = s\\n\\turl = ./s\\n' > .gitmodules && "
        "echo 'export X=1' > .envrc && mkdir -p .vscode .claude/commands && "
        "echo '{\"version\": \"2.0.0\"}' > .vscode/tasks.json && echo 'say hi' > .claude/commands/hi.md && "
        "git add -A && git commit -qm one && "
        "git init -q -b main vendor/x && echo v > vendor/x/f && git -C vendor/x add f && "
        "git -C vendor/x commit -qm v && git init -q -b main node_modules/pkg/sub/dep"
    )
    as_user(account, sh, wd, home)
    yield {"top": top, "wd": wd, "home": home, "out": out, "marker": os.path.join(top, "MARKER"),
           "q": os.path.join(top, "quarantine")}
    shutil.rmtree(top, ignore_errors=True)


def _mountinfo_lines() -> int:
    with open("/proc/self/mountinfo") as f:
        return len(f.read().splitlines())


# --- discovery and the mount plan ----------------------------------------------------------

@root_only
def test_discovery_finds_nested_repos_pointers_and_config_references(world, account):
    wd = world["wd"]
    as_user(account, (
        "git init -q --bare bare.git && mkdir -p .husky && echo 'true' > .husky/pre-commit && "
        "git config core.hooksPath .husky && git config include.path ../shared.cfg && "
        "echo '[user]' > shared.cfg && mkdir -p tools && echo '#!/bin/sh' > tools/fsm && "
        "git config core.fsmonitor tools/fsm && "
        "mkdir -p .git/modules/s && git init -q --bare .git/modules/s && mkdir s && "
        "echo 'gitdir: ../.git/modules/s' > s/.git && "
        "mkdir githooks && echo x > githooks/post-merge && rm -rf vendor/x/.git/hooks && "
        "ln -s ../../../githooks vendor/x/.git/hooks && "
        "mkdir -p .git/objects/zz/.git && touch .git/objects/zz/.git/config"
    ), wd, world["home"])
    snap = protect.snapshot(wd, home=world["home"])
    assert set(snap.gitdirs) == {".git", "vendor/x/.git", "node_modules/pkg/sub/dep/.git",
                                 "bare.git", ".git/modules/s", ".git/objects/zz/.git"}
    assert snap.gitdirs["vendor/x/.git"].worktree == "vendor/x"
    assert snap.gitdirs[".git/modules/s"].worktree == "s"
    for rel in (".git/hooks", ".git/config", "vendor/x/.git/config", "vendor/x/.git/hooks",
                "node_modules/pkg/sub/dep/.git/hooks", "bare.git/config", ".git/modules/s/config",
                "s/.git", ".gitmodules", ".envrc", ".vscode", ".claude/commands",
                ".husky", "shared.cfg", "tools/fsm", "githooks"):
        assert rel in snap.roots, rel
    assert snap.roots[".husky"].tree and snap.roots["githooks"].tree
    # a .git hidden in .git/objects is reached through a symlink (issue 10, item 2)
    assert ".git/objects/zz/.git/config" in snap.roots
    plan = {"/".join(m.rel): m.readonly for m in snap.mount_plan.mounts}
    assert plan[".git"] is False and plan["vendor/x/.git"] is False and plan[".claude"] is False
    assert plan[".git/config"] and plan[".git/hooks"] and plan["githooks"] and plan["s/.git"]
    # a symlinked hooks directory cannot be covered by a mount: the guard has it
    assert "vendor/x/.git/hooks" not in plan
    assert dict(snap.guard_only)["vendor/x/.git/hooks"].startswith("is a symlink")
    assert snap.mount_plan.bases[0].path == os.path.realpath(wd) and snap.mount_plan.complete
    # parents before children
    depths = [len(m.rel) for m in snap.mount_plan.mounts]
    assert depths == sorted(depths)


@root_only
def test_walk_is_fast_and_enters_git_internals(world, account):
    wd = world["wd"]
    # 20k directories of ordinary tree, 256 object fan-out directories with 20k loose
    # objects, a repository deep in node_modules
    for i in range(200):
        for j in range(100):
            os.makedirs(os.path.join(wd, "node_modules", f"p{i}", f"d{j}"))
    for i in range(256):
        d = os.path.join(wd, ".git", "objects", f"{i:02x}x")
        os.makedirs(d)
        for k in range(80):
            open(os.path.join(d, f"{k:038x}"), "w").close()
    os.makedirs(os.path.join(wd, "node_modules", "p7", "d3", "deep", ".git", "hooks"))
    write(os.path.join(wd, "node_modules", "p7", "d3", "deep", ".git", "config"), "[core]\n")
    t0 = time.monotonic()
    snap = protect.snapshot(wd)
    took = time.monotonic() - t0
    print(f"snapshot of ~20k directories, 20k objects: {took:.2f}s ({snap.summary()})")
    assert "node_modules/p7/d3/deep/.git/config" in snap.roots
    assert not any(r.startswith(".git/objects") for r in snap.roots)   # nothing protected there
    t0 = time.monotonic()
    rep = protect.verify_and_revert(snap, quarantine_dir=world["q"])
    print(f"verify: {time.monotonic() - t0:.2f}s")
    assert not rep.alerts, protect.format_report(rep)


# --- the mount namespace layer -------------------------------------------------------------

def _forbidden_attempts(wd: str) -> dict:
    """Every way to plant or change a protected path; each must fail."""
    j = lambda *p: os.path.join(wd, *p)  # noqa: E731
    write(j("candidate"), "[core]\n\tfsmonitor = touch /tmp/pwned\n")
    r = {
        "write .git/config": err_of(lambda: append(j(".git/config"))),
        "truncate .git/config": err_of(lambda: os.truncate(j(".git/config"), 0)),
        "chmod .git/config": err_of(lambda: os.chmod(j(".git/config"), 0o777)),
        "rename over .git/config": err_of(lambda: os.rename(j("candidate"), j(".git/config"))),
        "rename .git/config.lock over": err_of(lambda: (write(j(".git/config.lock"), "[core]\n"),
                                                        os.rename(j(".git/config.lock"),
                                                                  j(".git/config")))),
        "rename .git/config away": err_of(lambda: os.rename(j(".git/config"), j(".git/c2"))),
        "unlink .git/config": err_of(lambda: os.unlink(j(".git/config"))),
        "create hook": err_of(lambda: write(j(".git/hooks/post-checkout"), "#!/bin/sh\n")),
        "rename sample to hook": err_of(lambda: os.rename(j(".git/hooks/pre-commit.sample"),
                                                          j(".git/hooks/pre-commit"))),
        "chmod sample": err_of(lambda: os.chmod(j(".git/hooks/pre-commit.sample"), 0o755)),
        "symlink hook": err_of(lambda: os.symlink("/bin/sh", j(".git/hooks/pre-push"))),
        "hard link into hooks": err_of(lambda: os.link(j("candidate"), j(".git/hooks/pre-rebase"))),
        "rename hooks dir": err_of(lambda: os.rename(j(".git/hooks"), j(".git/h2"))),
        "rmdir hooks dir": err_of(lambda: os.rmdir(j(".git/hooks"))),
        "rename .git": err_of(lambda: os.rename(j(".git"), j("g2"))),
        "nested: create hook": err_of(lambda: write(j("vendor/x/.git/hooks/post-merge"))),
        "nested: write config": err_of(lambda: append(j("vendor/x/.git/config"))),
        "nested: rename .git": err_of(lambda: os.rename(j("vendor/x/.git"), j("vendor/x/g2"))),
        "deep: create hook": err_of(lambda: write(j("node_modules/pkg/sub/dep/.git/hooks/pre-commit"))),
        "write .gitmodules": err_of(lambda: append(j(".gitmodules"))),
        "unlink .gitmodules": err_of(lambda: os.unlink(j(".gitmodules"))),
        "write .envrc": err_of(lambda: append(j(".envrc"))),
        "rename over .envrc": err_of(lambda: os.rename(j("candidate"), j(".envrc"))),
        "write tasks.json": err_of(lambda: append(j(".vscode/tasks.json"))),
        "create in .vscode": err_of(lambda: write(j(".vscode/launch.json"))),
        "rename .vscode": err_of(lambda: os.rename(j(".vscode"), j("v2"))),
        "create command": err_of(lambda: write(j(".claude/commands/evil.md"))),
        "rename .claude": err_of(lambda: os.rename(j(".claude"), j("c2"))),
    }
    os.unlink(j("candidate"))
    if os.path.exists(j(".git/config.lock")):
        os.unlink(j(".git/config.lock"))
    return r


EXPECTED = {
    "write .git/config": {"EROFS"}, "truncate .git/config": {"EROFS"},
    "chmod .git/config": {"EROFS"}, "rename over .git/config": {"EXDEV", "EBUSY"},
    "rename .git/config.lock over": {"EBUSY"},
    "rename .git/config away": {"EBUSY"}, "unlink .git/config": {"EBUSY"},
    "create hook": {"EROFS"}, "rename sample to hook": {"EROFS"}, "chmod sample": {"EROFS"},
    "symlink hook": {"EROFS"}, "hard link into hooks": {"EROFS", "EXDEV"},
    "rename hooks dir": {"EBUSY"}, "rmdir hooks dir": {"EBUSY"}, "rename .git": {"EBUSY"},
    "nested: create hook": {"EROFS"}, "nested: write config": {"EROFS"},
    "nested: rename .git": {"EBUSY"}, "deep: create hook": {"EROFS"},
    "write .gitmodules": {"EROFS"}, "unlink .gitmodules": {"EBUSY"}, "write .envrc": {"EROFS"},
    "rename over .envrc": {"EBUSY"}, "write tasks.json": {"EROFS"},
    "create in .vscode": {"EROFS"}, "rename .vscode": {"EBUSY"}, "create command": {"EROFS"},
    "rename .claude": {"EBUSY"},
}


def _normal_git_work(wd: str, home: str) -> dict:
    p = subprocess.run(
        "echo more >> README && echo new > new.txt && git add README new.txt && git commit -qm two && "
        "git checkout -q -b feature && echo f > f.txt && git add f.txt && git commit -qm three && "
        "git checkout -q main && git merge -q --no-edit feature && git branch -q -d feature && "
        "git tag v1 && git stash list && git log --oneline | wc -l && git status --porcelain && "
        "git -C vendor/x commit -q --allow-empty -m nested && git gc -q --auto && "
        "git worktree add -q wt && git -C wt log -1 --oneline >/dev/null && "
        "git worktree remove wt && git clone -q vendor/x cloned && "
        "git -C cloned commit -q --allow-empty -m c",
        shell=True, cwd=wd, env=_env(home), capture_output=True, text=True, timeout=60)
    return {"rc": p.returncode, "out": p.stdout, "err": p.stderr}


def _check_ns_results(res: dict) -> None:
    for phase in [k for k in res if k.startswith("attempts")]:
        got = res[phase]
        bad = {k: v for k, v in got.items() if v not in EXPECTED[k]}
        assert not bad, f"{phase}: allowed or wrong errno: {bad}"
    git = res["git"]
    assert git["rc"] == 0, git
    assert git["out"].split()[0] == "3"   # one + two + three (merge fast-forwards)


@root_only
def test_namespace_as_root_then_as_the_agent_user(world, account):
    wd, home = world["wd"], world["home"]
    snap = protect.snapshot(wd)
    before = _mountinfo_lines()

    def child():
        namespaces.enter(userns=False)
        namespaces.make_private()
        n = namespaces.apply(snap.mount_plan)
        res = {"mounts": n, "attempts as root": _forbidden_attempts(wd)}
        # what the launcher does next: identity, capabilities
        caps.switch_user(account.pw_uid, account.pw_gid)
        res["drop notes"] = caps.drop_all(privileged=True)
        res["attempts as agent"] = _forbidden_attempts(wd)
        res["git"] = _normal_git_work(wd, home)
        # the agent cannot undo a bind (seccomp denies this too, later)
        res["umount"] = err_of(lambda: _umount(os.path.join(wd, ".git/config")))
        return res

    res = in_child(child)
    assert res["mounts"] == len(snap.mount_plan.mounts) * len(snap.mount_plan.bases)
    _check_ns_results(res)
    assert res["umount"] in ("EPERM", "EACCES")
    # nothing leaked to the host: no new mounts, host can still write the files
    assert _mountinfo_lines() == before
    append(os.path.join(wd, ".envrc"), "# host edit\n")
    # normal work left no trace in protected paths, except what git did legitimately
    rep = protect.verify_and_revert(snap, quarantine_dir=world["q"], trust_mounts=True)
    assert not rep.alerts, protect.format_report(rep)


def _umount(path: str) -> None:
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.umount2(path.encode(), 2) != 0:  # MNT_DETACH
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


@root_only
def test_namespace_unprivileged_user_namespace(world, account):
    wd, home = world["wd"], world["home"]
    snap = protect.snapshot(wd)

    def child():
        namespaces.enter(userns=True)
        namespaces.make_private()
        namespaces.apply(snap.mount_plan)
        res = {"ids": [os.getuid(), os.geteuid(), os.getgid()]}
        res["caps in userns"] = caps.status()["CapEff"] != 0
        res["attempts with caps"] = _forbidden_attempts(wd)
        res["drop notes"] = caps.drop_all(privileged=False)
        st = caps.status()
        res["caps after"] = [st[k] for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")]
        res["attempts as agent"] = _forbidden_attempts(wd)
        res["git"] = _normal_git_work(wd, home)
        res["umount"] = err_of(lambda: _umount(os.path.join(wd, ".git/config")))
        res["setgroups"] = read("/proc/self/setgroups").strip()
        return res

    res = in_child(child, pw=account)
    assert res["ids"] == [account.pw_uid, account.pw_uid, account.pw_gid]
    assert res["caps in userns"]            # full set inside the new user namespace ...
    assert res["drop notes"] == []          # ... so even the bounding set can now be dropped
    assert res["caps after"] == [0, 0, 0, 0, 0]
    assert res["setgroups"] == "deny"
    assert res["umount"] in ("EPERM", "EACCES")
    _check_ns_results(res)


@root_only
def test_namespace_from_a_fresh_unprivileged_process(world, account):
    """Started as the user from the beginning (dumpable, never root), as
    `confine exec` run by a user does."""
    wd, home = world["wd"], world["home"]
    snap = protect.snapshot(wd)
    plan_arg = json.dumps([[b._asdict() for b in snap.mount_plan.bases],
                           [m._asdict() for m in snap.mount_plan.mounts]])
    code = (
        "import json, os, sys, errno\n"
        "from confine.kernel import namespaces as ns, caps\n"
        "b, m = json.loads(sys.argv[1])\n"
        "plan = ns.Plan(tuple(ns.Base(**x) for x in b), tuple(ns.Mount(**dict(x, rel=tuple(x['rel']))) for x in m), True)\n"
        "ns.enter(True)\n"
        "ns.make_private()\n"
        "ns.apply(plan)\n"
        "print('notes', caps.drop_all(privileged=True))\n"
        "def t(f):\n"
        "    try:\n        f(); return 'ok'\n"
        "    except OSError as e:\n        return errno.errorcode[e.errno]\n"
        "print('hook', t(lambda: open('.git/hooks/post-checkout', 'w')))\n"
        "print('config', t(lambda: open('.git/config', 'a')))\n"
        "print('unlink', t(lambda: os.unlink('.git/config')))\n"
        "print('file', t(lambda: open('ordinary.txt', 'w')))\n"
    )
    env = dict(_env(home), PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    p = subprocess.run(["setpriv", f"--reuid={account.pw_uid}", f"--regid={account.pw_gid}",
                        "--clear-groups", sys.executable, "-c", code, plan_arg],
                       cwd=wd, env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    out = dict(line.split(" ", 1) for line in p.stdout.splitlines())
    assert out == {"notes": "[]", "hook": "EROFS", "config": "EROFS",
                   "unlink": "EBUSY", "file": "ok"}


@root_only
def test_namespace_covers_a_second_path_to_the_workdir(world, account):
    """The same directory reachable through another mount (here: a bind mount
    of its parent made in a private namespace, standing in for a host that
    mounts the same filesystem twice) gets the same read-only binds."""
    wd = world["wd"]
    alt = os.path.join(world["top"], "alt")
    os.mkdir(alt)

    def child():
        namespaces.enter(userns=False)
        namespaces.make_private()
        libc = __import__("ctypes").CDLL(None, use_errno=True)
        assert libc.mount(world["top"].encode(), alt.encode(), None, 4096, None) == 0
        snap = protect.snapshot(wd)
        bases = [b.path for b in snap.mount_plan.bases]
        namespaces.enter(userns=False)
        namespaces.make_private()
        namespaces.apply(snap.mount_plan)
        via = os.path.join(alt, "w")
        return {"bases": bases, "complete": snap.mount_plan.complete,
                "config via alt": err_of(lambda: append(os.path.join(via, ".git/config"))),
                "hook via alt": err_of(lambda: write(os.path.join(via, ".git/hooks/pre-commit"))),
                "ordinary via alt": err_of(lambda: write(os.path.join(via, "ok.txt")))}

    res = in_child(child)
    assert res["bases"] == [os.path.realpath(wd), os.path.join(alt, "w")] and res["complete"]
    assert res["config via alt"] == "EROFS" and res["hook via alt"] == "EROFS"
    assert res["ordinary via alt"] == "ok"


@root_only
def test_namespace_refuses_a_path_swapped_after_the_snapshot(world, account):
    wd = world["wd"]
    snap = protect.snapshot(wd)
    os.rename(os.path.join(wd, ".envrc"), os.path.join(wd, "envrc.old"))
    os.symlink("/etc/passwd", os.path.join(wd, ".envrc"))

    def child():
        try:
            namespaces.enter(userns=False)
            namespaces.make_private()
            namespaces.apply(snap.mount_plan)
        except OSError as e:
            return e.strerror
        return "mounted"

    assert "symlink" in in_child(child) or "ELOOP" in in_child(child)


# --- the guard (fallback: no namespace) -------------------------------------------------------

PLANT = (
    # the fsmonitor "hook" runs on every git status; post-checkout and pre-commit hooks
    "printf '[core]\\n\\tfsmonitor = \"touch {m}.fsmonitor; false\"\\n' >> .git/config && "
    "printf '#!/bin/sh\\ntouch {m}.post-checkout\\n' > .git/hooks/post-checkout && "
    "printf '#!/bin/sh\\ntouch {m}.pre-commit\\n' > .git/hooks/pre-commit && "
    "chmod +x .git/hooks/post-checkout .git/hooks/pre-commit && "
    # a new nested repository with the same tricks
    "git init -q -b main newrepo && git -C newrepo config core.fsmonitor 'touch {m}.new-fsmonitor; false' && "
    "git -C newrepo config alias.st '!touch {m}.alias' && git -C newrepo config user.name agent && "
    "printf '#!/bin/sh\\ntouch {m}.new-post-checkout\\n' > newrepo/.git/hooks/post-checkout && "
    "chmod +x newrepo/.git/hooks/post-checkout && "
    # the existing nested repository
    "printf '#!/bin/sh\\ntouch {m}.nested\\n' > vendor/x/.git/hooks/post-checkout && "
    "chmod +x vendor/x/.git/hooks/post-checkout && "
    # not git
    "echo 'touch {m}.envrc' > .envrc && echo '{{\"tasks\": []}}' > .vscode/tasks.json && "
    "mkdir -p .idea && echo '<x/>' > .idea/workspace.xml && echo '{{}}' > .mcp.json && "
    "rm .gitmodules && echo x > .claude/commands/evil.md"
)


def _git_runs(pw, wd: str, home: str) -> None:
    """What a person does afterwards: status, checkout, commit, in the top
    repository, the nested one and the new one."""
    as_user(pw, "git status >/dev/null 2>&1; git checkout -q -b after 2>/dev/null; "
                "git commit -q --allow-empty -m after 2>/dev/null; "
                "git -C vendor/x checkout -q -b after 2>/dev/null; "
                "git -C newrepo status >/dev/null 2>&1; git -C newrepo st 2>/dev/null; "
                "git -C newrepo commit -q --allow-empty -m x 2>/dev/null; "
                "git -C newrepo checkout -q -b b2 2>/dev/null; true", wd, home)


def _markers(world) -> list[str]:
    d = os.path.dirname(world["marker"])
    return sorted(n[len("MARKER."):] for n in os.listdir(d) if n.startswith("MARKER."))


@root_only
def test_plants_work_when_left_in_place(world, account):
    """Control for the test below: the same plants, no revert, do run."""
    wd, home = world["wd"], world["home"]
    as_user(account, PLANT.format(m=world["marker"]), wd, home)
    _git_runs(account, wd, home)
    assert {"fsmonitor", "post-checkout", "pre-commit", "new-fsmonitor", "alias",
            "new-post-checkout", "nested"} <= set(_markers(world))


@root_only
@pytest.mark.parametrize("supervisor", ["root", "user"])
def test_guard_reverts_and_git_runs_nothing_afterwards(world, account, supervisor):
    wd, home = world["wd"], world["home"]
    snap = protect.snapshot(wd, home=home)
    orig = {rel: read(os.path.join(wd, rel)) for rel in
            (".git/config", ".envrc", ".vscode/tasks.json", ".gitmodules", "vendor/x/.git/config")}
    as_user(account, PLANT.format(m=world["marker"]), wd, home)
    assert read(os.path.join(wd, ".git/config")) != orig[".git/config"]

    if supervisor == "root":
        rep = protect.verify_and_revert(snap, quarantine_dir=world["q"])
        changes = [(c.what, c.path, c.action, c.quarantine) for c in rep.changes]
        text = protect.format_report(rep)
    else:
        os.mkdir(world["q"], 0o700)
        os.chown(world["q"], account.pw_uid, account.pw_gid)
        changes, text = in_child(lambda: (lambda r: (
            [(c.what, c.path, c.action, c.quarantine) for c in r.changes],
            protect.format_report(r)))(protect.verify_and_revert(snap, quarantine_dir=world["q"])),
            pw=account)
    print(text)
    by_path = {c[1]: tuple(c) for c in changes}
    # existing protected files are back, byte for byte
    for rel, text0 in orig.items():
        assert read(os.path.join(wd, rel)) == text0, rel
    assert by_path[".git/config"][2] == "restored"
    assert by_path[".gitmodules"][:3] == ("deleted", ".gitmodules", "restored")
    # planted hooks and new protected paths are in quarantine, not deleted
    for rel in (".git/hooks/post-checkout", ".git/hooks/pre-commit", ".idea", ".mcp.json",
                "vendor/x/.git/hooks/post-checkout", ".claude/commands/evil.md",
                "newrepo/.git/hooks/post-checkout"):
        assert not os.path.lexists(os.path.join(wd, rel)), rel
        q = by_path[rel][3]
        assert q and q.startswith(os.path.realpath(world["q"])) and os.path.lexists(q), rel
    assert "touch" in read(by_path[".git/hooks/post-checkout"][3])
    assert "fsmonitor" in read(by_path[".git/config"][3])      # the agent's version is kept
    # the new repository stays, harmless: no fsmonitor, no alias, sample hooks kept
    new_cfg = os.path.join(wd, "newrepo/.git/config")
    names = subprocess.run([GIT, "config", "--file", new_cfg, "--list", "--name-only"],
                           capture_output=True, text=True, check=True).stdout.split()
    assert "core.fsmonitor" not in names and "alias.st" not in names and "user.name" in names
    assert by_path["newrepo/.git/config"][2] == "sanitized"
    assert os.path.exists(os.path.join(wd, "newrepo/.git/hooks/pre-commit.sample"))
    assert "PROTECTED PATHS WERE CHANGED" in text and "only protection" in text
    # quarantine belongs to the supervisor and is private
    qst = os.stat(world["q"])
    assert stat.S_IMODE(qst.st_mode) == 0o700
    # and now a person uses the repositories: nothing planted runs
    _git_runs(account, wd, home)
    assert _markers(world) == []
    # a second check finds nothing left to do
    rep2 = protect.verify_and_revert(snap, quarantine_dir=world["q"])
    assert not rep2.alerts, protect.format_report(rep2)


@root_only
def test_guard_never_follows_symlinks_out_of_the_workdir(world, account):
    wd, home, out = world["wd"], world["home"], world["out"]
    snap = protect.snapshot(wd)
    # outside: a directory the agent could aim at (owned by the same account)
    as_user(account, "mkdir -p fake/hooks && echo '[core]' > fake/config && echo keep > victim", out, home)
    before = {n: read(os.path.join(out, n)) for n in ("fake/config", "victim")}
    as_user(account, (
        f"rm -rf vendor/x/.git && ln -s {out}/fake vendor/x/.git && "      # nested .git -> outside
        f"rm -rf .git/hooks && ln -s {out}/fake/hooks .git/hooks && "       # hooks -> outside
        f"rm .envrc && ln -s {out}/victim .envrc && "                      # rc file -> outside
        "mkfifo .vscode/tasks.json.new && rm .vscode/tasks.json && mv .vscode/tasks.json.new .vscode/tasks.json"
    ), wd, home)
    rep = in_child(lambda: [(c.what, c.path, c.action) for c in
                            protect.verify_and_revert(snap, quarantine_dir=world["q"]).changes],
                   timeout=30)
    rep = [tuple(c) for c in rep]
    done = {c[1]: c for c in rep}
    # nothing outside changed; nothing was created there
    assert {n: read(os.path.join(out, n)) for n in ("fake/config", "victim")} == before
    assert sorted(os.listdir(os.path.join(out, "fake"))) == ["config", "hooks"]
    assert os.listdir(os.path.join(out, "fake", "hooks")) == []
    # the symlinks and the FIFO went to quarantine, the originals are back
    assert stat.S_ISDIR(os.lstat(os.path.join(wd, ".git/hooks")).st_mode)
    assert os.path.exists(os.path.join(wd, ".git/hooks/pre-commit.sample"))
    assert stat.S_ISREG(os.lstat(os.path.join(wd, ".envrc")).st_mode)
    assert stat.S_ISREG(os.lstat(os.path.join(wd, ".vscode/tasks.json")).st_mode)
    assert done[".git/hooks"][2] == "restored" and done[".envrc"][2] == "restored"
    # vendor/x/.git is now a symlink out of the workdir: its git directory is gone from the
    # workdir (reported), and the link itself is quarantined as a new gitdir pointer
    assert not os.path.lexists(os.path.join(wd, "vendor/x/.git"))
    assert ("created", "vendor/x/.git", "quarantined") in rep
    assert ("deleted", "vendor/x/.git", "noted") in rep


@root_only
def test_guard_recognises_a_renamed_repository(world, account):
    wd, home = world["wd"], world["home"]
    snap = protect.snapshot(wd)
    cfg = read(os.path.join(wd, "vendor/x/.git/config"))
    as_user(account, "git -C vendor/x config core.sshCommand 'ssh -i key' && mv vendor/x vendor/y",
            wd, home)
    # the person's own setting is in the file now: as far as the guard knows, the agent did it
    rep = protect.verify_and_revert(snap, quarantine_dir=world["q"])
    by = {c.path: c for c in rep.changes}
    assert by["vendor/y/.git"].what == "moved" and not by["vendor/y/.git"].alert
    # restored in place (not treated as a new repository, not recreated at the old path)
    assert read(os.path.join(wd, "vendor/y/.git/config")) == cfg
    assert by["vendor/y/.git/config"].action == "restored"
    assert os.path.exists(os.path.join(wd, "vendor/y/.git/hooks/pre-commit.sample"))
    assert not os.path.exists(os.path.join(wd, "vendor/x"))


@root_only
def test_new_git_link_inside_workdir_is_kept_outside_is_quarantined(world, account):
    wd, home = world["wd"], world["home"]
    snap = protect.snapshot(wd)
    as_user(account, (
        "git worktree add -q wt-in && mkdir -p .git/modules && "
        "git init -q --separate-git-dir=.git/modules/m m && "
        "git -C m config core.hooksPath /tmp && mkdir -p evil && "
        "echo 'gitdir: /tmp/elsewhere' > evil/.git"
    ), wd, home)
    rep = protect.verify_and_revert(snap, quarantine_dir=world["q"])
    by = {c.path: c for c in rep.changes}
    assert by["m/.git"].action == "kept" and by["wt-in/.git"].action == "kept"
    assert ".git/worktrees/wt-in/commondir" not in by      # points back into the workdir: fine
    assert os.path.exists(os.path.join(wd, ".git/worktrees/wt-in/commondir"))
    assert subprocess.run([GIT, "-C", os.path.join(wd, "wt-in"), "-c", "safe.directory=*",
                           "status", "--short"], capture_output=True).returncode == 0
    assert by[".git/modules/m/config"].action == "sanitized"
    assert "core.hookspath" in by[".git/modules/m/config"].detail
    assert by["evil/.git"].action == "quarantined"
    assert not os.path.exists(os.path.join(wd, "evil/.git"))


# --- both layers together ----------------------------------------------------------------------

@root_only
def test_trust_mounts_leaves_host_edits_but_not_what_the_mount_misses(world, account):
    wd, home = world["wd"], world["home"]
    # a hard link to .git/config elsewhere in the workdir, and a symlinked protected path
    os.link(os.path.join(wd, "vendor/x/.git/config"), os.path.join(wd, "cfg-link"))
    as_user(account, "mkdir -p .claude && echo '{}' > real-settings.json && "
                     "ln -s ../real-settings.json .claude/settings.json", wd, home)
    snap = protect.snapshot(wd)
    guard = dict(snap.guard_only)
    assert "vendor/x/.git/config" in guard and "hard-linked" in guard["vendor/x/.git/config"]
    assert ".claude/settings.json" in guard and "real-settings.json" in snap.roots

    def agent():
        namespaces.enter(userns=False)
        namespaces.make_private()
        namespaces.apply(snap.mount_plan)
        caps.switch_user(account.pw_uid, account.pw_gid)
        caps.drop_all(privileged=True)
        return {
            "via hard link": err_of(lambda: append(os.path.join(wd, "cfg-link"),
                                                   "[core]\n\tpager = touch /tmp/x\n")),
            "symlink target": err_of(lambda: append(os.path.join(wd, "real-settings.json"))),
            "replace symlink": err_of(lambda: (os.unlink(os.path.join(wd, ".claude/settings.json")),
                                               write(os.path.join(wd, ".claude/settings.json"),
                                                     '{"hooks": {}}'))),
        }

    res = in_child(agent)
    # the mount holds the target; the hard link and the symlink itself are the guard's job
    assert res == {"via hard link": "ok", "symlink target": "EROFS", "replace symlink": "ok"}
    append(os.path.join(wd, ".vscode/tasks.json"), "\n")      # the person's editor, on the host
    rep = protect.verify_and_revert(snap, quarantine_dir=world["q"], trust_mounts=True)
    by = {c.path: c for c in rep.changes}
    assert by[".vscode/tasks.json"].action == "left" and not by[".vscode/tasks.json"].alert
    assert by["vendor/x/.git/config"].action == "restored"      # reached through the hard link
    assert by[".claude/settings.json"].action == "restored"     # the symlink is back
    assert os.readlink(os.path.join(wd, ".claude/settings.json")) == "../real-settings.json"
    assert "pager" not in read(os.path.join(wd, "vendor/x/.git/config"))


@root_only
def test_quarantine_on_another_filesystem_copies_then_removes(world, account):
    """rename() across filesystems fails with EXDEV: the guard copies (no
    symlink followed) and then removes, so nothing is lost and nothing stays."""
    if os.stat("/dev/shm").st_dev == os.stat(world["wd"]).st_dev:
        pytest.skip("/dev/shm is on the workdir's filesystem here")
    q = tempfile.mkdtemp(prefix="confine-q-", dir="/dev/shm")
    try:
        wd, home = world["wd"], world["home"]
        snap = protect.snapshot(wd)
        as_user(account, "mkdir -p .idea/sub && echo a > .idea/sub/a.xml && "
                         "ln -s /etc/passwd .idea/link && mkfifo .idea/fifo && "
                         "printf '#!/bin/sh\\necho hi\\n' > .git/hooks/pre-push", wd, home)
        rep = protect.verify_and_revert(snap, quarantine_dir=os.path.join(q, "run"))
        by = {c.path: c for c in rep.changes}
        assert by[".idea"].action == "quarantined" and by[".git/hooks/pre-push"].action == "quarantined"
        assert not os.path.lexists(os.path.join(wd, ".idea"))
        assert not os.path.lexists(os.path.join(wd, ".git/hooks/pre-push"))
        qi = by[".idea"].quarantine
        assert read(os.path.join(qi, "sub/a.xml")) == "a\n"
        assert os.readlink(os.path.join(qi, "link")) == "/etc/passwd"     # copied as a link
        # a fifo is recorded by name (REPORT.txt, the change's detail), not recreated
        assert not os.path.lexists(os.path.join(qi, "fifo"))
        assert not os.path.lexists(os.path.join(qi, "fifo.special"))
        assert any(sp.startswith(os.path.join(qi, "fifo") + ":") and "fifo" in sp
                   for sp in rep.specials), rep.specials
        assert "1 socket(s)/fifo(s)/device(s)" in by[".idea"].detail
        assert os.path.join(qi, "fifo") in read(os.path.join(q, "run", "REPORT.txt"))
        assert "echo hi" in read(by[".git/hooks/pre-push"].quarantine)
    finally:
        shutil.rmtree(q, ignore_errors=True)


@root_only
@pytest.mark.parametrize("start", ["root", "user"])
def test_the_launcher_steps_after_the_namespace_still_work(world, account, start):
    """namespace -> identity -> capabilities -> no_new_privs -> Landlock ->
    seccomp, with the project's own kernel modules (as the launcher will order
    them); then git works, protected paths stay read-only, and mount/unshare
    are denied."""
    from confine.kernel import landlock, seccomp
    wd, home = world["wd"], world["home"]
    snap = protect.snapshot(wd)
    abi = landlock.kernel_abi()
    if abi < 1:
        pytest.skip("no Landlock")
    rules = [(p, landlock.READ) for p in ("/usr", "/bin", "/lib", "/lib64", "/etc", "/proc", "/dev")
             if os.path.exists(p)]
    rules += [(wd, landlock.WRITE), (home, landlock.WRITE), ("/dev/null", landlock.DEVICE & landlock.FILE_RIGHTS)]
    ruleset = landlock.build(landlock.fs_rights(abi), landlock.net_rights(abi), landlock.scopes(abi),
                             [(p, a & landlock.fs_rights(abi)) for p, a in rules], [])
    flt = seccomp.build(seccomp.rules_for())

    def child():
        if start == "user":   # an unprivileged launcher: the account from the start
            os.setgroups([])
            os.setresgid(account.pw_gid, account.pw_gid, account.pw_gid)
            os.setresuid(account.pw_uid, account.pw_uid, account.pw_uid)
        namespaces.enter(userns=(start == "user"))
        namespaces.make_private()
        namespaces.apply(snap.mount_plan)
        if start == "root":
            caps.switch_user(account.pw_uid, account.pw_gid)
        notes = caps.drop_all(privileged=True)   # root, or root-equivalent in the new userns
        caps.set_no_new_privs()
        landlock.restrict(ruleset)
        seccomp.load(flt)
        libc = __import__("ctypes").CDLL(None, use_errno=True)
        return {
            "notes": notes,
            "hook": err_of(lambda: write(os.path.join(wd, ".git/hooks/post-checkout"))),
            "config": err_of(lambda: append(os.path.join(wd, ".git/config"))),
            "unlink": err_of(lambda: os.unlink(os.path.join(wd, ".git/config"))),
            "umount": "EPERM" if libc.umount2(os.path.join(wd, ".git/config").encode(), 2) != 0
                      and __import__("ctypes").get_errno() == errno.EPERM else "other",
            "unshare": "EPERM" if libc.unshare(0x00020000) != 0 else "ok",
            "git": _normal_git_work(wd, home),
        }

    res = in_child(child)
    ruleset.close()
    assert res["notes"] == []
    assert (res["hook"], res["config"], res["unlink"]) == ("EROFS", "EROFS", "EBUSY")
    assert res["umount"] == "EPERM" and res["unshare"] == "EPERM"
    assert res["git"]["rc"] == 0, res["git"]


@root_only
def test_host_replacing_a_mounted_file_ends_trust_for_it(world, account):
    """A rename over a protected file on the host (the person's `git config`,
    an editor's atomic save) detaches the agent's bind on that entry: the agent
    can then write it, so the guard must not trust it any more."""
    wd, home = world["wd"], world["home"]
    snap = protect.snapshot(wd)
    go_r, go_w = os.pipe()
    done_r, done_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(go_w)
            os.close(done_r)
            namespaces.enter(userns=False)
            namespaces.make_private()
            namespaces.apply(snap.mount_plan)
            caps.switch_user(account.pw_uid, account.pw_gid)
            caps.drop_all(privileged=True)
            before = err_of(lambda: append(os.path.join(wd, ".git/config")))
            os.write(done_w, before.encode())
            os.read(go_r, 1)       # the host replaces .git/config now
            after = err_of(lambda: append(os.path.join(wd, ".git/config"),
                                          "[core]\n\tfsmonitor = touch /tmp/x\n"))
            os.write(done_w, b" " + after.encode())
            code = 0
        finally:
            os._exit(code)
    os.close(go_r)
    os.close(done_w)
    assert os.read(done_r, 100) == b"EROFS"
    as_user(account, "git config user.name person", wd, home)      # lock file + rename
    append(os.path.join(wd, ".vscode/tasks.json"), "\n")            # an in-place edit
    os.write(go_w, b"g")
    assert os.read(done_r, 100) == b" ok"                          # the bind is gone for it
    os.waitpid(pid, 0)
    rep = protect.verify_and_revert(snap, quarantine_dir=world["q"], trust_mounts=True)
    by = {c.path: c for c in rep.changes}
    assert by[".git/config"].action == "restored" and by[".git/config"].alert
    assert "fsmonitor" not in read(os.path.join(wd, ".git/config"))
    assert by[".vscode/tasks.json"].action == "left"                # still under its bind


# --- issue 10: caps, depth and the quarantine's own size ------------------------------------

@root_only
def test_protected_paths_past_the_entry_cap_are_quarantined_not_skipped(world, account, monkeypatch):
    """Past the entry cap the scan stops recording; what it could not record
    is no longer only "unchecked": the protected roots past the cap are moved
    away and what the snapshot had there is put back."""
    snapmod = sys.modules["confine.protect.snapshot"]     # the name is also a function
    wd, home = world["wd"], world["home"]
    snap = protect.snapshot(wd)
    hooks_before = sorted(os.listdir(os.path.join(wd, ".git/hooks")))
    monkeypatch.setattr(snapmod, "ENTRY_CAP", len(snap.entries) + 50)
    # the agent fills a new protected tree, then plants a hook that the scan reaches later
    as_user(account, "mkdir -p .idea && for i in $(seq 1 300); do : > .idea/f$i; done && "
                     "printf '#!/bin/sh\\ntouch %s.capped\\n' > .git/hooks/post-checkout && "
                     "chmod +x .git/hooks/post-checkout" % world["marker"], wd, home)
    rep = protect.verify_and_revert(snap, quarantine_dir=world["q"])
    by = {c.path: c for c in rep.changes}
    assert not os.path.lexists(os.path.join(wd, ".git/hooks/post-checkout")), \
        protect.format_report(rep, verbose=True)
    assert sorted(os.listdir(os.path.join(wd, ".git/hooks"))) == hooks_before
    assert not os.path.lexists(os.path.join(wd, ".idea"))
    assert any(c.what == "unchecked" and c.action == "quarantined" for c in rep.changes), by
    assert not [c for c in rep.changes if c.action == "noted" and c.what == "unchecked"]


@root_only
def test_cross_filesystem_quarantine_is_capped_and_names_specials(world, account, monkeypatch):
    """Across filesystems the quarantine copies at most QUARANTINE_ENTRY_CAP
    entries, records sockets and fifos by name instead of recreating them,
    still removes everything from the workdir, and says so."""
    revmod = sys.modules["confine.protect.revert"]
    if os.stat("/dev/shm").st_dev == os.stat(world["wd"]).st_dev:
        pytest.skip("/dev/shm is on the workdir's filesystem here")
    monkeypatch.setattr(revmod, "QUARANTINE_ENTRY_CAP", 100)
    q = tempfile.mkdtemp(prefix="confine-q-", dir="/dev/shm")
    try:
        wd, home = world["wd"], world["home"]
        snap = protect.snapshot(wd)
        as_user(account, "mkdir -p .idea && for i in $(seq 1 300); do echo $i > .idea/f$i; done && "
                f"{sys.executable} -c 'import socket\nfor i in range(500):\n"
                " socket.socket(socket.AF_UNIX).bind(\".idea/s%d\" % i)'", wd, home)
        rep = protect.verify_and_revert(snap, quarantine_dir=os.path.join(q, "run"))
        by = {c.path: c for c in rep.changes}
        assert by[".idea"].action == "quarantined"
        assert not os.path.lexists(os.path.join(wd, ".idea"))
        n = sum(len(f) + len(d) for _, d, f in os.walk(by[".idea"].quarantine)) + 1
        assert n <= 100, n
        assert "500 socket(s)/fifo(s)/device(s)" in by[".idea"].detail
        assert "removed without a copy" in by[".idea"].detail
        # names kept up to the cap as well; REPORT.txt counts the rest
        assert len(rep.specials) == 100 and all("socket" in sp for sp in rep.specials)
        assert "and 400 more specials" in read(os.path.join(q, "run", "REPORT.txt"))
    finally:
        shutil.rmtree(q, ignore_errors=True)


@root_only
def test_deep_trees_are_quarantined_and_removed_without_recursion(world, account):
    """A new protected tree 1,200 directories deep, some levels unreadable:
    moved across filesystems (copied as far as the cap allows, then removed
    without recursion) and the run's report says so; remove_at on its own
    removes such a tree too."""
    wd, home = world["wd"], world["home"]
    snap = protect.snapshot(wd)
    as_user(account, f"{sys.executable} -c 'import os\nos.mkdir(\".idea\"); os.chdir(\".idea\")\n"
            "for i in range(1200):\n os.mkdir(\"d\"); os.chdir(\"d\")\nopen(\"x\", \"w\").close()'"
            " && chmod 0 .idea/d/d/d", wd, home)
    q = tempfile.mkdtemp(prefix="confine-q-", dir="/dev/shm")
    try:
        rep = protect.verify_and_revert(snap, quarantine_dir=os.path.join(q, "run"))
        by = {c.path: c for c in rep.changes}
        assert by[".idea"].action == "quarantined", protect.format_report(rep, verbose=True)
        assert not os.path.lexists(os.path.join(wd, ".idea"))
    finally:
        shutil.rmtree(q, ignore_errors=True)
    # remove_at alone, as the test account (no DAC override), on a chain with a 0000 level
    top = os.path.join(world["out"], "chain")
    as_user(account, f"{sys.executable} -c 'import os\nos.mkdir(\"chain\"); os.chdir(\"chain\")\n"
            "for i in range(1200):\n os.mkdir(\"d\"); os.chdir(\"d\")\nos.symlink(\"/etc\", \"l\")'"
            " && chmod 0 chain/d/d && chmod 0500 chain/d", world["out"], home)

    def rm():
        fd = os.open(world["out"], os.O_RDONLY | os.O_DIRECTORY)
        try:
            from confine.protect.revert import remove_at
            remove_at(fd, "chain")
        finally:
            os.close(fd)
        return os.path.lexists(top)
    assert in_child(rm, pw=account) is False
    assert os.path.exists("/etc/passwd")


def test_expire_quarantine_keeps_recent_runs_and_foreign_names(tmp_path):
    from confine.protect import keep

    def expire_quarantine(base, keep_run, runs):
        return [r.run for r in keep.bound(base, "quarantine", keep_run, lambda m: None,
                                          lim=keep.Limits(1 << 40, 30), max_runs=runs)]
    now = time.time()
    names = [time.strftime("%Y%m%d-%H%M%S", time.localtime(now - i * 3600)) + "-1" for i in range(8)]
    old = time.strftime("%Y%m%d-%H%M%S", time.localtime(now - 40 * 86400)) + "-9"
    for n in names + [old, "keep-me"]:
        (tmp_path / n / "a").mkdir(parents=True)
    gone = expire_quarantine(str(tmp_path), names[-1], 5)
    left = sorted(os.listdir(tmp_path))
    assert old in gone and "keep-me" in left and names[-1] in left
    assert set(names[:5]) <= set(left) and not set(names[5:7]) & set(left)


@root_only
def test_quarantine_paths_stay_short_for_long_workdir_paths(world, account):
    """A plant below a path of ~4,000 bytes: its quarantine path stays short
    enough for any tool (the mirrored path once broke os.walk of the home)."""
    wd, home = world["wd"], world["home"]
    snap = protect.snapshot(wd)
    as_user(account, f"{sys.executable} -c 'import os\nfor i in range(20):\n"
            " os.mkdir(\"d\" * 200); os.chdir(\"d\" * 200)\nopen(\".envrc\", \"w\").write(\"x\")'",
            wd, home)
    rep = protect.verify_and_revert(snap, quarantine_dir=world["q"])
    mine = [c for c in rep.changes if c.path.endswith("/.envrc")]
    assert mine and mine[0].action == "quarantined", protect.format_report(rep, verbose=True)
    assert len(mine[0].quarantine) < 2100 and os.path.exists(mine[0].quarantine)
    assert mine[0].path in read(os.path.join(world["q"], "REPORT.txt"))
