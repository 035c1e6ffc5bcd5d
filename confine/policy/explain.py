"""What a refusal was, and the profile key or flag that would grant it.

Pure: no kernel, no run. The runtime turns what each layer reports (a
Landlock audit record, a reason string of the name guard or the mediator, a
gateway decision) into a `Refusal`, asks `grant()` what would allow it and
says `line()` once per `key()`; `confine explain` reads the JSON lines of
`--log FILE` back (`from_event`) and prints one profile snippet (`report`).

Threat: a suggestion is something a person copies into a profile without
thinking twice. So nothing confine never grants is ever suggested: a secret
(policy/secrets.py, a profile's `deny:`), a write runlater.py forbids (start-up
files, PATH directories, git's global config, system directories), confine's
own internal refusals, or git's hooks and config in the workdir. Those say
that they cannot be granted, and why.
"""
from __future__ import annotations

import fnmatch
import ipaddress
import os
import re
from collections.abc import Iterable, Mapping, Sequence

from ..paths import is_under
from ..record import dataclass
from . import runlater
from .secrets import HOME_SECRETS, SYSTEM_SECRETS

# Layers, as named in lines and logs.
LANDLOCK = "landlock"
GUARD = "name guard"
MEDIATION = "mediation"
READ_ONLY = "read-only bind"
READ_ONLY_HOST = "read-only host"
GATEWAY = "gateway"
SECCOMP = "seccomp"

# Landlock's blocker names (audit record field `blockers=`) -> the kind of refusal.
_READ_BLOCKERS = {"fs.read_file", "fs.read_dir", "fs.execute"}
_WRITE_BLOCKERS = {"fs.write_file", "fs.truncate", "fs.remove_dir", "fs.remove_file",
                   "fs.make_char", "fs.make_dir", "fs.make_reg", "fs.make_sock",
                   "fs.make_fifo", "fs.make_block", "fs.make_sym", "fs.refer",
                   "fs.resolve_unix"}

# Sockets that hand whoever connects root on the host: never suggested.
HOST_ROOT_SOCKETS = ("/var/run/docker.sock", "/run/docker.sock", "/run/containerd/*",
                     "/run/podman/podman.sock", "/var/run/podman/podman.sock",
                     "/run/systemd/private", "/run/dbus/system_bus_socket",
                     "/var/run/dbus/system_bus_socket", "/run/libvirt/*")


@dataclass(frozen=True)
class Refusal:
    """kind: read, write, device, bind_tcp, connect_tcp, unix_socket, protected,
    host, dns, scope, other. subject: the path, port, pattern or host refused.
    what: the refused action as said (e.g. "create .envrc")."""
    kind: str
    layer: str
    subject: str
    what: str
    pattern: str = ""        # protected: the pattern that protects the name


@dataclass(frozen=True)
class Grant:
    """key/value: the profile entry that grants it (value None: nothing to add);
    flag: the command-line form; cannot: why it cannot be granted (then no key);
    note: what granting it means, said beside the suggestion."""
    key: str = ""
    value: str | int | None = None
    flag: str = ""
    cannot: str = ""
    note: str = ""


# ------------------------------------------------------------------ building refusals

def from_landlock(fields: Mapping[str, str]) -> Refusal | None:
    """A Landlock audit record (type 1423: `blockers=`, `path=` or `src=`/`dest=`)."""
    blockers = fields.get("blockers", "").split(",")
    b = set(blockers)
    path = fields.get("path", "")
    if b & _READ_BLOCKERS and path:
        verb = "execute" if b == {"fs.execute"} else "read"
        return Refusal("read", LANDLOCK, path, f"{verb} {path}")
    if b & _WRITE_BLOCKERS and path:
        # a name made or removed is logged with its directory
        verb = ("create in" if any(x.startswith("fs.make_") for x in b)
                else "remove in" if any(x.startswith("fs.remove_") for x in b)
                else "write")
        return Refusal("write", LANDLOCK, path, f"{verb} {path}")
    if "fs.ioctl_dev" in b and path:
        return Refusal("device", LANDLOCK, path, f"ioctl on {path}")
    if "net.bind_tcp" in b:
        port = fields.get("src", "")
        return Refusal("bind_tcp", LANDLOCK, port, f"bind TCP port {port}")
    if "net.connect_tcp" in b:
        return connect_refusal(LANDLOCK, fields.get("dest", ""), fields.get("daddr", ""))
    if any(x.startswith("scope.") for x in blockers):
        return Refusal("scope", LANDLOCK, blockers[0],
                       "signal to a process outside the sandbox"
                       if "scope.signal" in b else "connect to an abstract unix socket outside")
    if blockers and blockers[0]:
        return Refusal("other", LANDLOCK, blockers[0], f"{blockers[0]} {path}".strip())
    return None


