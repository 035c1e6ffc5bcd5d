"""The network keys of a profile (issue 14): network.allow, deny, include,
allowed_ips, default, and --allow-host; validated at load with the file, line
and key, the reason from the gateway's own grammar; what the plan makes of them."""
from __future__ import annotations

import dataclasses

import pytest

from confine.errors import ProfileError
from confine.kernel import seccomp
from confine.plan import HostFacts, compile
from confine.plan.identity import Identity
from confine.policy import load as _load
from confine.runtime import egress

FULL = HostFacts(landlock_abi=7, seccomp_filter=True, seccomp_user_notif=True, namespaces=True,
                 apparmor=False, selinux=False)


@pytest.fixture
def dirs(tmp_path):
    wd, home, tmp = (tmp_path / n for n in ("wd", "home", "tmp"))
    for d in (wd, home, tmp):
        d.mkdir()
    return str(wd), str(home), str(tmp)


def _load_text(dirs, text: str, **kw):
    wd, home, tmp = dirs
    p = f"{tmp}/p.yaml"
    with open(p, "w") as f:
        f.write(text)
    return _load.load(p, workdir=wd, home=home, tmp=tmp, **kw)


def _plan(dirs, pol, host=FULL):
    return compile(pol, ["true"], Identity(uid=1234, gid=1234, user="agent", home=dirs[1],
                                           switch=False, started_as_root=False),
                   host, parent_env={"PATH": "/usr/bin"})


GOOD = """\
network:
  allow: [example.com, "*.example.org", "api.test:8443", 192.0.2.7, "[2001:db8::/32]:*"]
  deny: [bad.example.com]
  include: [registries]
  allowed_ips: [10.1.0.0/16]
  default: ask
"""


def test_keys_load_into_the_policy(dirs):
    n = _load_text(dirs, GOOD).network
    assert n.allow == ("example.com", "*.example.org", "api.test:8443", "192.0.2.7",
                       "[2001:db8::/32]:*")
    assert n.deny == ("bad.example.com",) and n.include == ("registries",)
    assert n.allowed_ips == ("10.1.0.0/16",) and n.default == "ask" and n.egress
    d = _load_text(dirs, GOOD).to_dict()["network"]
    assert d["allow"][0] == "example.com" and d["default"] == "ask"
    # and the gateway builds its rules from exactly these
    r = egress.rules(n)
    assert r.decide("example.com", 443).allowed and not r.decide("bad.example.com", 443).allowed
    assert r.decide("pypi.org", 443).allowed           # the registries set


def test_defaults_no_network(dirs):
    n = _load_text(dirs, "description: x\n").network
    assert (n.allow, n.deny, n.include, n.allowed_ips, n.default) == ((), (), (), (), "deny")
    assert not n.egress


@pytest.mark.parametrize("entry,why", [
    ('"*"', "bare"), ('"*.com"', "public suffix"), ('"*.co.uk"', "public suffix"),
    ('"example.com:99999"', "port"), ('"exa mple.com"', ""), ("127.1", ""),
])
def test_bad_allow_entry_names_its_line_and_the_reason(dirs, entry, why):
    text = f"network:\n  allow:\n    - example.com\n    - {entry}\n"
    with pytest.raises(ProfileError) as e:
        _load_text(dirs, text)
    msg = str(e.value)
    assert "p.yaml:4: network.allow:" in msg, msg
    assert why in msg


@pytest.mark.parametrize("key,value,line_has", [
    ("include", "[no-such-set]", "unknown host set"),
    ("allowed_ips", "[10.0.0.1/8]", "not an address or network"),
    ("default", "allow", "is not one of deny, ask"),
    ("deny", '["*"]', "network.deny"),
    ("alow", "[x.com]", "did you mean 'allow'"),
])
def test_other_keys_are_validated(dirs, key, value, line_has):
    with pytest.raises(ProfileError) as e:
        _load_text(dirs, f"network:\n  {key}: {value}\n")
    assert "p.yaml:2" in str(e.value) and line_has in str(e.value), str(e.value)


def test_extends_merges_the_lists(dirs):
    wd, home, tmp = dirs
    with open(f"{tmp}/base.yaml", "w") as f:
        f.write("network:\n  allow: [a.example.com]\n  deny: [x.example.com]\n  default: ask\n")
    pol = _load_text(dirs, "extends: base.yaml\nnetwork:\n  allow: [b.example.com]\n")
    assert pol.network.allow == ("a.example.com", "b.example.com")
    assert pol.network.deny == ("x.example.com",) and pol.network.default == "ask"


def test_allow_host_flag_adds_to_allow_and_is_validated(dirs):
    pol = _load_text(dirs, GOOD, extra_allow=("local.test:8443",))
    assert pol.network.allow[-1] == "local.test:8443"
    with pytest.raises(ProfileError) as e:
        _load_text(dirs, GOOD, extra_allow=("*.com",))
    assert str(e.value).startswith("--allow-host *.com: ")


