"""Command line: parse, call the API, print. Exit codes: the command's status,
128+N if it died of signal N, 125 confine's own error, 126 not executable,
127 not found."""
from __future__ import annotations

import importlib
import json
import os
import sys
from typing import Any, NoReturn

import click

from .. import api
from ..errors import ConfineError, say
from ..policy import load as _load


def _fail(e: ConfineError) -> NoReturn:
    say(str(e))
    sys.exit(e.status)


def _exec_hint(e: click.exceptions.UsageError) -> str | None:
    """`confine exec ls -la`: the command's own options were taken for ours."""
    ctx = e.ctx
    if (isinstance(e, click.exceptions.NoSuchOption) and ctx is not None
            and ctx.command.name == "exec"):
        return ("put `--` before the command so its options are not read as confine's: "
                "confine exec [OPTIONS] -- CMD [ARGS...]")
    return None


def console() -> NoReturn:
    """The `confine` executable when click parses (cli/__init__.py console): main(),
    then leave without the interpreter's shutdown (fast.leave)."""
    import gc

    from .fast import leave
    # What is imported lives until the end: keep it out of every collection. The
    # collector itself stays on, since a long run (the supervisor, the mediator
    # answering thousands of calls) must not grow without bound.
    gc.freeze()
    code: int | str | None = 0
    try:
        main()
    except SystemExit as e:
        code = e.code
    leave(code)


def main(argv: list[str] | None = None) -> NoReturn:
    """Console entry point: usage errors and confine's own failures exit 125."""
    try:
        rv = cli.main(args=argv, prog_name="confine", standalone_mode=False)
    except ConfineError as e:
        _fail(e)
    except click.exceptions.UsageError as e:
        e.show()
        hint = _exec_hint(e)
        if hint:
            click.echo(f"Hint: {hint}", err=True)
        sys.exit(125)
    except click.exceptions.Abort:
        click.echo("confine: aborted", err=True)
        sys.exit(125)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as e:  # one line, not a traceback; CONFINE_DEBUG=1 shows it
        if os.environ.get("CONFINE_DEBUG"):
            raise
        say(f"internal error: {type(e).__name__}: {e}")
        sys.exit(125)
    sys.exit(rv if isinstance(rv, int) else 0)


# Subcommands loaded only when named (or listed by --help): `confine exec` should
# not pay for the prober, the exporters and their imports at every start.
_LAZY = {"probe": (".probe", "probe"), "audit": (".probe", "audit"),
         "export": (".export", "export"), "explain": (".explain", "explain"),
         "held": (".held", "held"), "log": (".log", "log"), "undo": (".undo", "undo"),
         "runs": (".undo", "runs")}


class _LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(_LAZY))

    def get_command(self, ctx: click.Context, cmd_name: str) -> Any:
        if cmd_name in _LAZY and cmd_name not in self.commands:
            mod, attr = _LAZY[cmd_name]
            self.add_command(getattr(importlib.import_module(mod, __package__), attr), cmd_name)
        return super().get_command(ctx, cmd_name)


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="confine")
def cli():
    """Run AI agents inside a kernel-enforced boundary.

    \b
    confine exec -- claude          confine the agent in the current directory
    confine exec --dry-run --json   show exactly what would be enforced
    confine check                   what this kernel can enforce
    confine profile list            built-in profiles
    """


@cli.command("exec", context_settings={"ignore_unknown_options": False})
@click.option("-p", "--profile", default="default", show_default=True, metavar="NAME|FILE",
              help="Built-in profile name or a YAML file.")
@click.option("-w", "--workdir", type=click.Path(file_okay=False), metavar="DIR",
              help="The only writable project directory (default: current directory).")
@click.option("--read", multiple=True, metavar="PATH",
              help="Also allow reading and executing PATH (repeatable).")
@click.option("--write", multiple=True, metavar="PATH", help="Also allow writing PATH (repeatable).")
@click.option("--env", multiple=True, metavar="NAME[=VALUE]",
              help="Pass NAME from this environment, or set it (repeatable). "
                   "Names that look like secrets pass only this way.")
@click.option("--user", metavar="USER",
              help="Run the agent as USER (only when confine runs as root; default: the "
                   "workdir's owner).")
