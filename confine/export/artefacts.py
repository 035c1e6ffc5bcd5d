"""The shipped policy files in apparmor/ and selinux/, generated from the default profile,
and confine/policy/_shipped.py (every built-in profile parsed: policy/ship.py).

    python -m confine.export.artefacts [REPO]      (scripts/gen-artefacts.sh)

tests/export checks that the files in the repository equal generate(), so a
change to the default profile or an exporter that is not regenerated fails.
"""
from __future__ import annotations

import os
import sys

from ..policy import ship
from . import apparmor, selinux, source

PROFILE = "default"


def generate() -> dict[str, str]:
    """Repository-relative path -> content."""
    policy = source.load_policy(PROFILE)
    cmd = f"confine export apparmor -p {PROFILE}"
    name = apparmor.profile_name(policy)
    out = {f"apparmor/{name}": apparmor.agent_profile(policy, command=cmd),
           f"apparmor/{apparmor.LAUNCHER}": apparmor.launcher_profile(command=cmd + " --part launcher"),
           "apparmor/tunables/confine": apparmor.tunables()}
    for rel, text in selinux.parts(policy, None, f"confine export selinux -p {PROFILE}").items():
        out[f"selinux/{rel}"] = text
    out["confine/policy/_shipped.py"] = ship.render()
    return out


def main(argv: list[str]) -> int:
    repo = argv[1] if len(argv) > 1 else os.getcwd()
    for rel, text in generate().items():
        path = os.path.join(repo, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
