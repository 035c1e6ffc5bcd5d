"""`confine probe` tells the truth on every shipped profile (issue 22, item 4).

The agent profiles run the egress gateway: the supervisor rewrites every connect beyond
the agent's loopback to it and refuses an address no rule allows with ECONNREFUSED, and
rewrites DNS to confine's own resolver. The probe used to read the first as "reached a
TCP stack" and the second as the agent's own UDP, and said FAIL for claude-code and
codex. Each shipped profile must PASS, as root (--user) and unprivileged; a profile
weakened on purpose (every address, every port, relayed raw by the gateway) must FAIL
on network.tcp_outside.

No packet leaves: every probe here runs in a network namespace the test makes, whose
only link leads to a second namespace of the test's, with IPv6 off; the link's transmit
counter must read 0 afterwards. The probe's "outside" address there is not an address
of any interface but a local route (so the gateway does not count it as this host's
own and an allow-everything rule really opens it): a public-looking address, which
exists only inside that namespace.
"""
from __future__ import annotations

import glob
import os
import secrets
import shutil
import subprocess

import pytest

from .conftest import Runner, make_workdir, needs_root, parse

MODES = ("root", "user")
SHIPPED = sorted(os.path.splitext(os.path.basename(p))[0] for p in
                 glob.glob(os.path.join(os.path.dirname(__file__), "..", "..", "profiles", "*.yaml")))
OUTSIDE_NET, OUTSIDE = "1.2.3.0/24", "1.2.3.4"
# Gateway profiles: what each network attempt must be stopped by
GATEWAY_MECHANISMS = {"network.tcp_outside": "gateway", "network.dns": "gateway (DNS)",
                      "network.udp": "gateway (UDP)", "network.dns_outside": "gateway (UDP)"}


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


def _in(ns: str, *cmd: str) -> str:
    return subprocess.run(["ip", "netns", "exec", ns, *cmd], check=True, capture_output=True,
                          text=True).stdout


class Isolated:
    """Two network namespaces joined by a veth pair: the probe runs in `ns`, whose
    default route leads to `sink` (nothing beyond it)."""

    def __init__(self) -> None:
        tag = secrets.token_hex(3)
        self.ns, self.sink = f"cfp-{tag}", f"cfp-{tag}-sink"
        _ip("netns", "add", self.ns)
        _ip("netns", "add", self.sink)
        for ns in (self.ns, self.sink):
            # per namespace: no IPv6 router solicitations to count
            _in(ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1")
            _in(ns, "sysctl", "-qw", "net.ipv6.conf.default.disable_ipv6=1")
            _ip("-n", ns, "link", "set", "lo", "up")
        _ip("-n", self.ns, "link", "add", "v0", "type", "veth", "peer", "name", "v1", "netns", self.sink)
        _ip("-n", self.ns, "link", "set", "v0", "up")
        _ip("-n", self.sink, "link", "set", "v1", "up")
        _ip("-n", self.ns, "route", "add", "local", OUTSIDE_NET, "dev", "lo")
        _ip("-n", self.ns, "route", "add", "default", "dev", "v0", "src", OUTSIDE)

    def sent(self) -> int:
        """Packets that tried to leave the probe's namespace."""
        return int(_in(self.ns, "cat", "/sys/class/net/v0/statistics/tx_packets").strip())

    def close(self) -> None:
        for ns in (self.ns, self.sink):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


@pytest.fixture(scope="module")
def isolated():
    needs_root()
    if shutil.which("ip") is None:
        pytest.skip("needs ip(8) to make the network namespaces")
    net = Isolated()
    yield net
    net.close()


@pytest.fixture
def wd(test_user):
    needs_root()
    d = make_workdir(test_user)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _probe(isolated, mode, test_user, confine_cmd, wd, profile, env_extra=()):
    run = Runner(mode, test_user, confine_cmd, wrap=["ip", "netns", "exec", isolated.ns])
    p = run("probe", "-w", wd, "--json", "-p", profile, cwd=wd, timeout=120, env_extra=env_extra)
    r = parse(p)
    return p, r, {a["id"]: a for a in r["attempts"]}


def _lines(r) -> str:
    return "\n".join(f"{a['id']}: {a['result']} {a['seen']} {a['mechanism']} {a['detail']}"
                     for a in r["attempts"] if a["result"] not in ("blocked", "skipped"))


def test_every_shipped_profile_is_probed():
    assert {"default", "strict", "claude-code", "codex"} <= set(SHIPPED), SHIPPED


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("profile", SHIPPED)
def test_shipped_profile_passes(isolated, test_user, confine_cmd, wd, mode, profile):
    p, r, a = _probe(isolated, mode, test_user, confine_cmd, wd, profile)
    assert r["verdict"] == "pass" and p.returncode == 0, (_lines(r), p.stderr[-2000:])
    # the attempt on the outside address was made (this namespace has one), not skipped
    assert a["network.tcp_outside"]["result"] == "blocked", a["network.tcp_outside"]
    if profile in ("claude-code", "codex"):
        got = {k: a[k]["mechanism"] for k in GATEWAY_MECHANISMS}
        assert got == GATEWAY_MECHANISMS, got
        assert a["network.dns"]["seen"] in ("NXDOMAIN", "REFUSED"), a["network.dns"]
    assert isolated.sent() == 0


@pytest.mark.parametrize("mode", MODES)
def test_every_address_on_every_port_fails(isolated, test_user, confine_cmd, wd, mode):
    """The gateway relays raw TCP to any address an address rule allows: the probe must
    say the outside is reachable, through the gateway."""
    prof = wd.rstrip("/") + "-open.yaml"
    with open(prof, "w") as f:
        f.write('extends: default\nnetwork:\n  allow: ["0.0.0.0/0:*"]\n')
    os.chmod(prof, 0o644)
    try:
        # the real metadata address: inside the isolated namespace it cannot leave either
        p, r, a = _probe(isolated, mode, test_user, confine_cmd, wd, prof,
                         env_extra=("CONFINE_AUDIT_METADATA=169.254.169.254:80",))
    finally:
        os.unlink(prof)
    t = a["network.tcp_outside"]
    assert t["result"] == "possible" and "relayed it to the probe's listener" in t["detail"], t
    assert r["verdict"] == "fail" and p.returncode == 1
    assert "network.tcp_outside" in _lines(r)
    # redirected to the gateway, which never dials a metadata address: not "connected"
    m = a["network.metadata"]
    assert m["result"] == "blocked" and m["mechanism"] == "gateway", m
    assert isolated.sent() == 0
