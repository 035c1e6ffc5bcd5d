"""Every directory write grant is protected like the workdir (protect/roots.py).

A bare mirror granted with `--write`: whatever the agent tries (write, cp, mv of a
prepared file, mkdir of a missing hooks/), no hook of its is live after the run,
and the person's next `git push` to the mirror runs nothing of the agent's. The
control: the same hook planted outside confine does run on that push. An existing
hook in the grant stays unchanged (a read-only bind). A sibling checkout granted by
a profile's `filesystem.write:`: a new `.envrc` there is held and listed, never in
the checkout. Ordinary files in the grants are written fine (positive controls).
As root with --user and unprivileged (the `sandbox` fixture).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest
from conftest import make_workdir
from test_held import GIT_ENV, _git, run_id

HOOK = "#!/bin/sh\ntouch {mark}\n"
# Each attempt prints its name and its exit status; the hook it plants would
# touch a marker file when the person pushes.
ATTEMPTS = r"""
cd "$1"; hook="$2"
printf "$hook" > prep.sh; chmod +x prep.sh
( printf "$hook" > hooks/pre-receive && chmod +x hooks/pre-receive ); echo "echo $?"
cp prep.sh hooks/post-receive; echo "cp $?"
mv prep.sh hooks/update; echo "mv $?"
echo ordinary > notes.txt; echo "ordinary $?"
"""
LIVE = ("pre-receive", "post-receive", "update")


def _chown(sb, path: str) -> None:
    subprocess.run(["chown", "-R", f"{sb.agent.pw_uid}:{sb.agent.pw_gid}", path], check=True)


def _mirror(sb, outside: str, hooks: bool = True) -> tuple[str, str]:
    """(bare mirror, a clone of it with one commit to push), owned by the agent."""
    mirror = os.path.join(outside, "mirror.git")
    _git("init", "-q", "--bare", "-b", "main", mirror)
    if not hooks:
        subprocess.run(["rm", "-rf", os.path.join(mirror, "hooks")], check=True)
    src = os.path.join(outside, "src")
    _git("init", "-q", "-b", "main", src)
    with open(os.path.join(src, "a.txt"), "w") as f:
        f.write("a\n")
    _git("add", "-A", cwd=src)
    _git("commit", "-qm", "one", cwd=src)
    _git("remote", "add", "origin", mirror, cwd=src)
    _chown(sb, outside)
    return mirror, src


def _push(sb, src: str, n: int) -> subprocess.CompletedProcess:
    """The person's next push, outside confine, as the agent's identity."""
    with open(os.path.join(src, "a.txt"), "a") as f:
        f.write(f"{n}\n")
    _chown(sb, src)
    env = [f"{k}={v}" for k, v in GIT_ENV.items() if k != "PATH"]
    return subprocess.run(sb.outside_cmd(
        ["sh", "-c", f"cd {src} && git commit -qam {n} && git push -q origin main"],
        env_extra=env), capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("layers", ["all", "landlock"])
def test_bare_mirror_grant_plants_no_live_hook(sandbox, outside_dir, layers):
    """layers "landlock": no mount namespace, so no read-only binds: the name guard
    alone refuses the hooks at the call."""
    if layers == "landlock":
        sandbox = sandbox.without_namespaces()
    mirror, src = _mirror(sandbox, outside_dir)
    mark = os.path.join(outside_dir, "HOOK-RAN")
    p = sandbox.run(["sh", "-c", ATTEMPTS, "sh", mirror, HOOK.format(mark=mark)],
                    "--write", mirror)
    got = dict(ln.split() for ln in p.stdout.splitlines() if len(ln.split()) == 2)
    assert got.get("ordinary") == "0", p.stdout + p.stderr        # positive control
    assert all(got.get(k) not in (None, "0") for k in ("echo", "cp", "mv")), p.stdout + p.stderr
    with open(os.path.join(mirror, "notes.txt")) as f:
        assert f.read() == "ordinary\n"
    for name in LIVE:
        assert not os.path.exists(os.path.join(mirror, "hooks", name)), name
    assert _push(sandbox, src, 1).returncode == 0
    assert not os.path.exists(mark), "a hook of the agent ran on the person's push"
    # control: the same hook planted outside confine runs on the same push
    with open(os.path.join(mirror, "hooks", "pre-receive"), "w") as f:
        f.write(HOOK.format(mark=mark))
    os.chmod(os.path.join(mirror, "hooks", "pre-receive"), 0o755)
    _chown(sandbox, mirror)
    assert _push(sandbox, src, 2).returncode == 0
    assert os.path.exists(mark), "control: the planted hook did not run"


def test_bare_mirror_without_hooks_dir(sandbox, outside_dir):
    """hooks/ missing at start: made inside, it is never live after the run."""
    mirror, src = _mirror(sandbox, outside_dir, hooks=False)
    mark = os.path.join(outside_dir, "HOOK-RAN")
    script = ('cd "$1"; mkdir hooks; echo "mkdir $?"; printf "$2" > hooks/pre-receive; '
              'echo "hook $?"; echo ordinary > notes.txt; echo "ordinary $?"')
    p = sandbox.run(["sh", "-c", script, "sh", mirror, HOOK.format(mark=mark)],
                    "--write", mirror)
    got = dict(ln.split() for ln in p.stdout.splitlines() if len(ln.split()) == 2)
    assert got.get("ordinary") == "0", p.stdout + p.stderr        # positive control
    # refused at the call: the root is a git directory (a bare repository)
    assert got.get("mkdir") not in (None, "0") and got.get("hook") not in (None, "0"), \
        p.stdout + p.stderr
    assert f"denied: mkdir {mirror}/hooks" in p.stderr, p.stderr
    assert not os.path.exists(os.path.join(mirror, "hooks")), p.stderr
    assert _push(sandbox, src, 1).returncode == 0
    assert not os.path.exists(mark), "a hook of the agent ran on the person's push"


def test_existing_hook_in_grant_is_read_only(sandbox, outside_dir):
    mirror, _ = _mirror(sandbox, outside_dir)
    hook = os.path.join(mirror, "hooks", "post-update")
    with open(hook, "w") as f:
        f.write("#!/bin/sh\nexit 0\n")
    os.chmod(hook, 0o755)
    _chown(sandbox, mirror)
    p = sandbox.run(["sh", "-c", 'echo evil >> "$1"; echo "hook $?"; echo x >> "$2"; '
                     'echo "other $?"', "sh", hook, os.path.join(mirror, "description")],
                    "--write", mirror)
    assert "other 0" in p.stdout, p.stdout + p.stderr                # positive control
    # refused by the read-only bind (EROFS) or, first, by the guard (a file protected
    # at start, known by inode): either way not written
    assert "hook 0" not in p.stdout and ("Read-only file system" in p.stderr
                                         or "denied: write " + hook in p.stderr), p.stderr
    with open(hook) as f:
        assert f.read() == "#!/bin/sh\nexit 0\n"
    # control: outside, the same append works
    assert sandbox.outside(["sh", "-c", f"echo ok >> {hook}"]).returncode == 0


@pytest.fixture
def sibling_top(test_user):
    """Named like a test workdir: the held state's "workdir" is the sibling in it, and
    the suites' cleanup (conftest._no_held_leftovers) tells whose it is by that name."""
    top = make_workdir(test_user)
    yield top
    shutil.rmtree(top, ignore_errors=True)


