"""systemd: a .service that runs `confine exec` inside the equivalent systemd sandbox.

The unit is a second layer around the launcher, built from the same Policy:
the filesystem is read-only except the workdir and the policy's other
writable paths, $HOME is an empty tmpfs with only the granted files bound in,
secrets are inaccessible, there are no capabilities, devices, kernel knobs or
namespaces, no network at all when the policy grants no TCP port, and a
system call allow-list. It must leave the launcher what it needs: prctl,
capset (to empty its already empty sets), landlock_*, seccomp, fork/wait and
/proc. The service runs as the agent's account, so confine never needs root
(and therefore no setuid/setgroups).

Not expressible in a unit: dropping the account's supplementary groups
(systemd adds them with initgroups); a Landlock-like port list for outbound
TCP (IPAddressAllow= filters addresses, not ports). Both stay the launcher's
job; `confine export systemd` warns about the groups.
"""
from __future__ import annotations

import glob
import grp
import os
import pwd
import re

from ..errors import ConfineError
from ..policy.model import Policy
from ..policy.patterns import Pattern, compile_patterns, effective
from . import source

# Syscalls the launcher needs beyond @system-service: Landlock and seccomp(2)
# have no systemd group in v252; capset (emptying its own, already empty, sets)
# sits in @privileged and pidfd_getfd (taking the sockets it mediates from the
# agent) in @debug, both otherwise denied.
# process_vm_readv: the supervisor copies the paths and addresses of mediated calls.
LAUNCHER_SYSCALLS = ("capset", "landlock_create_ruleset", "landlock_add_rule",
                     "landlock_restrict_self", "seccomp", "pidfd_getfd", "process_vm_readv")
DENIED_GROUPS = ("@clock", "@cpu-emulation", "@debug", "@module", "@mount", "@obsolete",
                 "@privileged", "@raw-io", "@reboot", "@resources", "@swap")
# Cloud metadata endpoints: never needed by an agent, full of credentials.
METADATA = ("169.254.0.0/16", "fd00:ec2::254/128")
SOCKETS = ("/run/docker.sock", "/run/containerd", "/run/podman", "/run/dbus/system_bus_socket")
HIDDEN_ROOTS = ("/home", "/root", "/run/user")


def quote(arg: str) -> str:
    """One ExecStart= word: systemd expands % specifiers and $ variables, so escape them."""
    s = arg.replace("%", "%%").replace("$", "$$")
    if s and not any(c in s for c in " \t\n\"'\\;"):
        return s
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _path_value(p: str) -> str:
    if any(c.isspace() for c in p) or "%" in p:
        raise ConfineError(f"path {p!r} cannot be used in a unit file setting")
    return p


def _protected_lines(policy: Policy, workdir: str, home: str) -> list[str]:
    """ReadOnlyPaths= for the policy's protected patterns (patterns.effective:
    the defaults and the profile's own `protected:`), at the top of the
    workdir and of its top git directory, and for each state root's (its own
    and the workdir's) at the top of that root: systemd binds paths that exist
    at start, with no globs and no "at any depth", so the launcher inside covers
    the rest; patterns it cannot name at all are listed in a comment."""
    out, unnamed = _protected_at(workdir, effective(policy))
    if unnamed:
        out.append("# Protected by confine only (a glob, a space or % in the name): "
                   + ", ".join(unnamed))
    for r in source.state_roots(policy):
        base = {"home": home, "workdir": workdir, None: ""}.get(r.spot.root)
        if base is None:
            raise ConfineError(f"state root {r.template} ({r.source}): not placeable in a unit")
        lines, unnamed = _protected_at(base + r.spot.rest, r.patterns)
        out += lines
        if unnamed:
            out.append(f"# In {r.template} (a state root), protected by confine only (a glob, "
                       "a space or % in the name): " + ", ".join(unnamed))
    return out