def connect_refusal(layer: str, port: str, addr: str = "") -> Refusal:
    """A refused TCP connect to `addr` (as the agent wrote it; "" unknown) port
    `port`. The agent's own loopback (or an unknown address) is `connect_tcp`;
    any other address is a host the profile does not name."""
    try:
        ip = ipaddress.ip_address(addr.strip("[]")) if addr else None
    except ValueError:
        ip = None
    if ip is not None and not (ip.is_loopback or ip.is_unspecified) and port.isdigit():
        shown = f"[{ip}]" if ip.version == 6 else str(ip)
        entry = shown if port == "443" else f"{shown}:{port}"
        return Refusal("host", layer, entry, f"connect to {shown}:{port}")
    return Refusal("connect_tcp", layer, port,
                   f"connect to TCP port {port}" + (f" on {addr}" if addr else ""))


# as strings: re compiles them for the first refusal (most runs have none)
_PROTECTED = r"protected path \(([^)]*)\)"
_BRINGS = r"(?:protected by|paths protected by) (\S+)"
_UNIX = r"^connect to unix socket (.*?)(?: \(-> (.*)\))?: outside the workdir"


def from_reason(reason: str) -> Refusal:
    """A refusal of the mediator or the name guard, from its reason string
    (mediation/files.py, protect/guard.py, mediation/supervisor.py)."""
    m = re.match(_UNIX, reason)
    if m:
        return Refusal("unix_socket", MEDIATION, m.group(2) or m.group(1), reason)
    if reason.startswith("a UDP socket (a DNS lookup"):
        return Refusal("dns", SECCOMP, "", reason)
    if reason.startswith("listen() on a TCP socket with no port bound"):
        return Refusal("bind_tcp", MEDIATION, "", reason)
    if "another name" in reason or "a file protected at start" in reason:
        return Refusal("other", GUARD, "", reason)
    m = re.search(_PROTECTED, reason)
    if m is None:
        m = re.search(_BRINGS, reason)
    if m is not None:
        pat = m.group(1)
        return Refusal("protected", GUARD, _subject(reason), reason, pat)
    return Refusal("other", GUARD if "protected" in reason else MEDIATION, "", reason)


def _subject(reason: str) -> str:
    """The path a guard reason names: `create a/.envrc: ...` -> a/.envrc."""
    head = reason.split(": ", 1)[0]
    return head.split(" ", 1)[1] if " " in head else head


def from_event(ev: Mapping[str, object]) -> tuple[Refusal, Grant] | None:
    """A refusal line of --log FILE back into (Refusal, Grant); None for any
    other event or a line that is not one of ours."""
    if ev.get("event") != "refusal" and ev.get("decision") != "deny":
        return None
    kind = str(ev.get("kind") or ("host" if ev.get("layer") == GATEWAY else "other"))
    subject = str(ev.get("subject") or ev.get("host") or "")
    r = Refusal(kind, str(ev.get("layer") or ""), subject, str(ev.get("what") or subject),
                str(ev.get("pattern") or ""))
    g = ev.get("grant")
    if isinstance(g, Mapping):
        value = g.get("value")
        return r, Grant(str(g.get("key") or ""),
                        value if isinstance(value, (str, int)) else None,
                        str(g.get("flag") or ""), str(g.get("cannot") or ""),
                        str(g.get("note") or ""))
    if kind == "host" and subject:
        port = ev.get("port")
        host = subject + (f":{port}" if isinstance(port, int) and port != 443 else "")
        return r, Grant("network.allow", host, f"--allow-host {host}")
    return r, Grant(cannot=r.what or "refused")


