"""The one shape shared by the credential sources (who makes the value and the
placeholder) and the gateway's swap (who puts the value on the wire).

A `Binding` lives only in the supervisor: `value` is the real secret and must
never reach the agent, a log, an error message or a file (repr hides it).
"""
from __future__ import annotations

from ..record import dataclass, field


@dataclass(frozen=True)
class Target:
    """Where the real value may be sent: a host (exact name, or `*.suffix`),
    optionally one port, a set of methods and path prefixes (empty: any)."""
    host: str
    port: int | None = None
    methods: frozenset[str] = frozenset()
    paths: tuple[str, ...] = ()


@dataclass(frozen=True)
class Binding:
    name: str                          # the variable the agent sees
    placeholder: str                   # what the agent holds: unique per run
    value: str = field(repr=False)     # the real value: supervisor only
    targets: tuple[Target, ...] = ()
    headers: tuple[str, ...] = ()      # custom header names carrying it (x-api-key), lower case
    decision: str = "allow"            # allow | ask | deny (per use)
    # a login's refresh token (credentials/logins.py `Refresher`): swapped into the body of
    # a POST to the endpoints it names, the answer's new tokens made placeholders
    refresh: object = field(default=None, repr=False, compare=False)

    def __repr__(self) -> str:
        return f"Binding({self.name!r}, placeholder={self.placeholder!r}, targets={self.targets!r})"