@click.option("--allow-degraded", is_flag=True,
              help="Run even if this kernel cannot enforce part of the policy; each missing "
                   "protection is named on stderr.")
@click.option("--degrade", multiple=True, metavar="FEATURE",
              help="Accept one named missing protection (as printed by --dry-run or `confine "
                   "check`), e.g. mount_namespace when a systemd unit provides the read-only "
                   "host itself; repeatable. Each is named on stderr.")
@click.option("--force-workdir", is_flag=True,
              help="Accept a workdir that is /, a system directory, or your home.")
@click.option("--apparmor", "apparmor", metavar="PROFILE",
              help="Also confine the agent in this loaded AppArmor profile (confine export "
                   "apparmor); refused if AppArmor is enabled but the profile is not loaded.")
@click.option("--selinux-context", metavar="CTX",
              help="Also run the agent in this SELinux context (e.g. with type confine_agent_t).")
@click.option("--log", metavar="FILE",
              help="Append every decision of the run (refusals, connections, DNS answers) "
                   "to FILE as JSON lines.")
@click.option("--agent-status", is_flag=True,
              help="Exit with the agent's own status even when the exit check reported "
                   "protected paths (default: 123 instead of the agent's 0).")
@click.option("--allow-host", "allow_host", multiple=True, metavar="HOST[:PORT]",
              help="Also let the agent reach HOST (port 443 unless given; *.suffix, an "
                   "address or network too) through the egress gateway (repeatable).")
@click.option("--approver", metavar="CMD",
              help="Under network.default: ask, put each question to CMD instead of the terminal "
                   "(one JSON event on stdin, one JSON answer on stdout; a timeout or anything "
                   "but an explicit allow denies). CMD runs outside the sandbox as you. "
                   "It answers the approvals: section's questions too.")
@click.option("--approver-socket", "approver_socket", metavar="PATH",
              help="Put each question of the approval engine (approvals:, network.default: ask) "
                   "to the long-lived decider listening on the unix socket PATH (length-prefixed "
                   "JSON frames, docs/approvals.md); absent, dead or slow: denied.")
@click.option("--credential", multiple=True, metavar="NAME=HOST[,HOST...]",
              help="Give the agent a placeholder for your environment variable NAME; the "
                   "egress gateway puts the real value in requests to these hosts only "
                   "(docs/credentials.md). Repeatable.")
@click.option("--agent-home/--no-agent-home", default=True, show_default=True,
              help="HOME inside is the agent's own persistent home (rc files, history, "
                   "caches), kept per profile and workdir; never your real HOME.")
@click.option("--exclusive-workdir", "exclusive", is_flag=True,
              help="Nothing outside uses the workdir while the agent runs (CI, a container): "
                   "its file calls run unmediated, new protected names are held at exit "
                   "(workdir_mode: exclusive; docs/exclusive.md).")
@click.option("--dry-run", is_flag=True, help="Print the effective policy and exit.")
@click.option("--json", "as_json", is_flag=True, help="With --dry-run: machine-readable output.")
@click.argument("command", nargs=-1, required=False, type=click.UNPROCESSED)
def exec_(allow_degraded, degrade, dry_run, as_json, command, **opts):
    """Run COMMAND confined. Put `--` before the command.

    \b
    The agent can write only the workdir and a private TMPDIR, read the
    system but not $HOME or secrets, has no network unless the profile grants
    TCP ports, cannot mount, repartition, load kernel code or regain privileges.
    """
    if not command and not dry_run:
        raise click.UsageError("no command given: confine exec [OPTIONS] -- CMD [ARGS...]")
    _delegate_if_nested(command, opts, dry_run, as_json, allow_degraded or tuple(degrade))
    if dry_run:
        # Without a command, the plan for the user's shell: what an interactive run would do.
        argv = list(command) or [os.environ.get("SHELL") or "/bin/sh"]
        plan = api.prepare(argv, **opts)
        if as_json:
            click.echo(json.dumps(plan.to_dict(), indent=2))
        else:
            _print_plan(plan.to_dict())
        return
    if as_json:
        raise ConfineError("--json only applies to --dry-run")
    # Every other option is a field of runtime.session.Request, by the same name.
    status = api.run(list(command), allow_degraded=allow_degraded or tuple(degrade), **opts)
    sys.exit(status)


