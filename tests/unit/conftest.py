"""The unit tier runs no confine and must not depend on this host's state:
whatever a test reaches through the state directories (paths.state_dir) lands in
a directory of its own, never in the account's ~/.local/state or root's
/var/lib/confine (issue 23 item 3)."""
from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _own_state_home(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path_factory.mktemp("state")))
