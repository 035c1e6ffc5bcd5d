"""The `limits:` profile section and how the planner enforces it (issue 10, item 12).

Bad values fail with file:line, never as "unlimited"; the default profile
sets every limit; the plan says per limit which mechanism applies (or that
it is NOT enforced, and why) and the child's `limits` step sets the rlimits
before the namespaces.
"""
from __future__ import annotations

import dataclasses

import pytest

from confine.errors import ProfileError
from confine.plan import HostFacts, compile
from confine.plan.identity import Identity
from confine.policy import load as _load

FULL = HostFacts(landlock_abi=7, seccomp_filter=True, seccomp_user_notif=True, namespaces=True)


def _write(tmp_path, body: str) -> str:
    p = tmp_path / "p.yaml"
    p.write_text("extends: default\n" + body)
    return str(p)


def _load_limits(tmp_path, body: str):
    d = tmp_path / "wd"
    d.mkdir(exist_ok=True)
    return _load.load(_write(tmp_path, body), workdir=str(d), home=str(d), tmp=str(d)).limits


def test_default_profile_sets_every_limit(tmp_path):
    lim = _load.load("default", workdir=str(tmp_path), home=str(tmp_path), tmp=str(tmp_path)).limits
    assert all(v is not None and v > 0 for v in lim.to_dict().values()), lim


@pytest.mark.parametrize("text, value", [
    ("512M", 512 << 20), ("4G", 4 << 30), ("4g", 4 << 30), ("4GiB", 4 << 30), ("1T", 1 << 40),
    ("65536", 65536), ("7K", 7 << 10), ("unlimited", None),
])
def test_sizes(tmp_path, text, value):
    assert _load_limits(tmp_path, f"limits:\n  memory: {text}\n").memory == value


def test_a_child_profile_overrides_one_limit_and_keeps_the_rest(tmp_path):
    lim = _load_limits(tmp_path, "limits:\n  processes: 10\n")
    base = _load.load("default", workdir=str(tmp_path), home=str(tmp_path),
                      tmp=str(tmp_path)).limits
    assert lim.processes == 10 and lim.memory == base.memory


@pytest.mark.parametrize("body", [
    "limits:\n  memory: 4 gigs\n", "limits:\n  memory: 1.5G\n", "limits:\n  memory: -1\n",
    "limits:\n  memory: 0\n", "limits:\n  memory: true\n", "limits:\n  memory: [1]\n",
    "limits:\n  memory: 4P\n", "limits:\n  memory: 99999999T\n",
    "limits:\n  processes: 4G\n", "limits:\n  processes: 0\n", "limits:\n  processes: 1.5\n",
    "limits:\n  open_files: Unlimited\n", "limits:\n  open_file: 10\n",
    "limits:\n  processes:\n",
])
def test_bad_values_name_file_and_line(tmp_path, body):
    with pytest.raises(ProfileError) as e:
        _load_limits(tmp_path, body)
    assert "p.yaml:3" in str(e.value), e.value


def _plan(tmp_path, body="", root=False, uid=1234, host=FULL):
    d = tmp_path / "wd"
    d.mkdir(exist_ok=True)
    pol = _load.load(_write(tmp_path, body), workdir=str(d), home=str(d), tmp=str(d))
    ident = Identity(uid=uid, gid=uid, user="agent", home=str(d), switch=root,
                     started_as_root=root)
    return compile(pol, ["true"], ident, host, parent_env={"PATH": "/usr/bin"})


def test_plan_names_the_mechanism_of_every_limit(tmp_path):
    d = _plan(tmp_path, root=True).to_dict()["limits"]
    assert d["processes"]["mechanism"].startswith("RLIMIT_NPROC")
    assert d["memory"]["mechanism"].startswith("RLIMIT_DATA")
    assert d["open_files"]["mechanism"].startswith("RLIMIT_NOFILE")
    assert d["file_size"]["mechanism"].startswith("RLIMIT_FSIZE")
    assert "tmpfs" in d["tmp_size"]["mechanism"] and "tmpfs" in d["shm_size"]["mechanism"]


def test_what_cannot_be_enforced_says_so(tmp_path):
    no_ns = HostFacts(landlock_abi=7, seccomp_filter=True, seccomp_user_notif=True,
                      namespaces=False)
    d = _plan(tmp_path, host=no_ns).to_dict()["limits"]
    assert d["shm_size"]["mechanism"].startswith("NOT enforced")
    assert d["tmp_size"]["mechanism"].startswith("NOT enforced")     # started unprivileged
    root_agent = _plan(tmp_path, root=True, uid=0)
    assert "NOT enforced for uid 0" in root_agent.limits["processes"]
    assert any("uid 0" in n for n in root_agent.notes)


def test_limits_step_comes_before_the_namespaces(tmp_path):
    names = _plan(tmp_path).step_names()
    assert names.index("close_fds") < names.index("limits") < names.index("mount_namespace")
    lifted = _plan(tmp_path, "limits:\n  processes: unlimited\n  memory: unlimited\n"
                   "  open_files: unlimited\n  file_size: unlimited\n").step_names()
    assert "limits" not in lifted


def test_a_run_cgroup_with_controllers_takes_processes_and_memory(tmp_path):
    host = HostFacts(landlock_abi=7, seccomp_filter=True, seccomp_user_notif=True,
                     namespaces=True, cgroup="/sys/fs/cgroup",
                     cgroup_controllers=("pids", "memory"))
    plan = _plan(tmp_path, host=host, root=True, uid=0)
    assert plan.limits["processes"].startswith("cgroup pids.max")
    assert plan.limits["memory"].startswith("cgroup memory.max")
    names = plan.step_names()
    # checked before the first step that forks (the supervisor moves the child meanwhile)
    assert names.index("cgroup") == names.index("pid_namespace") - 1 if "pid_namespace" in names \
        else names.index("cgroup") < names.index("chdir")
    limits_step = next(s for s in plan.steps if s.name == "limits")
    assert set(limits_step.params["rlimits"]) == {"open_files", "file_size"}
    assert not any("uid 0" in n for n in plan.notes)      # pids.max applies to root too
    kill_only = dataclasses.replace(host, cgroup_controllers=())
    assert _plan(tmp_path, host=kill_only).limits["processes"].startswith("RLIMIT_NPROC")
    assert "cgroup" not in _plan(tmp_path).step_names()
