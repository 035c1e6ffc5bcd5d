"""The Policy an exporter reads, and its paths in a host-independent form.

Exporters load profiles with the same loader as `confine exec`, but into
throw-away directories: the artefacts name the workdir, home and temp dir
through variables (AppArmor @{...}, SELinux types, systemd settings), so
nothing of the exporting machine leaks into them and the shipped files
regenerate byte for byte anywhere.

`load()` drops optional (`?`) grants whose path is missing on the machine that
loads the profile. An artefact deployed elsewhere must still allow them (a
profile exported before ~/.claude existed must not break Claude Code once it
does), so `with_optional()` puts them back from the same parsed layers. The
same for optional state roots (`filesystem.state_roots:`, ?~/.claude): the
loader makes one only where the directory exists, and the throw-away home never
has it, so without them every export of claude-code would lose the write
access to ~/.claude (the agent breaks) and the protection of the names in it
that run later (a hole).

Every exporter takes the writable paths from `writes()` (the write grants and
the state roots) and the state roots' protected names from `state_roots()`,
never from policy.write alone.
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from typing import Any

from ..errors import ConfineError
from ..policy import copied, stateroots
from ..policy import load as _load
from ..policy.model import PathGrant, Policy
from ..policy.patterns import compile_patterns, effective
from ..record import dataclass

ROOTS = ("workdir", "home", "tmp")


@dataclass(frozen=True)
class Spot:
    """A path as root + rest: root is "workdir", "home", "tmp" or None (absolute)."""
    root: str | None
    rest: str          # "" for the root itself, else starts with "/"

    def under(self, other: "Spot") -> bool:
        return self.root == other.root and (
            self.rest == other.rest or self.rest.startswith(other.rest.rstrip("/") + "/"))


def load_policy(profile: str) -> Policy:
    """The profile as `confine exec` sees it, with optional grants kept."""
    base = tempfile.mkdtemp(prefix="confine-export-")
    try:
        dirs = {}
        for name in ROOTS:
            dirs[name] = os.path.join(base, name)
            os.mkdir(dirs[name])
        policy = _load.load(profile, workdir=dirs["workdir"], home=dirs["home"], tmp=dirs["tmp"])
        return with_optional(policy)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def with_optional(policy: Policy) -> Policy:
    raw, _ = _load.read_layers(policy.sources[0])
    fs = raw.get("filesystem", {})
    vars = {"workdir": policy.workdir, "home": policy.home, "tmp": policy.tmp}
    out: dict[str, Any] = {}
    for key in ("read", "write", "devices"):
        grants = getattr(policy, key)
        out[key] = grants + tuple(
            PathGrant(path=path, template=template, source=it.where, optional=True)
            for _, it, template, path in _left_out(grants, fs.get(key, []), vars))
    roots = []
    for entry, it, template, path in _left_out(policy.state_roots, fs.get("state_roots", []), vars):
        # as stateroots.resolve: the profile's own read_only entries inside become
        # patterns of the root; a tree, as whether one is a directory is the
        # deploying machine's to know (a tree protects the name itself too)
        texts = [str(p.value) for p in entry["protected"]]
        pats = compile_patterns(texts)
        for g in policy.read_only:
            rel = None if g.source.startswith("built-in") else stateroots.uncovered(pats, path, g.path)
            if rel is not None:
                texts.append(stateroots.literal(rel, True))
                pats = compile_patterns(texts)
        roots.append(stateroots.StateRoot(path, path, template, it.where, tuple(p.text for p in pats)))
    copies = [copied.Copied(path, os.path.relpath(path, policy.home), template, it.where,
                            tuple(str(k.value) for k in entry.get("protected_keys", [])))
              for entry, it, template, path in _left_out(policy.copied, fs.get("copied", []), vars)]
    return dataclasses.replace(policy, state_roots=policy.state_roots + tuple(roots),
                               copied=policy.copied + tuple(copies), **out)


def _left_out(have: Iterable[Any], entries: Iterable[Any],
              vars: dict[str, str]) -> Iterator[tuple[Any, Any, str, str]]:
    """(entry, its path item, template, path) of each optional ('?') entry the loader
    left out (missing here); `have`: what it kept (anything with a `template`)."""
    seen = {h.template for h in have}
    for entry in entries:
        it = entry["path"] if isinstance(entry, dict) else entry
        text = str(it.value)
        template = text.lstrip("?")
        if text.startswith("?") and template not in seen:
            seen.add(template)
            yield entry, it, template, os.path.normpath(_load.expand(template, vars))


@dataclass(frozen=True)
class ProtectedRoot:
    """A state root as the exporters place it: writable as a whole, its
    protected names read-only."""
    spot: Spot
    template: str
    source: str                    # the profile line naming it
    own: tuple[str, ...]           # its own patterns (a leading "/" anchors at the root)
    patterns: tuple[str, ...]      # its own, then the workdir's: what confine exec
                                   # protects there (protect/roots.py)


def writes(policy: Policy) -> tuple[PathGrant, ...]:
    """The writable paths: the write grants, every state root and every copied file
    (once). A copied file (`filesystem.copied:`, ~/.claude.json) is given to a
    `confine exec` agent as a copy whose run-later keys are put back at exit; an
    exported profile has no such exit, so the file is granted as a write grant was
    (docs/export.md says what that leaves open)."""
    out = list(policy.write)
    have = {g.template for g in out}
    for r in policy.state_roots:
        if r.template not in have:
            have.add(r.template)
            out.append(PathGrant(path=r.path, template=r.template, source=r.source,
                                 optional=True))
    for c in policy.copied:
        if c.template not in have:
            have.add(c.template)
            out.append(PathGrant(path=c.path, template=c.template, source=c.source,
                                 optional=True))
    return tuple(out)


def state_roots(policy: Policy) -> tuple[ProtectedRoot, ...]:
    """The state roots, each with the patterns protected at it."""
    workdir = effective(policy)
    return tuple(ProtectedRoot(spot(r.template), r.template, r.source, r.patterns,
                               tuple(dict.fromkeys(r.patterns + workdir)))
                 for r in policy.state_roots)


def spot(template: str) -> Spot:
    """Where a profile's path template points, independent of this machine."""
    if template == "~" or template.startswith("~/"):
        return Spot("home", template[1:].rstrip("/"))
    for name in ROOTS:
        head = "{" + name + "}"
        if template == head or template.startswith(head + "/"):
            return Spot(name, template[len(head):].rstrip("/"))
    return Spot(None, os.path.normpath(template))


