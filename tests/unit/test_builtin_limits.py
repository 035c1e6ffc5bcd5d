"""Every built-in profile limits what the agent can take from the host
(a profile without `limits:` would let `confine probe` find a fork bomb and an
unbounded file possible)."""
from __future__ import annotations

import pytest

from confine.policy import load as _load


@pytest.mark.parametrize("name", _load.builtin_names())
def test_builtin_profile_has_limits(name, tmp_path):
    for d in ("wd", "home", "tmp"):
        (tmp_path / d).mkdir()
    pol = _load.load(name, workdir=str(tmp_path / "wd"), home=str(tmp_path / "home"),
                     tmp=str(tmp_path / "tmp"))
    limits = pol.limits.to_dict()
    for key in ("processes", "memory", "file_size", "tmp_size", "shm_size", "open_files"):
        assert limits.get(key) not in (None, "unlimited"), (name, key, limits)
