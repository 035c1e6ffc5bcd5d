"""An exclusive workdir (issue 26 item 1, policy/workdir_mode.py): file calls in the
workdir run unmediated, and the exit check does what the name guard did at the call.

A clone of a repository carrying `.envrc` and `.vscode/`, with a hook planted in
its git directory, ends with the protected files held (listed, restorable with
`confine held apply`, git's index consistent: clean before, clean after), the hook
quarantined, exit 123, and nothing run: a checkout by the person's git afterwards
does not create the hook's sentinel. Controls: the same run in the default mode
ends the same way (there the names never exist inside; in exclusive mode they do,
which is what the mode gives up); the same hook outside the sandbox does run. The
rest of the sandbox stays: a write outside the workdir and to a protected path
that existed at start (its read-only bind) are refused, each with its control, the
network still goes through the egress gateway, and without a mount namespace the
mode is refused by name.
"""
from __future__ import annotations

import os
import shutil

import pytest
from conftest import Sandbox, make_workdir, write_owned
from test_egress import ALLOW, ATTEMPTS, inside, last_json, net, py  # noqa: F401 - net: fixture
from test_held import (  # noqa: F401 - cleanup: fixture
    NOTED,
    ORDINARY,
    PROTECTED,
    ROOTS,
    cleanup,
    held_json,
    make_bare,
    present,
    run_id,
)

EXCLUSIVE = "--exclusive-workdir"
HOOK = "c/.git/hooks/post-checkout"

CLONE_BODY = r'''
import subprocess
def sh(*a):
    r = subprocess.run(list(a), capture_output=True, text=True)
    return [r.returncode, r.stdout, r.stderr]
R["clone"] = sh("git", "clone", "-q", "up.git", "c")
R["inside"] = {p: os.path.lexists("c/" + p) for p in P["all"]}
def plant():
    with open(P["hook"], "w") as f:
        f.write("#!/bin/sh\ntouch " + P["sentinel"] + "\n")
    os.chmod(P["hook"], 0o755)
attempt("hook", plant)
'''


def _checkout(sb, repo: str):
    """The person's git, outside: a checkout in `repo` (runs post-checkout if any)."""
    return sb.outside(["git", "-C", repo, "-c", "safe.directory=*", "checkout", "-q", "-b",
                       "person"])


@pytest.mark.parametrize("mode", ["exclusive", "default"])
def test_clone_ends_held_reported_restorable_and_nothing_run(sandbox, cleanup, mode):  # noqa: F811
    make_bare(sandbox)
    wd = sandbox.workdir
    sentinel = os.path.join(wd, "SENTINEL")
    # control: outside, the planted hook runs on the person's next checkout
    ctl = sandbox.outside(["git", "clone", "-q", "up.git", "ctl"])
    assert ctl.returncode == 0, ctl.stderr
    assert all(present(os.path.join(wd, "ctl"), PROTECTED).values())
    write_owned(os.path.join(wd, "ctl/.git/hooks/post-checkout"),
                f"#!/bin/sh\ntouch {sentinel}\n", sandbox.agent, 0o755)
    assert _checkout(sandbox, "ctl").returncode == 0
    assert os.path.exists(sentinel)
    os.unlink(sentinel)
    shutil.rmtree(os.path.join(wd, "ctl"))

    opts = [EXCLUSIVE] if mode == "exclusive" else []
    p, r = sandbox.probe(CLONE_BODY, {"all": list(PROTECTED) + list(ORDINARY), "hook": HOOK,
                                      "sentinel": sentinel}, *opts)
    assert r is not None, p.stderr
    rid = run_id(p.stderr)
    cleanup.append((sandbox, rid))
    assert p.returncode == NOTED, p.stderr
    assert r["clone"][0] == 0, r["clone"]
    # exclusive: planted, moved away at exit; default: refused at the call
    assert r["hook"] == ("ok" if mode == "exclusive" else "EACCES"), r
    # exclusive: unmediated, the names exist inside while the agent runs (what the
    # mode gives up); default: the broker held them at the call
    assert r["inside"] == {**{k: mode == "exclusive" for k in PROTECTED},
                           **{k: True for k in ORDINARY}}, r["inside"]
    c = os.path.join(wd, "c")
    assert present(c, PROTECTED) == {k: False for k in PROTECTED}
    assert all(present(c, ORDINARY).values())
    for root in ROOTS:
        assert f"confine:   held c/{root} (" in p.stderr, p.stderr
    assert not os.path.lexists(os.path.join(wd, HOOK)), p.stderr
    if mode == "exclusive":
        assert f"{HOOK}" in p.stderr and "quarantined" in p.stderr, p.stderr
    runs = [x for x in held_json(sandbox) if x["run"] == rid]
    assert len(runs) == 1 and sorted(h["path"] for h in runs[0]["held"]) == \
        sorted("c/" + x for x in ROOTS)
    # git's index: the held entries are skip-worktree, so the person's git is clean
    st = sandbox.outside(["git", "-C", "c", "status", "--porcelain"])
    assert (st.returncode, st.stdout) == (0, ""), (st.stdout, st.stderr)
    ls = sandbox.outside(["git", "-C", "c", "ls-files", "-v", ".envrc", "a.txt"])
    assert ls.stdout.splitlines() == ["S .envrc", "H a.txt"], ls.stdout
    # nothing run: the person's checkout finds no hook
    assert _checkout(sandbox, "c").returncode == 0
    assert not os.path.exists(sentinel)
    # restorable: shown, then applied, and git sees the tracked files again
    assert sandbox.confine("held", "show", rid).returncode == 0
    a = sandbox.confine("held", "apply", rid)
    assert a.returncode == 0, a.stderr
    for rel, text in PROTECTED.items():
        with open(os.path.join(c, rel)) as f:
            assert f.read() == text
    st = sandbox.outside(["git", "-C", "c", "status", "--porcelain"])
    assert (st.returncode, st.stdout) == (0, ""), (st.stdout, st.stderr)
    ls = sandbox.outside(["git", "-C", "c", "ls-files", "-v"])
    assert all(line.startswith("H ") for line in ls.stdout.splitlines()), ls.stdout


