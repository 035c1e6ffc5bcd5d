"""The built-in agent profiles allow exactly their agent's hosts (issue 14 item 8), each with its
reason, and no longer open ports to every host. Read with a minimal loader (YAML + the
gateway's rules): the policy loader learns `network.allow` in the gateway wiring."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from confine.gateway import Rules

PROFILES = Path(__file__).resolve().parents[2] / "profiles"
HOSTS = {
    "claude-code": {"api.anthropic.com", "console.anthropic.com", "platform.claude.com", "claude.ai",
                    "statsig.anthropic.com"},
    "codex": {"api.openai.com", "chatgpt.com", "auth.openai.com", "ab.chatgpt.com"},
}


@pytest.mark.parametrize("name", sorted(HOSTS))
def test_agent_profile_allows_exactly_its_hosts(name):
    text = (PROFILES / f"{name}.yaml").read_text()
    net = yaml.safe_load(text)["network"]
    assert set(net) == {"allow"}                       # no connect_tcp: no port open to every host
    assert set(net["allow"]) == HOSTS[name]
    rules = Rules.parse(net["allow"])
    for h in HOSTS[name]:
        assert rules.decide(h, 443).allowed
        assert not rules.decide(h, 80).allowed         # 443 only
    for other in ("example.com", "sentry.io", "o1.ingest.sentry.io", "evil.anthropic.com.example",
                  "http-intake.logs.us5.datadoghq.com", "raw.githubusercontent.com"):
        assert not rules.decide(other, 443).allowed, other
    for h in HOSTS[name]:                              # every host says why it is there
        line = next(ln for ln in text.splitlines() if re.match(rf"\s+- {re.escape(h)}\s", ln))
        assert "#" in line and len(line.split("#", 1)[1].strip()) > 10, line
    env = yaml.safe_load(text).get("env", {})
    assert "RES_OPTIONS" not in (env.get("set") or {})  # the gateway answers DNS over UDP too
