"""The one entry point the CLI and agent frameworks share.

    import confine
    status = confine.run(["pytest", "-q"], profile="default", workdir="/srv/agent/repo")
"""
from __future__ import annotations

import os
import re
import shutil
import stat
import sys
import tempfile

from . import plan as _plan
from .errors import ConfineError
from .identity import resolve as resolve_identity
from .kernel import landlock, seccomp
from .policy import load as _load
from .paths import is_under

# A workdir at or above any of these would hand the agent the system.
SYSTEM_DIRS = ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32",
               "/proc", "/run", "/sbin", "/sys", "/usr", "/snap", "/var/run")
# ...and exactly these (a project below them is fine).
SYSTEM_ROOTS = ("/", "/home", "/var", "/var/lib", "/var/log", "/var/cache", "/var/spool",
                "/var/mail", "/tmp", "/var/tmp", "/opt", "/srv", "/mnt", "/media", "/root")


def check_workdir(workdir: str, homes: list[str], force: bool) -> str:
    if not os.path.exists(workdir):
        raise ConfineError(f"workdir {workdir} does not exist")
    real = os.path.realpath(workdir)
    if not os.path.isdir(real):
        raise ConfineError(f"workdir {workdir} is not a directory")
    if force:
        return real
    why = None
    if real == "/":
        why = "is the root directory"
    elif real in SYSTEM_ROOTS:
        why = "is a system directory"
    elif any(is_under(real, d) for d in SYSTEM_DIRS):
        why = "is a system directory"
    for h in homes if why is None else ():
        h = os.path.realpath(h)
        if real == h:
            why = "is your home directory itself"
        elif is_under(h, real):
            why = f"contains your home directory {h}"
    if why:
        raise ConfineError(f"refusing workdir {real}: it {why}, so the agent could write "
                           "everything there; use a project directory (or --force-workdir)")
    return real


def _mktemp(uid: int, gid: int) -> str:
    tmp = tempfile.mkdtemp(prefix="confine-", dir="/tmp")
    os.chmod(tmp, 0o700)
    if os.geteuid() == 0:
        os.chown(tmp, uid, gid)
    return tmp


def _rmtree(path: str, _depth: int = 0) -> None:
    def onerror(func, p, exc):
        # The agent may have removed permissions from its own files. Never chmod
        # through a symlink it planted.
        if os.path.islink(p) or _depth > 64:
            return
        try:
            os.chmod(os.path.dirname(p), stat.S_IRWXU)
            os.chmod(p, stat.S_IRWXU)
            if func in (os.open, os.scandir, os.listdir):
                _rmtree(p, _depth + 1)
            else:
                func(p)
        except OSError:
            pass
    shutil.rmtree(path, onerror=onerror)


def _lsm(plan, apparmor, selinux_context) -> None:
    """A second, independent layer: switched into at exec, before no_new_privs."""
    from .kernel import lsm
    if apparmor:
        if not lsm.apparmor_enabled():
            plan.missing.append(_plan.Missing("apparmor", f"--apparmor {apparmor}: AppArmor is "
                                              "not enabled on this kernel"))
        elif lsm.apparmor_profile_loaded(apparmor) is False:
            raise ConfineError(f"--apparmor {apparmor}: no such profile is loaded (load it with "
                               "`apparmor_parser -r FILE`, see docs/export.md)")
        else:
            plan.lsm_apparmor = apparmor
    if selinux_context:
        if not lsm.selinux_enabled():
            plan.missing.append(_plan.Missing("selinux", f"--selinux-context {selinux_context}: "
                                              "SELinux is not enabled on this kernel"))
        else:
            plan.lsm_selinux = (selinux_context if ":" in selinux_context
                                else lsm.selinux_context_with_type(selinux_context))


KNOWN_FEATURES = {"landlock", "landlock.truncate", "landlock.net_tcp", "landlock.ioctl_dev",
                  "landlock.scope_signal", "landlock.scope_abstract_unix", "seccomp",
                  "seccomp_notify", "mount_namespace", "apparmor", "selinux"}


def prepare(argv, *, profile="default", workdir=None, read=(), write=(), env=(), user=None,
            force_workdir=False, apparmor=None, selinux_context=None):
    """Resolve identity and workdir, make the private temp dir, load the policy, compile
    the plan. Returns the plan; its policy.tmp must be removed by the caller."""
    if not argv:
        raise ConfineError("no command given (usage: confine exec [OPTIONS] -- CMD [ARGS...])")
    for item in env:
        name = item.split("=", 1)[0]
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise ConfineError(f"--env {item!r}: invalid variable name")
    wd = os.path.abspath(workdir or os.getcwd())
    check_workdir(wd, [os.path.expanduser("~")], force_workdir)
    ident = resolve_identity(os.path.realpath(wd), user)
    homes = {ident.home, os.path.expanduser("~")}
    wd = check_workdir(wd, sorted(homes), force_workdir)
    for p in list(read) + list(write):
        if not os.path.exists(os.path.expanduser(p)):
            raise ConfineError(f"{p} does not exist (from --read/--write)")
    tmp = _mktemp(ident.uid, ident.gid)
    try:
        policy = _load.load(profile, workdir=wd, home=os.path.realpath(ident.home), tmp=tmp,
                            extra_read=read, extra_write=write)
        for d in policy.deny:
            if is_under(wd, d.path):
                raise ConfineError(f"refusing workdir {wd}: it lies inside the protected secret "
                                   f"{d.path}")
        plan = _plan.compile(policy, list(argv), ident, cli_env=env)
        _lsm(plan, apparmor, selinux_context)
        return plan
    except BaseException:
        _rmtree(tmp)
        raise


