"""The gateway's side of `network.default: ask`: what the proxy and the DNS server
put to the run's asker, and what they get back.

Only the shapes live here: the asker itself is the run's approval engine
(confine/approval/network.py adapts it), handed to the gateway as a callable,
so the gateway imports nothing of it. Threat: an unclear answer allows; only
`Answer.allowed` (an explicit once, run or profile) lets a connection through,
"pending" (nobody answered within the caller's wait) and anything else refuse.
"""
from __future__ import annotations

from ..record import dataclass

ALLOW = ("once", "run", "profile")


@dataclass(frozen=True)
class Question:
    host: str                       # a normalised name
    port: int | None                # None: a DNS query (no port yet)
    via: str = "proxy"              # "proxy", "transparent", "dns"
    pid: int | None = None
    exe: str | None = None
    wait: float | None = None       # how long the caller waits; then Answer("pending")

    @property
    def entry(self) -> str:
        """The allow entry this question would add to a profile."""
        return self.host if self.port in (None, 443) else f"{self.host}:{self.port}"

    def shown(self) -> str:
        return f"{self.host} (DNS lookup)" if self.port is None else f"{self.host}:{self.port}"


@dataclass(frozen=True)
class Answer:
    decision: str                   # once, run, profile, deny, pending (nobody answered yet)
    approver: str                   # "tty", "command NAME", "remembered", "non-interactive", ...
    reason: str = ""

    @property
    def allowed(self) -> bool:
        return self.decision in ALLOW

    @property
    def rule(self) -> str:
        return f"ask {self.decision} ({self.approver})"
