"""A checked git config is remembered by the object, not by its inode number.

The broker refuses writes to a git config it installed, under any name
(mediation/files.py, FileBroker.vetted). It once kept the (device, inode)
numbers forever: when git replaced the config, the number was freed, the
filesystem gave it to the next new file, and that file was refused as "a git
config checked by confine" (issue 11, item 1). ext4 hands a freed inode
number to the very next file made in the same directory group, so the tests
force the reuse: note the config's number, let git replace the config, then
make files until one carries the old number (bounded), and write to it.
"""
from __future__ import annotations

import os
import subprocess

REUSE_BODY = r'''
import subprocess
def git(*a):
    return subprocess.run(["git", *a], cwd="r", capture_output=True, text=True)
subprocess.run(["git", "init", "-q", "r"], check=True)
R["name"] = git("config", "user.name", "Agent").returncode
R["email"] = R["branch"] = 0
hit = None
n = 0
# Other processes on the machine may take the freed number first: a few
# rounds, each freeing one more.
for rnd in range(P["rounds"]):
    old = os.stat("r/.git/config")
    R["email"] |= git("config", "user.email", "a%d@example.invalid" % rnd).returncode
    R["replaced"] = os.stat("r/.git/config").st_ino != old.st_ino
    # the broker lets go of a replaced config when it checks the next one
    R["branch"] |= git("config", "init.defaultBranch", "b%d" % rnd).returncode
    for i in range(P["tries"]):
        # beside the config: ext4 takes a new file's inode from its directory's group
        name = "r/.git/f%d" % n
        n += 1
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        st = os.fstat(fd)
        os.close(fd)
        if (st.st_dev, st.st_ino) == (old.st_dev, old.st_ino):
            hit = name
            break
    if hit:
        break
R["reused"] = hit is not None
if hit:
    attempt("write the file that got the old number", lambda: opened(hit, os.O_WRONLY | os.O_APPEND))
    attempt("truncate it", lambda: os.truncate(hit, 0))
    attempt("hard link it", lambda: os.link(hit, "r/.git/alias"))
# the config itself stays refused (the control: the protection still holds)
attempt("write the config", lambda: opened("r/.git/config", os.O_WRONLY | os.O_APPEND))
moved = "r/.git/moved-config"
os.rename("r/.git/config", moved)
attempt("write the moved config", lambda: opened(moved, os.O_WRONLY | os.O_APPEND))
os.rename(moved, "r/.git/config")
R["config after"] = open("r/.git/config").read()
'''


def test_a_new_file_that_reuses_a_replaced_configs_inode_is_writable(sandbox):
    p, r = sandbox.probe(REUSE_BODY, {"tries": 200, "rounds": 8}, timeout=120)
    assert r is not None, p.stderr
    assert r["name"] == r["email"] == r["branch"] == 0 and r["replaced"], (r, p.stderr)
    # the workdir is on ext4 here, which reuses a freed number at once; a
    # filesystem that never reuses them cannot show the bug
    assert r["reused"], ("no inode number was reused: the test cannot judge", r)
    assert r["write the file that got the old number"] == "ok", (r, p.stderr)
    assert r["truncate it"] == "ok" and r["hard link it"] == "ok", (r, p.stderr)
    assert r["write the config"] in ("EACCES", "EPERM"), (r, p.stderr)
    assert r["write the moved config"] in ("EACCES", "EPERM"), (r, p.stderr)
    assert "email = a" in r["config after"], r
    assert "a git config checked by confine" in p.stderr, p.stderr
    assert "PROTECTED PATHS WERE CHANGED" not in p.stderr, p.stderr


ISSUE_SCRIPT = r'''
set -eu
git init -q repo
cd repo
git config user.name X
git config user.email y@example.invalid
git checkout -qb feat
echo a > f
git add f
git commit -qm one
for i in $(seq 1 50); do
    git config user.name "X$i"
    echo b >> "f2-$i"
done
git checkout -qb feat2
git commit -q --allow-empty -m two
git log --oneline | wc -l
'''


