"""AppArmor: the agent profile, the launcher profile and the tunables file.

The agent profile is a second, independent layer over the same Policy that
Landlock enforces: the same read/write/device grants, the same secrets denied,
no mount, ptrace or capabilities, no raw or packet sockets, TCP only when the
policy grants ports. AppArmor adds what Landlock cannot say: `deny` wins over
any allow, so the protected workdir paths (.git/hooks, .envrc, ...) stay
read-only inside a writable workdir, and on kernels that mediate unix sockets
the agent cannot connect to sockets outside its profile (docker.sock,
ssh-agent, the user's D-Bus).

The workdir and the launcher's private temp dirs are AppArmor variables
(@{CONFINE_WORKDIR}, @{CONFINE_TMP}) set in tunables/confine, so one profile
serves every workdir; `-w DIR` inlines them instead.

The agent profile has no attachment: `confine exec --apparmor NAME` enters it
with change_onexec before no_new_privs (under no_new_privs AppArmor refuses
transitions out of a confined profile). abstractions/base is not included: it
lets a profile write ~/.Private/** and the journal sockets, which the policy
does not.
"""
from __future__ import annotations

from ..errors import ConfineError
from ..policy.model import Policy
from ..policy.patterns import Pattern, compile_patterns, effective
from . import source
from .source import Spot

LAUNCHER = "confine"
VAR = {"workdir": "@{CONFINE_WORKDIR}", "tmp": "@{CONFINE_TMP}", "home": "@{HOME}"}
DEFAULT_WORKDIRS = "/srv/confine/*"
# confine's tempfile.mkdtemp(prefix="confine-", dir="/tmp").
TMP_DIRS = "/tmp/confine-*"
LAUNCHER_PATHS = "/opt/confine/bin/confine @{HOME}/.local/share/confine/bin/confine"
RAW_DEVICES = ("sd*", "hd*", "vd*", "xvd*", "nvme*", "mmcblk*", "loop*", "dm-*", "md*", "sr*",
               "sg*", "nbd*", "zram*", "ram*", "mtd*", "mem", "kmem", "port", "mapper/**",
               "disk/**", "bsg/**", "cpu/**")
PERMS = {"read": "mrix", "write": "mrwlkix", "devices": "rw"}


def profile_name(policy: Policy) -> str:
    return f"confine-{policy.name}"


def _path(s: Spot) -> tuple[str, str]:
    """(qualifier, AppArmor path) for a spot; files owned by the agent's user only
    where the policy means the agent's own home or /proc/self."""
    if s.root is not None:
        return ("owner " if s.root == "home" else ""), VAR[s.root] + s.rest
    for self_dir in ("/proc/self", "/proc/thread-self"):
        if s.rest == self_dir or s.rest.startswith(self_dir + "/"):
            return "owner ", "@{PROC}/@{pid}" + s.rest[len(self_dir):]
    return "", s.rest


def _quote(p: str) -> str:
    return f'"{p}"' if any(c.isspace() for c in p) else p


def _tree(p: str) -> str:
    # "/**" needs at least one character, so the directory itself is listed.
    return _quote(p + "{,/,/**}")


def _grant_lines(policy: Policy) -> list[str]:
    items: list[tuple[Spot, str]] = []
    grants = {"read": policy.read, "write": source.writes(policy), "devices": policy.devices}
    for kind, gs in grants.items():
        for g in gs:
            for s in source.spots(g, policy):
                items.append((s, PERMS[kind]))
    out = []
    roots = {r.spot for r in source.state_roots(policy)}
    for s, perms in source.drop_covered(items):
        owner, p = _path(s)
        if (s.root in ("workdir", "tmp") and not s.rest) or s in roots:
            # Like Landlock, rights inside the directory, not over the directory
            # itself (removing or renaming it is up to its parent): a state root
            # renamed away could be replaced by a prepared one holding hooks.
            out += [f"  {owner}{_quote(p + '/')} r,", f"  {owner}{_quote(p + '/**')} {perms},"]
        else:
            out.append(f"  {owner}{_tree(p)} {perms},")
    return out


def _deny_lines(policy: Policy) -> list[str]:
    out = []
    for s in source.deny_spots(policy):
        _, p = _path(s)  # deny for every owner
        out.append(f"  deny {_tree(p)} mrwlkx,")
    return out


# Where git directories live inside a .git directory (AppArmor alternation).
GIT_DIRS = "{,modules/**/,worktrees/*/,modules/**/worktrees/*/}"
# Special in an AppArmor path (outside a character class), literal in a pattern.
_AARE_SPECIAL = frozenset('{}[]*?\\,"^')


