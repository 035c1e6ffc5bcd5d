"""Where the person's next `git push` goes, and what it does there (issue 21,
items 1 and 2).

A repository that existed at start, cloned from a real upstream bare
repository outside the workdir. Inside, the agent makes a bare repository
with a pre-receive hook in its own home and points the push there
(remote.origin.pushurl, branch.main.pushremote), or adds refspecs that
delete or force upstream refs (`:refs/heads/release`, `+main:main`,
mirror). Each `git config` must fail with one `confine:` line naming the key;
afterwards the person's own `git push`, run outside, runs no hook of the
agent's and the upstream `release` branch is still there. The controls: the
same `git config` outside confine makes the push run the hook and delete the
branch (the attack is real), and a network pushurl is accepted inside.

At exit: a network URL that leads back into the agent's home (ssh to this
machine) is an alert and the config is reverted; a repository made during the
run loses a local remote, with an alert when it led into the agent's home and
none when it stayed in the workdir (the control).
"""
from __future__ import annotations

import os
import re
import shutil

import pytest

SETUP = r'''
set -e
git init -q --bare -b main "$OUT/up.git"
git init -q -b main seed
cd seed
echo one > f && git add f && git -c user.name=P -c user.email=p@example.invalid commit -qm one
git push -q "$OUT/up.git" main main:release
cd .. && rm -rf seed
git clone -q "$OUT/up.git" "$1"
'''

EVIL = r'''
mkdir -p "$HOME/.cache/x"
git init -q --bare "$HOME/.cache/x/evil.git"
printf '#!/bin/sh\ntouch "%s"\n' "$MARK" > "$HOME/.cache/x/evil.git/hooks/pre-receive"
chmod +x "$HOME/.cache/x/evil.git/hooks/pre-receive"
'''

# (name in the script, the command's arguments, the key a refusal names)
ATTACKS = [
    ("pushurl", 'remote.origin.pushurl "$HOME/.cache/x/evil.git"', "remote.origin.pushurl"),
    ("pushremote", 'branch.main.pushremote "$HOME/.cache/x/evil.git"', "branch.main.pushremote"),
    ("pushremote-name", "branch.main.pushremote evil", "branch.main.pushremote"),
    ("pushdefault", 'remote.pushDefault "$HOME/.cache/x/evil.git"', "remote.pushdefault"),
    ("pushurl-file", 'remote.origin.pushurl "file://$HOME/.cache/x/evil.git"',
     "remote.origin.pushurl"),
    ("url-ext", "remote.origin.url 'ext::sh -c touch% /tmp/x'", "remote.origin.url"),
    ("delete", "--add remote.origin.push :refs/heads/release", "remote.origin.push"),
    ("force", "--add remote.origin.push +main:main", "remote.origin.push"),
    ("mirror", "remote.origin.mirror true", "remote.origin.mirror"),
    ("fetch-heads", "--add remote.origin.fetch +refs/heads/*:refs/heads/*", "remote.origin.fetch"),
]

INSIDE = "set -u\necho HOME=$HOME\n" + EVIL + "cd r\n" + "".join(
    f"git config {args}; echo \"{name} rc=$?\"\n" for name, args, _ in ATTACKS) + r'''
git config remote.origin.pushurl ssh://git@example.invalid/r.git; echo "ssh rc=$?"
git config remote.origin.pushurl https://example.invalid/r.git; echo "https rc=$?"
git config --unset remote.origin.pushurl; echo "unset rc=$?"
'''

PERSON_PUSH = r'''
set -e
cd "$1"
echo two >> f
git -c user.name=P -c user.email=p@example.invalid commit -qam two
git push -q 2>&1 || echo "push failed"
git -C "$OUT/up.git" for-each-ref --format='%(refname) %(subject)' refs/heads
'''


@pytest.fixture(params=["all", "landlock"])
def layers(request):
    return request.param


def _forget_evil(stdout: str) -> None:
    """The agent's bare repository outlives the run in its home: removed here."""
    m = re.search(r"^HOME=(/.+)$", stdout, re.M)
    if m:
        shutil.rmtree(os.path.join(m.group(1), ".cache/x"), ignore_errors=True)


def test_locations_and_destructive_refspecs_are_refused_at_the_call(sandbox, layers, outside_dir):
    box = sandbox if layers == "all" else sandbox.without_namespaces()
    out = outside_dir
    env = [f"OUT={out}"]
    p = box.outside(["/bin/sh", "-c", SETUP, "setup", "r"], env_extra=env)
    assert p.returncode == 0, p.stderr
    cfg = os.path.join(box.workdir, "r/.git/config")
    before = open(cfg).read()
    assert out in before                    # the person's own remote is a local path
    mark = os.path.join(out, "pwned")
    p = box.run(["/bin/bash", "-c", INSIDE], "--env", f"MARK={mark}", timeout=120)
    try:
        _check_refused_then_push(box, p, cfg, before, out, mark)
    finally:
        _forget_evil(p.stdout)


