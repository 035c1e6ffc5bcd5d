"""The egress gateway (issue 14): host rules, the address filter, DNS with pins, the SNI/Host check, the proxy.

This package is the self-contained core; `confine exec` does not use it yet.
docs/gateway.md describes the design and what the wiring must add.
"""
from .addresses import HostAddresses, host_addresses, refusal
from .dns import DNSServer, JsonLines, Pins, Resolution, Resolver
from .proxy import Gateway, Limits
from .rules import Decision, HostRule, RuleError, Rules, normalise_host, parse_rule

__all__ = ["Decision", "DNSServer", "Gateway", "HostAddresses", "HostRule", "JsonLines", "Limits", "Pins", "Resolution",
           "Resolver", "RuleError", "Rules", "host_addresses", "normalise_host", "parse_rule", "refusal"]
