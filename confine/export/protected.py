"""Workdir paths the agent must not write, at any depth below the workdir.

Each of these runs code later, outside the sandbox, when a person (or their
editor, shell, git or agent) uses the directory: git hooks and config
(core.fsmonitor, core.hooksPath, filter drivers), direnv, editor task files,
shell start-up files, MCP server lists, agent commands and agent hooks.

Landlock cannot express "everything under the workdir except these" (a grant
covers a whole tree), so today only the exporters enforce the list, through
AppArmor deny rules (deny wins there). The launcher issue (issue 3) owns the
list (confine/protect.py, DEFAULT_PATTERNS, with patterns and a profile key);
until the Policy carries it, this copy keeps the same entries.
"""
from __future__ import annotations

# Relative to the workdir, matched at any depth. A trailing "/" marks a
# directory: the directory and everything below it are protected.
PROTECTED: tuple[str, ...] = (
    # ".git/..." means in every git directory: .git at any depth, and the git
    # directories of submodules (.git/modules/...) and worktrees (.git/worktrees/*).
    ".git/hooks/",
    ".git/config",
    ".git/config.worktree",
    ".git/commondir",
    ".gitmodules",
    ".envrc",
    ".vscode/",
    ".idea/",
    ".bashrc", ".bash_profile", ".bash_login", ".bash_logout", ".profile",
    ".zshrc", ".zshenv", ".zprofile", ".zlogin", ".zlogout",
    ".mcp.json",
    ".claude/commands/",
    ".claude/agents/",
    # Beyond issue 5's list, as in confine/protect.py: Claude Code runs the
    # "hooks" of its settings files as shell commands; .codex/ holds Codex's.
    ".claude/hooks/",
    ".claude/settings.json",
    ".claude/settings.local.json",
    ".codex/",
)
# Where git directories live inside a .git directory (AppArmor alternation).
GIT_DIRS = "{,modules/**/,worktrees/*/,modules/**/worktrees/*/}"


def parents(entry: str) -> list[str]:
    """The directories an entry lives in (".git/hooks/" -> [".git/"]).

    Renaming a prepared directory onto one of them would plant the entry
    without writing any protected path, so they are protected as directories
    (the files inside them stay writable)."""
    parts = entry.rstrip("/").split("/")[:-1]
    return ["/".join(parts[:i + 1]) + "/" for i in range(len(parts))]
