"""`workdir_mode:` in a profile: whether anything outside uses the workdir while the agent runs.

shared (the default): the person's editor, git or direnv may open workdir files
while the agent runs, so a new protected name (a hook, `.envrc`, `.vscode/`)
must never exist there even for a moment: every file call that can make one is
mediated (protect/guard.py judges it at the call).

exclusive: the run declares that nothing outside uses the workdir until it ends
(a CI job, a container, a harness on a scratch checkout). File calls in the
workdir then run at native speed, unmediated; the read-only binds of what was
protected at start stay, and at exit every new protected name is moved to the
held files (protect/held.py) or the quarantine. Threat this accepts, and says
(`GIVES_UP`): anything outside that runs workdir files during the run runs
them unchecked. Where the read-only binds cannot be made (no mount namespace),
or another protected root needs the mediation, the mode is refused by name
(plan/compile.py, runtime/session.py).
"""
from __future__ import annotations

SHARED = "shared"
EXCLUSIVE = "exclusive"
MODES = (SHARED, EXCLUSIVE)
FLAG = "--exclusive-workdir"
KEY = "workdir_mode"

# What the mode gives up, for --dry-run, `check` and the docs (one place).
GIVES_UP = ("exclusive workdir: file calls in the workdir are not mediated; new protected "
            "names (hooks, .envrc, .vscode/, ...) may exist in the workdir while the agent "
            "runs and are moved to the held files or the quarantine only at exit: anything "
            "outside that runs workdir files during the run runs them unchecked; no undo in "
            "exclusive mode")


def problem(value: object) -> str | None:
    """Why `value` is not a workdir mode (None: it is one)."""
    if value in MODES:
        return None
    return f"{value!r} is not one of {', '.join(MODES)}"