# ------------------------------------------------------------------ grants

def _secret(path: str, home: str, extra: Sequence[str] = ()) -> str | None:
    """The secret `path` lies in (as written in secrets.py), or None. A
    directory that only holds one is not: every grant has them carved out."""
    for t in HOME_SECRETS + SYSTEM_SECRETS + tuple(extra):
        p = runlater.expand_home(t, home) if t.startswith("~/") else t
        if is_under(path, p):
            return t
        if any(c in p for c in "*?[") and (fnmatch.fnmatchcase(path, p)
                                            or any(fnmatch.fnmatchcase(path[:i], p)
                                                   for i in range(len(path))
                                                   if path[i] == "/")):
            return t
    return None


def grant_root(path: str) -> str:
    """What to grant for a refused path: a git repository as a whole (git reads
    dozens of files in it, and one line for all of them), else the path."""
    parts = path.split("/")
    for i, c in enumerate(parts):
        if i == 0:
            continue
        if c == ".git":
            return "/".join(parts[:i]) or "/"
        if c.endswith(".git") and len(c) > 4:
            return "/".join(parts[:i + 1])
    return path


def _made(r: Refusal, parent: str, home: str, never: Sequence[tuple[str, str]]) -> str | None:
    """The path a refused creation (`create PATH`, the refusal's subject its
    directory) would make, when that path alone could be granted."""
    if not r.what.startswith("create /"):
        return None
    made = os.path.normpath(r.what[len("create "):])
    if os.path.dirname(made) != parent or grant_root(made) != made:
        return None
    return made if runlater.refusal(made, home, never, []) is None else None


def grant(r: Refusal, home: str, deny: Sequence[str] = (),
          never: Sequence[tuple[str, str]] | None = None) -> Grant:
    """What would allow `r`; home: the agent's home (for ~ in the secret and
    run-later lists); deny: the profile's own `deny:` paths; never: from
    runlater.never_writable(home) (computed here when not given)."""
    if r.kind in ("read", "write", "device"):
        path = os.path.normpath(r.subject) if r.subject else ""
        if not path.startswith("/"):
            return Grant(cannot=f"{r.what}: the path is not known")
        s = _secret(path, home, deny)
        if s is not None:
            return Grant(cannot=f"{path} is a secret ({s}): confine never grants it")
        root = grant_root(path)
        if r.kind == "device":
            return Grant("filesystem.devices", path, "",
                         note="a device node: grant only one you know")
        if r.kind == "read":
            return Grant("filesystem.read", root, f"--read {root}")
        if never is None:
            never = runlater.never_writable(home, "")
        why = runlater.refusal(root, home, never,
                               [(p, w) for p, _, w in runlater.read_only_entries(home)])
        if why is None and root != path:
            why = runlater.refusal(path, home, never, [])
        if why is not None:
            made = _made(r, path, home, never)
            if made is not None:
                # a new name in a directory nobody may grant (`git worktree add
                # ../wt` from a project in the home): the name itself may be
                return Grant("filesystem.write", made, f"--write {made}",
                             note=f"create it first, outside confine (mkdir -p {made}): a "
                                  f"grant needs an existing path, and --write {root} cannot "
                                  f"be granted ({why})")
            return Grant(cannot=f"--write {root} cannot be granted: {why}")
        return Grant("filesystem.write", root, f"--write {root}")
    if r.kind == "bind_tcp":
        if not r.subject or r.subject == "0":
            return Grant(cannot="listening needs a fixed port: bind one first, and grant it "
                                "with network.bind_tcp: [PORT]")
        port = int(r.subject) if r.subject.isdigit() else r.subject
        return Grant("network.bind_tcp", port, "",
                     note=f"add {port} to network.connect_tcp too to reach the server "
                          "from inside")
    if r.kind == "connect_tcp":
        # The agent's own loopback is not the host's (a network namespace of its
        # own): what it wanted there is most often the person's service on the host.
        if not r.subject.isdigit():
            return Grant(cannot=f"{r.what}: the port is not known")
        return Grant("network.allow", f"localhost:{r.subject}",
                     f"--allow-host localhost:{r.subject}",
                     note="the service on the host's loopback on that port; a server the "
                          f"agent runs itself needs network.connect_tcp: [{r.subject}] "
                          "(the agent's own loopback) instead")
    if r.kind == "unix_socket":
        for pat in HOST_ROOT_SOCKETS:
            if fnmatch.fnmatchcase(r.subject, pat):
                return Grant(cannot=f"{r.subject} hands whoever connects root on the host: "
                                    "confine does not suggest it")
        return Grant("unix_sockets.allow", r.subject, "")
    if r.kind == "protected" and r.pattern:
        comps = r.pattern.strip("/").split("/")
        # git's own files at any depth (a repository's literal from the snapshot,
        # old/.git/hooks, as much as the .git/hooks/ pattern): never suggested
        if ".git" in comps or comps[-1] == ".gitmodules" or any(
                c.endswith(".git") and len(c) > 4 for c in comps):
            return Grant(cannot=f"{r.pattern} is git's own (git runs it later, as you, "
                                "outside the sandbox): make that change outside confine")
        return Grant("protected", "!" + r.pattern, "",
                     note="it runs later outside the sandbox (direnv, the editor, the "
                          "agent's own tools): only in a workdir you trust")
    if r.kind == "host" and r.subject:
        return Grant("network.allow", r.subject, f"--allow-host {r.subject}")
    if r.kind == "dns":
        return Grant(note="--allow-host HOST (or network.allow: [HOST]) names a host the "
                          "agent may reach, through confine's gateway, which answers its "
                          "DNS lookups")
    if r.kind == "scope":
        key = "scope.signals" if "signal" in r.subject else "scope.abstract_unix"
        return Grant(key, "false", "", note="the agent then reaches the host's own "
                                            "processes or sockets")
    return Grant(cannot=_internal(r.what))


