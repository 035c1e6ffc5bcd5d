"""The probe's network posture is truthful (issue 14 item 8, issue 22 item 4): no port
granted: blocked, and the resolver outside confine is not reachable; ports granted with the
gateway on: the gateway's, not a host's. Every target is this host's own address, where the
probe listens: nothing leaves the machine."""
from __future__ import annotations

import os
import shutil

import pytest

from .conftest import Runner, make_workdir, needs_root, parse

MODES = ("root", "user")
IDS = ("network.tcp_outside", "network.dns_outside")


@pytest.fixture
def wd(test_user):
    needs_root()
    d = make_workdir(test_user)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _probe(mode, test_user, confine_cmd, wd, *args, env_extra=()):
    p = Runner(mode, test_user, confine_cmd)("probe", "-w", wd, "--json", "--only", "network", *args,
                                             env_extra=env_extra, cwd=wd)
    r = parse(p)
    return p, {a["id"]: a for a in r["attempts"]}, r


@pytest.mark.parametrize("mode", MODES)
def test_no_port_granted_outside_is_blocked(test_user, confine_cmd, wd, mode):
    p, a, r = _probe(mode, test_user, confine_cmd, wd)
    if a["network.tcp_outside"]["result"] == "skipped":
        pytest.skip(a["network.tcp_outside"]["detail"])
    assert a["network.tcp_outside"]["result"] == "blocked", a["network.tcp_outside"]
    assert a["network.dns_outside"]["result"] == "blocked", a["network.dns_outside"]
    assert a["network.dns_outside"]["mechanism"] == "seccomp"
    assert r["verdict"] == "pass" and p.returncode == 0
    # control: unconfined, the same attempts reach the probe's stand-ins
    p, a, r = _probe(mode, test_user, confine_cmd, wd, env_extra=("CONFINE_TEST_PROBE_UNCONFINED=1",))
    assert a["network.tcp_outside"]["result"] == "possible" and "connected to" in a["network.tcp_outside"]["detail"]
    assert a["network.dns_outside"]["result"] == "possible"
    assert "outside confine answered" in a["network.dns_outside"]["detail"]


@pytest.mark.parametrize("mode", MODES)
def test_granted_ports_reach_only_the_gateway(test_user, confine_cmd, wd, mode):
    """What `connect_tcp: [443, 53]` allowed before the gateway: any host on those ports.
    With the gateway they are ports of the agent's own loopback; a connect elsewhere on
    them is the gateway's to refuse (443) or confine's DNS server's (53), which the probe
    must not read as a host reached. (A port really open to every host FAILs:
    test_probe_profiles.test_every_address_on_every_port_fails.)"""
    prof = os.path.join(wd, "..", os.path.basename(wd) + "-ports.yaml")
    with open(prof, "w") as f:
        f.write("extends: default\nnetwork:\n  connect_tcp: [443, 53]\n")
    os.chmod(prof, 0o644)
    try:
        p, a, r = _probe(mode, test_user, confine_cmd, wd, "-p", prof)
    finally:
        os.unlink(prof)
    t = a["network.tcp_outside"]
    if t["result"] == "skipped":
        pytest.skip(t["detail"])
    assert t["result"] == "blocked" and t["mechanism"] == "gateway", t
    assert r["verdict"] == "pass" and p.returncode == 0, r["attempts"]
    assert a["network.dns_outside"]["result"] == "blocked"          # UDP only to confine's DNS
