"""The one shape shared by the credential sources (who makes the value and the
placeholder) and the gateway's swap (who puts the value on the wire).

A `Binding` lives only in the supervisor: `value` is the real secret and must
never reach the agent, a log, an error message or a file (repr hides it).
"""
from __future__ import annotations

from ..record import dataclass, field


def host_matches(pattern: str, host: str) -> bool:
    """`pattern` an exact name or `*.suffix` (a strict subdomain: `*.a.test` is not
    `a.test` nor `xa.test`); `host` as the request named it (case, a final dot)."""
    host = host.lower().rstrip(".")
    if pattern.startswith("*."):
        return host.endswith(pattern[1:])
    return host == pattern


def plain_path(path: str) -> bool:
    """A path whose prefix means what it says: no dot segments, no backslash and no
    percent-escape (an origin may decode one into a dot or a slash), so `/repo/../other`
    or `/repo/%2e%2e/other` never matches the prefix `/repo`: refused, not normalised,
    since the origin's idea of normal is not known here."""
    if not path.startswith("/") or "\\" in path or "%" in path:
        return False
    return not any(seg in (".", "..") for seg in path.split("/"))


def path_matches(prefix: str, path: str) -> bool:
    """`path` (query and fragment ignored) under `prefix` at a segment boundary:
    `/api` covers `/api` and `/api/x`, not `/apix`; `/api/` covers `/api` too."""
    p = path.split("?", 1)[0].split("#", 1)[0]
    if not plain_path(p):
        return False
    base = prefix.rstrip("/")
    return p == base or p.startswith(base + "/") or (base == "" and p.startswith("/"))


@dataclass(frozen=True)
class Target:
    """Where the real value may be sent: a host (exact name, or `*.suffix`),
    optionally one port, a set of methods and path prefixes (empty: any)."""
    host: str
    port: int | None = None
    methods: frozenset[str] = frozenset()
    paths: tuple[str, ...] = ()

    def matches(self, host: str, port: int | None, method: str, path: str) -> bool:
        """May a request to host:port, method, path carry the value? The one matcher of
        the swap and the per-use judge. A port not known matches only a target without
        one (fail closed); a profile's target always has one (443 by default)."""
        return (host_matches(self.host, host)
                and (self.port is None or self.port == port)
                and (not self.methods or method.upper() in self.methods)
                and (not self.paths or any(path_matches(x, path) for x in self.paths)))


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
