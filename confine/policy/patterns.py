"""The protected-path pattern language: policy data, read by the runtime and the exporters.

A protected path is a workdir file that runs code later, outside the sandbox
(git hooks and config, .envrc, editor tasks, shell rc files, agent config);
confine/protect/ explains the threat and the layers that enforce the list.
This module only says which paths the list names: `DEFAULT_PATTERNS`, plus a
profile's own `protected:` entries (`effective`), so that `confine exec` and
every exporter protect one and the same set.

Patterns:
  * workdir-relative, `/`-separated; `*`, `?`, `[...]` work inside one
    component (fnmatch, case-sensitive); `**`, `.` and `..` are refused;
  * matched at any depth (`.envrc` protects `a/b/.envrc`), unless the pattern
    starts with `/` (`/.envrc`: only the top of the workdir);
  * a trailing `/` protects the whole tree below (`.vscode/`); without it,
    only that path (`.git/config`);
  * a first component `.git` means "inside every git directory": `.git`
    directories at any depth, submodule and worktree git directories under
    `.git/modules` and `.git/worktrees`, bare repositories, and the target of
    a `.git` file (`gitdir: ...`) that lies in the workdir;
  * `!PATTERN` removes an identical earlier pattern (e.g. `!.idea/`).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

from ..record import dataclass

if TYPE_CHECKING:
    from .model import Policy

__all__ = ["DEFAULT_PATTERNS", "Pattern", "compile_patterns", "effective"]

DEFAULT_PATTERNS: tuple[str, ...] = (
    # git, in every git directory of the workdir (see the module docstring)
    ".git/hooks/", ".git/config", ".git/config.worktree", ".git/commondir",
    ".gitmodules",
    # direnv, editors
    ".envrc", ".vscode/", ".idea/",
    # shell start-up files (a workdir that is someone's home, or a copy of one)
    ".bashrc", ".bash_profile", ".bash_login", ".bash_logout", ".profile",
    ".zshrc", ".zshenv", ".zprofile", ".zlogin", ".zlogout",
    # agents: MCP servers, commands, sub-agents, settings (which hold hooks), hook scripts
    ".mcp.json",
    ".claude/commands/", ".claude/agents/", ".claude/hooks/",
    ".claude/settings.json", ".claude/settings.local.json",
    ".codex/",
)


@dataclass(frozen=True)
class Pattern:
    text: str                 # normalised: as written, minus "./"
    comps: tuple[str, ...]    # for git patterns: the components below the git directory
    tree: bool                # trailing "/": the whole tree
    anchored: bool            # leading "/": only at the top of the workdir
    git: bool                 # first component ".git": inside every git directory

    def wild(self, i: int) -> bool:
        return any(ch in self.comps[i] for ch in "*?[")


def _parse_pattern(raw: str) -> Pattern:
    if not isinstance(raw, str) or not raw.strip():
        raise ValueError(f"protected path pattern {raw!r}: empty")
    text = raw.strip()
    anchored = text.startswith("/")
    tree = text.endswith("/")
    body = text.strip("/")
    while body.startswith("./"):
        body = body[2:]
    comps = tuple(c for c in body.split("/"))
    if not body or any(c in ("", ".", "..") for c in comps):
        raise ValueError(f"protected path pattern {raw!r}: empty, '.' or '..' component")
    if any("**" in c for c in comps):
        raise ValueError(f"protected path pattern {raw!r}: '**' is not supported "
                         "(patterns already match at any depth)")
    if "\0" in body:
        raise ValueError(f"protected path pattern {raw!r}: NUL byte")
    git = comps[0] == ".git"
    if git:
        if anchored:
            raise ValueError(f"protected path pattern {raw!r}: '.git/...' patterns apply to "
                             "every git directory and cannot be anchored")
        comps = comps[1:]
        if not comps:
            raise ValueError(f"protected path pattern {raw!r}: protecting whole git directories "
                             "would stop commits; name what inside them to protect")
    norm = ("/" if anchored else "") + body + ("/" if tree else "")
    return Pattern(norm, comps, tree, anchored, git)


def compile_patterns(items: Iterable[str] | None = None) -> tuple[Pattern, ...]:
    """Pattern strings -> Patterns (None: DEFAULT_PATTERNS).

    `!PATTERN` removes an identical earlier entry; raises ValueError naming the
    bad entry (unknown syntax, or a removal that matches nothing)."""
    out: list[Pattern] = []
    for raw in (DEFAULT_PATTERNS if items is None else items):
        if isinstance(raw, str) and raw.strip().startswith("!"):
            p = _parse_pattern(raw.strip()[1:])
            keep = [q for q in out if q.text != p.text]
            if len(keep) == len(out):
                raise ValueError(f"protected path pattern {raw!r}: removes nothing "
                                 f"(no earlier {p.text!r})")
            out = keep
            continue
        p = _parse_pattern(raw)
        if all(q.text != p.text for q in out):
            out.append(p)
    return tuple(out)


def effective(policy: Policy) -> tuple[str, ...]:
    """The patterns a run of `policy` protects: DEFAULT_PATTERNS, then the
    profile's `protected:` entries (whose `!PATTERN` may remove a default),
    normalised.  `confine exec` and every exporter start from this list, so
    the artefacts cannot protect less than the launcher (or more).  Raises
    ValueError for a bad entry (policy.load has already refused those)."""
    return tuple(p.text for p in compile_patterns(list(DEFAULT_PATTERNS) + list(policy.protected)))