def _glob(comp: str) -> str:
    """One pattern component (fnmatch: `*`, `?`, `[...]`, `[!...]`) as an
    AppArmor glob matching the same names; everything else literal."""
    out, i, n = [], 0, len(comp)
    while i < n:
        c = comp[i]
        if c in "*?":
            out.append(c)
            i += 1
            continue
        if c == "[" and (cls := source.bracket(comp, i)) is not None:
            body, neg, i = cls
            out.append("[" + ("^" if neg else "")
                       + "".join("\\" + ch if ch in '\\[]^"' else ch for ch in body) + "]")
            continue
        out.append("\\" + c if c in _AARE_SPECIAL else c)
        i += 1
    return "".join(out)


def _where(p: Pattern, comps: tuple[str, ...], base: str) -> str:
    """The AppArmor path of comps (the first components of p) in the root `base`:
    at its top when p is anchored, else at any depth; inside every git
    directory, submodule and worktree ones included, when p is a git pattern."""
    out = f"{base}/" + ("" if p.anchored else "{,**/}")
    if p.git:
        out += ".git/" + GIT_DIRS
    return out + "/".join(_glob(c) for c in comps)


def _protected_lines(policy: Policy) -> list[str]:
    """deny write and link on every protected pattern of the policy
    (patterns.effective: the defaults and the profile's own `protected:`) in
    the workdir, and on a state root's patterns (its own and the workdir's,
    as confine exec protects them there) at that root."""
    out = _protected_at(VAR["workdir"], effective(policy))
    for r in source.state_roots(policy):
        out.append(f"  # {r.template}, a state root ({r.source}): writable, but not what runs later.")
        # AppArmor checks mkdir as it checks a rename onto the name, where a prepared
        # tree would arrive unchecked; confine exec tells them apart, this cannot.
        holders = sorted({"/".join(p.comps[:k]) + "/" for p in compile_patterns(r.own)
                          if p.anchored and not p.git for k in range(1, len(p.comps))})
        if holders:
            out.append(f"  # Not created here (make them before the run): {', '.join(holders)}")
        out += _protected_at(_path(r.spot)[1], r.patterns)
    return out


def _protected_at(w: str, texts: tuple[str, ...]) -> list[str]:
    pats = compile_patterns(texts)
    for p in pats:
        if any(ord(ch) < 32 or ord(ch) == 127 for ch in p.text):
            # a newline would end the rule and start another one
            raise ConfineError(f"protected pattern {p.text!r}: control characters cannot be "
                               "written into an AppArmor profile")
    # Renaming a prepared directory onto one that holds a protected path would
    # plant it without writing any protected path, so those directories are
    # protected as directories (the files inside them stay writable), and as a
    # file or symlink too (".git" holding "gitdir: ...").
    dirs: dict[str, str] = {}
    for p in pats:
        if p.git:
            dirs.setdefault(".git/", f"{w}/{{,**/}}.git")
        for k in range(1, len(p.comps)):
            key = (".git/" if p.git else "/" if p.anchored else "") + "/".join(p.comps[:k]) + "/"
            dirs.setdefault(key, _where(p, p.comps[:k], w))
    out = [f"  deny {_quote(d + '{,/}')} wl," for _, d in sorted(dirs.items())]
    # The same for the git directories of submodules and worktrees, and the
    # directories holding them.
    out.append(f"  deny {w}/{{,**/}}.git/{{,modules/**/}}{{modules,worktrees}}/{{,*/}} wl,")
    for p in pats:
        out.append(f"  deny {_quote(_where(p, p.comps, w) + ('{,/,/**}' if p.tree else ''))} wl,")
    return out


def _network_lines(policy: Policy) -> list[str]:
    out = ["  network unix,", "  network netlink raw,", "  network netlink dgram,"]
    if policy.network.connect_tcp or policy.network.bind_tcp or policy.network.egress:
        ports = ", ".join(map(str, policy.network.connect_tcp)) or "none"
        binds = ", ".join(map(str, policy.network.bind_tcp)) or "none"
        out.append(f"  # TCP only; ports are Landlock's job (connect: {ports}; bind: {binds}).")
        out += ["  network inet stream,", "  network inet6 stream,"]
        if policy.network.egress:
            out += ["  # Other hosts by name through confine's egress gateway on loopback, and",
                    "  # DNS to it over UDP (the gateway decides; this profile cannot by name).",
                    "  network inet dgram,", "  network inet6 dgram,"]
    else:
        out.append("  # No TCP: the policy grants no ports.")
    out += ["  deny network inet raw,", "  deny network inet6 raw,", "  deny network packet,"]
    return out


