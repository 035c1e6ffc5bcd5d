"""git in a repository that existed before the run (issue 11, item 3).

The config of an existing repository has no read-only bind when the name
guard runs (snapshot(guarded=True)): git's rename of config.lock onto it is
checked like a new repository's (the broker's vetted path), where the
person's own entries may stay exactly as they were, and the exit check
accepts the same content. Each test makes the repository outside, as the
agent's account, before the run; `layers` runs it with every layer and with
Landlock and seccomp alone (no mount namespace: the same path).
"""
from __future__ import annotations

import os
import subprocess
import time

import pytest

# The person's config: entries that are not on the safe list (they run
# programs or load files) may stay when git copies them along; nothing the
# agent adds may be one of them.
PERSON_CONFIG = """[core]
\trepositoryformatversion = 0
\tfilemode = true
\tbare = false
\tlogallrefupdates = true
\teditor = true
[filter "lfs"]
\tclean = git-lfs clean -- %f
[user]
\tname = Person
\temail = person@example.invalid
"""

SETUP = r'''
set -e
git init -q -b main r
git init -q --bare up.git
cd r
echo one > f
git add f
git -c user.name=P -c user.email=p@example.invalid commit -qm one
'''


@pytest.fixture(params=["all", "landlock"])
def layers(request):
    return request.param


def _existing_repo(box) -> str:
    p = box.outside(["/bin/sh", "-c", SETUP])
    assert p.returncode == 0, p.stderr
    cfg = os.path.join(box.workdir, "r/.git/config")
    with open(cfg, "w") as f:
        f.write(PERSON_CONFIG)
    return cfg


def _entries(path: str) -> list[str]:
    """The config as git reads it (outside, no other config)."""
    env = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "GIT_CONFIG_NOSYSTEM": "1"}
    q = subprocess.run(["git", "config", "--file", path, "--list"], env=env,
                       capture_output=True, text=True)
    assert q.returncode == 0, q.stderr
    return q.stdout.splitlines()


WORK = r'''
set -u
cd r
ok() { "$@" || echo "FAILED: $*"; }
ok git config user.name Agent
ok git config user.email agent@example.invalid
ok git config pull.rebase false
ok git remote set-url origin ../up.git
ok git push -q -u origin main
ok git checkout -q -b feat
ok git branch -q --set-upstream-to=origin/main
ok git checkout -q --track -b t2 origin/main
ok git checkout -q main
ok git -c user.name=X -c core.pager=false commit -q --allow-empty -m in-memory
ok git remote set-url origin ../up.git
echo done
'''