def _check_refused_then_push(box, p, cfg: str, before: str, out: str, mark: str) -> None:
    env = [f"OUT={out}"]
    said = [ln for ln in p.stderr.splitlines() if ln.startswith("confine: ")]
    for name, _, key in ATTACKS:
        assert f"{name} rc=0" not in p.stdout and f"{name} rc=" in p.stdout, (name, p.stdout,
                                                                             p.stderr)
        assert [ln for ln in said if f"key(s) {key} not allowed" in ln], (name, p.stderr)
    # the controls inside: a network URL may be set (and taken away again)
    assert "ssh rc=0" in p.stdout and "https rc=0" in p.stdout and "unset rc=0" in p.stdout, \
        (p.stdout, p.stderr)
    assert [ln for ln in said if "local path" in ln and "pushurl" in ln], p.stderr
    assert [ln for ln in said if "deletes upstream" in ln], p.stderr
    assert open(cfg).read() == before, open(cfg).read()
    assert "PROTECTED PATHS WERE CHANGED" not in p.stderr, p.stderr
    # what the person does next: a plain push, outside, as the person
    q = box.outside(["/bin/sh", "-c", PERSON_PUSH, "push", "r"], env_extra=env)
    assert q.returncode == 0 and "push failed" not in q.stdout, (q.stdout, q.stderr)
    # it went to the real upstream (main is the person's new commit) and deleted nothing
    assert q.stdout.splitlines() == ["refs/heads/main two", "refs/heads/release one"], q.stdout
    assert not os.path.exists(mark)


CONTROL = 'export HOME="$OUT/home"\n' + EVIL + r'''
set -e
cd "$1"
git config --add remote.origin.push :refs/heads/release
git config --add remote.origin.push main
git push -q 2>&1
git -C "$OUT/up.git" for-each-ref --format='%(refname)' refs/heads
git config remote.origin.pushurl "$HOME/.cache/x/evil.git"
git push -q 2>/dev/null || true
'''


def test_control_outside_the_same_config_runs_the_hook_and_deletes(sandbox, outside_dir):
    """The attack is real: without confine, the same `git config` makes the
    person's next plain push delete upstream's release and run the hook."""
    box, out = sandbox, outside_dir
    env = [f"OUT={out}"]
    p = box.outside(["/bin/sh", "-c", SETUP, "setup", "r"], env_extra=env)
    assert p.returncode == 0, p.stderr
    mark = os.path.join(out, "pwned")
    q = box.outside(["/bin/sh", "-c", CONTROL, "control", "r"], env_extra=[*env, f"MARK={mark}"])
    assert q.returncode == 0, (q.stdout, q.stderr)
    assert q.stdout.split() == ["refs/heads/main"], q.stdout     # release deleted
    assert os.path.exists(mark)                                    # the agent's hook ran


AT_EXIT = r'''
set -u
echo HOME=$HOME
cd r
# a network URL, but to this machine and into the agent's home: accepted at the call
git config remote.origin.pushurl "ssh://localhost$HOME/.cache/x/evil.git"; echo "ssh rc=$?"
cd ..
# a repository made during the run may use a local remote while it runs
git init -q -b main new && git -C new remote add origin "$HOME/.cache/x/evil.git"
echo "new rc=$?"
git init -q -b main ok && git -C ok remote add origin ../r; echo "ok rc=$?"
'''


def test_at_exit_a_location_into_the_agents_reach_is_an_alert(sandbox, outside_dir):
    box, out = sandbox, outside_dir
    p = box.outside(["/bin/sh", "-c", SETUP, "setup", "r"], env_extra=[f"OUT={out}"])
    assert p.returncode == 0, p.stderr
    cfg = os.path.join(box.workdir, "r/.git/config")
    before = open(cfg).read()
    p = box.run(["/bin/bash", "-c", AT_EXIT], timeout=120)
    _forget_evil(p.stdout)
    assert "ssh rc=0" in p.stdout and "new rc=0" in p.stdout and "ok rc=0" in p.stdout, \
        (p.stdout, p.stderr)
    assert p.returncode == 123, (p.returncode, p.stderr)
    assert "PROTECTED PATHS WERE CHANGED" in p.stderr, p.stderr
    assert "git location into a path the agent could write" in p.stderr, p.stderr
    assert open(cfg).read() == before, open(cfg).read()
    new = open(os.path.join(box.workdir, "new/.git/config")).read()
    assert "evil.git" not in new and "url" not in new, new
    assert [ln for ln in p.stderr.splitlines() if "new/.git/config" in ln
            and "remote.origin.url" in ln], p.stderr
    # the control: a new repository's remote in the workdir is removed without an alert
    ok = open(os.path.join(box.workdir, "ok/.git/config")).read()
    assert "url" not in ok, ok
    assert not [ln for ln in p.stderr.splitlines() if "ok/.git/config" in ln], p.stderr
