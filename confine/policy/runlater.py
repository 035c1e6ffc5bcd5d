"""Files in $HOME that run later, and which write grants may touch them.

The workdir has its name guard and read-only binds (confine/protect/); a write
grant in $HOME (a profile's `write:`, `--write`) had nothing: `-p claude-code`
let the agent add a hook to ~/.claude/settings.json, `--write ~/.local` handed
over ~/.local/bin on PATH. The next time the user runs the tool, it runs what
the agent wrote, as the user, unconfined. Two lists answer that:

* `NEVER_WRITABLE`: start-up files, PATH directories, autostart and unit
  directories, git's global config, confine's own installation, profiles and
  state. A write grant equal to one, inside one, or containing one is refused
  (a containing grant is refused rather than carved: whatever else runs later
  in ~/.config or ~/.local cannot be listed);
* `READ_ONLY_IN_GRANTS` (plus a profile's `filesystem.read_only:`): what an
  agent's own directory holds that runs later (Claude Code's settings, hooks,
  commands, agents, plugins' manifests and code, skills, its executables;
  Codex's config.toml, rules, prompts). Plugins' data (~/.claude/plugins/store)
  is not code: it stays writable, as any state. A write grant that contains one is carved: the entry stays
  readable, its siblings writable, and the directories on the way keep no
  MAKE_*/REMOVE_* right, so an entry missing at start cannot be created and
  an existing one cannot be renamed over or deleted (confine/plan/carve.py).
  A grant equal to or inside one is refused. Inside a profile's state root
  (policy/stateroots.py) the root's own patterns protect these instead of a
  carve, and must match every one of them.

Also refused, as for the workdir: write grants on system directories, $HOME
itself or an ancestor of it. Landlock carries this alone (a test runs it
without the mount namespace); with the namespace, the carved entries also
stay on the read-only host view (EROFS, no chmod).
"""
from __future__ import annotations

import errno
import os
import stat
import sys
from collections.abc import Sequence

from ..paths import is_under
from . import realpaths

# A writable path at or above any of these would hand the agent the system.
SYSTEM_DIRS = ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32",
               "/proc", "/run", "/sbin", "/sys", "/usr", "/snap", "/var/run")
# ...and exactly these (a project below them is fine).
SYSTEM_ROOTS = ("/", "/home", "/var", "/var/lib", "/var/log", "/var/cache", "/var/spool",
                "/var/mail", "/tmp", "/var/tmp", "/opt", "/srv", "/mnt", "/media", "/root")
# Write grants below SYSTEM_DIRS that are not the system: private in the mount namespace.
SYSTEM_EXEMPT = ("/dev/shm",)

# (template, why): refused as, inside, or under any write grant.
NEVER_WRITABLE: tuple[tuple[str, str], ...] = tuple(
    [("~/.local/bin", "on PATH"), ("~/bin", "on PATH"),
       ("~/.config/confine", "confine's own profiles"),
       ("~/.local/state/confine", "confine's quarantine and state"),
       ("~/.local/share/confine", "confine's installation"),
       ("~/.local/lib", "Python's user site-packages (imported by every python)"),
       ("~/.gitconfig", "git's global config (core.pager, hooksPath, aliases)"),
       ("~/.config/git", "git's global config (core.pager, hooksPath, aliases)"),
       ("~/.config/systemd", "systemd user units"),
       ("~/.config/autostart", "programs started at login"),
       ("~/.config/environment.d", "the login environment"),
       ("~/.local/share/applications", "desktop launchers")]
    + [(f"~/{n}", "a shell start-up file") for n in (
        ".bashrc", ".bash_profile", ".bash_login", ".bash_logout", ".profile", ".zshrc",
        ".zshenv", ".zprofile", ".zlogin", ".zlogout", ".config/fish", ".inputrc",
        ".pam_environment", ".xprofile", ".xsession", ".xsessionrc", ".xinitrc")])

# (template, why): read-only inside every write grant (carved), refused as a grant.
READ_ONLY_IN_GRANTS: tuple[tuple[str, str], ...] = tuple(
    [(f"~/.claude/{n}", "Claude Code runs its hooks, commands and MCP servers from it")
     for n in ("settings.json", "settings.local.json", "commands", "agents", "hooks",
               "plugins/*.json", "plugins/cache", "plugins/marketplaces", "plugins/repos",
               "skills", "output-styles", "local", "CLAUDE.md")]
    + [("~/.local/share/claude", "Claude Code's executables")]
    + [(f"~/.codex/{n}", "Codex runs its notify command, MCP servers and rules from it")
       for n in ("config.toml", "*.config.toml", "requirements.toml", "AGENTS.md",
                 "AGENTS.override.md", "prompts", "rules", "skills", "hooks.json")])


