"""Protected roots: every directory the agent may write that outlives the run and
that a person uses afterwards.

Threat: a file that runs later is as dangerous in a write grant outside the workdir
as in the workdir. With `--write ~/mirror.git` the agent creates `hooks/pre-receive`
in the bare mirror and the person's next `git push` to it runs the hook as the
person; in a granted sibling checkout an `.envrc` or `.git/hooks/post-checkout`
waits for the person's shell or git. So each such directory gets everything the
workdir gets, by the one code path that serves the workdir: the snapshot and the
read-only binds of its existing protected paths (snapshot.py), the name guard at
the call (guard.py: one `Guard` per root, joined by `Roots`), held files
(held.py) and the exit check (revert.py, gitdata.py).

A root is a path and its patterns. The workdir's are DEFAULT_PATTERNS plus the
profile's `protected:`; a write grant gets the same list, so its git directories
(a bare repository at the grant itself included: the walk takes a directory with
HEAD, objects and refs for one) have `hooks/` and `config` protected, and gitdata
checks their alternates and grafts. An agent's state directory (the profile's
`filesystem.state_roots:`, policy/stateroots.py) adds its own patterns to its
root's: the root that holds it gets them, anchored below it.

Not roots:
* the run's private TMPDIR: removed when the run ends, nobody uses it later (a grant
  that holds it, `--write /tmp`, is a root all the same: fail closed);
* the agent's own HOME (runtime/home.py): only later confined runs of the same
  profile and workdir use it, never the person's own tools;
* anything under /dev (the profile's ?/dev/shm: a private one in the mount
  namespace, never a place a person runs things from);
* a single file granted for writing: judged by name as before (the runlater list
  of the policy refuses files that run later).
Overlapping roots are one: the outer one wins (a grant inside the workdir is
already covered by the workdir's; a workdir inside a grant is covered by the
grant). A root that is a secret or a system directory was refused by the policy
loader before this is asked.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ..paths import is_under
from ..policy.patterns import effective
from ..record import dataclass

if TYPE_CHECKING:
    from ..policy.model import Policy

__all__ = ["Root", "roots_of", "NOT_ROOTS"]

# Top directories whose write grants are never protected roots (see above).
NOT_ROOTS = ("/dev",)


@dataclass(frozen=True)
class Root:
    path: str                      # real path of the directory
    patterns: tuple[str, ...]      # its protected-path patterns
    source: str                    # "workdir", "--write", or the profile line granting it
    workdir: bool = False          # the workdir lies in it (the run's first root)


def roots_of(policy: Policy) -> tuple[Root, ...]:
    """The run's protected roots, the one holding the workdir first, then the
    others in the order the policy grants them."""
    pats = effective(policy)
    tmp = os.path.realpath(policy.tmp)
    wd = os.path.realpath(policy.workdir)
    cands: list[tuple[str, str]] = [(wd, "workdir")]
    for g in policy.write:
        if g.source in ("workdir", "tmp"):
            continue
        real = os.path.realpath(g.path)
        if (not os.path.isdir(real) or is_under(real, tmp)
                or any(is_under(real, n) for n in NOT_ROOTS)):
            continue
        cands.append((real, g.source))
    kept: dict[str, str] = {}
    for path, source in cands:
        if any(is_under(path, k) for k in kept):
            continue
        for k in [k for k in kept if is_under(k, path)]:
            del kept[k]          # the outer one wins
        kept[path] = source
    out = [Root(p, pats + _state_patterns(policy, p), s, is_under(wd, p))
           for p, s in kept.items()]
    out.sort(key=lambda r: not r.workdir)
    return tuple(out)


def _state_patterns(policy: Policy, root: str) -> tuple[str, ...]:
    """The patterns of the state roots inside `root`, relative to it: an anchored
    one moves below the state root's place; an unanchored one matches at any depth,
    below that place too (it protects more, never less)."""
    out: list[str] = []
    for sr in policy.state_roots:
        if not is_under(sr.path, root):
            continue
        rel = os.path.relpath(sr.path, root)
        for t in sr.patterns:
            out.append(t if not t.startswith("/") or rel == "." else f"/{rel}{t}")
    return tuple(dict.fromkeys(out))
