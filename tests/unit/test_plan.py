"""The planner, without root and without a kernel: HostFacts describe the host.

Each case states a host and checks what the plan refuses (missing) and which
child steps it lists; the end-to-end test that the child runs exactly these
steps is tests/e2e/test_steps.py.
"""
from __future__ import annotations

import dataclasses
import os

import pytest

from confine.plan import HostFacts, Lsm, Protected, compile, features
from confine.plan.identity import Identity
from confine.policy import load as _load
from confine.runtime.child import RUNNERS

FULL = HostFacts(landlock_abi=7, seccomp_filter=True, seccomp_user_notif=True, namespaces=True,
                 apparmor=True, selinux=False)


@pytest.fixture
def dirs(tmp_path):
    wd, home, tmp = (tmp_path / n for n in ("wd", "home", "tmp"))
    for d in (wd, home, tmp):
        d.mkdir()
    return str(wd), str(home), str(tmp)


def _ident(home: str, root: bool = False) -> Identity:
    return Identity(uid=1234, gid=1234, user="agent", home=home, switch=root,
                    started_as_root=root)


def _plan(dirs, host=FULL, profile="default", root=False, **kw):
    wd, home, tmp = dirs
    pol = _load.load(profile, workdir=wd, home=home, tmp=tmp)
    return compile(pol, ["true"], _ident(home, root), host, parent_env={"PATH": "/usr/bin"},
                   **kw)


def test_full_host_misses_nothing(dirs):
    plan = _plan(dirs)
    assert plan.missing == ()
    assert plan.step_names()[0] == "pdeathsig" and plan.step_names()[-1] == "exec"


@pytest.mark.parametrize("abi,expect", [
    (0, {"landlock"}),
    (2, set()),
    (4, set()),
    (5, set()),
    (6, set()),
])
def test_missing_follows_the_feature_table(dirs, abi, expect):
    # without namespaces seccomp and the broker replace the Landlock rights below
    # ABI 6 (features.NO_NS_REPLACEMENTS); the mount namespace's parts are replaced
    # (broker mediation, Landlock) where Landlock is
    plan = _plan(dirs, dataclasses.replace(FULL, landlock_abi=abi, namespaces=False))
    # the pid namespace's guarantees are replaced or a named difference: never refused
    if abi == 0:
        expect = expect | set(features.MOUNT_PARTS)
    got = {m.feature for m in plan.missing}
    assert got == expect
    for name in got - set(features.MOUNT_PARTS):
        assert features.get(name).min_abi > abi
    assert ("landlock" in plan.step_names()) == (abi > 0)


def test_no_namespaces_removes_their_steps_and_is_missing(dirs):
    plan = _plan(dirs, dataclasses.replace(FULL, namespaces=False))
    assert not {m.feature for m in plan.missing} & set(features.MOUNT_PARTS)
    assert plan.meta_mediation and not plan.mount_ns
    for part in features.MOUNT_PARTS:
        assert "replaces the mount namespace" in plan.mechanisms[part], part
    # the broker is the replacement: without user notification nothing is
    bare = _plan(dirs, dataclasses.replace(FULL, namespaces=False, seccomp_user_notif=False))
    assert {m.feature for m in bare.missing} >= {"mount_namespace.read_only_host",
                                                   "mount_namespace.protected_paths"}
    assert not bare.meta_mediation
    names = plan.step_names()
    for step in ("mount_namespace", "readonly_host", "private_dev", "pid_namespace",
                 "fork_agent"):
        assert step not in names


def test_no_user_notification_no_broker(dirs):
    plan = _plan(dirs, dataclasses.replace(FULL, seccomp_user_notif=False))
    assert "seccomp_notify" in {m.feature for m in plan.missing}
    assert "broker" not in plan.step_names() and "seccomp_notify" not in plan.step_names()