BOUNDS_BODY = r'''
attempt("outside", lambda: opened(P["outside"], os.O_WRONLY | os.O_CREAT))
attempt("existing_envrc", lambda: opened(".envrc", os.O_WRONLY | os.O_APPEND))
attempt("ordinary", lambda: opened("plain.txt", os.O_WRONLY | os.O_CREAT))
'''


def test_writes_outside_and_to_protected_paths_at_start_stay_refused(sandbox, outside_dir):
    """(The default mode's refusals of the same: tests/e2e/test_refusals.py, test_held.py.)"""
    write_owned(os.path.join(sandbox.workdir, ".envrc"), "export A=1\n", sandbox.agent)
    params = {"outside": os.path.join(outside_dir, "planted")}
    # control: the same identity, unconfined, writes all three
    c, rc = sandbox.outside_probe(BOUNDS_BODY, params)
    assert rc == {"outside": "ok", "existing_envrc": "ok", "ordinary": "ok"}, c.stderr
    os.unlink(params["outside"])
    p, r = sandbox.probe(BOUNDS_BODY, params, EXCLUSIVE)
    assert r is not None, p.stderr
    assert r["outside"] in ("EACCES", "EROFS"), r   # Landlock, the read-only host view
    assert r["existing_envrc"] == "EROFS", r        # its read-only bind, kept
    assert r["ordinary"] == "ok", r
    assert not os.path.exists(params["outside"])
    assert p.returncode == 0, p.stderr


def test_without_a_mount_namespace_exclusive_mode_is_refused_by_name(user_sandbox):
    sb = user_sandbox.without_namespaces()
    p = sb.run(["true"], EXCLUSIVE)
    assert p.returncode == 125, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "exclusive workdir" in lines[0] \
        and "mount namespace" in lines[0], p.stderr
    # control: the same run in the default mode goes (degraded, as accepted)
    ok = sb.run(["true"])
    assert ok.returncode == 0, ok.stderr


def test_a_profile_key_selects_the_mode_and_a_bad_value_names_line_and_key(user_sandbox):
    sb = user_sandbox
    prof = os.path.join(sb.workdir, "..", os.path.basename(sb.workdir) + "-p.yaml")
    try:
        write_owned(prof, "extends: default\nworkdir_mode: exclusive\n", sb.pw)
        d = sb.confine("exec", "-w", sb.workdir, "-p", prof, "--dry-run")
        assert d.returncode == 0, d.stderr
        assert "no undo in exclusive mode" in d.stdout and "runs them unchecked" in d.stdout
        # (the default mode says none of it: tests/unit/test_workdir_mode.py)
        write_owned(prof, "extends: default\nworkdir_mode: yes\n", sb.pw)
        bad = sb.confine("exec", "-w", sb.workdir, "-p", prof, "--", "true")
        assert bad.returncode == 125, bad.stderr
        assert f"{os.path.realpath(prof)}:2: workdir_mode:" in bad.stderr \
            or f"{prof}:2: workdir_mode:" in bad.stderr, bad.stderr
    finally:
        os.unlink(prof)


@pytest.mark.skipif(shutil.which("ip") is None or shutil.which("openssl") is None,
                    reason="needs iproute2 (ip netns) and openssl")
@pytest.mark.parametrize("mode", ["root", "user"])
def test_network_still_goes_through_the_gateway(mode, net, test_user, confine_bin):  # noqa: F811
    sb = Sandbox(mode, test_user, make_workdir(test_user))
    try:
        m = net.mark()
        p = inside(sb, net, py(ATTEMPTS + r'''
run("direct_tls", lambda: tls("allowed.test"))
run("direct_ip", lambda: plain("1.1.1.1", 8443))
print(json.dumps(R))
'''), *ALLOW, EXCLUSIVE)
        r = last_json(p.stdout)
        assert r["direct_tls"] == "hello from allowed.test sni=allowed.test", p.stderr
        assert r["direct_ip"] == "ECONNREFUSED", (r, p.stderr)
        got = net.since(m)
        # the origin saw the gateway only; the refused address saw nothing
        assert {e["peer"] for e in got if e["ev"] == "accept"} == {"10.200.0.1"}, got
        assert not [e for e in got if e["ev"] == "accept" and e["dst"] == "1.1.1.1:8443"]
    finally:
        shutil.rmtree(sb.workdir, ignore_errors=True)