def _internal(what: str) -> str:
    if "git config" in what:
        return (f"{what} (git config keys off confine's safe list, git locations that are not "
                "network URLs and refspecs that force or delete are refused in every profile: "
                "make that change outside confine)")
    return f"{what} (confine refuses it in every profile)"


# ------------------------------------------------------------------ saying it

def key(r: Refusal, g: Grant) -> str:
    """One line per kind and path or port: a Landlock refusal by what would
    grant it (a clone refused a thousand files of one repository is one line),
    the rest by the path they name."""
    if g.key and r.layer in (LANDLOCK, READ_ONLY_HOST):
        return f"{r.kind}:{g.key}:{g.value}"
    return f"{r.kind}:{r.layer}:{r.subject or r.what}"


def suggestion(g: Grant) -> str:
    if g.cannot:
        return g.cannot
    if not g.key:
        return g.note       # no one entry grants it: what to name, said in words
    value = g.value
    entry = f"{g.key}: [{value if not isinstance(value, str) or value.isdigit() else _yaml(value)}]"
    if g.key.startswith("scope."):
        entry = f"{g.key}: {value}"
    s = (f"{g.flag} or {entry}" if g.flag else entry) + " grants it"
    return s + (f"; {g.note}" if g.note else "")


def line(r: Refusal, g: Grant) -> str:
    """The one line said the first time (the `confine:` prefix is the sink's)."""
    return f"denied: {r.what} [{r.layer}]: {suggestion(g)}"


def event(r: Refusal, g: Grant) -> dict[str, object]:
    """The fields of its --log line (events.Events adds time and event)."""
    out: dict[str, object] = {"kind": r.kind, "subject": r.subject, "what": r.what}
    if r.pattern:
        out["pattern"] = r.pattern
    gd: dict[str, object] = {}
    for k in ("key", "value", "flag", "cannot", "note"):
        v = getattr(g, k)
        if v not in ("", None):
            gd[k] = v
    out["grant"] = gd
    return out


def _yaml(s: str) -> str:
    """A string as a YAML scalar that reads back as itself."""
    if re.fullmatch(r"[A-Za-z0-9_/.~+-][A-Za-z0-9_/.:~+@-]*", s) and s[0] not in "?!&*":
        return s
    return "'" + s.replace("'", "''") + "'"


