"""`confine export`: print a profile as AppArmor, SELinux, systemd, OCI seccomp or
Kubernetes policy. Parsing and output only; each format lives in its own module."""
from __future__ import annotations

import os
import re
import shlex
import shutil
import sys

import click

from ..errors import ConfineError
from ..export import apparmor, k8s, oci, selinux, source, systemd
from ..policy import load as _load

_profile = click.option("-p", "--profile", default="default", show_default=True,
                        metavar="NAME|FILE", help="Built-in profile name or a YAML file.")
_output = click.option("-o", "--output", metavar="PATH",
                       help="Write here instead of stdout (a directory, or a path ending in "
                            "'/', receives every file of a multi-file format).")


def _is_dir(output: str | None) -> bool:
    return bool(output) and (output.endswith("/") or os.path.isdir(output))


AA_DIR = "/etc/apparmor.d"


def _write(output: str | None, files: dict[str, str], default: str) -> None:
    """stdout, one file, or (for a directory) every file under its relative name."""
    if not output:
        click.echo(files[default], nl=False)
        return
    targets = ({os.path.join(output, n): t for n, t in files.items()} if _is_dir(output)
               else {output: files[default]})
    for path, text in targets.items():
        try:
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            tmp = f"{path}.tmp-{os.getpid()}"
            with open(tmp, "w") as f:
                f.write(text)
            os.replace(tmp, path)
        except OSError as e:
            raise ConfineError(f"cannot write {path}: {e.strerror}") from None


def _cmd(fmt: str, *args: str) -> str:
    return " ".join(["confine", "export", fmt, *(shlex.quote(x) for x in args)])


@click.group("export")
def export():
    """Write a profile as policy for other enforcement points.

    \b
    confine export apparmor -o /etc/apparmor.d/     agent + launcher profiles, tunables
    confine export selinux -o ./confine_agent/     SELinux policy module sources
    confine export systemd NAME -w DIR -- CMD      a hardened .service running confine
    confine export oci-seccomp                     Docker/containerd/CRI-O seccomp JSON
    confine export k8s --image IMG -- CMD          Pod + NetworkPolicy

    The output reads the same Policy as `confine exec` (docs/export.md).
    """


@export.command("apparmor")
@_profile
@click.option("-w", "--workdir", metavar="DIR",
              help="Pin the workdir in the profile (default: @{CONFINE_WORKDIR} from "
                   "tunables/confine, so one profile serves every workdir).")
@click.option("--part", type=click.Choice(["agent", "launcher", "tunables"]), default="agent",
              show_default=True, help="Which file to print (a directory -o gets all three).")
@click.option("--name", metavar="NAME", help="Profile name (default: confine-PROFILE).")
@_output
def apparmor_cmd(profile, workdir, part, name, output):
    """AppArmor profiles: the agent's (enter it with `confine exec --apparmor NAME`), the
    launcher's (user namespaces on Ubuntu 23.10+) and the tunables they share."""
    wd = source.check_workdir(workdir)
    policy = source.load_policy(profile)
    name = name or apparmor.profile_name(policy)
    cmd = _cmd("apparmor", "-p", profile, *(["-w", wd] if wd else []))
    files = {name: apparmor.agent_profile(policy, name=name, workdir=wd, command=cmd),
             apparmor.LAUNCHER: apparmor.launcher_profile(command=cmd + " --part launcher"),
             "tunables/confine": apparmor.tunables(wd)}
    default = {"agent": name, "launcher": apparmor.LAUNCHER, "tunables": "tunables/confine"}[part]
    has_abi4 = any(os.path.exists(os.path.join(d, "abi", "4.0"))
                   for d in ([output] if output and _is_dir(output) else []) + [AA_DIR])
    if output and _is_dir(output) and not has_abi4:
        # AppArmor 3 (Debian 12, Ubuntu 22.04) cannot parse the launcher's `abi <abi/4.0>`
        # and `userns`, and a file it cannot parse in /etc/apparmor.d breaks the reload
        # of every profile there; it does not restrict user namespaces, so none is needed.
        del files[apparmor.LAUNCHER]
        click.echo(f"confine: note: no launcher profile written: this AppArmor has no abi 4.0 "
                   f"({AA_DIR}/abi/4.0), so it does not restrict user namespaces and needs "
                   "none (`--part launcher -o FILE` writes it for a host with AppArmor 4)",
                   err=True)
    elif part == "launcher" and not has_abi4:
        click.echo("confine: note: the launcher profile needs AppArmor 4 (abi 4.0), which "
                   "this host lacks: load it only where AppArmor 4 restricts user namespaces",
                   err=True)
    if part == "agent" and not wd and not (output and _is_dir(output)) \
            and not os.path.exists(os.path.join(AA_DIR, "tunables", "confine")):
        click.echo(f"confine: note: this profile includes <tunables/confine>, not installed "
                   f"in {AA_DIR}: `confine export apparmor --part tunables -o "
                   f"{AA_DIR}/tunables/confine` installs it (or -o {AA_DIR}/ writes all the "
                   "files; -w DIR pins one workdir in the profile instead)", err=True)
    _write(output, files, default)


