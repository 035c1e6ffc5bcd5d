"""The credentials of one run, in the supervisor: got (or minted) before the start,
turned into the Bindings the gateway swaps with, revoked at the end.

The threat is the value reaching the agent or a record the agent can read: the
values stay in this object, in the Bindings handed to the gateway and, for a
minted one, in its pending-revoke record (pending.py); the agent's environment
gets only the placeholders (plan/env.py `with_credentials`), and every event
says the name, the source and the hosts, never the value.

Order of a run (session.py): `recover` (revokes left by runs that died), `start`
(values, placeholders, one record per minted value, all before the fork), the
agent, `finish` (every revoke, whatever the agent's status; a failed one keeps
its record and is tried again at the next start).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..errors import ConfineError
from ..policy.credentials import Credential, target_text
from ..record import dataclass, field
from . import pending, sources
from .binding import Binding

Warn = Callable[[str], None]
Emit = Callable[[dict[str, object]], None]
# What the agent's variable shows where no value was got (--dry-run)
DRY_RUN = "(a placeholder, made at the start)"


@dataclass
class Minted:
    name: str
    revoke: tuple[str, ...]
    value: str = field(repr=False)
    record: str = ""


@dataclass
class RunCredentials:
    bindings: tuple[Binding, ...] = ()
    minted: list[Minted] = field(default_factory=list)
    # the agents' login files' tokens (logins.py): swapped like the others, never
    # in the agent's environment
    logins: tuple[Binding, ...] = ()

    @property
    def placeholders(self) -> dict[str, str]:
        return {b.name: b.placeholder for b in self.bindings}

    @property
    def values(self) -> tuple[str, ...]:
        return tuple(b.value for b in self.bindings + self.logins)


def revoke_one(name: str, argv: tuple[str, ...], value: str) -> None:
    """Run `revoke:` with the value on stdin; ConfineError if it fails."""
    sources.run(name, "revoke", argv, stdin=(value + "\n").encode())


def recover(warn: Warn, emit: Emit) -> None:
    pending.recover(revoke_one, warn, emit)


def dry_run(creds: tuple[Credential, ...]) -> dict[str, str]:
    return {c.name: DRY_RUN for c in creds}


def start(creds: tuple[Credential, ...], env: Mapping[str, str], *, warn: Warn,
          emit: Emit) -> RunCredentials:
    """Every value got, in profile order; on any failure what was minted so far is
    revoked and the run refused (ConfineError: exit 125, one line)."""
    out = RunCredentials()
    bindings: list[Binding] = []
    try:
        for c in creds:
            got = _get(c, env, warn, emit, out)
            if got is None:
                emit({"event": "credential", "action": "skipped", "name": c.name,
                      "source": c.source, "reason": "optional, no value"})
                warn(f"credential {c.name}: no value ({_source_text(c)}); optional, so the "
                     "agent does not get the variable")
                continue
            ph = sources.placeholder(got.value)
            bindings.append(Binding(name=c.name, placeholder=ph, value=got.value,
                                    targets=c.targets, headers=c.headers,
                                    decision=c.decision))
            ev: dict[str, object] = {"event": "credential", "action": "bound", "name": c.name,
                                     "source": c.source,
                                     "hosts": [target_text(t) for t in c.targets],
                                     "decision": c.decision}
            if got.expires:
                ev["expires"] = got.expires
            emit(ev)
    except BaseException:
        finish(out, warn=warn, emit=emit)
        raise
    out.bindings = tuple(bindings)
    return out


def _source_text(c: Credential) -> str:
    return {"env": f"from_env {c.ref[0]}", "file": f"from_file {c.ref[0]}",
            "command": f"from_command {c.ref[0]}", "mint": f"mint {c.ref[0]}"}[c.source]


def _get(c: Credential, env: Mapping[str, str], warn: Warn, emit: Emit,
         out: RunCredentials) -> sources.Got | None:
    if c.source == "env":
        v = sources.from_env(c.name, c.ref[0], env)
        if v is None:
            if c.optional:
                return None
            how = ("set it, or drop --credential" if c.where == "--credential"
                   else f"set it, or mark the entry `optional: true` ({c.where})")
            raise sources.SourceError(f"credential {c.name}: the environment variable "
                                      f"{c.ref[0]} is not set ({how})")
        return sources.Got(v)
    if c.source == "file":
        try:
            v, notes = sources.from_file(c.name, c.ref[0])
        except sources.SourceError:
            import os
            if c.optional and not os.path.lexists(c.ref[0]):
                return None
            raise
        for n in notes:
            warn(n)
        return sources.Got(v)
    if c.source == "command":
        return sources.from_command(c.name, "from_command", c.ref)
    got = sources.from_command(c.name, "mint", c.ref)
    m = Minted(c.name, c.revoke, got.value)
    out.minted.append(m)        # revoked even if the record cannot be written
    if c.revoke:
        m.record = pending.write(c.name, c.revoke, got.value, got.expires)
    emit_minted = {"event": "credential", "action": "mint", "name": c.name,
                   "revoke": bool(c.revoke)}
    if got.expires:
        emit_minted["expires"] = got.expires
    emit(emit_minted)
    return got


def finish(rc: RunCredentials | None, *, warn: Warn, emit: Emit) -> None:
    """Revoke every minted value (each once; a failure keeps its record)."""
    if rc is None:
        return
    while rc.minted:
        m = rc.minted.pop(0)
        if not m.revoke:
            continue
        try:
            revoke_one(m.name, m.revoke, m.value)
        except ConfineError as e:
            emit({"event": "credential", "action": "revoke", "name": m.name,
                  "ok": False, "reason": str(e)})
            warn(f"{e}: the value stays valid; its record "
                 + (f"({m.record}) is kept and the next confine start tries again"
                    if m.record else "could not be written: revoke it by hand"))
            continue
        if m.record:
            pending.remove(m.record)
        emit({"event": "credential", "action": "revoke", "name": m.name, "ok": True})


def unreachable(creds: tuple[Credential, ...], network: object) -> list[str]:
    """A line for each bound host the network rules never let the agent reach (the
    value can never be sent there: a typo in one of the two lists, most likely)."""
    from ..gateway.rules import RuleError, Rules
    n: Any = network
    try:
        rules = Rules.parse(n.allow, n.deny, n.include, allowed_ips=n.allowed_ips)
    except RuleError:
        return []                       # the gateway says why when it starts
    out = []
    for c in creds:
        for t in c.targets:
            if t.host.startswith("*."):
                continue
            if not n.egress or not rules.decide(t.host, t.port).allowed:
                out.append(f"credential {c.name}: {target_text(t)} is not allowed by the "
                           "network rules, so the value is never sent there (add it to "
                           "network.allow)")
    return out


def check_exposure(creds: tuple[Credential, ...], grants: list[tuple[str, str]],
                   denied: tuple[str, ...] = ()) -> None:
    """Where a value rests must be out of the agent's reach: a minted value's record
    (pending.py), and a from_file's file (a grant of the profile that covers it
    would hand the agent the value itself). `denied`: paths carved out of every grant."""
    import os

    from ..paths import is_under
    for c in creds:
        if c.source != "file":
            continue
        path = os.path.realpath(c.ref[0])
        if any(is_under(path, d) for d in denied):
            continue
        for g, source in grants:
            if is_under(path, g):
                raise ConfineError(f"credential {c.name}: from_file {c.ref[0]} is readable by "
                                   f"the agent through {g} ({source}): the value would not be "
                                   "kept from it (move the file, or add it to filesystem.deny)")
    if not any(c.source == "mint" and c.revoke for c in creds):
        return
    why = pending.exposed_by(grants)
    if why is not None:
        raise ConfineError(f"the pending-revoke records ({pending.directory()}) would be "
                           f"readable by the agent through {why}: refusing to mint "
                           "credentials (narrow that grant)")
