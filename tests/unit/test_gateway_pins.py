"""Pins (what confine resolved, per run) and the JSON-lines log sink."""
from __future__ import annotations

import io
import ipaddress
import json
import time

from confine.gateway import JsonLines, Pins

ip = ipaddress.ip_address


def test_pins_hold_for_the_run_by_default():
    p = Pins()
    assert p.add("a.test", [ip("192.0.2.1")], ttl=0)
    time.sleep(0.01)
    assert p.contains("a.test", ip("192.0.2.1"))
    assert not p.contains("a.test", ip("192.0.2.2"))
    assert not p.contains("b.test", ip("192.0.2.1"))
    assert p.snapshot() == {"a.test": ["192.0.2.1"]}


def test_pins_expire_with_hold():
    p = Pins(hold=0.05)
    p.add("a.test", [ip("192.0.2.1")], ttl=0)
    assert p.contains("a.test", ip("192.0.2.1"))
    time.sleep(0.1)
    assert not p.contains("a.test", ip("192.0.2.1"))
    assert p.addresses("a.test") == frozenset()


def test_pins_bounded_fail_closed():
    p = Pins(max_names=2, max_per_name=2)
    assert p.add("a.test", [ip("192.0.2.1"), ip("192.0.2.2")], 30)
    assert not p.add("a.test", [ip("192.0.2.3")], 30)          # a third address for a name: refused
    assert not p.contains("a.test", ip("192.0.2.3"))
    assert p.add("a.test", [ip("192.0.2.1")], 30)              # an existing pin renews
    assert p.add("b.test", [ip("192.0.2.1")], 30)
    assert not p.add("c.test", [ip("192.0.2.1")], 30)          # a third name: refused
    assert not p.contains("c.test", ip("192.0.2.1"))


def test_json_lines():
    buf = io.StringIO()
    log = JsonLines(buf)
    log({"event": "dns", "name": "a.test", "addr": ip("192.0.2.1")})
    log({"event": "connect"})
    lines = buf.getvalue().splitlines()
    assert [json.loads(x)["event"] for x in lines] == ["dns", "connect"]
    assert json.loads(lines[0])["addr"] == "192.0.2.1"