@export.command("selinux")
@_profile
@click.option("-w", "--workdir", metavar="DIR",
              help="Label this directory as the workdir in the .fc file (default: /srv/confine).")
@click.option("--part", type=click.Choice(["te", "fc", "if", "plain-te", "plain-fc"]),
              default="te", show_default=True,
              help="Which file to print; plain-* build without the refpolicy headers "
                   "(a directory -o gets all five).")
@_output
def selinux_cmd(profile, workdir, part, output):
    """SELinux policy module (confine_agent_t) for the refpolicy devel Makefile or
    checkmodule/semodule_package."""
    wd = source.check_workdir(workdir)
    policy = source.load_policy(profile)
    files = selinux.parts(policy, wd, _cmd("selinux", "-p", profile, *(["-w", wd] if wd else [])))
    m = selinux.MODULE
    default = {"te": f"{m}.te", "fc": f"{m}.fc", "if": f"{m}.if",
               "plain-te": f"plain/{m}.te", "plain-fc": f"plain/{m}.fc"}[part]
    _write(output, files, default)


@export.command("systemd", context_settings={"ignore_unknown_options": False})
@click.argument("name")
@_profile
@click.option("-w", "--workdir", required=True, metavar="DIR", help="The agent's workdir.")
@click.option("--user", metavar="USER",
              help="Account the service runs as (default: the workdir's owner; never root).")
@click.option("--confine", "confine_path", metavar="PATH",
              help="The confine executable (default: the one running this command).")
@click.option("--allow-ip", multiple=True, metavar="CIDR",
              help="Only these addresses are reachable (IPAddressDeny=any + IPAddressAllow=); "
                   "for profiles that grant TCP ports.")
@click.option("--env-file", metavar="FILE", help="EnvironmentFile= with the variables the "
                                                  "profile passes (API keys).")
@click.option("--memory-deny-write-execute", is_flag=True,
              help="Add MemoryDenyWriteExecute= (breaks JITs: node, java, luajit).")
@_output
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def systemd_cmd(name, profile, workdir, user, confine_path, allow_ip, env_file,
                memory_deny_write_execute, output, command):
    """A .service named NAME that runs `confine exec -p PROFILE -w DIR -- COMMAND` inside
    the equivalent systemd sandbox. Put `--` before the command."""
    if not re.fullmatch(r"[A-Za-z0-9:_.\\-]+", name):
        raise ConfineError(f"unit name {name!r}: letters, digits and :_.\\- only")
    wd = source.check_workdir(workdir, required=True)
    if confine_path is None:
        confine_path = _running_confine()
        if confine_path is None:
            raise ConfineError("cannot tell which confine runs this command: pass --confine PATH")
    command = _resolve_for_systemd(command)
    if not os.path.isabs(confine_path):
        raise ConfineError(f"--confine {confine_path}: must be an absolute path")
    policy = source.load_policy(profile)
    if allow_ip and not (policy.network.connect_tcp or policy.network.bind_tcp):
        raise ConfineError("--allow-ip: the profile grants no TCP port, the unit has no network")
    # The unit must run the very profile exported here: a name resolves through
    # ~/.config, which ProtectHome= hides, so anything but a built-in goes by path.
    builtin = os.path.realpath(str(_load.builtin_dir()))
    first = os.path.realpath(policy.sources[0])
    profile_ref = policy.name if os.path.dirname(first) == builtin and profile == policy.name else first
    text = systemd.unit(policy, name=name, workdir=wd, argv=list(command), confine=confine_path,
                        profile_ref=profile_ref, user=user, allow_ip=tuple(allow_ip),
                        env_file=env_file, memory_deny_write_execute=memory_deny_write_execute,
                        command=_cmd("systemd", name, "-p", profile, "-w", wd))
    pw = systemd.account(user, wd)
    groups = systemd.supplementary_groups(pw)
    if groups:
        click.echo(f"confine: warning: {pw.pw_name} is in groups {', '.join(groups)}; systemd "
                   "keeps supplementary groups, so the agent can use what they open", err=True)
    _write(output, {f"{name}.service": text}, f"{name}.service")