def expand_home(template: str, home: str) -> str:
    return home + template[1:] if template.startswith("~/") else template


def _both(p: str) -> set[str]:
    """The spelled and the resolved path: a symlinked entry is caught either way."""
    p = os.path.normpath(p)
    return {p, realpaths.realpath(p)}


def never_writable(home: str, env_path: str | None = None) -> list[tuple[str, str]]:
    """(absolute path, why) of everything no write grant may touch."""
    path = env_path if env_path is not None else os.environ.get("PATH", "")
    return list(realpaths.once(("never_writable", home, path), lambda: _never(home, path)))


def _never(home: str, env_path: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for t, why in NEVER_WRITABLE:
        out += [(p, why) for p in _both(expand_home(t, home))]
    for d in env_path.split(":"):
        if d and os.path.isabs(d) and is_under(realpaths.realpath(d), home):
            out += [(p, "on PATH") for p in _both(d)]
    install = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for p in (sys.prefix, install):
        out += [(q, "confine's own installation") for q in _both(p)]
    return out


def read_only_entries(home: str) -> list[tuple[str, str, str]]:
    """(absolute path, template, why) of the built-in carved entries; globs expand to
    what exists now (a name that does not exist cannot be created under a carved
    directory)."""
    return list(realpaths.once(("read_only_entries", home), lambda: _read_only(home)))


def _read_only(home: str) -> list[tuple[str, str, str]]:
    import glob
    out: dict[str, tuple[str, str]] = {}
    for t, why in READ_ONLY_IN_GRANTS:
        p = os.path.normpath(expand_home(t, home))
        for q in (glob.glob(p) if glob.has_magic(p) else [p]):
            for r in _both(q):
                out.setdefault(r, (t, why))
    return [(p, t, why) for p, (t, why) in sorted(out.items())]


def system_reason(real: str) -> str | None:
    """Why a writable `real` would hand over the system, or None."""
    if real in SYSTEM_EXEMPT:
        return None
    if real == "/":
        return "is the root directory"
    if real in SYSTEM_ROOTS or any(is_under(real, d) for d in SYSTEM_DIRS):
        return "is a system directory"
    return None


def refusal(real: str, home: str, never: Sequence[tuple[str, str]],
            read_only: Sequence[tuple[str, str]]) -> str | None:
    """Why the write grant `real` (resolved) is refused, or None. `never` and
    `read_only` come from never_writable() and read_only_entries()."""
    why = system_reason(real)
    if why:
        return f"it {why}; grant a directory of its own instead"
    if real == home:
        return ("it is your home directory: start-up files, PATH directories and every "
                "tool's configuration would be writable; grant the tool's own directory "
                "instead, e.g. --write ~/.cache/TOOL")
    if is_under(home, real):
        return f"it contains your home directory {home}"
    for p, why in never:
        if is_under(real, p):
            return f"it lies inside {p} ({why}, runs as you later); confine never makes it writable"
        if is_under(p, real):
            return (f"it contains {p} ({why}, runs as you later) and more that cannot all "
                    "be listed; grant the tool's own directory instead, e.g. "
                    f"--write {os.path.join(real, 'TOOL')}")
    for p, why in read_only:
        if is_under(real, p):
            return (f"it lies inside {p} ({why}, runs as you later), which stays read-only "
                    "under every write grant; --read it, or grant the directory that holds "
                    "it (its other entries stay writable)")
    return None


def make_state(path: str, *, directory: bool) -> bool:
    """Create an empty state entry the agent will write (it cannot create names in a
    carved directory itself). Only when its parent exists; never through a symlink
    at the last step; owned like the parent (the agent's own directory).
    True if it exists afterwards."""
    parent, name = os.path.split(os.path.normpath(path))
    try:
        dfd = os.open(os.path.realpath(parent), os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
                      | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        st = os.fstat(dfd)
        try:
            if directory:
                os.mkdir(name, 0o700, dir_fd=dfd)
            else:
                os.close(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                                 | os.O_CLOEXEC, 0o600, dir_fd=dfd))
        except FileExistsError:
            return True
        except OSError as e:
            if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOENT):
                return False
            raise
        if os.geteuid() == 0 and st.st_uid != 0:
            os.chown(name, st.st_uid, st.st_gid, dir_fd=dfd, follow_symlinks=False)
        return stat.S_ISDIR(os.stat(name, dir_fd=dfd, follow_symlinks=False).st_mode) == directory
    finally:
        os.close(dfd)