def test_lsm_requested_but_not_enabled_is_missing(dirs):
    plan = _plan(dirs, dataclasses.replace(FULL, apparmor=False),
                 lsm=Lsm(apparmor="confine-default", selinux="u:r:t:s0"))
    assert {"apparmor", "selinux"} <= {m.feature for m in plan.missing}
    assert "apparmor" not in plan.step_names() and "selinux" not in plan.step_names()
    plan = _plan(dirs, lsm=Lsm(apparmor="confine-default"))
    assert "apparmor" in plan.step_names()
    names = plan.step_names()
    # LSM requests after the identity switch, before no_new_privs and Landlock
    assert names.index("capabilities") < names.index("apparmor") < names.index("no_new_privs")


def test_order_invariants(dirs):
    names = _plan(dirs, root=True,
                  protected=Protected(mount_plan=None, description={}, guard=True)).step_names()
    assert names.index("mount_namespace") < names.index("identity")
    assert names.index("protected_binds") < names.index("identity")
    assert names.index("no_new_privs") < names.index("landlock") < names.index("broker")
    assert names.index("broker") < names.index("seccomp") < names.index("seccomp_notify")
    assert names.index("seccomp_notify") < names.index("fork_agent") < names.index("exec")


def test_every_step_has_a_runner(dirs):
    for host in (FULL, dataclasses.replace(FULL, namespaces=False, landlock_abi=0)):
        plan = _plan(dirs, host, root=True, lsm=Lsm(apparmor="x"),
                     protected=Protected(mount_plan=None, description={}, guard=True))
        for name in plan.step_names():
            assert name in RUNNERS


def test_environment_comes_only_from_parent_env_argument(dirs, monkeypatch):
    monkeypatch.setenv("CONFINE_UNIT_CANARY", "leak")
    plan = _plan(dirs)
    assert "CONFINE_UNIT_CANARY" not in plan.env
    assert plan.env["PATH"] == "/usr/bin"


def test_plan_is_frozen(dirs):
    plan = _plan(dirs)
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.abi = 0  # type: ignore[misc]


def test_file_mediation_needs_a_guard(dirs):
    assert not _plan(dirs).file_mediation
    p = _plan(dirs, protected=Protected(mount_plan=None, description={}, guard=True))
    assert p.file_mediation
    step = next(s for s in p.steps if s.name == "seccomp_notify")
    assert "renameat2" in step.params["calls"]


def test_dry_run_dict_lists_the_same_steps(dirs):
    plan = _plan(dirs)
    assert [s["name"] for s in plan.to_dict()["steps"]] == plan.step_names()
    assert os.path.isdir(plan.policy.workdir)


def test_drop_covered_matches_the_quadratic_definition():
    """The ancestor walk keeps exactly the rules the pairwise definition keeps."""
    import random

    from landlockpy import AccessFS

    from confine.paths import is_under
    from confine.plan.compile import _drop_covered

    def reference(rules):
        return [(p, r, w) for i, (p, r, w) in enumerate(rules)
                if not any(j != i and is_under(p, q) and (r & ~r2) == 0 and (p != q or j < i)
                           for j, (q, r2, _) in enumerate(rules))]

    rng = random.Random(7)
    names = ["/", "/a", "/a/b", "/a/b/c", "/ab", "/a/bc", "/x", "/x/y"]
    bits = [AccessFS.READ_FILE, AccessFS.READ_DIR, AccessFS.WRITE_FILE, AccessFS.EXECUTE]
    for _ in range(300):
        rules = []
        for k in range(rng.randint(1, 9)):
            r = AccessFS(0)
            for b in rng.sample(bits, rng.randint(1, 4)):
                r |= b
            rules.append((rng.choice(names), r, f"w{k}"))
        assert _drop_covered(rules) == reference(rules)


