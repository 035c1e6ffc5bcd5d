"""`confine check` says which hosts a profile reaches and through what (issue 14 item 8): a
port in connect_tcp is the agent's own loopback; host entries go through the gateway."""
from __future__ import annotations

from confine.policy.model import Network
from confine.probe.check import network_posture


def test_no_network():
    p = network_posture(Network())
    assert p["summary"] == "no network" and p["through"] == "none" and p["hosts"] == []


def test_a_port_is_the_agents_own_loopback():
    """Since the gateway is wired, a listed port never reaches another host."""
    p = network_posture(Network(connect_tcp=(443, 53)))
    assert p["through"] == "none" and p["open_ports"] == [] and p["loopback_ports"] == [443, 53]
    assert p["summary"] == "its own loopback on TCP 443, 53" and "ANY host" not in p["summary"]


def test_hosts_through_the_gateway():
    p = network_posture(Network(allow=("api.anthropic.com", "claude.ai"), include=("registries",)))
    assert p["through"] == "gateway"
    assert p["hosts"] == ["api.anthropic.com", "claude.ai", "set registries"]
    assert p["summary"] == ("api.anthropic.com, claude.ai, set registries through confine's gateway "
                            "(DNS too); nothing else")
    ask = network_posture(Network(default="ask"))
    assert ask["through"] == "gateway" and ask["summary"].endswith("others asked")
    # with the gateway, connect_tcp is the agent's own loopback, not every host
    both = network_posture(Network(connect_tcp=(8080,), allow=("x.test",)))
    assert both["through"] == "gateway" and "ANY host" not in both["summary"]
    assert both["summary"].endswith("its own loopback on TCP 8080") and both["loopback_ports"] == [8080]
