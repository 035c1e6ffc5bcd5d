"""`workdir_mode:` (policy/workdir_mode.py), without a kernel: the key's values and
errors, and what the plan mediates in each mode (the runs: tests/e2e/test_exclusive.py)."""
from __future__ import annotations

import dataclasses

import pytest
from test_plan import FULL, _ident

from confine.errors import ConfineError, ProfileError
from confine.plan import Protected, compile
from confine.policy import load as _load

GUARD = Protected(mount_plan=None, description={}, guard=True)


def _policy(tmp_path, text: str):
    wd, home, tmp = (tmp_path / n for n in ("wd", "home", "tmp"))
    for d in (wd, home, tmp):
        d.mkdir(exist_ok=True)
    prof = tmp_path / "p.yaml"
    prof.write_text(text)
    return _load.load(str(prof), workdir=str(wd), home=str(home), tmp=str(tmp)), str(home)


@pytest.mark.parametrize("mode,files", [("shared", True), ("exclusive", False)])
def test_the_mode_decides_file_mediation_only(tmp_path, mode, files):
    pol, home = _policy(tmp_path, f"extends: default\nworkdir_mode: {mode}\n")
    assert pol.workdir_mode == mode
    plan = compile(pol, ["true"], _ident(home), FULL, parent_env={}, protected=GUARD)
    assert plan.file_mediation is files and plan.exclusive is not files
    assert plan.unix_mediation and plan.mount_ns            # sockets and binds stay
    notes = " ".join(plan.notes)
    assert ("no undo in exclusive mode" in notes) is not files
    ioctls = {r.group for r in plan.seccomp_rules if r.syscall == "ioctl"}
    assert ("ioctl:FS_IOC_SETFLAGS" in ioctls) is not files


def test_default_is_shared(tmp_path):
    pol, _ = _policy(tmp_path, "extends: default\n")
    assert pol.workdir_mode == "shared"


def test_a_bad_value_names_the_line_and_key(tmp_path):
    with pytest.raises(ProfileError, match=r"p\.yaml:3: workdir_mode: 'private' is not one of "
                                           "shared, exclusive"):
        _policy(tmp_path, "extends: default\n\nworkdir_mode: private\n")


def test_exclusive_without_a_mount_namespace_is_refused_by_name(tmp_path):
    pol, home = _policy(tmp_path, "extends: default\nworkdir_mode: exclusive\n")
    with pytest.raises(ConfineError, match="exclusive workdir .* needs a mount namespace"):
        compile(pol, ["true"], _ident(home), dataclasses.replace(FULL, namespaces=False),
                parent_env={}, protected=GUARD)