def test_a_rule_path_that_vanished_before_launch_is_skipped(tmp_path):
    """A file listed by the planner (a carve-out sibling) and removed before the
    ruleset is built grants nothing; the run does not fail. Other errors still do."""
    from confine.kernel import landlock
    if landlock.kernel_abi() == 0:
        pytest.skip("no Landlock")
    keep = tmp_path / "keep"
    keep.mkdir()
    rs = landlock.build(landlock.fs_rights(1), landlock.net_rights(0), landlock.scopes(0),
                        [(str(tmp_path / "gone"), landlock.READ), (str(keep), landlock.READ)], [])
    rs.close()
    (tmp_path / "afile").write_text("x")
    with pytest.raises(OSError):      # directory rights on a file: still an error
        landlock.build(landlock.fs_rights(1), landlock.net_rights(0), landlock.scopes(0),
                       [(str(tmp_path / "afile"), landlock.WRITE & landlock.fs_rights(1))], [])


def test_replacements_where_the_primary_is_missing(dirs):
    """Below ABI 6 the pid namespace replaces signal scoping; below ABI 3 the
    read-only host view replaces TRUNCATE. Without namespaces seccomp and the
    broker do (mediated signals, broker-judged truncation)."""
    plan = _plan(dirs, dataclasses.replace(FULL, landlock_abi=5))
    assert plan.missing == ()
    assert plan.mechanisms["landlock.scope_signal"].startswith("pid namespace")
    # no network namespace on this host: abstract addresses are refused instead
    assert plan.mechanisms["landlock.scope_abstract_unix"].startswith("abstract sockets refused")
    assert plan.refuse_abstract and not plan.signal_mediation
    plan = _plan(dirs, dataclasses.replace(FULL, landlock_abi=2))
    assert "landlock.truncate" not in {m.feature for m in plan.missing}
    assert plan.mechanisms["landlock.truncate"].startswith("read-only host view")
    assert plan.mechanisms["landlock"] == "Landlock ABI 2"
    bare = _plan(dirs, dataclasses.replace(FULL, landlock_abi=2, namespaces=False))
    assert bare.missing == ()
    assert bare.mechanisms["landlock.truncate"].startswith("broker mediation")
    assert bare.mechanisms["landlock.scope_signal"].startswith("mediated signals")
    assert bare.mechanisms["landlock.ioctl_dev"].startswith("seccomp ioctl allowlist")
    assert bare.signal_mediation and bare.refuse_abstract and bare.ioctl_allowlist
    assert bare.file_mediation and bare.device_binds is None
    assert plan.device_binds is not None and not plan.ioctl_allowlist


def test_truncate_replacement_not_used_with_a_secret_under_a_write_grant(dirs, tmp_path):
    wd, home, tmp = dirs
    os.makedirs(os.path.join(home, ".cargo"))       # ~/.cargo/credentials is a secret
    prof = tmp_path / "p.yaml"
    prof.write_text("extends: default\nfilesystem:\n  write: ['~/.cargo']\n")
    pol = _load.load(str(prof), workdir=wd, home=home, tmp=tmp)
    plan = compile(pol, ["true"], _ident(home), dataclasses.replace(FULL, landlock_abi=2),
                   parent_env={})
    assert "landlock.truncate" in {m.feature for m in plan.missing}


def test_a_profile_without_tcp_gets_its_own_network_namespace(dirs):
    """No TCP port of its own loopback granted: a network namespace of its own,
    which also replaces Landlock's abstract-socket scoping below ABI 6; an agent
    profile whose hosts go through the gateway gets one too (the gateway's
    sockets are made inside it). A profile with loopback ports keeps the host's
    network (its own loopback is the host's), so no replacement there."""
    host = dataclasses.replace(FULL, net_namespace=True)
    plan = _plan(dirs, host)
    assert plan.net_ns and "net_namespace" in plan.step_names()
    names = plan.step_names()
    assert names.index("mount_namespace") < names.index("net_namespace") < names.index("capabilities")
    low = _plan(dirs, dataclasses.replace(host, landlock_abi=5))
    assert low.missing == ()
    assert low.mechanisms["landlock.scope_abstract_unix"].startswith("network namespace")
    agent = _plan(dirs, dataclasses.replace(host, landlock_abi=5), profile="claude-code")
    assert agent.net_ns and agent.egress and agent.gateway_ports and agent.missing == ()
    prof = os.path.join(dirs[1], "ports.yaml")
    with open(prof, "w") as f:
        f.write("extends: default\nnetwork:\n  connect_tcp: [8080]\n")
    net = _plan(dirs, dataclasses.replace(host, landlock_abi=5), profile=prof)
    assert not net.net_ns and "net_namespace" not in net.step_names()
    assert net.missing == () and net.refuse_abstract
    assert net.mechanisms["landlock.scope_abstract_unix"].startswith("abstract sockets refused")
    assert not _plan(dirs, dataclasses.replace(host, namespaces=False)).net_ns


