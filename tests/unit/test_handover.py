"""What the child makes for the supervisor (the seccomp listener, the gateway's
sockets) reaches it as SCM_RIGHTS (runtime/channels.py), never by pidfd_getfd,
which root in a container cannot do across uids; a child that passes nothing,
too many, the wrong kind or under the wrong tag fails the run. And the plan's
choice of the mediator's identity where the supervisor lacks CAP_SYS_PTRACE."""
from __future__ import annotations

import dataclasses
import errno
import os
import struct

import pytest

from confine.errors import ConfineError
from confine.kernel import caps, seccomp
from confine.plan import HostFacts, compile
from confine.plan.identity import Identity
from confine.policy import load as _load
from confine.runtime import channels, launch

# one BPF instruction: SECCOMP_RET_ALLOW (a listener that is never notified)
ALLOW_ALL = struct.pack("<HBBI", 0x06, 0, 0, 0x7FFF0000)


@pytest.fixture
def med():
    m = channels.MediationChannel.open(None, files=False)
    yield m
    for f in (m.sync_r, m.sync_w, m.broker_fd, m.hand_child):
        try:
            os.close(f)
        except OSError:
            pass
    m.broker_sup.close()
    m.hand_sup.close()


def _open_fds() -> set[int]:
    return {int(n) for n in os.listdir("/proc/self/fd")}


def test_a_real_listener_is_taken(med):
    pid = os.fork()
    if pid == 0:
        try:
            caps.set_no_new_privs()
            nfd = seccomp.load_notify(ALLOW_ALL)
            med.hand_over([nfd], b"L")
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    nfd = med.take_listener()
    try:
        assert os.readlink(f"/proc/self/fd/{nfd}") == "anon_inode:seccomp notify"
        assert not os.get_inheritable(nfd)
    finally:
        os.close(nfd)


def test_the_listener_hands_the_cpu_over_at_each_call():
    """notify.sync_wake_up sets SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP on a real listener
    (kernel 6.6+), the mediator then running on the calling agent's CPU. Control: the
    same ioctl with a flag the kernel does not know is refused, so the ioctl number and
    the value's passing are what the kernel checks."""
    import ctypes

    from confine.kernel import notify
    from confine.kernel.libc import libc
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            caps.set_no_new_privs()
            nfd = seccomp.load_notify(ALLOW_ALL)
            ok = notify.sync_wake_up(nfd)
            bad = libc.ioctl(nfd, notify.IOCTL_SET_FLAGS, ctypes.c_uint64(2))
            os.write(w, f"{int(ok)} {bad} {ctypes.get_errno()}".encode())
        finally:
            os._exit(0)
    os.close(w)
    os.waitpid(pid, 0)
    ok, bad, err = (int(x) for x in os.read(r, 64).split())
    os.close(r)
    major, minor = (int(x) for x in os.uname().release.split(".")[:2])
    if not ok and (major, minor) < (6, 6):
        pytest.skip("SECCOMP_IOCTL_NOTIF_SET_FLAGS needs Linux 6.6")
    assert ok == 1
    assert bad == -1 and err == errno.EINVAL


def test_nothing_passed_fails(med):
    with pytest.raises(OSError) as e:
        med.take_listener()
    assert e.value.errno == errno.EBADMSG


@pytest.mark.parametrize("tag,count", [(b"L", 1), (b"L", 2), (b"G", 1), (b"X", 1)])
def test_a_lie_fails_and_leaks_nothing(med, tag, count):
    """A pipe instead of a listener, two descriptors, another tag: refused, and
    what arrived is closed. Control: the same descriptors under the right tag
    and count are what take() returns for the gateway."""
    r, w = os.pipe()
    before = _open_fds()
    med.hand_over([r] * count, tag)
    with pytest.raises(OSError) as e:
        med.take_listener()
    assert e.value.errno == errno.EBADMSG
    assert _open_fds() == before
    med.hand_over([r, w, r, w], b"G")
    got = med.take(b"G", 4)
    assert len(got) == 4 and os.path.sameopenfile(got[0], r)
    for f in got + [r, w]:
        os.close(f)


FULL = HostFacts(landlock_abi=7, seccomp_filter=True, seccomp_user_notif=True, namespaces=False)


@pytest.fixture
def policy(tmp_path):
    wd, home, tmp = (tmp_path / n for n in ("wd", "home", "tmp"))
    for d in (wd, home, tmp):
        d.mkdir()
    return _load.load("default", workdir=str(wd), home=str(home), tmp=str(tmp))


def _plan(policy, host, root=True):
    ident = Identity(uid=1234, gid=2345, user="agent", home=policy.workdir, switch=root,
                     started_as_root=root)
    return compile(policy, ["true"], ident, host, parent_env={"PATH": "/usr/bin"})


def test_mediator_takes_the_agents_ids_only_without_cap_sys_ptrace(policy):
    no_ptrace = dataclasses.replace(FULL, ptrace_others=False)
    assert _plan(policy, no_ptrace).mediate_as == (1234, 2345)
    assert any("CAP_SYS_PTRACE" in n for n in _plan(policy, no_ptrace).notes)
    # controls: with CAP_SYS_PTRACE, or started as the agent's own user
    assert _plan(policy, FULL).mediate_as is None
    assert _plan(policy, no_ptrace, root=False).mediate_as is None


def test_refused_where_the_agent_could_signal_the_mediator(policy):
    no_ptrace = dataclasses.replace(FULL, ptrace_others=False)
    loose = dataclasses.replace(policy, scope=dataclasses.replace(policy.scope, signals=False))
    with pytest.raises(ConfineError, match="CAP_SYS_PTRACE"):
        launch._check_mediate_as(_plan(loose, no_ptrace))
    # controls: signals scoped (Landlock ABI 6+, or mediated below it), or CAP_SYS_PTRACE
    launch._check_mediate_as(_plan(policy, no_ptrace))
    launch._check_mediate_as(_plan(policy, dataclasses.replace(no_ptrace, landlock_abi=4)))
    launch._check_mediate_as(_plan(loose, FULL))
