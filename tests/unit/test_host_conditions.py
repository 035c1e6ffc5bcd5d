"""The planner and `confine check` under the host conditions of issue 12, without a
kernel: the pid namespace's guarantees (never missing, replaced where there is no
namespace), an inherited seccomp listener (confine inside confine), tmp_size where
root cannot mount, and each protection's status in `confine check`."""
from __future__ import annotations

import dataclasses

import pytest

from confine.plan import HostFacts, compile, mechanisms, missing_features
from confine.plan.identity import Identity
from confine.policy import load as _load
from confine.probe.check import protections

FULL = HostFacts(landlock_abi=7, seccomp_filter=True, seccomp_user_notif=True, namespaces=True,
                 net_namespace=True)
NO_NS = dataclasses.replace(FULL, namespaces=False, net_namespace=False)


@pytest.fixture
def policy(tmp_path):
    wd, home, tmp = (tmp_path / n for n in ("wd", "home", "tmp"))
    for d in (wd, home, tmp):
        d.mkdir()
    return _load.load("default", workdir=str(wd), home=str(home), tmp=str(tmp))


def _plan(policy, host, root=False):
    ident = Identity(uid=1234, gid=1234, user="agent", home=policy.workdir, switch=root,
                     started_as_root=root)
    return compile(policy, ["true"], ident, host, parent_env={"PATH": "/usr/bin"})


def test_pid_guarantees_by_the_namespace_where_there_is_one(policy):
    mech = mechanisms(policy, FULL)
    assert mech["pid_namespace.lifetime"].startswith("pid namespace")
    assert mech["pid_namespace.visibility"].startswith("pid namespace")
    assert not any("no pid namespace" in n for n in _plan(policy, FULL).notes)


@pytest.mark.parametrize("cgroup", [None, "/sys/fs/cgroup/x"])
def test_pid_guarantees_replaced_without_namespaces(policy, cgroup):
    host = dataclasses.replace(NO_NS, cgroup=cgroup)
    mech = mechanisms(policy, host)
    assert "subreaper" in mech["pid_namespace.lifetime"]
    assert mech["pid_namespace.lifetime"].startswith("cgroup.kill") is (cgroup is not None)
    assert mech["pid_namespace.visibility"].startswith("PARTIAL")
    missing = {m.feature for m in missing_features(policy, host)}
    assert not missing & {"pid_namespace.lifetime", "pid_namespace.visibility"}
    assert any("no pid namespace" in n for n in _plan(policy, host).notes)


def test_inherited_listener_names_what_it_lacks(policy):
    host = dataclasses.replace(NO_NS, seccomp_user_notif=False, seccomp_listener_busy=True)
    missing = {m.feature: m.detail for m in missing_features(policy, host)}
    assert "already has a listener" in missing["seccomp_notify"]
    assert "outside this run's Landlock domain" in missing["outer_mediator"]
    # control: a kernel without user notification says so, and no outer mediator
    plain = {m.feature: m.detail for m in missing_features(
        policy, dataclasses.replace(NO_NS, seccomp_user_notif=False))}
    assert "not available on this kernel" in plain["seccomp_notify"]
    assert "outer_mediator" not in plain


def test_tmp_size_only_where_root_can_mount(policy):
    if policy.limits.tmp_size is None:
        pytest.skip("the default profile sets no tmp_size")
    assert _plan(policy, FULL, root=True).limits["tmp_size"].startswith("size of a tmpfs")
    no_mount = _plan(policy, dataclasses.replace(NO_NS, root_mounts=False), root=True)
    assert no_mount.limits["tmp_size"].startswith("NOT enforced: mounts are refused")


@pytest.mark.parametrize("host, expect", [
    (FULL, {"landlock.ioctl_dev": "primary", "pid_namespace.lifetime": "primary",
            "pid_namespace.visibility": "primary", "mount_namespace": "primary"}),
    (dataclasses.replace(FULL, landlock_abi=5),
     {"landlock.scope_signal": "replacement", "landlock.scope_abstract_unix": "replacement"}),
    (dataclasses.replace(FULL, landlock_abi=4), {"landlock.ioctl_dev": "replacement"}),
    (dataclasses.replace(NO_NS, landlock_abi=4),
     {"landlock.ioctl_dev": "replacement", "landlock.scope_signal": "replacement",
      "mount_namespace": "replacement",
      "mount_namespace.read_only_host": "replacement", "mount_namespace.private_shm": "replacement",
      "pid_namespace.lifetime": "replacement", "pid_namespace.visibility": "partial",
      "apparmor": "not needed"}),
])
def test_check_status_of_each_protection(policy, host, expect):
    mech = mechanisms(policy, host)
    got = {p["protection"]: p["status"] for p in
           protections(mech, missing_features(policy, host), host)}
    for name, status in expect.items():
        assert got[name] == status, (name, got)
    refused = {n for n, s in got.items() if s == "refused"}
    assert refused == {m.feature for m in missing_features(policy, host)}