def test_find_library_shortcut_serves_only_confines_own_libraries():
    """libc and libseccomp are answered without ldconfig; any other name goes to
    ctypes' own lookup, so a program embedding confine sees it unchanged."""
    import ctypes.util

    from confine.kernel import libc
    assert ctypes.util.find_library is libc.find_library
    for name in ("m", "z", "no-such-library-anywhere"):
        assert libc.find_library(name) == libc._original_find_library(name)
    assert libc.find_library("c") == "libc.so.6"


def test_find_library_answers_libseccomp_as_ldconfig_would(monkeypatch):
    """The soname shortcut and the directory glob behind it give what ctypes' own
    lookup (ldconfig -p) gives, and a libseccomp that is not there is not made up."""
    from confine.kernel import libc
    expect = libc._original_find_library("seccomp")
    monkeypatch.setattr(libc, "_found", {})
    assert libc.find_library("seccomp") == expect
    monkeypatch.setattr(libc, "_found", {})
    monkeypatch.setattr(libc, "_SONAME", {"seccomp": "libseccomp.so.no-such"})
    assert libc.find_library("seccomp") == expect            # through the glob
    monkeypatch.setattr(libc, "_found", {})
    monkeypatch.setattr(libc, "_LIB_DIRS", ())
    monkeypatch.setattr(libc, "_original_find_library", lambda name: None)
    assert libc.find_library("seccomp") is None


def test_no_mount_namespace_grants_no_shared_dev_shm_nor_pts(dirs, monkeypatch):
    """The host's /dev/shm and /dev/pts are shared with every process of the
    user: without the namespace no rule names them (but the agent's own
    terminal), no child rule re-grants them, and the plan says so."""
    import importlib
    monkeypatch.setattr(importlib.import_module("confine.plan.compile"), "own_terminals",
                        lambda: ["/dev/pts/77"])
    with_ns = _plan(dirs)
    bare = _plan(dirs, dataclasses.replace(FULL, namespaces=False))
    shared = ("/dev/shm", "/dev/pts")
    if os.path.isdir("/dev/shm") and os.path.isdir("/dev/pts"):
        assert {p for p, _, _ in with_ns.path_rules} >= set(shared)
    rules = {p for p, _, _ in bare.path_rules}
    assert not {p for p in rules if p.startswith(shared)} - {"/dev/pts/77"}, rules
    assert not bare.child_rules or all(not p.startswith(shared) for p, _ in bare.child_rules)
    assert any("/dev/shm is not granted" in n for n in bare.notes)
    assert bare.meta_mediation and not with_ns.meta_mediation
    roots, holes = bare.meta_roots()
    assert roots[:2] == [bare.policy.workdir, bare.policy.tmp]
    assert "/dev/shm" not in roots


def test_settings_and_paths_are_not_credentials():
    """The audit reports credentials, not AWS_CA_BUNDLE (issue 23 item 7); the
    environment builder stays as careful as before for every secret-looking name."""
    from confine.plan import env
    for name in ("AWS_CA_BUNDLE", "AWS_REGION", "AWS_PROFILE", "REQUESTS_CA_BUNDLE",
                 "NODE_EXTRA_CA_CERTS"):
        assert not env.holds_secret(name), name
    for name in ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ACCESS_KEY_ID",
                 "GITHUB_TOKEN", "SSH_AUTH_SOCK", "MY_CA_BUNDLE_PASSWORD"):
        assert env.holds_secret(name), name
    assert env.looks_secret("AWS_CA_BUNDLE")
