"""click commands `probe` and `audit`, registered by cli/main.py with add_command.

Exit codes: 0 nothing possible (probe) / nothing unblocked (audit); 1 otherwise;
125 confine's own errors (raised as ConfineError, mapped by cli.main).
"""
from __future__ import annotations

import json
import sys

import click

from ..errors import ConfineError


def _profile_opts(f):
    f = click.option("-w", "--workdir", type=click.Path(file_okay=False), metavar="DIR",
                     help="The workdir the agent would get (default: the current directory).")(f)
    f = click.option("-p", "--profile", default="default", show_default=True,
                     metavar="NAME|FILE", help="Built-in profile name or a YAML file.")(f)
    return f


@click.command("probe")
@_profile_opts
@click.option("--read", "read_", multiple=True, metavar="PATH",
              help="Extra read grant, as for confine exec (repeatable).")
@click.option("--write", multiple=True, metavar="PATH",
              help="Extra write grant, as for confine exec (repeatable).")
@click.option("--env", multiple=True, metavar="NAME[=VALUE]",
              help="Variable passed to the agent, as for confine exec (repeatable).")
@click.option("--user", metavar="USER", help="Agent user (root only), as for confine exec.")
@click.option("--allow-degraded", is_flag=True,
              help="Probe even if this kernel cannot enforce the whole profile.")
@click.option("--force-workdir", is_flag=True, help="As for confine exec.")
@click.option("--exclusive-workdir", "exclusive", is_flag=True,
              help="Probe an exclusive workdir, as for confine exec (docs/exclusive.md).")
@click.option("--only", multiple=True, metavar="GROUP|ID",
              help="Run only these groups (writes, secrets, ...) or attempt ids (repeatable).")
@click.option("-v", "--verbose", is_flag=True, help="Show details of blocked attempts too.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable report.")
def probe(profile, workdir, read_, write, env, user, allow_degraded, force_workdir, exclusive,
          only, verbose, as_json):
    """Attack the sandbox from inside and report what an agent could still do.

    \b
    Runs a battery of real, harmless attempts inside exactly the sandbox
    `confine exec` builds for PROFILE and WORKDIR: writes outside the workdir,
    secrets, disks, mounts, kernel interfaces, privilege regain, other
    processes, terminal injection, host daemons, network, files that run
    later. Prints a verdict, then one row per attempt: blocked (and by which
    layer) or POSSIBLE (with a fix). Sanity checks prove the sandbox is usable.

    \b
    Exit status: 0 when nothing is possible and every sanity check passes,
    1 otherwise, 125 for confine's own errors.
    """
    import re

    from ..probe import report as _report
    from ..probe.run import battery_source
    from ..probe.run import probe as run_probe
    groups = {g for g, _ in _report.GROUPS}
    ids = set(re.findall(r'^@attempt\("([a-z0-9_.]+)"', battery_source(), re.M))
    for o in only:
        if o not in groups and o not in ids:
            raise ConfineError(f"--only {o}: not a group ({', '.join(sorted(groups))}) "
                               "or an attempt id (e.g. writes.symlink; see --json)")
    r = run_probe(profile=profile, workdir=workdir, read=read_, write=write, env=env, user=user,
                  allow_degraded=allow_degraded, force_workdir=force_workdir, only=only,
                  exclusive=exclusive)
    if as_json:
        click.echo(json.dumps(r, indent=2))
    else:
        click.echo(_report.render(r, verbose=verbose))
    sys.exit(r["exit_status"])


@click.command("audit")
@_profile_opts
@click.option("--user", metavar="USER", help="Agent user (root only), as for confine exec.")
@click.option("--home", type=click.Path(file_okay=False), metavar="DIR",
              help="HOME to inspect (default: the agent's; env CONFINE_AUDIT_HOME).")
@click.option("--socket-dir", "socket_dirs", multiple=True, type=click.Path(file_okay=False),
              metavar="DIR", help="Search only these directories for daemon sockets "
              "(repeatable; env CONFINE_AUDIT_SOCKET_DIRS, colon-separated; default "
              "/run, /var/run, /run/user/UID, /tmp).")
@click.option("--connect", is_flag=True,
              help="Also run the checks that send traffic: one TCP connect to the cloud "
                   "metadata address (env CONFINE_AUDIT_METADATA=HOST:PORT replaces it).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable report.")
def audit(profile, workdir, user, home, socket_dirs, connect, as_json):
    """Inspect this host from outside: what could an agent reach, and does PROFILE block it.

    \b
    Container runtime, ssh-agent, D-Bus and tmux sockets and who can reach
    them; credential files in HOME; secrets in this environment; writable
    directories above the workdir; setuid programs; root-equivalent groups;
    cloud metadata (with --connect); user namespaces; Landlock ABI;
    AppArmor/SELinux. Read-only: no traffic unless --connect (the report names
    each check skipped), no unix socket is connected to, no credential is
    read, nothing is changed.

    \b
    Exit status: 0 when every finding is blocked or informational, 1 when
    something is not blocked, 125 for confine's own errors.
    """
    import os

    from ..probe import audit as _audit
    if home is not None and not os.path.isdir(home):
        raise ConfineError(f"--home {home}: not a directory")
    for d in socket_dirs:
        if not os.path.isdir(d):
            raise ConfineError(f"--socket-dir {d}: not a directory")
    r = _audit.audit(profile=profile, workdir=workdir, home=home,
                     socket_dirs_=list(socket_dirs) or None, user=user, connect=connect)
    if as_json:
        click.echo(json.dumps(r, indent=2))
    else:
        click.echo(_audit.render(r))
    sys.exit(r["exit_status"])