def spots(grant: PathGrant, policy: Policy) -> list[Spot]:
    """The template's spot, plus the resolved path when a symlink leads
    elsewhere (Landlock, AppArmor and SELinux all check the resolved path)."""
    s = spot(grant.template)
    out = [s]
    # procfs links (/proc/self) point at the exporting process: never resolve them.
    if s.root is None and not s.rest.startswith("/proc/") and os.path.lexists(s.rest):
        real = os.path.realpath(s.rest)
        if real != s.rest:
            out.append(Spot(None, real))
    return out


def deny_spots(policy: Policy) -> list[Spot]:
    """Secrets, once per template (globs stay globs). The loader keeps a glob only
    where it matched something on this host; a built-in secret's glob is a secret of
    every policy, matched or not: the generated files must not depend on what this
    host has (/etc/ssh/ssh_host_*_key exists once openssh-server is installed)."""
    from glob import has_magic

    from ..policy import secrets
    present = [g.template for g in policy.deny]
    builtin = [t for t in secrets.HOME_SECRETS + secrets.SYSTEM_SECRETS
               if has_magic(t) or t in present]
    return [spot(t) for t in dict.fromkeys(builtin + present)]


def drop_covered(items: list[tuple[Spot, str]]) -> list[tuple[Spot, str]]:
    """(spot, perms): drop entries below another entry with at least their perms."""
    out = []
    for i, (s, p) in enumerate(items):
        if any(j != i and s.under(t) and set(p) <= set(q) and (s != t or j < i)
               for j, (t, q) in enumerate(items)):
            continue
        out.append((s, p))
    return out


def check_workdir(workdir: str | None, required: bool = False) -> str | None:
    if workdir is None:
        if required:
            raise ConfineError("this export needs the workdir: pass -w DIR")
        return None
    if not os.path.isabs(workdir):
        raise ConfineError(f"workdir {workdir}: must be an absolute path")
    wd = os.path.normpath(workdir)
    if wd == "/" or any(c.isspace() or c in "\"'\\$`*?[]{}@,%" for c in wd):
        raise ConfineError(f"workdir {workdir}: not usable in a generated policy "
                           "(the root directory, or contains quotes, globs or variables)")
    return wd


def outbound_ports(policy: Policy) -> tuple[int, ...] | None:
    """The TCP ports the agent reaches other hosts on, for artefacts that filter
    by port and cannot by name (AppArmor, SELinux, NetworkPolicy, the unit's
    address families): the profile's connect_tcp, the port of each network.allow
    entry (443 unless it names one; the shipped sets are all 443) and DNS (53)
    when any host is allowed. None: an entry allows every port."""
    net = policy.network
    ports = set(net.connect_tcp)
    entries = list(net.allow)
    for e in entries:
        port = _entry_port(e)
        if port is None:
            return None
        ports.add(port)
    if entries or net.include or net.default == "ask":
        ports |= {443, 53}
    return tuple(sorted(ports))


def _entry_port(entry: str) -> int | None:
    """'host' -> 443, 'host:8443' -> 8443, '[v6/net]:80' -> 80, 'host:*' -> None;
    a bare IPv6 address or network (several colons, no brackets) -> 443."""
    if entry.startswith("["):
        _, _, tail = entry.partition("]")
        spec = tail[1:] if tail.startswith(":") else ""
    elif entry.count(":") == 1:
        spec = entry.split(":", 1)[1]
    else:
        spec = ""
    if spec == "*":
        return None
    return int(spec) if spec.isdigit() else 443


def bracket(comp: str, i: int) -> tuple[str, bool, int] | None:
    """The fnmatch character class that opens at comp[i] ("["), as (its members, negated,
    the index after its "]"), or None where fnmatch takes the "[" as a literal (no
    closing "]"). A "!" right after "[" negates; a "]" right after that is a member."""
    j = i + 1
    if j < len(comp) and comp[j] == "!":
        j += 1
    if j < len(comp) and comp[j] == "]":
        j += 1
    while j < len(comp) and comp[j] != "]":
        j += 1
    if j >= len(comp):
        return None
    body = comp[i + 1:j]
    return (body[1:], True, j + 1) if body.startswith("!") else (body, False, j + 1)

