"""An exclusive workdir's exit check after its shortcuts (issue 26 item 1), and the
mode with an agent's state root.

The exit check of an exclusive run reads a repository made during the run (a clone)
object by object. It now looks an object up in the loose store only where the
fan-out listings show a name like it, reads a pack index's fan-out bucket once, and
reads small objects with small preads. A commit that adds a protected name is still
reported wherever its objects are: packed (after `git repack -a -d`, which prunes the
loose copies) or loose (a commit made after the repack). Control: an ordinary commit
on a third branch in the same run is not reported (nor is the clone's own).

A profile with a state root (an agent's ~/.claude) refuses exclusive mode by name:
the person's own agent outside may read the state root during the run, which only
mediated file calls keep free of new protected names, and the seccomp filter cannot
mediate the state root's calls while the workdir's run unmediated (it sees no
paths). Controls: the same profile runs in the default mode, and in exclusive mode
where the state root does not exist.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile

from conftest import write_owned
from test_held import GIT_ENV, NOTED, ORDINARY, cleanup  # noqa: F401 - cleanup: fixture

EXCLUSIVE = "--exclusive-workdir"


def _harmless_bare(sb) -> None:
    """`up.git` in the workdir: ordinary files only, packed as a clone gets it."""
    src = os.path.join(sb.workdir, "..", os.path.basename(sb.workdir) + "-src")
    shutil.rmtree(src, ignore_errors=True)
    subprocess.run(["git", "init", "-q", "-b", "main", src], check=True, env=GIT_ENV)
    for rel, text in ORDINARY.items():
        os.makedirs(os.path.dirname(os.path.join(src, rel)), exist_ok=True)
        with open(os.path.join(src, rel), "w") as f:
            f.write(text)
    for a in (["add", "-A"], ["commit", "-qm", "init"]):
        subprocess.run(["git", *a], check=True, env=GIT_ENV, cwd=src, capture_output=True)
    up = os.path.join(sb.workdir, "up.git")
    subprocess.run(["git", "clone", "-q", "--bare", src, up], check=True, env=GIT_ENV,
                   capture_output=True)
    shutil.rmtree(src)
    subprocess.run(["chown", "-R", f"{sb.pw.pw_uid}:{sb.pw.pw_gid}", up], check=True)


# The agent: a clone (packed), then a branch adding .vscode/settings.json packed with
# `repack -a -d` (its loose copies pruned), then a branch adding .envrc left loose,
# then an ordinary commit. The worktree's own files are the exclusive mode's (held).
COMMITS = r'''
set -e
git clone -q up.git c
cd c
g() { git -c user.name=t -c user.email=t@e "$@"; }
g checkout -qb packed
mkdir -p .vscode && echo '{}' > .vscode/settings.json && g add .vscode && g commit -qm p
g repack -a -d -q
test -z "$(find .git/objects -path '*/objects/??/*' -type f)"
g checkout -qb loose main
echo 'export X=1' > .envrc && g add .envrc && g commit -qm l
test -n "$(find .git/objects -path '*/objects/??/*' -type f)"
g checkout -qb plain main
echo x > plain.txt && g add plain.txt && g commit -qm o
'''


def test_commits_adding_protected_names_are_reported_packed_or_loose(sandbox, cleanup):  # noqa: F811
    _harmless_bare(sandbox)
    p = sandbox.run(["/bin/sh", "-c", COMMITS], EXCLUSIVE)
    m = re.search(r"confine held show (\S+)`", p.stderr)
    if m:
        cleanup.append((sandbox, m.group(1)))
    lines = [ln for ln in p.stderr.splitlines() if "adds or changes protected paths" in ln]
    assert p.returncode == NOTED, p.stderr
    assert "cannot decide" not in p.stderr, p.stderr
    by_ref = {ref: [ln for ln in lines if f"refs/heads/{ref}" in ln]
              for ref in ("packed", "loose", "plain")}
    assert len(by_ref["packed"]) == 1 and ".vscode/settings.json" in by_ref["packed"][0], \
        p.stderr
    assert len(by_ref["loose"]) == 1 and ".envrc" in by_ref["loose"][0], p.stderr
    assert by_ref["plain"] == [] and len(lines) == 2, p.stderr


STATE_PROFILE = """extends: default
filesystem:
  state_roots:
    - path: ?{root}
      protected:
        - /settings*.json
        - /hooks/
