"""confine.kernel.lsm: request checks, context arithmetic, and failing closed
where the LSM is not there (this test host has neither AppArmor nor SELinux
enforcing; where it has, the checks are skipped rather than faked)."""
from __future__ import annotations

import errno

import pytest

from confine.kernel import lsm


def test_selinux_context_with_type():
    cur = "unconfined_u:unconfined_r:unconfined_t:s0-s0:c0.c1023"
    assert lsm.selinux_context_with_type("confine_agent_t", cur) == \
        "unconfined_u:unconfined_r:confine_agent_t:s0-s0:c0.c1023"
    assert lsm.selinux_context_with_type("t", "u:r:x") == "u:r:t"
    with pytest.raises(OSError):
        lsm.selinux_context_with_type("t", "kernel")


@pytest.mark.parametrize("bad", ["", "two words", "nul\0", "line\n"])
def test_bad_apparmor_names_refused(bad):
    with pytest.raises(OSError) as e:
        lsm.apparmor_change_onexec(bad)
    assert e.value.errno == errno.EINVAL


@pytest.mark.parametrize("bad", ["", "no-colons", "a:b:c\n"])
def test_bad_selinux_contexts_refused(bad):
    with pytest.raises(OSError) as e:
        lsm.selinux_setexeccon(bad)
    assert e.value.errno == errno.EINVAL


def test_fail_closed_without_apparmor():
    if lsm.apparmor_enabled():
        pytest.skip("AppArmor is enabled here")
    with pytest.raises(OSError) as e:
        lsm.apparmor_change_onexec("confine-default")
    assert e.value.errno == errno.ENOSYS


def test_fail_closed_without_selinux():
    if lsm.selinux_enabled():
        pytest.skip("SELinux is enabled here")
    with pytest.raises(OSError) as e:
        lsm.selinux_setexeccon("u:r:confine_agent_t:s0")
    assert e.value.errno == errno.ENOSYS


def test_unknown_profile_is_refused_by_the_kernel():
    """Where AppArmor runs, the kernel itself rejects a profile that is not loaded."""
    if not lsm.apparmor_enabled():
        pytest.skip("AppArmor not enabled here")
    import os
    pid = os.fork()
    if pid == 0:  # in a child: a successful request would confine this process
        try:
            lsm.apparmor_change_onexec("confine-test-no-such-profile")
            os._exit(1)
        except OSError as e:
            os._exit(0 if e.errno == errno.ENOENT else 2)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_attr_paths():
    assert lsm._attr(None, "exec") == "/proc/thread-self/attr/exec"
    p = lsm._attr("apparmor", "exec")
    assert p in ("/proc/thread-self/attr/apparmor/exec", "/proc/thread-self/attr/exec")