def test_plan_with_the_gateway(dirs):
    pol = _load_text(dirs, "network:\n  connect_tcp: [8080]\n  allow: [example.com]\n")
    plan = _plan(dirs, pol)
    assert plan.egress and not plan.net_ns       # the gateway lives in the host's network
    notes = " ".join(plan.notes)
    assert "ports 8080 of the agent's own loopback only" in notes
    assert "allows example.com" in notes and "redirected" in notes
    d = plan.to_dict()["network"]
    assert d["allow"] == ["example.com"] and d["gateway"].startswith("egress gateway")
    # UDP sockets may exist (every destination mediated), ICMP may not
    groups = {r.group for r in plan.seccomp_rules}
    assert "socket:inet-dgram" not in groups and "socket:inet-dgram-non-udp" in groups
    # the exporters' default table keeps UDP closed
    assert "socket:inet-dgram" in {r.group for r in seccomp.DEFAULT_RULES}
    udp = [r for r in plan.seccomp_rules if r.group == "socket:inet-dgram-non-udp"]
    assert not any(r.matches([2, 2, 17]) or r.matches([2, 2, 0]) for r in udp)
    assert any(r.matches([2, 2, 1]) for r in udp) and any(r.matches([10, 2, 58]) for r in udp)


def test_gateway_in_the_agents_own_network_namespace(dirs):
    pol = _load_text(dirs, "network:\n  allow: [example.com]\n")
    host = dataclasses.replace(FULL, net_namespace=True)
    plan = _plan(dirs, pol, host)
    assert plan.net_ns and plan.gateway_ports == (3128, 3129, 53)
    names = plan.step_names()
    assert names.index("gateway_sockets") == names.index("net_namespace") + 1
    assert names.index("gateway_sockets") < names.index("pid_namespace")
    assert {p for p, _ in plan.port_rules} == {3128, 3129, 53}
    # no user notification to hand the sockets over: the host's namespace, ports at run time
    plan = _plan(dirs, pol, dataclasses.replace(host, seccomp_user_notif=False))
    assert not plan.net_ns and plan.gateway_ports == () and plan.port_rules == ()


def test_plan_without_the_gateway_keeps_udp_closed(dirs):
    plan = _plan(dirs, _load_text(dirs, "description: x\n"))
    assert not plan.egress and plan.to_dict()["network"]["gateway"] is None
    assert "socket:inet-dgram" in {r.group for r in plan.seccomp_rules}


def test_gateway_needs_landlock_tcp(dirs):
    pol = _load_text(dirs, "network:\n  allow: [example.com]\n")
    plan = _plan(dirs, pol, dataclasses.replace(FULL, landlock_abi=3))
    assert "landlock.net_tcp" in {m.feature for m in plan.missing}
    # ... unless the agent has a network namespace of its own, where the supervisor
    # routes every connect and a bind reaches nothing but the agent's loopback
    own = _plan(dirs, pol, dataclasses.replace(FULL, landlock_abi=3, net_namespace=True))
    assert own.net_ns and own.missing == ()
    assert own.mechanisms["landlock.net_tcp"].startswith("mediated connects")
    ports = _load_text(dirs, "network:\n  allow: [example.com]\n  connect_tcp: [8080]\n")
    kept = _plan(dirs, ports, dataclasses.replace(FULL, landlock_abi=3, net_namespace=True))
    assert "landlock.net_tcp" in {m.feature for m in kept.missing}


def test_upstreams_read_like_glibc(tmp_path):
    p = tmp_path / "resolv.conf"
    p.write_text("# x\nnameserver 127.0.0.53\nnameserver fe80::1%eth0\nnameserver 2001:db8::1\n"
                 "search example\nnameserver 10.0.0.1\nnameserver 10.0.0.2\n")
    assert egress.upstreams(str(p)) == [("127.0.0.53", 53), ("2001:db8::1", 53),
                                        ("10.0.0.1", 53)]
    assert egress.upstreams(str(tmp_path / "none")) == [("127.0.0.1", 53)]


def test_refusal_lines_name_the_host_and_the_key():
    key, line = egress.refusal_line({"event": "connect", "decision": "deny", "host": "x.test",
                                     "port": 443, "rule": "no rule", "allow_with": "x.test",
                                     "reason": "x.test port 443 is not allowed"})
    assert key == "egress x.test:443"
    assert "network.allow: [x.test]" in line and "--allow-host x.test" in line
    assert egress.refusal_line({"event": "dns", "decision": "allow", "name": "x.test",
                                "answers": ["192.0.2.1"]}) is None
    got = egress.refusal_line({"event": "dns", "decision": "allow", "name": "p.test",
                               "answers": [], "refused": ["10.0.0.5: private"]})
    assert got is not None and "p.test resolves only to refused addresses" in got[1]
