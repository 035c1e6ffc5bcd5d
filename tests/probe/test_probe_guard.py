"""`confine probe` shows the name-guard bypass classes of issue 10 item 1
blocked: protected names in a directory named `x (deleted)`, deeper than
PATH_MAX, and in other case. Each attempt reports "possible" on the code before
the fix (the broker could not read the parent's path back and allowed the call);
the existing `later.envrc` beside them is the control that the guard is on."""
from __future__ import annotations

import os
import shutil

import pytest

from .conftest import Runner, make_workdir, needs_root, parse

NEW = ("later.deleted_suffix", "later.long_path", "later.case_variant")


@pytest.mark.parametrize("mode", ["root", "user"])
@pytest.mark.parametrize("layers", ["all", "landlock"])
def test_guard_bypass_names_are_blocked(test_user, confine_cmd, mode, layers):
    needs_root()
    wd = make_workdir(test_user)
    try:
        extra = ("--allow-degraded",) if layers == "landlock" else ()
        env = ("CONFINE_TEST_NO_NAMESPACES=1",) if layers == "landlock" else ()
        p = Runner(mode, test_user, confine_cmd)("probe", "-w", wd, "--only", "later", "--json",
                                                 *extra, env_extra=env, timeout=120)
        r = parse(p)
        a = {x["id"]: x for x in r["attempts"]}
        for k in NEW + ("later.envrc",):
            # "held": a new protected file is made outside the workdir (protect/held.py)
            assert (a[k]["result"], a[k]["mechanism"]) == ("blocked", "protected-path guard") \
                and a[k]["seen"] in ("EACCES", "held"), (k, a[k])
        assert a["later.envrc"]["seen"] == "held" and a["later.long_path"]["seen"] == "held"
        assert os.listdir(wd) == [], os.listdir(wd)          # the probe cleans up, deep ones too
    finally:
        shutil.rmtree(wd, ignore_errors=True)