def test_the_issues_git_sequence_works(sandbox):
    p = sandbox.run(["/bin/bash", "-c", ISSUE_SCRIPT], timeout=120)
    assert p.returncode == 0, (p.stdout, p.stderr)
    assert p.stdout.split()[-1] == "2", (p.stdout, p.stderr)
    assert "denied" not in p.stderr, p.stderr
    cfg = open(os.path.join(sandbox.workdir, "repo/.git/config")).read()
    assert "name = X50" in cfg, cfg


REMOVED_BODY = r'''
old = {p: os.stat(p) for p in P["paths"]}
for p in P["paths"]:
    os.unlink(p)
bad, reused = [], []
for i in range(P["tries"]):
    for p in P["paths"]:
        name = os.path.join(os.path.dirname(p), "new%d" % i)
        try:
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except OSError as e:
            bad.append((name, e.errno))
            continue
        st = os.fstat(fd)
        os.close(fd)
        if (st.st_dev, st.st_ino) == (old[p].st_dev, old[p].st_ino):
            reused.append(name)
        try:
            opened(name, os.O_WRONLY | os.O_APPEND)
        except OSError as e:
            bad.append((name, e.errno))
R["bad"] = bad
R["reused"] = reused
'''


def test_a_removed_protected_file_does_not_lend_its_number_to_new_files(sandbox):
    """Without a bind (an existing repository's config; with Landlock alone,
    `.envrc` too) the agent can remove a file the guard knows by inode. The
    broker holds those open from the start, so no new file gets the number
    (before, one did and was refused as "a file protected at start")."""
    setup = ("set -e; git init -q r; mkdir -p e; echo 'export A=1' > e/.envrc; "
             "for i in $(seq 1 20); do touch r/.git/pad$i e/pad$i; done; rm -f r/.git/pad* e/pad*")
    p = sandbox.outside(["/bin/sh", "-c", setup])
    assert p.returncode == 0, p.stderr
    for box, paths in ((sandbox, ["r/.git/config"]),
                       (sandbox.without_namespaces(), ["r/.git/config", "e/.envrc"])):
        for rel in paths:           # put back by the previous run's exit check
            assert os.path.exists(os.path.join(sandbox.workdir, rel)), rel
        p, r = box.probe(REMOVED_BODY, {"paths": paths, "tries": 200}, timeout=120)
        assert r is not None, p.stderr
        assert r["bad"] == [] and r["reused"] == [], (box.layers, r, p.stderr)
        assert "another name of it" not in p.stderr, p.stderr
        # the control: the exit check puts the removed files back
        assert "recreated from the snapshot" in p.stderr, p.stderr
        subprocess.run(["rm", "-f"] + [os.path.join(sandbox.workdir, os.path.dirname(x), f"new{i}")
                                       for x in paths for i in range(200)], check=True)


CAP_BODY = r'''
import subprocess
subprocess.run(["git", "init", "-q", "r"], check=True)
cfg, lock = "r/.git/config", "r/.git/config.lock"
data = open(cfg, "rb").read()
def install():
    with open(lock, "wb") as f:
        f.write(data)
    os.rename(lock, cfg)
kept, refused = 0, None
for i in range(P["n"]):
    try:
        install()
    except OSError as e:
        refused = (i, en(e.errno))
        break
    os.rename(cfg, "r/.git/kept%d" % i)      # alive under another name: held
    kept += 1
R["kept"], R["refused"] = kept, refused
if os.path.exists(lock):
    os.unlink(lock)
for i in range(kept):
    os.unlink("r/.git/kept%d" % i)
attempt("after removing them", install)
'''


def test_checked_configs_kept_alive_are_bounded(root_sandbox):
    """Each installed config is held by a descriptor; configs renamed away
    and kept are bounded (256): the next is refused with a confine: line,
    and once they are gone git config works again."""
    p, r = root_sandbox.probe(CAP_BODY, {"n": 400}, timeout=120)
    assert r is not None, p.stderr
    assert r["refused"] == [256, "EACCES"] and r["kept"] == 256, (r, p.stderr)
    assert r["after removing them"] == "ok", (r, p.stderr)
    assert "more than 256 checked git configs" in p.stderr, p.stderr