def enforce_or_refuse(plan, allow_degraded, warn=None) -> None:
    """allow_degraded: True accepts every missing protection; a collection of
    feature names accepts exactly those."""
    warn = warn or (lambda m: print(f"confine: {m}", file=sys.stderr))
    known = {m.feature for m in plan.missing}
    if allow_degraded not in (True, False, None):
        for name in allow_degraded:
            if name not in known and name not in KNOWN_FEATURES:
                raise ConfineError(f"--degrade {name}: no such protection (known: "
                                   f"{', '.join(sorted(KNOWN_FEATURES))})")
    refused = [m for m in plan.missing
               if not (allow_degraded is True or (allow_degraded and m.feature in allow_degraded))]
    if refused:
        first = refused[0]
        more = f" (and {len(refused) - 1} more)" if len(refused) > 1 else ""
        raise ConfineError(f"cannot enforce {first.feature}: {first.detail}{more}; "
                           f"refusing to run (--degrade {first.feature} or --allow-degraded "
                           "runs without it)")
    for m in plan.missing:
        warn(f"degraded: NOT enforced: {m.feature}: {m.detail}")


def run(argv, *, profile="default", workdir=None, read=(), write=(), env=(), user=None,
        allow_degraded=False, force_workdir=False, warn=None, apparmor=None,
        selinux_context=None) -> int:
    """Run argv confined; returns its exit status (128+N if killed by signal N).
    Raises ConfineError (status 125/126/127) for confine's own failures."""
    from .launch import run_plan
    plan = prepare(argv, profile=profile, workdir=workdir, read=read, write=write, env=env,
                   user=user, force_workdir=force_workdir, apparmor=apparmor,
                   selinux_context=selinux_context)
    try:
        enforce_or_refuse(plan, allow_degraded, warn)

        def build_ruleset():
            if plan.abi == 0:
                return None
            return landlock.build(plan.handled_fs, plan.handled_net, plan.scoped,
                                  [(p, a) for p, a, _ in plan.path_rules], plan.port_rules)

        def build_filter():
            if any(m.feature == "seccomp" for m in plan.missing):
                return []
            return [seccomp.build(r) for r in (plan.seccomp_rules, plan.seccomp_extra) if r]

        from . import protect
        say = warn or (lambda m: print(f"confine: {m}", file=sys.stderr))
        try:
            snap = protect.snapshot(plan.policy.workdir,
                                    list(protect.DEFAULT_PATTERNS) + list(plan.policy.protected),
                                    home=plan.identity.home)
        except (OSError, ValueError) as e:
            raise ConfineError(f"cannot snapshot the protected workdir paths: {e}") from None
        g = None
        if plan.unix_mediation and snap.patterns:
            from .guard import Guard
            g = Guard(snap.workdir, snap.patterns,
                      [(rel, tree) for rel, tree, _ in snap.extra]
                      + [(r.rel, r.tree) for r in snap.roots.values()],
                      snap.global_hooks,
                      {(e.dev, e.ino) for e in snap.entries.values() if e.kind == "f"},
                      aliases=[b.path for b in snap.mount_plan.bases])
        if not plan.mount_ns:
            say("protected workdir paths (.git/hooks, .git/config, .envrc, ...) are NOT "
                "read-only for this run (no mount namespace): "
                + ("writes and new names are refused by name, but deleting them or renaming "
                   "them away is only reverted when the agent exits" if g is not None
                   else "changes are only reverted when the agent exits"))
        for path, why in snap.guard_only:
            say(f"protected path {path} has no read-only bind ({why}): "
                + ("writes to it are refused by name and inode; other changes are reverted at exit"
                   if g is not None else "it is only checked at exit"))
        try:
            status = run_plan(plan, build_ruleset=build_ruleset, build_filter=build_filter,
                              mediation_roots=plan.unix_roots() if plan.unix_mediation else None,
                              protect_plan=snap.mount_plan if plan.mount_ns else None, guard=g)
        except OSError as e:
            raise ConfineError(f"setup failed: {e.strerror or e}") from None
        finally:
            try:
                report = protect.verify_and_revert(snap, trust_mounts=plan.mount_ns)
            except (OSError, ValueError) as e:  # never silently: the check did not happen
                say(f"PROTECTED PATHS NOT CHECKED after the run: {e}")
            else:
                if report.alerts or report.failed:
                    print(protect.format_report(report), file=sys.stderr)
        return status
    finally:
        _rmtree(plan.policy.tmp)