def _delegate_if_nested(command, opts, dry_run, as_json, allow_degraded) -> None:
    """Inside a confine run: the outer supervisor makes the run (runtime/delegate.py)."""
    from ..runtime import delegate
    path = delegate.endpoint()
    if path is not None:
        argv = list(command) or [os.environ.get("SHELL") or "/bin/sh"]
        sys.exit(delegate.main_exec(argv, opts, dry=dry_run, as_json=as_json,
                                    allow_degraded=allow_degraded, path=path,
                                    print_plan=_print_plan))


def _print_plan(d: dict) -> None:
    e = click.echo
    ident = d["identity"]
    e(f"command:  {' '.join(d['command'])}")
    e(f"profile:  {d['profile']} ({', '.join(d['sources'])})")
    e(f"workdir:  {d['workdir']}")
    e(f"tmpdir:   {d['tmpdir']} (private, removed afterwards)")
    if d.get("agent_home"):
        e(f"home:     {d['agent_home']} (the agent's own HOME, kept for this profile and "
          "workdir)")
    e(f"identity: {ident['user']} uid={ident['uid']} gid={ident['gid']}, no supplementary groups"
      + (f" (dropping {ident['dropped_groups']})" if ident['dropped_groups'] else ""))
    e("steps (the child runs these, in this order):")
    for i, s in enumerate(d["steps"], 1):
        extra = {k: v for k, v in s.items() if k not in ("name", "does")}
        e(f"  {i:2}. {s['name']}: {s['does']}"
          + (f"  {json.dumps(extra)}" if extra and s["name"] not in ("exec",) else ""))
    ll = d["landlock"]
    e(f"landlock: ABI {ll['abi']}, handles fs={len(ll['handled_fs'])} rights, "
      f"net={','.join(ll['handled_net']) or '-'}, scoped={','.join(ll['scoped']) or '-'}")
    for r in ll["rules"]:
        e(f"  {r['path']:<40} {','.join(r['access'])}")
    if ll["tcp_ports"]:
        for p in ll["tcp_ports"]:
            e(f"  tcp port {p['port']}: {','.join(p['access'])}")
    else:
        e("  network: no TCP connect or bind")
    net = d.get("network") or {}
    if net.get("gateway"):
        e(f"network: {net['gateway']}; allow: {', '.join(net['allow']) or 'nothing'}"
          + (f"; sets: {', '.join(net['include'])}" if net["include"] else "")
          + (f"; deny: {', '.join(net['deny'])}" if net["deny"] else "")
          + (f"; private ranges for names: {', '.join(net['allowed_ips'])}"
             if net["allowed_ips"] else "") + f"; otherwise: {net['default']}")
    for c in d.get("credentials") or ():
        src = {"env": "from your environment", "file": "from the file",
               "command": "from the command", "mint": "minted by"}[c["source"]]
        e(f"credential {c['name']}: {src} {' '.join(c['ref'])}; the value only to "
          f"{', '.join(c['hosts'])}; each use: {c['decision']}"
          + (f"; revoked by {' '.join(c['revoke'])}" if c["revoke"] else "")
          + ("; optional" if c["optional"] else ""))
    e(f"  secrets never granted: {len(ll['secrets'])} paths (carved out of: "
      f"{', '.join(ll['carved_out']) or 'nothing'})")
    e(f"seccomp: {len(d['seccomp'])} rules (--json lists each argument test)")
    groups: dict = {}
    for r in d["seccomp"]:
        g = r["group"] or r["syscall"]
        top, _, sub = g.partition(":")
        ent = groups.setdefault(top, {"syscalls": set(), "subs": [], "errnos": set()})
        ent["syscalls"].add(r["syscall"])
        ent["errnos"].add(r["errno"])
        if sub and sub not in ent["subs"]:
            ent["subs"].append(sub)
    for g, ent in groups.items():
        subs = f" [{', '.join(ent['subs'])}]" if ent["subs"] else ""
        e(f"  {g}: {', '.join(sorted(ent['syscalls']))}{subs} -> {'/'.join(sorted(ent['errnos']))}")
    pp = d.get("protected_paths")
    # one block per protected root (protect/roots.py): the workdir's, then each write grant's
    for r in ((pp.get("roots") or [pp]) if pp else []):
        where = f" in {r['path']} ({r['source']})" if "source" in r else ""
        e(f"protected paths{where}: {len(r['protected'])} in {len(r['git_directories'])} git "
          f"directories; read-only binds: {', '.join(r['read_only_binds']) or '-'}")
        for g in r["guard_only"]:
            e(f"  {g['path']}: no read-only bind ({g['reason']}); "
              + ("checked at exit" if (d.get("workdir_mode") or {}).get("gives_up")
                 else "guarded by name"))
    nsd = d["namespaces"]
    if nsd["mount"]:
        e(f"mount namespace: host read-only except {', '.join(nsd['writable'])}; private "
          f"{', '.join(nsd['private'])}; protected workdir paths read-only")
    else:
        e("mount namespace: NONE (host not read-only; existing protected paths not read-only)")
    e(f"pid namespace: {'yes (the agent sees only its own processes)' if nsd['pid'] else 'no'}")
    e(f"protected names: {d['protected_names']}")
    us = d["unix_sockets"]
    e(f"unix sockets: {us['mechanism']}; allowed under {', '.join(us['allowed_under'])}")
    cg = d.get("cgroup")
    e("cgroup: " + (f"a cgroup of the run under {cg['parent']} ({cg['kill']})" if cg
                    else "none (leftovers are killed by the descendant walk)"))
    e("limits:")
    for k, lim in d.get("limits", {}).items():
        v = lim["value"]
        shown = "unlimited" if v is None else (f"{v}" if k in ("processes", "open_files")
                                               else _size(v))
        e(f"  {k:<11} {shown:<10} {lim['mechanism'] if v is not None else ''}".rstrip())
    e("environment:")
    for k, v in sorted(d["environment"].items()):
        e(f"  {k}={v}")
    for feature, how in d.get("mechanisms", {}).items():
        if "replaces" in how:
            e(f"replaced: {feature}: by {how}")
    for m in d["missing"]:
        e(f"MISSING: {m['feature']}: {m['detail']}")
    for n in d["notes"]:
        e(f"note: {n}")