def test_git_commands_that_write_the_config_work(sandbox, layers):
    box = sandbox if layers == "all" else sandbox.without_namespaces()
    cfg = _existing_repo(box)
    # the person's remote, on a local path: it may stay (set again to the same value),
    # where the agent could not add it (tests/e2e/test_git_locations.py)
    with open(cfg, "a") as f:
        f.write('[remote "origin"]\n\turl = ../up.git\n'
                '\tfetch = +refs/heads/*:refs/remotes/origin/*\n')
    p = box.run(["/bin/bash", "-c", WORK], timeout=120)
    assert p.returncode == 0 and "done" in p.stdout, (p.stdout, p.stderr)
    assert "FAILED" not in p.stdout, (p.stdout, p.stderr)
    # nothing failed while exiting 0 ("error: could not write config file")
    assert "error" not in p.stderr and "denied" not in p.stderr, p.stderr
    assert "PROTECTED PATHS WERE CHANGED" not in p.stderr, p.stderr
    assert _entries(cfg) == [
        "core.repositoryformatversion=0", "core.filemode=true", "core.bare=false",
        "core.logallrefupdates=true", "core.editor=true", "filter.lfs.clean=git-lfs clean -- %f",
        "user.name=Agent", "user.email=agent@example.invalid",
        "remote.origin.url=../up.git", "remote.origin.fetch=+refs/heads/*:refs/remotes/origin/*",
        "pull.rebase=false",
        "branch.main.remote=origin", "branch.main.merge=refs/heads/main",
        "branch.feat.remote=origin", "branch.feat.merge=refs/heads/main",
        "branch.t2.remote=origin", "branch.t2.merge=refs/heads/main"], p.stderr
    # and the person's git afterwards sees the upstream the agent set
    q = subprocess.run(["git", "-c", "safe.directory=*", "rev-parse", "--abbrev-ref", "feat@{u}"],
                       cwd=os.path.dirname(os.path.dirname(cfg)), capture_output=True, text=True,
                       env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent"})
    assert q.stdout.strip() == "origin/main", q.stderr


REFUSED = [
    ("core.hooksPath", "/tmp/x", "core.hookspath"),
    ("core.fsmonitor", "touch /tmp/pwned", "core.fsmonitor"),
    ("core.sshCommand", "touch /tmp/pwned", "core.sshcommand"),
    ("alias.x", "!sh", "alias.x"),
    ("include.path", "../evil.cfg", "include.path"),
    ("url.file:///tmp/x.insteadOf", "https://example.invalid/", "url.file:///tmp/x.insteadof"),
    ("credential.helper", "!touch /tmp/pwned", "credential.helper"),
    # the person's own key, with another value: not the person's entry any more
    ("core.editor", "touch /tmp/pwned", "core.editor"),
    ("filter.lfs.smudge", "touch /tmp/pwned", "filter.lfs.smudge"),
]


def test_a_refused_key_is_named_and_leaves_the_config_unchanged(sandbox, layers):
    box = sandbox if layers == "all" else sandbox.without_namespaces()
    cfg = _existing_repo(box)
    script = "cd r\n" + "".join(
        f"git config '{k}' '{v}'; echo \"{k} rc=$?\"\n" for k, v, _ in REFUSED) \
        + "git config --add core.editor true; echo \"dup rc=$?\"\n" \
        + "git config user.name Agent; echo \"control rc=$?\"\n"
    p = box.run(["/bin/bash", "-c", script], timeout=120)
    out = p.stdout
    for k, _, name in REFUSED:
        assert f"{k} rc=0" not in out, (k, out, p.stderr)
        lines = [ln for ln in p.stderr.splitlines()
                 if ln.startswith("confine: ") and f"key(s) {name} not allowed" in ln]
        assert len(lines) == 1, (name, p.stderr)
    # the person's entry may stay, but not be added twice
    assert "dup rc=0" not in out, (out, p.stderr)
    assert "control rc=0" in out, (out, p.stderr)
    want = PERSON_CONFIG.replace("name = Person", "name = Agent")
    assert open(cfg).read().replace(" ", "").replace("\t", "") == \
        want.replace(" ", "").replace("\t", ""), open(cfg).read()
    assert "PROTECTED PATHS WERE CHANGED" not in p.stderr, p.stderr


ATTACKS = r'''
import subprocess, threading, time
cfg = "r/.git/config"
lock = "r/.git/config.lock"
orig = open(cfg, "rb").read()
SAFE = orig + b"[user]\n\tname = Agent\n"
BAD = orig + b"[core]\n\tpager = touch /tmp/pwned\n"
def put(path, data):
    with open(path, "wb") as f:
        f.write(data)
def same():
    return open(cfg, "rb").read()

# a symlink as the lock file: never followed
put("other", SAFE)
os.symlink("../../other", lock)
attempt("symlink lock", lambda: os.rename(lock, cfg))
if os.path.lexists(lock):
    os.unlink(lock)
R["symlink: config unchanged"] = same() == orig
# a hard link as the lock file: the checked bytes land in a new inode, so
# writing the other name later changes nothing
linked = "r/.git/linked"      # beside it: .git is a mount of its own (pinned)
put(linked, SAFE)
os.link(linked, lock)
attempt("hard-linked lock", lambda: os.rename(lock, cfg))
with open(linked, "ab") as f:
    f.write(b"[core]\n\tpager = touch /tmp/pwned\n")
R["hard link: config is the checked copy"] = same() == SAFE
R["hard link: not the same inode"] = os.stat(cfg).st_ino != os.stat(linked).st_ino
put(cfg + ".lock", orig)
os.rename(cfg + ".lock", cfg)
# a second writer racing the rename: what is installed is what was checked
stop = time.monotonic() + P["seconds"]
seen_bad = []
def writer():
    while time.monotonic() < stop:
        try:
            fd = os.open(lock, os.O_WRONLY | os.O_CREAT, 0o644)
        except OSError:
            continue
        try:
            os.write(fd, SAFE)
            os.lseek(fd, 0, 0)
            os.write(fd, BAD)
        finally:
            os.close(fd)
def renamer():
    while time.monotonic() < stop:
        try:
            os.rename(lock, cfg)
        except OSError:
            pass
        if b"pager" in same():
            seen_bad.append(1)
ts = [threading.Thread(target=writer), threading.Thread(target=renamer)]
[t.start() for t in ts]; [t.join() for t in ts]
R["race: never installed"] = not seen_bad and b"pager" not in same()
if os.path.lexists(lock):
    os.unlink(lock)
put(lock, orig)
os.rename(lock, cfg)
# a huge config, NUL bytes, an overlong line
put(lock, orig + b"[user]\n\tname = " + b"x" * (2 << 20) + b"\n")
attempt("huge", lambda: os.rename(lock, cfg))
put(lock, orig + b"[user]\n\tname = a\0b\n")
attempt("nul", lambda: os.rename(lock, cfg))
if os.path.lexists(lock):
    os.unlink(lock)
R["after refusals: unchanged"] = same() == orig
put(lock, orig + b"[user]\n\tname = " + b"y" * 100000 + b"\n")
attempt("long line", lambda: os.rename(lock, cfg))
R["long line installed"] = same().endswith(b"y" * 100000 + b"\n")
put(lock, orig)
os.rename(lock, cfg)
# direct writes, by any name
attempt("append", lambda: opened(cfg, os.O_WRONLY | os.O_APPEND))
attempt("truncate", lambda: os.truncate(cfg, 0))
attempt("hard link", lambda: os.link(cfg, "alias"))
fd = os.open(cfg, os.O_RDONLY)
attempt("reopen", lambda: opened("/proc/self/fd/%d" % fd, os.O_WRONLY))
os.close(fd)
os.rename(cfg, "r/.git/moved-config")
attempt("write it renamed away", lambda: opened("r/.git/moved-config", os.O_WRONLY | os.O_APPEND))
os.rename("r/.git/moved-config", cfg)
# git -c is in memory; GIT_CONFIG* make git write the repository's config
env = dict(os.environ)
git = lambda *a, **kw: subprocess.run(["git", *a], cwd="r", capture_output=True, text=True, **kw)
R["git -c"] = git("-c", "core.pager=touch /tmp/pwned", "log", "-1", "--format=%s").stdout.strip()
R["GIT_CONFIG"] = git("config", "core.pager", "touch /tmp/pwned",
                      env=dict(env, GIT_CONFIG=os.path.abspath(cfg))).returncode
R["GIT_CONFIG_GLOBAL"] = git("config", "--global", "core.pager", "touch /tmp/pwned",
                             env=dict(env, GIT_CONFIG_GLOBAL=os.path.abspath(cfg))).returncode
R["GIT_CONFIG_COUNT"] = git("config", "user.name", "Env",
                            env=dict(env, GIT_CONFIG_COUNT="1", GIT_CONFIG_KEY_0="core.pager",
                                     GIT_CONFIG_VALUE_0="touch /tmp/pwned")).returncode
R["final"] = same().decode()
'''


def test_attacks_on_the_checked_rename(sandbox, layers):
    box = sandbox if layers == "all" else sandbox.without_namespaces()
    cfg = _existing_repo(box)
    p, r = box.probe(ATTACKS, {"seconds": 2}, timeout=120)
    assert r is not None, p.stderr
    assert r["symlink lock"] == "ELOOP" and r["symlink: config unchanged"], (r, p.stderr)
    assert r["hard-linked lock"] == "ok" and r["hard link: config is the checked copy"] \
        and r["hard link: not the same inode"], (r, p.stderr)
    assert r["race: never installed"], (r, p.stderr)
    assert r["huge"] == "EACCES" and r["nul"] == "EACCES", (r, p.stderr)
    assert r["after refusals: unchanged"], (r, p.stderr)
    assert r["long line"] == "ok" and r["long line installed"], (r, p.stderr)
    for k in ("append", "truncate", "hard link", "reopen", "write it renamed away"):
        assert r[k] in ("EACCES", "EPERM"), (k, r, p.stderr)
    assert r["git -c"] == "one", (r, p.stderr)
    assert r["GIT_CONFIG"] != 0 and r["GIT_CONFIG_GLOBAL"] != 0, (r, p.stderr)
    assert r["GIT_CONFIG_COUNT"] == 0, (r, p.stderr)     # the environment is not written
    assert "pager" not in r["final"] and "name = Env" in r["final"], r["final"]
    assert "larger than" in p.stderr and "NUL byte" in p.stderr, p.stderr
    assert "pager" not in open(cfg).read()
    assert not os.path.exists("/tmp/pwned")


def test_a_config_removed_during_the_run_is_put_back(sandbox, layers):
    """Without its bind the config can be removed (unlink is not mediated); git
    keeps working without it and the exit check recreates it."""
    box = sandbox if layers == "all" else sandbox.without_namespaces()
    cfg = _existing_repo(box)
    p = box.run(["/bin/sh", "-c", "rm r/.git/config && git -C r status --short && echo gone"])
    assert "gone" in p.stdout, (p.stdout, p.stderr)
    assert open(cfg).read() == PERSON_CONFIG
    assert "recreated from the snapshot" in p.stderr, p.stderr


def test_a_changed_config_is_checked_again_at_exit(sandbox):
    """The exit check applies the broker's rule itself: the content git wrote
    through the check stays, content nobody checked does not (here written
    by root outside the agent while it runs: the check cannot tell)."""
    cfg = _existing_repo(sandbox)
    script = ("cd r && git config user.name Agent && "
              "git remote add o https://example.invalid/up.git && "
              "touch ../go && while [ ! -e ../planted ]; do sleep 0.05; done; echo ok")
    proc = sandbox.popen(["/bin/sh", "-c", script], stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(600):        # the agent has set its keys once `go` exists
            if os.path.exists(os.path.join(sandbox.workdir, "go")) or proc.poll() is not None:
                break
            time.sleep(0.1)
        after_agent = open(cfg).read()
        assert "name = Agent" in after_agent, after_agent
        planted = after_agent + "[core]\n\tfsmonitor = touch /tmp/pwned\n"
        tmp = cfg + ".outside"
        with open(tmp, "w") as f:
            f.write(planted)
        os.rename(tmp, cfg)
        open(os.path.join(sandbox.workdir, "planted"), "w").close()
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "ok" in out, (out, err)
    assert open(cfg).read() == PERSON_CONFIG, open(cfg).read()
    assert "PROTECTED PATHS WERE CHANGED" in err, err


def test_submodule_add_with_a_relative_url_fails_loudly(sandbox):
    """A relative url in `.gitmodules` resolves against the superproject's
    remote or directory (here: a repository in the workdir, which the agent
    could prepare for the person's `git submodule update`): refused with a
    nonzero status and a confine: line naming the file and why, never exit 0
    with half a submodule (tests/e2e/test_git_flows.py: an absolute one works)."""
    _existing_repo(sandbox)
    p = sandbox.outside(["/bin/sh", "-c", "git init -q -b main lib && "
                         "git -C lib -c user.name=a -c user.email=b commit -q --allow-empty -m l"])
    assert p.returncode == 0, p.stderr
    p = sandbox.run(["/bin/sh", "-c", "cd r && git -c protocol.file.allow=always "
                     "submodule add -q ../lib lib; echo \"rc=$?\""], timeout=120)
    assert "rc=0" not in p.stdout and "rc=" in p.stdout, (p.stdout, p.stderr)
    assert "confine: denied: git config" in p.stderr and "r/.gitmodules" in p.stderr \
        and "relative URL" in p.stderr, p.stderr
    # git writes the path first (allowed), then the url (refused): nothing to clone from
    gm = os.path.join(sandbox.workdir, "r/.gitmodules")
    assert not os.path.exists(gm) or "url" not in open(gm).read(), open(gm).read()
