"""The egress gateway (issue 14): host rules, the address filter, DNS with pins, the SNI/Host check, the proxy.

This package is the self-contained core; `confine exec` does not use it yet.
docs/gateway.md describes the design and what the wiring must add.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .addresses import HostAddresses, host_addresses, refusal
    from .dns import DNSServer, JsonLines, Pins, Resolution, Resolver
    from .proxy import Gateway, Limits
    from .rules import Decision, HostRule, RuleError, Rules, normalise_host, parse_rule

# Loaded on first use: the policy loader needs only `rules`, and a run without
# egress should not pay for the proxy, the DNS server and their imports at start.
_WHERE = {
    "HostAddresses": "addresses", "host_addresses": "addresses", "refusal": "addresses",
    "DNSServer": "dns", "JsonLines": "dns", "Pins": "dns", "Resolution": "dns", "Resolver": "dns",
    "Gateway": "proxy", "Limits": "proxy",
    "Decision": "rules", "HostRule": "rules", "RuleError": "rules", "Rules": "rules",
    "normalise_host": "rules", "parse_rule": "rules",
}

__all__ = ["Decision", "DNSServer", "Gateway", "HostAddresses", "HostRule", "JsonLines", "Limits", "Pins", "Resolution",
           "Resolver", "RuleError", "Rules", "host_addresses", "normalise_host", "parse_rule", "refusal"]


def __getattr__(name: str) -> Any:
    mod = _WHERE.get(name)
    if mod is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{mod}"), name)
    globals()[name] = value
    return value