def _check_nested(profiles: list) -> list | None:
    """Inside a confine run, `confine exec` is delegated to the outer supervisor:
    each profile as the outer would run it here (runtime/delegate.py)."""
    from ..runtime import delegate
    path = delegate.endpoint()
    if path is None:
        return None
    return delegate.check_profiles(path, [p["profile"] for p in profiles])


def _print_check_nested(nested: list) -> None:
    click.echo("inside a confine run: `confine exec` is delegated to the outer supervisor "
               "(the nested run is confined by both policies)")
    click.echo("profiles:")
    for p in nested:
        state = "fully enforceable" if p["enforceable"] else "NOT fully enforceable"
        click.echo(f"  {p['profile']:<12} {state} ({p['mechanism']})")
        if p.get("refused"):
            click.echo(f"    refused: {p['refused']}")
        for m in p.get("missing", []):
            click.echo(f"    missing: {m['feature']}: {m['detail']}")
        if p.get("writable"):
            click.echo(f"    writable (both grant it): {', '.join(p['writable'])}")


def _size(n: int) -> str:
    for unit, b in (("T", 1 << 40), ("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n % b == 0:
            return f"{n // b}{unit}"
    return str(n)


@cli.command()
@click.option("-p", "--profile", "names", multiple=True, metavar="NAME|FILE",
              help="Check this profile (repeatable; a name or a file, as `exec -p` takes "
                   "it) instead of every built-in one.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def check(names, as_json):
    """What this kernel supports, and whether each built-in profile (or each -p PROFILE)
    can be fully enforced. Exit 0 when every one can, 1 when one cannot, 125 when a named
    profile cannot be loaded."""
    from ..probe import check as _check
    host = _check.host()
    profiles = _check.profiles(names)
    nested = _check_nested(profiles)
    if nested is not None:
        profiles = nested
    if as_json:
        click.echo(json.dumps({"host": host, "profiles": profiles}, indent=2))
    elif nested is not None:
        _print_check_nested(nested)
    else:
        ll = host["landlock"]
        click.echo(f"kernel {host['kernel']}")
        click.echo(f"landlock: ABI {ll['abi']}" + (f" (errata {ll['errata']:#x})" if ll['abi'] else " (unavailable)"))
        click.echo(f"  fs rights:  {', '.join(ll['fs_rights']) or '-'}")
        click.echo(f"  net rights: {', '.join(ll['net_rights']) or '-'}")
        click.echo(f"  scopes:     {', '.join(ll['scopes']) or '-'}")
        sc = host["seccomp"]
        click.echo("seccomp: " + ", ".join(f"{k}={v}" for k, v in sc.items()))
        un = host["user_namespaces"]
        click.echo(f"user namespaces: max={un['max_user_namespaces']}"
                   + (f", apparmor restriction={un['apparmor_restrict_unprivileged_userns']}"
                      if un['apparmor_restrict_unprivileged_userns'] is not None else ""))
        click.echo(f"apparmor: {'enabled' if host['apparmor']['enabled'] else 'not enabled'}")
        click.echo(f"selinux: {host['selinux']['mode']}")
        click.echo("profiles:")
        for p in profiles:
            state = "fully enforceable" if p["enforceable"] else "NOT fully enforceable"
            click.echo(f"  {p['profile']:<12} {state}")
            if "network" in p:
                click.echo(f"    network: {p['network']['summary']}")
            for pr in p.get("protections", []):
                if pr["status"] != "not needed":
                    click.echo(f"    {pr['protection']:<30} {pr['status']:<12} {pr['mechanism']}")
    if not all(p["enforceable"] for p in profiles):
        sys.exit(1)


@cli.group()
def profile():
    """List, show and validate profiles."""


@profile.command("list")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def profile_list(as_json: bool) -> None:
    """Your profiles, the system's and the built-in ones, in the order a name is
    looked up (an earlier one shadows a later one of the same name)."""
    rows = []
    seen: set[str] = set()
    dirs = [(d, "user" if i == 0 else "system") for i, d in enumerate(_load.user_dirs())]
    dirs.append((_load.builtin_dir(), "built-in"))
    for d, origin in dirs:
        for path in sorted(d.glob("*.yaml")) if d.is_dir() else ():
            if path.stem.startswith("_"):
                continue
            row = {"name": path.stem, "origin": origin, "file": str(path),
                   "shadowed": path.stem in seen, "description": "", "error": None}
            seen.add(path.stem)
            try:
                raw, _chain = _load.read_layers(str(path))
                desc = raw.get("description")
                row["description"] = desc.value if desc else ""
            except ConfineError as e:
                row["error"] = str(e)
            rows.append(row)
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    for r in rows:
        tag = f"[{r['origin']}{', shadowed' if r['shadowed'] else ''}]"
        text = f"INVALID: {r['error']}" if r["error"] else r["description"]
        click.echo(f"{r['name']:<12} {tag:<22} {text}")


@profile.command("show")
@click.argument("name")
def profile_show(name):
    """Print a profile's YAML (and what it extends)."""
    _, chain = _load.read_layers(name)
    for i, p in enumerate(chain):
        if i:
            click.echo(f"# --- extended: {p} ---")
        else:
            click.echo(f"# {p}")
        click.echo(p.read_text().rstrip())


@profile.command("validate")
@click.argument("profile_ref", metavar="NAME|FILE")
def profile_validate(profile_ref: str) -> None:
    """Check a profile (a file, or a name as -p takes it): keys, types, variables,
    paths, and everything it extends. Exit 0 if valid, 125 if not, with a line
    (file:line: key and what is wrong) for every error of the file."""
    import tempfile

    from ..errors import ProfileError
    ref = profile_ref
    if os.path.isfile(ref) and "/" not in ref:
        ref = "./" + ref               # a file in the current directory, not a name
    with tempfile.TemporaryDirectory(prefix="confine-validate-") as wd:
        try:
            policy = _load.load(ref, workdir=wd, home=os.path.expanduser("~"), tmp=wd)
        except ProfileError as e:
            if not e.more:
                raise
            for line in (str(e), *e.more):
                click.echo(f"confine: {line}", err=True)
            raise ProfileError(f"{profile_ref}: {len(e.more) + 1} errors") from None
    click.echo(f"{profile_ref}: valid ({', '.join(policy.sources)})")


if __name__ == "__main__":
    main()
