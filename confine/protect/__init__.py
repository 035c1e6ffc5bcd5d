"""Protected paths inside the workdir: files that run later, outside the sandbox.

An agent that writes `.git/hooks/post-checkout`, `.git/config`
(core.fsmonitor, core.pager, filter drivers, ...), `.envrc`,
`.vscode/tasks.json`, a shell rc file or `.mcp.json` in its workdir gets code
execution as the user the next time a person runs git or opens the editor
there.  Landlock cannot carve these out of a writable workdir (a grant covers
a whole tree), so confine protects them in layers:

1. Mount namespace (confine/kernel/namespaces.py), before the agent starts:
   every protected path that exists is bind-mounted read-only onto itself
   (EROFS for writes, EBUSY for rename/unlink of the path itself), and every
   git directory plus the directories inside a pattern (`.claude` of
   `.claude/commands`) is bind-mounted read-write onto itself so it cannot be
   renamed away and replaced.  `snapshot()` computes that plan (snapshot.py).
2. Check and revert, in the supervisor: `snapshot()` records every protected
   path that exists at start (content hash, a copy of small files, modes,
   directory listings, symlink targets); `verify_and_revert()` (revert.py; at
   exit, and whenever the launcher wants) finds what was created, modified,
   renamed or deleted, restores the original, moves anything new into a
   quarantine directory outside the workdir (never deletes it), strips
   dangerous keys from the config of git repositories created during the run
   (gitconfig.py) and moves their hooks away, and returns a report
   (report.py).  This covers what a mount cannot: paths that did not exist at
   start (`.envrc`, a nested repository made with `git init`), protected
   paths that are symlinks, and hosts without namespaces, where it is the
   only layer.
While the agent runs, with seccomp user notification, the name guard
(guard.py, `Guard.from_snapshot`) also refuses new protected names at the
call, before they exist.

The pattern language and DEFAULT_PATTERNS are policy data:
confine/policy/patterns.py.
"""
from __future__ import annotations

from ..policy.patterns import DEFAULT_PATTERNS, Pattern, compile_patterns, effective
from .gitconfig import (
                        KEY_REFUSED,
                        ConfigItem,
                        is_dangerous_key,
                        is_safe_key,
                        parse_git_config,
                        render_git_config,
                        sanitize_git_config,
                        vet_git_config,
)
from .guard import VET, Guard, Roots
from .report import format_report
from .revert import Change, Report, default_quarantine_dir, verify_and_revert
from .snapshot import GIT_SKIP, Entry, GitDir, Root, Snapshot, snapshot

__all__ = [
    "DEFAULT_PATTERNS", "Pattern", "compile_patterns", "effective",
    "ConfigItem", "parse_git_config", "render_git_config", "sanitize_git_config",
    "is_dangerous_key", "is_safe_key", "vet_git_config", "KEY_REFUSED",
    "GIT_SKIP", "Entry", "GitDir", "Root", "Snapshot", "snapshot",
    "Change", "Report", "verify_and_revert", "format_report", "default_quarantine_dir",
    "Guard", "Roots", "VET",
]