def test_profile_write_sibling_envrc_is_held(sandbox, sibling_top):
    sib = os.path.join(sibling_top, "sibling")
    _git("init", "-q", "-b", "main", sib)
    _chown(sandbox, sib)
    prof = sandbox.workdir + "-roots.yaml"
    with open(prof, "w") as f:
        f.write(f"extends: default\nfilesystem:\n  write:\n    - {sib}\n")
    os.chmod(prof, 0o644)
    try:
        p = sandbox.run(["sh", "-c", 'echo "export X=1" > "$1/.envrc"; echo "envrc $?"; '
                         'echo ok > "$1/a.txt"; echo "plain $?"; '
                         'echo x > "$1/.git/hooks/post-checkout"; echo "hook $?"', "sh", sib],
                        "-p", prof)
        dry = sandbox.confine("exec", "-w", sandbox.workdir, "-p", prof, "--dry-run", "--json",
                              "--", "true")
    finally:
        os.unlink(prof)
    assert "plain 0" in p.stdout and os.path.exists(os.path.join(sib, "a.txt")), p.stderr
    assert "envrc 0" in p.stdout, p.stdout + p.stderr   # held: the agent's write succeeds ...
    assert not os.path.exists(os.path.join(sib, ".envrc")), p.stderr    # ... elsewhere
    assert f"held {sib}/.envrc" in p.stderr, p.stderr
    assert "hook 0" not in p.stdout
    assert not os.path.exists(os.path.join(sib, ".git", "hooks", "post-checkout"))
    # held names are noted, not acted on: the agent's status stays (current rules)
    assert p.returncode == 0, p.stderr
    # listed under the grant's own run id, with the grant named; apply puts it there
    assert f"NOT put in {sib}:" in p.stderr, p.stderr
    rid = run_id(p.stderr)
    assert rid.endswith(".root1"), rid
    try:
        runs = {r["run"]: r for r in json.loads(sandbox.confine("held", "list", "--json").stdout)}
        assert runs[rid]["workdir"] == sib and [h["path"] for h in runs[rid]["held"]] == \
            [".envrc"], runs[rid]
        assert sandbox.confine("held", "show", rid).returncode == 0
        a = sandbox.confine("held", "apply", rid)
        assert a.returncode == 0, a.stderr
        with open(os.path.join(sib, ".envrc")) as f:
            assert f.read() == "export X=1\n"
        os.unlink(os.path.join(sib, ".envrc"))
    finally:
        sandbox.confine("held", "discard", rid)
    # control: outside confine, the same .envrc is written in place
    assert sandbox.outside(["sh", "-c", f'echo x > "{sib}/.envrc"']).returncode == 0
    assert os.path.exists(os.path.join(sib, ".envrc"))
    assert dry.returncode == 0, dry.stderr
    roots = json.loads(dry.stdout)["protected_paths"]["roots"]
    assert [r["path"] for r in roots] == [os.path.realpath(sandbox.workdir), sib], roots
    assert ".git/hooks" in {e["path"] for e in roots[1]["protected"]}, roots[1]


def test_exit_check_restores_a_grants_hook(sandbox, outside_dir):
    """No mount namespace: deleting is not mediated, so removing an existing hook in
    the grant succeeds while the agent runs; the exit check of the grant puts it
    back, names it in full and the status says it acted. Control: an ordinary file
    removed beside it stays removed."""
    sandbox = sandbox.without_namespaces()
    mirror, _ = _mirror(sandbox, outside_dir)
    hook = os.path.join(mirror, "hooks", "post-update")
    with open(hook, "w") as f:
        f.write("#!/bin/sh\nexit 0\n")
    os.chmod(hook, 0o755)
    _chown(sandbox, mirror)
    p = sandbox.run(["sh", "-c", 'rm -f "$1" "$2"', "sh", hook,
                     os.path.join(mirror, "description")], "--write", mirror)
    assert not os.path.exists(os.path.join(mirror, "description"))     # control
    with open(hook) as f:
        assert f.read() == "#!/bin/sh\nexit 0\n"
    assert hook in p.stderr and p.returncode == 123, (p.returncode, p.stderr)