@dataclass(frozen=True)
class Report:
    grants: dict[str, list[str | int]]    # profile key -> values, in order of first refusal
    flags: list[str]                       # the command-line forms, where there are
    notes: list[str]
    cannot: list[str]                      # what cannot be granted (one line each)
    counts: dict[str, int]                 # by layer
    unseen: list[str]                      # why Landlock's own refusals are not in the log

    def to_dict(self) -> dict[str, object]:
        return {"grants": self.grants, "flags": self.flags, "notes": self.notes,
                "cannot": self.cannot, "refusals_by_layer": self.counts,
                "landlock_not_shown": self.unseen}


def report(events: Iterable[Mapping[str, object]], home: str | None = None) -> Report:
    """Every distinct refusal of a log: what to add, and what cannot be added.
    Each grant is judged again here (home: the reader's, default ~): a line
    that was altered after the run cannot make a secret or a run-later path
    suggested; the stricter of the two verdicts wins."""
    home = os.path.expanduser("~") if home is None else home
    never = runlater.never_writable(home, "")
    grants: dict[str, list[str | int]] = {}
    flags: list[str] = []
    notes: list[str] = []
    cannot: list[str] = []
    counts: dict[str, int] = {}
    unseen: list[str] = []
    for ev in events:
        if ev.get("event") == "notice" and ev.get("what") == "landlock refusals not shown":
            why = str(ev.get("why") or "")
            if why not in unseen:
                unseen.append(why)
            continue
        got = from_event(ev)
        if got is None:
            continue
        r, logged = got
        g = logged if logged.cannot else grant(r, home, never=never)
        if g.key and (g.key, g.value) != (logged.key, logged.value) and r.kind != "host":
            g = Grant(cannot=f"{r.what}: the log's suggestion does not match its refusal "
                             "(altered?)")
        counts[r.layer or "other"] = counts.get(r.layer or "other", 0) + 1
        if g.cannot:
            if g.cannot not in cannot:
                cannot.append(g.cannot)
            continue
        if not g.key or g.value is None:
            if g.note and g.note not in notes:
                notes.append(g.note)
            continue
        vals = grants.setdefault(g.key, [])
        if g.value not in vals:
            vals.append(g.value)
            if g.flag:
                flags.append(g.flag)
            note = f"{g.key}: {g.value}: {g.note}" if g.note else ""
            if note and note not in notes:
                notes.append(note)
    return Report(grants, flags, notes, cannot, counts, unseen)


def snippet(grants: Mapping[str, Sequence[str | int]]) -> str:
    """The grants as profile YAML (block lists: a value starting with `?` or
    `!` is quoted, so it reads back as the path or pattern it is)."""
    nested: dict[str, dict[str, list[str | int]]] = {}
    lists: dict[str, list[str | int]] = {}
    for k, vals in grants.items():
        if "." in k:
            top, sub = k.split(".", 1)
            nested.setdefault(top, {})[sub] = list(vals)
        else:
            lists[k] = list(vals)
    out: list[str] = []
    for top, subs in nested.items():
        out.append(f"{top}:")
        for sub, vals in subs.items():
            if top == "scope":
                out.append(f"  {sub}: {vals[-1]}")
                continue
            out.append(f"  {sub}:")
            out += [f"    - {_scalar(v)}" for v in vals]
    for top, vals in lists.items():
        out.append(f"{top}:")
        out += [f"  - {_scalar(v)}" for v in vals]
    return "\n".join(out) + ("\n" if out else "")


def _scalar(v: str | int) -> str:
    return str(v) if isinstance(v, int) else _yaml(v)


def enclosing_repo(workdir: str) -> str | None:
    """The repository root above `workdir` (a `.git` in a strict ancestor),
    when the workdir has no `.git` of its own; None otherwise."""
    wd = os.path.normpath(workdir)
    if os.path.lexists(os.path.join(wd, ".git")):
        return None
    cur = os.path.dirname(wd)
    while True:
        if os.path.lexists(os.path.join(cur, ".git")):
            return cur
        up = os.path.dirname(cur)
        if up == cur:
            return None
        cur = up