def _protected_at(root: str, texts: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """(ReadOnlyPaths= lines, patterns a unit cannot name) for patterns at `root`."""
    pats = compile_patterns(texts)
    named: list[Pattern] = []
    unnamed: list[str] = []
    for p in pats:
        if any(ord(ch) < 32 or ord(ch) == 127 for ch in p.text):
            # a newline would end the setting and start another one
            raise ConfineError(f"protected pattern {p.text!r}: control characters cannot be "
                               "written into a unit file")
        if any(p.wild(i) for i in range(len(p.comps))) or any(c.isspace() or c == "%"
                                                              for c in p.text):
            unnamed.append(p.text)
        else:
            named.append(p)
    out = [f"ReadOnlyPaths=-{_path_value(os.path.join(root, *p.comps))}"
           for p in named if not p.git]
    out += [f"ReadOnlyPaths=-{_path_value(os.path.join(root, '.git', *p.comps))}"
            for p in named if p.git]
    return out, unnamed


def _hidden(path: str) -> bool:
    return any(path == r or path.startswith(r + "/") for r in HIDDEN_ROOTS)


def account(user: str | None, workdir: str) -> pwd.struct_passwd:
    try:
        if user is None:
            st = os.stat(workdir)
            pw = pwd.getpwuid(st.st_uid)
        elif user.isdigit():
            pw = pwd.getpwuid(int(user))
        else:
            pw = pwd.getpwnam(user)
    except FileNotFoundError:
        raise ConfineError(f"workdir {workdir} does not exist; create it or pass --user") from None
    except KeyError:
        raise ConfineError(f"no such user: {user if user is not None else 'owner of ' + workdir}") from None
    if pw.pw_uid == 0:
        raise ConfineError("the agent would run as root: the unit runs it as the workdir's owner "
                           "(or --user USER), which must not be root")
    return pw


def supplementary_groups(pw: pwd.struct_passwd) -> list[str]:
    return sorted(g.gr_name for g in grp.getgrall()
                  if pw.pw_name in g.gr_mem and g.gr_gid != pw.pw_gid)


def _rendered(policy: Policy, grants, home: str, workdir: str) -> list[str]:
    out = []
    for g in grants:
        s = source.spot(g.template)
        if s.root == "home":
            out.append(home + s.rest)
        elif s.root == "workdir":
            out.append(workdir + s.rest)
        elif s.root is None:
            out.append(s.rest)
    return out


def unit(policy: Policy, *, name: str, workdir: str, argv: list[str], confine: str,
         profile_ref: str, user: str | None = None, allow_ip: tuple[str, ...] = (),
         env_file: str | None = None, memory_deny_write_execute: bool = False,
         command: str = "confine export systemd") -> str:
    if not argv:
        raise ConfineError("no command: confine export systemd NAME -p PROFILE -w DIR -- CMD")
    pw = account(user, workdir)
    home = pw.pw_dir
    # The unit runs confine exec, whose gateway decides host names: the launcher
    # (not the agent) needs the network whenever the agent reaches anything.
    network = bool(policy.network.connect_tcp or policy.network.bind_tcp
                   or policy.network.egress)
    # RestrictNamespaces= below forbids the launcher's own mount namespace; the
    # unit provides the read-only host itself (ProtectSystem=strict, PrivateDevices=,
    # ReadOnlyPaths= for the protected workdir paths), so that one protection is
    # delegated by name, nothing else.
    exec_words = [confine, "exec", "-p", profile_ref, "-w", workdir,
                  "--degrade", "mount_namespace", "--", *argv]

    reads = [p for p in _rendered(policy, policy.read, home, workdir) if _hidden(p)]
    reads += [p for p in policy.sources if _hidden(p)]  # a profile file under $HOME
    writes = _rendered(policy, source.writes(policy), home, workdir)
    bind_rw = [workdir] + [p for p in writes if _hidden(p) and p != workdir]
    rw_paths = [p for p in writes if not _hidden(p) and p not in (workdir, "/dev/shm")]
    launcher_home = []
    real = os.path.realpath(confine)
    if _hidden(real):  # a per-user install under ~/.local/share/confine
        launcher_home.append(os.path.dirname(os.path.dirname(real)))

    secrets = []
    for s in source.deny_spots(policy):
        if s.root is None:
            secrets += sorted(glob.glob(s.rest)) if glob.has_magic(s.rest) else [s.rest]
        elif s.root == "home":
            p = home + s.rest
            if any(p == b or p.startswith(b + "/") for b in bind_rw + reads):
                secrets.append(p)

    L = [f"# Generated by `{command}`. Deployment: docs/export.md.",
         "# ExecStart runs confine (Landlock, seccomp, no capabilities); the settings below",
         "# enforce the same policy a second time, around the launcher.",
         "[Unit]",
         f"Description=confine agent {name} ({policy.name} profile)"]
    if network:
        L += ["Wants=network-online.target", "After=network-online.target"]
    L += ["", "[Service]", "Type=exec",
          f"User={pw.pw_name}",
          f"Group={grp.getgrgid(pw.pw_gid).gr_name}",
          f"WorkingDirectory={_path_value(workdir)}",
          "ExecStart=" + " ".join(quote(w) for w in exec_words)]
    # ProtectHome=tmpfs leaves no HOME to keep the agent's own home in: a state
    # directory of the unit's own holds it (runtime/home.py, via XDG_STATE_HOME).
    state = "confine-agent-" + re.sub(r"[^A-Za-z0-9_.-]", "_", name).lstrip(".")
    L += [f"StateDirectory={state}", "StateDirectoryMode=0700",
          f"Environment=XDG_STATE_HOME=/var/lib/{state}"]
    if env_file:
        L.append(f"EnvironmentFile={_path_value(env_file)}")
    elif policy.env.passthrough:
        L.append("# The profile passes these from the environment: "
                 + ", ".join(policy.env.passthrough) + " (EnvironmentFile=, --env-file)")
    L += ["", "# Identity and privileges",
          "NoNewPrivileges=yes", "CapabilityBoundingSet=", "AmbientCapabilities=",
          "SecureBits=noroot-locked", "RestrictSUIDSGID=yes", "KeyringMode=private",
          "LockPersonality=yes", "RestrictRealtime=yes", "RemoveIPC=yes", "UMask=0077",
          "LimitCORE=0"]
    if memory_deny_write_execute:
        L.append("MemoryDenyWriteExecute=yes")
    L += ["", "# Filesystem: read-only system, writable workdir, empty $HOME with the granted files",
          "ProtectSystem=strict", "ProtectHome=tmpfs", "PrivateTmp=yes", "PrivateDevices=yes",
          "DevicePolicy=closed", "PrivateIPC=yes", "PrivateMounts=yes", "PrivateUsers=yes",
          "ProtectProc=invisible", "ProtectKernelTunables=yes", "ProtectKernelModules=yes",
          "ProtectKernelLogs=yes", "ProtectControlGroups=yes", "ProtectClock=yes",
          "ProtectHostname=yes"]
    L += [f"BindPaths={_path_value(p)}" if p == workdir else f"BindPaths=-{_path_value(p)}"
          for p in bind_rw]
    L += [f"ReadWritePaths=-{_path_value(p)}" for p in rw_paths]
    L += [f"BindReadOnlyPaths=-{_path_value(p)}" for p in reads + launcher_home]
    L += _protected_lines(policy, workdir, home)
    L += [f"InaccessiblePaths=-{_path_value(p)}" for p in secrets + list(SOCKETS)]
    L += ["", "# System calls: the service allow-list minus privileged groups, plus what the",
          "# launcher needs to confine the agent",
          "SystemCallArchitectures=native",
          "SystemCallFilter=@system-service",
          "SystemCallFilter=~" + " ".join(DENIED_GROUPS),
          "SystemCallFilter=" + " ".join(LAUNCHER_SYSCALLS),
          "SystemCallErrorNumber=EPERM",
          "RestrictNamespaces=yes", "", "# Network"]
    if network:
        conn = ", ".join(map(str, policy.network.connect_tcp)) or "none"
        hosts = ", ".join(list(policy.network.allow) + [f"set {i}" for i in policy.network.include])
        L += [f"# TCP ports of the agent's own loopback (connect: {conn}) are enforced by "
              "confine (Landlock);"]
        L += [f"# other hosts only through confine's gateway, by name: {hosts or 'none'}"
              + (" (others asked)" if policy.network.default == "ask" else "") + ".",
              "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK"]
        if allow_ip:
            L += ["IPAddressDeny=any"] + [f"IPAddressAllow={ip}" for ip in allow_ip]
        else:
            L += ["IPAddressDeny=" + " ".join(METADATA)]
        L += ["SocketBindDeny=any"]
        L += [f"SocketBindAllow=tcp:{p}" for p in policy.network.bind_tcp]
    else:
        L += ["PrivateNetwork=yes", "RestrictAddressFamilies=AF_UNIX", "IPAddressDeny=any"]
    L += ["", "[Install]", "WantedBy=multi-user.target", ""]
    return "\n".join(L)