# What systemd gives a system service when the unit sets no PATH (systemd.exec(5)).
SYSTEMD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin"


def _running_confine() -> str | None:
    """The confine executable of this very installation (its virtualenv's entry
    point), not whichever `confine` comes first on PATH."""
    arg0 = sys.argv[0] if sys.argv else ""
    if os.path.basename(arg0) == "confine" and os.access(arg0, os.X_OK):
        return os.path.realpath(arg0)
    cand = os.path.join(sys.prefix, "bin", "confine")
    if os.access(cand, os.X_OK):
        return cand
    found = shutil.which("confine")
    return os.path.realpath(found) if found else None


def _resolve_for_systemd(command: tuple[str, ...]) -> tuple[str, ...]:
    """A bare command name becomes the absolute path systemd's PATH finds; one it
    would not find is refused now rather than when the unit starts."""
    if not command:
        raise ConfineError("no command given: confine export systemd NAME -w DIR -- COMMAND")
    if "/" in command[0]:
        return command
    found = shutil.which(command[0], path=SYSTEMD_PATH)
    if found is None:
        raise ConfineError(f"{command[0]}: not found on the PATH systemd gives services "
                           f"({SYSTEMD_PATH}); give the command's absolute path")
    return (found, *command[1:])


@export.command("oci-seccomp")
@_profile
@_output
def oci_cmd(profile, output):
    """seccomp profile JSON for Docker (--security-opt seccomp=FILE), containerd,
    CRI-O and Kubernetes (Localhost)."""
    policy = source.load_policy(profile)
    _write(output, {f"{policy.name}.json": oci.render(policy)}, f"{policy.name}.json")


@export.command("k8s", context_settings={"ignore_unknown_options": False})
@_profile
@click.option("-w", "--workdir", default="/workspace", show_default=True, metavar="DIR",
              help="The workdir inside the container.")
@click.option("--name", default="confine-agent", show_default=True, help="Pod name.")
@click.option("--namespace", metavar="NS")
@click.option("--image", default="REPLACE-WITH-AGENT-IMAGE", show_default=True)
@click.option("--uid", type=int, default=1000, show_default=True, help="Non-root user id.")
@click.option("--home", default="/home/agent", show_default=True, help="$HOME in the image.")
@click.option("--seccomp-profile", metavar="PATH",
              help="localhostProfile path below the kubelet's seccomp dir "
                   "(default: confine/PROFILE.json).")
@click.option("--apparmor-profile", metavar="NAME", help="Default: confine-PROFILE.")
@_output
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def k8s_cmd(profile, workdir, name, namespace, image, uid, home, seccomp_profile,
            apparmor_profile, output, command):
    """Pod manifest (non-root, no capabilities, read-only root, seccomp and AppArmor
    profiles, one writable volume) and its egress NetworkPolicy. `-- CMD` sets the command."""
    wd = k8s.check_workdir(workdir)
    policy = source.load_policy(profile)
    text = k8s.manifest(policy, name=name, image=image, argv=list(command), workdir=wd, uid=uid,
                        seccomp_profile=seccomp_profile or f"confine/{policy.name}.json",
                        apparmor_profile=apparmor_profile, home=home, namespace=namespace,
                        command=_cmd("k8s", "-p", profile))
    _write(output, {f"{name}.yaml": text}, f"{name}.yaml")