"""


def test_a_state_root_refuses_exclusive_mode_by_name(sandbox):
    sb = sandbox
    # in the agent's home (a state root under /tmp would meet the run's private /tmp)
    base = tempfile.mkdtemp(prefix="excl-state-", dir=sb.agent.pw_dir)
    root = os.path.realpath(os.path.join(base, ".claude"))
    prof = base + ".yaml"
    try:
        os.makedirs(os.path.join(root, "projects"))
        write_owned(os.path.join(root, "settings.json"), "{}\n", sb.agent)
        for d in (base, root, os.path.join(root, "projects")):
            os.chown(d, sb.agent.pw_uid, sb.agent.pw_gid)
        write_owned(prof, STATE_PROFILE.format(root=root), sb.pw)
        write = ["/bin/sh", "-c", f"echo s > {root}/projects/s.jsonl"]
        p = sb.run(write, "-p", prof, EXCLUSIVE)
        assert p.returncode == 125, p.stderr
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1 and "exclusive workdir" in lines[0] and root in lines[0] \
            and "state root" in lines[0], p.stderr
        assert not os.path.exists(os.path.join(root, "projects", "s.jsonl"))
        # control: the same profile in the default mode runs, and writes its state
        ok = sb.run(write, "-p", prof)
        assert ok.returncode == 0, ok.stderr
        assert os.path.exists(os.path.join(root, "projects", "s.jsonl"))
        # control: without the state root, exclusive mode runs
        shutil.rmtree(root)
        ok = sb.run(["true"], "-p", prof, EXCLUSIVE)
        assert ok.returncode == 0, ok.stderr
    finally:
        shutil.rmtree(base, ignore_errors=True)
        if os.path.exists(prof):
            os.unlink(prof)


# Made below directories that did not exist at the start, in every way a name arrives:
# created, renamed in with its directory, hard-linked, symlinked, and a new repository's
# hook. A workdir with no directory at the start gets no kernel reports (one stamp of
# the top at exit, which lists the new directories); each must still be found.
PLANTS = r'''
set -e
mkdir -p a/b x stage h s deep
echo 'export A=1' > a/b/.envrc
echo plain > a/b/plain.txt
mkdir x/.vscode && echo '{}' > x/.vscode/settings.json
echo 'export S=1' > stage/.envrc && mv stage deep/moved
echo 'export H=1' > h/source && ln h/source h/.envrc
ln -s /etc/hostname s/.envrc
git init -q r && printf '#!/bin/sh\ntouch SENTINEL\n' > r/.git/hooks/post-checkout
chmod +x r/.git/hooks/post-checkout
'''
GONE = ["a/b/.envrc", "x/.vscode", "deep/moved/.envrc", "h/.envrc", "s/.envrc",
        "r/.git/hooks/post-checkout"]


def test_new_protected_names_in_a_workdir_without_directories_are_found(sandbox, cleanup):  # noqa: F811
    wd = sandbox.workdir
    write_owned(os.path.join(wd, "notes.txt"), "a file, no directory\n", sandbox.agent)
    p = sandbox.run(["/bin/sh", "-c", PLANTS], EXCLUSIVE)
    m = re.search(r"confine held show (\S+)`", p.stderr)
    if m:
        cleanup.append((sandbox, m.group(1)))
    assert p.returncode == NOTED, p.stderr
    for rel in GONE:
        assert not os.path.lexists(os.path.join(wd, rel)), (rel, p.stderr)
        assert rel in p.stderr, (rel, p.stderr)
    # control: what is not protected stays where the agent made it
    for rel in ("a/b/plain.txt", "h/source", "deep/moved", "r/.git/config"):
        assert os.path.lexists(os.path.join(wd, rel)), (rel, p.stderr)