def _ipc_lines(policy: Policy) -> list[str]:
    if policy.scope.signals:
        sig = ["  # Signals only within the sandbox, and from the launcher.",
               "  signal (send, receive) peer=@{profile_name},",
               "  signal (receive) peer=unconfined,",
               f"  signal (receive) peer={LAUNCHER},"]
    else:
        sig = ["  signal,"]
    unix = ["  unix (create, bind, listen, getattr, getopt, setopt, shutdown),"]
    if policy.scope.abstract_unix:
        unix += ["  # Connect only to sockets of the sandbox; inherited sockets (journal,",
                 "  # a parent's socketpair) stay usable.",
                 "  unix peer=(label=@{profile_name}),",
                 "  unix (send, receive) peer=(label=unconfined),",
                 f"  unix (send, receive) peer=(label={LAUNCHER}),"]
    else:
        unix += ["  unix,"]
    return sig + unix + ["  ptrace (read, trace, readby, tracedby) peer=@{profile_name},"]


def _header(command: str) -> list[str]:
    return [f"# Generated by `{command}`. Do not edit; regenerate instead.",
            "# Deployment: docs/export.md."]


def tunables(workdir: str | None = None) -> str:
    value = workdir or DEFAULT_WORKDIRS
    return "\n".join([
        "# confine: AppArmor variables for the confine profiles.",
        "# @{CONFINE_WORKDIR}: the directories agents may write (globs allowed).",
        "# Add more with a file in tunables/confine.d/ holding e.g.",
        "#   @{CONFINE_WORKDIR}+=/home/*/src/*",
        f"@{{CONFINE_WORKDIR}}={value}",
        "# The launcher's private temp dir for each run.",
        f"@{{CONFINE_TMP}}={TMP_DIRS}",
        "# Where `confine` is installed (root: /opt/confine, user: ~/.local/share/confine).",
        f"@{{CONFINE_LAUNCHER}}={LAUNCHER_PATHS}",
        "include if exists <tunables/confine.d>",
        "",
    ])


def agent_profile(policy: Policy, *, name: str | None = None, workdir: str | None = None,
                  command: str = "confine export apparmor") -> str:
    name = name or profile_name(policy)
    lines = _header(command) + [
        f"# Agent profile for the confine profile {policy.name!r}: {policy.description}",
        "abi <abi/3.0>,",
        "include <tunables/global>",
    ]
    if workdir:
        lines += [f"@{{CONFINE_WORKDIR}}={workdir}", f"@{{CONFINE_TMP}}={TMP_DIRS}"]
    else:
        lines += ["include <tunables/confine>"]
    lines += [
        "",
        f"profile {name} flags=(attach_disconnected) {{",
        "  # Read and execute (filesystem.read), write (filesystem.write and the",
        "  # workdir and temp dir), devices (filesystem.devices).",
        *_grant_lines(policy),
        "",
        "  # Secrets: never readable or writable, whatever else allows.",
        *_deny_lines(policy),
        "",
        "  # Workdir files that run code later, outside the sandbox.",
        *_protected_lines(policy),
        "",
        "  # Raw devices and kernel interfaces.",
        f"  deny /dev/{{{','.join(RAW_DEVICES)}}} rwlk,",
        "  deny @{PROC}/sys/** w,",
        "  deny /sys/** w,",
        "  deny @{PROC}/sysrq-trigger rw,",
        "  deny @{PROC}/kcore r,",
        "  deny /{,var/}run/docker.sock rw,",
        "",
        "  deny capability,",
        "  deny mount,",
        "  deny remount,",
        "  deny umount,",
        "  deny pivot_root,",
        "  deny ptrace (trace) peer=unconfined,",
        *_ipc_lines(policy),
        *_network_lines(policy),
        "",
        f"  include if exists <local/{name}>",
        "}",
        "",
    ]
    return "\n".join(lines)


def launcher_profile(command: str = "confine export apparmor --part launcher") -> str:
    """Unconfined apart from permission to create user namespaces, which
    Ubuntu 23.10+ (kernel.apparmor_restrict_unprivileged_userns=1) denies to
    unconfined programs. The `userns` rule needs AppArmor 4 (abi 4.0); older
    releases do not restrict user namespaces and need no launcher profile.
    flags=(unconfined) keeps change_onexec into the agent profile legal under
    no_new_privs, as from an unconfined process."""
    return "\n".join(_header(command) + [
        "# Launcher profile: lets `confine` create user namespaces on systems that",
        "# restrict them (AppArmor 4, Ubuntu 23.10 and later). Not needed elsewhere.",
        "abi <abi/4.0>,",
        "include <tunables/global>",
        "include <tunables/confine>",
        "",
        f"profile {LAUNCHER} @{{CONFINE_LAUNCHER}} flags=(unconfined) {{",
        "  userns,",
        "",
        f"  include if exists <local/{LAUNCHER}>",
        "}",
        "",
    ])
