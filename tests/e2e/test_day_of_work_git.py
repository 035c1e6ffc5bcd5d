"""The git part of issue 11's "day of agent work", as an unprivileged user.

A new repository and one that existed before the run go through the same
day: config, branch, commit, merge, rebase, stash, and a local bare remote
(remote add, push -u, pull from a second clone's push). Every step must
succeed with nothing on stderr from confine or from git's error paths, and
the exit check must find nothing to put back. The control: a step that
must be refused (a hook) is refused with a confine: line naming it.
"""
from __future__ import annotations

import os
import subprocess

DAY = r'''
set -u
fail() { echo "FAILED: $*"; }
ok() { "$@" >/dev/null || fail "$@"; }
cd "$1"
ok git config user.name Agent
ok git config user.email agent@example.invalid
echo base > base.txt && ok git add base.txt && ok git commit -qm base
ok git checkout -q -b feature
echo feature > feature.txt && ok git add feature.txt && ok git commit -qm feature
ok git checkout -q main
echo main >> base.txt && ok git commit -qam main
ok git merge -q --no-edit feature
ok git checkout -q -b topic HEAD~1
echo topic > topic.txt && ok git add topic.txt && ok git commit -qm topic
ok git rebase -q main
echo wip >> base.txt
ok git stash -q
test "$(git stash list | wc -l)" = 1 || fail stash list
ok git stash pop -q
ok git commit -qam wip
ok git checkout -q main
# the old repository has the person's remote already: the agent may not add a local one
git remote get-url origin >/dev/null 2>&1 || ok git remote add origin "$2"
ok git push -q -u origin main topic
test "$(git rev-parse --abbrev-ref main@{u})" = origin/main || fail upstream
# someone else pushes to the remote; pull brings it in
ok git clone -q "$2" "../other-$1"
(cd "../other-$1" && git config user.name Other && git config user.email o@example.invalid \
  && echo other > other.txt && git add other.txt && git commit -qm other && git push -q) \
  >/dev/null || fail other
ok git pull -q --no-rebase --no-edit
test -f other.txt || fail pulled
ok git branch -q -d feature
ok git tag v1
git log --oneline | wc -l
# the control: a hook is still refused, and says so
echo '#!/bin/sh' > .git/hooks/pre-commit 2>/dev/null && fail "hook written"
echo "day done $1"
'''


def test_a_day_of_git_work_as_an_unprivileged_user(user_sandbox):
    box = user_sandbox
    # the repository that existed at start, with the person's identity in it
    setup = ("set -e; git init -q -b main old; git -C old config user.name Person; "
             "git -C old config user.email p@example.invalid; git init -q --bare -b main up-old.git; "
             "git -C old remote add origin ../up-old.git; "
             "git init -q --bare -b main up-new.git")
    p = box.outside(["/bin/sh", "-c", setup])
    assert p.returncode == 0, p.stderr
    script = os.path.join(box.workdir, "day.sh")
    with open(script, "w") as f:
        f.write(DAY)
    os.chmod(script, 0o755)
    run = ("git init -q -b main new && bash day.sh new ../up-new.git && "
           "bash day.sh old ../up-old.git")
    p = box.run(["/bin/bash", "-c", run], timeout=240)
    assert p.returncode == 0, (p.stdout, p.stderr)
    assert "FAILED" not in p.stdout, (p.stdout, p.stderr)
    assert "day done new" in p.stdout and "day done old" in p.stdout, (p.stdout, p.stderr)
    # nothing failed quietly, and the only refusal is the control's
    said = [ln for ln in p.stderr.splitlines() if ln.startswith("confine:")]
    denials = [ln for ln in said if ln.startswith("confine: denied:")]
    assert len(denials) == 2 and all("pre-commit" in d for d in denials), p.stderr
    # the rest is the exit summary (runtime/events.py): the count, and what it cannot see
    assert all(ln in denials or "refused during the run" in ln or "not shown:" in ln
               for ln in said), p.stderr
    assert "error:" not in p.stderr and "fatal:" not in p.stderr, p.stderr
    assert "PROTECTED PATHS WERE CHANGED" not in p.stderr, p.stderr
    env = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "GIT_CONFIG_NOSYSTEM": "1"}
    for repo in ("new", "old"):
        wd = os.path.join(box.workdir, repo)
        q = subprocess.run(["git", "-c", "safe.directory=*", "config", "--list", "--local"],
                           cwd=wd, env=env, capture_output=True, text=True)
        # a repository made during the run keeps no remote on a local path (nor the
        # branch naming it): git would take the name for a path
        kept = repo == "old"
        assert "user.name=Agent" in q.stdout and ("remote.origin.url=" in q.stdout) == kept \
            and ("branch.main.remote=origin" in q.stdout) == kept, (repo, q.stdout)
        q = subprocess.run(["git", "-c", "safe.directory=*", "log", "--format=%s", "main"],
                           cwd=wd, env=env, capture_output=True, text=True)
        assert {"base", "feature", "main", "other"} <= set(q.stdout.split()), (repo, q.stdout)
        assert not os.path.exists(os.path.join(wd, ".git/hooks/pre-commit"))
